// Fault injection rules for the Kubernetes endpoints (deterministic given --seed).
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "util.h"

namespace dpfsim {

struct FaultRule {
  int id = 0;
  std::string cluster;     // "" = both, "management", "dpu"
  std::string verb = "*";  // GET|LIST|WATCH|POST|PUT|PATCH|DELETE|*
  std::string path_regex;
  std::regex re;
  std::string action = "status";  // status|latency|hang|reset|conflict
  int status = 503;
  int retry_after = -1;
  int latency_ms = 0;
  long count = -1;  // remaining matching requests; -1 forever
  double probability = 1.0;
  std::string message;
  long hits = 0;

  json to_json() const;
};

class Faults {
 public:
  explicit Faults(uint64_t seed) : prng_(seed ^ 0x9e3779b97f4a7c15ULL), seed_(seed) {}
  // Parses and adds a rule; throws std::invalid_argument on bad input. Returns the rule id.
  int add(const json& spec);
  void clear();
  bool remove(int id);
  json list() const;
  // First matching rule that fires (consumes count / probability draw).
  std::optional<FaultRule> match(const std::string& cluster, const std::string& verb,
                                 const std::string& path);
  // Incremented on clear(): lets hanging requests give up early.
  uint64_t epoch() const { return epoch_.load(); }

 private:
  mutable std::mutex mu_;
  std::vector<FaultRule> rules_;
  int next_id_ = 1;
  Prng prng_;
  uint64_t seed_;
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace dpfsim
