// DPUService controller (DPF's dpuservice-controller): finalizer, serviceID, one Argo CD
// Application per DPU cluster, conditions computed from the *cached* Application status in the same
// reconcile that updates the Application (so Ready=True can be reported for a generation Argo has
// not rendered yet, as real DPF does), deletion through the Applications.
#include <cstring>
#include <set>
#include <unordered_map>

#include "admission.h"
#include "controller_manager.h"
#include "profile.h"
#include "resources.h"
#include "seeding.h"

namespace dpfsim {

std::string dpuservice_service_id(const json& svc) {
  std::string sid = jstr(svc, {"spec", "serviceID"});
  if (!sid.empty()) return sid;
  return sha256_hex("DPUService.svc.dpu.nvidia.com/" + jstr(svc, {"metadata", "namespace"}) + "/" +
                    jstr(svc, {"metadata", "name"}))
      .substr(0, 10);
}

std::string dpuservice_application_name(const json& svc) {
  // appended, not `std::string(...) + "-" + ...`: GCC 12 warns falsely (-Warray-bounds) on that
  // inlined into the unity build's larger unit
  std::string name(names::kDpuClusterName);
  name += '-';
  name += jstr(svc, {"metadata", "name"});
  return name;
}

namespace {

struct Cond {
  std::string type, status, reason, message;
};

json build_conditions(const json& old_status, const std::vector<Cond>& conds, long long gen) {
  json arr = json::array();
  const json* old = jptr(old_status, {"conditions"});
  std::string now = rfc3339_now();
  for (const auto& c : conds) {
    std::string ltt = now;
    if (old && old->is_array())
      for (const auto& o : *old)
        if (o.value("type", "") == c.type && o.value("status", "") == c.status)
          ltt = o.value("lastTransitionTime", now);
    arr.push_back({{"type", c.type},
                   {"status", c.status},
                   {"reason", c.reason},
                   {"message", c.message},
                   {"observedGeneration", gen},
                   {"lastTransitionTime", ltt}});
  }
  return arr;
}

// Ready summary over the other conditions (DPF SetSummary).
Cond summary(const std::vector<Cond>& others) {
  std::vector<std::string> not_ready;
  int severity = 0;  // 1 Pending, 2 Failure, 3 AwaitingDeletion
  for (const auto& c : others) {
    if (c.status == "True") continue;
    not_ready.push_back(c.type);
    int s = c.reason == "AwaitingDeletion" ? 3 : c.reason == "Failure" ? 2 : 1;
    severity = std::max(severity, s);
  }
  if (not_ready.empty()) return {"Ready", "True", "Success", ""};
  std::string msg = "The following conditions are not ready: ";
  for (size_t i = 0; i < not_ready.size(); ++i) msg += (i ? ", " : "") + not_ready[i];
  return {"Ready", "False",
          severity == 3   ? "AwaitingDeletion"
          : severity == 2 ? "Failure"
                          : "Pending",
          msg};
}

json desired_application(const json& svc, const std::string& sid) {
  const Profile& prof = profile();
  bool inject = prof.inject_service_label_always || !jstr(svc, {"spec", "serviceID"}).empty();
  const json& src = svc["spec"]["helmChart"]["source"];
  json source{{"repoURL", argo_repo_url(jstr(src, {"repoURL"}))},
              {"targetRevision", jstr(src, {"version"})},
              {"helm", {{"valuesObject", dpf_values(svc, sid, inject)}}}};
  if (!jstr(src, {"chart"}).empty()) source["chart"] = jstr(src, {"chart"});
  if (!jstr(src, {"path"}).empty()) source["path"] = jstr(src, {"path"});
  if (!jstr(src, {"releaseName"}).empty())
    source["helm"]["releaseName"] = jstr(src, {"releaseName"});
  std::string ns = jstr(svc, {"metadata", "namespace"});
  json app = json{{"apiVersion", "argoproj.io/v1alpha1"},
                  {"kind", "Application"},
                  {"metadata",
                   {{"name", dpuservice_application_name(svc)},
                    {"namespace", names::kDpfNamespace},
                    {"labels",
                     {{names::kDpuClusterLabel, names::kDpuClusterName},
                      {names::kDpuServiceNameLabel, jstr(svc, {"metadata", "name"})},
                      {names::kDpuServiceNamespaceLabel, ns},
                      {names::kComponentLabel, "dpuservice-manager"}}},
                    {"finalizers", json::array({names::kArgoFinalizer})}}},
                  {"spec",
                   {{"project", names::kArgoProject},
                    {"source", source},
                    {"destination", {{"name", names::kDpuClusterName}, {"namespace", ns}}},
                    {"syncPolicy", {{"automated", {{"prune", true}, {"selfHeal", true}}}}}}}};
  // Newer DPF also labels the DPUCluster namespace (internal/argocd/utils.go @7c24d74d).
  if (prof.name != "v24.10")
    app["metadata"]["labels"]["dpu.nvidia.com/cluster-namespace"] = names::kDpfNamespace;
  return app;
}

// Items: DPUService keys "<ns>/<name>".
class DpuServiceController : public Controller {
 public:
  const char* name() const override { return "dpuservice"; }

  void on_event(ControllerManager& cm, const ResourceInfo& ri, const char* type,
                const std::string& key, const ObjPtr& obj, const ObjPtr& prev) override {
    if (&ri == svc_ri_) {
      if (std::strcmp(type, "DELETED") == 0) ensured_.erase(key);
      cm.enqueue(ControllerManager::kDpuService, key);
    } else if (&ri == app_ri_) {
      // DPF watches Applications and maps them to their DPUService by the two labels.
      std::string before = prev ? owner_of(*prev) : "";
      std::string after = owner_of(*obj);
      if (!before.empty() && before != after) {
        index_remove(apps_by_svc_, before, key);
        cm.enqueue(ControllerManager::kDpuService, before);
      }
      if (!after.empty()) {
        if (std::strcmp(type, "DELETED") == 0)
          index_remove(apps_by_svc_, after, key);
        else
          index_add(apps_by_svc_, after, key);
        cm.enqueue(ControllerManager::kDpuService, after);
      }
    }
  }

  void on_clear() override {
    apps_by_svc_.clear();
    ensured_.clear();
  }

  void enqueue_all(ControllerManager& cm) override {
    for (const ObjPtr& o : cm.store().list_l(*svc_ri_))
      cm.enqueue(ControllerManager::kDpuService, Store::key_of(*svc_ri_, *o));
  }

  // Deletion and the Application write wait for the DPU cluster.
  void on_reachability(ControllerManager& cm) override { enqueue_all(cm); }

  void reconcile(ControllerManager& cm, const std::string& key) override {
    Store& st = cm.store();
    const Delays& d = cm.ctx().delays;
    const Profile& prof = profile();
    ObjPtr svc = st.find_key_l(*svc_ri_, key);
    if (!svc) return;
    std::string uid = jstr(*svc, {"metadata", "uid"});
    bool deleting = is_terminating(*svc);
    bool paused = jbool(*svc, {"spec", "paused"});
    bool fin = has_finalizer(*svc, names::kDpuServiceFinalizer);
    if (!deleting && !fin) {
      json next = *svc;
      json& f = next["metadata"]["finalizers"];
      if (!f.is_array()) f = json::array();
      f.push_back(names::kDpuServiceFinalizer);
      svc = st.commit_l(*svc_ri_, std::move(next));
      if (!svc) return;
      fin = true;
    }
    std::string sid = dpuservice_service_id(*svc);
    bool dic = jbool(*svc, {"spec", "deployInCluster"});
    // The status as read now, kept alive by its own reference (no copy).
    static const json kNoStatus = json::object();
    const ObjPtr read = svc;
    const json* old_status_p = jptr(*read, {"status"});
    const json& old_status = old_status_p ? *old_status_p : kNoStatus;

    if (deleting) {
      // A paused DPUService is never deleted (the finalizer stays).
      if (!fin || paused) return;
      auto apps = applications_of(st, key);
      bool remaining = !apps.empty() || !cm.dpu_reachable();
      for (const ObjPtr& a : apps)
        if (!is_terminating(*a)) st.mark_deleting_l(*app_ri_, a, 0);
      long long gen = (*svc)["metadata"].value("generation", 1LL);
      std::vector<Cond> others = {
          {"ApplicationPrereqsReconciled", "True", "Success", ""},
          {"ApplicationsReconciled", remaining ? "False" : "True",
           remaining ? "AwaitingDeletion" : "Success",
           remaining ? "The following applications are awaiting deletion: " +
                           dpuservice_application_name(*svc)
                     : ""},
          {"ApplicationsReady", "False", "Pending", ""},
          {"DPUServiceInterfaceReconciled", "True", "Success", ""}};
      if (prof.config_ports_condition)
        others.push_back({"ConfigPortsReconciled", "True", "Success", ""});
      std::vector<Cond> all{summary(others)};
      all.insert(all.end(), others.begin(), others.end());
      json next = *svc;
      next["status"]["conditions"] = build_conditions(old_status, all, gen);
      next["status"]["observedGeneration"] = gen;
      if (prof.status_service_id) next["status"]["serviceID"] = sid;
      if (next["status"] != old_status) svc = st.commit_l(*svc_ri_, std::move(next));
      if (!svc || remaining) return;
      std::string tkey = "dpuservice-finalizer/" + uid;
      if (!cm.due(tkey, d.finalizer_ms)) return;
      json fin_next = *svc;
      json kept = json::array();
      for (const auto& f : fin_next["metadata"]["finalizers"])
        if (f != names::kDpuServiceFinalizer) kept.push_back(f);
      fin_next["metadata"]["finalizers"] = kept;
      st.commit_l(*svc_ri_, std::move(fin_next));
      cm.clear(tkey);
      return;
    }

    long long gen = (*svc)["metadata"].value("generation", 1LL);
    bool pending_reconcile = old_status.value("observedGeneration", -1LL) != gen;
    // DPF reacts to a spec change after dpuservice_sync_ms; until then nothing moves.
    if (pending_reconcile &&
        !cm.due("dpuservice-sync/" + uid + "/" + std::to_string(gen), d.dpuservice_sync_ms))
      return;

    // The cached Application(s) as DPF reads them before it updates them.
    auto apps = applications_of(st, key);
    std::vector<std::string> unready;
    for (const ObjPtr& a : apps) {
      std::string sync = jstr(*a, {"status", "sync", "status"});
      std::string health = jstr(*a, {"status", "health", "status"});
      if (sync == "Synced" && health == "Healthy") continue;
      if (sync.empty() && health.empty()) {
        unready.push_back("Application is not yet deployed.");
        continue;
      }
      unready.push_back("Application is not ready (Sync: " + sync + ", Health: " + health +
                        "). Run 'kubectl describe application " + jstr(*a, {"metadata", "name"}) +
                        " -n " + jstr(*a, {"metadata", "namespace"}) + "' for details.");
    }
    bool apps_ready = unready.empty() && apps.size() == 1;
    std::string unready_msg;
    for (size_t i = 0; i < unready.size(); ++i) unready_msg += (i ? ", " : "") + unready[i];

    // Ensure the Application (not while paused: underlying resources are paused too).
    // The desired Application depends on the DPUService's spec only: once it was ensured for
    // this generation, it is rendered again only when the Application's spec (generation) or
    // labels changed since (Argo's status writes change neither).
    if (!paused && cm.dpu_reachable() && prof.privileged_cel && !dic)
      label_destination_namespace(st, jstr(*svc, {"metadata", "namespace"}));
    if (!paused && cm.dpu_reachable()) {
      Ensured& e = ensured_[key];
      bool fresh = !apps.empty() && e.svc_uid == uid && e.svc_gen == gen &&
                   e.app_uid == jstr(*apps[0], {"metadata", "uid"}) &&
                   e.app_gen == (*apps[0])["metadata"].value("generation", 0LL) &&
                   jptr(*apps[0], {"metadata", "labels"}) &&
                   (*apps[0])["metadata"]["labels"] == e.app_labels;
      if (!fresh) {
        json desired = desired_application(*svc, sid);
        if (dic) {
          desired["spec"]["project"] = "doca-platform-project-host";
          desired["spec"]["destination"]["name"] = "in-cluster";
        }
        ObjPtr app;
        if (apps.empty()) {
          app = st.create_l(*app_ri_, desired);
        } else {
          json next = *apps[0];
          for (auto& [k, v] : desired["metadata"]["labels"].items())
            next["metadata"]["labels"][k] = v;
          next["spec"] = desired["spec"];
          app = next != *apps[0] ? st.commit_l(*app_ri_, std::move(next)) : apps[0];
        }
        if (app)
          e = Ensured{uid, gen, jstr(*app, {"metadata", "uid"}),
                      (*app)["metadata"].value("generation", 0LL), (*app)["metadata"]["labels"]};
      }
    }

    std::vector<Cond> others = {{"ApplicationPrereqsReconciled", "True", "Success", ""},
                                {"ApplicationsReconciled", "True", "Success", ""},
                                {"ApplicationsReady", apps_ready ? "True" : "False",
                                 apps_ready ? "Success" : "Pending", unready_msg},
                                {"DPUServiceInterfaceReconciled", "True", "Success", ""}};
    if (prof.config_ports_condition)
      others.push_back({"ConfigPortsReconciled", "True", "Success", ""});
    std::vector<Cond> all{summary(others)};
    all.insert(all.end(), others.begin(), others.end());

    // Newest DPF: the injected service label is written into the stored spec (pointer aliasing +
    // spec patch), which bumps the generation.
    bool inject = prof.persist_service_label_in_spec && !paused &&
                  !jptr(*svc, {"spec", "interfaces"}) &&
                  jstr(*svc, {"spec", "serviceDaemonSet", "labels", names::kServiceIdLabel}) != sid;
    json status = old_status;
    status["conditions"] = build_conditions(old_status, all, gen);
    status["observedGeneration"] = gen;
    if (prof.status_service_id) status["serviceID"] = sid;
    if (!inject && status == old_status) return;  // checked before copying the object
    json next = *svc;
    if (inject) {
      json& labels = next["spec"]["serviceDaemonSet"]["labels"];
      if (!labels.is_object()) labels = json::object();
      labels[names::kServiceIdLabel] = sid;
    }
    next["status"] = std::move(status);
    if (next != *svc) st.commit_l(*svc_ri_, std::move(next));
  }

 private:
  static std::string owner_of(const json& app) {
    std::string name = jstr(app, {"metadata", "labels", names::kDpuServiceNameLabel});
    if (name.empty()) return "";
    return jstr(app, {"metadata", "labels", names::kDpuServiceNamespaceLabel}) + "/" + name;
  }

  // DPF (v26.8+) labels the namespaces its Applications deploy to in the DPU cluster: the
  // privileged-pod policy's namespaceSelector matches them (NamespaceScopeLabelKey,
  // dpuservice_privileged_pod_enforcement.go).
  void label_destination_namespace(Store& st, const std::string& ns) {
    const ResourceInfo* ns_ri = find_resource_by_plural(ClusterId::Dpu, "namespaces");
    ObjPtr cur = st.find_l(*ns_ri, "", ns);
    if (!cur) {
      json obj = make_namespace(ns);
      obj["metadata"]["labels"][kDpuServiceNamespaceScopeLabel] = ns;
      st.create_l(*ns_ri, std::move(obj));
      return;
    }
    if (jstr(*cur, {"metadata", "labels", kDpuServiceNamespaceScopeLabel}) == ns) return;
    json next = *cur;
    next["metadata"]["labels"][kDpuServiceNamespaceScopeLabel] = ns;
    st.commit_l(*ns_ri, std::move(next));
  }

  // The cached Applications of a DPUService.
  std::vector<ObjPtr> applications_of(Store& st, const std::string& svc_key) {
    std::vector<ObjPtr> out;
    auto it = apps_by_svc_.find(svc_key);
    if (it != apps_by_svc_.end())
      for (const auto& k : it->second)
        if (ObjPtr cur = st.find_key_l(*app_ri_, k)) out.push_back(cur);
    return out;
  }

  const ResourceInfo* svc_ri_ = find_resource_by_plural(ClusterId::Management, "dpuservices");
  const ResourceInfo* app_ri_ = find_resource_by_plural(ClusterId::Management, "applications");
  std::unordered_map<std::string, std::set<std::string>> apps_by_svc_;
  // What the Application was made to look like, per DPUService.
  struct Ensured {
    std::string svc_uid;
    long long svc_gen = -1;
    std::string app_uid;
    long long app_gen = -1;
    json app_labels;
  };
  std::unordered_map<std::string, Ensured> ensured_;
};

}  // namespace

std::unique_ptr<Controller> make_dpuservice_controller() {
  return std::make_unique<DpuServiceController>();
}

}  // namespace dpfsim
