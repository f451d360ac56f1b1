#include "faults.h"

#include <stdexcept>

namespace dpfsim {

json FaultRule::to_json() const {
  json j{{"id", id},
         {"cluster", cluster.empty() ? "*" : cluster},
         {"verb", verb},
         {"path_regex", path_regex},
         {"action", action},
         {"status", status},
         {"count", count},
         {"probability", probability},
         {"latency_ms", latency_ms},
         {"hits", hits}};
  if (retry_after >= 0) j["retry_after"] = retry_after;
  if (!message.empty()) j["message"] = message;
  return j;
}

int Faults::add(const json& spec) {
  if (!spec.is_object()) throw std::invalid_argument("fault rule must be a JSON object");
  FaultRule r;
  r.cluster = spec.value("cluster", "");
  if (r.cluster == "*" || r.cluster == "any") r.cluster.clear();
  if (!r.cluster.empty() && r.cluster != "management" && r.cluster != "dpu")
    throw std::invalid_argument("cluster must be management, dpu or *");
  r.verb = spec.value("verb", "*");
  for (auto& c : r.verb) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::vector<std::string> verbs = {"*",    "GET", "LIST",  "WATCH",
                                                 "POST", "PUT", "PATCH", "DELETE"};
  bool ok = false;
  for (const auto& v : verbs)
    if (v == r.verb) ok = true;
  if (!ok)
    throw std::invalid_argument(
        "verb must be one of GET, LIST, WATCH, POST, PUT, PATCH, DELETE, *");
  r.path_regex = spec.value("path_regex", "");
  try {
    r.re = std::regex(r.path_regex.empty() ? std::string(".*") : r.path_regex);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(std::string("bad path_regex: ") + e.what());
  }
  r.action = spec.value("action", "status");
  if (r.action != "status" && r.action != "latency" && r.action != "hang" && r.action != "reset" &&
      r.action != "conflict")
    throw std::invalid_argument("action must be status, latency, hang, reset or conflict");
  r.status = spec.value("status", 503);
  if (r.status < 100 || r.status > 599)
    throw std::invalid_argument("status must be an HTTP status code");
  r.retry_after = spec.value("retry_after", -1);
  r.latency_ms = spec.value("latency_ms", r.action == "hang" ? 30000 : 0);
  r.count = spec.value("count", -1L);
  r.probability = spec.value("probability", 1.0);
  if (r.probability < 0 || r.probability > 1)
    throw std::invalid_argument("probability must be within [0, 1]");
  r.message = spec.value("message", "");
  std::lock_guard<std::mutex> l(mu_);
  r.id = next_id_++;
  rules_.push_back(r);
  return r.id;
}

void Faults::clear() {
  std::lock_guard<std::mutex> l(mu_);
  rules_.clear();
  prng_.reseed(seed_ ^ 0x9e3779b97f4a7c15ULL);
  epoch_.fetch_add(1);
}

bool Faults::remove(int id) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = rules_.begin(); it != rules_.end(); ++it)
    if (it->id == id) {
      rules_.erase(it);
      epoch_.fetch_add(1);
      return true;
    }
  return false;
}

json Faults::list() const {
  std::lock_guard<std::mutex> l(mu_);
  json arr = json::array();
  for (const auto& r : rules_) arr.push_back(r.to_json());
  return arr;
}

std::optional<FaultRule> Faults::match(const std::string& cluster, const std::string& verb,
                                       const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  if (rules_.empty()) return std::nullopt;
  bool is_write = verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "DELETE";
  for (auto& r : rules_) {
    if (r.count == 0) continue;
    if (!r.cluster.empty() && r.cluster != cluster) continue;
    if (r.verb != "*" && r.verb != verb) continue;
    if (r.action == "conflict" && !is_write) continue;
    if (!std::regex_search(path, r.re)) continue;
    if (r.probability < 1.0 && prng_.uniform() >= r.probability) continue;
    if (r.count > 0) --r.count;
    ++r.hits;
    return r;
  }
  return std::nullopt;
}

}  // namespace dpfsim
