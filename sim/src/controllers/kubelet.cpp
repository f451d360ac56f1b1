// Simulated kubelet: scheduled Pods become Running/Ready after pod_ready_ms; Pods with a
// deletionTimestamp (phase unchanged, Ready=False) disappear after pod_termination_ms.
#include "controller_manager.h"
#include "resources.h"

namespace dpfsim {

void reconcile_kubelet(ControllerManager& cm) {
  Store& st = cm.store();
  const Delays& d = cm.ctx().delays;
  const ResourceInfo& pod_ri = *find_resource_by_plural(ClusterId::Dpu, "pods");
  const ResourceInfo& node_ri = *find_resource_by_plural(ClusterId::Dpu, "nodes");
  // Skip the scan when no pod/node changed and no pod is waiting for a delay.
  static uint64_t last_sig = ~0ULL;  // controller thread only
  static bool pending = false;
  uint64_t sig = st.resource_seq_l(pod_ri) + st.resource_seq_l(node_ri);
  if (sig == last_sig && !pending) return;
  pending = false;
  for (const ObjPtr& pod : st.list_l(pod_ri)) {
    std::string uid = jstr(*pod, {"metadata", "uid"});
    if (is_terminating(*pod)) {
      std::string key = "pod-terminate/" + uid;
      if (!cm.due(key, d.pod_termination_ms)) {
        pending = true;
        continue;
      }
      const json* f = jptr(*pod, {"metadata", "finalizers"});
      if (!f || !f->is_array() || f->empty())
        st.erase_l(pod_ri, jstr(*pod, {"metadata", "namespace"}), jstr(*pod, {"metadata", "name"}));
      cm.clear(key);
      continue;
    }
    std::string node = jstr(*pod, {"spec", "nodeName"});
    if (node.empty() || jstr(*pod, {"status", "phase"}) != "Pending") continue;
    if (!st.find_l(node_ri, "", node)) continue;
    std::string key = "pod-ready/" + uid;
    if (!cm.due(key, d.pod_ready_ms)) {
      pending = true;
      continue;
    }
    json next = *pod;
    std::string now = rfc3339_now();
    json& status = next["status"];
    status["phase"] = "Running";
    status["startTime"] = now;
    status["podIP"] = cm.next_pod_ip();
    status["podIPs"] = json::array({{{"ip", status["podIP"]}}});
    json conds = json::array();
    for (const char* t :
         {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"})
      conds.push_back({{"type", t},
                       {"status", "True"},
                       {"lastProbeTime", nullptr},
                       {"lastTransitionTime", now}});
    status["conditions"] = conds;
    json cstatuses = json::array();
    if (const json* cs = jptr(next, {"spec", "containers"}); cs && cs->is_array())
      for (const auto& c : *cs)
        cstatuses.push_back(
            {{"name", c.value("name", "")},
             {"image", c.value("image", "")},
             {"imageID", c.value("image", "") + "@sha256:" + sha256_hex(c.value("image", ""))},
             {"containerID", "containerd://" + sha256_hex(uid + c.value("name", ""))},
             {"ready", true},
             {"started", true},
             {"restartCount", 0},
             {"state", {{"running", {{"startedAt", now}}}}}});
    status["containerStatuses"] = cstatuses;
    st.commit_l(pod_ri, std::move(next));
    cm.clear(key);
  }
  last_sig = st.resource_seq_l(pod_ri) + st.resource_seq_l(node_ri);
}

}  // namespace dpfsim
