// Realism of the DPF + Argo CD + Helm + Kubernetes model: Helm naming, pod template labels and
// annotations, stale DPF Ready, fieldValidation and pruning per release profile, pod faults,
// chart faults, maxSurge and strategy validation, NamespaceLifecycle,
// OpenAPI.
#include <gtest/gtest.h>

#include <set>

#include "controllers/controller_manager.h"
#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

const std::string kRealismUuid = "0b6f1c9e-7d7a-4f57-9a57-3b0d2f8a9e11";

bool pod_ready(const json& p) {
  for (const auto& c : p["status"].value("conditions", json::array()))
    if (c["type"] == "Ready") return c["status"] == "True";
  return false;
}

class Realism : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(4, 0); }

  void label_device(int i, const std::string& k, const std::string& v) {
    char dev[32];
    snprintf(dev, sizeof dev, "dpu-device-%04d", i);
    json p{{"spec", {{"cluster", {{"nodeLabels", {{k, v}}}}}}}};
    Resp r = sim.m("PATCH", kDevPath + dev, p.dump(), "application/merge-patch+json");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // A DPUService as the product renders it: nico labels/annotations, selector on tenant=<v>.
  json product_service(const std::string& name, const std::string& tenant, int revision) {
    json spec{{"serviceDaemonSet",
               {{"labels", {{"nico/extension-service-id", kRealismUuid}}},
                {"annotations", {{"nico/extension-service-revision", std::to_string(revision)}}},
                {"nodeSelector",
                 {{"nodeSelectorTerms",
                   {{{"matchExpressions",
                      {{{"key", "tenant"}, {"operator", "In"}, {"values", {tenant}}}}}}}}}}}}};
    return make_dpuservice(name, spec);
  }
  json pods_by_product_label(const std::string& node = "") {
    std::string path = kPods + "?labelSelector=nico%2Fextension-service-id%3D" + kRealismUuid;
    if (!node.empty()) path += "&fieldSelector=spec.nodeName%3D" + node;
    return sim.d("GET", path).j()["items"];
  }
  json svc(const std::string& name) { return sim.m("GET", dpuservice_path(name)).j(); }
  bool ready_at_latest(const json& s) {
    return cond(s, "Ready").value("status", "") == "True" &&
           s["status"].value("observedGeneration", -1) == s["metadata"].value("generation", 0);
  }
};

}  // namespace

TEST(HelmNaming, FullnameRule) {
  using dpfsim::chart_names;
  EXPECT_EQ(chart_names("extsvc-abc", "demo", json::object()).fullname, "extsvc-abc-demo");
  EXPECT_EQ(chart_names("my-demo-rel", "demo", json::object()).fullname, "my-demo-rel");
  std::string longrel = std::string(60, 'r') + "-x";  // 62 chars; + "-demo" = 67 -> 63, no '-'
  std::string fn = chart_names(longrel, "demo", json::object()).fullname;
  EXPECT_LE(fn.size(), 63u);
  EXPECT_NE(fn.back(), '-');
  EXPECT_EQ(chart_names(std::string(62, 'r'), "demo", json::object()).fullname,
            std::string(62, 'r'));  // 62 r + "-" truncated at 63 then '-' trimmed
  EXPECT_EQ(chart_names("rel", "demo", json{{"fullnameOverride", "fixed"}}).fullname, "fixed");
  EXPECT_EQ(dpfsim::helm_chart_label("demo", "1.0.0+build.1"), "demo-1.0.0_build.1");
}

TEST_F(Realism, PodTemplateCarriesMergedLabelsAndAnnotationsAndRollsOnRevision) {
  label_device(0, "tenant", "a");
  label_device(1, "tenant", "a");
  json s = product_service("psvc", "a", 1);
  s["spec"]["helmChart"]["values"]["serviceDaemonSet"] = {
      {"labels", {{"from-values", "v"}, {"nico/extension-service-id", "shadowed"}}}};
  ASSERT_EQ(sim.m("POST", dpuservice_path(), s.dump()).status, 201);
  ASSERT_TRUE(wait_until([&] {
    json p = pods_by_product_label();
    return p.size() == 2 && pod_ready(p[0]) && pod_ready(p[1]);
  }));
  json p = pods_by_product_label(node_name(1));
  ASSERT_EQ(p.size(), 1u);
  const json& labels = p[0]["metadata"]["labels"];
  EXPECT_EQ(labels["nico/extension-service-id"], kRealismUuid) << "spec wins over values";
  EXPECT_EQ(labels["from-values"], "v");
  EXPECT_EQ(labels["svc.dpu.nvidia.com/service"], svc("psvc")["status"]["serviceID"]);
  EXPECT_EQ(p[0]["metadata"]["annotations"]["nico/extension-service-revision"], "1");
  std::string hash1 = labels["controller-revision-hash"];
  // Bumping the revision annotation is a template change: new ControllerRevision, pods roll.
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("psvc"),
            R"({"spec":{"serviceDaemonSet":{"annotations":{"nico/extension-service-revision":"2"}}}})",
            "application/merge-patch+json")
          .status,
      200);
  ASSERT_TRUE(wait_until([&] {
    json ps = pods_by_product_label();
    if (ps.size() != 2) return false;
    for (const auto& x : ps)
      if (x["metadata"]["annotations"]["nico/extension-service-revision"] != "2" || !pod_ready(x))
        return false;
    return true;
  }));
  EXPECT_NE(pods_by_product_label()[0]["metadata"]["labels"]["controller-revision-hash"], hash1);
}

TEST_F(Realism, DpfReadyAtLatestGenerationWhileArgoHasNotRendered) {
  label_device(0, "tenant", "st");
  ASSERT_EQ(sim.m("POST", dpuservice_path(), product_service("stale", "st", 1).dump()).status, 201);
  ASSERT_TRUE(wait_until([&] {
    json p = pods_by_product_label();
    return ready_at_latest(svc("stale")) && p.size() == 1 && pod_ready(p[0]);
  }));
  sim.ctl("POST", "/delays", json{{"argo_refresh_ms", 1500}});
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("stale"),
            R"({"spec":{"serviceDaemonSet":{"annotations":{"nico/extension-service-revision":"2"}}}})",
            "application/merge-patch+json")
          .status,
      200);
  // DPF reports Ready=True at the new generation from the cached (old) Application status...
  ASSERT_TRUE(wait_until([&] { return ready_at_latest(svc("stale")); }, 1000));
  json app = sim.m("GET", kApps + "dpu-cplane-tenant1-stale").j();
  EXPECT_NE(app["status"]["sync"]["comparedTo"]["source"], app["spec"]["source"]);
  EXPECT_EQ(app["status"]["sync"]["status"], "Synced");
  // ... while the pod still runs the previous render.
  json p = pods_by_product_label(node_name(0));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["metadata"]["annotations"]["nico/extension-service-revision"], "1");
  // Argo refreshes later and the pod rolls.
  ASSERT_TRUE(wait_until(
      [&] {
        json q = pods_by_product_label(node_name(0));
        return q.size() == 1 && pod_ready(q[0]) &&
               q[0]["metadata"]["annotations"]["nico/extension-service-revision"] == "2";
      },
      6000));
}

TEST_F(Realism, OnDeleteIsHealthyAtOnceAndDoesNotRoll) {
  label_device(2, "tenant", "od");
  json s = product_service("od", "od", 1);
  s["spec"]["serviceDaemonSet"]["updateStrategy"] = {{"type", "OnDelete"}};
  ASSERT_EQ(sim.m("POST", dpuservice_path(), s.dump()).status, 201);
  ASSERT_TRUE(wait_until([&] {
    json p = pods_by_product_label();
    return p.size() == 1 && pod_ready(p[0]);
  }));
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("od"),
            R"({"spec":{"serviceDaemonSet":{"annotations":{"nico/extension-service-revision":"2"}}}})",
            "application/merge-patch+json")
          .status,
      200);
  ASSERT_TRUE(wait_until([&] {
    json a = sim.m("GET", kApps + "dpu-cplane-tenant1-od").j();
    return a["status"]["sync"]["comparedTo"]["source"] == a["spec"]["source"] &&
           ready_at_latest(svc("od"));
  }));
  EXPECT_EQ(sim.m("GET", kApps + "dpu-cplane-tenant1-od").j()["status"]["health"]["status"],
            "Healthy");
  json p = pods_by_product_label();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["metadata"]["annotations"]["nico/extension-service-revision"], "1");
}

TEST_F(Realism, FieldValidationWarnStrictIgnore) {
  json s = make_dpuservice("fv", {{"foo", 1}, {"security", {{"spiffe", {{"x", 1}}}}}});
  s["spec"]["serviceDaemonSet"]["labels"] = {{"Not_A/valid key!", "x"}};  // CRD: type string only
  Resp r = sim.m("POST", dpuservice_path() + "?fieldValidation=Strict", s.dump());
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.j()["reason"], "BadRequest");
  EXPECT_EQ(r.j()["message"],
            "DPUService in version \"v1alpha1\" cannot be handled as a DPUService: strict decoding "
            "error: unknown field \"spec.foo\", unknown field \"spec.security.spiffe.x\"");
  r = sim.m("POST", dpuservice_path(), s.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  std::set<std::string> warnings;
  for (const auto& [k, v] : r.headers)
    if (k == "Warning") warnings.insert(v);
  EXPECT_EQ(warnings,
            (std::set<std::string>{"299 - \"unknown field \\\"spec.foo\\\"\"",
                                   "299 - \"unknown field \\\"spec.security.spiffe.x\\\"\""}));
  json got = r.j();
  EXPECT_FALSE(got["spec"].contains("foo"));
  EXPECT_EQ(got["spec"]["security"]["spiffe"], json::object())
      << "spiffe: {} kept, inner field pruned";
  EXPECT_EQ(got["spec"]["security"]["privileged"], false);
  EXPECT_EQ(got["spec"]["serviceDaemonSet"]["labels"]["Not_A/valid key!"], "x");
  r = sim.m("PATCH", dpuservice_path("fv") + "?fieldValidation=Ignore", R"({"spec":{"bar":1}})",
            "application/merge-patch+json");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Warning"), "");
  EXPECT_FALSE(r.j()["spec"].contains("bar"));
  r = sim.m("PATCH", kDevPath + "dpu-device-0000?fieldValidation=Strict",
            R"({"spec":{"cluster":{"nodeLabels":{"a":"b"}},"bogus":true}})",
            "application/merge-patch+json");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.j()["message"].get<std::string>().find("unknown field \"spec.bogus\""),
            std::string::npos);
  r = sim.m("POST", dpuservice_path() + "?fieldValidation=strict", make_dpuservice("x").dump());
  EXPECT_EQ(r.status, 400);
  // resources quantity pattern (real CRD).
  r = sim.m(
      "POST", dpuservice_path(),
      make_dpuservice("q", {{"serviceDaemonSet", {{"resources", {{"cpu", "lots"}}}}}}).dump());
  EXPECT_EQ(r.status, 422);
}

TEST_F(Realism, NamespaceLifecycleAndOpenApi) {
  json s = make_dpuservice("n1");
  s["metadata"]["namespace"] = "nope";
  Resp r = sim.m("POST", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/nope/dpuservices", s.dump());
  ASSERT_EQ(r.status, 404);
  EXPECT_EQ(r.j()["message"], "namespaces \"nope\" not found");
  EXPECT_EQ(r.j()["details"]["kind"], "namespaces");
  EXPECT_EQ(r.j()["details"]["name"], "nope");
  r = sim.m("GET", "/openapi/v3");
  ASSERT_EQ(r.status, 200);
  std::string url = r.j()["paths"]["apis/svc.dpu.nvidia.com/v1alpha1"]["serverRelativeURL"];
  r = sim.m("GET", url.substr(0, url.find('?')));
  ASSERT_EQ(r.status, 200);
  json doc = r.j();
  json patch =
      doc["paths"]["/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{namespace}/dpuservices/{name}"]
         ["patch"];
  EXPECT_EQ(patch["x-kubernetes-group-version-kind"]["kind"], "DPUService");
  bool fv = false;
  for (const auto& prm : patch["parameters"])
    if (prm["name"] == "fieldValidation" && prm["in"] == "query") fv = true;
  EXPECT_TRUE(fv);
  EXPECT_TRUE(doc["components"]["schemas"]["com.nvidia.dpu.svc.v1alpha1.DPUService"]["properties"]
                 ["spec"]["properties"]["security"]
                     .is_object());
  EXPECT_EQ(sim.m("GET", "/openapi/v2").status, 200);
  EXPECT_EQ(sim.m("GET", "/openapi/v3/apis/argoproj.io/v1alpha1").status, 200);
  EXPECT_EQ(sim.m("GET", "/openapi/v3/apis/nope/v1").status, 404);
}

TEST_F(Realism, PodFaults) {
  label_device(3, "tenant", "pf");
  sim.ctl("POST", "/pod-faults", json{{"node", node_name(3)}, {"reason", "CrashLoopBackOff"}});
  ASSERT_EQ(sim.m("POST", dpuservice_path(), product_service("pf", "pf", 1).dump()).status, 201);
  ASSERT_TRUE(wait_until(
      [&] {
        json p = pods_by_product_label();
        return p.size() == 1 && p[0]["status"]["phase"] == "Running" &&
               p[0]["status"]["containerStatuses"][0]["restartCount"].get<int>() >= 2;
      },
      5000));
  json p = pods_by_product_label()[0];
  EXPECT_FALSE(pod_ready(p));
  EXPECT_EQ(p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "CrashLoopBackOff");
  EXPECT_EQ(cond(svc("pf"), "Ready")["status"], "False");
  sim.ctl("POST", "/pod-faults", json{{"node", node_name(3)}, {"reason", "ImagePullBackOff"}});
  ASSERT_TRUE(wait_until([&] {
    json q = pods_by_product_label();
    return q.size() == 1 && q[0]["status"]["phase"] == "Pending" &&
           q[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] ==
               "ImagePullBackOff";
  }));
  sim.ctl("DELETE", "/pod-faults?node=" + node_name(3));
  ASSERT_TRUE(wait_until([&] {
    json q = pods_by_product_label();
    return q.size() == 1 && pod_ready(q[0]) && ready_at_latest(svc("pf"));
  }));
}

TEST_F(Realism, ChartFaults) {
  label_device(0, "tenant", "cf");
  sim.ctl("POST", "/chart-faults", json{{"chart", "demo"}, {"kind", "pull"}});
  ASSERT_EQ(sim.m("POST", dpuservice_path(), product_service("cf", "cf", 1).dump()).status, 201);
  ASSERT_TRUE(wait_until([&] {
    json c = cond(svc("cf"), "ApplicationsReady");
    return c.value("message", "").find("Sync: Unknown") != std::string::npos;
  }));
  EXPECT_EQ(cond(svc("cf"), "Ready")["status"], "False");
  EXPECT_TRUE(pods_by_product_label().empty());
  sim.ctl("DELETE", "/chart-faults");
  // Argo retries the failed render on its next refresh: no spec change needed.
  ASSERT_TRUE(wait_until(
      [&] { return ready_at_latest(svc("cf")) && pods_by_product_label().size() == 1; }));

  // Privileged admission (DPF's dpf-deny-privileged-pods policy) is tested in
  // test_workloads.cpp: it rejects the DaemonSet at Argo's sync.
}

TEST_F(Realism, MaxSurgeAndStrategyValidation) {
  label_device(0, "tenant", "ms");
  json s = product_service("ms", "ms", 1);
  s["spec"]["serviceDaemonSet"]["updateStrategy"] = {
      {"type", "RollingUpdate"}, {"rollingUpdate", {{"maxSurge", 1}, {"maxUnavailable", 0}}}};
  ASSERT_EQ(sim.m("POST", dpuservice_path(), s.dump()).status, 201);
  ASSERT_TRUE(wait_until([&] {
    json p = pods_by_product_label();
    return p.size() == 1 && pod_ready(p[0]) && ready_at_latest(svc("ms"));
  }));
  sim.ctl("POST", "/delays", json{{"pod_ready_ms", 500}});
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("ms"),
            R"({"spec":{"serviceDaemonSet":{"annotations":{"nico/extension-service-revision":"2"}}}})",
            "application/merge-patch+json")
          .status,
      200);
  // Surge: the new pod runs next to the old, still Ready, pod on the same node.
  ASSERT_TRUE(wait_until([&] {
    json p = pods_by_product_label(node_name(0));
    int live_ready_old = 0, fresh = 0;
    for (const auto& x : p) {
      if (x["metadata"]["annotations"]["nico/extension-service-revision"] == "2")
        ++fresh;
      else if (pod_ready(x) && !x["metadata"].contains("deletionTimestamp"))
        ++live_ready_old;
    }
    return fresh == 1 && live_ready_old == 1;
  }));
  // Invalid strategy: Argo sync fails, the DaemonSet is not changed, DPF Ready goes False.
  sim.ctl("POST", "/delays", json{{"pod_ready_ms", 0}});
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("ms"),
            R"({"spec":{"serviceDaemonSet":{"updateStrategy":{"rollingUpdate":{"maxSurge":0}}}}})",
            "application/merge-patch+json")
          .status,
      200);
  ASSERT_TRUE(wait_until([&] {
    json a = sim.m("GET", kApps + "dpu-cplane-tenant1-ms").j();
    return a["status"]["sync"]["status"] == "OutOfSync" &&
           a["status"]["operationState"]["phase"] == "Failed";
  }));
  json a = sim.m("GET", kApps + "dpu-cplane-tenant1-ms").j();
  EXPECT_NE(a["status"]["operationState"]["message"].get<std::string>().find(
                "cannot be 0 when maxSurge is 0"),
            std::string::npos);
  ASSERT_TRUE(wait_until([&] { return cond(svc("ms"), "Ready").value("status", "") == "False"; }));
  json ds =
      sim.d("GET",
            "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets/dpu-cplane-tenant1-ms-demo")
          .j();
  EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"], 1);
}

TEST_F(Realism, PausedBumpsObservedGenerationAndBlocksDeletion) {
  label_device(1, "tenant", "pa");
  ASSERT_EQ(sim.m("POST", dpuservice_path(), product_service("pa", "pa", 1).dump()).status, 201);
  ASSERT_TRUE(wait_until([&] { return ready_at_latest(svc("pa")); }));
  ASSERT_EQ(
      sim.m("PATCH", dpuservice_path("pa"),
            R"({"spec":{"paused":true,"serviceDaemonSet":{"annotations":{"nico/extension-service-revision":"2"}}}})",
            "application/merge-patch+json")
          .status,
      200);
  ASSERT_TRUE(wait_until([&] { return ready_at_latest(svc("pa")); }));
  json p = pods_by_product_label();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["metadata"]["annotations"]["nico/extension-service-revision"], "1");
  ASSERT_EQ(sim.m("DELETE", dpuservice_path("pa")).status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sim.m("GET", dpuservice_path("pa")).status, 200) << "paused: never deleted";
  ASSERT_EQ(sim.m("PATCH", dpuservice_path("pa"), R"({"spec":{"paused":false}})",
                  "application/merge-patch+json")
                .status,
            200);
  ASSERT_TRUE(wait_until([&] { return sim.m("GET", dpuservice_path("pa")).status == 404; }));
}

TEST(Profiles, V2410PrunesNewerFieldsAndInjectsOnlyWithServiceID) {
  auto sim = SimProcess::start(
      {"--dpus", "2", "--dpf-version", "v24.10", "--delay", "argo_refresh_ms=1234"});
  EXPECT_EQ(sim->ctl("GET", "/delays").j()["argo_refresh_ms"], 1234);
  sim->reset(2, 0);
  EXPECT_EQ(sim->ctl("GET", "/profile").j()["dpf_version"], "v24.10");
  json s = make_dpuservice("old", {{"serviceDaemonSet", {{"resources", {{"cpu", "1"}}}}}});
  Resp r = sim->m("POST", dpuservice_path() + "?fieldValidation=Strict", s.dump());
  ASSERT_EQ(r.status, 400);
  EXPECT_NE(r.j()["message"].get<std::string>().find("unknown field \"spec.security\""),
            std::string::npos);
  EXPECT_NE(
      r.j()["message"].get<std::string>().find("unknown field \"spec.serviceDaemonSet.resources\""),
      std::string::npos);
  r = sim->m("POST", dpuservice_path(), s.dump());
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_FALSE(r.j()["spec"].contains("security"));
  // v24.10 has no DPUDevice CRD: 404 for the resource (not for an object), not in discovery;
  // the DPUs and Nodes exist (DPUSets select Nodes), and the DPUSet template's labels are added.
  r = sim->m("GET", kDevPath + "dpu-device-0000");
  ASSERT_EQ(r.status, 404);
  EXPECT_EQ(r.j()["message"], "the server could not find the requested resource");
  EXPECT_EQ(sim->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices").status, 404);
  json disco = sim->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1").j();
  for (const auto& res : disco["resources"]) EXPECT_NE(res["name"], "dpudevices");
  EXPECT_EQ(sim->m("GET",
                   "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/"
                   "dpf-operator-system/dpus/host-0000-dpu-device-0000")
                .status,
            200);
  std::string oa = sim->m("GET", "/openapi/v3/apis/provisioning.dpu.nvidia.com/v1alpha1").body;
  EXPECT_EQ(oa.find("DPUDevice"), std::string::npos);
  sim->ctl("POST", "/dpuset", json{{"nodeLabels", {{"zone", "z"}}}});
  ASSERT_TRUE(wait_until([&] {
    json n = sim->d("GET", "/api/v1/nodes/host-0001-dpu-device-0001").j();
    return n["metadata"]["labels"].value("zone", "") == "z";
  }));
  ASSERT_TRUE(wait_until([&] {
    json j = sim->m("GET", dpuservice_path("old")).j();
    return j.contains("status") && j["status"].value("observedGeneration", 0) == 1;
  }));
  json got = sim->m("GET", dpuservice_path("old")).j();
  EXPECT_EQ(got["metadata"]["generation"], 1) << "v24.10 never writes the spec";
  EXPECT_FALSE(got["status"].contains("serviceID"));
  json app = sim->m("GET", kApps + "dpu-cplane-tenant1-old").j();
  EXPECT_FALSE(app["spec"]["source"]["helm"]["valuesObject"]["serviceDaemonSet"]["labels"].contains(
      "svc.dpu.nvidia.com/service"));
  json with_id = make_dpuservice("withid", {{"serviceID", "my-id"}});
  ASSERT_EQ(sim->m("POST", dpuservice_path(), with_id.dump()).status, 201);
  ASSERT_TRUE(
      wait_until([&] { return sim->m("GET", kApps + "dpu-cplane-tenant1-withid").status == 200; }));
  app = sim->m("GET", kApps + "dpu-cplane-tenant1-withid").j();
  EXPECT_EQ(app["spec"]["source"]["helm"]["valuesObject"]["serviceDaemonSet"]["labels"]
               ["svc.dpu.nvidia.com/service"],
            "my-id");
}

// v25.7: DPUDevice without spec.cluster (@7b3d9367), DPUService without spec.security (@6acfda03)
// but with serviceDaemonSet.resources.
TEST(Profiles, V257HasDpuDevicesWithoutSpecClusterAndNoSecurity) {
  auto sim = SimProcess::start({"--dpus", "1", "--dpf-version", "v25.7"});
  sim->reset(1, 0);
  EXPECT_EQ(sim->ctl("GET", "/profile").j()["dpf_version"], "v25.7");
  json s = make_dpuservice("mid", {{"serviceDaemonSet", {{"resources", {{"cpu", "1"}}}}}});
  Resp r = sim->m("POST", dpuservice_path() + "?fieldValidation=Strict", s.dump());
  ASSERT_EQ(r.status, 400);
  const std::string msg = r.j()["message"].get<std::string>();
  EXPECT_NE(msg.find("unknown field \"spec.security\""), std::string::npos) << msg;
  EXPECT_EQ(msg.find("resources"), std::string::npos) << msg;
  r = sim->m("GET", kDevPath + "dpu-device-0000");
  ASSERT_EQ(r.status, 200);
  r = sim->m("PATCH", kDevPath + "dpu-device-0000?fieldValidation=Strict",
             R"({"spec":{"cluster":{"nodeLabels":{"t":"x"}}}})", "application/merge-patch+json");
  ASSERT_EQ(r.status, 400);
  EXPECT_NE(r.j()["message"].get<std::string>().find("unknown field \"spec.cluster\""),
            std::string::npos);
  r = sim->m("PATCH", kDevPath + "dpu-device-0000",
             R"({"spec":{"cluster":{"nodeLabels":{"t":"x"}}}})", "application/merge-patch+json");
  ASSERT_EQ(r.status, 200);
  EXPECT_FALSE(r.j()["spec"].contains("cluster"));
  EXPECT_NE(r.header("Warning").find("spec.cluster"), std::string::npos);
}
