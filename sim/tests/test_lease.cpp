// coordination.k8s.io/v1 Leases as kube-apiserver serves them (issue 25): discovery, optimistic
// concurrency (a PUT with a stale resourceVersion is 409 Conflict, a create of an existing one
// 409 AlreadyExists, a PUT without resourceVersion 422), create on PUT, validation, the Table
// columns; and the request log's user agent and --request-log file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "sim_harness.h"

using namespace simtest;

namespace {

const std::string kLeases = "/apis/coordination.k8s.io/v1/namespaces/" + kNs + "/leases";

json lease(const std::string& name, const std::string& holder, int transitions = 0) {
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"holderIdentity", holder},
            {"leaseDurationSeconds", 15},
            {"acquireTime", "2026-01-05T10:00:00.000000Z"},
            {"renewTime", "2026-01-05T10:00:00.000000Z"},
            {"leaseTransitions", transitions}}}};
}

class Lease : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(1, 0); }
};

}  // namespace

TEST_F(Lease, Discovery) {
  Resp r = sim.m("GET", "/apis");
  bool found = false;
  const json groups = r.j()["groups"];
  for (const auto& g : groups)
    if (g["name"] == "coordination.k8s.io") found = g["preferredVersion"]["version"] == "v1";
  EXPECT_TRUE(found) << r.body;
  r = sim.m("GET", "/apis/coordination.k8s.io/v1");
  ASSERT_EQ(r.status, 200);
  std::set<std::string> names;
  const json resources = r.j()["resources"];
  for (const auto& res : resources) {
    names.insert(res["name"].get<std::string>());
    if (res["name"] == "leases") {
      EXPECT_EQ(res["kind"], "Lease");
      EXPECT_TRUE(res["namespaced"]);
    }
  }
  EXPECT_TRUE(names.count("leases"));
  EXPECT_FALSE(names.count("leases/status"));  // Lease has no status subresource
}

TEST_F(Lease, OptimisticConcurrency) {
  Resp r = sim.m("POST", kLeases, lease("nico-extsvc-a", "holder-1").dump());
  ASSERT_EQ(r.status, 201) << r.body;
  const json created = r.j();
  const std::string rv = created["metadata"]["resourceVersion"];
  EXPECT_FALSE(created["metadata"].contains("generation"));
  EXPECT_FALSE(created.contains("status"));
  // a second create of the same name: 409 AlreadyExists
  r = sim.m("POST", kLeases, lease("nico-extsvc-a", "holder-2").dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.j()["reason"], "AlreadyExists");
  // an update with the resourceVersion read wins ...
  json renew = created;
  renew["spec"]["renewTime"] = "2026-01-05T10:00:02.000000Z";
  r = sim.m("PUT", kLeases + "/nico-extsvc-a", renew.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.j()["metadata"]["resourceVersion"], rv);
  // ... and a second writer that read the same version loses: 409 Conflict, nothing written
  json take = created;
  take["spec"]["holderIdentity"] = "holder-2";
  r = sim.m("PUT", kLeases + "/nico-extsvc-a", take.dump());
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.j()["reason"], "Conflict");
  EXPECT_NE(r.j()["message"].get<std::string>().find("leases.coordination.k8s.io"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(sim.m("GET", kLeases + "/nico-extsvc-a").j()["spec"]["holderIdentity"], "holder-1");
  // a merge patch with a stale resourceVersion: 409 as well
  r = sim.m(
      "PATCH", kLeases + "/nico-extsvc-a",
      json{{"metadata", {{"resourceVersion", rv}}}, {"spec", {{"holderIdentity", "x"}}}}.dump(),
      "application/merge-patch+json");
  EXPECT_EQ(r.status, 409);
  // a PUT without resourceVersion: refused (AllowUnconditionalUpdate is false for Lease)
  r = sim.m("PUT", kLeases + "/nico-extsvc-a", lease("nico-extsvc-a", "holder-3").dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(sim.m("GET", kLeases + "/nico-extsvc-a").j()["spec"]["holderIdentity"], "holder-1");
}

TEST_F(Lease, CreateOnPutAndValidation) {
  // AllowCreateOnUpdate: a PUT of a missing Lease without resourceVersion creates it
  Resp r = sim.m("PUT", kLeases + "/put-created", lease("put-created", "h").dump());
  EXPECT_EQ(r.status, 201) << r.body;
  json bad = lease("bad", "h");
  bad["spec"]["leaseDurationSeconds"] = 0;
  bad["spec"]["leaseTransitions"] = -1;
  r = sim.m("POST", kLeases, bad.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  std::set<std::string> fields;
  const json causes = r.j()["details"]["causes"];
  for (const auto& c : causes) fields.insert(c["field"].get<std::string>());
  EXPECT_EQ(fields, (std::set<std::string>{"spec.leaseDurationSeconds", "spec.leaseTransitions"}));
  bad = lease("bad", "h");
  bad["spec"]["renewTime"] = "yesterday";
  EXPECT_EQ(sim.m("POST", kLeases, bad.dump()).status, 400);
  bad = lease("bad", "h");
  bad["spec"]["preferredHolder"] = "x";
  EXPECT_EQ(sim.m("POST", kLeases, bad.dump()).status, 422);
  // the Table kubectl prints
  HttpOpts o;
  o.accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
  r = sim.m("GET", kLeases, "", "application/json", o);
  ASSERT_EQ(r.status, 200);
  const json t = r.j();
  ASSERT_EQ(t["kind"], "Table");
  EXPECT_EQ(t["columnDefinitions"][1]["name"], "Holder");
  EXPECT_EQ(t["rows"][0]["cells"][1], "h");
}

TEST(RequestLogFile, EveryRequestAsAJsonLineWithItsUserAgent) {
  char path[] = "/tmp/dpfsim-requests-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    auto sim = SimProcess::start({"--dpus", "1", "--request-log", path});
    ASSERT_TRUE(sim);
    Resp r = sim->m("POST", kLeases, lease("logged", "h").dump());
    ASSERT_EQ(r.status, 201);
    r = sim->m("GET", kLeases + "/logged");
    ASSERT_EQ(r.status, 200);
    // the ring buffer of GET /requests names the user agent too
    const json recent = sim->ctl("GET", "/requests?limit=5").j()["requests"];
    ASSERT_FALSE(recent.empty());
    EXPECT_FALSE(recent.back()["user_agent"].get<std::string>().empty());
  }
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  std::remove(path);
  std::vector<json> leases;
  for (const auto& l : lines)
    if (l["resource"] == "leases") leases.push_back(l);
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0]["verb"], "POST");
  EXPECT_EQ(leases[0]["status"], 201);
  EXPECT_EQ(leases[0]["cluster"], "management");
  EXPECT_EQ(leases[1]["verb"], "GET");
  EXPECT_EQ(leases[1]["path"], kLeases + "/logged");
  EXPECT_LT(leases[0]["seq"].get<long>(), leases[1]["seq"].get<long>());
  // microseconds: 2026-01-05T10:00:00.123456Z
  const std::string t = leases[0]["time"];
  EXPECT_EQ(t.size(), 27u) << t;
  EXPECT_EQ(t[19], '.');
  EXPECT_EQ(t.back(), 'Z');
  EXPECT_FALSE(leases[0]["user_agent"].get<std::string>().empty());
}
