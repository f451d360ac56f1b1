// ASCII character classes of Kubernetes names, URLs and versions. Locale-free on purpose:
// std::isalnum and friends follow the C locale of the process, and a PostgreSQL backend may
// run under any locale; these rules are ASCII by definition (RFC 1123, RFC 3986, SemVer).
#pragma once

#include <string_view>

namespace extsvc::core {

constexpr bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}
constexpr bool is_ascii_lower(char c) {
  return c >= 'a' && c <= 'z';
}
constexpr bool is_ascii_alpha(char c) {
  return is_ascii_lower(c) || (c >= 'A' && c <= 'Z');
}
constexpr bool is_ascii_alnum(char c) {
  return is_ascii_alpha(c) || is_ascii_digit(c);
}
// a character of an RFC 1123 label (lower case letters and digits; '-' not included)
constexpr bool is_lower_alnum(char c) {
  return is_ascii_lower(c) || is_ascii_digit(c);
}
constexpr bool is_ascii_hex(char c) {
  return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// a non-empty run of ASCII digits
constexpr bool all_ascii_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_ascii_digit(c)) return false;
  return true;
}

}  // namespace extsvc::core
