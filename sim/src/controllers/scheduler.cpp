// Simulated kube-scheduler: binds pods created without spec.nodeName (DaemonSet pods name their
// Node only through a required node affinity, daemon_pod.h). The default profile's filters, in
// its order: NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity (and
// nodeSelector), NodeResourcesFit (requests of every resource, extended ones such as
// nvidia.com/bf_sf included, against allocatable minus what the pods bound to the Node request).
// A pod no Node fits stays Pending, unbound, with PodScheduled=False reason Unschedulable and the
// scheduler's FitError message ("0/N nodes are available: 1 Insufficient nvidia.com/bf_sf, ...
// preemption: ..."), plus a FailedScheduling Event; it is tried again when a Node or a pod on its
// Node changes, as the scheduler's queue moves unschedulable pods back on cluster events.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "conditions.h"
#include "controller_manager.h"
#include "node_selector.h"
#include "resources.h"

namespace dpfsim {

namespace {

// A resource.Quantity in milli-units (cpu "500m" -> 500, memory "1Gi" -> 1073741824000).
long double milli(const json& q) {
  if (q.is_number()) return q.get<long double>() * 1000;
  if (!q.is_string()) return 0;
  const std::string s = q.get<std::string>();
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const long double v = std::strtold(s.substr(0, i).c_str(), nullptr);
  const std::string suf = s.substr(i);
  static const std::map<std::string, long double> kMul = {{"", 1},
                                                          {"m", 1e-3},
                                                          {"k", 1e3},
                                                          {"M", 1e6},
                                                          {"G", 1e9},
                                                          {"T", 1e12},
                                                          {"P", 1e15},
                                                          {"Ki", 1024.0L},
                                                          {"Mi", 1024.0L * 1024},
                                                          {"Gi", 1073741824.0L},
                                                          {"Ti", 1099511627776.0L},
                                                          {"Pi", 1125899906842624.0L}};
  auto it = kMul.find(suf);
  return it == kMul.end() ? 0 : v * it->second * 1000;
}

// Sum of the containers' requests (limits stand in where only a limit is set, as defaulting
// does), plus one pod.
std::map<std::string, long double> pod_requests(const json& pod) {
  std::map<std::string, long double> out;
  if (const json* cs = jptr(pod, {"spec", "containers"}); cs && cs->is_array())
    for (const auto& c : *cs) {
      const json* req = jptr(c, {"resources", "requests"});
      const json* lim = jptr(c, {"resources", "limits"});
      std::set<std::string> names;
      if (req && req->is_object())
        for (auto it = req->begin(); it != req->end(); ++it) names.insert(it.key());
      if (lim && lim->is_object())
        for (auto it = lim->begin(); it != lim->end(); ++it) names.insert(it.key());
      for (const auto& n : names) {
        const json* q = req && req->contains(n) ? &(*req)[n] : &(*lim)[n];
        out[n] += milli(*q);
      }
    }
  out["pods"] += 1000;
  return out;
}

// Items: pod keys "<ns>/<name>".
class Scheduler : public Controller {
 public:
  const char* name() const override { return "scheduler"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr& obj, const ObjPtr& prev) override {
    const bool deleted = std::strcmp(type, "DELETED") == 0;
    if (&ri == pod_ri_) {
      const bool pending = !deleted && wants_scheduling(*obj);
      std::string target = pending ? pod_target_node(*obj) : "";
      unindex(key);
      if (pending) {
        waiting_[key] = target;
        index_add(by_node_, target, key);
        cm.enqueue(ControllerManager::kScheduler, key);
      }
      // a pod bound to a Node went away or finished: what it requested is free again
      if (prev) {
        const std::string node = jstr(*prev, {"spec", "nodeName"});
        if (!node.empty() && (deleted || jstr(*obj, {"spec", "nodeName"}).empty() ||
                              terminal(*obj) != terminal(*prev)))
          retry_node(cm, node);
      }
    } else if (&ri == node_ri_) {
      // taints, allocatable, labels or unschedulable may have changed (a new Node may fit)
      retry_node(cm, key);
    }
  }

  void on_clear() override {
    waiting_.clear();
    by_node_.clear();
  }

  void enqueue_all(ControllerManager& cm) override {
    for (const auto& [key, node] : waiting_) cm.enqueue(ControllerManager::kScheduler, key);
  }

  void reconcile(ControllerManager& cm, const std::string& key) override {
    Store& st = cm.store();
    ObjPtr pod = st.find_key_l(*pod_ri_, key);
    if (!pod || !wants_scheduling(*pod)) return;
    const std::string target = pod_target_node(*pod);
    // the Nodes to try: the one the affinity names, else every Node
    std::vector<ObjPtr> nodes;
    if (!target.empty()) {
      if (ObjPtr n = st.find_l(*node_ri_, "", target)) nodes.push_back(n);
    } else {
      nodes = st.list_l(*node_ri_);
    }
    for (const ObjPtr& n : nodes)
      if (filter(st, *pod, *n).empty()) return bind(st, pod, jstr(*n, {"metadata", "name"}));
    unschedulable(st, pod, fit_error(st, *pod));
  }

 private:
  static bool terminal(const json& pod) {
    const std::string phase = jstr(pod, {"status", "phase"});
    return phase == "Succeeded" || phase == "Failed";
  }

  static bool wants_scheduling(const json& pod) {
    const std::string sched = jstr(pod, {"spec", "schedulerName"}, "default-scheduler");
    return jstr(pod, {"spec", "nodeName"}).empty() && !is_terminating(pod) &&
           sched == "default-scheduler";
  }

  void unindex(const std::string& key) {
    auto it = waiting_.find(key);
    if (it == waiting_.end()) return;
    index_remove(by_node_, it->second, key);
    waiting_.erase(it);
  }

  void retry_node(ControllerManager& cm, const std::string& node) {
    for (const std::string& n : {node, std::string()})
      if (auto it = by_node_.find(n); it != by_node_.end())
        for (const auto& k : it->second) cm.enqueue(ControllerManager::kScheduler, k);
  }

  // The first failing filter's reason for this Node ("" when the pod fits).
  std::string filter(Store& st, const json& pod, const json& node) {
    const json* tols = jptr(pod, {"spec", "tolerations"});
    if (jbool(node, {"spec", "unschedulable"})) {
      json t{{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}};
      json probe{{"spec", {{"taints", json::array({t})}}}};
      if (untolerated_taint(probe, tols, {"NoSchedule"}) != nullptr)
        return "node(s) were unschedulable";
    }
    if (const json* t = untolerated_taint(node, tols, {"NoSchedule", "NoExecute"}))
      return "node(s) had untolerated taint " + describe_taint(*t);
    static const json kEmpty = json::object();
    const json* spec = jptr(pod, {"spec"});
    if (!pod_spec_fits_node(spec ? *spec : kEmpty, node))
      return "node(s) didn't match Pod's node affinity/selector";
    // NodeResourcesFit against what the pods bound to this Node request
    const std::string name = jstr(node, {"metadata", "name"});
    std::map<std::string, long double> used;
    if (const auto* keys = st.pods_on_node_l(name))
      for (const auto& k : *keys) {
        ObjPtr p = st.find_key_l(*pod_ri_, k);
        if (!p || jstr(*p, {"spec", "nodeName"}) != name || terminal(*p)) continue;
        for (const auto& [r, v] : pod_requests(*p)) used[r] += v;
      }
    std::vector<std::string> short_of;
    for (const auto& [r, v] : pod_requests(pod)) {
      if (v <= 0) continue;
      const json* allocatable = jptr(node, {"status", "allocatable"});
      const long double have = allocatable && allocatable->is_object() && allocatable->contains(r)
                                   ? milli((*allocatable)[r])
                                   : 0;
      if (used[r] + v > have)
        short_of.push_back(r == "pods" ? "Too many pods" : "Insufficient " + r);
    }
    if (short_of.empty()) return "";
    std::sort(short_of.begin(), short_of.end());
    return short_of.front();
  }

  // FitError.Error() with the preemption PostFilter's summary, as the scheduler writes it.
  std::string fit_error(Store& st, const json& pod) {
    std::map<std::string, int> reasons;
    int victims_none = 0, not_helpful = 0;
    const auto nodes = st.list_l(*node_ri_);
    for (const ObjPtr& n : nodes) {
      const std::string why = filter(st, pod, *n);
      if (why.empty()) continue;
      ++reasons[why];
      // resources could be freed by preempting lower-priority pods; daemon pods have the same
      // priority, so nothing is found
      if (why.rfind("Insufficient ", 0) == 0 || why == "Too many pods")
        ++victims_none;
      else
        ++not_helpful;
    }
    auto join = [](std::vector<std::string> v) {
      std::sort(v.begin(), v.end());
      std::string out;
      for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
      return out;
    };
    std::vector<std::string> parts;
    for (const auto& [why, n] : reasons) parts.push_back(std::to_string(n) + " " + why);
    std::vector<std::string> pre;
    if (victims_none > 0)
      pre.push_back(std::to_string(victims_none) + " No preemption victims found for incoming pod");
    if (not_helpful > 0)
      pre.push_back(std::to_string(not_helpful) + " Preemption is not helpful for scheduling");
    const std::string total = std::to_string(nodes.size());
    return "0/" + total + " nodes are available: " + join(parts) + ". preemption: 0/" + total +
           " nodes are available: " + join(pre) + ".";
  }

  void bind(Store& st, const ObjPtr& pod, const std::string& node) {
    json next = *pod;
    next["spec"]["nodeName"] = node;
    set_pod_scheduled(next, "True", "", "");
    st.commit_l(*pod_ri_, std::move(next));
  }

  static void set_pod_scheduled(json& pod, const std::string& status, const std::string& reason,
                                const std::string& message) {
    json& conds = pod["status"]["conditions"];
    if (!conds.is_array()) conds = json::array();
    json c{{"type", "PodScheduled"},
           {"status", status},
           {"lastProbeTime", nullptr},
           {"lastTransitionTime", rfc3339_now()}};
    if (!reason.empty()) c["reason"] = reason;
    if (!message.empty()) c["message"] = message;
    for (auto& o : conds)
      if (o.value("type", "") == "PodScheduled") {
        if (o.value("status", "") == status) c["lastTransitionTime"] = o["lastTransitionTime"];
        o = c;
        return;
      }
    conds.push_back(c);
  }

  void unschedulable(Store& st, const ObjPtr& pod, const std::string& message) {
    const json* conds = jptr(*pod, {"status", "conditions"});
    bool same = false;
    if (conds && conds->is_array())
      for (const auto& c : *conds)
        if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False" &&
            c.value("message", "") == message)
          same = true;
    if (same) return;
    json next = *pod;
    set_pod_scheduled(next, "False", "Unschedulable", message);
    st.commit_l(*pod_ri_, std::move(next));
    // FailedScheduling: one Event per pod, its count bumped when the message changes
    const std::string ns = jstr(*pod, {"metadata", "namespace"});
    const std::string name = jstr(*pod, {"metadata", "name"});
    const std::string ev_name = name + ".failedscheduling";
    const std::string now = rfc3339_now();
    if (ObjPtr ev = st.find_l(*ev_ri_, ns, ev_name)) {
      json e = *ev;
      e["message"] = message;
      e["count"] = e.value("count", 1) + 1;
      e["lastTimestamp"] = now;
      st.commit_l(*ev_ri_, std::move(e));
      return;
    }
    st.create_l(*ev_ri_, json{{"apiVersion", "v1"},
                              {"kind", "Event"},
                              {"metadata", {{"name", ev_name}, {"namespace", ns}}},
                              {"involvedObject",
                               {{"apiVersion", "v1"},
                                {"kind", "Pod"},
                                {"name", name},
                                {"namespace", ns},
                                {"uid", jstr(*pod, {"metadata", "uid"})}}},
                              {"reason", "FailedScheduling"},
                              {"message", message},
                              {"type", "Warning"},
                              {"count", 1},
                              {"firstTimestamp", now},
                              {"lastTimestamp", now},
                              {"source", {{"component", "default-scheduler"}}},
                              {"reportingComponent", "default-scheduler"},
                              {"reportingInstance", ""},
                              {"eventTime", nullptr}});
  }

  const ResourceInfo* pod_ri_ = find_resource_by_plural(ClusterId::Dpu, "pods");
  const ResourceInfo* node_ri_ = find_resource_by_plural(ClusterId::Dpu, "nodes");
  const ResourceInfo* ev_ri_ = find_resource_by_plural(ClusterId::Dpu, "events");
  std::unordered_map<std::string, std::string> waiting_;  // unbound pod -> its target node
  std::unordered_map<std::string, std::set<std::string>> by_node_;  // target node -> pods
};

}  // namespace

std::unique_ptr<Controller> make_scheduler() {
  return std::make_unique<Scheduler>();
}

}  // namespace dpfsim
