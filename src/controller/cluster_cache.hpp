// The worker's informers (issue 11): LIST+WATCH caches of what the placement passes and the
// drift check observe, so that a steady state costs no API call and a change wakes exactly the
// rows it concerns.
//   management cluster: our DPUServices (label nico/extension-service-id), DPUDevices, DPF's DPU
//     objects (the label path's middle hop)
//   DPU cluster: Nodes, pods (ours by label, or by their DaemonSet's Argo tracking: any namespace),
//     the DaemonSets Argo applied for our DPUServices, DaemonSet FailedCreate events
// Each cache keeps only what is read later (labels under nico/extsvc-, pod facts, a drift key and
// DPF's status per DPUService), so a site of 10,000 DPUs fits in a few MiB. Everything runs on
// one kube::Multi, on the caller's thread, inside pump(); nothing here knows PostgreSQL.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dpf_objects.hpp"
#include "core/dpf_status.hpp"
#include "core/pod_status.hpp"
#include "kube/client.hpp"
#include "kube/multi.hpp"
#include "kube/reflector.hpp"
#include "reconcile/service_work.hpp"

namespace extsvc::controller {

// Only the keys NICo owns (nico/extsvc-*): other labels never wake anything.
using NicoLabels = core::NicoLabels;
// NICo's keys and the Ready condition of a Node.
using NodeFacts = core::NodeFacts;

struct DeviceFacts {
  std::string resource_version;
  NicoLabels labels;  // spec.cluster.nodeLabels, NICo's keys
  bool operator==(const DeviceFacts&) const = default;
};

// One of our DPUServices, as small as the drift check and its repair allow (a site has thousands
// of them; the map's key is its name): the drift key and shape instead of the object, and of
// DPF's status only what
// tells a change, plus the whole status while it is worth a PENDING message (not Ready, paused).
struct ServiceFacts {
  std::string uid;
  // the precondition of a one-call update (issue 26, part 2); a change of it alone (DPF's status
  // writes) wakes nothing
  std::string resource_version;
  std::string service_id;  // the ownership label
  std::string site;        // the nico/site label (issue 25); has_site false: none
  bool has_site = false;
  bool being_deleted = false;
  std::array<char, 32> drift_key{};  // core::dpuservice_drift_key (its 32 bytes)
  // core::dpuservice_drift_shape: the keys of the owned fields with digests for values, so that
  // a drift is repaired with one PATCH (issue 26, part 2); a few hundred bytes
  std::string drift_shape;
  uint64_t dpf_digest = 0;  // of DPF's Ready condition, reason, message, paused
  bool operator==(const ServiceFacts&) const = default;
};

// What changed since the last take_dirty(): the names to wake.
struct Dirty {
  std::set<std::string> devices;   // DPUDevices whose NICo labels changed, appeared or went
  std::set<std::string> nodes;     // Nodes whose NICo labels or pods of ours changed
  std::set<std::string> services;  // service ids whose DPUService changed (drift key, deletion)
  std::map<std::string, core::DpfStatus> dpf;  // DPF's status changed, by service id
  // Services whose context changed (a DaemonSet FailedCreate event, DPF's Ready condition): the
  // PENDING messages of their DPUs say more now.
  std::set<std::string> context;
  // The first take after the management caches listed: an object that went before that list
  // (while no watcher ran) sends no event, so every DELETING service is looked at once.
  bool every_deleting = false;
  bool empty() const {
    return devices.empty() && nodes.empty() && services.empty() && dpf.empty() && context.empty() &&
           !every_deleting;
  }
};

struct CacheSettings {
  std::string ns;
  int watch_timeout_s = 300;
  int silence_limit_s = 150;
};

class ClusterCache {
 public:
  using Clock = std::chrono::steady_clock;

  // dpu may be null (no DPU cluster configured): only the management caches run.
  ClusterCache(kube::Client& management, kube::Client* dpu, const CacheSettings& settings);
  ~ClusterCache();
  ClusterCache(const ClusterCache&) = delete;
  ClusterCache& operator=(const ClusterCache&) = delete;

  // The host's event loop waits on these (and on next_timer_ms()), then calls pump().
  kube::Multi& multi() { return *multi_; }
  // Non-blocking: moves every transfer along and applies what arrived.
  void pump();
  // Milliseconds until pump() has timed work, -1 when none.
  long next_timer_ms() const;
  // Every informer lists again (the resync's safety net); a list under way counts.
  void request_relist();
  // Every informer completed the list that answers the last request_relist(); one that is
  // backing off (its cluster unreachable) is not waited for.
  bool relist_done() const;

  // What changed since the last call; nothing until the management caches have listed (a drift
  // check or a pass needs them), so nothing is lost by asking early.
  Dirty take_dirty();
  // Puts back what could not be published (the database refused): the next take_dirty() has it.
  void restore_dirty(Dirty&& d);
  // take_dirty() would return something now.
  bool has_changes() const { return (!dirty_.empty() || !synced_taken_) && management_synced(); }

  // Observation state. Synced: listed at least once. current_at: when the cache was last known
  // equal to the server's state (now while every watch of that cluster is open), as wall-clock
  // time for the database; nullopt before the first list.
  bool management_synced() const;
  bool dpu_configured() const { return dpu_ != nullptr; }
  kube::Client* dpu_client() const { return dpu_; }
  bool dpu_synced() const;
  std::optional<std::chrono::system_clock::time_point> management_current_at() const;
  std::optional<std::chrono::system_clock::time_point> dpu_current_at() const;
  bool dpu_current() const;
  bool management_current() const;
  std::string management_error() const;
  std::string dpu_error() const;

  const DeviceFacts* device(const std::string& name) const;
  // The API serves no DPUDevice resource (its LIST answered 404 for the resource: DPF v24.10).
  bool dpudevices_not_served() const;
  const NodeFacts* node(const std::string& name) const;
  // DPF's DPU object by name (= its Node's name).
  const core::DpuObjectFacts* dpu_object(const std::string& name) const;
  // The pods on a Node that carry our label or that a DaemonSet controls (any namespace).
  std::vector<const core::PodFacts*> pods_on(const std::string& node) const;
  // The DPUService whose Argo Application applied the DaemonSet with this uid, or "".
  std::string release_of(const std::string& owner_uid) const;
  // DPF's status of a service while it explains something (not Ready, or paused), else null.
  const core::DpfStatus* dpf_context(const std::string& service_id) const;
  // Issue 26, part 2: what a service pass needs of the DPUService of that name to write it with
  // one request (its uid and resourceVersion as the precondition, its ownership and site), or,
  // absent, the uid the watch last saw go.
  reconcile::CachedDpuService dpuservice(const std::string& name) const;
  // Our DPUServices by name.
  const std::unordered_map<std::string, ServiceFacts>& services_by_name() const;
  // (DaemonSet name, message) of the DPU cluster's FailedCreate events.
  std::vector<std::pair<std::string, std::string>> failed_creates() const;

  // A PATCH answered with the DPUDevice: the cache takes it at once (the watch event follows and
  // then changes nothing), so the next pass does not patch again.
  void device_patched(const std::string& name, const nlohmann::json& response);

  struct InformerInfo {
    std::string name;
    std::string cluster;
    bool synced = false;
    bool current = false;
    size_t objects = 0;
    kube::Reflector::Stats stats;
    std::string last_error;
    int64_t current_at_us = 0;  // Unix microseconds when last known current; 0 = never
  };
  std::vector<InformerInfo> informers() const;

  class Store;  // one cache (implementation detail)

 private:
  std::unique_ptr<kube::Multi> multi_;
  kube::Client* dpu_ = nullptr;
  Dirty dirty_;
  bool synced_taken_ = false;                   // take_dirty() has handed out every_deleting
  std::vector<std::unique_ptr<Store>> stores_;  // devices, services, nodes, pods, events, dpus, ds
  std::vector<std::unique_ptr<kube::Reflector>> reflectors_;
  std::vector<Clock::time_point> relist_tickets_;  // per reflector: the list that answers
  // An outage of a cluster: from the first failure of one of its informers until none of them
  // fails any more (the API server answers again). Back from one of kOutage or more, every
  // object of that cluster counts as changed once its informers are current: rows that turned
  // UNKNOWN meanwhile (the staleness bound) are derived again at once, not at the next resync.
  // The re-list that follows is not part of it: listing 25,000 Nodes takes seconds, and the
  // list itself wakes what changed (issue 26: a 410 at that size woke every DPU).
  struct Outage {
    std::optional<Clock::time_point> since;  // first failure
    std::optional<Clock::time_point> until;  // answered again (nullopt: still failing)
  };
  Outage management_outage_, dpu_outage_;
  void note_outages();
};

// steady -> wall clock, for the database.
std::chrono::system_clock::time_point to_wall(std::chrono::steady_clock::time_point t);

}  // namespace extsvc::controller
