// The service reconciler against a dpfsim child process, without PostgreSQL
// (issue 8: what envtest is to controller-runtime). Each test plays the
// worker: it builds the claimed work as the queue would, runs one pass, and
// checks both the decided outcome and what the API server holds afterwards.
#include "reconcile/service_reconciler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "kube/client.hpp"
#include "shared_sim.hpp"
#include "sim_harness.h"

namespace extsvc::reconcile {
namespace {

using nlohmann::json;
using Kind = Outcome::Kind;

constexpr const char* kNs = "dpf-operator-system";
constexpr const char* kVersion = "V1-T1700000000000000";

class ServiceReconcilerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = &testfixture::shared_reconcile_sim(); }
  static void TearDownTestSuite() { sim_ = nullptr; }

  void SetUp() override {
    sim_->reset(2, 0);
    sim_->ctl("DELETE", "/faults");
    kube::ClusterConfig cfg;
    cfg.server = sim_->mgmt;
    cfg.ca_file = sim_->ca_file;
    cfg.timeout_ms = 3000;
    client_ = std::make_unique<kube::Client>(cfg);
    rec_ = std::make_unique<ServiceReconciler>(*client_, kNs);
  }

  // The claimed work of a service at a Helm revision with these chart values.
  static ServiceWork work(const std::string& uuid, const std::string& state, int revision,
                          const json& values) {
    json data = {{"repoURL", "https://charts.example.com/stable"},
                 {"chartName", "demo-agent"},
                 {"chartVersion", "1.2.3"},
                 {"security", {{"privileged", false}}}};
    if (!values.is_null()) data["values"] = values;
    const auto normalized = json::parse(core::validate_helm_chart_data(data.dump()).dump());
    ServiceWork w;
    w.service_id = uuid;
    w.lifecycle_state = state;
    w.deployment_scope = "INSTANCE_DPUS";
    w.attachable_version = kVersion;
    w.dpf_service_name = core::dpf_service_name(uuid, kVersion);
    w.desired_revision = revision;
    if (state != "CREATING") w.applied_revision = revision - 1;
    w.desired = core::render_dpuservice(uuid, kVersion, revision, normalized, kNs);
    return w;
  }

  // One pass, repeated while it ends in a 409 Conflict: the patch carries the
  // resourceVersion it was decided from, and DPF's controller (dpfsim, with
  // no delays) may have written the object between the read and the patch.
  Outcome settle(const ServiceWork& w) {
    Outcome o = rec_->reconcile(w);
    for (int i = 0; i < 5 && o.kind == Kind::kRetry && o.http_status == 409; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      o = rec_->reconcile(w);
    }
    return o;
  }

  static json live(const std::string& name) {
    auto r = sim_->m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) +
                                "/dpuservices/" + name);
    return r.status == 200 ? r.j() : json();
  }

  static int count(const std::string& key) {
    return sim_->ctl("GET", "/counts").j()["management"].value(key, 0);
  }

  static void fault(const json& rule) {
    json r = rule;
    r["cluster"] = "management";
    const auto resp = sim_->ctl("POST", "/faults", r);
    ASSERT_EQ(resp.status, 200) << resp.body;
  }

  static simtest::SimProcess* sim_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<ServiceReconciler> rec_;
};

simtest::SimProcess* ServiceReconcilerTest::sim_ = nullptr;

TEST_F(ServiceReconcilerTest, CreatesTheDpuServiceAndAReplayedCreateAdoptsIt) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000001";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}});
  Outcome o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.new_state, "READY");
  EXPECT_EQ(o.reason, "dpuservice_created");
  EXPECT_EQ(o.applied_revision, 1);
  const json obj = live(w.dpf_service_name);
  ASSERT_TRUE(obj.is_object());
  EXPECT_EQ(obj["metadata"]["labels"]["nico/extension-service-id"], id);
  EXPECT_TRUE(core::owned_by(obj, id));
  // the completion was lost (a crash after the POST): the same work again
  // adopts the object instead of creating a second one
  const int posts = count("POST dpuservices");
  Outcome again = rec_->reconcile(w);
  ASSERT_EQ(again.kind, Kind::kTransition) << again.message;
  EXPECT_EQ(again.reason, "dpuservice_adopted");
  EXPECT_EQ(count("POST dpuservices"), posts + 1);  // one refused POST (409), no second object
}

TEST_F(ServiceReconcilerTest, AnUpdateThatRemovesAValueRemovesItFromTheLiveObject) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000002";
  ASSERT_EQ(rec_->reconcile(work(id, "CREATING", 1, json{{"keep", 1}, {"drop", 2}})).kind,
            Kind::kTransition);
  ServiceWork w = work(id, "UPDATING", 2, json{{"keep", 1}});
  Outcome o = settle(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.reason, "revision_applied");
  EXPECT_EQ(o.applied_revision, 2);
  const json values = live(w.dpf_service_name)["spec"]["helmChart"]["values"];
  EXPECT_EQ(values.value("keep", 0), 1);
  EXPECT_FALSE(values.contains("drop")) << values.dump();
  // applied already: the same update again writes nothing
  const int patches = count("PATCH dpuservices");
  EXPECT_EQ(settle(w).reason, "revision_applied");
  EXPECT_EQ(count("PATCH dpuservices"), patches);
}

TEST_F(ServiceReconcilerTest, DriftIsPatchedBackAndAMissingObjectIsRecreated) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000003";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}});
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  const std::string path = "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) +
                           "/dpuservices/" + w.dpf_service_name;
  ASSERT_EQ(sim_->m("PATCH", path, R"({"spec":{"helmChart":{"values":{"a":99}}}})",
                    "application/merge-patch+json")
                .status,
            200);
  ServiceWork ready = work(id, "READY", 1, json{{"a", 1}});
  ready.applied_revision = 1;
  Outcome o = settle(ready);
  ASSERT_EQ(o.kind, Kind::kEvent) << o.message;
  EXPECT_EQ(o.reason, "drift_patched");
  EXPECT_EQ(live(w.dpf_service_name)["spec"]["helmChart"]["values"]["a"], 1);
  // in sync: a resync pass is done without a write
  EXPECT_EQ(settle(ready).kind, Kind::kDone);
  // deleted by hand (the sim removes it once DPF's finalizer is gone)
  ASSERT_EQ(sim_->m("DELETE", path).status / 100, 2);
  ASSERT_TRUE(simtest::wait_until([&] { return live(w.dpf_service_name).is_null(); }, 5000));
  Outcome back = settle(ready);
  ASSERT_EQ(back.kind, Kind::kEvent) << back.message;
  EXPECT_EQ(back.reason, "drift_recreated");
  EXPECT_TRUE(live(w.dpf_service_name).is_object());
}

TEST_F(ServiceReconcilerTest, DeleteWaitsForTheFinalizersThenReportsDeleted) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000004";
  ServiceWork w = work(id, "CREATING", 1, json());
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  sim_->ctl("POST", "/delays", json{{"finalizer_ms", 500}});
  const int deletes = count("DELETE dpuservices");
  ServiceWork d = work(id, "DELETING", 1, json());
  d.applied_revision = 1;
  Outcome first = rec_->reconcile(d);
  ASSERT_EQ(first.kind, Kind::kPoll) << first.message;
  Outcome o;
  ASSERT_TRUE(simtest::wait_until(
      [&] {
        o = rec_->reconcile(d);
        return o.kind == Kind::kTransition;
      },
      10000));
  EXPECT_EQ(o.new_state, "DELETED");
  EXPECT_EQ(o.reason, "dpuservice_deleted");
  EXPECT_TRUE(live(w.dpf_service_name).is_null());
  EXPECT_EQ(count("DELETE dpuservices"), deletes + 1);  // polls read; they do not delete again
}

TEST_F(ServiceReconcilerTest, AnotherOwnersObjectIsAConflictNotAnAdoption) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000005";
  ServiceWork w = work(id, "CREATING", 1, json());
  json foreign = w.desired;
  foreign["metadata"]["labels"]["nico/extension-service-id"] =
      "6f1c0e4a-1d2b-4c3d-8e4f-0000000000ff";
  ASSERT_EQ(
      sim_->m("POST",
              "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) + "/dpuservices",
              foreign.dump())
          .status,
      201);
  Outcome o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.new_state, "FAILED");
  EXPECT_EQ(o.reason, "ownership_conflict");
  EXPECT_EQ(live(w.dpf_service_name)["metadata"]["labels"]["nico/extension-service-id"],
            "6f1c0e4a-1d2b-4c3d-8e4f-0000000000ff");  // left alone
}

TEST_F(ServiceReconcilerTest, TransientFaultsAreRetriesWithTheirEvidence) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000006";
  ServiceWork w = work(id, "CREATING", 1, json());
  fault({{"verb", "POST"}, {"path_regex", "/dpuservices"}, {"status", 503}, {"count", 1}});
  Outcome o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_EQ(o.http_status, 503);
  fault({{"verb", "POST"},
         {"path_regex", "/dpuservices"},
         {"status", 429},
         {"retry_after", 7},
         {"count", 1}});
  o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_EQ(o.http_status, 429);
  EXPECT_EQ(o.retry_after_s, 7.0);
  // libcurl retries once on a fresh connection when a reused one dies before
  // any answer, so the reset must hit that retry too
  fault({{"verb", "POST"}, {"path_regex", "/dpuservices"}, {"action", "reset"}, {"count", 2}});
  o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_FALSE(o.http_status.has_value());
  // nothing was created by the failed attempts; the next pass creates it
  EXPECT_TRUE(live(w.dpf_service_name).is_null());
  o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.reason, "dpuservice_created");
}

TEST_F(ServiceReconcilerTest, AClosedFenceSendsNothing) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000007";
  ServiceWork w = work(id, "CREATING", 1, json());
  w.budget = kube::Budget().with_fence([] { return false; });
  const int before = sim_->ctl("GET", "/counts").j().value("total", 0);
  Outcome o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kLost);
  EXPECT_EQ(o.api_calls, 0);
  EXPECT_EQ(sim_->ctl("GET", "/counts").j().value("total", 0), before);
}

}  // namespace
}  // namespace extsvc::reconcile
