// Runs the simulated DPF and Kubernetes controllers on one thread, ticking every ~20 ms.
//
// Each tick (only when the store changed or a delay timer is pending) locks the store and runs:
//   placement   : DPUDevice -> DPU -> DPU-cluster Node label propagation (last-applied tracking)
//   dpuservice  : finalizer, serviceID, Argo Application, conditions, deletion
//   argo        : Application -> rendered DaemonSet in the DPU cluster (refresh lag), app status
//   daemonset   : DaemonSet -> ControllerRevisions + Pods
//   kubelet     : Pod Pending -> Running/Ready, Terminating -> gone
// until nothing changes (at most a few passes).
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "sim_context.h"

namespace dpfsim {

class ControllerManager {
 public:
  explicit ControllerManager(SimContext& ctx, int tick_ms = 20) : ctx_(ctx), tick_ms_(tick_ms) {}
  ~ControllerManager() { stop(); }
  void start();
  void stop();

  // ---- for controllers (controller thread, store lock held) ----
  SimContext& ctx() { return ctx_; }
  Store& store() { return ctx_.store; }
  SteadyClock::time_point now() const { return now_; }
  bool dpu_reachable() const { return dpu_reachable_; }
  // Starts a timer named key on first call; true once delay_ms have elapsed since then.
  // Timers not consulted during a tick are dropped (their condition went away).
  bool due(const std::string& key, int delay_ms);
  void clear(const std::string& key) { timers_.erase(key); }
  std::string next_pod_ip();

 private:
  void run();
  void tick();

  SimContext& ctx_;
  int tick_ms_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  SteadyClock::time_point now_{};
  bool dpu_reachable_ = true;
  bool last_reachable_ = true;
  uint64_t last_seq_ = ~0ULL;
  uint64_t last_reset_epoch_ = 0;
  uint64_t tick_no_ = 0;
  uint32_t pod_ip_counter_ = 0;
  struct Timer {
    SteadyClock::time_point start;
    uint64_t touched;
  };
  std::map<std::string, Timer> timers_;
};

void reconcile_placement(ControllerManager& cm);
void reconcile_dpuservices(ControllerManager& cm);
void reconcile_applications(ControllerManager& cm);
void reconcile_daemonsets(ControllerManager& cm);
void reconcile_kubelet(ControllerManager& cm);

// Shared helpers.
bool is_terminating(const json& obj);
bool has_finalizer(const json& obj, const std::string& f);
json string_map(const json* j);  // object of strings ({} when absent)
std::string dpuservice_service_id(const json& svc);
std::string dpuservice_application_name(const json& svc);  // <dpuCluster>-<dpuService>
// Helm naming of the reference chart (_helpers.tpl "name"/"fullname").
struct ChartNames {
  std::string name, fullname;
};
ChartNames chart_names(const std::string& release, const std::string& chart, const json& values);
std::string helm_chart_label(const std::string& chart, const std::string& version);
// DPF's Helm values for the Application: helmChart.values deep-merged with
// {"serviceDaemonSet": spec.serviceDaemonSet (+ svc.dpu.nvidia.com/service when inject)}, DPF wins.
json dpf_values(const json& svc, const std::string& service_id, bool inject);
std::string argo_repo_url(const std::string& repo);  // oci:// stripped
// What the chart renders for an Application (metadata + spec, no status).
json render_chart_daemonset(const json& app, bool privileged_container = false);
std::string template_hash(const json& pod_template);

}  // namespace dpfsim
