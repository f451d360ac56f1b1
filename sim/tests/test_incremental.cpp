// The incremental controllers against the full recompute: a seeded random scenario (device
// labels, foreign node labels, DPUServices with every update strategy, rollouts, deletions, pod
// deletions, pod faults) is checked at every quiescent point for the DaemonSet invariants, and then
// a full pass over every object (POST /controllers/resync, what the old controllers did every
// tick) must find nothing to change: the store's resourceVersion stays where it is.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

constexpr int kDpus = 10;

std::string idx4(const char* fmt, int i) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, i, i);
  return buf;
}

bool ready(const json& p) {
  for (const auto& c : p["status"].value("conditions", json::array()))
    if (c["type"] == "Ready") return c["status"] == "True";
  return false;
}

bool terminating(const json& o) {
  return o["metadata"].contains("deletionTimestamp");
}

class Incremental : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(kDpus, 0); }

  // No work queued and no write for a while.
  bool quiescent(int timeout_ms = 10000) {
    std::string last;
    int stable = 0;
    return wait_until(
        [&] {
          json c = sim.ctl("GET", "/controllers").j();
          std::string rv = sim.ctl("GET", "/state").j()["resourceVersion"];
          if (c["idle"] == true && rv == last) {
            if (++stable >= 5) return true;
          } else {
            stable = 0;
          }
          last = rv;
          return false;
        },
        timeout_ms);
  }

  // The DaemonSet invariants over one consistent snapshot of both clusters.
  void check(const json& state, const std::map<std::string, std::string>& faults,
             const std::string& where) {
    SCOPED_TRACE(where);
    const json& mgmt = state["management"];
    const json& dpu = state["dpu"];
    std::map<std::string, json> nodes;  // live nodes
    for (const auto& n : dpu.value("nodes", json::array()))
      if (!terminating(n)) nodes[n["metadata"]["name"]] = n;
    // Device labels reached the Nodes.
    for (const auto& d : mgmt.value("dpudevices", json::array())) {
      std::string node =
          d["metadata"]["labels"]["provisioning.dpu.nvidia.com/dpunode-name"].get<std::string>() +
          "-" + d["metadata"]["name"].get<std::string>();
      ASSERT_TRUE(nodes.count(node)) << node;
      json want = d["spec"].value("cluster", json::object()).value("nodeLabels", json::object());
      for (auto& [k, v] : want.items()) EXPECT_EQ(nodes[node]["metadata"]["labels"][k], v) << node;
    }
    std::map<std::string, std::vector<json>> pods_of;  // DS uid -> live pods
    for (const auto& p : dpu.value("pods", json::array()))
      if (!terminating(p))
        pods_of[p["metadata"]["ownerReferences"][0]["uid"].get<std::string>()].push_back(p);
    std::set<std::string> ds_uids;
    for (const auto& ds : dpu.value("daemonsets", json::array())) {
      if (terminating(ds)) continue;
      std::string name = ds["metadata"]["name"];
      std::string uid = ds["metadata"]["uid"];
      ds_uids.insert(uid);
      json sel = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
                   ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                   ["matchExpressions"][0];
      std::string key = sel["key"], val = sel["values"][0];
      bool on_delete = ds["spec"]["updateStrategy"]["type"] == "OnDelete";
      std::string hash = ds["metadata"]["annotations"]["sim.dpu.nvidia.com/current-revision-hash"];
      // A node whose pods cannot become ready holds a maxUnavailable rollout back, as it does in
      // Kubernetes: only then may old pods remain.
      bool held_back = false;
      for (const auto& [n, obj] : nodes)
        if (faults.count(n) && obj["metadata"]["labels"].value(key, "") == val) held_back = true;
      std::map<std::string, int> per_node;
      long ready_pods = 0;
      for (const auto& p : pods_of[uid]) {
        std::string node = p["spec"]["nodeName"];
        ++per_node[node];
        ASSERT_TRUE(nodes.count(node)) << name << " has a pod on a missing node " << node;
        EXPECT_EQ(nodes[node]["metadata"]["labels"].value(key, ""), val)
            << name << " has a pod on non-matching node " << node;
        if (!on_delete && !held_back) {
          EXPECT_EQ(p["metadata"]["labels"]["controller-revision-hash"], hash) << name;
        }
        if (faults.count(node))
          EXPECT_FALSE(ready(p));
        else
          EXPECT_TRUE(ready(p)) << p["metadata"]["name"];
        ready_pods += ready(p);
      }
      long matching = 0;
      for (const auto& [n, obj] : nodes)
        if (obj["metadata"]["labels"].value(key, "") == val) {
          ++matching;
          EXPECT_EQ(per_node[n], 1) << name << " on " << n;
        }
      EXPECT_EQ(ds["status"]["desiredNumberScheduled"], matching) << name;
      EXPECT_EQ(ds["status"]["numberReady"], ready_pods) << name;
      EXPECT_EQ(ds["status"]["observedGeneration"], ds["metadata"]["generation"]) << name;
    }
    // No pods or revisions of a DaemonSet that is gone.
    for (const auto& [uid, ps] : pods_of) EXPECT_TRUE(ds_uids.count(uid)) << "orphan pods " << uid;
    for (const auto& s : mgmt.value("dpuservices", json::array()))
      EXPECT_FALSE(terminating(s)) << "deletion did not finish: " << s["metadata"]["name"];
  }
};

}  // namespace

TEST_F(Incremental, RandomScenarioMatchesTheFullRecompute) {
  std::mt19937 rng(20261202);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::vector<std::string> tenants = {"a", "b", "c"};
  const std::vector<json> strategies = {
      json::object(),
      {{"type", "OnDelete"}},
      {{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxSurge", 1}, {"maxUnavailable", 0}}}},
      {{"type", "RollingUpdate"}, {"rollingUpdate", {{"maxUnavailable", "50%"}}}}};
  std::set<std::string> services;
  std::map<std::string, std::string> faults;
  int created = 0, checks = 0;
  for (int step = 1; step <= 60; ++step) {
    int op = pick(9);
    if (op <= 1) {  // a device label (set or removed) propagates to its node
      int i = pick(kDpus);
      json v = pick(4) == 0 ? json(nullptr) : json(tenants[pick(3)]);
      json p{{"spec", {{"cluster", {{"nodeLabels", {{"tenant", v}}}}}}}};
      ASSERT_EQ(sim.m("PATCH", kDevPath + idx4("dpu-device-%04d", i), p.dump(),
                      "application/merge-patch+json")
                    .status,
                200);
    } else if (op == 2) {  // a label DPF never applied, set with kubectl
      int i = pick(kDpus);
      json p{{"metadata", {{"labels", {{"zone", tenants[pick(3)]}}}}}};
      ASSERT_EQ(sim.d("PATCH", "/api/v1/nodes/" + idx4("host-%04d-dpu-device-%04d", i), p.dump(),
                      "application/merge-patch+json")
                    .status,
                200);
    } else if (op == 3 || (op == 4 && services.empty())) {  // a new DPUService
      std::string name = "svc" + std::to_string(++created);
      json expr{{"key", "tenant"}, {"operator", "In"}, {"values", {tenants[pick(3)]}}};
      json sds = json::object();
      sds["labels"] = {{"nico/extension-service-id", name}};
      sds["annotations"] = {{"nico/extension-service-revision", "1"}};
      sds["nodeSelector"]["nodeSelectorTerms"] =
          json::array({{{"matchExpressions", json::array({expr})}}});
      sds["updateStrategy"] = strategies[pick(4)];
      json spec{{"serviceDaemonSet", sds}};
      Resp r = sim.m("POST", dpuservice_path(), make_dpuservice(name, spec).dump());
      ASSERT_EQ(r.status, 201) << r.body;
      services.insert(name);
    } else if ((op == 4 || op == 5) && !services.empty()) {  // a new revision: rolling update
      auto it = services.begin();
      std::advance(it, pick(static_cast<int>(services.size())));
      json p{{"spec",
              {{"serviceDaemonSet",
                {{"annotations", {{"nico/extension-service-revision", std::to_string(step)}}}}}}}};
      ASSERT_EQ(
          sim.m("PATCH", dpuservice_path(*it), p.dump(), "application/merge-patch+json").status,
          200);
    } else if (op == 6 && !services.empty()) {  // deletion through finalizers and Argo
      auto it = services.begin();
      std::advance(it, pick(static_cast<int>(services.size())));
      ASSERT_EQ(sim.m("DELETE", dpuservice_path(*it)).status, 200);
      services.erase(it);
    } else if (op == 7) {  // a pod deleted by hand comes back
      json pods = sim.d("GET", kPods).j()["items"];
      if (!pods.empty())
        sim.d("DELETE",
              kPods + "/" +
                  pods[pick(static_cast<int>(pods.size()))]["metadata"]["name"].get<std::string>());
    } else if (op == 8) {  // a pod fault on a node, or its end
      std::string node = idx4("host-%04d-dpu-device-%04d", pick(kDpus));
      if (faults.count(node)) {
        sim.ctl("DELETE", "/pod-faults?node=" + node);
        faults.erase(node);
      } else {
        sim.ctl("POST", "/pod-faults", json{{"node", node}, {"reason", "ImagePullBackOff"}});
        faults[node] = "ImagePullBackOff";
      }
    }
    if (step % 6 != 0) continue;
    ASSERT_TRUE(quiescent()) << "step " << step;
    json before = sim.ctl("GET", "/state").j();
    check(before, faults, "step " + std::to_string(step));
    ++checks;
    // The full recompute over every object finds nothing to do.
    ASSERT_EQ(sim.ctl("POST", "/controllers/resync").status, 200);
    ASSERT_TRUE(quiescent()) << "resync at step " << step;
    json after = sim.ctl("GET", "/state").j();
    EXPECT_EQ(after["resourceVersion"], before["resourceVersion"])
        << "the full pass changed something at step " << step;
  }
  EXPECT_EQ(checks, 10);
  EXPECT_GE(created, 3);
  json stats = sim.ctl("GET", "/controllers").j();
  EXPECT_GT(stats["controllers"]["daemonset"]["items"].get<long>(), 0);
  EXPECT_GT(stats["max_hold_us"].get<long>(), 0);
}

TEST_F(Incremental, WorkFollowsTheChangeNotTheStoreSize) {
  // 200 DPUs, one labelled: a label change is a handful of items, not a pass over everything.
  sim.reset(200, 0);
  ASSERT_TRUE(quiescent());
  sim.ctl("POST", "/controllers/stats/reset");
  json p{{"spec", {{"cluster", {{"nodeLabels", {{"tenant", "solo"}}}}}}}};
  ASSERT_EQ(
      sim.m("PATCH", kDevPath + "dpu-device-0007", p.dump(), "application/merge-patch+json").status,
      200);
  ASSERT_TRUE(wait_until([&] {
    return sim.d("GET", "/api/v1/nodes/host-0007-dpu-device-0007")
               .j()["metadata"]["labels"]
               .value("tenant", "") == "solo";
  }));
  ASSERT_TRUE(quiescent());
  json s = sim.ctl("GET", "/controllers").j();
  long items = 0;
  for (auto& [k, v] : s["controllers"].items()) items += v["items"].get<long>();
  EXPECT_LE(items, 20) << s.dump();
  EXPECT_GE(items, 3) << s.dump();
}
