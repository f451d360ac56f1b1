// The watch cache of DPF's DPU objects (issue 23): the middle hop of the label path
// (DPUDevice -> DPU spec.cluster.nodeLabels -> Node). A change of a DPU's NICo keys (and of its
// phase or telling condition while it carries one) wakes its DPUDevice's row; nothing else of the
// object is kept.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "controller/cache_store.hpp"
#include "core/dpf_objects.hpp"

namespace extsvc::controller {

class DpuObjectStore : public ClusterCache::Store {
 public:
  using Store::Store;
  size_t size() const override { return map_.size(); }
  // By name (= the DPU-cluster Node's name).
  const core::DpuObjectFacts* find(const std::string& name) const;

 protected:
  void apply(const nlohmann::json& obj) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys() const override;

 private:
  // one namespace: the key is the name
  std::unordered_map<std::string, core::DpuObjectFacts> map_;
  std::string ns_;  // of the objects seen (for keys())
};

}  // namespace extsvc::controller
