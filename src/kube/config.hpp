// Cluster connection settings and kubeconfig loading for the Kubernetes REST client.
//
// Nothing in this header throws. Error texts returned from validate() and load_kubeconfig() never
// contain secret material (tokens, key data); they may contain file paths and names.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <variant>

namespace extsvc::kube {

struct ClusterConfig {
  std::string server;   // https://host:port[/prefix] or http://host:port[/prefix]
  std::string ca_file;  // PEM path; empty (and no ca_data) = system roots for https
  std::string ca_data;  // PEM contents (kubeconfig certificate-authority-data, decoded)
  // Bearer token file. Re-read when its mtime/size changes (checked at most once per second) and
  // always after a 401. Takes precedence over `token` when both are set.
  std::string token_file;
  std::string token;  // static bearer token (kubeconfig `token`)
  std::string client_cert_file, client_key_file, client_cert_data, client_key_data;  // mTLS
  // For testing only. Refused together with ca_file/ca_data (see validate()).
  bool insecure_skip_verify = false;
  double qps = 50;  // client-side token bucket; qps <= 0 disables throttling
  int burst = 100;
  long connect_timeout_ms = 5000, timeout_ms = 30000;  // 0 = no limit
  std::string user_agent = "nico-extsvc/0.1";
  // Response body limits (decoded bytes). A larger body ends the call with
  // Error{kOther, status, "ResponseTooLarge"} instead of growing the worker's memory.
  // max_response_bytes bounds each single-object response (get/create/patch/put/del);
  // max_list_bytes bounds the sum of all pages of one list() call. 0 = the built-in hard
  // limit (512 MiB).
  size_t max_response_bytes = size_t{4} << 20;
  size_t max_list_bytes = size_t{64} << 20;
  // A bearer token is never sent over plain http:// unless this is set (test clusters only):
  // validate() refuses http:// together with token/token_file otherwise.
  bool allow_insecure_http = false;
};

// What validate()'s messages call the settings. The defaults are the client's own words; a caller
// whose configuration comes from named settings (the extension's extsvc.* GUCs) passes their
// names, so the operator reads which setting to fix ("extsvc.kube_server must start with ...").
struct ConfigNames {
  std::string server = "server";
  std::string ca_file = "a root certificates file";
  std::string token_file = "a bearer token";
  std::string insecure = "the insecure flag";
  std::string allow_insecure_http = "explicitly allow insecure HTTP";
  std::string qps = "qps", burst = "burst";
  std::string timeouts = "timeouts";
};

// Returns an error text, or nullopt when the configuration is usable.
std::optional<std::string> validate(const ClusterConfig& cfg, const ConfigNames& names = {});

// Loads a kubeconfig file (YAML via yaml-cpp, or JSON); exec and auth-provider plugins are
// refused. `context` overrides current-context. Relative file references resolve against the
// kubeconfig's directory. On success the result is also validate()d, except for the
// http://-with-token check, which depends on the caller's allow_insecure_http: validate() the
// final configuration. Returns ClusterConfig or an error text (never containing secret values).
std::variant<ClusterConfig, std::string> load_kubeconfig(const std::string& path,
                                                         const std::string& context = "");

}  // namespace extsvc::kube
