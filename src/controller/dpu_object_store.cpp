#include "controller/dpu_object_store.hpp"

namespace extsvc::controller {

std::optional<core::DpuObjectFacts> DpuObjectStore::extract(const std::string&,
                                                            const nlohmann::json& obj) {
  return core::dpu_object_facts(obj);
}

void DpuObjectStore::on_change(const std::string&, const core::DpuObjectFacts* old,
                               const core::DpuObjectFacts* now) {
  if (old == nullptr || now == nullptr) {
    dirty_.devices.insert(old != nullptr ? old->device : now->device);
    return;
  }
  // NICo's keys wake the DPU's row; the phase and the telling condition only while a NICo key
  // is on the DPU object (a hop of ours is under way: the PENDING message names the phase),
  // so a label change of somebody else's walking the DPU through its phases wakes nothing
  const bool ours = old->labels != now->labels || old->device != now->device;
  const bool context = (old->phase != now->phase || old->condition != now->condition) &&
                       (!old->labels.empty() || !now->labels.empty());
  if (ours || context) {
    dirty_.devices.insert(old->device);
    dirty_.devices.insert(now->device);
  }
}

}  // namespace extsvc::controller
