// Simulated Argo CD (application controller + repo server with a Helm chart following DPF's chart
// contract). One Application per DPUService and DPU cluster; after argo_refresh_ms the chart is
// "rendered" from spec.source and applied to the DPU cluster; status.sync/health/operationState
// follow Argo CD semantics (health of a DaemonSet as in gitops-engine).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "admission.h"
#include "controller_manager.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

// apps/v1 DaemonSet update-strategy validation (ValidateDaemonSetUpdateStrategy). Empty when valid.
std::string validate_strategy(const json& ds) {
  std::string name = jstr(ds, {"metadata", "name"});
  const json& st = ds["spec"]["updateStrategy"];
  std::vector<std::string> errs;
  std::string type = jstr(st, {"type"});
  const std::string base = "spec.updateStrategy";
  if (type == "RollingUpdate") {
    const json& ru = st["rollingUpdate"];
    auto pct_ok = [&](const char* k, long long& val) {
      const json& v = ru[k];
      std::string f = base + ".rollingUpdate." + k;
      if (v.is_number_integer()) {
        val = v.get<long long>();
        if (val < 0)
          errs.push_back(f + ": Invalid value: " + std::to_string(val) +
                         ": must be greater than or equal to 0");
        return;
      }
      std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      static const std::regex re("^[0-9]+%$");
      if (!v.is_string() || !std::regex_match(s, re)) {
        errs.push_back(f + ": Invalid value: \"" + s +
                       "\": a valid percent string must be a numeric string followed by an ending "
                       "'%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')");
        val = -1;
        return;
      }
      val = std::atoll(s.c_str());
      if (val > 100)
        errs.push_back(f + ": Invalid value: \"" + s + "\": must not be greater than 100%");
    };
    long long mu = 0, ms = 0;
    pct_ok("maxUnavailable", mu);
    pct_ok("maxSurge", ms);
    if (mu != 0 && ms != 0 && mu > 0 && ms > 0)
      errs.push_back(base + ".rollingUpdate.maxSurge: Invalid value: " + ru["maxSurge"].dump() +
                     ": may not be set when maxUnavailable is non-zero");
    if (mu == 0 && ms == 0)
      errs.push_back(
          base + ".rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0");
  } else if (type != "OnDelete") {
    errs.push_back(base + ".type: Unsupported value: \"" + type +
                   "\": supported values: \"OnDelete\", \"RollingUpdate\"");
  }
  if (errs.empty()) return "";
  std::string msg = "DaemonSet.apps \"" + name + "\" is invalid: ";
  if (errs.size() > 1) msg += "[";
  for (size_t i = 0; i < errs.size(); ++i) msg += (i ? ", " : "") + errs[i];
  if (errs.size() > 1) msg += "]";
  return msg;
}

// gitops-engine getAppsv1DaemonSetHealth.
std::pair<std::string, std::string> daemonset_health(const json& ds) {
  std::string name = jstr(ds, {"metadata", "name"});
  const json st = ds.contains("status") ? ds["status"] : json::object();
  long long desired = st.value("desiredNumberScheduled", 0LL);
  long long updated = st.value("updatedNumberScheduled", 0LL);
  long long available = st.value("numberAvailable", 0LL);
  if (jstr(ds, {"spec", "updateStrategy", "type"}) == "OnDelete")
    return {"Healthy", "daemon set " + std::to_string(updated) + " out of " +
                           std::to_string(desired) + " new pods have been updated"};
  long long gen = ds["metadata"].value("generation", 0LL);
  if (gen > st.value("observedGeneration", 0LL))
    return {"Progressing",
            "Waiting for rollout to finish: observed daemon set generation less than desired "
            "generation"};
  if (updated < desired)
    return {"Progressing", "Waiting for daemon set \"" + name +
                               "\" rollout to finish: " + std::to_string(updated) + " out of " +
                               std::to_string(desired) + " new pods have been updated..."};
  if (available < desired)
    return {"Progressing", "Waiting for daemon set \"" + name +
                               "\" rollout to finish: " + std::to_string(available) + " of " +
                               std::to_string(desired) + " updated pods are available..."};
  return {"Healthy", ""};
}

// Items: Application keys "<ns>/<name>".
class ArgoController : public Controller {
 public:
  const char* name() const override { return "argo"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr& obj, const ObjPtr& prev) override {
    bool deleted = std::strcmp(type, "DELETED") == 0;
    if (&ri == app_ri_) {
      std::string name = jstr(*obj, {"metadata", "name"});
      if (deleted)
        index_remove(apps_by_name_, name, key);
      else
        index_add(apps_by_name_, name, key);
      cm.enqueue(ControllerManager::kArgo, key);
    } else if (&ri == ds_ri_) {
      // Health is live: Argo watches the resources it tracks.
      std::string before = prev ? tracking_key(*prev) : "";
      std::string after = tracking_key(*obj);
      if (!before.empty() && (before != after || deleted)) index_remove(tracked_, before, key);
      if (!after.empty() && !deleted) index_add(tracked_, after, key);
      for (const std::string& t : {before, after})
        if (!t.empty()) enqueue_apps_named(cm, t);
    } else if (&ri == pod_ri_) {
      // The deletion cascade waits for the pods of the tracked DaemonSets.
      for (const ObjPtr& o : {obj, prev}) {
        if (!o) continue;
        const json* refs = jptr(*o, {"metadata", "ownerReferences"});
        if (!refs || !refs->is_array()) continue;
        for (const auto& r : *refs) {
          const ResourceInfo* ori = nullptr;
          std::string dkey;
          if (!cm.store().find_uid_l(r.value("uid", ""), ori, dkey) || ori != ds_ri_) continue;
          ObjPtr ds = cm.store().find_key_l(*ds_ri_, dkey);
          std::string t = ds ? tracking_key(*ds) : "";
          if (t.empty()) continue;
          auto it = apps_by_name_.find(t);
          if (it == apps_by_name_.end()) continue;
          for (const auto& ak : it->second)
            if (ObjPtr app = cm.store().find_key_l(*app_ri_, ak); app && is_terminating(*app))
              cm.enqueue(ControllerManager::kArgo, ak);
        }
      }
    }
  }

  void on_clear() override {
    apps_by_name_.clear();
    tracked_.clear();
  }

  void enqueue_all(ControllerManager& cm) override {
    for (const ObjPtr& o : cm.store().list_l(*app_ri_))
      cm.enqueue(ControllerManager::kArgo, Store::key_of(*app_ri_, *o));
  }
  void on_reachability(ControllerManager& cm) override { enqueue_all(cm); }
  void on_knobs(ControllerManager& cm) override { enqueue_all(cm); }

  void reconcile(ControllerManager& cm, const std::string& key) override {
    Store& st = cm.store();
    ObjPtr app = st.find_key_l(*app_ri_, key);
    if (!app) return;
    std::map<std::string, json> chart_faults;
    {
      std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
      chart_faults = cm.ctx().knobs.chart_faults;
    }
    std::string name = jstr(*app, {"metadata", "name"});
    std::string uid = jstr(*app, {"metadata", "uid"});
    std::string dest_ns = jstr(*app, {"spec", "destination", "namespace"});
    if (is_terminating(*app)) {
      // Foreground cascade (resources-finalizer): tracked resources and their pods go first.
      if (!has_finalizer(*app, names::kArgoFinalizer) || !cm.dpu_reachable()) return;
      bool remaining = false;
      for (const ObjPtr& ds : tracked_daemonsets(st, name)) {
        remaining = true;
        std::string ds_uid = jstr(*ds, {"metadata", "uid"});
        bool pods_left = false;
        std::vector<ObjPtr> owned;
        if (const auto* keys = st.owned_by_l(*pod_ri_, ds_uid))
          for (const auto& k : *keys)
            if (ObjPtr p = st.find_key_l(*pod_ri_, k)) owned.push_back(p);
        for (const ObjPtr& p : owned) {
          pods_left = true;
          if (!is_terminating(*p)) st.mark_deleting_l(*pod_ri_, p, 30);
        }
        if (!is_terminating(*ds))
          st.mark_deleting_l(*ds_ri_, ds, 0);  // foregroundDeletion: kept until its pods are gone
        else if (!pods_left)
          st.erase_l(*ds_ri_, jstr(*ds, {"metadata", "namespace"}),
                     jstr(*ds, {"metadata", "name"}));
      }
      if (remaining) return;
      json next = *app;
      json kept = json::array();
      for (const auto& f : next["metadata"]["finalizers"])
        if (f != names::kArgoFinalizer) kept.push_back(f);
      next["metadata"]["finalizers"] = kept;
      st.commit_l(*app_ri_, std::move(next));
      return;
    }
    const json& spec = (*app)["spec"];
    // Fast path: rendered, synced, and the live health unchanged -> nothing to do (no copies).
    if (const json* cur = jptr(*app, {"status"});
        cur && cur->is_object() && compared_to_current(*app) &&
        jstr(*cur, {"sync", "status"}) == "Synced" &&
        jstr(spec, {"destination", "name"}) == names::kDpuClusterName) {
      auto tracked = tracked_daemonsets(st, name);
      json health = json{{"status", "Missing"}};
      if (!tracked.empty()) {
        auto [h, msg] = daemonset_health(*tracked[0]);
        health = msg.empty() ? json{{"status", h}} : json{{"status", h}, {"message", msg}};
      }
      bool same = jptr(*cur, {"health"}) && (*cur)["health"] == health;
      if (same && cur->contains("resources") && (*cur)["resources"].is_array())
        for (const auto& r : (*cur)["resources"])
          if (!r.contains("health") || r["health"] != health) same = false;
      if (same) return;
    }
    json want_compared = {{"source", spec.value("source", json::object())},
                          {"destination", spec.value("destination", json::object())}};
    static const json kNoStatus = json::object();
    const json* stored = jptr(*app, {"status"});
    const json& old_status = stored && stored->is_object() ? *stored : kNoStatus;
    json status = old_status;
    if (jstr(spec, {"destination", "name"}) != names::kDpuClusterName) {
      // Host-cluster (deployInCluster) applications: the host cluster is not simulated.
      json next = *app;
      next["status"]["sync"] = {{"status", "Synced"}, {"comparedTo", want_compared}};
      next["status"]["health"] = {{"status", "Healthy"}};
      next["status"]["operationState"] = {{"phase", "Succeeded"}};
      if (next != *app) st.commit_l(*app_ri_, std::move(next));
      return;
    }
    bool refreshed =
        jptr(status, {"sync", "comparedTo"}) && status["sync"]["comparedTo"] == want_compared;
    std::string chart = jstr(spec, {"source", "chart"});
    // A failed render/sync is retried every argo_refresh_ms (Argo's refresh and sync retries).
    bool failed = refreshed && jstr(status, {"sync", "status"}) != "Synced";
    if (failed) refreshed = false;
    if (!refreshed && cm.dpu_reachable()) {
      std::string tkey =
          "argo-refresh/" + uid + "/" + std::to_string(fnv1a32(want_compared.dump()));
      if (cm.due(tkey, cm.ctx().delays.argo_refresh_ms)) {
        cm.clear(tkey);
        std::string now = rfc3339_now();
        status["reconciledAt"] = now;
        status["sync"]["comparedTo"] = want_compared;
        status["sync"]["revision"] = jstr(spec, {"source", "targetRevision"});
        status.erase("conditions");
        auto fault = chart_faults.find(chart);
        std::string kind = fault == chart_faults.end() ? "" : fault->second.value("kind", "");
        std::string fmsg = fault == chart_faults.end() ? "" : fault->second.value("message", "");
        if (kind == "pull") {
          if (fmsg.empty())
            fmsg = "failed to pull chart " + jstr(spec, {"source", "repoURL"}) + "/" + chart + ":" +
                   jstr(spec, {"source", "targetRevision"}) + ": unexpected status code 401";
          status["sync"]["status"] = "Unknown";
          status["conditions"] = json::array(
              {{{"type", "ComparisonError"},
                {"message",
                 "Failed to load target state: failed to generate manifest for source 1 "
                 "of 1: rpc error: code = Unknown desc = " +
                     fmsg},
                {"lastTransitionTime", now}}});
        } else {
          json desired = render_chart_daemonset(*app, chart_props(cm.ctx(), chart));
          const std::string ds_name = jstr(desired, {"metadata", "name"});
          const std::string ds_ns = jstr(desired, {"metadata", "namespace"});
          // CreateNamespace=true covers the destination only; a namespace the chart hard-codes
          // must exist (NamespaceLifecycle).
          if (!st.find_l(*ns_ri_, "", dest_ns)) st.create_l(*ns_ri_, make_namespace(dest_ns));
          std::string err = kind == "sync"
                                ? (fmsg.empty() ? "one or more objects failed to apply" : fmsg)
                                : validate_strategy(desired);
          if (err.empty() && !st.find_l(*ns_ri_, "", ds_ns))
            err = "namespaces \"" + ds_ns + "\" not found";
          ObjPtr ds = err.empty() ? st.find_l(*ds_ri_, ds_ns, ds_name) : nullptr;
          json next;
          if (err.empty()) {
            if (!ds) {
              next = desired;
            } else {
              next = *ds;
              json& md = next["metadata"];
              for (auto& [k, v] : desired["metadata"]["labels"].items()) md["labels"][k] = v;
              for (auto& [k, v] : desired["metadata"]["annotations"].items())
                md["annotations"][k] = v;
              for (auto& [k, v] : desired["spec"].items()) next["spec"][k] = v;
            }
            // The DPU cluster's admission (DPF's privileged-pod policy) judges the apply.
            bool enforce = true;
            {
              std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
              enforce = cm.ctx().knobs.privileged_pod_enforcement;
            }
            if (auto denied = privileged_admission_l(st, enforce, *ds_ri_, next))
              err = jstr(json::parse(denied->body), {"message"});
          }
          json resource{{"group", "apps"},
                        {"version", "v1"},
                        {"kind", "DaemonSet"},
                        {"namespace", ds_ns},
                        {"name", ds_name}};
          if (!err.empty()) {
            status["sync"]["status"] = "OutOfSync";
            status["operationState"] = {
                {"phase", "Failed"},
                {"message", "one or more objects failed to apply, reason: " + err},
                {"startedAt", now},
                {"finishedAt", now},
                {"operation", {{"sync", {{"revision", status["sync"]["revision"]}}}}}};
            resource["status"] = "OutOfSync";
            status["resources"] = json::array({resource});
          } else {
            // Prune tracked DaemonSets that the render no longer produces (renamed release).
            for (const ObjPtr& old : tracked_daemonsets(st, name))
              if (jstr(*old, {"metadata", "name"}) != ds_name ||
                  jstr(*old, {"metadata", "namespace"}) != ds_ns)
                st.erase_l(*ds_ri_, jstr(*old, {"metadata", "namespace"}),
                           jstr(*old, {"metadata", "name"}));
            if (!ds)
              st.create_l(*ds_ri_, std::move(next));
            else if (next != *ds)
              st.commit_l(*ds_ri_, std::move(next));
            status["sync"]["status"] = "Synced";
            status["operationState"] = {
                {"phase", "Succeeded"},
                {"message", "successfully synced (all tasks run)"},
                {"startedAt", now},
                {"finishedAt", now},
                {"operation", {{"sync", {{"revision", status["sync"]["revision"]}}}}}};
            resource["status"] = "Synced";
            status["resources"] = json::array({resource});
          }
        }
      }
    }
    // Health is live (Argo watches the destination cluster), independent of the refresh.
    auto tracked = tracked_daemonsets(st, name);
    if (!status.contains("sync")) {
      // Not yet reconciled by Argo at all: status stays empty.
    } else if (tracked.empty()) {
      status["health"] = {{"status", "Missing"}};
      if (status.contains("resources") && status["resources"].is_array())
        for (auto& r : status["resources"]) r["health"] = status["health"];
    } else {
      auto [h, msg] = daemonset_health(*tracked[0]);
      status["health"] = msg.empty() ? json{{"status", h}} : json{{"status", h}, {"message", msg}};
      if (status.contains("resources") && status["resources"].is_array())
        for (auto& r : status["resources"]) r["health"] = status["health"];
    }
    if (failed) {
      // Same failure again: keep the old timestamps so a persistent fault does not churn writes.
      auto same = [](const json& a, const json& b, std::initializer_list<const char*> path) {
        const json* x = jptr(a, path);
        const json* y = jptr(b, path);
        return (x ? *x : json()) == (y ? *y : json());
      };
      if (same(status, old_status, {"sync", "status"}) &&
          same(status, old_status, {"operationState", "message"}) &&
          same(status, old_status, {"health"})) {
        const json* c1 = jptr(status, {"conditions"});
        const json* c0 = jptr(old_status, {"conditions"});
        bool conds_same =
            (!c1 && !c0) ||
            (c1 && c0 && c1->is_array() && c0->is_array() && c1->size() == c0->size() &&
             (c1->empty() || (*c1)[0].value("message", "") == (*c0)[0].value("message", "")));
        if (conds_same) status = old_status;
      }
    }
    if (status != old_status) {
      json next = *app;
      next["status"] = status;
      st.commit_l(*app_ri_, std::move(next));
    }
  }

 private:
  // The Application's name from the tracking id "<app>:apps/DaemonSet:<ns>/<name>" (whatever
  // namespace the chart rendered into).
  static std::string tracking_key(const json& ds) {
    std::string tid = jstr(ds, {"metadata", "annotations", names::kArgoTrackingId});
    auto colon = tid.find(':');
    if (colon == std::string::npos) return "";
    return tid.substr(0, colon);
  }

  // status.sync.comparedTo describes the current spec.source and spec.destination.
  static bool compared_to_current(const json& app) {
    const json* ct = jptr(app, {"status", "sync", "comparedTo"});
    if (!ct || !ct->is_object() || ct->size() != 2) return false;
    static const json kEmpty = json::object();
    const json* src = jptr(app, {"spec", "source"});
    const json* dst = jptr(app, {"spec", "destination"});
    auto s = ct->find("source");
    auto d = ct->find("destination");
    return s != ct->end() && d != ct->end() && *s == (src ? *src : kEmpty) &&
           *d == (dst ? *dst : kEmpty);
  }

  void enqueue_apps_named(ControllerManager& cm, const std::string& name) {
    auto it = apps_by_name_.find(name);
    if (it != apps_by_name_.end())
      for (const auto& k : it->second) cm.enqueue(ControllerManager::kArgo, k);
  }

  std::vector<ObjPtr> tracked_daemonsets(Store& st, const std::string& app) {
    std::vector<ObjPtr> out;
    auto it = tracked_.find(app);
    if (it != tracked_.end())
      for (const auto& k : it->second)
        if (ObjPtr cur = st.find_key_l(*ds_ri_, k)) out.push_back(cur);
    return out;
  }

  const ResourceInfo* app_ri_ = &known_resource(ClusterId::Management, "applications");
  const ResourceInfo* ds_ri_ = &known_resource(ClusterId::Dpu, "daemonsets");
  const ResourceInfo* pod_ri_ = &known_resource(ClusterId::Dpu, "pods");
  const ResourceInfo* ns_ri_ = &known_resource(ClusterId::Dpu, "namespaces");
  std::unordered_map<std::string, std::set<std::string>> apps_by_name_;
  std::unordered_map<std::string, std::set<std::string>> tracked_;  // app name -> DS keys
};

}  // namespace

std::unique_ptr<Controller> make_argo_controller() {
  return std::make_unique<ArgoController>();
}

}  // namespace dpfsim
