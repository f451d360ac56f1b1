#include "core/json_path.hpp"

#include <nlohmann/json.hpp>

#include "core/ascii.hpp"

namespace extsvc::core {
namespace {

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = is_ascii_alpha(c) || c == '_';
    const bool digit = is_ascii_digit(c);
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// Paths end up in error DETAIL lines and logs; a key is tenant text of any
// length, so only a prefix of a long key is quoted (cut on a UTF-8 boundary).
std::string_view key_prefix(std::string_view key) {
  if (key.size() <= kMaxPathKeyBytes) return key;
  std::size_t n = kMaxPathKeyBytes;
  while (n > 0 && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return key.substr(0, n);
}

}  // namespace

std::string json_path_member(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (is_identifier(key) && key.size() <= kMaxPathKeyBytes) {
    out += '.';
    out += key;
  } else {
    // dump() escapes quotes and control characters; replace mode keeps a
    // path printable even for keys that slipped past UTF-8 checks.
    out += '[';
    out += nlohmann::json(std::string(key_prefix(key)))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (key.size() > kMaxPathKeyBytes) out += "...";  // outside the quotes: unambiguous
    out += ']';
  }
  return out;
}

std::string json_path_index(std::string_view parent, std::size_t index) {
  std::string out(parent);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

}  // namespace extsvc::core
