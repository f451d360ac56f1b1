#include "util.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cstdio>
#include <ctime>
#include <iomanip>
#include <sstream>

namespace dpfsim {

std::string rfc3339(std::chrono::system_clock::time_point tp) {
  std::time_t t = std::chrono::system_clock::to_time_t(tp);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string http_date(std::chrono::system_clock::time_point tp) {
  static const char* const kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::time_t t = std::chrono::system_clock::to_time_t(tp);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
           kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

std::string rfc3339_now() {
  return rfc3339(std::chrono::system_clock::now());
}

bool parse_rfc3339(const std::string& s, std::chrono::system_clock::time_point& out) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return false;
  out = std::chrono::system_clock::from_time_t(timegm(&tm));
  return true;
}

std::string human_duration(std::chrono::seconds d) {
  long long s = d.count();
  if (s < -1) return "<invalid>";
  if (s < 0) return "0s";
  char buf[64];
  if (s < 120) {
    snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 600) {
    long long m = s / 60, r = s % 60;
    if (r == 0)
      snprintf(buf, sizeof buf, "%lldm", m);
    else
      snprintf(buf, sizeof buf, "%lldm%llds", m, r);
  } else if (s < 3 * 3600) {
    snprintf(buf, sizeof buf, "%lldm", s / 60);
  } else if (s < 8 * 3600) {
    long long h = s / 3600, m = (s % 3600) / 60;
    if (m == 0)
      snprintf(buf, sizeof buf, "%lldh", h);
    else
      snprintf(buf, sizeof buf, "%lldh%lldm", h, m);
  } else if (s < 48 * 3600) {
    snprintf(buf, sizeof buf, "%lldh", s / 3600);
  } else if (s < 8 * 86400) {
    long long dd = s / 86400, h = (s % 86400) / 3600;
    if (h == 0)
      snprintf(buf, sizeof buf, "%lldd", dd);
    else
      snprintf(buf, sizeof buf, "%lldd%lldh", dd, h);
  } else if (s < 2 * 365 * 86400LL) {
    snprintf(buf, sizeof buf, "%lldd", s / 86400);
  } else {
    snprintf(buf, sizeof buf, "%lldy", s / (365 * 86400LL));
  }
  return buf;
}

void Prng::reseed(uint64_t seed) {
  std::lock_guard<std::mutex> l(mu_);
  gen_.seed(seed);
}

uint64_t Prng::next() {
  std::lock_guard<std::mutex> l(mu_);
  return gen_();
}

double Prng::uniform() {
  return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
}

std::string Prng::k8s_suffix(size_t n) {
  static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(alphabet[next() % 27]);
  return out;
}

std::string Prng::uuid() {
  uint64_t a = next(), b = next();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  char buf[40];
  snprintf(buf, sizeof buf, "%08llx-%04llx-%04llx-%04llx-%012llx",
           static_cast<unsigned long long>(a >> 32),
           static_cast<unsigned long long>((a >> 16) & 0xffff),
           static_cast<unsigned long long>(a & 0xffff), static_cast<unsigned long long>(b >> 48),
           static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

std::string safe_encode_hash(uint32_t h) {
  static const char alphanums[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string dec = std::to_string(h);
  std::string out;
  for (char c : dec) out.push_back(alphanums[static_cast<unsigned char>(c) % 27]);
  return out;
}

std::string sha256_hex(const std::string& s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha256(), nullptr);
  std::ostringstream os;
  for (unsigned int i = 0; i < len; ++i)
    os << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(md[i]);
  return os.str();
}

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string base64url_encode(const std::string& in) {
  std::string out;
  uint32_t val = 0;
  int bits = -6;
  for (unsigned char c : in) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      out.push_back(kB64[(val >> bits) & 0x3F]);
      bits -= 6;
    }
  }
  if (bits > -6) out.push_back(kB64[((val << 8) >> (bits + 8)) & 0x3F]);
  return out;
}

bool base64url_decode(const std::string& in, std::string& out) {
  int T[256];
  for (int& t : T) t = -1;
  for (int i = 0; i < 64; ++i) T[static_cast<unsigned char>(kB64[i])] = i;
  out.clear();
  uint32_t val = 0;
  int bits = -8;
  for (unsigned char c : in) {
    if (c == '=') break;
    if (T[c] == -1) return false;
    val = (val << 6) + static_cast<uint32_t>(T[c]);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool query_bool(const std::string& v) {
  return v == "1" || v == "t" || v == "T" || v == "TRUE" || v == "true" || v == "True";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

const json* jptr(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* p : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(p);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string jstr(const json& j, std::initializer_list<const char*> path, const std::string& def) {
  const json* p = jptr(j, path);
  if (p && p->is_string()) return p->get<std::string>();
  return def;
}

bool jbool(const json& j, std::initializer_list<const char*> path, bool def) {
  const json* p = jptr(j, path);
  if (p && p->is_boolean()) return p->get<bool>();
  return def;
}

}  // namespace dpfsim
