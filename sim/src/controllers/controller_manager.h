// Runs the simulated DPF and Kubernetes controllers on one thread, from work queues.
//
// The manager is the store's observer: every change (from the API or from a controller) is routed
// by each controller's on_event() to the work items it affects (keys of the objects to look at
// again), as an informer's event handlers feed a workqueue. The controller thread wakes when work
// is queued or a delay timer is due, at most once per tick, and reconciles queued items in
// controller order:
//   placement   : DPUDevice -> DPU -> DPU-cluster Node label propagation (last-applied tracking)
//   dpudevice   : DPUDevice status (observedGeneration) and finalizer, as DPF's controller writes
//   dpuservice  : finalizer, serviceID, Argo Application, conditions, deletion
//   argo        : Application -> rendered DaemonSet in the DPU cluster (refresh lag), app status
//   daemonset   : DaemonSet -> ControllerRevisions + Pods (unbound), per node, incremental status
//   scheduler   : unbound Pods -> bound (taints, affinity, resources) or Pending Unschedulable
//   kubelet     : Pod Pending -> Running/Ready, Terminating -> gone
// It holds the store mutex only for chunks of at most step_budget (2 ms of work), so API requests
// interleave with a large batch; the longest hold is measured (GET /controllers).
// A delay timer belongs to the item that consulted it; when the item is reconciled again and does
// not consult a timer any more, the timer is dropped (its condition went away).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sim_context.h"

namespace dpfsim {

class ControllerManager;

class Controller {
 public:
  virtual ~Controller() = default;
  virtual const char* name() const = 0;
  // Routes a store change to the items it affects. Store mutex held; any thread.
  virtual void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                        const std::string& key, const ObjPtr& obj, const ObjPtr& prev) = 0;
  // Both clusters were emptied: drop derived state.
  virtual void on_clear() {}
  // Reconciles one item. Controller thread, store mutex held.
  virtual void reconcile(ControllerManager& cm, const std::string& item) = 0;
  // Queues every item a full pass would look at (POST /controllers/resync).
  virtual void enqueue_all(ControllerManager& cm) = 0;
  // The DPU cluster became reachable or unreachable.
  virtual void on_reachability(ControllerManager&) {}
  // Pod faults, chart faults or chart properties changed.
  virtual void on_knobs(ControllerManager&) {}
};

class ControllerManager : public StoreObserver {
 public:
  enum Kind {
    kPlacement = 0,
    kDpuDevice,
    kDpuService,
    kArgo,
    kDaemonSet,
    kScheduler,
    kKubelet,
    kKinds
  };

  explicit ControllerManager(SimContext& ctx, int tick_ms = 20);
  ~ControllerManager() override;
  // Becomes the store's observer (replaying the current objects) and starts the thread.
  void start();
  void stop();

  // StoreObserver (store mutex held).
  void on_event(const ResourceInfo& ri, const char* type, const std::string& key, const ObjPtr& obj,
                const ObjPtr& prev) override;
  void on_clear() override;

  // ---- for controllers (store mutex held) ----
  SimContext& ctx() { return ctx_; }
  Store& store() { return ctx_.store; }
  SteadyClock::time_point now() const { return now_; }
  bool dpu_reachable() const { return dpu_reachable_; }
  void enqueue(Kind k, const std::string& item);
  // Starts a timer named key on first call; true once delay_ms have elapsed since then. The
  // item being reconciled owns it and is reconciled again when it is due.
  bool due(const std::string& key, int delay_ms);
  // Drops a timer; the item is reconciled again in the next batch (it may start a new one).
  void clear(const std::string& key);
  std::string next_pod_ip();

  // ---- control API (takes the store mutex) ----
  json stats();
  void reset_stats();
  // Queues every object for every controller (the full pass as a safety net, on demand).
  void resync_all();
  // True when no work is queued and no item is being reconciled (tests).
  bool idle();

 private:
  struct Owner {
    Kind kind;
    std::string item;
  };
  struct Timer {
    SteadyClock::time_point start;
    SteadyClock::time_point scheduled{};  // wake-up already queued for this time
    uint64_t touched = 0;
    std::string owner;  // "<kind>|<item>"
  };
  struct Wake {
    SteadyClock::time_point at;
    Kind kind;
    std::string item;
    bool operator>(const Wake& o) const { return at > o.at; }
  };
  struct Queue {
    std::deque<std::string> items;
    std::unordered_set<std::string> queued;
  };
  struct Stats {
    uint64_t items = 0;
    uint64_t busy_us = 0;
    uint64_t max_item_us = 0;
  };

  void run();
  // One chunk under the store mutex; true when more work is queued.
  bool step(SteadyClock::time_point budget_end, int& rounds);
  void reconcile_one(Kind k, const std::string& item);
  void check_external_changes();
  void notify_work();
  static std::string owner_key(Kind k, const std::string& item) {
    return std::to_string(static_cast<int>(k)) + "|" + item;
  }

  SimContext& ctx_;
  int tick_ms_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Controller>> ctls_;

  // Guarded by the store mutex.
  Queue queues_[kKinds];
  std::vector<Owner> deferred_;  // reconciled again in the next batch
  std::unordered_map<std::string, Timer> timers_;
  std::unordered_map<std::string, std::vector<std::string>> timers_of_;  // owner -> timer keys
  std::priority_queue<Wake, std::vector<Wake>, std::greater<Wake>> wakes_;
  SteadyClock::time_point now_{};
  bool dpu_reachable_ = true;
  uint64_t knobs_seq_ = 0;
  uint64_t delays_seq_ = 0;
  uint64_t eval_no_ = 0;
  const Owner* current_ = nullptr;
  bool current_cleared_ = false;
  uint32_t pod_ip_counter_ = 0;
  Stats stats_[kKinds];
  uint64_t max_hold_us_ = 0, chunks_ = 0, batches_ = 0, long_holds_ = 0;
  uint64_t hold_hist_[6] = {0, 0, 0, 0, 0, 0};  // <0.5, <1, <2, <5, <10, >=10 ms
  uint64_t events_seen_ = 0;
  int round_kind_ = 0;
  size_t round_left_ = static_cast<size_t>(-1);
  bool round_any_ = false;

  // Wakes the controller thread.
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool work_ = false;
};

std::unique_ptr<Controller> make_placement_controller();
std::unique_ptr<Controller> make_dpudevice_controller();
std::unique_ptr<Controller> make_dpuservice_controller();
std::unique_ptr<Controller> make_argo_controller();
std::unique_ptr<Controller> make_daemonset_controller();
std::unique_ptr<Controller> make_scheduler();
std::unique_ptr<Controller> make_kubelet();

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
// What a chart does beyond DPF's reference chart (POST /charts). DPF's chart contract
// (docs/public/developer-guides/services/dpuservice-development.md) makes serviceDaemonSet.labels,
// .annotations and .nodeSelector mandatory; real charts break it (NVIDIA/doca-platform#23: a chart
// that ignores nodeSelector), and a chart may hard-code the namespace of what it renders.
struct ChartProps {
  bool needs_privileged = false;       // its container sets securityContext.privileged
  bool ignores_labels = false;         // serviceDaemonSet.labels reach neither DaemonSet nor pods
  bool ignores_annotations = false;    // serviceDaemonSet.annotations reach neither
  bool ignores_node_selector = false;  // no node affinity from serviceDaemonSet.nodeSelector
  std::string ns;                      // the DaemonSet's namespace ("": the destination's)
  json requests = json::object();      // resources its container always requests (= limits)
  // Throws std::invalid_argument naming the bad property.
  static ChartProps parse(const json& j);
  json to_json() const;
};
// The properties POSTed for a chart (defaults when none). Takes the knobs mutex.
ChartProps chart_props(SimContext& ctx, const std::string& chart);
// What the chart renders for an Application (metadata + spec, no status): one DaemonSet, with
// Argo CD's tracking annotation <app>:apps/DaemonSet:<ns>/<name> (annotation tracking, the default
// of Argo CD 3.x and what DPF configures).
json render_chart_daemonset(const json& app, const ChartProps& props = {});
std::string template_hash(const json& pod_template);
// Adds key to the set idx[name] / removes it (erasing empty sets).
void index_add(std::unordered_map<std::string, std::set<std::string>>& idx, const std::string& name,
               const std::string& key);
void index_remove(std::unordered_map<std::string, std::set<std::string>>& idx,
                  const std::string& name, const std::string& key);

}  // namespace dpfsim
