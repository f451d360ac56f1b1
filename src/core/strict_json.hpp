#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace extsvc::core {

// Refusal of text that is not exactly one well-formed JSON value. The message
// is short and never quotes input, because input may carry secrets.
struct JsonSyntaxError : std::runtime_error {
  std::size_t offset;  // byte offset where the problem was detected
  std::string path;    // JSON path where known (duplicates, depth), else "$"

  JsonSyntaxError(std::size_t offset, std::string path, const std::string& message);
};

// Parses like RFC 8259 but refuses what lenient parsers (and jsonb) silently
// accept: duplicate object keys, trailing data, invalid UTF-8, a byte order
// mark, and nesting deeper than `max_depth` containers. Key order is kept.
nlohmann::ordered_json parse_strict_json(std::string_view text, std::size_t max_depth = 64);

}  // namespace extsvc::core
