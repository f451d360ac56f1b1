// Generic DaemonSet controller: ControllerRevisions (<ds>-<hash>, increasing revision), one Pod per
// Node that should run it (node affinity / nodeSelector / taints: daemon_pod.h), created unbound
// for the scheduler to bind, rolling updates honouring maxUnavailable and maxSurge, status. Pod
// creates go through the DPU cluster's admission (DPF's privileged-pod policy, admission.h): a
// denied create is a FailedCreate Event and ReplicaFailure condition, as the real controller's.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "admission.h"
#include "controller_manager.h"
#include "daemon_pod.h"
#include "daemonset_parts.h"
#include "node_selector.h"
#include "profile.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

bool pod_ready(const json& pod) {
  const json* cs = jptr(pod, {"status", "conditions"});
  if (!cs || !cs->is_array()) return false;
  for (const auto& c : *cs)
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

const json* controller_ref(const json& obj, const char* kind) {
  const json* refs = jptr(obj, {"metadata", "ownerReferences"});
  if (!refs || !refs->is_array()) return nullptr;
  for (const auto& r : *refs)
    if (r.value("kind", "") == kind && r.value("controller", false)) return &r;
  return nullptr;
}

}  // namespace

std::string template_hash(const json& pod_template) {
  return safe_encode_hash(fnv1a32(pod_template.dump()));
}

namespace {

struct DsState {
  std::string uid, hash;
  long long gen = -1;
  SelectorInfo sel;
  std::unordered_map<std::string, NodeContribution> nodes;
  Sums sums;
  std::set<std::string> old_ready;            // nodes with only an old, ready pod, by name
  std::set<std::string> dirty;                // nodes to classify again
  bool full = true;                           // classify every candidate node
  std::map<std::string, std::string> denied;  // node -> admission message of its failed create
  std::string last_denied;
};

const json* controller_ref_any(const json& obj) {
  const json* refs = jptr(obj, {"metadata", "ownerReferences"});
  if (!refs || !refs->is_array()) return nullptr;
  for (const auto& r : *refs)
    if (r.value("controller", false)) return &r;
  return nullptr;
}

// Items: "ds:<ns>/<name>" (a DaemonSet: its revisions, the dirty nodes, rollout and status) and
// "gc:<uid>" (pods and revisions of a DaemonSet that is gone).
class DaemonSetController : public Controller {
 public:
  const char* name() const override { return "daemonset"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr& obj, const ObjPtr& prev) override {
    bool deleted = std::strcmp(type, "DELETED") == 0;
    Store& st = cm.store();
    if (&ri == ds_ri_) {
      if (deleted) {
        unindex_selector(key);
        drop_state(key);
        cm.enqueue(ControllerManager::kDaemonSet, "gc:" + jstr(*obj, {"metadata", "uid"}));
        return;
      }
      const json* tmpl_spec = jptr(*obj, {"spec", "template", "spec"});
      index_selector(key, analyze_selector(tmpl_spec ? *tmpl_spec : json::object()));
      cm.enqueue(ControllerManager::kDaemonSet, "ds:" + key);
    } else if (&ri == pod_ri_ || &ri == cr_ri_) {
      for (const ObjPtr& o : {obj, prev}) {
        if (!o) continue;
        const json* refs = jptr(*o, {"metadata", "ownerReferences"});
        if (!refs || !refs->is_array()) continue;
        for (const auto& r : *refs) {
          std::string uid = r.value("uid", "");
          const ResourceInfo* ori = nullptr;
          std::string dkey;
          if (!st.find_uid_l(uid, ori, dkey)) {
            if (r.value("kind", "") == "DaemonSet" && r.value("controller", false))
              cm.enqueue(ControllerManager::kDaemonSet, "gc:" + uid);
            continue;
          }
          if (ori != ds_ri_) continue;
          if (&ri == pod_ri_) {
            std::string node = pod_target_node(*o);
            if (!node.empty()) state(dkey).dirty.insert(node);
          }
          cm.enqueue(ControllerManager::kDaemonSet, "ds:" + dkey);
        }
      }
    } else if (&ri == node_ri_) {
      on_node(cm, type, key, obj, prev);
    } else if (&ri == svc_ri_ || &ri == ns_ri_) {
      // Admission depends on the DPUServices (the allowlist) and the namespace's labels: creates
      // it denied are tried again.
      for (const auto& dkey : denied_ds_) {
        auto it = states_.find(dkey);
        if (it == states_.end()) continue;
        for (const auto& [node, msg] : it->second.denied) it->second.dirty.insert(node);
        cm.enqueue(ControllerManager::kDaemonSet, "ds:" + dkey);
      }
    }
  }

  void on_clear() override {
    states_.clear();
    by_ref_key_.clear();
    universal_.clear();
    ref_keys_of_.clear();
    ds_of_node_.clear();
    denied_ds_.clear();
  }

  void enqueue_all(ControllerManager& cm) override {
    Store& st = cm.store();
    for (const ObjPtr& o : st.list_l(*ds_ri_)) {
      std::string key = Store::key_of(*ds_ri_, *o);
      state(key).full = true;
      cm.enqueue(ControllerManager::kDaemonSet, "ds:" + key);
    }
    // Pods and revisions whose DaemonSet is gone.
    for (const ResourceInfo* r : {pod_ri_, cr_ri_})
      for (const ObjPtr& o : st.list_l(*r))
        if (const json* ref = controller_ref_any(*o); ref && ref->value("kind", "") == "DaemonSet")
          cm.enqueue(ControllerManager::kDaemonSet, "gc:" + ref->value("uid", ""));
  }

  void reconcile(ControllerManager& cm, const std::string& item) override {
    if (item.rfind("gc:", 0) == 0)
      gc(cm, item.substr(3));
    else
      daemonset(cm, item.substr(3));
  }

 private:
  DsState& state(const std::string& key) { return states_[key]; }

  void drop_state(const std::string& key) {
    auto it = states_.find(key);
    if (it == states_.end()) return;
    for (const auto& [node, c] : it->second.nodes) index_remove(ds_of_node_, node, key);
    states_.erase(it);
    denied_ds_.erase(key);
  }

  void note_denied(const std::string& key, const DsState& s) {
    if (s.denied.empty())
      denied_ds_.erase(key);
    else
      denied_ds_.insert(key);
  }

  void index_selector(const std::string& key, const SelectorInfo& si) {
    unindex_selector(key);
    std::vector<std::string> keys = si.ref_keys;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (const auto& k : keys) index_add(by_ref_key_, k, key);
    ref_keys_of_[key] = keys;
    if (si.universal()) universal_.insert(key);
  }

  void unindex_selector(const std::string& key) {
    auto it = ref_keys_of_.find(key);
    if (it != ref_keys_of_.end()) {
      for (const auto& k : it->second) index_remove(by_ref_key_, k, key);
      ref_keys_of_.erase(it);
    }
    universal_.erase(key);
  }

  void mark(ControllerManager& cm, const std::string& dkey, const std::string& node) {
    state(dkey).dirty.insert(node);
    cm.enqueue(ControllerManager::kDaemonSet, "ds:" + dkey);
  }

  // A node appeared, changed labels or went away: the DaemonSets it may matter to.
  void on_node(ControllerManager& cm, const char* type, const std::string& node, const ObjPtr& obj,
               const ObjPtr& prev) {
    std::set<std::string> hit;
    static const json kNone = json::object();
    auto labels_of = [](const ObjPtr& o) -> const json& {
      const json* l = o ? jptr(*o, {"metadata", "labels"}) : nullptr;
      return l && l->is_object() ? *l : kNone;
    };
    bool gone = std::strcmp(type, "DELETED") == 0 ||
                (is_terminating(*obj) && !(prev && is_terminating(*prev)));
    if (std::strcmp(type, "ADDED") == 0) {
      hit = universal_;
      const json& l = labels_of(obj);
      for (auto it = l.begin(); it != l.end(); ++it)
        if (auto r = by_ref_key_.find(it.key()); r != by_ref_key_.end())
          hit.insert(r->second.begin(), r->second.end());
    } else if (!gone) {
      const json& a = labels_of(prev);
      const json& b = labels_of(obj);
      const json* ta = prev ? jptr(*prev, {"spec", "taints"}) : nullptr;
      const json* tb = jptr(*obj, {"spec", "taints"});
      if ((ta == nullptr) != (tb == nullptr) || (ta && *ta != *tb)) {
        // a taint decides whether a daemon pod may run here: every DaemonSet that can select it
        hit = universal_;
        for (auto it = b.begin(); it != b.end(); ++it)
          if (auto r = by_ref_key_.find(it.key()); r != by_ref_key_.end())
            hit.insert(r->second.begin(), r->second.end());
        if (auto it = ds_of_node_.find(node); it != ds_of_node_.end())
          hit.insert(it->second.begin(), it->second.end());
      }
      if (a != b) {
        std::set<std::string> changed;
        for (auto it = a.begin(); it != a.end(); ++it) {
          auto jt = b.find(it.key());
          if (jt == b.end() || *jt != it.value()) changed.insert(it.key());
        }
        for (auto it = b.begin(); it != b.end(); ++it)
          if (!a.contains(it.key())) changed.insert(it.key());
        for (const auto& k : changed)
          if (auto r = by_ref_key_.find(k); r != by_ref_key_.end())
            hit.insert(r->second.begin(), r->second.end());
      }
    }
    if (gone || std::strcmp(type, "ADDED") == 0) {
      if (auto it = ds_of_node_.find(node); it != ds_of_node_.end())
        hit.insert(it->second.begin(), it->second.end());
      if (const auto* pods = cm.store().pods_on_node_l(node))
        for (const auto& pk : *pods)
          if (ObjPtr p = cm.store().find_key_l(*pod_ri_, pk))
            if (const json* ref = controller_ref_any(*p)) {
              const ResourceInfo* ori = nullptr;
              std::string dkey;
              if (cm.store().find_uid_l(ref->value("uid", ""), ori, dkey) && ori == ds_ri_)
                hit.insert(dkey);
            }
    }
    for (const auto& dkey : hit) mark(cm, dkey, node);
  }

  // Nodes a full look at the DaemonSet covers.
  std::set<std::string> candidates(Store& st, const DsState& s) {
    std::set<std::string> out;
    if (s.sel.all_nodes) {
      for (const ObjPtr& n : st.list_l(*node_ri_)) out.insert(jstr(*n, {"metadata", "name"}));
    } else {
      for (const auto& keys : s.sel.required) {
        const std::set<std::string>* best = nullptr;
        bool none = false;
        for (const auto& k : keys) {
          const auto* set = st.with_label_key_l(*node_ri_, k);
          if (!set) {
            none = true;
            break;
          }
          if (!best || set->size() < best->size()) best = set;
        }
        if (!none && best) out.insert(best->begin(), best->end());
      }
      out.insert(s.sel.names.begin(), s.sel.names.end());
    }
    for (const auto& [node, c] : s.nodes) out.insert(node);
    if (const auto* pods = st.owned_by_l(*pod_ri_, s.uid))
      for (const auto& pk : *pods)
        if (ObjPtr p = st.find_key_l(*pod_ri_, pk)) {
          std::string n = pod_target_node(*p);
          if (!n.empty()) out.insert(n);
        }
    return out;
  }

  void set_contribution(const std::string& dkey, DsState& s, const std::string& node,
                        NodeContribution c) {
    auto it = s.nodes.find(node);
    if (it != s.nodes.end()) {
      s.sums.add(it->second, -1);
      if (!it->second.old_ready_pod.empty()) s.old_ready.erase(node);
      s.nodes.erase(it);
      index_remove(ds_of_node_, node, dkey);
    }
    if (!c.any()) return;
    s.sums.add(c, +1);
    if (!c.old_ready_pod.empty()) s.old_ready.insert(node);
    s.nodes.emplace(node, std::move(c));
    index_add(ds_of_node_, node, dkey);
  }

  struct Ctx {
    ControllerManager& cm;
    Store& st;
    const json& ds;
    const json& tmpl;
    std::string ns, name, uid, hash, key;
    long long gen;
    json owner;
  };

  // Creates the DaemonSet's pod for a node, unbound (the scheduler binds it); false when
  // admission denied it (recorded in s.denied).
  bool create_pod(Ctx& c, DsState& s, const json& node) {
    std::string nname = jstr(node, {"metadata", "name"});
    json pod = new_daemon_pod(c.tmpl, nname, c.hash, c.gen, c.owner);
    std::string pod_name;
    for (int i = 0; i < 100; ++i) {
      pod_name = c.name + "-" + c.cm.ctx().prng.k8s_suffix(5);
      if (!c.st.find_l(*pod_ri_, c.ns, pod_name)) break;
    }
    pod["metadata"]["name"] = pod_name;
    pod["metadata"]["generateName"] = c.name + "-";
    pod["metadata"]["namespace"] = c.ns;
    bool enforce = true;
    {
      std::lock_guard<std::mutex> l(c.cm.ctx().knobs.mu);
      enforce = c.cm.ctx().knobs.privileged_pod_enforcement;
    }
    if (auto denied = privileged_admission_l(c.st, enforce, *pod_ri_, pod)) {
      s.denied[nname] = "Error creating: " + jstr(json::parse(denied->body), {"message"});
      s.last_denied = s.denied[nname];
      return false;
    }
    s.denied.erase(nname);
    c.st.create_l(*pod_ri_, std::move(pod));
    return true;
  }

  // One node of one DaemonSet: creates or deletes pods and returns the node's contribution.
  NodeContribution classify(Ctx& c, DsState& s, const std::string& nname) {
    NodeContribution out;
    Store& st = c.st;
    std::vector<ObjPtr> live, terminating;
    if (const auto* pods = st.pods_on_node_l(nname))
      for (const auto& pk : *pods) {
        ObjPtr p = st.find_key_l(*pod_ri_, pk);
        if (!p) continue;
        bool mine = false;
        if (const json* refs = jptr(*p, {"metadata", "ownerReferences"}); refs && refs->is_array())
          for (const auto& r : *refs)
            if (r.value("uid", "") == c.uid) mine = true;
        if (mine) (is_terminating(*p) ? terminating : live).push_back(p);
      }
    ObjPtr node = st.find_l(*node_ri_, "", nname);
    if (!node || is_terminating(*node)) {
      // Pods on nodes that no longer exist.
      for (const auto& p : live) st.mark_deleting_l(*pod_ri_, p, 0);
      s.denied.erase(nname);
      return out;
    }
    static const json kEmpty = json::object();
    const json* pod_spec = jptr(c.tmpl, {"spec"});
    const ShouldRun should = node_should_run_daemon_pod(pod_spec ? *pod_spec : kEmpty, *node);
    if (!should.run) {
      s.denied.erase(nname);
      if (should.keep) {
        // an untolerated NoSchedule taint: no new pod, an existing one stays (even unbound)
        out.current = !live.empty();
        return out;
      }
      for (const auto& p : live) st.mark_deleting_l(*pod_ri_, p, 30);
      out.misscheduled = !live.empty();
      return out;
    }
    out.desired = true;
    if (live.empty()) {
      out.unavailable = true;
      if (!terminating.empty()) return out;  // wait for the old pod to go away
      if (create_pod(c, s, *node)) out.current = true;
      return out;
    }
    s.denied.erase(nname);
    std::vector<ObjPtr> fresh, old;
    for (const auto& p : live)
      (jstr(*p, {"metadata", "labels", names::kRevisionHashLabel}) == c.hash ? fresh : old)
          .push_back(p);
    auto by_ready = [&](std::vector<ObjPtr>& v) {
      std::stable_sort(v.begin(), v.end(), [&](const ObjPtr& a, const ObjPtr& b) {
        return pod_ready(*a) > pod_ready(*b);
      });
      for (size_t i = 1; i < v.size(); ++i) st.mark_deleting_l(*pod_ri_, v[i], 30);
      if (v.size() > 1) v.resize(1);
    };
    by_ready(fresh);
    by_ready(old);
    out.current = true;
    if (!fresh.empty()) {
      out.updated = true;
      if (pod_ready(*fresh[0])) {
        out.ready = true;
        for (const auto& p : old) st.mark_deleting_l(*pod_ri_, p, 30);  // surge done here
      } else if (!old.empty() && pod_ready(*old[0])) {
        out.ready = true;  // surge in progress: the old pod still serves
        out.surging = true;
      } else {
        out.unavailable = true;
        for (const auto& p : old) st.mark_deleting_l(*pod_ri_, p, 30);
      }
      return out;
    }
    if (pod_ready(*old[0])) {
      out.ready = true;
      out.old_ready_pod = Store::key_of(*pod_ri_, *old[0]);
    } else {
      out.unavailable = true;
      st.mark_deleting_l(*pod_ri_, old[0], 30);  // old and not ready: replace right away
    }
    return out;
  }

  void daemonset(ControllerManager& cm, const std::string& key) {
    Store& st = cm.store();
    ObjPtr ds = st.find_key_l(*ds_ri_, key);
    if (!ds) {
      drop_state(key);
      return;
    }
    if (is_terminating(*ds)) return;  // Argo's foreground deletion takes it from here
    std::string ns = jstr(*ds, {"metadata", "namespace"});
    std::string name = jstr(*ds, {"metadata", "name"});
    std::string uid = jstr(*ds, {"metadata", "uid"});
    static const json kEmpty = json::object();
    const json* tmpl_p = jptr(*ds, {"spec", "template"});
    const json& tmpl = tmpl_p ? *tmpl_p : kEmpty;
    long long ds_gen = (*ds)["metadata"].value("generation", 1LL);
    DsState& s = state(key);
    if (s.uid != uid) {
      drop_state(key);
      DsState& fresh = state(key);
      fresh.uid = uid;
      return daemonset(cm, key);
    }
    // The template is part of the spec: it can only change with the generation.
    if (s.gen != ds_gen || s.hash.empty()) {
      std::string h = template_hash(tmpl);
      if (s.hash != h || s.gen != ds_gen) s.full = true;
      s.hash = h;
      s.gen = ds_gen;
    }
    const std::string& hash = s.hash;
    if (s.full) {
      const json* ps = jptr(tmpl, {"spec"});
      s.sel = analyze_selector(ps ? *ps : kEmpty);
      std::set<std::string> all = candidates(st, s);
      s.dirty.insert(all.begin(), all.end());
      s.full = false;
    }
    json owner = json::array({{{"apiVersion", "apps/v1"},
                               {"kind", "DaemonSet"},
                               {"name", name},
                               {"uid", uid},
                               {"controller", true},
                               {"blockOwnerDeletion", true}}});
    Ctx c{cm, st, *ds, tmpl, ns, name, uid, hash, key, ds_gen, owner};

    const std::vector<ObjPtr> revs =
        sync_current_revision(st, *cr_ri_, tmpl, ns, name, uid, hash, owner);

    // The nodes that changed, a bounded number per call so one big DaemonSet does not hold the
    // store for long; rollout and status wait until every dirty node is classified.
    constexpr size_t kNodesPerCall = 256;
    size_t n = 0;
    while (!s.dirty.empty() && n < kNodesPerCall) {
      std::string node = *s.dirty.begin();
      s.dirty.erase(s.dirty.begin());
      set_contribution(key, s, node, classify(c, s, node));
      ++n;
    }
    if (!s.dirty.empty()) {
      note_denied(key, s);
      cm.enqueue(ControllerManager::kDaemonSet, "ds:" + key);
      return;
    }

    // Rolling update (apps/v1 defaults: maxUnavailable 1, maxSurge 0).
    long long ready = s.sums.ready;
    std::string strategy = jstr(*ds, {"spec", "updateStrategy", "type"}, "RollingUpdate");
    if (strategy == "RollingUpdate" && !s.old_ready.empty()) {
      const json* ru = jptr(*ds, {"spec", "updateStrategy", "rollingUpdate"});
      long long desired = s.sums.desired;
      long long max_surge = int_or_percent(ru ? jptr(*ru, {"maxSurge"}) : nullptr, desired, 0);
      long long max_unavailable =
          int_or_percent(ru ? jptr(*ru, {"maxUnavailable"}) : nullptr, desired, 1);
      std::vector<std::string> cands(s.old_ready.begin(), s.old_ready.end());
      if (max_surge > 0) {
        long long budget = max_surge - s.sums.surging;
        for (const auto& node : cands) {
          if (budget <= 0) break;
          ObjPtr nobj = st.find_l(*node_ri_, "", node);
          if (nobj && create_pod(c, s, *nobj)) --budget;
        }
      } else {
        if (max_unavailable < 1) max_unavailable = 1;
        long long budget = max_unavailable - s.sums.unavailable;
        for (const auto& node : cands) {
          if (budget <= 0) break;
          auto it = s.nodes.find(node);
          ObjPtr pod =
              it == s.nodes.end() ? nullptr : st.find_key_l(*pod_ri_, it->second.old_ready_pod);
          if (!pod) continue;
          st.mark_deleting_l(*pod_ri_, pod, 30);
          --budget;
          --ready;
        }
      }
    }
    note_denied(key, s);
    std::string denied = s.denied.empty() ? "" : s.last_denied;
    if (!denied.empty()) record_failed_create(st, *ev_ri_, ns, name, uid, denied);

    prune_revisions(st, *cr_ri_, revs, name + "-" + hash,
                    (*ds)["spec"].value("revisionHistoryLimit", 10LL));

    json status =
        daemonset_status(s.sums, ready, ds_gen, denied, jptr(*ds, {"status", "conditions"}));
    ObjPtr latest = st.find_key_l(*ds_ri_, key);
    const json* cur_status = jptr(*latest, {"status"});
    if (cur_status && *cur_status == status &&
        jstr(*latest, {"metadata", "annotations", names::kCurrentRevisionAnnotation}) == hash)
      return;  // nothing to write (checked before copying the object)
    json next = *latest;
    next["status"] = std::move(status);
    next["metadata"]["annotations"][names::kCurrentRevisionAnnotation] = hash;
    if (next != *latest) st.commit_l(*ds_ri_, std::move(next));
  }

  // Garbage collection: pods and revisions whose DaemonSet (uid) is gone.
  void gc(ControllerManager& cm, const std::string& uid) {
    Store& st = cm.store();
    const ResourceInfo* ori = nullptr;
    std::string okey;
    if (uid.empty() || st.find_uid_l(uid, ori, okey)) return;
    std::vector<ObjPtr> pods, crs;
    if (const auto* keys = st.owned_by_l(*pod_ri_, uid))
      for (const auto& k : *keys)
        if (ObjPtr p = st.find_key_l(*pod_ri_, k)) pods.push_back(p);
    if (const auto* keys = st.owned_by_l(*cr_ri_, uid))
      for (const auto& k : *keys)
        if (ObjPtr r = st.find_key_l(*cr_ri_, k)) crs.push_back(r);
    for (const ObjPtr& p : pods) {
      const json* ref = controller_ref(*p, "DaemonSet");
      if (ref && ref->value("uid", "") == uid && !is_terminating(*p))
        st.mark_deleting_l(*pod_ri_, p, 30);
    }
    for (const ObjPtr& cr : crs) {
      const json* ref = controller_ref(*cr, "DaemonSet");
      if (ref && ref->value("uid", "") == uid)
        st.erase_l(*cr_ri_, jstr(*cr, {"metadata", "namespace"}), jstr(*cr, {"metadata", "name"}));
    }
  }

  const ResourceInfo* ds_ri_ = &known_resource(ClusterId::Dpu, "daemonsets");
  const ResourceInfo* cr_ri_ = &known_resource(ClusterId::Dpu, "controllerrevisions");
  const ResourceInfo* pod_ri_ = &known_resource(ClusterId::Dpu, "pods");
  const ResourceInfo* node_ri_ = &known_resource(ClusterId::Dpu, "nodes");
  const ResourceInfo* ev_ri_ = &known_resource(ClusterId::Dpu, "events");
  const ResourceInfo* svc_ri_ = &known_resource(ClusterId::Management, "dpuservices");
  const ResourceInfo* ns_ri_ = &known_resource(ClusterId::Dpu, "namespaces");

  std::unordered_map<std::string, DsState> states_;                    // by DaemonSet key
  std::unordered_map<std::string, std::set<std::string>> by_ref_key_;  // node label key -> DS
  std::set<std::string> universal_;  // DaemonSets that may want a node without a given label
  std::unordered_map<std::string, std::vector<std::string>> ref_keys_of_;
  std::unordered_map<std::string, std::set<std::string>> ds_of_node_;  // node -> DS (contributing)
  std::set<std::string> denied_ds_;  // DaemonSets with a node whose pod admission denied
};

}  // namespace

std::unique_ptr<Controller> make_daemonset_controller() {
  return std::make_unique<DaemonSetController>();
}

}  // namespace dpfsim
