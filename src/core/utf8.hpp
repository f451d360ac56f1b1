#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace extsvc::core {

// Byte offset of the first byte that does not start a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF, no truncation), or nullopt when the whole text is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// Length in bytes of the well-formed UTF-8 sequence that starts at byte i (1 to 4), or 0 when
// the byte at i starts none (or i is past the end). The one validator: every other UTF-8 check
// of the product is built on it.
std::size_t utf8_sequence_at(std::string_view text, std::size_t i);

// At most max_bytes of valid UTF-8 text, cut before a character that does not fit whole (a
// message cut for status_message must stay valid: the outcome is JSON, which nlohmann refuses to
// serialize with a broken sequence).
std::string utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace extsvc::core
