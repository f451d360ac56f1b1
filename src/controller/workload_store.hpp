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

#include "controller/cache_store.hpp"
#include "core/pod_status.hpp"

namespace extsvc::controller {

class DaemonSetStore;

class PodStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  std::vector<const core::PodFacts*> on(const std::string& node) const;
  // The Nodes of the pods a DaemonSet controls (woken when it becomes, or stops being, ours).
  std::set<std::string> nodes_of(const std::string& owner_uid) const;
  bool has_owner(const std::string& owner_uid) const { return by_owner_.count(owner_uid) > 0; }
  void set_daemonsets(const DaemonSetStore* ds) { daemonsets_ = ds; }

 protected:
  void apply(const nlohmann::json& obj) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys() const override;

 private:
  bool ours(const core::PodFacts& f) const;
  void unindex(const std::string& key, const core::PodFacts& f);
  std::unordered_map<std::string, core::PodFacts> map_;
  std::unordered_map<std::string, std::set<std::string>> by_node_;
  std::unordered_map<std::string, std::set<std::string>> by_owner_;
  const DaemonSetStore* daemonsets_ = nullptr;
};

class DaemonSetStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return by_key_.size(); }
  // The DPUService whose Application applied the DaemonSet with this uid, or "". A DaemonSet
  // deleted while pods it controlled remain (a background cascade) still answers.
  std::string release_of(const std::string& uid) const;
  void set_pods(const PodStore* pods) { pods_ = pods; }

 protected:
  void apply(const nlohmann::json& obj) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys() const override;

 private:
  void wake(const std::string& uid);
  struct Tracked {
    std::string uid;
    std::string release;
  };
  std::unordered_map<std::string, Tracked> by_key_;      // "<ns>/<name>"
  std::unordered_map<std::string, std::string> by_uid_;  // uid -> release
  std::unordered_map<std::string, std::string> gone_;    // deleted, pods remain: uid -> release
  const PodStore* pods_ = nullptr;
};

}  // namespace extsvc::controller
