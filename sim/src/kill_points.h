// Kill points (control API /kill-points): on the Nth Kubernetes request that matches a rule,
// dpfsim sends SIGKILL to the process ids the rule names and drops the connection, either
// before the request is applied ("before") or after it was applied but before the response is
// sent ("after"). Used by the crash-consistency sweep (test/e2e/test_kill_sweep.py): the client
// dies exactly at a chosen write and never learns its outcome.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "util.h"

namespace dpfsim {

struct KillPoint {
  int id = 0;
  std::string name;         // free text, echoed in GET (the sweep's point name)
  std::vector<pid_t> pids;  // signalled, and nothing else
  std::string cluster;      // "" = both, "management", "dpu"
  std::string verb = "*";   // GET|LIST|WATCH|POST|PUT|PATCH|DELETE|*
  std::string path_regex;
  std::regex re;
  long nth = 1;                 // fires on the nth matching request
  std::string when = "before";  // before|after
  long seen = 0;                // matching requests so far (the firing one included)
  bool matched = false;         // its request arrived: it never fires again
  bool fired = false;           // and the kill is done (killed/errors are final)
  // Filled in when it fired.
  std::string fired_request;  // "PATCH /apis/..."
  uint64_t fired_seq = 0;     // its seq in the request log (GET /requests)
  int remote_port = 0;        // the client's source port (its connection)
  double fired_at = 0;        // seconds since the Unix epoch (wall clock)
  json killed = json::array();
  json errors = json::array();

  json to_json() const;
};

class KillPoints {
 public:
  // Parses and adds a point; throws std::invalid_argument on bad input (a pid that does not
  // exist, or is dpfsim itself or 1, is refused). Returns its id.
  int add(const json& spec);
  void clear();
  bool remove(int id);
  json list() const;
  // Counts the request against every armed point it matches; returns the point that fires on it
  // (marked fired: it never fires again).
  std::optional<KillPoint> match(const std::string& cluster, const std::string& verb,
                                 const std::string& method, const std::string& path, uint64_t seq,
                                 int remote_port);
  // SIGKILLs the point's pids, waits (up to 2 s) until each is dead or a zombie, and records the
  // result on the point.
  void fire(const KillPoint& kp);

 private:
  mutable std::mutex mu_;
  std::vector<KillPoint> points_;
  int next_id_ = 1;
};

}  // namespace dpfsim
