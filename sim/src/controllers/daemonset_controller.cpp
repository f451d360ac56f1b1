// Generic DaemonSet controller: ControllerRevisions (<ds>-<hash>, increasing revision), one Pod per
// matching Node (node affinity / nodeSelector), rolling updates honouring maxUnavailable and
// maxSurge, status, and the privileged-pod admission policy DPF installs in the DPU cluster.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "controller_manager.h"
#include "node_selector.h"
#include "profile.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

const ResourceInfo& R(ClusterId c, const char* plural) {
  return *find_resource_by_plural(c, plural);
}

bool pod_ready(const json& pod) {
  const json* cs = jptr(pod, {"status", "conditions"});
  if (!cs || !cs->is_array()) return false;
  for (const auto& c : *cs)
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return false;
}

bool owned_by(const json& obj, const std::string& uid) {
  const json* refs = jptr(obj, {"metadata", "ownerReferences"});
  if (!refs || !refs->is_array()) return false;
  for (const auto& r : *refs)
    if (r.value("uid", "") == uid) return true;
  return false;
}

const json* controller_ref(const json& obj, const char* kind) {
  const json* refs = jptr(obj, {"metadata", "ownerReferences"});
  if (!refs || !refs->is_array()) return nullptr;
  for (const auto& r : *refs)
    if (r.value("kind", "") == kind && r.value("controller", false)) return &r;
  return nullptr;
}

long long scaled(const json* v, long long total, long long def) {
  if (!v || v->is_null()) return def;
  if (v->is_number_integer()) return v->get<long long>();
  if (v->is_string()) {
    std::string s = v->get<std::string>();
    if (!s.empty() && s.back() == '%') {
      double pct = std::atof(s.substr(0, s.size() - 1).c_str());
      return static_cast<long long>(std::ceil(pct * static_cast<double>(total) / 100.0));
    }
    return std::atoll(s.c_str());
  }
  return def;
}

std::string node_internal_ip(const json& node) {
  const json* addrs = jptr(node, {"status", "addresses"});
  if (addrs && addrs->is_array())
    for (const auto& a : *addrs)
      if (a.value("type", "") == "InternalIP") return a.value("address", "");
  return "";
}

}  // namespace

std::string template_hash(const json& pod_template) {
  return safe_encode_hash(fnv1a32(pod_template.dump()));
}

void reconcile_daemonsets(ControllerManager& cm) {
  Store& st = cm.store();
  const ResourceInfo& ds_ri = R(ClusterId::Dpu, "daemonsets");
  const ResourceInfo& cr_ri = R(ClusterId::Dpu, "controllerrevisions");
  const ResourceInfo& pod_ri = R(ClusterId::Dpu, "pods");
  const ResourceInfo& node_ri = R(ClusterId::Dpu, "nodes");
  const ResourceInfo& ev_ri = R(ClusterId::Dpu, "events");
  const ResourceInfo& svc_ri = R(ClusterId::Management, "dpuservices");
  // Purely reactive: nothing to do unless something this controller reads changed.
  static uint64_t last_sig = ~0ULL;  // controller thread only
  uint64_t sig = st.resource_seq_l(ds_ri) + st.resource_seq_l(cr_ri) + st.resource_seq_l(pod_ri) +
                 st.resource_seq_l(node_ri) + st.resource_seq_l(svc_ri);
  if (sig == last_sig) return;

  std::vector<ObjPtr> nodes;
  std::map<std::string, ObjPtr> node_by_name;
  for (const ObjPtr& n : st.list_l(node_ri)) {
    node_by_name[jstr(*n, {"metadata", "name"})] = n;
    if (!is_terminating(*n)) nodes.push_back(n);
  }
  std::set<std::string> ds_uids;

  for (ObjPtr ds : st.list_l(ds_ri)) {
    std::string ns = jstr(*ds, {"metadata", "namespace"});
    std::string name = jstr(*ds, {"metadata", "name"});
    std::string uid = jstr(*ds, {"metadata", "uid"});
    ds_uids.insert(uid);
    if (is_terminating(*ds)) continue;
    json tmpl = jptr(*ds, {"spec", "template"}) ? (*ds)["spec"]["template"] : json::object();
    std::string hash = template_hash(tmpl);
    long long ds_gen = (*ds)["metadata"].value("generation", 1LL);
    json owner = json::array({{{"apiVersion", "apps/v1"},
                               {"kind", "DaemonSet"},
                               {"name", name},
                               {"uid", uid},
                               {"controller", true},
                               {"blockOwnerDeletion", true}}});

    // ControllerRevisions.
    std::vector<ObjPtr> revs;
    long long max_rev = 0;
    for (const ObjPtr& cr : st.list_l(cr_ri, ns))
      if (owned_by(*cr, uid)) {
        revs.push_back(cr);
        max_rev = std::max(max_rev, (*cr).value("revision", 0LL));
      }
    std::string cr_name = name + "-" + hash;
    ObjPtr cur_rev;
    for (const auto& r : revs)
      if (jstr(*r, {"metadata", "name"}) == cr_name) cur_rev = r;
    if (!cur_rev) {
      json labels = string_map(jptr(tmpl, {"metadata", "labels"}));
      labels[names::kRevisionHashLabel] = hash;
      json data_tmpl = tmpl;
      data_tmpl["$patch"] = "replace";
      cur_rev = st.create_l(cr_ri, json{{"apiVersion", "apps/v1"},
                                        {"kind", "ControllerRevision"},
                                        {"metadata",
                                         {{"name", cr_name},
                                          {"namespace", ns},
                                          {"labels", labels},
                                          {"ownerReferences", owner}}},
                                        {"data", {{"spec", {{"template", data_tmpl}}}}},
                                        {"revision", max_rev + 1}});
      revs.push_back(cur_rev);
      max_rev += 1;
    } else if ((*cur_rev).value("revision", 0LL) != max_rev) {
      json next = *cur_rev;  // rollback to an older template: it becomes the newest revision
      next["revision"] = max_rev + 1;
      cur_rev = st.commit_l(cr_ri, std::move(next));
      max_rev += 1;
    }

    // Pods per node.
    std::map<std::string, std::vector<ObjPtr>> by_node;
    for (const ObjPtr& p : st.list_l(pod_ri, ns))
      if (owned_by(*p, uid)) by_node[jstr(*p, {"spec", "nodeName"})].push_back(p);

    const json pod_spec = tmpl.contains("spec") ? tmpl["spec"] : json::object();
    long long desired = 0, current = 0, ready = 0, updated = 0, misscheduled = 0;
    std::vector<ObjPtr> old_ready_pods;    // nodes with only an old, ready pod
    std::vector<ObjPtr> surge_candidates;  // nodes (by node) with only an old, ready pod
    long long unavailable = 0, surging = 0;
    std::set<std::string> seen_nodes;
    std::string denied;  // admission denial message (FailedCreate)

    // Privileged-pod admission (DPF's ValidatingAdmissionPolicy in the DPU cluster): pods with a
    // privileged container whose svc.dpu.nvidia.com/service label belongs to a DPUService with
    // security.privileged=false are denied.
    auto admission_error = [&](const std::string& pod_name) -> std::string {
      if (!profile().privileged_cel) return "";
      bool priv = false;
      if (const json* cs = jptr(pod_spec, {"containers"}); cs && cs->is_array())
        for (const auto& c : *cs)
          if (jbool(c, {"securityContext", "privileged"})) priv = true;
      if (!priv) return "";
      std::string sid = jstr(tmpl, {"metadata", "labels", names::kServiceIdLabel});
      if (sid.empty()) return "";
      for (const ObjPtr& svc : st.list_l(svc_ri)) {
        if (jstr(*svc, {"status", "serviceID"}) != sid) continue;
        const json* p = jptr(*svc, {"spec", "security", "privileged"});
        if (p && p->is_boolean() && !p->get<bool>())
          return "pods \"" + pod_name +
                 "\" is forbidden: ValidatingAdmissionPolicy 'dpf-privileged-pod-enforcement' with "
                 "binding 'dpf-privileged-pod-enforcement' denied request: privileged containers "
                 "are not allowed for DPUService " +
                 jstr(*svc, {"metadata", "namespace"}) + "/" + jstr(*svc, {"metadata", "name"}) +
                 " (spec.security.privileged is false)";
      }
      return "";
    };
    auto create_pod = [&](const ObjPtr& node) -> bool {
      std::string nname = jstr(*node, {"metadata", "name"});
      json labels = string_map(jptr(tmpl, {"metadata", "labels"}));
      labels[names::kRevisionHashLabel] = hash;
      labels["pod-template-generation"] = std::to_string(ds_gen);
      json spec = pod_spec;
      spec["nodeName"] = nname;
      spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
          {"nodeSelectorTerms",
           json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                       {"operator", "In"},
                                                       {"values", {nname}}}})}}})}};
      spec["tolerations"] = json::array({{{"key", "node.kubernetes.io/not-ready"},
                                          {"operator", "Exists"},
                                          {"effect", "NoExecute"}},
                                         {{"key", "node.kubernetes.io/unreachable"},
                                          {"operator", "Exists"},
                                          {"effect", "NoExecute"}}});
      std::string pod_name;
      for (int i = 0; i < 100; ++i) {
        pod_name = name + "-" + cm.ctx().prng.k8s_suffix(5);
        if (!st.find_l(pod_ri, ns, pod_name)) break;
      }
      std::string err = admission_error(pod_name);
      if (!err.empty()) {
        denied = "Error creating: " + err;
        return false;
      }
      json md{{"name", pod_name},
              {"generateName", name + "-"},
              {"namespace", ns},
              {"labels", labels},
              {"ownerReferences", owner}};
      if (const json* a = jptr(tmpl, {"metadata", "annotations"});
          a && a->is_object() && !a->empty())
        md["annotations"] = *a;
      std::string now = rfc3339_now();
      json status{{"phase", "Pending"},
                  {"qosClass", "BestEffort"},
                  {"hostIP", node_internal_ip(*node)},
                  {"conditions", json::array({{{"type", "PodScheduled"},
                                               {"status", "True"},
                                               {"lastProbeTime", nullptr},
                                               {"lastTransitionTime", now}}})}};
      st.create_l(pod_ri, json{{"apiVersion", "v1"},
                               {"kind", "Pod"},
                               {"metadata", md},
                               {"spec", spec},
                               {"status", status}});
      return true;
    };

    std::map<std::string, ObjPtr> surge_node;  // pod -> its node, for surge creation
    for (const ObjPtr& node : nodes) {
      std::string nname = jstr(*node, {"metadata", "name"});
      seen_nodes.insert(nname);
      bool should = pod_spec_fits_node(pod_spec, *node);
      std::vector<ObjPtr> live, terminating;
      for (const auto& p : by_node[nname]) (is_terminating(*p) ? terminating : live).push_back(p);
      if (!should) {
        for (const auto& p : live) st.mark_deleting_l(pod_ri, p, 30);
        if (!live.empty()) ++misscheduled;
        continue;
      }
      ++desired;
      if (live.empty()) {
        ++unavailable;
        if (!terminating.empty()) continue;  // wait for the old pod to go away
        if (create_pod(node)) ++current;
        continue;
      }
      std::vector<ObjPtr> fresh, old;
      for (const auto& p : live)
        (jstr(*p, {"metadata", "labels", names::kRevisionHashLabel}) == hash ? fresh : old)
            .push_back(p);
      auto by_ready = [&](std::vector<ObjPtr>& v) {
        std::stable_sort(v.begin(), v.end(), [&](const ObjPtr& a, const ObjPtr& b) {
          return pod_ready(*a) > pod_ready(*b);
        });
        for (size_t i = 1; i < v.size(); ++i) st.mark_deleting_l(pod_ri, v[i], 30);
        if (v.size() > 1) v.resize(1);
      };
      by_ready(fresh);
      by_ready(old);
      ++current;
      if (!fresh.empty()) {
        ++updated;
        bool fresh_ready = pod_ready(*fresh[0]);
        if (fresh_ready) {
          ++ready;
          for (const auto& p : old) st.mark_deleting_l(pod_ri, p, 30);  // surge done on this node
        } else if (!old.empty() && pod_ready(*old[0])) {
          ++ready;  // surge in progress: the old pod still serves
          ++surging;
        } else {
          ++unavailable;
          for (const auto& p : old) st.mark_deleting_l(pod_ri, p, 30);
        }
        continue;
      }
      const ObjPtr& keep = old[0];
      if (pod_ready(*keep)) {
        ++ready;
        old_ready_pods.push_back(keep);
        surge_node[jstr(*keep, {"metadata", "name"})] = node;
      } else {
        ++unavailable;
        st.mark_deleting_l(pod_ri, keep, 30);  // old and not ready: replace right away
      }
    }
    // Pods on nodes that no longer exist.
    for (auto& [nname, pods] : by_node)
      if (!seen_nodes.count(nname))
        for (const auto& p : pods)
          if (!is_terminating(*p)) st.mark_deleting_l(pod_ri, p, 0);

    // Rolling update (apps/v1 defaults: maxUnavailable 1, maxSurge 0).
    std::string strategy = jstr(*ds, {"spec", "updateStrategy", "type"}, "RollingUpdate");
    if (strategy == "RollingUpdate" && !old_ready_pods.empty()) {
      const json* ru = jptr(*ds, {"spec", "updateStrategy", "rollingUpdate"});
      long long max_surge = scaled(ru ? jptr(*ru, {"maxSurge"}) : nullptr, desired, 0);
      long long max_unavailable = scaled(ru ? jptr(*ru, {"maxUnavailable"}) : nullptr, desired, 1);
      if (max_surge > 0) {
        long long budget = max_surge - surging;
        for (const auto& p : old_ready_pods) {
          if (budget <= 0) break;
          if (create_pod(surge_node[jstr(*p, {"metadata", "name"})])) --budget;
        }
      } else {
        if (max_unavailable < 1) max_unavailable = 1;
        long long budget = max_unavailable - unavailable;
        for (const auto& p : old_ready_pods) {
          if (budget <= 0) break;
          st.mark_deleting_l(pod_ri, p, 30);
          --budget;
          --ready;
        }
      }
    }
    if (!denied.empty()) {
      // FailedCreate: one Event per DaemonSet (count bumped on repeats), like the controller's
      // event recorder.
      std::string ev_name = name + ".failedcreate";
      ObjPtr ev = st.find_l(ev_ri, ns, ev_name);
      std::string now = rfc3339_now();
      if (!ev) {
        st.create_l(ev_ri, json{{"apiVersion", "v1"},
                                {"kind", "Event"},
                                {"metadata", {{"name", ev_name}, {"namespace", ns}}},
                                {"involvedObject",
                                 {{"apiVersion", "apps/v1"},
                                  {"kind", "DaemonSet"},
                                  {"name", name},
                                  {"namespace", ns},
                                  {"uid", uid}}},
                                {"reason", "FailedCreate"},
                                {"message", denied},
                                {"type", "Warning"},
                                {"count", 1},
                                {"firstTimestamp", now},
                                {"lastTimestamp", now},
                                {"source", {{"component", "daemonset-controller"}}}});
      } else if (jstr(*ev, {"message"}) != denied) {
        json next = *ev;
        next["message"] = denied;
        next["count"] = next.value("count", 1) + 1;
        next["lastTimestamp"] = now;
        st.commit_l(ev_ri, std::move(next));
      }
    }

    // Prune old revisions beyond revisionHistoryLimit.
    long long limit = (*ds)["spec"].value("revisionHistoryLimit", 10LL);
    std::vector<ObjPtr> old_revs;
    for (const auto& r : revs)
      if (jstr(*r, {"metadata", "name"}) != cr_name) old_revs.push_back(r);
    if (static_cast<long long>(old_revs.size()) > limit) {
      std::sort(old_revs.begin(), old_revs.end(), [](const ObjPtr& a, const ObjPtr& b) {
        return a->value("revision", 0LL) < b->value("revision", 0LL);
      });
      for (size_t i = 0; i + limit < old_revs.size(); ++i)
        st.erase_l(cr_ri, ns, jstr(*old_revs[i], {"metadata", "name"}));
    }

    json status{{"currentNumberScheduled", current},  {"desiredNumberScheduled", desired},
                {"numberMisscheduled", misscheduled}, {"numberReady", ready},
                {"numberAvailable", ready},           {"numberUnavailable", desired - ready},
                {"updatedNumberScheduled", updated},  {"observedGeneration", ds_gen}};
    if (!denied.empty())
      status["conditions"] = json::array({{{"type", "ReplicaFailure"},
                                           {"status", "True"},
                                           {"reason", "FailedCreate"},
                                           {"message", denied},
                                           {"lastTransitionTime", rfc3339_now()}}});
    if (const json* oc = jptr(*ds, {"status", "conditions"});
        oc && !denied.empty() && oc->is_array() && !oc->empty() &&
        (*oc)[0].value("message", "") == denied)
      status["conditions"] = *oc;  // keep lastTransitionTime stable
    ObjPtr latest = st.find_l(ds_ri, ns, name);
    json next = *latest;
    next["status"] = status;
    next["metadata"]["annotations"][names::kCurrentRevisionAnnotation] = hash;
    if (next != *latest) st.commit_l(ds_ri, std::move(next));
  }

  last_sig = st.resource_seq_l(ds_ri) + st.resource_seq_l(cr_ri) + st.resource_seq_l(pod_ri) +
             st.resource_seq_l(node_ri) + st.resource_seq_l(svc_ri);
  // Garbage collection: pods and revisions whose DaemonSet is gone.
  for (const ObjPtr& p : st.list_l(pod_ri)) {
    const json* ref = controller_ref(*p, "DaemonSet");
    if (ref && !ds_uids.count(ref->value("uid", "")) && !is_terminating(*p))
      st.mark_deleting_l(pod_ri, p, 30);
  }
  for (const ObjPtr& cr : st.list_l(cr_ri)) {
    const json* ref = controller_ref(*cr, "DaemonSet");
    if (ref && !ds_uids.count(ref->value("uid", "")))
      st.erase_l(cr_ri, jstr(*cr, {"metadata", "namespace"}), jstr(*cr, {"metadata", "name"}));
  }
}

}  // namespace dpfsim
