#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace extsvc::core {

// Byte offset of the first byte that does not start a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF, no truncation), or nullopt when the whole text is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

}  // namespace extsvc::core
