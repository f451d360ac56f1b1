// The placement pass on DPF's three-hop label path and on Nodes that stop reporting (issue 23),
// against dpfsim's controllers: DPUDevice -> DPU object (DPUSet controller) -> Node (DPU
// controller, phase by phase). A removal is TERMINATED only when the key is gone from all three
// objects and no pod of the service is left; what holds a hop back is named in the message.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "dpu_fixture.hpp"
#include "kube/client.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/service_reconciler.hpp"
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

constexpr const char* kLabelPathId = "7a2d1f5b-2e3c-4d4e-9f50-000000000023";

DpuWork label_work(int i, bool wanted) {
  return testfixture::dpu_work(i, wanted, kLabelPathId);
}

class LabelPathTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = &testfixture::shared_reconcile_sim(); }
  static void TearDownTestSuite() { sim_ = nullptr; }

  void SetUp() override {
    sim_->reset(2, 0);
    auto clients = testfixture::sim_clients(*sim_);
    mgmt_ = std::move(clients.mgmt);
    dpu_ = std::move(clients.dpu);
    ASSERT_EQ(testfixture::create_demo_service(*mgmt_, kLabelPathId), "dpuservice_created");
  }

  // One pass as the worker makes it: a pass whose label patch met DPF's own status write of the
  // DPUDevice (409, by design) observes nothing and is made again.
  DpuItemResult pass(const DpuWork& w) {
    for (int attempt = 1;; ++attempt) {
      DpuReconciler rec(*mgmt_, dpu_.get(), kNs);
      DpuOutcome o = rec.reconcile(w);
      if (o.results.empty() && o.retry && o.retry_reason != nullptr &&
          std::string_view(o.retry_reason) == "conflict" && attempt < 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      EXPECT_EQ(o.results.size(), 1u) << o.message;
      return o.results.empty() ? DpuItemResult{nullptr, "(none)", o.message} : o.results.front();
    }
  }
  DpuItemResult pass_until(const DpuWork& w, const std::function<bool(const DpuItemResult&)>& f,
                           int ms = 15000) {
    DpuItemResult r;
    simtest::wait_until(
        [&] {
          r = pass(w);
          return f(r);
        },
        ms);
    return r;
  }
  static bool has(const DpuItemResult& r, const std::string& state, const std::string& text = "") {
    return r.state == state && r.message.find(text) != std::string::npos;
  }

  static void patch_device(int i, const std::string& patch) {
    ASSERT_EQ(sim_->m("PATCH",
                      "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) +
                          "/dpudevices/" + device(i),
                      patch, "application/merge-patch+json")
                  .status,
              200);
  }

  // What the clusters hold for the service's key on DPU i.
  struct Held {
    bool device = false, dpu = false, node = false;
    size_t pods = 0;
  };
  static Held held(int i) {
    const std::string key = core::placement_label_key(kLabelPathId, kVersion);
    Held h;
    json dev = sim_->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" +
                                  std::string(kNs) + "/dpudevices/" + device(i))
                   .j();
    h.device = dev["spec"]["cluster"]["nodeLabels"].contains(key);
    json d = sim_->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" +
                                std::string(kNs) + "/dpus/" + node(i))
                 .j();
    h.dpu = d["spec"]["cluster"]["nodeLabels"].contains(key);
    json n = sim_->d("GET", "/api/v1/nodes/" + node(i)).j();
    h.node = n["metadata"]["labels"].contains(key);
    json pods = sim_->d("GET", "/api/v1/namespaces/" + std::string(kNs) +
                                   "/pods?labelSelector=nico/extension-service-id%3D" +
                                   kLabelPathId + "&fieldSelector=spec.nodeName%3D" + node(i))
                    .j();
    h.pods = pods["items"].size();
    return h;
  }

  static simtest::SimProcess* sim_;
  std::unique_ptr<kube::Client> mgmt_, dpu_;
};

simtest::SimProcess* LabelPathTest::sim_ = nullptr;

// The case a two-hop view gets wrong: detached while the key is on the DPU object but not yet on
// the Node. DPUDevice and Node show no key and no pod runs, yet DPF still carries the key to the
// Node (and a pod starts) after the detach. Never TERMINATED while the key or a pod remains.
TEST_F(LabelPathTest, ADetachInFlightIsNeverTerminatedWhileTheKeyOrAPodRemains) {
  // hop 1 and hop 2 take 1.5 s each
  sim_->ctl("POST", "/delays", json{{"label_propagation_ms", 3000}, {"pod_termination_ms", 300}});
  DpuItemResult first = pass(label_work(0, true));  // patches the DPUDevice
  EXPECT_EQ(first.state, "PENDING");
  ASSERT_TRUE(simtest::wait_until([] { return held(0).dpu; }, 5000));
  ASSERT_FALSE(held(0).node);
  DpuItemResult pending = pass_until(label_work(0, true), [](const DpuItemResult& x) {
    return x.message.find("phase DPU Cluster Config") != std::string::npos;
  });
  EXPECT_TRUE(has(pending, "PENDING", "phase DPU Cluster Config")) << pending.message;
  // Hold the first hop (a ClusterMetadataConflict on another DPUDevice stops the whole DPUSet),
  // so that the DPU object keeps the key for as long as the test needs, whatever the timing.
  patch_device(1, R"({"spec":{"cluster":{"nodeLabels":{"zone":"b"}}}})");
  sim_->ctl("POST", "/dpuset", json{{"nodeLabels", {{"zone", "a"}}}});
  ASSERT_TRUE(simtest::wait_until(
      [] {
        return sim_->ctl("GET", "/dpuset").j()["conditions"][0].value("reason", "") ==
               "ClusterMetadataConflict";
      },
      3000));
  // detach now: the DPUDevice loses the key, the DPU object still has it
  DpuItemResult r = pass(label_work(0, false));
  Held h = held(0);
  ASSERT_FALSE(h.device);
  ASSERT_TRUE(h.dpu) << "the scenario needs the key on the DPU object";
  EXPECT_TRUE(has(r, "TERMINATING", "label still on DPU " + node(0))) << r.message;
  // DPF carries the stale key to the Node (and a pod starts there) after the detach
  bool node_got_it = false;
  simtest::wait_until(
      [&] {
        r = pass(label_work(0, false));
        EXPECT_EQ(r.state, "TERMINATING") << r.message;
        node_got_it = held(0).node;
        return node_got_it;
      },
      10000);
  ASSERT_TRUE(node_got_it);
  EXPECT_TRUE(simtest::wait_until([] { return held(0).pods > 0; }, 5000));
  r = pass(label_work(0, false));
  EXPECT_TRUE(has(r, "TERMINATING", "label still on the Node")) << r.message;
  // the conflict resolved, the key leaves hop by hop
  patch_device(1, R"({"spec":{"cluster":{"nodeLabels":{"zone":null}}}})");
  int passes = 0;
  simtest::wait_until(
      [&] {
        r = pass(label_work(0, false));
        ++passes;
        Held now = held(0);
        if (r.state == "TERMINATED") {
          // absence, once observed, is final: nothing upstream can bring the key back
          EXPECT_FALSE(now.device || now.dpu || now.node || now.pods > 0)
              << "TERMINATED while something remains: " << r.message;
          return true;
        }
        EXPECT_EQ(r.state, "TERMINATING") << r.message;
        return false;
      },
      20000);
  EXPECT_EQ(r.state, "TERMINATED") << r.message;
  EXPECT_GT(passes, 1);
}

// The DPUSet's ClusterMetadataConflict stops the DPUDevice -> DPU hop: PENDING names the hop.
TEST_F(LabelPathTest, AClusterMetadataConflictHoldsTheFirstHop) {
  sim_->ctl("POST", "/dpuset", json{{"nodeLabels", {{"zone", "a"}}}});
  patch_device(1, R"({"spec":{"cluster":{"nodeLabels":{"zone":"b"}}}})");
  pass(label_work(0, true));
  // the conflict is on another DPUDevice, yet this DPU's hop waits too
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  DpuItemResult r = pass(label_work(0, true));
  EXPECT_TRUE(has(r, "PENDING", "waiting for DPF to copy the label to the DPU object"))
      << r.message;
  EXPECT_FALSE(held(0).dpu);
  // resolved: it goes on
  patch_device(1, R"({"spec":{"cluster":{"nodeLabels":{"zone":null}}}})");
  r = pass_until(label_work(0, true), [](const DpuItemResult& x) { return x.state == "RUNNING"; });
  EXPECT_EQ(r.state, "RUNNING") << r.message;
}

// applyOnLabelChange: the DPU goes through Node Effect (the host's drain or taint) before the
// label reaches the Node; PENDING says so.
TEST_F(LabelPathTest, NodeEffectIsNamedWhileItRuns) {
  sim_->ctl("POST", "/delays", json{{"node_effect_ms", 2000}});
  sim_->ctl("POST", "/dpuset", json{{"applyOnLabelChange", true}});
  DpuItemResult r = pass_until(label_work(0, true), [](const DpuItemResult& x) {
    return x.message.find("phase Node Effect") != std::string::npos;
  });
  EXPECT_TRUE(
      has(r, "PENDING",
          "waiting for DPF to copy the label to the Node: DPU " + node(0) + ": phase Node Effect"))
      << r.message;
  r = pass_until(label_work(0, true), [](const DpuItemResult& x) { return x.state == "RUNNING"; });
  EXPECT_EQ(r.state, "RUNNING") << r.message;
}

// A Node whose kubelet reports NotReady: DPF holds the DPU (Ready=False NodeNotReady) and the
// label does not reach the Node; PENDING names the DPU's condition and the Node's.
TEST_F(LabelPathTest, ANotReadyNodeHoldsTheSecondHop) {
  json status = sim_->d("GET", "/api/v1/nodes/" + node(0)).j()["status"];
  for (auto& c : status["conditions"])
    if (c["type"] == "Ready") {
      c["status"] = "False";
      c["reason"] = "KubeletNotReady";
      c["message"] = "container runtime network not ready";
    }
  ASSERT_EQ(sim_->d("PATCH", "/api/v1/nodes/" + node(0) + "/status",
                    json{{"status", status}}.dump(), "application/merge-patch+json")
                .status,
            200);
  DpuItemResult r = pass_until(label_work(0, true), [](const DpuItemResult& x) {
    return x.message.find("NodeNotReady") != std::string::npos;
  });
  EXPECT_TRUE(
      has(r, "PENDING", "Ready=False NodeNotReady: DPU's Node " + node(0) + " is not Ready"))
      << r.message;
  EXPECT_NE(r.message.find("KubeletNotReady"), std::string::npos) << r.message;
  EXPECT_FALSE(held(0).node);
}

// A Node that stops reporting: RUNNING turns UNKNOWN with the Node's condition once the grace
// period is over (not after the staleness bound); a detach meanwhile is never TERMINATED, as the
// pod's deletion waits for the Node; back, it completes.
TEST_F(LabelPathTest, ANodeThatStopsReportingIsUnknownNeverTerminated) {
  sim_->ctl("POST", "/delays", json{{"node_grace_ms", 400}, {"pod_termination_ms", 200}});
  ASSERT_EQ(
      pass_until(label_work(0, true), [](const DpuItemResult& x) { return x.state == "RUNNING"; })
          .state,
      "RUNNING");
  sim_->ctl("POST", "/nodes/" + node(0) + "/not-ready", json::object());
  // The node-lifecycle controller writes the Node, then marks its pods not Ready; a pass reads
  // the Node and the pods with two requests, so one that straddles that moment sees the Node
  // still Ready and the pod not Ready (PENDING, which is true); the test waits past it.
  DpuItemResult r = pass_until(label_work(0, true), [](const DpuItemResult& x) {
    return x.state != "RUNNING" &&
           !(x.state == "PENDING" && x.message.find(" is not Ready") != std::string::npos);
  });
  EXPECT_TRUE(has(r, "UNKNOWN", "Node " + node(0) + " is Ready=Unknown since")) << r.message;
  EXPECT_NE(r.message.find("NodeStatusUnknown: Kubelet stopped posting node status."),
            std::string::npos)
      << r.message;
  // detach while the Node is silent: the pod's deletion hangs
  for (int i = 0; i < 10; ++i) {
    r = pass(label_work(0, false));
    EXPECT_NE(r.state, "TERMINATED") << r.message;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(held(0).pods, 0u);
  sim_->ctl("POST", "/nodes/" + node(0) + "/ready", json::object());
  r = pass_until(label_work(0, false),
                 [](const DpuItemResult& x) { return x.state == "TERMINATED"; });
  EXPECT_EQ(r.state, "TERMINATED") << r.message;
  Held h = held(0);
  EXPECT_FALSE(h.device || h.dpu || h.node || h.pods > 0);
}

}  // namespace
}  // namespace extsvc::reconcile
