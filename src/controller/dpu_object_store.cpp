#include "controller/dpu_object_store.hpp"

namespace extsvc::controller {

const core::DpuObjectFacts* DpuObjectStore::find(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

void DpuObjectStore::apply(const nlohmann::json& obj) {
  core::DpuObjectFacts f = core::dpu_object_facts(obj);
  ns_ = core::json_text_at(obj, {"metadata", "namespace"});
  auto it = map_.find(f.name);
  if (it != map_.end()) {
    const core::DpuObjectFacts& old = it->second;
    // NICo's keys wake the DPU's row; the phase and the telling condition only while a NICo key
    // is on the DPU object (a hop of ours is under way: the PENDING message names the phase),
    // so a label change of somebody else's walking the DPU through its phases wakes nothing
    const bool ours = old.labels != f.labels || old.device != f.device;
    const bool context = (old.phase != f.phase || old.condition != f.condition) &&
                         (!old.labels.empty() || !f.labels.empty());
    if (ours || context) {
      dirty_.devices.insert(old.device);
      dirty_.devices.insert(f.device);
    }
    it->second = f;
    return;
  }
  map_.emplace(f.name, f);
  dirty_.devices.insert(f.device);
}

void DpuObjectStore::remove(const std::string& key) {
  const std::string name = key.substr(key.find('/') + 1);
  auto it = map_.find(name);
  if (it == map_.end()) return;
  dirty_.devices.insert(it->second.device);
  map_.erase(it);
}

std::vector<std::string> DpuObjectStore::keys() const {
  std::vector<std::string> out;
  out.reserve(map_.size());
  for (const auto& [name, f] : map_) out.push_back(ns_.empty() ? name : ns_ + "/" + name);
  return out;
}

}  // namespace extsvc::controller
