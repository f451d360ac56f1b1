// The watch caches of the label path's two ends (issue 11): DPF's DPUDevices in the management
// cluster and the DPU cluster's Nodes. Each keeps NICo's keys (and a Node its Ready condition);
// a change of those wakes the row of that DPUDevice or Node, nothing else does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "controller/indexed_store.hpp"

namespace extsvc::controller {

class DeviceStore : public IndexedStore<DeviceFacts> {
 public:
  using IndexedStore::IndexedStore;
  // A PATCH answered with the DPUDevice: taken as its watch event would be.
  void patched(const nlohmann::json& obj) { apply(obj); }
  std::vector<std::string> names() const { return keys(); }

 protected:
  std::string key_of(const nlohmann::json& obj) const override { return name_key_of(obj); }
  std::optional<DeviceFacts> extract(const std::string& key, const nlohmann::json& obj) override;
  bool unchanged(const DeviceFacts& old, const DeviceFacts& now) const override;
  void on_change(const std::string& key, const DeviceFacts* old, const DeviceFacts* now) override;
};

class NodeStore : public IndexedStore<NodeFacts> {
 public:
  using IndexedStore::IndexedStore;
  std::vector<std::string> names() const { return keys(); }

 protected:
  std::optional<NodeFacts> extract(const std::string& key, const nlohmann::json& obj) override;
  void on_change(const std::string& key, const NodeFacts* old, const NodeFacts* now) override;
};

}  // namespace extsvc::controller
