// Workloads as real clusters run them (issue 23, parts 2, 3 and 5): charts that break DPF's chart
// contract (labels, annotations, nodeSelector, namespace), Argo CD's annotation tracking and pods
// owned by their DaemonSet; DaemonSet pods created unbound and bound by the scheduler, which
// leaves a pod it cannot place Pending/Unschedulable; taints as the DaemonSet controller reads
// them; DPF's privileged-pod policy rejecting the DaemonSet at Argo's sync (Audit admits);
// DPF's DPUDevice controller writing status and its finalizer; DPF upgraded in place.
#include <gtest/gtest.h>

#include <string>

#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

const std::string kDs = "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets";
const std::string kWorkloadsUuid = "5c0e2d1a-9f3b-4c2d-8e7f-000000000023";

std::string device_name(int i) {
  char buf[32];
  snprintf(buf, sizeof buf, "dpu-device-%04d", i);
  return buf;
}

// The Application's sync operation phase ("" before there is one, or no Application yet).
std::string sync_phase(const json& app) {
  const json* st = app.contains("status") && app["status"].is_object() ? &app["status"] : nullptr;
  if (st == nullptr || !st->contains("operationState")) return "";
  return (*st)["operationState"].value("phase", "");
}

bool running_ready(const json& p) {
  return p["status"].value("phase", "") == "Running" &&
         cond(p, "Ready").value("status", "") == "True";
}

class Workloads : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(4, 0); }
  void TearDown() override {
    sim.ctl("DELETE", "/charts");
    sim.ctl("POST", "/dpf-config", json{{"privileged_pod_enforcement", true}});
  }

  void label_device(int i, const std::string& k, const std::string& v) {
    json p{{"spec", {{"cluster", {{"nodeLabels", {{k, v}}}}}}}};
    Resp r = sim.m("PATCH", kDevPath + device_name(i), p.dump(), "application/merge-patch+json");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // A DPUService as the product renders it, placed on Nodes labelled tenant=<tenant>.
  json service(const std::string& name, const std::string& chart, const std::string& tenant,
               bool privileged = false) {
    json spec{{"helmChart", {{"source", {{"chart", chart}}}}},
              {"security", {{"privileged", privileged}}},
              {"serviceDaemonSet",
               {{"labels", {{"nico/extension-service-id", kWorkloadsUuid}}},
                {"annotations", {{"nico/extension-service-revision", "1"}}},
                {"nodeSelector",
                 {{"nodeSelectorTerms",
                   {{{"matchExpressions",
                      {{{"key", "tenant"}, {"operator", "In"}, {"values", {tenant}}}}}}}}}}}}};
    return make_dpuservice(name, spec);
  }
  void create(const json& svc) {
    Resp r = sim.m("POST", dpuservice_path(), svc.dump());
    ASSERT_EQ(r.status, 201) << r.body;
  }
  json chart(const json& props) { return sim.ctl("POST", "/charts", props).j(); }
  json all_pods(const std::string& ns_path = kPods) { return sim.d("GET", ns_path).j()["items"]; }
  json app(const std::string& svc) { return sim.m("GET", kApps + "dpu-cplane-tenant1-" + svc).j(); }
  json daemonset(const std::string& name) { return sim.d("GET", kDs + "/" + name).j(); }
};

}  // namespace

TEST_F(Workloads, AChartThatDropsLabelsAndAnnotationsIsStillTrackedAndOwned) {
  label_device(0, "tenant", "lab");
  chart({{"chart", "nolabels"}, {"ignores_labels", true}, {"ignores_annotations", true}});
  create(service("nl", "nolabels", "lab"));
  const std::string ds_name = "dpu-cplane-tenant1-nl-nolabels";
  json pods;
  ASSERT_TRUE(wait_until([&] {
    pods = all_pods();
    return pods.size() == 1 && running_ready(pods[0]);
  }));
  const json& md = pods[0]["metadata"];
  EXPECT_FALSE(md["labels"].contains("nico/extension-service-id")) << md.dump();
  EXPECT_FALSE(md["labels"].contains("svc.dpu.nvidia.com/service"));
  EXPECT_FALSE(md.contains("annotations") &&
               md["annotations"].contains("nico/extension-service-revision"));
  // what holds whatever the chart does: the pod's controller reference and Argo's tracking
  ASSERT_EQ(md["ownerReferences"].size(), 1u);
  EXPECT_EQ(md["ownerReferences"][0]["kind"], "DaemonSet");
  EXPECT_EQ(md["ownerReferences"][0]["name"], ds_name);
  EXPECT_TRUE(md["ownerReferences"][0]["controller"].get<bool>());
  json ds = daemonset(ds_name);
  EXPECT_EQ(md["ownerReferences"][0]["uid"], ds["metadata"]["uid"]);
  EXPECT_EQ(ds["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"],
            "dpu-cplane-tenant1-nl:apps/DaemonSet:dpf-operator-system/" + ds_name);
  EXPECT_FALSE(ds["metadata"]["labels"].contains("nico/extension-service-id"));
  // Argo refreshes the application's resources and health on its own tick, after the pod is
  // ready (a CI run read Progressing right after the pod's readiness)
  json res;
  ASSERT_TRUE(wait_until([&] {
    res = app("nl")["status"]["resources"];
    return res.size() == 1 && res[0]["health"]["status"] == "Healthy";
  })) << res.dump();
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0]["kind"], "DaemonSet");
  EXPECT_EQ(res[0]["name"], ds_name);
  EXPECT_EQ(res[0]["namespace"], "dpf-operator-system");
  EXPECT_EQ(res[0]["health"]["status"], "Healthy");
  // the unbound-then-bound pod names its node by affinity too
  EXPECT_EQ(pods[0]["spec"]["nodeName"], node_name(0));
  EXPECT_EQ(
      pods[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
          ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
      node_name(0));
}

TEST_F(Workloads, AChartThatIgnoresNodeSelectorRunsEverywhere) {
  label_device(1, "tenant", "ns");
  chart({{"chart", "everywhere"}, {"ignores_node_selector", true}});
  create(service("ev", "everywhere", "ns"));
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    if (pods.size() != 4) return false;
    for (const auto& p : pods)
      if (!running_ready(p)) return false;
    return true;
  })) << all_pods().dump();
  // the label is on one Node only, yet every Node runs the service (doca-platform#23)
  json nodes = sim.d("GET", "/api/v1/nodes?labelSelector=tenant%3Dns").j()["items"];
  EXPECT_EQ(nodes.size(), 1u);
}

TEST_F(Workloads, AChartThatRendersIntoAnotherNamespace) {
  label_device(2, "tenant", "other");
  chart({{"chart", "elsewhere"}, {"namespace", "tenant-space"}});
  create(service("el", "elsewhere", "other"));
  // the namespace the chart hard-codes does not exist: Argo's sync fails, nothing is created
  ASSERT_TRUE(wait_until([&] { return sync_phase(app("el")) == "Failed"; }));
  json a = app("el");
  EXPECT_NE(a["status"]["operationState"]["message"].get<std::string>().find(
                "namespaces \"tenant-space\" not found"),
            std::string::npos)
      << a.dump();
  EXPECT_EQ(a["status"]["sync"]["status"], "OutOfSync");
  EXPECT_EQ(a["status"]["health"]["status"], "Missing");
  ASSERT_EQ(sim.d("POST", "/api/v1/namespaces",
                  json{{"apiVersion", "v1"},
                       {"kind", "Namespace"},
                       {"metadata", {{"name", "tenant-space"}}}}
                      .dump())
                .status,
            201);
  const std::string other = "/api/v1/namespaces/tenant-space/pods";
  ASSERT_TRUE(wait_until(
      [&] {
        json pods = all_pods(other);
        return pods.size() == 1 && running_ready(pods[0]);
      },
      10000));
  EXPECT_TRUE(all_pods().empty());
  // Argo's health follows the pod on its own refresh (see above)
  ASSERT_TRUE(wait_until([&] { return app("el")["status"]["health"]["status"] == "Healthy"; }))
      << app("el").dump();
  json res = app("el")["status"]["resources"];
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0]["namespace"], "tenant-space");
}

TEST_F(Workloads, PrivilegedDaemonSetIsRejectedAtArgoSync) {
  label_device(3, "tenant", "pv");
  chart({{"chart", "privchart"}, {"needs_privileged", true}});
  create(service("pv", "privchart", "pv"));
  ASSERT_TRUE(wait_until([&] { return sync_phase(app("pv")) == "Failed"; }));
  json a = app("pv");
  const std::string msg = a["status"]["operationState"]["message"];
  EXPECT_EQ(msg,
            "one or more objects failed to apply, reason: daemonsets.apps "
            "\"dpu-cplane-tenant1-pv-privchart\" is forbidden: ValidatingAdmissionPolicy "
            "'dpf-deny-privileged-pods' with binding 'dpf-deny-privileged-pods' denied request: "
            "Privileged containers are not allowed for this DPUService unless "
            "security.privileged is set to true.");
  EXPECT_EQ(a["status"]["sync"]["status"], "OutOfSync");
  EXPECT_EQ(a["status"]["health"]["status"], "Missing");
  // DPF says only what its summary says; the reason is the Application's
  ASSERT_TRUE(wait_until([&] {
    json s = sim.m("GET", dpuservice_path("pv")).j();
    return cond(s, "ApplicationsReady")
               .value("message", "")
               .find("Application is not ready (Sync: OutOfSync, Health: Missing)") !=
           std::string::npos;
  }));
  // no DaemonSet, no pod, no FailedCreate Event: the denial happened before anything existed
  EXPECT_EQ(daemonset("dpu-cplane-tenant1-pv-privchart").value("code", 0), 404);
  EXPECT_TRUE(all_pods().empty());
  EXPECT_TRUE(sim.d("GET", "/api/v1/namespaces/dpf-operator-system/events").j()["items"].empty());
  // the namespace DPF deploys to carries the policy's scope label
  EXPECT_EQ(sim.d("GET", "/api/v1/namespaces/dpf-operator-system")
                .j()["metadata"]["labels"]["svc.dpu.nvidia.com/dpuservice-namespace"],
            "dpf-operator-system");
  // the same policy at the API: a client's privileged DaemonSet is refused with 422
  json direct{
      {"apiVersion", "apps/v1"},
      {"kind", "DaemonSet"},
      {"metadata", {{"name", "direct"}, {"namespace", "dpf-operator-system"}}},
      {"spec",
       {{"selector", {{"matchLabels", {{"a", "b"}}}}},
        {"template",
         {{"metadata",
           {{"labels",
             {{"a", "b"},
              {"svc.dpu.nvidia.com/service",
               sim.m("GET", dpuservice_path("pv")).j()["status"]["serviceID"]}}}}},
          {"spec",
           {{"containers",
             {{{"name", "c"}, {"image", "x"}, {"securityContext", {{"privileged", true}}}}}}}}}}}}};
  Resp r = sim.d("POST", kDs, direct.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(r.j()["reason"], "Invalid");

  // Audit mode (DPFOperatorConfig privilegedPodEnforcement=false): admitted, the pod runs
  sim.ctl("POST", "/dpf-config", json{{"privileged_pod_enforcement", false}});
  ASSERT_TRUE(wait_until(
      [&] {
        json pods = all_pods();
        return pods.size() == 1 && running_ready(pods[0]);
      },
      10000));
  EXPECT_EQ(app("pv")["status"]["sync"]["status"], "Synced");
}

TEST_F(Workloads, PrivilegedIsAllowedWhenTheServiceSaysSo) {
  label_device(0, "tenant", "ok");
  chart({{"chart", "privok"}, {"needs_privileged", true}});
  create(service("po", "privok", "ok", /*privileged=*/true));
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    return pods.size() == 1 && running_ready(pods[0]);
  }));
}

TEST_F(Workloads, PodsAreCreatedUnboundAndBoundByTheScheduler) {
  // watch the pods from the start: the first version of a daemon pod has no spec.nodeName
  json rv = sim.d("GET", kPods).j()["metadata"]["resourceVersion"];
  label_device(1, "tenant", "sch");
  create(service("sch", "demo", "sch"));
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    return pods.size() == 1 && running_ready(pods[0]);
  }));
  Resp w =
      sim.d("GET", kPods + "?watch=1&timeoutSeconds=1&resourceVersion=" + rv.get<std::string>());
  ASSERT_EQ(w.status, 200);
  std::string first = w.body.substr(0, w.body.find('\n'));
  json ev = json::parse(first);
  EXPECT_EQ(ev["type"], "ADDED");
  EXPECT_FALSE(ev["object"]["spec"].contains("nodeName")) << first;
  EXPECT_EQ(ev["object"]["status"]["phase"], "Pending");
  // the daemon pod tolerates what every daemon pod tolerates
  json tols = all_pods()[0]["spec"]["tolerations"];
  int defaults = 0;
  for (const auto& t : tols)
    if (t["key"].get<std::string>().rfind("node.kubernetes.io/", 0) == 0) ++defaults;
  EXPECT_EQ(defaults, 6) << tols.dump();
}

TEST_F(Workloads, AnExtendedResourceTheNodeLacksLeavesThePodUnschedulable) {
  label_device(2, "tenant", "sf");
  chart({{"chart", "sfchart"}, {"requests", {{"nvidia.com/bf_sf", "1"}}}});
  create(service("sf", "sfchart", "sf"));
  json pod;
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    if (pods.size() != 1) return false;
    pod = pods[0];
    return cond(pod, "PodScheduled").value("reason", "") == "Unschedulable";
  })) << all_pods().dump();
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_EQ(cond(pod, "PodScheduled")["status"], "False");
  EXPECT_EQ(cond(pod, "PodScheduled")["message"],
            "0/4 nodes are available: 1 Insufficient nvidia.com/bf_sf, 3 node(s) didn't match "
            "Pod's node affinity/selector. preemption: 0/4 nodes are available: 1 No preemption "
            "victims found for incoming pod, 3 Preemption is not helpful for scheduling.");
  json evs = sim.d("GET",
                   "/api/v1/namespaces/dpf-operator-system/events?fieldSelector=reason%3D"
                   "FailedScheduling")
                 .j()["items"];
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0]["involvedObject"]["name"], pod["metadata"]["name"]);
  EXPECT_EQ(evs[0]["source"]["component"], "default-scheduler");
  // the device plugin advertises the resource: the scheduler binds the pod
  json st{
      {"status",
       {{"capacity", {{"nvidia.com/bf_sf", "4"}}}, {"allocatable", {{"nvidia.com/bf_sf", "4"}}}}}};
  ASSERT_EQ(sim.d("PATCH", "/api/v1/nodes/" + node_name(2) + "/status", st.dump(),
                  "application/merge-patch+json")
                .status,
            200);
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    return pods.size() == 1 && running_ready(pods[0]);
  }));
  EXPECT_EQ(all_pods()[0]["spec"]["nodeName"], node_name(2));
}

TEST_F(Workloads, TaintsAsTheDaemonSetControllerReadsThem) {
  json taint{
      {"spec",
       {{"taints", {{{"key", "dedicated"}, {"value", "infra"}, {"effect", "NoSchedule"}}}}}}};
  ASSERT_EQ(
      sim.d("PATCH", "/api/v1/nodes/" + node_name(0), taint.dump(), "application/merge-patch+json")
          .status,
      200);
  label_device(0, "tenant", "tt");
  label_device(1, "tenant", "tt");
  create(service("tt", "demo", "tt"));
  ASSERT_TRUE(wait_until([&] {
    json pods = all_pods();
    return pods.size() == 1 && running_ready(pods[0]);
  }));
  // an untolerated NoSchedule taint: the controller creates no pod there at all
  EXPECT_EQ(all_pods()[0]["spec"]["nodeName"], node_name(1));
  json ds = daemonset("dpu-cplane-tenant1-tt-demo");
  EXPECT_EQ(ds["status"]["desiredNumberScheduled"], 1);
  // a NoSchedule taint added later leaves the running pod alone; NoExecute evicts it
  json later{
      {"spec",
       {{"taints", {{{"key", "dedicated"}, {"value", "infra"}, {"effect", "NoSchedule"}}}}}}};
  ASSERT_EQ(
      sim.d("PATCH", "/api/v1/nodes/" + node_name(1), later.dump(), "application/merge-patch+json")
          .status,
      200);
  EXPECT_FALSE(wait_until([&] { return all_pods().empty(); }, 500));
  json evict{{"spec",
              {{"taints", {{{"key", "dedicated"}, {"value", "infra"}, {"effect", "NoExecute"}}}}}}};
  ASSERT_EQ(
      sim.d("PATCH", "/api/v1/nodes/" + node_name(1), evict.dump(), "application/merge-patch+json")
          .status,
      200);
  ASSERT_TRUE(wait_until([&] { return all_pods().empty(); }));
}

TEST_F(Workloads, DpfWritesTheDpuDeviceStatusAndItsFinalizer) {
  // DPF protects a device its DPU uses
  ASSERT_TRUE(wait_until([&] {
    json d = sim.m("GET", kDevPath + device_name(0)).j();
    return d["metadata"].value("finalizers", json::array()) ==
           json::array({"provisioning.dpu.nvidia.com/dpudevice-protection"});
  }));
  json patch{{"spec", {{"cluster", {{"nodeLabels", {{"k", "v"}}}}}}}};
  Resp r = sim.m("PATCH", kDevPath + device_name(0), patch.dump(), "application/merge-patch+json");
  ASSERT_EQ(r.status, 200);
  const std::string rv = r.j()["metadata"]["resourceVersion"];
  const long long gen = r.j()["metadata"]["generation"];
  // ... and answers every spec change with a status write: a newer resourceVersion
  ASSERT_TRUE(wait_until([&] {
    json d = sim.m("GET", kDevPath + device_name(0)).j();
    return d["status"].value("observedGeneration", 0LL) == gen;
  }));
  json d = sim.m("GET", kDevPath + device_name(0)).j();
  EXPECT_NE(d["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(cond(d, "Ready").value("observedGeneration", 0LL), gen);
  // so a write decided on the patch's answer meets 409
  json stale{{"metadata", {{"resourceVersion", rv}}},
             {"spec", {{"cluster", {{"nodeLabels", {{"k2", "v"}}}}}}}};
  r = sim.m("PATCH", kDevPath + device_name(0), stale.dump(), "application/merge-patch+json");
  EXPECT_EQ(r.status, 409) << r.body;
  // a deleted device waits for its DPU, then goes
  r = sim.m("DELETE", kDevPath + device_name(1));
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.j()["metadata"].contains("deletionTimestamp")) << r.body;
  ASSERT_TRUE(wait_until([&] { return sim.m("GET", kDevPath + device_name(1)).status == 404; }));
  EXPECT_EQ(sim.d("GET", "/api/v1/nodes/" + node_name(1)).status, 404);
}

TEST_F(Workloads, DpfUpgradedInPlaceServesTheNewCrds) {
  auto has_cluster = [&] {
    json doc = sim.m("GET", "/openapi/v3/apis/provisioning.dpu.nvidia.com/v1alpha1").j();
    for (auto& [name, schema] : doc["components"]["schemas"].items())
      if (name.find("DPUDevice") != std::string::npos && name.find("List") == std::string::npos &&
          schema.contains("properties"))
        return schema["properties"]["spec"]["properties"].contains("cluster");
    return false;
  };
  EXPECT_TRUE(has_cluster());
  EXPECT_EQ(sim.ctl("POST", "/profile", json{{"dpf_version", "v25.7"}}).j()["dpf_version"],
            "v25.7");
  EXPECT_FALSE(has_cluster());
  EXPECT_EQ(sim.ctl("POST", "/profile", json{{"dpf_version", "v24.10"}}).status, 200);
  EXPECT_EQ(sim.m("GET", kDevPath).status, 404);
  EXPECT_EQ(sim.ctl("POST", "/profile", json{{"dpf_version", "v99.1"}}).status, 400);
  sim.reset(4, 0);  // back to the startup profile
  EXPECT_EQ(sim.ctl("GET", "/profile").j()["dpf_version"], "v26.10");
  EXPECT_TRUE(has_cluster());
}
