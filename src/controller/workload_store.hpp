// The watch caches of the DPU cluster's workloads (issue 23, part 2). Pods are watched in every
// namespace and whether labelled or not, because a chart may drop the injected label or render
// into another namespace; only pods that carry our service label or are controlled by a
// DaemonSet are kept. DaemonSets are watched in every namespace; only those Argo applied for one
// of our DPUServices (core/workload.hpp) are kept. A pod without our label counts as its
// service's when its controlling DaemonSet is one of those.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/indexed_store.hpp"
#include "core/pod_status.hpp"

namespace extsvc::controller {

class DaemonSetStore;

// Indexed by Node and by controlling DaemonSet's uid.
class PodStore : public IndexedStore<core::PodFacts> {
 public:
  static constexpr const char* kByNode = "node";
  static constexpr const char* kByOwner = "owner";
  PodStore(Dirty& dirty, std::string name);
  std::vector<const core::PodFacts*> on(const std::string& node) const {
    return by_index(kByNode, node);
  }
  // The Nodes of the pods a DaemonSet controls (woken when it becomes, or stops being, ours).
  std::set<std::string> nodes_of(const std::string& owner_uid) const;
  bool has_owner(const std::string& owner_uid) const {
    return index_count(kByOwner, owner_uid) > 0;
  }
  void set_daemonsets(const DaemonSetStore* ds) { daemonsets_ = ds; }

 protected:
  std::optional<core::PodFacts> extract(const std::string& key, const nlohmann::json& obj) override;
  void on_change(const std::string& key, const core::PodFacts* old,
                 const core::PodFacts* now) override;

 private:
  bool ours(const core::PodFacts& f) const;
  const DaemonSetStore* daemonsets_ = nullptr;
};

// What a DaemonSet of ours is: its uid and the DPUService whose Application applied it.
struct TrackedDaemonSet {
  std::string uid;
  std::string release;
  bool operator==(const TrackedDaemonSet&) const = default;
};

// By "<namespace>/<name>", indexed by uid.
class DaemonSetStore : public IndexedStore<TrackedDaemonSet> {
 public:
  static constexpr const char* kByUid = "uid";
  DaemonSetStore(Dirty& dirty, std::string name);
  // The DPUService whose Application applied the DaemonSet with this uid, or "". A DaemonSet
  // deleted while pods it controlled remain (a background cascade) still answers.
  std::string release_of(const std::string& uid) const;
  void set_pods(const PodStore* pods) { pods_ = pods; }

 protected:
  std::optional<TrackedDaemonSet> extract(const std::string& key,
                                          const nlohmann::json& obj) override;
  void on_change(const std::string& key, const TrackedDaemonSet* old,
                 const TrackedDaemonSet* now) override;

 private:
  void wake(const std::string& uid);
  std::unordered_map<std::string, std::string> gone_;  // deleted, pods remain: uid -> release
  const PodStore* pods_ = nullptr;
};

}  // namespace extsvc::controller
