// Text taken from a response before it is kept: bounded valid UTF-8, the Retry-After header, and
// base64 (kubeconfig data fields).
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/utf8.hpp"
#include "kube/detail/internal.hpp"
#include "kube/error.hpp"

namespace extsvc::kube::detail {

std::string sanitize_utf8(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  size_t i = 0;
  bool truncated = false;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = core::utf8_sequence_at(s, i);
    const bool valid = len != 0;
    std::string piece;
    if (!valid) {
      piece = "?";
      len = 1;
    } else if (len == 1) {
      if (c == '\n' || c == '\r')
        piece = " ";
      else if (c < 0x20 && c != '\t')
        piece = "?";
      else if (c == 0x7F)
        piece = "?";
      else
        piece = std::string(1, static_cast<char>(c));
    } else {
      piece = std::string(s.substr(i, len));
    }
    if (out.size() + piece.size() > max_bytes) {
      truncated = true;
      break;
    }
    out += piece;
    i += len;
  }
  if (truncated && max_bytes >= 3) {
    // Make room for "..." without splitting a UTF-8 sequence.
    while (out.size() + 3 > max_bytes) {
      size_t cut = out.size() - 1;
      while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
      out.resize(cut);
    }
    out += "...";
  }
  return out;
}

std::optional<double> parse_retry_after(std::string_view value, std::time_t now) {
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
    value.remove_prefix(1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
    value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  std::string s(value);
  if (std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.';
      })) {
    errno = 0;
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0') return std::nullopt;
    // ERANGE (e.g. 400 digits) is just "very large": clamp like any other large value.
    if (errno == ERANGE && d < 1) return std::nullopt;
    return std::clamp(d, 0.0, kMaxRetryAfterSeconds);
  }
  std::time_t t = curl_getdate(s.c_str(), nullptr);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::clamp(static_cast<double>(t) - static_cast<double>(now), 0.0, kMaxRetryAfterSeconds);
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  size_t symbols = 0;
  for (char c : in) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0) return std::nullopt;  // data after padding
    int v = val(c);
    if (v < 0) return std::nullopt;
    ++symbols;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (pad > 2 || symbols % 4 == 1) return std::nullopt;
  if (pad > 0 && (symbols + pad) % 4 != 0) return std::nullopt;
  return out;
}

}  // namespace extsvc::kube::detail
