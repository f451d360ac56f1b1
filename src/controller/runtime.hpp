// The worker's C++ runtime: settings -> Kubernetes clients -> reconcilers.
// Built from the GUCs by the PostgreSQL layer and rebuilt on SIGHUP; nothing
// here knows PostgreSQL.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/cluster_cache.hpp"
#include "core/dpf_api_level.hpp"
#include "kube/client.hpp"
#include "kube/config.hpp"
#include "kube/observer.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/drift_detector.hpp"
#include "reconcile/service_reconciler.hpp"

namespace extsvc::controller {

struct ClusterSettings {
  std::string kubeconfig, server, ca_file, token_file;
  bool empty() const { return kubeconfig.empty() && server.empty(); }
  bool operator==(const ClusterSettings&) const = default;
};

struct Settings {
  ClusterSettings management;
  ClusterSettings dpu;
  bool insecure = false;
  std::string ns;
  double qps = 50;
  int burst = 100;
  long connect_timeout_ms = 5000, timeout_ms = 30000;
  size_t max_response_bytes = kube::ClusterConfig{}.max_response_bytes;
  size_t max_list_bytes = kube::ClusterConfig{}.max_list_bytes;
  bool allow_insecure_http = false;
  int watch_timeout_s = 300;  // each watch asks for [this, 2 x this) seconds
  // issue 25: the site this database writes for (nico/site on every DPUService it renders; empty:
  // the worker writes nothing) and the User-Agent of every request,
  // "nico_extsvc/<version> (<holderIdentity>)"
  std::string site_id;
  std::string user_agent;
  // a reload that changes none of these keeps the runtime, its clients and its caches
  bool operator==(const Settings&) const = default;
};

// What the host process lends the clients: a request observer (metrics) and the budget their
// calls run under between passes (kube/budget.hpp: how to wait, when to stop, and the site's
// write fence of issue 25, consulted right before every write is sent, after the clients' rate
// limiter, whoever makes the call; unfenced for the lease process, whose only writes are the
// Lease itself). A pass runs under its own budget, the row lease's deadline added.
struct Hooks {
  kube::RequestObserver* observer = nullptr;
  kube::Budget budget;
};

class Runtime {
 public:
  Runtime(const Settings& s, const Hooks& hooks);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  bool configured() const { return management_ != nullptr; }
  const std::string& config_error() const { return config_error_; }
  // Why the DPU cluster's settings are not usable ("" when they are, or none are set).
  const std::string& dpu_config_error() const { return dpu_config_error_; }
  const std::string& ns() const { return ns_; }
  const std::string& site_id() const { return site_id_; }

  kube::Client& management() { return *management_; }
  reconcile::ServiceReconciler& services() { return *reconciler_; }
  // A fresh reconciler per batch: with the watch caches it reads them; without, it reads the
  // API (and keeps what it listed for one batch).
  std::unique_ptr<reconcile::DpuReconciler> dpu_reconciler();

  // The informers (issue 11): started by the one worker that observes for all (the watcher
  // slot); null elsewhere and until started.
  void start_watching();
  ClusterCache* cache() { return cache_.get(); }

  // Writes the clients did not send because a fence closed while they waited for the rate
  // limiter (a pass that sees this count grow lost its lease mid-call).
  uint64_t fenced_writes() const;

  uint64_t requests() const;
  uint64_t errors() const;

  // Issue 23, part 5: the DPF API the management cluster serves (its CRDs' OpenAPI documents),
  // read at the start and again after every reconnect (a new TCP connection of the management
  // client), at most every 5 s. True when this call read them.
  bool check_dpf_api();
  const core::DpfApiLevel& dpf_api() const { return dpf_api_; }

 private:
  std::optional<kube::ClusterConfig> cluster_config(const Settings& s, const ClusterSettings& c);

  std::string ns_;
  std::string site_id_;
  int watch_timeout_s_ = 300;
  std::string config_error_;
  std::string dpu_config_error_;
  std::unique_ptr<kube::Client> management_;
  std::unique_ptr<kube::Client> dpu_;
  std::unique_ptr<reconcile::ServiceReconciler> reconciler_;
  // after the clients: destroyed first; while it lives the clients' calls run on its multi
  std::unique_ptr<ClusterCache> cache_;
  core::DpfApiLevel dpf_api_;
  uint64_t connects_at_check_ = 0;
  std::chrono::steady_clock::time_point next_api_check_{};
  // the check is retried every 5 s while the API fails: one WARNING per outage, not per retry
  bool api_check_warned_ = false;
};

}  // namespace extsvc::controller
