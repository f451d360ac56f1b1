// REST semantics against a running dpfsim (plain HTTP): discovery, CRUD, resourceVersion,
// generation, finalizers, selectors, paging, patch types, status subresource, error bodies, Table
// output.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "sim_harness.h"

using namespace simtest;

namespace {

class Rest : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override {
    sim.reset(4, 0);
    // Keep the DPUService controller out of these tests' way: no controller writes for paused
    // services.
  }
  // A DPUService the controller leaves alone (paused) so resourceVersion checks are deterministic.
  json create_paused(const std::string& name) {
    Resp r = sim.m("POST", dpuservice_path(), make_dpuservice(name, {{"paused", true}}).dump());
    EXPECT_EQ(r.status, 201) << r.body;
    // Wait for the controller to add its finalizer so later writes don't race with it.
    EXPECT_TRUE(wait_until([&] {
      return sim.m("GET", dpuservice_path(name)).j()["metadata"].contains("finalizers");
    }));
    return sim.m("GET", dpuservice_path(name)).j();
  }
};

}  // namespace

TEST_F(Rest, Discovery) {
  Resp r = sim.m("GET", "/api");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["kind"], "APIVersions");
  EXPECT_EQ(r.content_type, "application/json");
  r = sim.m("GET", "/apis");
  json groups = r.j()["groups"];
  bool has_svc = false;
  for (const auto& g : groups)
    if (g["name"] == "svc.dpu.nvidia.com") has_svc = true;
  EXPECT_TRUE(has_svc);
  r = sim.m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1");
  EXPECT_EQ(r.j()["groupVersion"], "svc.dpu.nvidia.com/v1alpha1");
  std::set<std::string> names;
  for (const auto& res : json(r.j()["resources"])) names.insert(res["name"]);
  EXPECT_TRUE(names.count("dpuservices"));
  EXPECT_TRUE(names.count("dpuservices/status"));
  r = sim.d("GET", "/api/v1");
  names.clear();
  for (const auto& res : json(r.j()["resources"])) names.insert(res["name"]);
  EXPECT_TRUE(names.count("nodes") && names.count("pods") && names.count("namespaces"));
  r = sim.d("GET", "/apis/apps/v1");
  names.clear();
  for (const auto& res : json(r.j()["resources"])) names.insert(res["name"]);
  EXPECT_TRUE(names.count("daemonsets") && names.count("controllerrevisions"));
  EXPECT_EQ(sim.m("GET", "/version").j()["major"], "1");
  EXPECT_EQ(sim.m("GET", "/openapi/v2").status, 200);
  r = sim.m("GET", "/apis/argoproj.io/v1alpha1");
  names.clear();
  for (const auto& res : json(r.j()["resources"])) names.insert(res["name"]);
  EXPECT_TRUE(names.count("applications"));
  EXPECT_EQ(sim.m("GET", "/apis/apps/v1").status, 404) << "management cluster has no apps group";
  EXPECT_EQ(sim.m("GET", "/api/v1/pods").status, 404);
}

TEST_F(Rest, CreateGetAndErrorBodies) {
  Resp r = sim.m("POST", dpuservice_path(), make_dpuservice("crud", {{"paused", true}}).dump());
  ASSERT_EQ(r.status, 201) << r.body;
  json o = r.j();
  EXPECT_EQ(o["metadata"]["generation"], 1);
  EXPECT_FALSE(o["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ(o["metadata"]["creationTimestamp"].get<std::string>().size(), 20u);
  r = sim.m("POST", dpuservice_path(), make_dpuservice("crud", {{"paused", true}}).dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"dpuservices.svc.dpu.nvidia.com \"crud\" already exists","reason":"AlreadyExists","details":{"name":"crud","group":"svc.dpu.nvidia.com","kind":"dpuservices"},"code":409})");
  r = sim.m("GET", dpuservice_path("nope"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"dpuservices.svc.dpu.nvidia.com \"nope\" not found","reason":"NotFound","details":{"name":"nope","group":"svc.dpu.nvidia.com","kind":"dpuservices"},"code":404})");
  r = sim.d("GET", "/api/v1/nodes/nope");
  EXPECT_EQ(r.j()["message"], "nodes \"nope\" not found");
  EXPECT_FALSE(r.j()["details"].contains("group"));
  // List across all namespaces and in one namespace.
  EXPECT_EQ(sim.m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1/dpuservices").j()["items"].size(), 1u);
  EXPECT_EQ(sim.m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/other/dpuservices")
                .j()["items"]
                .size(),
            0u);
  EXPECT_EQ(sim.m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1/dpuservices").j()["kind"],
            "DPUServiceList");
}

TEST_F(Rest, UpdateResourceVersionConflictAndNoop) {
  json o = create_paused("upd");
  // PUT without resourceVersion on a CR -> 422.
  json norv = o;
  norv["metadata"].erase("resourceVersion");
  Resp r = sim.m("PUT", dpuservice_path("upd"), norv.dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.j()["reason"], "Invalid");
  EXPECT_EQ(r.j()["details"]["causes"][0]["field"], "metadata.resourceVersion");
  EXPECT_EQ(r.j()["message"],
            "DPUService.svc.dpu.nvidia.com \"upd\" is invalid: metadata.resourceVersion: Invalid "
            "value: 0x0: must be "
            "specified for an update");
  // Metadata-only change: new RV, same generation.
  json lab = o;
  lab["metadata"]["labels"] = {{"a", "b"}};
  r = sim.m("PUT", dpuservice_path("upd"), lab.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json o2 = r.j();
  EXPECT_GT(std::stoull(o2["metadata"]["resourceVersion"].get<std::string>()),
            std::stoull(o["metadata"]["resourceVersion"].get<std::string>()));
  EXPECT_EQ(o2["metadata"]["generation"], 1);
  // Stale RV -> 409 with the exact message.
  r = sim.m("PUT", dpuservice_path("upd"), lab.dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.j()["reason"], "Conflict");
  EXPECT_EQ(r.j()["message"],
            "Operation cannot be fulfilled on dpuservices.svc.dpu.nvidia.com \"upd\": the object "
            "has been modified; "
            "please apply your changes to the latest version and try again");
  // No-op PUT keeps the RV.
  r = sim.m("PUT", dpuservice_path("upd"), o2.dump());
  EXPECT_EQ(r.j()["metadata"]["resourceVersion"], o2["metadata"]["resourceVersion"]);
  // Spec change bumps generation; status in a main-resource PUT is ignored.
  json spec = o2;
  spec["spec"]["helmChart"]["source"]["version"] = "2.0.0";
  spec["status"] = {{"fake", true}};
  r = sim.m("PUT", dpuservice_path("upd"), spec.dump());
  EXPECT_EQ(r.j()["metadata"]["generation"], 2);
  EXPECT_FALSE(r.j().contains("status") && r.j()["status"].contains("fake"));
}

TEST_F(Rest, StatusSubresource) {
  json o = create_paused("st");
  json s = o;
  s["status"] = {{"observedGeneration", 1}, {"configPorts", {{"x", json::array()}}}};
  s["spec"]["helmChart"]["source"]["version"] = "9.9.9";  // ignored by /status
  Resp r = sim.m("PUT", dpuservice_path("st") + "/status", s.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.j()["status"]["configPorts"].contains("x"));
  EXPECT_EQ(r.j()["spec"]["helmChart"]["source"]["version"], "1.0.0");
  EXPECT_EQ(r.j()["metadata"]["generation"], 1);
  r = sim.m("PATCH", dpuservice_path("st") + "/status",
            R"({"status":{"configPorts":{"y":[]}},"metadata":{"labels":{"z":"1"}}})",
            "application/merge-patch+json");
  EXPECT_TRUE(r.j()["status"]["configPorts"].contains("y"));
  EXPECT_FALSE(r.j()["metadata"].contains("labels"));
  r = sim.m("GET", dpuservice_path("st") + "/status");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.j()["status"]["configPorts"].contains("y"));
}

TEST_F(Rest, PatchTypes) {
  create_paused("p");
  Resp r = sim.m("PATCH", dpuservice_path("p"), R"({"metadata":{"labels":{"a":"1","b":"2"}}})",
                 "application/merge-patch+json");
  ASSERT_EQ(r.status, 200) << r.body;
  r = sim.m("PATCH", dpuservice_path("p"), R"({"metadata":{"labels":{"a":null}}})",
            "application/merge-patch+json");
  EXPECT_EQ(r.j()["metadata"]["labels"], json({{"b", "2"}}));
  r = sim.m(
      "PATCH", dpuservice_path("p"),
      R"([{"op":"add","path":"/metadata/annotations","value":{"x":"y"}},{"op":"replace","path":"/spec/helmChart/source/version","value":"3.0.0"}])",
      "application/json-patch+json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["metadata"]["annotations"]["x"], "y");
  EXPECT_EQ(r.j()["metadata"]["generation"], 2);
  r = sim.m("PATCH", dpuservice_path("p"),
            R"([{"op":"test","path":"/spec/helmChart/source/version","value":"no"}])",
            "application/json-patch+json");
  EXPECT_EQ(r.status, 422);
  r = sim.m("PATCH", dpuservice_path("p"), R"({"metadata":{"labels":{"c":"3"}}})",
            "application/strategic-merge-patch+json");
  EXPECT_EQ(r.status, 415);
  EXPECT_EQ(r.j()["reason"], "UnsupportedMediaType");
  EXPECT_NE(r.j()["message"].get<std::string>().find("application/merge-patch+json"),
            std::string::npos);
  // Strategic merge is accepted (as merge) for built-in Nodes.
  r = sim.d("PATCH", "/api/v1/nodes/host-0000-dpu-device-0000",
            R"({"metadata":{"labels":{"smp":"yes"}}})", "application/strategic-merge-patch+json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["metadata"]["labels"]["smp"], "yes");
  // A patch carrying a stale resourceVersion is a precondition -> 409.
  r = sim.m("PATCH", dpuservice_path("p"),
            R"({"metadata":{"resourceVersion":"1","labels":{"d":"4"}}})",
            "application/merge-patch+json");
  EXPECT_EQ(r.status, 409);
  r = sim.m("PATCH", dpuservice_path("nope"), R"({})", "application/merge-patch+json");
  EXPECT_EQ(r.status, 404);
}

TEST_F(Rest, FinalizerDeletionFlow) {
  json o =
      create_paused("del");  // paused: the controller keeps its finalizer, deletion never completes
  Resp r = sim.m("DELETE", dpuservice_path("del"));
  ASSERT_EQ(r.status, 200);
  json d1 = r.j();
  EXPECT_TRUE(d1["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(d1["metadata"]["generation"], o["metadata"]["generation"].get<int>() + 1);
  r = sim.m("DELETE", dpuservice_path("del"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["metadata"]["deletionTimestamp"], d1["metadata"]["deletionTimestamp"]);
  // Adding a finalizer to a terminating object is forbidden.
  r = sim.m("PATCH", dpuservice_path("del"),
            R"({"metadata":{"finalizers":["dpu.nvidia.com/dpuservice","x.io/new"]}})",
            "application/merge-patch+json");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.j()["details"]["causes"][0]["field"], "metadata.finalizers");
  // Removing the last finalizer removes the object.
  r = sim.m("PATCH", dpuservice_path("del"), R"({"metadata":{"finalizers":null}})",
            "application/merge-patch+json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(sim.m("GET", dpuservice_path("del")).status, 404);
  // Objects without finalizers go away at once with a Success Status.
  r = sim.d("DELETE", "/api/v1/nodes/host-0003-dpu-device-0003");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.j()["kind"], "Status");
  EXPECT_EQ(r.j()["status"], "Success");
  EXPECT_EQ(r.j()["details"]["kind"], "nodes");
}

TEST_F(Rest, LabelSelectorsEachOperator) {
  for (int i = 0; i < 4; ++i) {
    std::string n = "host-000" + std::to_string(i) + "-dpu-device-000" + std::to_string(i);
    std::string labels = i < 2 ? R"({"metadata":{"labels":{"tier":"a"}}})"
                               : R"({"metadata":{"labels":{"tier":"b"}}})";
    if (i == 3) labels = R"({"metadata":{"labels":{"tier":null,"other":"x"}}})";
    ASSERT_EQ(sim.d("PATCH", "/api/v1/nodes/" + n, labels, "application/merge-patch+json").status,
              200);
  }
  auto cnt = [&](const std::string& sel) {
    std::string esc;
    for (char c : sel) {
      if (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')
        esc += c;
      else {
        char buf[4];
        snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
        esc += buf;
      }
    }
    Resp r = sim.d("GET", "/api/v1/nodes?labelSelector=" + esc);
    EXPECT_EQ(r.status, 200) << sel << " " << r.body;
    return r.j()["items"].size();
  };
  EXPECT_EQ(cnt("tier=a"), 2u);
  EXPECT_EQ(cnt("tier==a"), 2u);
  EXPECT_EQ(cnt("tier!=a"), 2u);
  EXPECT_EQ(cnt("tier in (a,b)"), 3u);
  EXPECT_EQ(cnt("tier notin (a)"), 2u);
  EXPECT_EQ(cnt("tier"), 3u);
  EXPECT_EQ(cnt("!tier"), 1u);
  EXPECT_EQ(cnt("tier=a,kubernetes.io/os=linux"), 2u);
  Resp bad = sim.d("GET", "/api/v1/nodes?labelSelector=tier%20in%20a");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.j()["reason"], "BadRequest");
}

TEST_F(Rest, FieldSelectorAndPaging) {
  // Create pods directly on two nodes.
  for (int i = 0; i < 5; ++i) {
    json pod{{"apiVersion", "v1"},
             {"kind", "Pod"},
             {"metadata", {{"name", "p" + std::to_string(i)}}},
             {"spec",
              {{"nodeName", i < 3 ? "host-0000-dpu-device-0000" : "host-0001-dpu-device-0001"},
               {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
    ASSERT_EQ(sim.d("POST", "/api/v1/namespaces/default/pods", pod.dump()).status, 201);
  }
  Resp r = sim.d("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dhost-0000-dpu-device-0000");
  EXPECT_EQ(r.j()["items"].size(), 3u);
  r = sim.d("GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dp4");
  EXPECT_EQ(r.j()["items"].size(), 1u);
  r = sim.d("GET", "/api/v1/pods?fieldSelector=spec.bogus%3Dx");
  EXPECT_EQ(r.status, 400);
  // Paging.
  std::vector<std::string> names;
  std::string cont;
  int pages = 0;
  do {
    std::string path = "/api/v1/namespaces/default/pods?limit=2";
    if (!cont.empty()) path += "&continue=" + cont;
    r = sim.d("GET", path);
    ASSERT_EQ(r.status, 200) << r.body;
    for (const auto& it : json(r.j()["items"])) names.push_back(it["metadata"]["name"]);
    cont = r.j()["metadata"].value("continue", "");
    ++pages;
  } while (!cont.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4"}));
  EXPECT_EQ(sim.d("GET", "/api/v1/pods?limit=2&continue=%21%21bad").status, 400);
}

TEST_F(Rest, ValidationErrors) {
  json bad = make_dpuservice(
      "bad", {{"helmChart", {{"source", {{"repoURL", "http://plain"}, {"version", ""}}}}}});
  Resp r = sim.m("POST", dpuservice_path(), bad.dump());
  ASSERT_EQ(r.status, 422);
  json j = r.j();
  EXPECT_EQ(j["reason"], "Invalid");
  EXPECT_EQ(j["details"]["kind"], "DPUService");
  EXPECT_EQ(j["details"]["causes"].size(), 2u);
  EXPECT_EQ(j["details"]["causes"][0]["field"], "spec.helmChart.source.repoURL");
  EXPECT_EQ(j["details"]["causes"][0]["message"],
            "Invalid value: \"http://plain\": spec.helmChart.source.repoURL in body should match "
            "'^(oci://|https://).+$'");
  json nopriv = make_dpuservice("np");
  nopriv["spec"].erase("security");
  r = sim.m("POST", dpuservice_path(), nopriv.dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.j()["message"],
            "DPUService.svc.dpu.nvidia.com \"np\" is invalid: spec: Invalid value: \"object\": "
            "security.privileged "
            "must be set when deployInCluster is false");
  json dic = nopriv;
  dic["spec"]["deployInCluster"] = true;
  EXPECT_EQ(sim.m("POST", dpuservice_path(), dic.dump()).status, 201);
  json nsel = make_dpuservice("ns", {{"serviceDaemonSet", {{"nodeSelector", json::object()}}}});
  r = sim.m("POST", dpuservice_path(), nsel.dump());
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.j()["details"]["causes"][0]["field"],
            "spec.serviceDaemonSet.nodeSelector.nodeSelectorTerms");
  r = sim.m("POST", dpuservice_path(), make_dpuservice(std::string(64, 'x')).dump());
  EXPECT_EQ(r.status, 422);
  r = sim.m("POST", dpuservice_path(), make_dpuservice("if", {{"interfaces", {"p0"}}}).dump());
  EXPECT_EQ(r.status, 422);
  r = sim.m("POST", dpuservice_path(), R"({"metadata":{"name":"x"},"spec":{}})");
  EXPECT_EQ(r.status, 422);
  r = sim.m("POST", dpuservice_path(), "{not json");
  EXPECT_EQ(r.status, 400);
}

TEST_F(Rest, TableForKubectl) {
  HttpOpts o;
  o.accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
  Resp r = sim.d("GET", "/api/v1/nodes", "", "application/json", o);
  ASSERT_EQ(r.status, 200);
  json t = r.j();
  EXPECT_EQ(t["kind"], "Table");
  EXPECT_EQ(t["columnDefinitions"][0]["name"], "Name");
  EXPECT_EQ(t["rows"].size(), 4u);
  EXPECT_EQ(t["rows"][0]["cells"][1], "Ready");
  EXPECT_EQ(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

TEST_F(Rest, WatchStreamsEvents) {
  Resp l = sim.d("GET", "/api/v1/nodes");
  std::string rv = l.j()["metadata"]["resourceVersion"];
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sim.d("PATCH", "/api/v1/nodes/host-0000-dpu-device-0000",
          R"({"metadata":{"labels":{"w":"1"}}})", "application/merge-patch+json");
  });
  Resp w = sim.d("GET", "/api/v1/nodes?watch=1&timeoutSeconds=1&resourceVersion=" + rv);
  t.join();
  ASSERT_EQ(w.status, 200);
  EXPECT_NE(w.body.find("\"type\":\"MODIFIED\""), std::string::npos) << w.body.substr(0, 300);
}
