// Small helpers shared by the simulator: time, randomness, hashing, encoding.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace dpfsim {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;

// RFC 3339 UTC timestamp with second precision, e.g. 2024-05-01T10:00:00Z.
std::string rfc3339_now();
// RFC 7231 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the HTTP Date header's form.
std::string http_date(std::chrono::system_clock::time_point tp);
std::string rfc3339(std::chrono::system_clock::time_point tp);
// Parses an RFC 3339 UTC timestamp; returns false when it cannot.
bool parse_rfc3339(const std::string& s, std::chrono::system_clock::time_point& out);
// Kubernetes-style human duration ("5s", "3m2s", "4h", "2d3h").
std::string human_duration(std::chrono::seconds d);

// Deterministic, thread-safe pseudo random generator.
class Prng {
 public:
  explicit Prng(uint64_t seed = 1) : gen_(seed) {}
  void reseed(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)
  // Kubernetes' rand.String alphabet ("bcdfghjklmnpqrstvwxz2456789").
  std::string k8s_suffix(size_t n);
  std::string uuid();

 private:
  std::mutex mu_;
  std::mt19937_64 gen_;
};

uint32_t fnv1a32(const std::string& s);
// Kubernetes' rand.SafeEncodeString of the decimal fnv32 value.
std::string safe_encode_hash(uint32_t h);
std::string sha256_hex(const std::string& s);

std::string base64url_encode(const std::string& in);
bool base64url_decode(const std::string& in, std::string& out);

std::string trim(const std::string& s);
std::vector<std::string> split(const std::string& s, char sep);
bool starts_with(const std::string& s, const std::string& prefix);
// A boolean query parameter as the apiserver reads it (Go's strconv.ParseBool: 1, t, T, TRUE,
// true, True); anything else is false.
bool query_bool(const std::string& v);

// JSON helpers.
const json* jptr(const json& j, std::initializer_list<const char*> path);
std::string jstr(const json& j, std::initializer_list<const char*> path,
                 const std::string& def = "");
bool jbool(const json& j, std::initializer_list<const char*> path, bool def = false);

}  // namespace dpfsim
