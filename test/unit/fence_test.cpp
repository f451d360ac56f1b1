// The lease fence (issue 10): a reconciler whose fence says no sends nothing.
#include <gtest/gtest.h>

#include "kube/client.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/service_reconciler.hpp"

namespace extsvc::reconcile {
namespace {

// A client that can never reach anything: any request it makes is counted.
kube::ClusterConfig nowhere() {
  kube::ClusterConfig cfg;
  cfg.server = "https://127.0.0.1:1";
  cfg.insecure_skip_verify = true;
  cfg.connect_timeout_ms = 100;
  cfg.timeout_ms = 200;
  return cfg;
}

ServiceWork work(const std::string& state) {
  ServiceWork w;
  w.service_id = "8f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b";
  w.lifecycle_state = state;
  w.dpf_service_name = "extsvc-abc";
  w.attachable_version = "1";
  w.desired_revision = 1;
  w.desired = nlohmann::json::object();
  w.budget = kube::Budget().with_fence([] { return false; });
  return w;
}

TEST(Fence, ServicePassesStopBeforeTheFirstCall) {
  kube::Client api(nowhere());
  ServiceReconciler rec(api, "ns");
  for (const char* state : {"CREATING", "UPDATING", "READY", "DELETING"}) {
    const Outcome o = rec.reconcile(work(state));
    EXPECT_EQ(o.kind, Outcome::Kind::kLost) << state;
    EXPECT_STREQ(to_string(o.kind), "lost");
    EXPECT_EQ(o.api_calls, 0) << state;
    EXPECT_NE(o.message.find("lease fence"), std::string::npos) << o.message;
  }
  EXPECT_EQ(api.stats().requests, 0u);
}

TEST(Fence, NoFenceMeansCallsAreMade) {
  kube::Client api(nowhere());
  ServiceReconciler rec(api, "ns");
  ServiceWork w = work("CREATING");
  w.budget = kube::Budget();
  const Outcome o = rec.reconcile(w);
  EXPECT_NE(o.kind, Outcome::Kind::kLost);
  EXPECT_EQ(o.api_calls, 1);
}

TEST(Fence, DpuPassStopsBeforeTheFirstCall) {
  kube::Client api(nowhere());
  DpuReconciler rec(api, &api, "ns");
  DpuWork w;
  w.device_name = "dev";
  w.node_name = "node";
  w.items.push_back(DpuItem{"attachment", "i", "s", "1", "nico/extsvc-x", "extsvc-x", 1, true});
  w.budget = kube::Budget().with_fence([] { return false; });
  const DpuOutcome o = rec.reconcile(w);
  EXPECT_TRUE(o.lost);
  EXPECT_TRUE(o.retry);
  EXPECT_TRUE(o.results.empty());
  EXPECT_EQ(o.api_calls, 0);
  EXPECT_EQ(api.stats().requests, 0u);
}

}  // namespace
}  // namespace extsvc::reconcile
