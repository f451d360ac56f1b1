#include "core/semver.hpp"

#include <cstddef>

#include "core/ascii.hpp"

namespace extsvc::core {
namespace {

bool is_ident_char(char c) {
  return is_ascii_alnum(c) || c == '-';
}

bool is_numeric_identifier(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_ascii_digit(c)) return false;
  return s.size() == 1 || s[0] != '0';
}

// Dot-separated non-empty identifiers; `strict_numbers` forbids leading
// zeros in all-digit identifiers (required in prerelease, not in build).
bool is_identifier_list(std::string_view s, bool strict_numbers) {
  if (s.empty()) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    const auto id = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (id.empty()) return false;
    bool numeric = true;
    for (char c : id) {
      if (!is_ident_char(c)) return false;
      numeric = numeric && is_ascii_digit(c);
    }
    if (strict_numbers && numeric && !is_numeric_identifier(id)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

bool is_exact_semver(std::string_view v) {
  // Generous bound; no real chart version comes near it.
  if (v.empty() || v.size() > 256) return false;
  if (v.front() == 'v') v.remove_prefix(1);

  std::string_view build;
  if (const auto plus = v.find('+'); plus != std::string_view::npos) {
    build = v.substr(plus + 1);
    if (!is_identifier_list(build, false)) return false;
    v = v.substr(0, plus);
  }
  std::string_view pre;
  // The first "-" starts the prerelease; the core contains none.
  if (const auto dash = v.find('-'); dash != std::string_view::npos) {
    pre = v.substr(dash + 1);
    if (!is_identifier_list(pre, true)) return false;
    v = v.substr(0, dash);
  }
  int parts = 0;
  std::size_t start = 0;
  while (true) {
    const auto dot = v.find('.', start);
    const auto part = v.substr(start, dot == std::string_view::npos ? v.npos : dot - start);
    if (!is_numeric_identifier(part)) return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 3;
}

}  // namespace extsvc::core
