// DPUDevice.spec.cluster.nodeLabels -> DPU.spec.cluster.nodeLabels -> DPU-cluster Node labels.
//
// Mirrors DPF's DPUSet/DPU controllers: user labels are tracked in the annotation
// provisioning.dpu.nvidia.com/last-applied-labels-on-dpu (on the DPU: the device's user labels; on
// the Node: the DPU's full nodeLabels) so keys removed upstream are removed downstream while labels
// that DPF never applied (e.g. set with kubectl) are kept. Each hop takes label_propagation_ms / 2.
//
// Work is incremental: each tick looks only at objects that changed (from the store's event
// history) or have a pending delay; a full resync runs every 2 s (and whenever the history is
// insufficient).
#include <map>
#include <set>

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

struct PlacementState {
  uint64_t last_rv = 0;
  SteadyClock::time_point last_full{};
  // ns/name of DPUDevices and DPUs, names of Nodes, to look at again next tick.
  std::set<std::string> pending_devs, pending_dpus, pending_nodes;
  std::map<std::string, std::string> dpu_ns_by_name;
};

PlacementState& state() {
  static PlacementState s;  // controller thread only
  return s;
}

std::string key_of(const json& o) {
  return jstr(o, {"metadata", "namespace"}) + "/" + jstr(o, {"metadata", "name"});
}

}  // namespace

void reconcile_placement(ControllerManager& cm) {
  Store& st = cm.store();
  const Delays& d = cm.ctx().delays;
  const ResourceInfo& dev_ri = *find_resource_by_plural(ClusterId::Management, "dpudevices");
  const ResourceInfo& dpu_ri = *find_resource_by_plural(ClusterId::Management, "dpus");
  const ResourceInfo& node_ri = *find_resource_by_plural(ClusterId::Dpu, "nodes");
  int half1 = d.label_propagation_ms / 2;
  int half2 = d.label_propagation_ms - half1;
  PlacementState& ps = state();

  // Decide what to look at.
  bool full = cm.now() - ps.last_full > std::chrono::seconds(2);
  std::vector<WatchEvent> evs;
  if (!full && !st.changes_since_l(ps.last_rv, evs)) full = true;
  ps.last_rv = st.rv_l();
  std::set<std::string> devs, dpus, nodes;
  if (!full) {
    devs.swap(ps.pending_devs);
    dpus.swap(ps.pending_dpus);
    nodes.swap(ps.pending_nodes);
    for (const auto& ev : evs) {
      const json& o = *ev.obj;
      std::string ns = jstr(o, {"metadata", "namespace"});
      std::string name = jstr(o, {"metadata", "name"});
      if (ev.ri == &dev_ri) {
        devs.insert(ns + "/" + name);
        std::string node = jstr(o, {"metadata", "labels", names::kDpuNodeNameLabel});
        if (!node.empty()) dpus.insert(ns + "/" + dpu_object_name(node, name));
      } else if (ev.ri == &dpu_ri) {
        dpus.insert(ns + "/" + name);
        devs.insert(ns + "/" + jstr(o, {"spec", "dpuDeviceName"}));
        nodes.insert(name);
        if (ev.type == "DELETED")
          ps.dpu_ns_by_name.erase(name);
        else
          ps.dpu_ns_by_name[name] = ns;
      } else if (ev.ri == &node_ri) {
        nodes.insert(name);
        auto it = ps.dpu_ns_by_name.find(name);
        if (it != ps.dpu_ns_by_name.end()) dpus.insert(it->second + "/" + name);
      }
    }
  }
  ps.pending_devs.clear();
  ps.pending_dpus.clear();
  ps.pending_nodes.clear();
  auto pick = [&](const ResourceInfo& ri, const std::set<std::string>& keys, bool cluster_scoped) {
    if (full) return st.list_l(ri);
    std::vector<ObjPtr> out;
    for (const auto& k : keys) {
      ObjPtr o;
      if (cluster_scoped) {
        o = st.find_l(ri, "", k);
      } else {
        auto slash = k.find('/');
        o = st.find_l(ri, k.substr(0, slash), k.substr(slash + 1));
      }
      if (o) out.push_back(o);
    }
    return out;
  };
  if (full) {
    ps.last_full = cm.now();
    ps.dpu_ns_by_name.clear();
    for (const ObjPtr& dpu : st.list_l(dpu_ri))
      ps.dpu_ns_by_name[jstr(*dpu, {"metadata", "name"})] = jstr(*dpu, {"metadata", "namespace"});
  }

  // 1. DPUDevice -> DPU.
  for (const ObjPtr& dev : pick(dev_ri, devs, false)) {
    if (is_terminating(*dev)) continue;
    std::string ns = jstr(*dev, {"metadata", "namespace"});
    std::string dev_name = jstr(*dev, {"metadata", "name"});
    std::string dpu_node = jstr(*dev, {"metadata", "labels", names::kDpuNodeNameLabel});
    if (dpu_node.empty()) continue;
    json user = string_map(jptr(*dev, {"spec", "cluster", "nodeLabels"}));
    std::string dpu_name = dpu_object_name(dpu_node, dev_name);
    ObjPtr dpu = st.find_l(dpu_ri, ns, dpu_name);
    if (!dpu) {
      std::string key = "dpu-create/" + jstr(*dev, {"metadata", "uid"});
      if (cm.due(key, d.node_provisioning_ms / 2)) {
        st.create_l(dpu_ri, make_dpu(ns, *dev, user));
        cm.clear(key);
      } else {
        ps.pending_devs.insert(ns + "/" + dev_name);
      }
      continue;
    }
    if (is_terminating(*dpu)) continue;
    json last = parse_last_applied(*dpu);
    json cur = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
    json want = apply_labels(cur, last, user);
    bool annot_ok =
        jstr(*dpu, {"metadata", "annotations", names::kLastAppliedLabels}) == user.dump();
    if (want == cur && annot_ok) continue;
    std::string key = "dpu-labels/" + jstr(*dpu, {"metadata", "uid"});
    if (!cm.due(key, half1)) {
      ps.pending_devs.insert(ns + "/" + dev_name);
      continue;
    }
    json next = *dpu;
    next["spec"]["cluster"]["nodeLabels"] = want;
    next["metadata"]["annotations"][names::kLastAppliedLabels] = user.dump();
    st.commit_l(dpu_ri, std::move(next));
    cm.clear(key);
  }

  std::vector<ObjPtr> dpu_list = pick(dpu_ri, dpus, false);
  // 2. DPUs whose DPUDevice is gone are removed.
  for (const ObjPtr& dpu : dpu_list) {
    std::string dev_name = jstr(*dpu, {"spec", "dpuDeviceName"});
    if (dev_name.empty() || st.find_l(dev_ri, jstr(*dpu, {"metadata", "namespace"}), dev_name))
      continue;
    if (is_terminating(*dpu)) continue;
    std::string key = "dpu-gc/" + jstr(*dpu, {"metadata", "uid"});
    if (!cm.due(key, d.node_provisioning_ms / 2)) {
      ps.pending_dpus.insert(key_of(*dpu));
      continue;
    }
    if (jptr(*dpu, {"metadata", "finalizers"}))
      st.mark_deleting_l(dpu_ri, dpu, 0);
    else
      st.erase_l(dpu_ri, jstr(*dpu, {"metadata", "namespace"}), jstr(*dpu, {"metadata", "name"}));
    cm.clear(key);
  }

  // 3. DPU -> DPU-cluster Node (DPF must be able to reach the DPU cluster).
  if (!cm.dpu_reachable()) {
    ps.last_full = {};  // full pass once the DPU cluster is reachable again
    return;
  }
  for (const ObjPtr& dpu_old : dpu_list) {
    ObjPtr dpu = st.find_l(dpu_ri, jstr(*dpu_old, {"metadata", "namespace"}),
                           jstr(*dpu_old, {"metadata", "name"}));
    if (!dpu || is_terminating(*dpu)) continue;
    std::string name = jstr(*dpu, {"metadata", "name"});
    std::string uid = jstr(*dpu, {"metadata", "uid"});
    json desired = string_map(jptr(*dpu, {"spec", "cluster", "nodeLabels"}));
    ObjPtr node = st.find_l(node_ri, "", name);
    if (!node) {
      std::string key = "node-create/" + uid;
      if (cm.due(key, d.node_provisioning_ms - d.node_provisioning_ms / 2)) {
        st.create_l(node_ri, make_node(*dpu, index_from_name(name)));
        cm.clear(key);
      } else {
        ps.pending_dpus.insert(key_of(*dpu));
      }
      continue;
    }
    if (is_terminating(*node)) continue;
    json last = parse_last_applied(*node);
    json cur = string_map(jptr(*node, {"metadata", "labels"}));
    json want = apply_labels(cur, last, desired);
    bool annot_ok =
        jstr(*node, {"metadata", "annotations", names::kLastAppliedLabels}) == desired.dump();
    if (want == cur && annot_ok) continue;
    std::string key = "node-labels/" + uid;
    if (!cm.due(key, half2)) {
      ps.pending_dpus.insert(key_of(*dpu));
      continue;
    }
    json next = *node;
    next["metadata"]["labels"] = want;
    next["metadata"]["annotations"][names::kLastAppliedLabels] = desired.dump();
    st.commit_l(node_ri, std::move(next));
    cm.clear(key);
  }

  // 4. Nodes DPF created (they carry the last-applied annotation) whose DPU is gone are removed.
  for (const ObjPtr& node : pick(node_ri, nodes, true)) {
    if (!jptr(*node, {"metadata", "annotations", names::kLastAppliedLabels})) continue;
    std::string name = jstr(*node, {"metadata", "name"});
    std::string dpu_ns =
        jstr(*node, {"metadata", "labels", names::kDpuNodeNamespaceLabel}, names::kDpfNamespace);
    if (st.find_l(dpu_ri, dpu_ns, name)) continue;
    std::string key = "node-gc/" + jstr(*node, {"metadata", "uid"});
    if (!cm.due(key, d.node_provisioning_ms / 2)) {
      ps.pending_nodes.insert(name);
      continue;
    }
    st.erase_l(node_ri, "", name);
    cm.clear(key);
  }
}

}  // namespace dpfsim
