// DPUDevice.spec.cluster.nodeLabels -> DPU.spec.cluster.nodeLabels -> DPU-cluster Node labels:
// three objects, two hops, each on its own schedule, as DPF's controllers do it.
//
// Hop 1, the DPUSet controller (dpuset_controller.go, MergeDPUClusterNodeMetadata in
// provisioning/controllers/util/util.go): the one simulated DPUSet selects every DPUDevice; its
// dpuTemplate's cluster.nodeLabels (POST /dpuset) are merged with each device's. A key whose value
// differs between the template and a device is ClusterMetadataConflict: the whole DPUSet stops
// (no DPU of it is created or updated) until it is resolved. The merged user labels are tracked on
// the DPU in the annotation provisioning.dpu.nvidia.com/last-applied-labels-on-dpu, so keys removed
// upstream are removed from the DPU's spec. Takes label_propagation_ms / 2.
//
// Hop 2, the DPU controller's phases (dpu/state/ready.go, dpu_cluster_config.go,
// node_effect_removal.go): in phase Ready a difference between the DPU's spec.cluster.nodeLabels
// and the Node's last-applied annotation moves the DPU to "DPU Cluster Config" (or "Node Effect"
// first when applyOnLabelChange is set); "DPU Cluster Config" needs the Node Ready, then merge-
// patches the Node from the DPU's spec *as it is then* (a key the DPUDevice dropped meanwhile can
// still arrive), and goes through "Node Effect Removal" back to Ready. Takes the other half of
// label_propagation_ms. Labels DPF never applied (kubectl label) are kept.
//
// Work is incremental: only the DPUDevices, DPUs and Nodes a change touched (or whose delay is
// due) are looked at; the DPUSet's conflicts are kept per device.
#include <cstring>
#include <map>
#include <unordered_map>

#include "conditions.h"
#include "controller_manager.h"
#include "profile.h"
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
      // the DPUSet validates every selected DPUDevice before it touches any DPU: a conflict is
      // known before the next reconcile of any device
      check_conflict(cm, key, std::strcmp(type, "DELETED") == 0 ? nullptr : obj.get());
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

  void on_clear() override {
    dpu_ns_by_name_.clear();
    conflicts_.clear();
  }

  // The DPUSet template changed: every device is validated and merged again; without DPUDevices
  // (v24.10) the template goes to the DPUs directly. Compared with what this hook saw last, not
  // with tmpl_, which a reconcile may already have refreshed from the same knobs change.
  void on_knobs(ControllerManager& cm) override {
    Template now = tmpl(cm);
    if (now.labels == seen_.labels && now.apply_on_label_change == seen_.apply_on_label_change)
      return;
    seen_ = now;
    for (const ObjPtr& o : cm.store().list_l(*dev_ri_)) {
      check_conflict(cm, key_of(*o), o.get());
      cm.enqueue(ControllerManager::kPlacement, "dev:" + key_of(*o));
    }
    if (!served(*dev_ri_)) enqueue_dpus(cm);
  }

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

  // The DPUSet template (POST /dpuset), read once per change of the knobs.
  struct Template {
    json labels = json::object();
    bool apply_on_label_change = false;
  };
  Template tmpl(ControllerManager& cm) {
    uint64_t seq = cm.ctx().knobs.seq.load();
    if (seq != tmpl_seq_) {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      tmpl_.labels = string_map(jptr(cm.ctx().knobs.dpuset, {"nodeLabels"}));
      tmpl_.apply_on_label_change = jbool(cm.ctx().knobs.dpuset, {"applyOnLabelChange"});
      tmpl_seq_ = seq;
    }
    return tmpl_;
  }

  // MergeDPUClusterNodeMetadata: template + device; "" or the conflict's text.
  static std::string merge(const json& tmpl, const json& device, json& out) {
    out = tmpl;
    for (auto& [k, v] : device.items()) {
      if (out.contains(k) && out[k] != v)
        return "label key \"" + k + "\": DPUSet template and DPUDevice disagree (" + out[k].dump() +
               " vs " + v.dump() + ")";
      out[k] = v;
    }
    return "";
  }

  // validateDPUClusterMetadata, kept per device: a conflict of any device stops the DPUSet.
  void note_conflict(ControllerManager& cm, const std::string& dev_key, const std::string& why) {
    bool was_blocked = !conflicts_.empty();
    if (why.empty())
      conflicts_.erase(dev_key);
    else
      conflicts_[dev_key] = why;
    bool blocked = !conflicts_.empty();
    json status = json::object();
    if (blocked) {
      const auto& [k, msg] = *conflicts_.begin();
      status = {{"type", "Ready"},
                {"status", "False"},
                {"reason", "ClusterMetadataConflict"},
                {"message", "DPUDevice \"" + k.substr(k.find('/') + 1) + "\": " + msg}};
    }
    {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      cm.ctx().knobs.dpuset_status = status;
    }
    // resolved: every device may have a change waiting
    if (was_blocked && !blocked)
      for (const ObjPtr& o : cm.store().list_l(*dev_ri_))
        cm.enqueue(ControllerManager::kPlacement, "dev:" + key_of(*o));
  }

  void check_conflict(ControllerManager& cm, const std::string& key, const json* dev) {
    json merged;
    note_conflict(cm, key,
                  dev && !jstr(*dev, {"metadata", "labels", names::kDpuNodeNameLabel}).empty()
                      ? merge(tmpl(cm).labels,
                              string_map(jptr(*dev, {"spec", "cluster", "nodeLabels"})), merged)
                      : std::string());
  }

  // 1. DPUDevice -> DPU (the DPUSet controller).
  void device(ControllerManager& cm, const std::string& key) {
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    ObjPtr dev = st.find_key_l(*dev_ri_, key);
    if (!dev || is_terminating(*dev)) return;
    std::string ns = jstr(*dev, {"metadata", "namespace"});
    std::string dev_name = jstr(*dev, {"metadata", "name"});
    std::string dpu_node = jstr(*dev, {"metadata", "labels", names::kDpuNodeNameLabel});
    if (dpu_node.empty()) return;     // a DPUSet selects DPUDevices by their DPUNode
    if (!conflicts_.empty()) return;  // ClusterMetadataConflict: no DPU is created or updated
    json user;
    merge(tmpl(cm).labels, string_map(jptr(*dev, {"spec", "cluster", "nodeLabels"})), user);
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
    bool effect_ok = jbool(*dpu, {"spec", "nodeEffect", "upgradePolicy", "applyOnLabelChange"}) ==
                     tmpl(cm).apply_on_label_change;
    if (want == cur && annot_ok && effect_ok) return;
    std::string tkey = "dpu-labels/" + jstr(*dpu, {"metadata", "uid"});
    if (!cm.due(tkey, d.label_propagation_ms / 2)) return;
    json next = *dpu;
    next["spec"]["cluster"]["nodeLabels"] = want;
    next["spec"]["nodeEffect"]["upgradePolicy"]["applyOnLabelChange"] =
        tmpl(cm).apply_on_label_change;
    next["metadata"]["annotations"][names::kLastAppliedLabels] = user.dump();
    st.commit_l(*dpu_ri_, std::move(next));
    cm.clear(tkey);
  }

  // v24.10 (no DPUDevice CRD): the DPUSet template's labels are added to its DPUs, never removed
  // (dpuset_controller.go needUpdate, release-v24.10); true when the DPU was written.
  bool template_only(ControllerManager& cm, const ObjPtr& dpu) {
    json cur = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
    json want = cur;
    const json labels = tmpl(cm).labels;
    for (auto it = labels.begin(); it != labels.end(); ++it) want[it.key()] = *it;
    if (want == cur) return false;
    std::string tkey = "dpu-labels/" + jstr(*dpu, {"metadata", "uid"});
    if (!cm.due(tkey, cm.ctx().delays.label_propagation_ms / 2)) return false;
    cm.clear(tkey);
    json next = *dpu;
    next["spec"]["cluster"]["nodeLabels"] = want;
    cm.store().commit_l(*dpu_ri_, std::move(next));
    return true;
  }

  // 2. A DPU whose DPUDevice is gone is removed; 3. the DPU controller's phases, which carry its
  // spec.cluster.nodeLabels to the DPU-cluster Node (DPF must be able to reach the DPU cluster).
  void dpu(ControllerManager& cm, const std::string& key) {
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    ObjPtr dpu = st.find_key_l(*dpu_ri_, key);
    if (!dpu) return;
    std::string ns = jstr(*dpu, {"metadata", "namespace"});
    std::string dev_name = jstr(*dpu, {"spec", "dpuDeviceName"});
    // a deleted DPUDevice (gone, or terminating behind DPF's dpudevice-protection finalizer)
    ObjPtr device = dev_name.empty() ? nullptr : st.find_l(*dev_ri_, ns, dev_name);
    if (served(*dev_ri_) && !dev_name.empty() && (!device || is_terminating(*device)) &&
        !is_terminating(*dpu)) {
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
    if (dpu && !is_terminating(*dpu) && !served(*dev_ri_) && template_only(cm, dpu)) return;
    if (!cm.dpu_reachable()) return;
    if (!dpu || is_terminating(*dpu)) return;
    std::string name = jstr(*dpu, {"metadata", "name"});
    std::string uid = jstr(*dpu, {"metadata", "uid"});
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
    json next = *dpu;
    const std::string phase = jstr(*dpu, {"status", "phase"}, "Ready");
    const bool node_ready = node_is_ready(*node);
    if (phase == "Ready") {
      // state/ready.go: a Node that is not Ready holds the DPU here (Ready=False), nothing moves
      if (!node_ready) {
        if (set_condition(next, "Ready", "False", "NodeNotReady",
                          "DPU's Node " + name + " is not Ready"))
          st.commit_l(*dpu_ri_, std::move(next));
        return;
      }
      bool changed = set_condition(next, "Ready", "True", "DPUReady", "");
      json desired = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
      if (desired != parse_last_applied(*node)) {
        bool effect = jbool(*dpu, {"spec", "nodeEffect", "upgradePolicy", "applyOnLabelChange"});
        next["status"]["phase"] = effect ? "Node Effect" : "DPU Cluster Config";
        if (effect) next["status"]["postProvisioningNodeEffect"] = true;
        set_condition(next, "Ready", "False", effect ? "RerunNodeEffect" : "RerunClusterConfig",
                      effect ? "rerun node effect" : "rerun cluster config");
        changed = true;
      }
      if (changed) st.commit_l(*dpu_ri_, std::move(next));
      return;
    }
    if (phase == "Node Effect") {
      // node_effect.go: the host's node effect (taint, drain, hold) runs, then the DPU goes on
      // to DPU Cluster Config
      std::string tkey = "dpu-node-effect/" + uid;
      if (!cm.due(tkey, d.node_effect_ms)) return;
      cm.clear(tkey);
      next["status"]["phase"] = "DPU Cluster Config";
      next["status"].erase("postProvisioningNodeEffect");
      set_condition(next, "NodeEffectReady", "True", "NodeEffectReady", "");
      st.commit_l(*dpu_ri_, std::move(next));
      return;
    }
    if (phase == "DPU Cluster Config") {
      if (!node_ready) {
        if (set_condition(next, "DPUClusterReady", "False", "NodeNotReady", "node is not ready"))
          st.commit_l(*dpu_ri_, std::move(next));
        return;
      }
      std::string tkey = "node-labels/" + uid;
      if (!cm.due(tkey, d.label_propagation_ms - d.label_propagation_ms / 2)) return;
      cm.clear(tkey);
      // UpdateLabelsAndAnnotationsToNode, from the DPU's spec as it is now
      json desired = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
      json labels = apply_labels(string_map(jptr(*node, {"metadata", "labels"})),
                                 parse_last_applied(*node), desired);
      json node_next = *node;
      node_next["metadata"]["labels"] = labels;
      node_next["metadata"]["annotations"][names::kLastAppliedLabels] = desired.dump();
      st.commit_l(*node_ri_, std::move(node_next));
      set_condition(next, "DPUClusterReady", "True", "DPUClusterReady", "cluster configured");
      next["status"]["phase"] = "Node Effect Removal";
      st.commit_l(*dpu_ri_, std::move(next));
      return;
    }
    if (phase == "Node Effect Removal") {
      set_condition(next, "NodeEffectRemoved", "True", "NodeEffectRemoved", "");
      next["status"]["phase"] = "Ready";
      st.commit_l(*dpu_ri_, std::move(next));
    }
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
  std::map<std::string, std::string> conflicts_;  // DPUDevice key -> ClusterMetadataConflict text
  Template tmpl_;
  Template seen_;  // the template on_knobs last acted on
  uint64_t tmpl_seq_ = static_cast<uint64_t>(-1);
};

}  // namespace

std::unique_ptr<Controller> make_placement_controller() {
  return std::make_unique<PlacementController>();
}

}  // namespace dpfsim
