// The DPU reconciler against a dpfsim child process, without PostgreSQL
// (issue 8): the label decision (one merge patch, only on difference), the
// per-DPU states it derives from what the DPU cluster shows, and the fence.
#include "reconcile/dpu_reconciler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "device_settled.hpp"
#include "dpu_fixture.hpp"
#include "kube/client.hpp"
#include "reconcile/service_reconciler.hpp"
#include "release_pods.hpp"
#include "shared_sim.hpp"
#include "sim_clients.hpp"
#include "sim_harness.h"

namespace extsvc::reconcile {
namespace {

using nlohmann::json;
using testfixture::device;
using testfixture::kNs;
using testfixture::kVersion;
using testfixture::node;

constexpr const char* kId = "7a2d1f5b-2e3c-4d4e-9f50-000000000001";

DpuWork work(int i, bool wanted) {
  return testfixture::dpu_work(i, wanted, kId);
}

class DpuReconcilerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = &testfixture::shared_reconcile_sim(); }
  static void TearDownTestSuite() { sim_ = nullptr; }

  void SetUp() override {
    sim_->reset(2, 0);
    sim_->ctl("DELETE", "/faults");
    sim_->ctl("DELETE", "/pod-faults");
    sim_->ctl("DELETE", "/charts");
    if (const json props = chart(); !props.is_null()) {
      if (props.contains("namespace"))
        sim_->d("POST", "/api/v1/namespaces",
                json{{"apiVersion", "v1"},
                     {"kind", "Namespace"},
                     {"metadata", {{"name", props["namespace"]}}}}
                    .dump());
      ASSERT_EQ(sim_->ctl("POST", "/charts", props).status, 200);
    }
    auto clients = testfixture::sim_clients(*sim_);
    mgmt_ = std::move(clients.mgmt);
    dpu_ = std::move(clients.dpu);
    // the service exists, created by the service reconciler at revision 1
    ASSERT_EQ(testfixture::create_demo_service(*mgmt_, kId), "dpuservice_created");
    // DPF's DPUDevice controller writes status.observedGeneration a moment after the reset; a
    // pass that read the version before it meets 409 by design (retried by the worker). The
    // tests start once DPF is done with both DPUDevices.
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(testfixture::dpf_done_with_device(*sim_, i)) << device(i);
  }

  // What the chart does (POST /charts), set before the service is created; null: the contract.
  virtual json chart() const { return nullptr; }

  static json device_labels(int i) {
    auto r = sim_->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" +
                                std::string(kNs) + "/dpudevices/" + device(i));
    json labels = r.j()["spec"]["cluster"]["nodeLabels"];
    return labels.is_object() ? labels : json::object();
  }

  // Runs passes (a fresh reconciler per pass, as per batch) until the item's
  // state is `want`; returns the last state.
  std::string pass_until(const DpuWork& w, const std::string& want, DpuOutcome* last = nullptr) {
    std::string state;
    simtest::wait_until(
        [&] {
          DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
          DpuOutcome o = rec.reconcile(w);
          state = o.results.empty() ? "(none)" : o.results.front().state;
          if (last != nullptr) *last = o;
          return state == want;
        },
        15000);
    return state;
  }

  // Runs passes until the item's message names `text` (or `ms` passed); the last outcome.
  DpuOutcome pass_until_message(const DpuWork& w, const std::string& text, int ms = 15000) {
    DpuOutcome o;
    simtest::wait_until(
        [&] {
          DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
          o = rec.reconcile(w);
          return !o.results.empty() && o.results.front().message.find(text) != std::string::npos;
        },
        ms);
    return o;
  }

  static simtest::SimProcess* sim_;
  std::unique_ptr<kube::Client> mgmt_, dpu_;
};

simtest::SimProcess* DpuReconcilerTest::sim_ = nullptr;

TEST_F(DpuReconcilerTest, AttachLabelsOnlyTheWantedDpuAndRunningNeedsAReadyPodOfTheRevision) {
  const std::string key = core::placement_label_key(kId, kVersion);
  // dpfsim's default delays: the label reaches the Node and the pod gets
  // Ready only after the pass that placed the label
  sim_->ctl("POST", "/delays", json{{"all_ms", 300}});
  DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
  DpuOutcome first = rec.reconcile(work(0, true));
  EXPECT_TRUE(first.patched);
  ASSERT_EQ(first.results.size(), 1u);
  EXPECT_NE(first.results.front().state, "RUNNING");  // labelled now; no pod can be Ready yet
  EXPECT_TRUE(device_labels(0).contains(key));
  EXPECT_FALSE(device_labels(1).contains(key));
  DpuOutcome o;
  EXPECT_EQ(pass_until(work(0, true), "RUNNING", &o), "RUNNING");
  EXPECT_FALSE(o.patched);  // in place: no second write
  // the other DPU never wanted it: nothing there, nothing written
  DpuReconciler other(*mgmt_, dpu_.get(), kNs);
  DpuOutcome none = other.reconcile(work(1, false));
  EXPECT_FALSE(none.patched);
  ASSERT_EQ(none.results.size(), 1u);
  EXPECT_EQ(none.results.front().state, "TERMINATED");
}

TEST_F(DpuReconcilerTest, DetachRemovesTheLabelAndTerminatedWaitsForThePodToGo) {
  const std::string key = core::placement_label_key(kId, kVersion);
  ASSERT_EQ(pass_until(work(0, true), "RUNNING"), "RUNNING");
  sim_->ctl("POST", "/delays", json{{"pod_termination_ms", 1500}});
  DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
  DpuOutcome o = rec.reconcile(work(0, false));
  EXPECT_TRUE(o.patched);
  EXPECT_FALSE(device_labels(0).contains(key));
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_NE(o.results.front().state, "TERMINATED");  // the pod is still there
  EXPECT_EQ(pass_until(work(0, false), "TERMINATED"), "TERMINATED");
}

TEST_F(DpuReconcilerTest, ACrashLoopingPodIsPendingWithItsReason) {
  sim_->ctl("POST", "/pod-faults", json{{"node", node(0)}, {"reason", "CrashLoopBackOff"}});
  DpuOutcome o;
  EXPECT_EQ(pass_until(work(0, true), "PENDING", &o), "PENDING");
  // the label is placed, the pod exists but is not Ready: wait for the reason
  o = pass_until_message(work(0, true), "CrashLoopBackOff");
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "PENDING");
  EXPECT_NE(o.results.front().message.find("CrashLoopBackOff"), std::string::npos)
      << o.results.front().message;
}

TEST_F(DpuReconcilerTest, AnUnreachableDpuClusterIsUnknownAndAClosedFenceSendsNothing) {
  ASSERT_EQ(
      sim_->ctl("POST", "/faults",
                json{{"cluster", "dpu"}, {"verb", "*"}, {"path_regex", ".*"}, {"status", 503}})
          .status,
      200);
  DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
  DpuOutcome o = rec.reconcile(work(0, true));
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "UNKNOWN");
  sim_->ctl("DELETE", "/faults");
  DpuWork fenced = work(1, true);
  fenced.budget = kube::Budget().with_fence([] { return false; });
  const int before = sim_->ctl("GET", "/counts").j().value("total", 0);
  DpuReconciler rec2(*mgmt_, dpu_.get(), kNs);
  DpuOutcome lost = rec2.reconcile(fenced);
  EXPECT_TRUE(lost.lost);
  EXPECT_EQ(lost.api_calls, 0);
  EXPECT_EQ(sim_->ctl("GET", "/counts").j().value("total", 0), before);
  EXPECT_FALSE(device_labels(1).contains(core::placement_label_key(kId, kVersion)));
}

json release_pods_on(simtest::SimProcess& sim, int i) {
  return testfixture::release_pods_on(sim, core::dpf_service_name(kId, kVersion), node(i));
}

// Issue 23, part 2: a chart that drops serviceDaemonSet.labels and .annotations. Its pods carry
// neither the service label nor the revision annotation; they are found through the DaemonSet
// Argo applied for the DPUService (tracking-id) and their ownerReferences. The service is PENDING
// with the contract named, and a detach is TERMINATED only once every pod of the release left
// the Node (the old code, which selected pods by the label, claimed it at once).
class ContractBreakingChart : public DpuReconcilerTest {
 protected:
  json chart() const override {
    return {{"chart", "demo-agent"}, {"ignores_labels", true}, {"ignores_annotations", true}};
  }
};

// A chart that renders its DaemonSet into another namespace (labels kept).
class ChartInAnotherNamespace : public DpuReconcilerTest {
 protected:
  json chart() const override { return {{"chart", "demo-agent"}, {"namespace", "tenant-space"}}; }
};

// Detaches DPU 0 while its pods take 4 s to go; every pass until TERMINATED checks that no pod of
// the release is on the Node when TERMINATED is derived. Returns whether a pass counted a pod.
void detach_never_claims_early(simtest::SimProcess& sim, const std::function<DpuOutcome()>& pass,
                               const std::string& expect) {
  sim.ctl("POST", "/delays", json{{"pod_termination_ms", 4000}});
  DpuOutcome o;
  bool terminated = false, counted = false;
  simtest::wait_until(
      [&] {
        const bool before = !release_pods_on(sim, 0).empty();
        o = pass();
        const bool after = !release_pods_on(sim, 0).empty();
        if (o.results.empty()) return false;
        if (o.results.front().state == "TERMINATED") {
          terminated = true;
          // read after the pass: a pod still there was there when the pass concluded
          EXPECT_FALSE(after) << "TERMINATED while a pod of the release was on the Node";
          return true;
        }
        if (before && after && o.results.front().message.find(expect) != std::string::npos)
          counted = true;
        return false;
      },
      30000);
  EXPECT_TRUE(terminated) << (o.results.empty() ? "" : o.results.front().message);
  EXPECT_TRUE(counted) << "no pass counted the release's pod on the Node (" << expect << ")";
}

TEST_F(ContractBreakingChart, IsPendingWithTheContractAndADetachWaitsForItsPods) {
  DpuOutcome o = pass_until_message(work(0, true), "chart does not propagate", 20000);
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "PENDING");
  EXPECT_NE(o.results.front().message.find("chart does not propagate "
                                           "serviceDaemonSet.labels/annotations: revision cannot "
                                           "be proven"),
            std::string::npos)
      << o.results.front().message;
  const json pods = release_pods_on(*sim_, 0);
  ASSERT_EQ(pods.size(), 1u);
  // no label of ours on it: only the owner path finds it
  EXPECT_FALSE(pods[0]["metadata"]
                   .value("labels", json::object())
                   .contains(std::string(core::kOwnerIdLabel)));
  detach_never_claims_early(
      *sim_,
      [&] {
        DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
        return rec.reconcile(work(0, false));
      },
      "found through Argo's tracking");
}

TEST_F(ChartInAnotherNamespace, IsRunningAndItsPodsHoldTheDetach) {
  EXPECT_EQ(pass_until(work(0, true), "RUNNING"), "RUNNING");
  ASSERT_EQ(release_pods_on(*sim_, 0).size(), 1u);
  EXPECT_EQ(release_pods_on(*sim_, 0)[0]["metadata"]["namespace"], "tenant-space");
  detach_never_claims_early(
      *sim_,
      [&] {
        DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
        return rec.reconcile(work(0, false));
      },
      "pod(s) of the service still on the Node");
}

// Issue 23, part 3: a privileged chart on security.privileged: false. DPF's policy
// dpf-deny-privileged-pods rejects the DaemonSet at Argo's sync; DPF says only "Sync: OutOfSync,
// Health: Missing", the Application's sync operation names the policy. One LIST of the
// Applications per service per batch, never per DPU; a 403 on it is explained, still PENDING.
class PrivilegedChartDenied : public DpuReconcilerTest {
 protected:
  json chart() const override { return {{"chart", "demo-agent"}, {"needs_privileged", true}}; }
  int application_lists() const {
    return sim_->ctl("GET", "/counts").j()["management"].value("LIST applications", 0);
  }
};

TEST_F(PrivilegedChartDenied, ThePendingMessageNamesThePolicyFromOneListPerService) {
  DpuOutcome o = pass_until_message(work(0, true), "dpf-deny-privileged-pods", 20000);
  ASSERT_EQ(o.results.size(), 1u);
  const std::string& msg = o.results.front().message;
  EXPECT_EQ(o.results.front().state, "PENDING") << msg;
  EXPECT_NE(msg.find("Sync: OutOfSync, Health: Missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("; sync failed: one or more objects failed to apply, reason: "
                     "daemonsets.apps \""),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("ValidatingAdmissionPolicy 'dpf-deny-privileged-pods' with binding "
                     "'dpf-deny-privileged-pods' denied request"),
            std::string::npos)
      << msg;
  // two DPUs of the service in one batch (one reconciler): one LIST, not one per DPU
  ASSERT_EQ(pass_until_message(work(1, true), "dpf-deny-privileged-pods", 20000).results.size(),
            1u);
  const int before = application_lists();
  DpuReconciler batch(*mgmt_, dpu_.get(), kNs);
  for (int i : {0, 1}) {
    DpuOutcome b = batch.reconcile(work(i, true));
    ASSERT_EQ(b.results.size(), 1u);
    EXPECT_EQ(b.results.front().state, "PENDING");
    EXPECT_NE(b.results.front().message.find("dpf-deny-privileged-pods"), std::string::npos)
        << b.results.front().message;
  }
  EXPECT_EQ(application_lists() - before, 1);
}

TEST_F(PrivilegedChartDenied, AForbiddenApplicationReadIsExplainedAndStaysPending) {
  ASSERT_EQ(pass_until_message(work(0, true), "dpf-deny-privileged-pods", 20000).results.size(),
            1u);
  ASSERT_EQ(sim_->ctl("POST", "/faults",
                      json{{"cluster", "management"},
                           {"verb", "LIST"},
                           {"path_regex", "/applications"},
                           {"status", 403}})
                .status,
            200);
  DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
  DpuOutcome o = rec.reconcile(work(0, true));
  ASSERT_EQ(o.results.size(), 1u);
  const std::string& msg = o.results.front().message;
  EXPECT_EQ(o.results.front().state, "PENDING") << msg;
  EXPECT_NE(msg.find("Sync: OutOfSync, Health: Missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the Argo CD sync message could not be read (Forbidden (HTTP 403"),
            std::string::npos)
      << msg;
  EXPECT_NE(
      msg.find("grant get and list on applications.argoproj.io in namespace " + std::string(kNs)),
      std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("dpf-deny-privileged-pods"), std::string::npos) << msg;
}

// A service whose sync succeeds never reads an Application.
TEST_F(DpuReconcilerTest, ARunningServiceReadsNoApplication) {
  sim_->ctl("POST", "/counts/reset");
  ASSERT_EQ(pass_until(work(0, true), "RUNNING"), "RUNNING");
  EXPECT_EQ(sim_->ctl("GET", "/counts").j()["management"].value("LIST applications", 0), 0);
}

// DPF v24.10 has no DPUDevice CRD: the GET answers 404 for the resource (not
// for the object), and the DPU's rows name the minimum release instead of
// "DPUDevice not found" (issues 9, 23).
TEST(DpuReconcilerOldRelease, NoDpuDeviceResourceNamesTheMinimumRelease) {
  auto sim = simtest::SimProcess::start({"--dpus", "1", "--seed", "7", "--dpf-version", "v24.10"});
  kube::Client mgmt(testfixture::sim_cluster(*sim)), dpu(testfixture::sim_cluster(*sim, true));
  const DpuWork w = work(0, true);
  DpuReconciler rec(mgmt, &dpu, kNs);
  const DpuOutcome o = rec.reconcile(w);
  EXPECT_FALSE(o.retry);
  EXPECT_FALSE(o.patched);
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "ERROR");
  const std::string& msg = o.results.front().message;
  EXPECT_NE(msg.find("spec.cluster"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v24.10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("upgrade DPF"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v26.8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("serves no DPUDevice resource"), std::string::npos) << msg;
}

// DPF v25.7's DPUDevice CRD has no spec.cluster: the Strict patch is refused, and the rows name
// the field and the minimum release.
TEST(DpuReconcilerOldRelease, ALabelPatchRefusedForSpecClusterNamesTheFieldAndTheRelease) {
  auto sim = simtest::SimProcess::start({"--dpus", "1", "--seed", "7", "--dpf-version", "v25.7"});
  kube::Client mgmt(testfixture::sim_cluster(*sim)), dpu(testfixture::sim_cluster(*sim, true));
  DpuReconciler rec(mgmt, &dpu, kNs);
  // DPF's DPUDevice controller writes the freshly seeded device a moment after the start: a pass
  // that read it before meets 409 by design and is made again, as the worker does
  DpuOutcome o = rec.reconcile(work(0, true));
  for (int attempt = 1;
       o.retry && std::string_view(o.retry_reason ? o.retry_reason : "") == "conflict" &&
       attempt < 5;
       ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    o = rec.reconcile(work(0, true));
  }
  EXPECT_FALSE(o.retry) << o.message;
  EXPECT_FALSE(o.patched);
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "ERROR");
  const std::string& msg = o.results.front().message;
  EXPECT_NE(msg.find("spec.cluster"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v25.7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v26.8"), std::string::npos) << msg;
}

// Issue 23, part 5: with the DPF API level read at the worker's start (v25.7: DPUDevice without
// spec.cluster), a wanted item is ERROR with the one message and nothing at all is sent for it;
// an item being removed is still observed.
TEST(DpuReconcilerOldRelease, ADetectedOldReleaseSendsNoPatch) {
  auto sim = simtest::SimProcess::start({"--dpus", "1", "--seed", "7", "--dpf-version", "v25.7"});
  kube::Client mgmt(testfixture::sim_cluster(*sim)), dpu(testfixture::sim_cluster(*sim, true));
  auto doc = [&](const std::string& gv) {
    auto r = mgmt.get("/openapi/v3/apis/" + gv);
    return r.ok() ? r.value().body : json();
  };
  const core::DpfApiLevel level = core::dpf_api_level(doc("svc.dpu.nvidia.com/v1alpha1"),
                                                      doc("provisioning.dpu.nvidia.com/v1alpha1"));
  ASSERT_EQ(level.missing_for_placement(), std::vector<std::string>{"DPUDevice.spec.cluster"});
  const int before = sim->ctl("GET", "/counts").j().value("total", 0);
  DpuReconciler rec(mgmt, &dpu, kNs);
  rec.set_dpf_api(&level);
  const DpuWork wanted = work(0, true);
  const DpuOutcome o = rec.reconcile(wanted);
  EXPECT_EQ(o.api_calls, 0);
  EXPECT_EQ(sim->ctl("GET", "/counts").j().value("total", 0), before);  // nothing sent
  ASSERT_EQ(o.results.size(), 1u);
  EXPECT_EQ(o.results.front().state, "ERROR");
  EXPECT_EQ(o.results.front().item, &wanted.items.front());
  const std::string& msg = o.results.front().message;
  EXPECT_NE(msg.find("DPUDevice.spec.cluster"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v26.8 or later"), std::string::npos) << msg;
  // a removal is observed as usual (the pass reads; the key was never placed)
  const DpuWork removal = work(0, false);
  DpuReconciler rec2(mgmt, &dpu, kNs);
  rec2.set_dpf_api(&level);
  const DpuOutcome r = rec2.reconcile(removal);
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results.front().item, &removal.items.front());
  EXPECT_GT(r.api_calls, 0);
  EXPECT_NE(r.results.front().state, "ERROR");
}

// DPF downgraded under a placed key (dpfsim's POST /profile): the release has no
// DPUDevice.spec.cluster to patch, so no key is removed; the removal stays TERMINATING and its
// message says why (the minimum release), never TERMINATED while the key is on the DPUDevice, and
// nothing is written (issue 23).
TEST(DpuReconcilerOldRelease, ARemovalTheReleaseCannotEndSaysWhy) {
  auto sim = simtest::SimProcess::start({"--dpus", "1", "--seed", "7"});
  kube::Client mgmt(testfixture::sim_cluster(*sim)), dpu(testfixture::sim_cluster(*sim, true));
  {
    DpuReconciler rec(mgmt, &dpu, kNs);
    DpuOutcome o = rec.reconcile(work(0, true));
    for (int attempt = 1; !o.patched && attempt < 10; ++attempt) {  // 409s of DPF's own writes
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      o = rec.reconcile(work(0, true));
    }
    ASSERT_TRUE(o.patched) << o.message;
  }
  ASSERT_EQ(sim->ctl("POST", "/profile", json{{"dpf_version", "v25.7"}}).status, 200);
  auto doc = [&](const std::string& gv) {
    auto r = mgmt.get("/openapi/v3/apis/" + gv);
    return r.ok() ? r.value().body : json();
  };
  const core::DpfApiLevel level = core::dpf_api_level(doc("svc.dpu.nvidia.com/v1alpha1"),
                                                      doc("provisioning.dpu.nvidia.com/v1alpha1"));
  ASSERT_EQ(level.missing_for_placement(), std::vector<std::string>{"DPUDevice.spec.cluster"});
  auto patches = [&] {
    const json c = sim->ctl("GET", "/counts").j().value("management", json::object());
    return c.value("PATCH dpudevices", 0);
  };
  const int patches_before = patches();
  DpuReconciler rec(mgmt, &dpu, kNs);
  rec.set_dpf_api(&level);
  const DpuWork removal = work(0, false);
  const DpuOutcome r = rec.reconcile(removal);
  EXPECT_FALSE(r.patched);
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results.front().state, "TERMINATING");
  const std::string& msg = r.results.front().message;
  EXPECT_NE(msg.find("label still on the DPUDevice"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the key is not removed: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("DPUDevice.spec.cluster"), std::string::npos) << msg;
  EXPECT_NE(msg.find("v26.8 or later"), std::string::npos) << msg;
  EXPECT_EQ(patches(), patches_before);  // nothing written
}

}  // namespace
}  // namespace extsvc::reconcile
