// Simulated kubelet: Pods bound to its Node (the scheduler sets spec.nodeName) become
// Running/Ready after pod_ready_ms; Pods with a
// deletionTimestamp (phase unchanged, Ready=False) disappear after pod_termination_ms. Pod faults
// (POST /pod-faults) keep the pods of a node unready with a container waiting reason.
//
// Also the node-lifecycle controller's part for a Node whose kubelet stopped posting status (POST
// /nodes/<name>/not-ready; kubernetes pkg/controller/nodelifecycle, tryUpdateNodeHealth and
// MarkPodsNotReady): after node_grace_ms (--node-monitor-grace-period) every Node condition turns
// Unknown (NodeStatusUnknown, "Kubelet stopped posting node status."), the Node is tainted
// node.kubernetes.io/unreachable (NoSchedule, NoExecute) and its pods' Ready condition turns False.
// Nothing of the kubelet runs there meanwhile: pods neither start nor finish terminating, so a
// deletion hangs until the Node reports again.
#include <cstring>
#include <map>

#include "conditions.h"
#include "controller_manager.h"
#include "resources.h"

namespace dpfsim {

namespace {

json container_statuses(const json& pod, const std::string& uid, const std::string& now,
                        const std::string& fault, long long restarts) {
  json out = json::array();
  if (const json* cs = jptr(pod, {"spec", "containers"}); cs && cs->is_array())
    for (const auto& c : *cs) {
      std::string image = c.value("image", "");
      json s{{"name", c.value("name", "")},
             {"image", image},
             {"imageID", fault.empty() || fault == "CrashLoopBackOff"
                             ? image + "@sha256:" + sha256_hex(image)
                             : ""},
             {"ready", fault.empty()},
             {"started", fault.empty()},
             {"restartCount", restarts}};
      if (fault.empty()) {
        s["containerID"] = "containerd://" + sha256_hex(uid + c.value("name", ""));
        s["state"] = {{"running", {{"startedAt", now}}}};
      } else {
        std::string msg;
        if (fault == "CrashLoopBackOff")
          msg = "back-off 5m0s restarting failed container=" + c.value("name", "") +
                " pod=" + jstr(pod, {"metadata", "name"}) + "_" +
                jstr(pod, {"metadata", "namespace"}) + "(" + uid + ")";
        else if (fault == "ImagePullBackOff")
          msg = "Back-off pulling image \"" + image + "\"";
        else if (fault == "ErrImagePull")
          msg = "failed to pull and unpack image \"" + image + "\": failed to resolve reference";
        else if (fault == "CreateContainerConfigError")
          msg = "secret \"" + c.value("name", "") + "-config\" not found";
        else
          msg = fault;
        s["state"] = {{"waiting", {{"reason", fault}, {"message", msg}}}};
        if (fault == "CrashLoopBackOff") {
          s["containerID"] =
              "containerd://" + sha256_hex(uid + c.value("name", "") + std::to_string(restarts));
          s["lastState"] = {
              {"terminated",
               {{"exitCode", 1}, {"reason", "Error"}, {"startedAt", now}, {"finishedAt", now}}}};
        }
      }
      out.push_back(s);
    }
  return out;
}

// Items: pod keys "<ns>/<name>".
class Kubelet : public Controller {
 public:
  const char* name() const override { return "kubelet"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr&, const ObjPtr&) override {
    if (&ri == pod_ri_) {
      cm.enqueue(ControllerManager::kKubelet, key);
    } else if (&ri == node_ri_ && std::strcmp(type, "ADDED") == 0) {
      cm.enqueue(ControllerManager::kKubelet, "node:" + key);
      pods_on(cm, key);
    } else if (&ri == node_ri_ && std::strcmp(type, "MODIFIED") != 0) {
      pods_on(cm, key);  // a node appeared or went away: its pods' kubelet
    }
  }

  void on_clear() override {
    faults_.clear();
    silent_.clear();
  }

  void enqueue_all(ControllerManager& cm) override {
    for (const ObjPtr& p : cm.store().list_l(*pod_ri_))
      cm.enqueue(ControllerManager::kKubelet, Store::key_of(*pod_ri_, *p));
  }

  // Pod faults changed: the pods on nodes whose fault was added, changed or removed.
  void on_knobs(ControllerManager& cm) override {
    std::map<std::string, std::string> now;
    {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      now = cm.ctx().knobs.pod_faults;
    }
    for (const auto& [n, r] : now)
      if (!faults_.count(n) || faults_[n] != r) pods_on(cm, n);
    for (const auto& [n, r] : faults_)
      if (!now.count(n)) pods_on(cm, n);
    faults_ = std::move(now);
    std::map<std::string, int64_t> silent;
    {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      silent = cm.ctx().knobs.silent_nodes;
    }
    for (const auto& [n, t] : silent)
      if (!silent_.count(n)) cm.enqueue(ControllerManager::kKubelet, "node:" + n);
    for (const auto& [n, t] : silent_)
      if (!silent.count(n)) {
        cm.enqueue(ControllerManager::kKubelet, "node:" + n);
        pods_on(cm, n);
      }
    silent_ = std::move(silent);
  }

  void reconcile(ControllerManager& cm, const std::string& key) override {
    if (starts_with(key, "node:")) return node_health(cm, key.substr(5));
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    ObjPtr pod = st.find_key_l(*pod_ri_, key);
    if (!pod) return;
    std::string uid = jstr(*pod, {"metadata", "uid"});
    // the Node's kubelet is silent: nothing it does happens (a deletion hangs)
    if (silent_.count(jstr(*pod, {"spec", "nodeName"}))) return;
    if (is_terminating(*pod)) {
      std::string tkey = "pod-terminate/" + uid;
      if (!cm.due(tkey, d.pod_termination_ms)) return;
      const json* f = jptr(*pod, {"metadata", "finalizers"});
      if (!f || !f->is_array() || f->empty())
        st.erase_l(*pod_ri_, jstr(*pod, {"metadata", "namespace"}),
                   jstr(*pod, {"metadata", "name"}));
      cm.clear(tkey);
      return;
    }
    std::string node = jstr(*pod, {"spec", "nodeName"});
    if (node.empty() || !st.find_l(*node_ri_, "", node)) return;
    std::string fault;
    {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      auto fit = cm.ctx().knobs.pod_faults.find(node);
      if (fit != cm.ctx().knobs.pod_faults.end()) fault = fit->second;
    }
    std::string cur_fault;
    const json* cs0 = jptr(*pod, {"status", "containerStatuses"});
    if (cs0 && cs0->is_array() && !cs0->empty())
      cur_fault = jstr((*cs0)[0], {"state", "waiting", "reason"});
    bool is_ready_running = jstr(*pod, {"status", "phase"}) == "Running" && cur_fault.empty() &&
                            condition_status(*pod, "Ready") == "True";
    if (fault.empty() && is_ready_running) return;
    std::string tkey = "pod-ready/" + uid;
    if (!cm.due(tkey, d.pod_ready_ms)) return;
    long long restarts = 0;
    if (cs0 && cs0->is_array() && !cs0->empty()) restarts = (*cs0)[0].value("restartCount", 0LL);
    if (!fault.empty() && fault == cur_fault) {
      // CrashLoopBackOff keeps restarting: one restart per second of simulated time.
      if (fault != "CrashLoopBackOff") return;
      std::string rk = "pod-restart/" + uid;
      if (!cm.due(rk, 1000)) return;
      cm.clear(rk);
      ++restarts;
    } else if (fault == "CrashLoopBackOff") {
      restarts = std::max(restarts, 1LL);
    }
    json next = *pod;
    std::string now = rfc3339_now();
    json& status = next["status"];
    bool running = fault.empty() || fault == "CrashLoopBackOff";
    status["phase"] = running ? "Running" : "Pending";
    if (!status.contains("startTime")) status["startTime"] = now;  // the kubelet accepted it
    if (!status.contains("hostIP")) {
      // the kubelet reports its Node's address once it runs the pod
      std::string host_ip;
      if (ObjPtr n = st.find_l(*node_ri_, "", node))
        if (const json* addrs = jptr(*n, {"status", "addresses"}); addrs && addrs->is_array())
          for (const auto& a : *addrs)
            if (a.value("type", "") == "InternalIP") host_ip = a.value("address", "");
      status["hostIP"] = host_ip;
      status["hostIPs"] = json::array({{{"ip", host_ip}}});
    }
    if (running && !status.contains("podIP")) {
      status["podIP"] = cm.next_pod_ip();
      status["podIPs"] = json::array({{{"ip", status["podIP"]}}});
    }
    std::string ready = fault.empty() ? "True" : "False";
    json conds = json::array();
    for (const char* t :
         {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"}) {
      bool gated = std::string(t) == "Ready" || std::string(t) == "ContainersReady";
      json c{{"type", t},
             {"status", gated ? ready : "True"},
             {"lastProbeTime", nullptr},
             {"lastTransitionTime", now}};
      if (gated && !fault.empty()) {
        c["reason"] = "ContainersNotReady";
        std::string cname;
        if (const json* cs = jptr(next, {"spec", "containers"});
            cs && cs->is_array() && !cs->empty())
          cname = (*cs)[0].value("name", "");
        c["message"] = "containers with unready status: [" + cname + "]";
      }
      // keep transition times of unchanged conditions
      if (const json* oc = jptr(*pod, {"status", "conditions"}); oc && oc->is_array())
        for (const auto& o : *oc)
          if (o.value("type", "") == t && o.value("status", "") == c["status"])
            c["lastTransitionTime"] = o.value("lastTransitionTime", now);
      conds.push_back(c);
    }
    status["conditions"] = conds;
    status["containerStatuses"] = container_statuses(next, uid, now, fault, restarts);
    st.commit_l(*pod_ri_, std::move(next));
    if (fault.empty()) cm.clear(tkey);
  }

 private:
  // The node-lifecycle controller (grace period) and the kubelet's own status of a Node.
  void node_health(ControllerManager& cm, const std::string& name) {
    Store& st = cm.store();
    ObjPtr node = st.find_l(*node_ri_, "", name);
    if (!node) return;
    const bool silent = silent_.count(name) > 0;
    const std::string ready = condition_status(*node, "Ready");
    if (silent) {
      if (ready == "Unknown") return;
      if (!cm.due("node-grace/" + name, cm.ctx().delays.node_grace_ms)) return;
      cm.clear("node-grace/" + name);
      json next = *node;
      for (auto& c : next["status"]["conditions"]) {
        if (c.value("status", "") != "Unknown") c["lastTransitionTime"] = rfc3339_now();
        c["status"] = "Unknown";
        c["reason"] = "NodeStatusUnknown";
        c["message"] = "Kubelet stopped posting node status.";
      }
      json taints = json::array();
      if (const json* t = jptr(*node, {"spec", "taints"}); t && t->is_array())
        for (const auto& x : *t)
          if (x.value("key", "") != kUnreachable) taints.push_back(x);
      taints.push_back({{"key", kUnreachable}, {"effect", "NoSchedule"}});
      taints.push_back(
          {{"key", kUnreachable}, {"effect", "NoExecute"}, {"timeAdded", rfc3339_now()}});
      next["spec"]["taints"] = taints;
      st.commit_l(*node_ri_, std::move(next));
      // MarkPodsNotReady
      if (const auto* keys = st.pods_on_node_l(name))
        for (const auto& k : std::vector<std::string>(keys->begin(), keys->end())) {
          ObjPtr pod = st.find_key_l(*pod_ri_, k);
          if (!pod || condition_status(*pod, "Ready") == "False") continue;
          json p = *pod;
          for (auto& c : p["status"]["conditions"])
            if (c.value("type", "") == "Ready") {
              c["status"] = "False";
              c["lastTransitionTime"] = rfc3339_now();
            }
          st.commit_l(*pod_ri_, std::move(p));
        }
      return;
    }
    // (a grace timer of an earlier silence is dropped by not consulting it)
    if (ready != "Unknown") return;
    // the kubelet posts status again; the lifecycle controller lifts its taints
    json next = *node;
    const std::string now = rfc3339_now();
    for (auto& c : next["status"]["conditions"]) {
      const std::string type = c.value("type", "");
      const bool is_ready = type == "Ready";
      const std::string status = is_ready ? "True" : "False";
      if (c.value("status", "") != status) c["lastTransitionTime"] = now;
      c["status"] = status;
      c["lastHeartbeatTime"] = now;
      if (is_ready) {
        c["reason"] = "KubeletReady";
        c["message"] = "kubelet is posting ready status";
      } else if (type == "MemoryPressure") {
        c["reason"] = "KubeletHasSufficientMemory";
        c["message"] = "kubelet has sufficient memory available";
      } else if (type == "DiskPressure") {
        c["reason"] = "KubeletHasNoDiskPressure";
        c["message"] = "kubelet has no disk pressure";
      } else if (type == "PIDPressure") {
        c["reason"] = "KubeletHasSufficientPID";
        c["message"] = "kubelet has sufficient PID available";
      }
    }
    json taints = json::array();
    if (const json* t = jptr(*node, {"spec", "taints"}); t && t->is_array())
      for (const auto& x : *t)
        if (x.value("key", "") != kUnreachable) taints.push_back(x);
    if (taints.empty())
      next["spec"].erase("taints");
    else
      next["spec"]["taints"] = taints;
    st.commit_l(*node_ri_, std::move(next));
    pods_on(cm, name);
  }

  static constexpr const char* kUnreachable = "node.kubernetes.io/unreachable";

  void pods_on(ControllerManager& cm, const std::string& node) {
    if (const auto* keys = cm.store().pods_on_node_l(node))
      for (const auto& k : *keys) cm.enqueue(ControllerManager::kKubelet, k);
  }

  const ResourceInfo* pod_ri_ = find_resource_by_plural(ClusterId::Dpu, "pods");
  const ResourceInfo* node_ri_ = find_resource_by_plural(ClusterId::Dpu, "nodes");
  std::map<std::string, std::string> faults_;  // pod faults as last seen
  std::map<std::string, int64_t> silent_;      // Nodes whose kubelet is silent, as last seen
};

}  // namespace

std::unique_ptr<Controller> make_kubelet() {
  return std::make_unique<Kubelet>();
}

}  // namespace dpfsim
