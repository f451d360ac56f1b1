#include "daemon_pod.h"

#include "controller_manager.h"
#include "node_selector.h"
#include "resources.h"

namespace dpfsim {

namespace {

// AddOrUpdateDaemonPodTolerations (pkg/controller/daemon/util/daemonset_util.go).
const char* const kDefaultNoExecute[] = {"node.kubernetes.io/not-ready",
                                         "node.kubernetes.io/unreachable"};
const char* const kDefaultNoSchedule[] = {
    "node.kubernetes.io/disk-pressure", "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/unschedulable"};

void add_toleration(json& tols, const char* key, const char* effect) {
  for (const auto& t : tols)
    if (jstr(t, {"key"}) == key && jstr(t, {"effect"}) == effect &&
        jstr(t, {"operator"}) == "Exists")
      return;
  tols.push_back({{"key", key}, {"operator", "Exists"}, {"effect", effect}});
}

}  // namespace

json daemon_pod_tolerations(const json& pod_spec) {
  json tols = json::array();
  if (const json* t = jptr(pod_spec, {"tolerations"}); t && t->is_array()) tols = *t;
  for (const char* k : kDefaultNoExecute) add_toleration(tols, k, "NoExecute");
  for (const char* k : kDefaultNoSchedule) add_toleration(tols, k, "NoSchedule");
  if (jbool(pod_spec, {"hostNetwork"}))
    add_toleration(tols, "node.kubernetes.io/network-unavailable", "NoSchedule");
  return tols;
}

ShouldRun node_should_run_daemon_pod(const json& pod_spec, const json& node) {
  ShouldRun out;
  const std::string want = jstr(pod_spec, {"nodeName"});
  if (!want.empty() && want != jstr(node, {"metadata", "name"})) return out;
  if (!pod_spec_fits_node(pod_spec, node)) return out;
  const json tols = daemon_pod_tolerations(pod_spec);
  if (untolerated_taint(node, &tols, {"NoSchedule", "NoExecute"}) == nullptr) {
    out.run = out.keep = true;
    return out;
  }
  // scheduled daemon pods continue running if they tolerate every NoExecute taint
  out.keep = untolerated_taint(node, &tols, {"NoExecute"}) == nullptr;
  return out;
}

std::string qos_class(const json& pod_spec) {
  bool any = false, guaranteed = true;
  const json* cs = jptr(pod_spec, {"containers"});
  if (cs == nullptr || !cs->is_array()) return "BestEffort";
  for (const auto& c : *cs)
    for (const char* r : {"cpu", "memory"}) {
      const json* req = jptr(c, {"resources", "requests", r});
      const json* lim = jptr(c, {"resources", "limits", r});
      if (req || lim) any = true;
      if (!req || !lim || *req != *lim) guaranteed = false;
    }
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

json new_daemon_pod(const json& tmpl, const std::string& node, const std::string& hash,
                    long long generation, const json& owner_refs) {
  json labels = string_map(jptr(tmpl, {"metadata", "labels"}));
  labels[names::kRevisionHashLabel] = hash;
  labels["pod-template-generation"] = std::to_string(generation);
  const json* tspec = jptr(tmpl, {"spec"});
  json spec = tspec ? *tspec : json::object();
  spec.erase("nodeName");
  // ReplaceDaemonSetPodNodeNameNodeAffinity: the template's required terms are replaced by one
  // that names the node (preferred terms and other affinities stay)
  spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {"nodeSelectorTerms", json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                                        {"operator", "In"},
                                                                        {"values", {node}}}})}}})}};
  spec["tolerations"] = daemon_pod_tolerations(spec);
  if (!spec.contains("schedulerName")) spec["schedulerName"] = "default-scheduler";
  if (!spec.contains("priority")) spec["priority"] = 0;
  json md{{"labels", labels}, {"ownerReferences", owner_refs}};
  if (const json* a = jptr(tmpl, {"metadata", "annotations"}); a && a->is_object() && !a->empty())
    md["annotations"] = *a;
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", md},
              {"spec", spec},
              {"status", {{"phase", "Pending"}, {"qosClass", qos_class(spec)}}}};
}

}  // namespace dpfsim
