// The placement passes' evidence from the watch caches (issue 11): no read is an API call. A
// cache that never listed cannot be evidence: a pass then retries (management side) or reports
// UNKNOWN (DPU side). A cache that lost its stream is still evidence, as of the moment it was
// last current: observed_at says so, and the staleness bound (extsvc.observation_max_age) turns
// it into UNKNOWN when the gap grows.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "controller/cluster_cache.hpp"
#include "reconcile/dpu_observer.hpp"

namespace extsvc::controller {

class CacheObserver : public reconcile::DpuObserver {
 public:
  explicit CacheObserver(ClusterCache& cache) : cache_(cache) {}
  bool reads_call_api() const override { return false; }
  reconcile::DeviceRead device(const std::string& name) override;
  void device_patched(const std::string& name, const nlohmann::json& response) override {
    cache_.device_patched(name, response);
  }
  reconcile::DpuObjectRead dpu_object(const std::string& name) override;
  bool dpu_cluster() const override { return cache_.dpu_configured(); }
  reconcile::NodeRead node(const std::string& name) override;
  reconcile::PodsRead pods(const std::string& node) override;
  const core::DpfStatus* dpf_status(const std::string& service_id) override;
  const std::vector<std::pair<std::string, std::string>>& failed_creates() override;
  std::optional<double> observed_at() override;
  bool current() const override;
  std::string not_current_why() const override;
  int calls() const override { return 0; }
  const std::map<std::string, core::DpfStatus>& dpf_seen() const override { return none_; }

 private:
  ClusterCache& cache_;
  std::vector<std::pair<std::string, std::string>> failed_;
  bool failed_read_ = false;
  std::map<std::string, core::DpfStatus> none_;  // the watcher records DPF's status itself
};

}  // namespace extsvc::controller
