// 1. DPUService -> DaemonSet in the DPU cluster (what Argo CD + the DPUService Helm chart would
// do).
// 2. Generic DaemonSet controller: ControllerRevisions (<ds>-<hash>, increasing revision), one Pod
// per
//    matching Node (node affinity / nodeSelector), rolling updates honouring maxUnavailable,
//    status.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "controller_manager.h"
#include "node_selector.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

const ResourceInfo& R(ClusterId c, const char* plural) {
  return *find_resource_by_plural(c, plural);
}

std::string chart_name(const json& svc) {
  std::string chart = jstr(svc, {"spec", "helmChart", "source", "chart"});
  if (!chart.empty()) return chart;
  std::string path = jstr(svc, {"spec", "helmChart", "source", "path"});
  if (!path.empty()) {
    auto parts = split(path, '/');
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
    if (!parts.empty()) return parts.back();
  }
  return jstr(svc, {"metadata", "name"});
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

json render_dpuservice_daemonset(const json& svc) {
  std::string name = jstr(svc, {"metadata", "name"});
  std::string ns = jstr(svc, {"metadata", "namespace"});
  std::string release = dpuservice_release_name(svc);
  std::string sid = dpuservice_service_id(svc);
  std::string chart = chart_name(svc);
  std::string repo = jstr(svc, {"spec", "helmChart", "source", "repoURL"});
  for (const char* p : {"oci://", "https://"})
    if (starts_with(repo, p)) repo = repo.substr(strlen(p));
  while (!repo.empty() && repo.back() == '/') repo.pop_back();
  std::string version = jstr(svc, {"spec", "helmChart", "source", "version"});
  const json* sds_p = jptr(svc, {"spec", "serviceDaemonSet"});
  json sds = sds_p && sds_p->is_object() ? *sds_p : json::object();
  const json* values_p = jptr(svc, {"spec", "helmChart", "values"});
  json values = values_p && values_p->is_object() ? *values_p : json::object();

  json pod_labels{{"app.kubernetes.io/name", chart}, {"app.kubernetes.io/instance", release}};
  const json sds_labels = string_map(jptr(sds, {"labels"}));
  for (auto& [k, v] : sds_labels.items()) pod_labels[k] = v;
  pod_labels[names::kServiceIdLabel] = sid;
  json pod_annotations = string_map(jptr(sds, {"annotations"}));
  pod_annotations["sim.dpu.nvidia.com/values-checksum"] = sha256_hex(values.dump()).substr(0, 16);

  json container{{"name", chart},
                 {"image", repo + "/" + chart + ":" + version},
                 {"imagePullPolicy", "IfNotPresent"},
                 {"terminationMessagePath", "/dev/termination-log"},
                 {"terminationMessagePolicy", "File"}};
  if (const json* res = jptr(sds, {"resources"}); res && res->is_object() && !res->empty())
    container["resources"] = {{"limits", *res}, {"requests", *res}};
  else
    container["resources"] = json::object();
  json pod_spec{{"containers", json::array({container})}, {"restartPolicy", "Always"},
                {"terminationGracePeriodSeconds", 30},    {"dnsPolicy", "ClusterFirst"},
                {"schedulerName", "default-scheduler"},   {"securityContext", json::object()}};
  if (const json* nsel = jptr(sds, {"nodeSelector"}); nsel && nsel->is_object()) {
    const json* terms = jptr(*nsel, {"nodeSelectorTerms"});
    if (terms && terms->is_array() && !terms->empty())
      pod_spec["affinity"] = {
          {"nodeAffinity", {{"requiredDuringSchedulingIgnoredDuringExecution", *nsel}}}};
  }
  json tmpl{{"metadata", {{"labels", pod_labels}}}, {"spec", pod_spec}};
  if (!pod_annotations.empty()) tmpl["metadata"]["annotations"] = pod_annotations;

  json ds_labels{{"app.kubernetes.io/managed-by", "Helm"},
                 {"app.kubernetes.io/name", chart},
                 {"app.kubernetes.io/instance", release},
                 {"helm.sh/chart", chart + "-" + version}};
  for (auto& [k, v] : sds_labels.items()) ds_labels[k] = v;
  ds_labels[names::kServiceIdLabel] = sid;
  ds_labels[names::kDpuServiceNameLabel] = name;
  ds_labels[names::kDpuServiceNamespaceLabel] = ns;
  json ds_annotations = string_map(jptr(sds, {"annotations"}));
  ds_annotations["meta.helm.sh/release-name"] = release;
  ds_annotations["meta.helm.sh/release-namespace"] = ns;
  ds_annotations["sim.dpu.nvidia.com/dpuservice-generation"] = std::to_string(
      jptr(svc, {"metadata", "generation"}) ? svc["metadata"]["generation"].get<long long>() : 1);

  json strategy =
      json{{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxSurge", 0}, {"maxUnavailable", 1}}}};
  if (const json* us = jptr(sds, {"updateStrategy"}); us && us->is_object() && !us->empty())
    strategy = *us;

  return json{{"apiVersion", "apps/v1"},
              {"kind", "DaemonSet"},
              {"metadata",
               {{"name", release},
                {"namespace", ns},
                {"labels", ds_labels},
                {"annotations", ds_annotations}}},
              {"spec",
               {{"selector",
                 {{"matchLabels",
                   {{"app.kubernetes.io/name", chart}, {"app.kubernetes.io/instance", release}}}}},
                {"template", tmpl},
                {"updateStrategy", strategy},
                {"revisionHistoryLimit", 10}}}};
}

void reconcile_dpuservice_workloads(ControllerManager& cm) {
  if (!cm.dpu_reachable()) return;  // DPF cannot sync into an unreachable DPU cluster
  Store& st = cm.store();
  const ResourceInfo& svc_ri = R(ClusterId::Management, "dpuservices");
  const ResourceInfo& ds_ri = R(ClusterId::Dpu, "daemonsets");
  const ResourceInfo& ns_ri = R(ClusterId::Dpu, "namespaces");
  std::set<std::string> wanted;  // ns/name of DaemonSets owned by live DPUServices

  for (const ObjPtr& svc : st.list_l(svc_ri)) {
    std::string ns = jstr(*svc, {"metadata", "namespace"});
    if (is_terminating(*svc)) continue;
    if (!has_finalizer(*svc, names::kDpuServiceFinalizer)) continue;  // not yet reconciled
    if (jbool(*svc, {"spec", "deployInCluster"})) continue;
    std::string release = dpuservice_release_name(*svc);
    wanted.insert(ns + "/" + release);
    if (jbool(*svc, {"spec", "paused"})) continue;
    json desired = render_dpuservice_daemonset(*svc);
    ObjPtr ds = st.find_l(ds_ri, ns, release);
    std::string key = "dpuservice-sync/" + jstr(*svc, {"metadata", "uid"});
    if (!ds) {
      if (!cm.due(key, cm.ctx().delays.dpuservice_sync_ms)) continue;
      if (!st.find_l(ns_ri, "", ns)) st.create_l(ns_ri, make_namespace(ns));
      st.create_l(ds_ri, desired);
      cm.clear(key);
      continue;
    }
    // Compare what the chart owns; keep annotations/labels others added to the DaemonSet.
    json next = *ds;
    json& md = next["metadata"];
    for (auto& [k, v] : desired["metadata"]["labels"].items()) md["labels"][k] = v;
    for (auto& [k, v] : desired["metadata"]["annotations"].items()) md["annotations"][k] = v;
    for (auto& [k, v] : desired["spec"].items()) next["spec"][k] = v;
    if (next == *ds) continue;
    if (!cm.due(key, cm.ctx().delays.dpuservice_sync_ms)) continue;
    st.commit_l(ds_ri, std::move(next));
    cm.clear(key);
  }

  // DaemonSets of DPUServices that are gone, deployInCluster now, or renamed.
  for (const ObjPtr& ds : st.list_l(ds_ri)) {
    std::string svc_name = jstr(*ds, {"metadata", "labels", names::kDpuServiceNameLabel});
    if (svc_name.empty()) continue;
    std::string ns = jstr(*ds, {"metadata", "namespace"});
    std::string name = jstr(*ds, {"metadata", "name"});
    if (wanted.count(ns + "/" + name)) continue;
    ObjPtr svc = st.find_l(
        svc_ri, jstr(*ds, {"metadata", "labels", names::kDpuServiceNamespaceLabel}), svc_name);
    if (svc && is_terminating(*svc)) continue;  // the DPUService controller handles that
    st.erase_l(ds_ri, ns, name);
  }
}

void reconcile_daemonsets(ControllerManager& cm) {
  Store& st = cm.store();
  const ResourceInfo& ds_ri = R(ClusterId::Dpu, "daemonsets");
  const ResourceInfo& cr_ri = R(ClusterId::Dpu, "controllerrevisions");
  const ResourceInfo& pod_ri = R(ClusterId::Dpu, "pods");
  const ResourceInfo& node_ri = R(ClusterId::Dpu, "nodes");
  // Purely reactive: nothing to do unless something this controller reads changed.
  static uint64_t last_sig = ~0ULL;  // controller thread only
  uint64_t sig = st.resource_seq_l(ds_ri) + st.resource_seq_l(cr_ri) + st.resource_seq_l(pod_ri) +
                 st.resource_seq_l(node_ri);
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
    std::vector<ObjPtr> old_ready_pods;
    long long unavailable = 0;
    std::set<std::string> seen_nodes;
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
        ++current;
        continue;
      }
      // Keep one live pod (prefer the current revision, then Ready); delete the rest.
      std::sort(live.begin(), live.end(), [&](const ObjPtr& a, const ObjPtr& b) {
        auto score = [&](const ObjPtr& p) {
          return (jstr(*p, {"metadata", "labels", names::kRevisionHashLabel}) == hash ? 2 : 0) +
                 (pod_ready(*p) ? 1 : 0);
        };
        return score(a) > score(b);
      });
      for (size_t i = 1; i < live.size(); ++i) st.mark_deleting_l(pod_ri, live[i], 30);
      const ObjPtr& keep = live[0];
      ++current;
      bool is_ready = pod_ready(*keep);
      bool is_updated = jstr(*keep, {"metadata", "labels", names::kRevisionHashLabel}) == hash;
      if (is_ready)
        ++ready;
      else
        ++unavailable;
      if (is_updated)
        ++updated;
      else if (is_ready)
        old_ready_pods.push_back(keep);
      else
        st.mark_deleting_l(pod_ri, keep, 30);  // old and not ready: replace right away
    }
    // Pods on nodes that no longer exist.
    for (auto& [nname, pods] : by_node)
      if (!seen_nodes.count(nname))
        for (const auto& p : pods)
          if (!is_terminating(*p)) st.mark_deleting_l(pod_ri, p, 0);

    // Rolling update.
    std::string strategy = jstr(*ds, {"spec", "updateStrategy", "type"}, "RollingUpdate");
    if (strategy == "RollingUpdate" && !old_ready_pods.empty()) {
      long long max_unavailable = scaled(
          jptr(*ds, {"spec", "updateStrategy", "rollingUpdate", "maxUnavailable"}), desired, 1);
      if (max_unavailable < 1) max_unavailable = 1;
      long long budget = max_unavailable - unavailable;
      for (const auto& p : old_ready_pods) {
        if (budget <= 0) break;
        st.mark_deleting_l(pod_ri, p, 30);
        --budget;
        --ready;
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
    ObjPtr latest = st.find_l(ds_ri, ns, name);
    json next = *latest;
    next["status"] = status;
    next["metadata"]["annotations"][names::kCurrentRevisionAnnotation] = hash;
    if (next != *latest) st.commit_l(ds_ri, std::move(next));
  }

  last_sig = st.resource_seq_l(ds_ri) + st.resource_seq_l(cr_ri) + st.resource_seq_l(pod_ri) +
             st.resource_seq_l(node_ri);
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
