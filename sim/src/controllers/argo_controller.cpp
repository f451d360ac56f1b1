// Simulated Argo CD (application controller + repo server with a Helm chart following DPF's chart
// contract). One Application per DPUService and DPU cluster; after argo_refresh_ms the chart is
// "rendered" from spec.source and applied to the DPU cluster; status.sync/health/operationState
// follow Argo CD semantics (health of a DaemonSet as in gitops-engine).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <unordered_map>

#include "controller_manager.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

namespace {

const ResourceInfo& R(ClusterId c, const char* plural) {
  return *find_resource_by_plural(c, plural);
}

std::string trunc63(std::string s) {
  if (s.size() > 63) s.resize(63);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

// Deep merge: b over a (b wins), as Helm merges values maps.
json deep_merge(json a, const json& b) {
  if (!a.is_object() || !b.is_object()) return b;
  for (auto& [k, v] : b.items()) a[k] = a.contains(k) ? deep_merge(a[k], v) : v;
  return a;
}

}  // namespace

ChartNames chart_names(const std::string& release, const std::string& chart, const json& values) {
  ChartNames n;
  std::string name = chart;
  if (const json* o = jptr(values, {"nameOverride"});
      o && o->is_string() && !o->get<std::string>().empty())
    name = o->get<std::string>();
  n.name = trunc63(name);
  if (const json* f = jptr(values, {"fullnameOverride"});
      f && f->is_string() && !f->get<std::string>().empty())
    n.fullname = trunc63(f->get<std::string>());
  else if (release.find(name) != std::string::npos)
    n.fullname = trunc63(release);
  else
    n.fullname = trunc63(release + "-" + name);
  return n;
}

std::string helm_chart_label(const std::string& chart, const std::string& version) {
  std::string v = chart + "-" + version;
  std::replace(v.begin(), v.end(), '+', '_');
  return trunc63(v);
}

json dpf_values(const json& svc, const std::string& service_id, bool inject) {
  const json* sds_p = jptr(svc, {"spec", "serviceDaemonSet"});
  json sds = sds_p && sds_p->is_object() ? *sds_p : json::object();
  if (!sds.contains("labels") || !sds["labels"].is_object()) sds["labels"] = json::object();
  if (inject) sds["labels"][names::kServiceIdLabel] = service_id;
  const json* values_p = jptr(svc, {"spec", "helmChart", "values"});
  json values = values_p && values_p->is_object() ? *values_p : json::object();
  return deep_merge(values, json{{"serviceDaemonSet", sds}});
}

std::string argo_repo_url(const std::string& repo) {
  return starts_with(repo, "oci://") ? repo.substr(6) : repo;
}

json render_chart_daemonset(const json& app, bool privileged_container) {
  const json& src = app["spec"]["source"];
  std::string app_name = jstr(app, {"metadata", "name"});
  std::string ns = jstr(app, {"spec", "destination", "namespace"});
  std::string chart = jstr(src, {"chart"});
  if (chart.empty()) {
    auto parts = split(jstr(src, {"path"}), '/');
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
    chart = parts.empty() ? app_name : parts.back();
  }
  std::string version = jstr(src, {"targetRevision"});
  std::string release = jstr(src, {"helm", "releaseName"});
  if (release.empty()) release = app_name;  // Argo CD: release name defaults to the app name
  const json* vp = jptr(src, {"helm", "valuesObject"});
  json values = vp && vp->is_object() ? *vp : json::object();
  json sds = values.contains("serviceDaemonSet") && values["serviceDaemonSet"].is_object()
                 ? values["serviceDaemonSet"]
                 : json::object();
  ChartNames n = chart_names(release, chart, values);
  std::string repo = jstr(src, {"repoURL"});
  while (!repo.empty() && repo.back() == '/') repo.pop_back();

  json selector{{"app.kubernetes.io/name", n.name}, {"app.kubernetes.io/instance", release}};
  json chart_labels = selector;
  chart_labels["helm.sh/chart"] = helm_chart_label(chart, version);
  chart_labels["app.kubernetes.io/managed-by"] = "Helm";
  const json sds_labels = string_map(jptr(sds, {"labels"}));
  const json sds_annotations = string_map(jptr(sds, {"annotations"}));

  json pod_labels = selector;
  for (auto& [k, v] : sds_labels.items()) pod_labels[k] = v;
  json container{{"name", n.name},
                 {"image", repo + "/" + chart + ":" + version},
                 {"imagePullPolicy", "IfNotPresent"},
                 {"terminationMessagePath", "/dev/termination-log"},
                 {"terminationMessagePolicy", "File"}};
  if (const json* res = jptr(sds, {"resources"}); res && res->is_object() && !res->empty())
    container["resources"] = {{"limits", *res}, {"requests", *res}};
  else
    container["resources"] = json::object();
  if (privileged_container) container["securityContext"] = {{"privileged", true}};
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
  // The reference chart always renders the annotations map; a checksum of the values stands in
  // for config checksums charts commonly add.
  json pod_annotations = sds_annotations;
  if (!pod_annotations.empty()) tmpl["metadata"]["annotations"] = pod_annotations;

  json ds_labels = chart_labels;
  for (auto& [k, v] : sds_labels.items()) ds_labels[k] = v;
  json ds_annotations = sds_annotations;
  ds_annotations[names::kArgoTrackingId] = app_name + ":apps/DaemonSet:" + ns + "/" + n.fullname;

  // apps/v1 defaulting of the update strategy.
  json strategy = json::object();
  if (const json* us = jptr(sds, {"updateStrategy"}); us && us->is_object()) strategy = *us;
  if (!strategy.contains("type") || strategy["type"].is_null()) strategy["type"] = "RollingUpdate";
  if (strategy["type"] == "RollingUpdate") {
    if (!strategy.contains("rollingUpdate") || !strategy["rollingUpdate"].is_object())
      strategy["rollingUpdate"] = json::object();
    json& ru = strategy["rollingUpdate"];
    if (!ru.contains("maxUnavailable") || ru["maxUnavailable"].is_null()) ru["maxUnavailable"] = 1;
    if (!ru.contains("maxSurge") || ru["maxSurge"].is_null()) ru["maxSurge"] = 0;
  }

  return json{{"apiVersion", "apps/v1"},
              {"kind", "DaemonSet"},
              {"metadata",
               {{"name", n.fullname},
                {"namespace", ns},
                {"labels", ds_labels},
                {"annotations", ds_annotations}}},
              {"spec",
               {{"selector", {{"matchLabels", selector}}},
                {"template", tmpl},
                {"updateStrategy", strategy},
                {"revisionHistoryLimit", 10}}}};
}

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
        if (!t.empty()) enqueue_apps_named(cm, t.substr(t.find('/') + 1));
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
          auto it = apps_by_name_.find(t.substr(t.find('/') + 1));
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
      for (const ObjPtr& ds : tracked_daemonsets(st, dest_ns, name)) {
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
          st.erase_l(*ds_ri_, dest_ns, jstr(*ds, {"metadata", "name"}));
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
      auto tracked = tracked_daemonsets(st, dest_ns, name);
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
          bool priv = false;
          {
            std::lock_guard<std::mutex> l(cm.ctx().knobs.mu);
            auto c = cm.ctx().knobs.charts.find(chart);
            priv = c != cm.ctx().knobs.charts.end() && c->second.value("needs_privileged", false);
          }
          json desired = render_chart_daemonset(*app, priv);
          std::string err = kind == "sync"
                                ? (fmsg.empty() ? "one or more objects failed to apply" : fmsg)
                                : validate_strategy(desired);
          if (!err.empty()) {
            status["sync"]["status"] = "OutOfSync";
            status["operationState"] = {
                {"phase", "Failed"},
                {"message", "one or more objects failed to apply, reason: " + err},
                {"startedAt", now},
                {"finishedAt", now},
                {"operation", {{"sync", {{"revision", status["sync"]["revision"]}}}}}};
          } else {
            std::string ds_name = jstr(desired, {"metadata", "name"});
            if (!st.find_l(*ns_ri_, "", dest_ns)) st.create_l(*ns_ri_, make_namespace(dest_ns));
            // Prune tracked DaemonSets that the render no longer produces (renamed release).
            for (const ObjPtr& old : tracked_daemonsets(st, dest_ns, name))
              if (jstr(*old, {"metadata", "name"}) != ds_name)
                st.erase_l(*ds_ri_, dest_ns, jstr(*old, {"metadata", "name"}));
            ObjPtr ds = st.find_l(*ds_ri_, dest_ns, ds_name);
            if (!ds) {
              st.create_l(*ds_ri_, desired);
            } else {
              json next = *ds;
              json& md = next["metadata"];
              for (auto& [k, v] : desired["metadata"]["labels"].items()) md["labels"][k] = v;
              for (auto& [k, v] : desired["metadata"]["annotations"].items())
                md["annotations"][k] = v;
              for (auto& [k, v] : desired["spec"].items()) next["spec"][k] = v;
              if (next != *ds) st.commit_l(*ds_ri_, std::move(next));
            }
            status["sync"]["status"] = "Synced";
            status["operationState"] = {
                {"phase", "Succeeded"},
                {"message", "successfully synced (all tasks run)"},
                {"startedAt", now},
                {"finishedAt", now},
                {"operation", {{"sync", {{"revision", status["sync"]["revision"]}}}}}};
            status["resources"] = json::array({{{"group", "apps"},
                                                {"version", "v1"},
                                                {"kind", "DaemonSet"},
                                                {"namespace", dest_ns},
                                                {"name", ds_name},
                                                {"status", "Synced"}}});
          }
        }
      }
    }
    // Health is live (Argo watches the destination cluster), independent of the refresh.
    auto tracked = tracked_daemonsets(st, dest_ns, name);
    if (!status.contains("sync")) {
      // Not yet reconciled by Argo at all: status stays empty.
    } else if (tracked.empty()) {
      status["health"] = {{"status", "Missing"}};
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
  // "<DaemonSet namespace>/<Application name>" from the tracking id
  // "<app>:apps/DaemonSet:<ns>/<name>".
  static std::string tracking_key(const json& ds) {
    std::string tid = jstr(ds, {"metadata", "annotations", names::kArgoTrackingId});
    auto colon = tid.find(':');
    if (colon == std::string::npos) return "";
    return jstr(ds, {"metadata", "namespace"}) + "/" + tid.substr(0, colon);
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

  std::vector<ObjPtr> tracked_daemonsets(Store& st, const std::string& ns, const std::string& app) {
    std::vector<ObjPtr> out;
    auto it = tracked_.find(ns + "/" + app);
    if (it != tracked_.end())
      for (const auto& k : it->second)
        if (ObjPtr cur = st.find_key_l(*ds_ri_, k)) out.push_back(cur);
    return out;
  }

  const ResourceInfo* app_ri_ = &R(ClusterId::Management, "applications");
  const ResourceInfo* ds_ri_ = &R(ClusterId::Dpu, "daemonsets");
  const ResourceInfo* pod_ri_ = &R(ClusterId::Dpu, "pods");
  const ResourceInfo* ns_ri_ = &R(ClusterId::Dpu, "namespaces");
  std::unordered_map<std::string, std::set<std::string>> apps_by_name_;
  std::unordered_map<std::string, std::set<std::string>> tracked_;  // "<ns>/<app>" -> DS keys
};

}  // namespace

std::unique_ptr<Controller> make_argo_controller() {
  return std::make_unique<ArgoController>();
}

}  // namespace dpfsim
