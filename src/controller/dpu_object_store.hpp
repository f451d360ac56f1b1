// The watch cache of DPF's DPU objects (issue 23): the middle hop of the label path
// (DPUDevice -> DPU spec.cluster.nodeLabels -> Node). A change of a DPU's NICo keys (and of its
// phase or telling condition while it carries one) wakes its DPUDevice's row; nothing else of the
// object is kept.
#pragma once

#include <optional>
#include <string>

#include "controller/indexed_store.hpp"
#include "core/dpf_objects.hpp"

namespace extsvc::controller {

// One namespace: by name (= the DPU-cluster Node's name).
class DpuObjectStore : public IndexedStore<core::DpuObjectFacts> {
 public:
  using IndexedStore::IndexedStore;

 protected:
  std::string key_of(const nlohmann::json& obj) const override { return name_key_of(obj); }
  std::optional<core::DpuObjectFacts> extract(const std::string& key,
                                              const nlohmann::json& obj) override;
  void on_change(const std::string& key, const core::DpuObjectFacts* old,
                 const core::DpuObjectFacts* now) override;
};

}  // namespace extsvc::controller
