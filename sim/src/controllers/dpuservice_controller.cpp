// DPUService controller: finalizer, status.serviceID/observedGeneration/conditions, deletion.
//
// Ready=True/Success once the DaemonSet it deploys in the DPU cluster is healthy (all desired pods
// updated and Ready) and dpuservice_ready_ms have passed; deployInCluster=true services become
// Ready after dpuservice_ready_ms. On deletion (deletionTimestamp set) the DaemonSet, its
// ControllerRevisions and pods are removed (pods terminate first), then the finalizer is removed
// after finalizer_ms.
#include "controller_manager.h"
#include "resources.h"

namespace dpfsim {

std::string dpuservice_service_id(const json& svc) {
  std::string sid = jstr(svc, {"spec", "serviceID"});
  if (!sid.empty()) return sid;
  return sha256_hex("DPUService.svc.dpu.nvidia.com/" + jstr(svc, {"metadata", "namespace"}) + "/" +
                    jstr(svc, {"metadata", "name"}))
      .substr(0, 10);
}

std::string dpuservice_release_name(const json& svc) {
  std::string r = jstr(svc, {"spec", "helmChart", "source", "releaseName"});
  return r.empty() ? jstr(svc, {"metadata", "name"}) : r;
}

namespace {

struct Cond {
  std::string type, status, reason, message;
};

json build_conditions(const json& old_status, const std::vector<Cond>& conds) {
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

bool ds_healthy(const json& ds, long long svc_generation) {
  if (jstr(ds, {"metadata", "annotations", "sim.dpu.nvidia.com/dpuservice-generation"}) !=
      std::to_string(svc_generation))
    return false;
  const json* st = jptr(ds, {"status"});
  if (!st || !st->is_object()) return false;
  long long gen =
      jptr(ds, {"metadata", "generation"}) ? ds["metadata"]["generation"].get<long long>() : 0;
  if (st->value("observedGeneration", -1LL) != gen) return false;
  long long desired = st->value("desiredNumberScheduled", 0LL);
  return st->value("updatedNumberScheduled", 0LL) == desired &&
         st->value("numberReady", 0LL) == desired && st->value("numberAvailable", 0LL) == desired &&
         st->value("numberMisscheduled", 0LL) == 0 &&
         st->value("currentNumberScheduled", 0LL) == desired;
}

}  // namespace

void reconcile_dpuservices(ControllerManager& cm) {
  Store& st = cm.store();
  const Delays& d = cm.ctx().delays;
  const ResourceInfo& svc_ri = *find_resource_by_plural(ClusterId::Management, "dpuservices");
  const ResourceInfo& ds_ri = *find_resource_by_plural(ClusterId::Dpu, "daemonsets");
  const ResourceInfo& pod_ri = *find_resource_by_plural(ClusterId::Dpu, "pods");

  for (ObjPtr svc : st.list_l(svc_ri)) {
    std::string ns = jstr(*svc, {"metadata", "namespace"});
    std::string uid = jstr(*svc, {"metadata", "uid"});
    bool deleting = is_terminating(*svc);
    bool paused = jbool(*svc, {"spec", "paused"});
    bool fin = has_finalizer(*svc, names::kDpuServiceFinalizer);
    if (!deleting && !fin) {
      json next = *svc;
      json& f = next["metadata"]["finalizers"];
      if (!f.is_array()) f = json::array();
      f.push_back(names::kDpuServiceFinalizer);
      svc = st.commit_l(svc_ri, std::move(next));
      if (!svc) continue;
      fin = true;
    }
    std::string sid = dpuservice_service_id(*svc);
    long long gen = (*svc)["metadata"].value("generation", 1LL);
    bool dic = jbool(*svc, {"spec", "deployInCluster"});
    const json old_status = svc->contains("status") ? (*svc)["status"] : json::object();

    if (deleting) {
      if (!fin || paused) continue;
      // Remove what the service deployed in the DPU cluster; wait until it is gone.
      bool remaining = !cm.dpu_reachable();
      if (cm.dpu_reachable()) {
        for (const ObjPtr& ds : st.list_l(ds_ri, ns)) {
          if (jstr(*ds, {"metadata", "labels", names::kDpuServiceNameLabel}) !=
                  jstr(*svc, {"metadata", "name"}) ||
              jstr(*ds, {"metadata", "labels", names::kDpuServiceNamespaceLabel}) != ns)
            continue;
          st.erase_l(ds_ri, ns, jstr(*ds, {"metadata", "name"}));
          remaining = true;
        }
        for (const ObjPtr& pod : st.list_l(pod_ri, ns))
          if (jstr(*pod, {"metadata", "labels", names::kServiceIdLabel}) == sid) {
            if (!is_terminating(*pod)) st.mark_deleting_l(pod_ri, pod, 30);
            remaining = true;
          }
      }
      std::vector<Cond> others = {
          {"ApplicationPrereqsReconciled", "True", "Success", ""},
          {"ApplicationsReconciled", remaining ? "False" : "True",
           remaining ? "AwaitingDeletion" : "Success",
           remaining ? "The following applications are awaiting deletion: dpu-cplane-tenant1-" +
                           jstr(*svc, {"metadata", "name"})
                     : ""},
          {"ApplicationsReady", "False", "Pending", "Application is being deleted."},
          {"DPUServiceInterfaceReconciled", "True", "Success", ""}};
      std::vector<Cond> all{summary(others)};
      if (!remaining)
        all[0] = {"Ready", "False", "AwaitingDeletion", "The DPUService is being deleted"};
      all.insert(all.end(), others.begin(), others.end());
      json next = *svc;
      next["status"]["conditions"] = build_conditions(old_status, all);
      next["status"]["serviceID"] = sid;
      if (next["status"] != old_status) svc = st.commit_l(svc_ri, std::move(next));
      if (!svc || remaining) continue;
      std::string key = "dpuservice-finalizer/" + uid;
      if (!cm.due(key, d.finalizer_ms)) continue;
      json fin_next = *svc;
      json kept = json::array();
      for (const auto& f : fin_next["metadata"]["finalizers"])
        if (f != names::kDpuServiceFinalizer) kept.push_back(f);
      fin_next["metadata"]["finalizers"] = kept;
      st.commit_l(svc_ri, std::move(fin_next));
      cm.clear(key);
      continue;
    }

    if (paused) continue;

    bool deployed = dic;
    if (!dic) {
      ObjPtr ds = st.find_l(ds_ri, ns, dpuservice_release_name(*svc));
      deployed = ds && ds_healthy(*ds, gen);
    }
    bool already_ready = old_status.value("observedGeneration", -1LL) == gen;
    if (already_ready) {
      already_ready = false;
      if (const json* cs = jptr(old_status, {"conditions"}); cs && cs->is_array())
        for (const auto& c : *cs)
          if (c.value("type", "") == "Ready" && c.value("status", "") == "True")
            already_ready = true;
    }
    bool ready =
        deployed && (already_ready || cm.due("dpuservice-ready/" + uid + "/" + std::to_string(gen),
                                             d.dpuservice_ready_ms));
    std::vector<Cond> others = {
        {"ApplicationPrereqsReconciled", "True", "Success", ""},
        {"ApplicationsReconciled", "True", "Success", ""},
        {"ApplicationsReady", ready ? "True" : "False", ready ? "Success" : "Pending",
         ready ? ""
               : (deployed ? "Application is not ready (Sync: Synced, Health: Progressing)"
                           : "Application is not yet deployed.")},
        {"DPUServiceInterfaceReconciled", "True", "Success", ""}};
    std::vector<Cond> all{summary(others)};
    all.insert(all.end(), others.begin(), others.end());
    json status = old_status;
    status["conditions"] = build_conditions(old_status, all);
    status["observedGeneration"] = gen;
    status["serviceID"] = sid;
    if (status != old_status) {
      json next = *svc;
      next["status"] = status;
      st.commit_l(svc_ri, std::move(next));
    }
  }
}

}  // namespace dpfsim
