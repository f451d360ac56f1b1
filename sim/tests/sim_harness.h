// Test harness: starts dpfsim as a subprocess (ports 0), reads its JSON ready line, and offers
// small HTTP helpers (httplib, OpenSSL-backed for https).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace simtest {

using json = nlohmann::json;

struct Resp {
  bool ok = false;  // false: transport error (reset, timeout, TLS failure)
  int status = 0;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string error;
  json j() const { return body.empty() ? json() : json::parse(body, nullptr, false); }
  std::string header(const std::string& k) const;
};

struct HttpOpts {
  std::string ca_file;
  std::string token;
  std::string accept;
  int timeout_ms = 10000;
};

Resp http(const std::string& base, const std::string& method, const std::string& path,
          const std::string& body = "", const std::string& content_type = "application/json",
          const HttpOpts& opts = {});

class SimProcess {
 public:
  // Starts dpfsim with --listen/--dpu-listen/--control-listen on port 0 plus extra args.
  static std::unique_ptr<SimProcess> start(const std::vector<std::string>& extra_args);
  ~SimProcess();
  std::string mgmt, dpu, control, ca_file;
  json ready;
  pid_t pid = -1;

  Resp ctl(const std::string& method, const std::string& path, const json& body = json());
  // Shortcuts against the Kubernetes endpoints.
  Resp m(const std::string& method, const std::string& path, const std::string& body = "",
         const std::string& ct = "application/json", const HttpOpts& o = {}) {
    return http(mgmt, method, path, body, ct, o);
  }
  Resp d(const std::string& method, const std::string& path, const std::string& body = "",
         const std::string& ct = "application/json", const HttpOpts& o = {}) {
    return http(dpu, method, path, body, ct, o);
  }
  // Reset to a clean state with n DPUs and all delays set to delay_ms.
  void reset(int dpus, int delay_ms = 0);
};

// Polls cond every 10 ms until it is true or timeout_ms elapses.
bool wait_until(const std::function<bool()>& cond, int timeout_ms = 5000);

// A shared simulator for a test binary (started on first use, plain HTTP, 4 DPUs).
SimProcess& shared_sim();

// Defined here (inline), not in sim_harness.cpp: a test file's own constants built from it (a
// Leases path) are then initialized after it, also when a unity unit holds no sim_harness.cpp.
inline const std::string kNs = "dpf-operator-system";
std::string dpuservice_path(const std::string& name = "");
json make_dpuservice(const std::string& name, const json& spec_overrides = json::object());

}  // namespace simtest
