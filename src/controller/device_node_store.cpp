#include "controller/device_node_store.hpp"

namespace extsvc::controller {

using nlohmann::json;

std::optional<DeviceFacts> DeviceStore::extract(const std::string&, const json& obj) {
  DeviceFacts f;
  f.resource_version = core::json_text_at(obj, {"metadata", "resourceVersion"});
  f.labels = core::nico_labels_of(core::json_at(obj, {"spec", "cluster", "nodeLabels"}));
  return f;
}

bool DeviceStore::unchanged(const DeviceFacts& old, const DeviceFacts& now) const {
  // a watch event older than the PATCH response already taken changes nothing
  return old == now || older_version(now.resource_version, old.resource_version);
}

void DeviceStore::on_change(const std::string& key, const DeviceFacts* old,
                            const DeviceFacts* now) {
  // a new resourceVersion alone (DPF's status) is kept, so the next PATCH is not refused as
  // stale, but wakes nothing
  if (old == nullptr || now == nullptr || old->labels != now->labels) dirty_.devices.insert(key);
}

std::optional<NodeFacts> NodeStore::extract(const std::string&, const json& obj) {
  // NICo's labels and the Ready condition (a Node that stops reporting): other changes, such as
  // heartbeats, compare equal and wake nothing
  return core::node_facts(obj);
}

void NodeStore::on_change(const std::string& key, const NodeFacts*, const NodeFacts*) {
  dirty_.nodes.insert(key);
}

}  // namespace extsvc::controller
