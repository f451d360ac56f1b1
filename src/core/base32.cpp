#include "core/base32.hpp"

#include <cstdint>

namespace extsvc::core {

std::string base32_lower(const unsigned char* data, std::size_t len) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string out;
  out.reserve((len * 8 + 4) / 5);
  std::uint32_t buffer = 0;
  int bits = 0;
  for (std::size_t i = 0; i < len; ++i) {
    buffer = (buffer << 8) | data[i];
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 0x1F];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 0x1F];
  return out;
}

}  // namespace extsvc::core
