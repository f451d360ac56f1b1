#include "core/utf8.hpp"

namespace extsvc::core {

std::size_t utf8_sequence_at(std::string_view text, std::size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  if (i >= n) return 0;
  const unsigned char b = s[i];
  if (b < 0x80) return 1;
  // Table 3-7 of the Unicode standard: the second byte's range depends on
  // the lead byte, which is what excludes overlongs and surrogates.
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b == 0xE0) {
    len = 3;
    lo = 0xA0;
  } else if (b >= 0xE1 && b <= 0xEC) {
    len = 3;
  } else if (b == 0xED) {
    len = 3;
    hi = 0x9F;
  } else if (b >= 0xEE && b <= 0xEF) {
    len = 3;
  } else if (b == 0xF0) {
    len = 4;
    lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    len = 4;
  } else if (b == 0xF4) {
    len = 4;
    hi = 0x8F;
  } else {
    return 0;
  }
  if (i + 1 >= n || s[i + 1] < lo || s[i + 1] > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (i + k >= n || (s[i + k] & 0xC0) != 0x80) return 0;
  return len;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8_sequence_at(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

std::string utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;
  // back to the first byte of the character the cut falls in (continuation bytes are 10xxxxxx)
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut));
}

}  // namespace extsvc::core
