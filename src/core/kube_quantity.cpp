#include "core/kube_quantity.hpp"

#include <array>
#include <cstddef>

#include "core/ascii.hpp"

namespace extsvc::core {
namespace {

std::size_t skip_digits(std::string_view s, std::size_t i) {
  while (i < s.size() && is_ascii_digit(s[i])) ++i;
  return i;
}

bool is_suffix(std::string_view suffix) {
  static constexpr std::array<std::string_view, 15> kSuffixes = {
      "",  "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",  // binary SI
      "n", "u",  "m",  "k",  "M",  "G",  "T",  "P"};
  for (auto s : kSuffixes)
    if (suffix == s) return true;
  if (suffix == "E") return true;
  // Decimal exponent: e/E then an optionally signed integer.
  if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    std::size_t i = 1;
    if (suffix[i] == '+' || suffix[i] == '-') ++i;
    return i < suffix.size() && skip_digits(suffix, i) == suffix.size();
  }
  return false;
}

}  // namespace

bool is_nonnegative_quantity(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  std::size_t i = 0;
  if (s[i] == '+') {
    ++i;
  } else if (s[i] == '-') {
    return false;
  }
  const std::size_t int_start = i;
  i = skip_digits(s, i);
  std::size_t digits = i - int_start;
  if (i < s.size() && s[i] == '.') {
    const std::size_t frac_start = ++i;
    i = skip_digits(s, i);
    digits += i - frac_start;
  }
  if (digits == 0) return false;
  return is_suffix(s.substr(i));
}

}  // namespace extsvc::core
