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
  // kSyntax: the text is not JSON. The others are well-formed JSON whose
  // value the caller asked to refuse (see StrictJsonOptions).
  enum class Kind { kSyntax, kInexactNumber, kNulCharacter };

  std::size_t offset;  // byte offset where the problem was detected
  std::string path;    // JSON path where known (duplicates, depth, values), else "$"
  Kind kind = Kind::kSyntax;

  JsonSyntaxError(std::size_t offset, std::string path, const std::string& message,
                  Kind kind = Kind::kSyntax);
};

struct StrictJsonOptions {
  std::size_t max_depth = 64;
  // Refuse (kInexactNumber) any number whose value would change on the way
  // through the parsed representation (int64, uint64 or double, dumped in its
  // shortest form): 123456789012345678901234567890, 1e-400, 1e400.
  bool exact_numbers = false;
  // Refuse (kNulCharacter) strings and keys containing U+0000, which jsonb
  // and most C consumers cannot store.
  bool refuse_nul = false;
};

// True when the JSON number text `raw` and the JSON number text `shortest`
// denote the same decimal value (sign of zero ignored). Both must be valid
// JSON numbers.
bool same_json_number(std::string_view raw, std::string_view shortest);

// Parses like RFC 8259 but refuses what lenient parsers (and jsonb) silently
// accept: duplicate object keys, trailing data, invalid UTF-8, a byte order
// mark, and nesting deeper than `max_depth` containers. Key order is kept.
nlohmann::ordered_json parse_strict_json(std::string_view text, std::size_t max_depth = 64);
nlohmann::ordered_json parse_strict_json(std::string_view text, const StrictJsonOptions& options);

}  // namespace extsvc::core
