#include "kill_points.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dpfsim {

namespace {

// Dead for our purpose: gone, or a zombie waiting for its parent (it runs no more code).
bool dead(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  const auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return true;
  const char state = s[close + 2];
  return state == 'Z' || state == 'X' || state == 'x';
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

json KillPoint::to_json() const {
  json j{{"id", id},     {"name", name},
         {"pids", pids}, {"cluster", cluster.empty() ? "*" : cluster},
         {"verb", verb}, {"path_regex", path_regex},
         {"nth", nth},   {"when", when},
         {"seen", seen}, {"fired", fired}};
  if (fired) {
    j["fired_request"] = fired_request;
    j["fired_at"] = fired_at;
    j["fired_seq"] = fired_seq;
    j["remote_port"] = remote_port;
    j["killed"] = killed;
    if (!errors.empty()) j["errors"] = errors;
  }
  return j;
}

int KillPoints::add(const json& spec) {
  if (!spec.is_object()) throw std::invalid_argument("kill point must be a JSON object");
  KillPoint k;
  k.name = spec.value("name", "");
  std::vector<json> given;
  if (spec.contains("pid")) given.push_back(spec["pid"]);
  if (spec.contains("pids")) {
    if (!spec["pids"].is_array()) throw std::invalid_argument("pids must be an array of pids");
    for (const auto& p : spec["pids"]) given.push_back(p);
  }
  if (given.empty()) throw std::invalid_argument("pid (or pids) is required");
  for (const auto& p : given) {
    if (!p.is_number_integer()) throw std::invalid_argument("a pid must be an integer");
    const long long v = p.get<long long>();
    if (v <= 1 || v > 0x3fffffff) throw std::invalid_argument("pid " + p.dump() + " is refused");
    const auto pid = static_cast<pid_t>(v);
    if (pid == getpid()) throw std::invalid_argument("pid " + p.dump() + " is dpfsim itself");
    if (::kill(pid, 0) != 0 && errno == ESRCH)
      throw std::invalid_argument("pid " + p.dump() + ": no such process");
    k.pids.push_back(pid);
  }
  k.cluster = spec.value("cluster", "");
  if (k.cluster == "*" || k.cluster == "any") k.cluster.clear();
  if (!k.cluster.empty() && k.cluster != "management" && k.cluster != "dpu")
    throw std::invalid_argument("cluster must be management, dpu or *");
  k.verb = spec.value("verb", "*");
  for (auto& c : k.verb) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::vector<std::string> verbs = {"*",    "GET", "LIST",  "WATCH",
                                                 "POST", "PUT", "PATCH", "DELETE"};
  bool ok = false;
  for (const auto& v : verbs)
    if (v == k.verb) ok = true;
  if (!ok)
    throw std::invalid_argument(
        "verb must be one of GET, LIST, WATCH, POST, PUT, PATCH, DELETE, *");
  k.path_regex = spec.value("path_regex", "");
  try {
    k.re = std::regex(k.path_regex.empty() ? std::string(".*") : k.path_regex);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(std::string("bad path_regex: ") + e.what());
  }
  if (spec.contains("nth") && !spec["nth"].is_number_integer())
    throw std::invalid_argument("nth must be an integer >= 1");
  k.nth = spec.value("nth", 1L);
  if (k.nth < 1) throw std::invalid_argument("nth must be an integer >= 1");
  k.when = spec.value("when", "before");
  if (k.when != "before" && k.when != "after")
    throw std::invalid_argument("when must be \"before\" or \"after\"");
  std::lock_guard<std::mutex> l(mu_);
  k.id = next_id_++;
  points_.push_back(k);
  return k.id;
}

void KillPoints::clear() {
  std::lock_guard<std::mutex> l(mu_);
  points_.clear();
}

bool KillPoints::remove(int id) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = points_.begin(); it != points_.end(); ++it)
    if (it->id == id) {
      points_.erase(it);
      return true;
    }
  return false;
}

json KillPoints::list() const {
  std::lock_guard<std::mutex> l(mu_);
  json arr = json::array();
  for (const auto& k : points_) arr.push_back(k.to_json());
  return arr;
}

std::optional<KillPoint> KillPoints::match(const std::string& cluster, const std::string& verb,
                                           const std::string& method, const std::string& path,
                                           uint64_t seq, int remote_port) {
  std::lock_guard<std::mutex> l(mu_);
  std::optional<KillPoint> hit;
  for (auto& k : points_) {
    if (k.matched) continue;
    if (!k.cluster.empty() && k.cluster != cluster) continue;
    if (k.verb != "*" && k.verb != verb) continue;
    if (!std::regex_search(path, k.re)) continue;
    // Every armed point counts the request; it fires at most one (the lowest id); a point whose
    // count was reached by a request another point took fires on its next match.
    if (++k.seen < k.nth || hit) continue;
    k.matched = true;
    k.fired_request = method + " " + path;
    k.fired_seq = seq;
    k.remote_port = remote_port;
    k.fired_at = epoch_seconds();
    hit = k;
  }
  return hit;
}

void KillPoints::fire(const KillPoint& kp) {
  json killed = json::array(), errors = json::array();
  std::vector<pid_t> sent;
  for (pid_t pid : kp.pids) {
    if (::kill(pid, SIGKILL) == 0) {
      sent.push_back(pid);
    } else {
      errors.push_back("kill(" + std::to_string(pid) + "): " + std::strerror(errno));
    }
  }
  // SIGKILL is delivered before the target runs another instruction of its own, but wait anyway
  // so that the connection is dropped (by the caller) only once nothing can act on it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (pid_t pid : sent) {
    while (!dead(pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (dead(pid))
      killed.push_back(pid);
    else
      errors.push_back("pid " + std::to_string(pid) + " still alive 2 s after SIGKILL");
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto& k : points_)
    if (k.id == kp.id) {
      k.killed = killed;
      k.errors = errors;
      k.fired = true;
    }
}

}  // namespace dpfsim
