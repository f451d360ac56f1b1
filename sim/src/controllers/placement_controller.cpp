// DPUDevice.spec.cluster.nodeLabels -> DPU.spec.cluster.nodeLabels -> DPU-cluster Node labels.
//
// Mirrors DPF's DPUSet/DPU controllers: user labels are tracked in the annotation
// provisioning.dpu.nvidia.com/last-applied-labels-on-dpu (on the DPU: the device's user labels; on
// the Node: the DPU's full nodeLabels) so keys removed upstream are removed downstream while labels
// that DPF never applied (e.g. set with kubectl) are kept. Each hop takes label_propagation_ms / 2.
//
// Work is incremental: only the DPUDevices, DPUs and Nodes a change touched (or whose delay is
// due) are looked at.
#include <cstring>
#include <unordered_map>

#include "controller_manager.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

json parse_last_applied(const json& obj) {
  std::string s = jstr(obj, {"metadata", "annotations", names::kLastAppliedLabels});
  if (s.empty()) return json::object();
  try {
    json j = json::parse(s);
    return j.is_object() ? j : json::object();
  } catch (...) {
    return json::object();
  }
}

// labels minus (previously applied keys no longer desired) plus desired.
json apply_labels(const json& current, const json& last_applied, const json& desired) {
  json out = current.is_object() ? current : json::object();
  for (auto& [k, v] : last_applied.items())
    if (!desired.contains(k)) out.erase(k);
  for (auto& [k, v] : desired.items()) out[k] = v;
  return out;
}

std::string key_of(const json& o) {
  return jstr(o, {"metadata", "namespace"}) + "/" + jstr(o, {"metadata", "name"});
}

// Items: "dev:<ns>/<name>" (DPUDevice -> DPU), "dpu:<ns>/<name>" (DPU gc, DPU -> Node),
// "node:<name>" (Node gc).
class PlacementController : public Controller {
 public:
  const char* name() const override { return "placement"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr& obj, const ObjPtr& prev) override {
    if (&ri == dev_ri_) {
      cm.enqueue(ControllerManager::kPlacement, "dev:" + key);
      for (const ObjPtr& o : {obj, prev}) {
        if (!o) continue;
        std::string node = jstr(*o, {"metadata", "labels", names::kDpuNodeNameLabel});
        if (!node.empty())
          cm.enqueue(ControllerManager::kPlacement,
                     "dpu:" + jstr(*o, {"metadata", "namespace"}) + "/" +
                         dpu_object_name(node, jstr(*o, {"metadata", "name"})));
      }
    } else if (&ri == dpu_ri_) {
      std::string ns = jstr(*obj, {"metadata", "namespace"});
      std::string name = jstr(*obj, {"metadata", "name"});
      cm.enqueue(ControllerManager::kPlacement, "dpu:" + key);
      cm.enqueue(ControllerManager::kPlacement,
                 "dev:" + ns + "/" + jstr(*obj, {"spec", "dpuDeviceName"}));
      if (std::strcmp(type, "DELETED") == 0) {
        dpu_ns_by_name_.erase(name);
        // Its Node goes too; a Node whose DPU appears is checked again when its timer is due.
        cm.enqueue(ControllerManager::kPlacement, "node:" + name);
      } else {
        dpu_ns_by_name_[name] = ns;
      }
    } else if (&ri == node_ri_) {
      cm.enqueue(ControllerManager::kPlacement, "node:" + key);
      auto it = dpu_ns_by_name_.find(key);
      if (it != dpu_ns_by_name_.end())
        cm.enqueue(ControllerManager::kPlacement, "dpu:" + it->second + "/" + key);
    }
  }

  void on_clear() override { dpu_ns_by_name_.clear(); }

  void enqueue_all(ControllerManager& cm) override {
    Store& st = cm.store();
    for (const ObjPtr& o : st.list_l(*dev_ri_))
      cm.enqueue(ControllerManager::kPlacement, "dev:" + key_of(*o));
    enqueue_dpus(cm);
    for (const ObjPtr& o : st.list_l(*node_ri_))
      cm.enqueue(ControllerManager::kPlacement, "node:" + jstr(*o, {"metadata", "name"}));
  }

  // Label propagation to Nodes pauses while the DPU cluster is unreachable.
  void on_reachability(ControllerManager& cm) override { enqueue_dpus(cm); }

  void reconcile(ControllerManager& cm, const std::string& item) override {
    auto colon = item.find(':');
    std::string kind = item.substr(0, colon);
    std::string key = item.substr(colon + 1);
    if (kind == "dev")
      device(cm, key);
    else if (kind == "dpu")
      dpu(cm, key);
    else
      node(cm, key);
  }

 private:
  void enqueue_dpus(ControllerManager& cm) {
    for (const ObjPtr& o : cm.store().list_l(*dpu_ri_))
      cm.enqueue(ControllerManager::kPlacement, "dpu:" + key_of(*o));
  }

  // 1. DPUDevice -> DPU.
  void device(ControllerManager& cm, const std::string& key) {
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    ObjPtr dev = st.find_key_l(*dev_ri_, key);
    if (!dev || is_terminating(*dev)) return;
    std::string ns = jstr(*dev, {"metadata", "namespace"});
    std::string dev_name = jstr(*dev, {"metadata", "name"});
    std::string dpu_node = jstr(*dev, {"metadata", "labels", names::kDpuNodeNameLabel});
    if (dpu_node.empty()) return;
    json user = string_map(jptr(*dev, {"spec", "cluster", "nodeLabels"}));
    std::string dpu_name = dpu_object_name(dpu_node, dev_name);
    ObjPtr dpu = st.find_l(*dpu_ri_, ns, dpu_name);
    if (!dpu) {
      std::string tkey = "dpu-create/" + jstr(*dev, {"metadata", "uid"});
      if (cm.due(tkey, d.node_provisioning_ms / 2)) {
        st.create_l(*dpu_ri_, make_dpu(ns, *dev, user));
        cm.clear(tkey);
      }
      return;
    }
    if (is_terminating(*dpu)) return;
    json last = parse_last_applied(*dpu);
    json cur = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
    json want = apply_labels(cur, last, user);
    bool annot_ok =
        jstr(*dpu, {"metadata", "annotations", names::kLastAppliedLabels}) == user.dump();
    if (want == cur && annot_ok) return;
    std::string tkey = "dpu-labels/" + jstr(*dpu, {"metadata", "uid"});
    if (!cm.due(tkey, d.label_propagation_ms / 2)) return;
    json next = *dpu;
    next["spec"]["cluster"]["nodeLabels"] = want;
    next["metadata"]["annotations"][names::kLastAppliedLabels] = user.dump();
    st.commit_l(*dpu_ri_, std::move(next));
    cm.clear(tkey);
  }

  // 2. A DPU whose DPUDevice is gone is removed; 3. DPU -> DPU-cluster Node (DPF must be able to
  // reach the DPU cluster).
  void dpu(ControllerManager& cm, const std::string& key) {
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    ObjPtr dpu = st.find_key_l(*dpu_ri_, key);
    if (!dpu) return;
    std::string ns = jstr(*dpu, {"metadata", "namespace"});
    std::string dev_name = jstr(*dpu, {"spec", "dpuDeviceName"});
    if (!dev_name.empty() && !st.find_l(*dev_ri_, ns, dev_name) && !is_terminating(*dpu)) {
      std::string tkey = "dpu-gc/" + jstr(*dpu, {"metadata", "uid"});
      if (cm.due(tkey, d.node_provisioning_ms / 2)) {
        if (jptr(*dpu, {"metadata", "finalizers"}))
          st.mark_deleting_l(*dpu_ri_, dpu, 0);
        else
          st.erase_l(*dpu_ri_, ns, jstr(*dpu, {"metadata", "name"}));
        cm.clear(tkey);
        dpu = st.find_key_l(*dpu_ri_, key);
      }
    }
    if (!cm.dpu_reachable()) return;
    if (!dpu || is_terminating(*dpu)) return;
    int half2 = d.label_propagation_ms - d.label_propagation_ms / 2;
    std::string name = jstr(*dpu, {"metadata", "name"});
    std::string uid = jstr(*dpu, {"metadata", "uid"});
    json desired = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
    ObjPtr node = st.find_l(*node_ri_, "", name);
    if (!node) {
      std::string tkey = "node-create/" + uid;
      if (cm.due(tkey, d.node_provisioning_ms - d.node_provisioning_ms / 2)) {
        st.create_l(*node_ri_, make_node(*dpu, index_from_name(name)));
        cm.clear(tkey);
      }
      return;
    }
    if (is_terminating(*node)) return;
    json last = parse_last_applied(*node);
    json cur = string_map(jptr(*node, {"metadata", "labels"}));
    json want = apply_labels(cur, last, desired);
    bool annot_ok =
        jstr(*node, {"metadata", "annotations", names::kLastAppliedLabels}) == desired.dump();
    if (want == cur && annot_ok) return;
    std::string tkey = "node-labels/" + uid;
    if (!cm.due(tkey, half2)) return;
    json next = *node;
    next["metadata"]["labels"] = want;
    next["metadata"]["annotations"][names::kLastAppliedLabels] = desired.dump();
    st.commit_l(*node_ri_, std::move(next));
    cm.clear(tkey);
  }

  // 4. Nodes DPF created (they carry the last-applied annotation) whose DPU is gone are removed.
  void node(ControllerManager& cm, const std::string& name) {
    Store& st = cm.store();
    ObjPtr node = st.find_l(*node_ri_, "", name);
    if (!node || !jptr(*node, {"metadata", "annotations", names::kLastAppliedLabels})) return;
    std::string dpu_ns =
        jstr(*node, {"metadata", "labels", names::kDpuNodeNamespaceLabel}, names::kDpfNamespace);
    if (st.find_l(*dpu_ri_, dpu_ns, name)) return;
    std::string tkey = "node-gc/" + jstr(*node, {"metadata", "uid"});
    if (!cm.due(tkey, cm.ctx().delays.node_provisioning_ms / 2)) return;
    st.erase_l(*node_ri_, "", name);
    cm.clear(tkey);
  }

  const ResourceInfo* dev_ri_ = find_resource_by_plural(ClusterId::Management, "dpudevices");
  const ResourceInfo* dpu_ri_ = find_resource_by_plural(ClusterId::Management, "dpus");
  const ResourceInfo* node_ri_ = find_resource_by_plural(ClusterId::Dpu, "nodes");
  std::unordered_map<std::string, std::string> dpu_ns_by_name_;  // DPU name -> namespace
};

}  // namespace

std::unique_ptr<Controller> make_placement_controller() {
  return std::make_unique<PlacementController>();
}

}  // namespace dpfsim
