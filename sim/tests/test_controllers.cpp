// DPF behaviour timelines: seeding, label propagation, DaemonSet placement/rollout, DPUService
// status and deletion.
#include <gtest/gtest.h>

#include <set>

#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

class Controllers : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(4, 0); }

  json node(int i) { return sim.d("GET", "/api/v1/nodes/" + node_name(i)).j(); }
  std::string node_label(int i, const std::string& k) {
    json n = node(i);
    return n["metadata"]["labels"].value(k, "<absent>");
  }
  void set_device_label(int i, const std::string& k, const json& v) {
    json p{{"spec", {{"cluster", {{"nodeLabels", {{k, v}}}}}}}};
    Resp r = sim.m("PATCH", kDevPath + dev_name(i), p.dump(), "application/merge-patch+json");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  json pods(const std::string& selector = "") {
    std::string path = "/api/v1/namespaces/dpf-operator-system/pods";
    if (!selector.empty()) path += "?labelSelector=" + selector;
    return sim.d("GET", path).j()["items"];
  }
  json svc(const std::string& name) { return sim.m("GET", dpuservice_path(name)).j(); }
  std::string ready_of(const json& s) {
    if (!s.contains("status")) return "";
    for (const auto& c : s["status"].value("conditions", json::array()))
      if (c["type"] == "Ready")
        return c["status"].get<std::string>() + "/" + c["reason"].get<std::string>();
    return "";
  }
  static bool pod_ready(const json& p) {
    for (const auto& c : p["status"].value("conditions", json::array()))
      if (c["type"] == "Ready") return c["status"] == "True";
    return false;
  }
  json tenant_selector(const std::string& value) {
    return json{{"serviceDaemonSet",
                 {{"nodeSelector",
                   {{"nodeSelectorTerms",
                     {{{"matchExpressions",
                        {{{"key", "tenant"}, {"operator", "In"}, {"values", {value}}}}}}}}}}}}};
  }
};

}  // namespace

TEST_F(Controllers, SeedingNames) {
  json devs = sim.m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices").j()["items"];
  ASSERT_EQ(devs.size(), 4u);
  EXPECT_EQ(devs[0]["metadata"]["name"], "dpu-device-0000");
  EXPECT_EQ(devs[0]["metadata"]["namespace"], "dpf-operator-system");
  EXPECT_EQ(devs[0]["metadata"]["labels"]["provisioning.dpu.nvidia.com/dpunode-name"], "host-0000");
  json dpu = sim.m("GET", kDpuPath + node_name(0)).j();
  EXPECT_EQ(dpu["spec"]["dpuDeviceName"], "dpu-device-0000");
  EXPECT_EQ(dpu["spec"]["dpuNodeName"], "host-0000");
  json n = node(0);
  // the kubelet's conditions, Ready last (as a kubelet posts them)
  ASSERT_EQ(n["status"]["conditions"].size(), 4u);
  EXPECT_EQ(n["status"]["conditions"][3]["type"], "Ready");
  EXPECT_EQ(n["status"]["conditions"][3]["status"], "True");
  EXPECT_EQ(n["status"]["conditions"][0]["type"], "MemoryPressure");
  EXPECT_EQ(n["status"]["conditions"][0]["status"], "False");
  EXPECT_EQ(sim.d("GET", "/api/v1/nodes").j()["items"].size(), 4u);
}

TEST_F(Controllers, LabelPropagationKeepsForeignLabelsAndRemovesKeys) {
  sim.ctl("POST", "/delays", json{{"label_propagation_ms", 300}});
  ASSERT_EQ(
      sim.d("PATCH", "/api/v1/nodes/" + node_name(1),
            R"({"metadata":{"labels":{"foreign":"kubectl"}}})", "application/merge-patch+json")
          .status,
      200);
  set_device_label(1, "tenant", "blue");
  set_device_label(1, "zone", "z1");
  // Not immediate: the delay applies.
  EXPECT_EQ(node_label(1, "tenant"), "<absent>");
  ASSERT_TRUE(wait_until([&] { return node_label(1, "tenant") == "blue"; }, 3000));
  EXPECT_EQ(node_label(1, "zone"), "z1");
  json dpu = sim.m("GET", kDpuPath + node_name(1)).j();
  EXPECT_EQ(dpu["spec"]["cluster"]["nodeLabels"]["tenant"], "blue");
  json ann = json::parse(
      node(1)["metadata"]["annotations"]["provisioning.dpu.nvidia.com/last-applied-labels-on-dpu"]
          .get<std::string>());
  EXPECT_EQ(ann["tenant"], "blue");
  EXPECT_EQ(ann["provisioning.dpu.nvidia.com/dpunode-name"], "host-0001");
  // Remove one key upstream: it goes away on the Node, the foreign label stays.
  set_device_label(1, "zone", nullptr);
  ASSERT_TRUE(wait_until([&] { return node_label(1, "zone") == "<absent>"; }, 3000));
  EXPECT_EQ(node_label(1, "tenant"), "blue");
  EXPECT_EQ(node_label(1, "foreign"), "kubectl");
  EXPECT_EQ(node_label(1, "provisioning.dpu.nvidia.com/dpunode-name"), "host-0001");
  EXPECT_EQ(node_label(0, "tenant"), "<absent>");
}

TEST_F(Controllers, DaemonSetPodsOnMatchingNodesBecomeReady) {
  sim.ctl("POST", "/delays", json{{"pod_ready_ms", 300}});
  set_device_label(0, "tenant", "red");
  set_device_label(2, "tenant", "red");
  ASSERT_TRUE(wait_until(
      [&] { return node_label(0, "tenant") == "red" && node_label(2, "tenant") == "red"; }));
  Resp r = sim.m("POST", dpuservice_path(), make_dpuservice("web", tenant_selector("red")).dump());
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_TRUE(wait_until([&] { return pods().size() == 2; }));
  json ps = pods();
  std::set<std::string> nodes;
  for (const auto& p : ps) {
    nodes.insert(p["spec"]["nodeName"]);
    EXPECT_EQ(p["status"]["phase"], "Pending");
    // Helm fullname of release "dpu-cplane-tenant1-web" (Argo: the Application name) + chart
    // "demo".
    EXPECT_EQ(p["metadata"]["name"].get<std::string>().size(),
              std::string("dpu-cplane-tenant1-web-demo-xxxxx").size());
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["name"], "dpu-cplane-tenant1-web-demo");
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
    EXPECT_EQ(p["metadata"]["labels"]["app.kubernetes.io/name"], "demo");
    EXPECT_EQ(p["metadata"]["labels"]["app.kubernetes.io/instance"], "dpu-cplane-tenant1-web");
    EXPECT_TRUE(p["metadata"]["labels"].contains("pod-template-generation"));
    EXPECT_TRUE(p["metadata"]["labels"].contains("controller-revision-hash"));
  }
  EXPECT_EQ(nodes, (std::set<std::string>{node_name(0), node_name(2)}));
  EXPECT_NE(ready_of(svc("web")), "True/Success");
  ASSERT_TRUE(wait_until([&] {
    json p = pods();
    return p.size() == 2 && pod_ready(p[0]) && pod_ready(p[1]) &&
           p[0]["status"]["phase"] == "Running";
  }));
  ASSERT_TRUE(wait_until([&] { return ready_of(svc("web")) == "True/Success"; }));
  json s = svc("web");
  std::string sid = s["status"]["serviceID"];
  EXPECT_EQ(sid.size(), 10u);
  // The newest DPF writes the injected service label into the stored spec: generation 2.
  EXPECT_EQ(s["metadata"]["generation"], 2);
  EXPECT_EQ(s["status"]["observedGeneration"], 2);
  EXPECT_EQ(s["spec"]["serviceDaemonSet"]["labels"]["svc.dpu.nvidia.com/service"], sid);
  for (const auto& c : s["status"]["conditions"]) EXPECT_EQ(c["observedGeneration"], 2);
  EXPECT_EQ(s["metadata"]["finalizers"][0], "dpu.nvidia.com/dpuservice");
  EXPECT_EQ(pods("svc.dpu.nvidia.com%2Fservice%3D" + sid).size(), 2u);
  json ds = sim.d("GET",
                  "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets/"
                  "dpu-cplane-tenant1-web-demo")
                .j();
  EXPECT_EQ(ds["metadata"]["labels"]["helm.sh/chart"], "demo-1.0.0");
  EXPECT_EQ(ds["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm");
  EXPECT_FALSE(ds["metadata"]["labels"].contains("dpu.nvidia.com/dpuservice-name"));
  EXPECT_EQ(
      ds["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"],
      "dpu-cplane-tenant1-web:apps/DaemonSet:dpf-operator-system/dpu-cplane-tenant1-web-demo");
  json app = sim.m("GET",
                   "/apis/argoproj.io/v1alpha1/namespaces/dpf-operator-system/applications/"
                   "dpu-cplane-tenant1-web")
                 .j();
  EXPECT_EQ(app["status"]["sync"]["status"], "Synced");
  EXPECT_EQ(app["status"]["health"]["status"], "Healthy");
  EXPECT_EQ(app["status"]["operationState"]["phase"], "Succeeded");
  EXPECT_EQ(app["status"]["sync"]["comparedTo"]["source"], app["spec"]["source"]);
  EXPECT_EQ(app["metadata"]["labels"]["dpu.nvidia.com/dpuservice-name"], "web");
  EXPECT_EQ(app["spec"]["source"]["repoURL"], "registry.example.com/charts");
  EXPECT_EQ(ds["status"]["desiredNumberScheduled"], 2);
  EXPECT_EQ(ds["status"]["numberReady"], 2);
  EXPECT_EQ(ds["status"]["updatedNumberScheduled"], 2);
  EXPECT_EQ(ds["status"]["observedGeneration"], ds["metadata"]["generation"]);
  json crs =
      sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/controllerrevisions").j()["items"];
  ASSERT_EQ(crs.size(), 1u);
  EXPECT_EQ(crs[0]["revision"], 1);
  std::string hash = crs[0]["metadata"]["labels"]["controller-revision-hash"];
  EXPECT_EQ(crs[0]["metadata"]["name"], "dpu-cplane-tenant1-web-demo-" + hash);
  EXPECT_EQ(ds["metadata"]["annotations"]["sim.dpu.nvidia.com/current-revision-hash"], hash);
}

TEST_F(Controllers, RevisionRollsOnValuesChangeAndReleaseName) {
  json spec = tenant_selector("x");
  spec["serviceDaemonSet"]["updateStrategy"] = {{"type", "RollingUpdate"},
                                                {"rollingUpdate", {{"maxUnavailable", "100%"}}}};
  spec["helmChart"] = {{"source", {{"releaseName", "rel"}}}};
  set_device_label(0, "tenant", "x");
  set_device_label(1, "tenant", "x");
  ASSERT_EQ(sim.m("POST", dpuservice_path(), make_dpuservice("roll", spec).dump()).status, 201);
  ASSERT_TRUE(wait_until([&] { return ready_of(svc("roll")) == "True/Success"; }));
  EXPECT_EQ(sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets/rel-demo").status,
            200);
  json before = pods();
  ASSERT_EQ(before.size(), 2u);
  std::string h1 = before[0]["metadata"]["labels"]["controller-revision-hash"];
  sim.ctl("POST", "/delays", json{{"pod_termination_ms", 300}, {"pod_ready_ms", 200}});
  ASSERT_EQ(sim.m("PATCH", dpuservice_path("roll"),
                  R"({"spec":{"serviceDaemonSet":{"annotations":{"rev":"2"}}}})",
                  "application/merge-patch+json")
                .status,
            200);
  // Old pods go Terminating first.
  ASSERT_TRUE(wait_until([&] {
    for (const auto& p : pods())
      if (p["metadata"].contains("deletionTimestamp")) return true;
    return false;
  }));
  ASSERT_TRUE(wait_until(
      [&] {
        json p = pods();
        if (p.size() != 2) return false;
        for (const auto& x : p)
          if (x["metadata"]["labels"]["controller-revision-hash"] == h1 || !pod_ready(x))
            return false;
        return true;
      },
      5000));
  json crs =
      sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/controllerrevisions").j()["items"];
  ASSERT_EQ(crs.size(), 2u);
  std::set<int> revs;
  for (const auto& c : crs) revs.insert(c["revision"].get<int>());
  EXPECT_EQ(revs, (std::set<int>{1, 2}));
  ASSERT_TRUE(wait_until([&] {
    json s = svc("roll");
    return ready_of(s) == "True/Success" && s["status"]["observedGeneration"] == 3;
  }));
}

TEST_F(Controllers, PodTerminatesWhenNodeStopsMatching) {
  sim.ctl("POST", "/delays", json{{"pod_termination_ms", 400}});
  set_device_label(3, "tenant", "g");
  ASSERT_EQ(
      sim.m("POST", dpuservice_path(), make_dpuservice("g", tenant_selector("g")).dump()).status,
      201);
  ASSERT_TRUE(wait_until([&] {
    json p = pods();
    return p.size() == 1 && pod_ready(p[0]);
  }));
  set_device_label(3, "tenant", nullptr);
  ASSERT_TRUE(wait_until([&] {
    json p = pods();
    return p.size() == 1 && p[0]["metadata"].contains("deletionTimestamp");
  }));
  json p = pods()[0];
  EXPECT_EQ(p["status"]["phase"], "Running");
  EXPECT_FALSE(pod_ready(p));
  ASSERT_TRUE(wait_until([&] { return pods().empty(); }));
  json ds =
      sim.d("GET",
            "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets/dpu-cplane-tenant1-g-demo")
          .j();
  EXPECT_EQ(ds["status"]["desiredNumberScheduled"], 0);
}

TEST_F(Controllers, DPUServiceDeletionWaitsForFinalizer) {
  sim.ctl("POST", "/delays", json{{"pod_termination_ms", 300}, {"finalizer_ms", 300}});
  set_device_label(0, "tenant", "d");
  ASSERT_EQ(
      sim.m("POST", dpuservice_path(), make_dpuservice("gone", tenant_selector("d")).dump()).status,
      201);
  ASSERT_TRUE(wait_until([&] { return ready_of(svc("gone")) == "True/Success"; }));
  Resp r = sim.m("DELETE", dpuservice_path("gone"));
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.j()["metadata"].contains("deletionTimestamp"));
  ASSERT_TRUE(wait_until([&] {
    json p = pods();
    return p.size() == 1 && p[0]["metadata"].contains("deletionTimestamp");
  }));
  EXPECT_EQ(sim.m("GET", dpuservice_path("gone")).status, 200) << "still held by the finalizer";
  ASSERT_TRUE(
      wait_until([&] { return sim.m("GET", dpuservice_path("gone")).status == 404; }, 5000));
  EXPECT_TRUE(pods().empty());
  EXPECT_EQ(
      sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets").j()["items"].size(),
      0u);
  EXPECT_EQ(sim.m("GET", "/apis/argoproj.io/v1alpha1/namespaces/dpf-operator-system/applications")
                .j()["items"]
                .size(),
            0u);
  EXPECT_EQ(sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/controllerrevisions")
                .j()["items"]
                .size(),
            0u);
}

TEST_F(Controllers, DeployInClusterHasNoDaemonSet) {
  json s = make_dpuservice("host", {{"deployInCluster", true}});
  s["spec"].erase("security");
  ASSERT_EQ(sim.m("POST", dpuservice_path(), s.dump()).status, 201);
  ASSERT_TRUE(wait_until([&] { return ready_of(svc("host")) == "True/Success"; }));
  EXPECT_EQ(
      sim.d("GET", "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets").j()["items"].size(),
      0u);
}
