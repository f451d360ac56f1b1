// Shared state of one simulator process: store, faults, request log, auth, delays, DPU-cluster
// reachability.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "auth.h"
#include "faults.h"
#include "kill_points.h"
#include "request_log.h"
#include "store.h"
#include "util.h"
#include "watch_hub.h"

namespace dpfsim {

class ControllerManager;

// Controller delays in milliseconds (POST /delays; all 0 for fast tests).
struct Delays {
  std::atomic<int> label_propagation_ms{
      300};  // DPUDevice nodeLabels -> DPU (half) -> Node (other half)
  std::atomic<int> node_provisioning_ms{300};  // DPUDevice created -> DPU + Node appear
  std::atomic<int> dpuservice_sync_ms{
      100};  // DPUService spec change -> DaemonSet/ControllerRevision updated
  std::atomic<int> pod_ready_ms{300};         // Pod created -> Running + Ready
  std::atomic<int> pod_termination_ms{300};   // Pod deletionTimestamp -> gone
  std::atomic<int> dpuservice_ready_ms{200};  // DaemonSet healthy -> DPUService Ready=True
  std::atomic<int> finalizer_ms{300};  // DPU-cluster objects gone -> DPUService finalizer removed
  std::atomic<int> argo_refresh_ms{300};  // Application spec change -> Argo renders and syncs
  std::atomic<int> node_effect_ms{500};   // DPU phase "Node Effect" (applyOnLabelChange) lasts
  // A Node whose kubelet stopped reporting turns Ready=Unknown after this long: the node-lifecycle
  // controller's --node-monitor-grace-period (50 s since Kubernetes v1.32).
  std::atomic<int> node_grace_ms{50000};
  // DPF's DPUDevice controller patches the DPUDevice's status (observedGeneration, conditions)
  // this long after a change of its spec (fluxcd's patcher, WithStatusObservedGeneration).
  std::atomic<int> dpudevice_status_ms{50};
  std::atomic<uint64_t> seq{0};  // bumped on every change (pending timers re-checked)

  json to_json() const;
  // Applies the given keys; throws std::invalid_argument for unknown keys or bad values.
  void apply(const json& j);
  void set_all(int ms);
};

// Knobs for failure modes (control API); guarded by mu. seq changes on every write so the
// controllers notice.
struct Knobs {
  std::mutex mu;
  std::map<std::string, json> chart_faults;  // chart -> {"kind":"pull"|"sync","message":...}
  // chart -> properties (POST /charts): needs_privileged, ignores_labels, ignores_annotations,
  // ignores_node_selector, namespace, requests. See ChartProps (controller_manager.h).
  std::map<std::string, json> charts;
  std::map<std::string, std::string> pod_faults;  // node -> waiting reason
  // The one simulated DPUSet's dpuTemplate: {"nodeLabels":{…},"applyOnLabelChange":bool}.
  json dpuset = default_dpuset();
  // Written by the placement controller: the DPUSet's Ready condition (ClusterMetadataConflict).
  json dpuset_status = json::object();
  // Nodes whose kubelet stopped posting status (POST /nodes/<name>/not-ready), with when (Unix
  // milliseconds, wall clock).
  std::map<std::string, int64_t> silent_nodes;
  // DPFOperatorConfig.spec.security.privilegedPodEnforcement: true binds the privileged-pod
  // ValidatingAdmissionPolicy with Deny, false with Audit (nothing is denied).
  bool privileged_pod_enforcement = true;
  std::atomic<uint64_t> seq{0};
  static json default_dpuset() {
    return json{{"nodeLabels", json::object()}, {"applyOnLabelChange", false}};
  }
  void clear_charts() {
    std::lock_guard<std::mutex> l(mu);
    charts.clear();
    ++seq;
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu);
    chart_faults.clear();
    charts.clear();
    pod_faults.clear();
    dpuset = default_dpuset();
    dpuset_status = json::object();
    silent_nodes.clear();
    privileged_pod_enforcement = true;
    ++seq;
  }
};

struct SimContext {
  // Installs the DPU cluster's admission (admission.h) on the store's API writes.
  explicit SimContext(uint64_t seed_);

  uint64_t seed;
  Prng prng;  // names, uids (deterministic given --seed)
  Store store;
  Faults faults;
  KillPoints kill_points;
  RequestLog reqlog;
  WatchHub watches;
  ControllerManager* controllers = nullptr;  // set by main while the controllers run
  // Wakes the controller thread after a change it cannot observe through the store
  // (reachability, delays, knobs); set while the controllers run.
  std::function<void()> wake_controllers;
  TokenAuth auth;
  Delays delays;
  Knobs knobs;
  json initial_delays;
  int initial_dpus = 0;
  std::string initial_profile;  // --dpf-version (POST /profile changes the active one)
  json seed_file;               // parsed --seed-file contents (null if none)

  std::atomic<bool> dpu_reachable{true};
  std::atomic<int> dpu_unreachable_mode{0};  // 0: reset connections, 1: 503
  // Added to this host's clock in the Date header of every API response (both clusters): an API
  // server whose clock is off (POST /clock). Nothing else (object timestamps) moves.
  std::atomic<int64_t> clock_offset_ms{0};
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> reset_epoch{0};
  std::function<void()> request_shutdown;

  // Empties both clusters and re-seeds them (dpus < 0: startup count), ends open watches, clears
  // faults, kill points, counters, recent requests, restores delays, the watch config and
  // DPU-cluster reachability and the clock offset.
  void reset(int dpus);
  // After a change of reachability, delays or knobs.
  void poke_controllers() {
    if (wake_controllers) wake_controllers();
  }
};

}  // namespace dpfsim
