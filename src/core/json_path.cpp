#include "core/json_path.hpp"

#include <nlohmann/json.hpp>

namespace extsvc::core {
namespace {

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

}  // namespace

std::string json_path_member(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (is_identifier(key)) {
    out += '.';
    out += key;
  } else {
    // dump() escapes quotes and control characters; replace mode keeps a
    // path printable even for keys that slipped past UTF-8 checks.
    out += '[';
    out += nlohmann::json(std::string(key))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
