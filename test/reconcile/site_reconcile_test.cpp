// Both reconcilers with a site id (issue 25), against dpfsim: another site's DPUService is never
// written, one made before the site label existed is adopted by a metadata patch (and only then
// deleted), and a DPU pass removes only the placement keys this site registered, the ones no
// item names only while the orphan guard allows.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "device_settled.hpp"
#include "dpu_fixture.hpp"
#include "kube/client.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/drift_detector.hpp"
#include "reconcile/service_reconciler.hpp"
#include "sim_harness.h"

namespace extsvc::reconcile {
namespace {

using nlohmann::json;
using Kind = Outcome::Kind;
using testfixture::device;
using testfixture::kNs;
using testfixture::kVersion;

const std::string kServices =
    "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) + "/dpuservices";

json data() {
  return json::parse(core::validate_helm_chart_data(
                         R"({"repoURL":"https://charts.example.com/stable","chartName":"agent",)"
                         R"("chartVersion":"1.2.3","security":{"privileged":false}})")
                         .dump());
}

ServiceWork work(const std::string& id, const std::string& state, const std::string& site) {
  ServiceWork w;
  w.service_id = id;
  w.lifecycle_state = state;
  w.deployment_scope = "INSTANCE_DPUS";
  w.attachable_version = kVersion;
  w.dpf_service_name = core::dpf_service_name(id, kVersion);
  w.desired_revision = 1;
  if (state != "CREATING") w.applied_revision = 1;
  w.desired = core::render_dpuservice(id, kVersion, 1, data(), kNs, site);
  return w;
}

class SiteReconcileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = simtest::SimProcess::start({"--dpus", "2", "--seed", "9"});
  }
  static void TearDownTestSuite() { sim_.reset(); }
  void SetUp() override {
    sim_->reset(2, 0);
    kube::ClusterConfig cfg;
    cfg.server = sim_->mgmt;
    cfg.timeout_ms = 3000;
    client_ = std::make_unique<kube::Client>(cfg);
    kube::ClusterConfig d = cfg;
    d.server = sim_->dpu;
    dpu_ = std::make_unique<kube::Client>(d);
  }
  static json live(const std::string& name) {
    auto r = sim_->m("GET", kServices + "/" + name);
    return r.status == 200 ? r.j() : json();
  }
  // the object as another writer made it (another site's, or a 0.2.0 worker's: no site label)
  // It returns once DPF's DPUService controller is done with the new object (its finalizer and a
  // status for its generation written): a pass that read it before those writes meets 409 or a
  // new generation by design, which the worker retries.
  static void post(const json& obj) {
    ASSERT_EQ(sim_->m("POST", kServices, obj.dump()).status, 201);
    const std::string name = obj["metadata"]["name"];
    for (int waited = 0; waited < 5000; waited += 10) {
      const json d = live(name);
      if (d.is_object() && d["metadata"].contains("finalizers") && d.contains("status") &&
          d["status"].value("observedGeneration", 0LL) == d["metadata"].value("generation", 1LL))
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "DPF's controller did not settle " << name;
  }
  static json device_labels(int i) {
    auto r = sim_->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" +
                                std::string(kNs) + "/dpudevices/" + device(i));
    json l = r.j()["spec"]["cluster"]["nodeLabels"];
    return l.is_object() ? l : json::object();
  }
  static void set_device_labels(int i, const json& labels) {
    ASSERT_EQ(sim_->m("PATCH",
                      "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) +
                          "/dpudevices/" + device(i),
                      json{{"spec", {{"cluster", {{"nodeLabels", labels}}}}}}.dump(),
                      "application/merge-patch+json")
                  .status,
              200);
  }
  static int count(const std::string& key) {
    return sim_->ctl("GET", "/counts").j()["management"].value(key, 0);
  }

  static std::unique_ptr<simtest::SimProcess> sim_;
  std::unique_ptr<kube::Client> client_, dpu_;
};
std::unique_ptr<simtest::SimProcess> SiteReconcileTest::sim_;

TEST_F(SiteReconcileTest, AnotherSitesObjectIsNeverWritten) {
  const std::string id = "5a7e0000-0000-4000-8000-000000000001";
  post(work(id, "CREATING", "site-b").desired);  // site-b has a service with the same id
  ServiceReconciler a(*client_, kNs, "site-a");
  const int writes = count("PATCH dpuservices") + count("DELETE dpuservices");
  Outcome created = a.reconcile(work(id, "CREATING", "site-a"));
  EXPECT_EQ(created.reason, "ownership_conflict");
  EXPECT_NE(created.message.find("nico/site"), std::string::npos) << created.message;
  Outcome drift = a.reconcile(work(id, "READY", "site-a"));
  EXPECT_EQ(drift.reason, "ownership_conflict");
  ServiceWork del = work(id, "DELETING", "site-a");
  Outcome deleted = a.reconcile(del);
  EXPECT_EQ(deleted.reason, "ownership_conflict") << deleted.message;
  EXPECT_EQ(count("PATCH dpuservices") + count("DELETE dpuservices"), writes);
  EXPECT_EQ(live(del.dpf_service_name)["metadata"]["labels"]["nico/site"], "site-b");
  // the resync's view: the object is another site's, no orphan candidate
  const auto report = detect_drift(*client_, kNs, {}, {}, "site-a");
  EXPECT_EQ(report.other_site, 1u);
  EXPECT_EQ(report.ours, 0u);
  ASSERT_EQ(report.orphans.size(), 1u);
  EXPECT_EQ(report.orphans[0].site, core::SiteMembership::kForeign);
}

TEST_F(SiteReconcileTest, AnObjectWithoutTheSiteLabelIsAdoptedByAMetadataPatch) {
  const std::string id = "5a7e0000-0000-4000-8000-000000000002";
  ServiceWork ready = work(id, "READY", "site-a");
  post(work(id, "CREATING", "").desired);  // as the 0.2.0 worker rendered it
  const json before = live(ready.dpf_service_name);
  ServiceReconciler a(*client_, kNs, "site-a");
  Outcome o = a.reconcile(ready);
  ASSERT_EQ(o.kind, Kind::kEvent) << o.message;
  EXPECT_EQ(o.reason, "site_label_adopted");
  const json after = live(ready.dpf_service_name);
  EXPECT_EQ(after["metadata"]["labels"]["nico/site"], "site-a");
  EXPECT_EQ(after["metadata"]["uid"], before["metadata"]["uid"]);
  EXPECT_EQ(after["metadata"]["generation"], before["metadata"]["generation"]);  // no spec change
  EXPECT_EQ(after["spec"], before["spec"]);
  // adopted: the next drift check is done without a write
  EXPECT_EQ(a.reconcile(ready).kind, Kind::kDone);
  // a delete of an unlabelled object labels it first, then deletes it
  const std::string id2 = "5a7e0000-0000-4000-8000-000000000003";
  post(work(id2, "CREATING", "").desired);
  const int patches = count("PATCH dpuservices");
  ServiceWork del = work(id2, "DELETING", "site-a");
  Outcome d = a.reconcile(del);
  EXPECT_EQ(d.kind, Kind::kPoll) << d.message;
  EXPECT_EQ(count("PATCH dpuservices"), patches + 1);
}

TEST_F(SiteReconcileTest, ADpuPassRemovesOnlyRegisteredKeysAndDerivedOnesOnlyWhenAllowed) {
  const std::string id = "5a7e0000-0000-4000-8000-000000000004";
  const std::string other = "5a7e0000-0000-4000-8000-000000000005";
  const std::string ours = core::placement_label_key(id, kVersion);
  const std::string late = core::placement_label_key(other, kVersion);  // ours, named by no item
  const std::string foreign = "nico/extsvc-" + std::string(20, 'x');    // never written by us
  set_device_labels(0, {{ours, "enabled"}, {late, "enabled"}, {foreign, "enabled"}});
  ASSERT_TRUE(testfixture::dpf_done_with_device(*sim_, 0));
  const std::set<std::string> registry = {ours, late};
  DpuWork w = testfixture::dpu_work(0, false, id);  // detached: an explicit removal of `ours`
  w.registered_keys = &registry;
  w.derived_removal_ok = [] { return false; };  // the orphan guard holds derived removals back
  DpuReconciler rec(*client_, dpu_.get(), kNs);
  DpuOutcome o = rec.reconcile(w);
  json labels = device_labels(0);
  EXPECT_FALSE(labels.contains(ours)) << labels.dump();
  EXPECT_TRUE(labels.contains(late));
  EXPECT_TRUE(labels.contains(foreign));
  EXPECT_EQ(o.held_keys, std::set<std::string>{late});
  EXPECT_EQ(o.foreign_keys, std::set<std::string>{foreign});
  EXPECT_EQ(o.observation["foreign_keys"], json::array({foreign}));
  // the guard allows: the derived removal goes, the foreign key stays (once DPF is done with the
  // first pass's patch: a 409 on its status write would only be retried)
  ASSERT_TRUE(testfixture::dpf_done_with_device(*sim_, 0));
  w.derived_removal_ok = [] { return true; };
  DpuReconciler again(*client_, dpu_.get(), kNs);
  o = again.reconcile(w);
  labels = device_labels(0);
  EXPECT_FALSE(labels.contains(late)) << labels.dump();
  EXPECT_TRUE(labels.contains(foreign));
  EXPECT_TRUE(o.held_keys.empty());
}

}  // namespace
}  // namespace extsvc::reconcile
