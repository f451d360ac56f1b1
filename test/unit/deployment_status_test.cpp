#include "core/deployment_status.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

using S = DeploymentState;

TEST(DeploymentState, NamesRoundTrip) {
  for (S s : {S::kPending, S::kRunning, S::kTerminating, S::kTerminated, S::kError, S::kUnknown})
    EXPECT_EQ(deployment_state_from_string(to_string(s)), s);
  EXPECT_EQ(to_string(S::kPending), "PENDING");
  EXPECT_EQ(to_string(S::kRunning), "RUNNING");
  EXPECT_EQ(to_string(S::kTerminating), "TERMINATING");
  EXPECT_EQ(to_string(S::kTerminated), "TERMINATED");
  EXPECT_EQ(to_string(S::kError), "ERROR");
  EXPECT_EQ(to_string(S::kUnknown), "UNKNOWN");
  EXPECT_FALSE(deployment_state_from_string("running"));
  EXPECT_FALSE(deployment_state_from_string("FAILED"));
  EXPECT_FALSE(deployment_state_from_string(""));
}

// wanted, observed, device label, node label, ready pods of the applied revision, pods on the
// node (terminating included), then optionally: error, DPU gone, DPU object label, no DPU
// object, Node unreachable
DpuObservation obs(bool wanted, bool observed, bool device, bool node, int ready, int pods,
                   bool error = false, bool gone = false, bool dpu = false, bool no_dpu = false,
                   bool unreachable = false) {
  DpuObservation o{};
  o.wanted = wanted;
  o.observed = observed;
  o.device_has_label = device;
  o.node_has_label = node;
  o.ready_pods_applied_revision = ready;
  o.pods_on_node = pods;
  o.error = error;
  o.dpu_gone = gone;
  o.dpu_has_label = dpu;
  o.dpu_missing = no_dpu;
  o.node_unreachable = unreachable;
  return o;
}

TEST(DeploymentState, DeriveTable) {
  struct Row {
    DpuObservation obs;
    S out;
    const char* why;
  };
  const Row rows[] = {
      {obs(true, true, true, true, 1, 1, true), S::kError, "error wins over running"},
      {obs(false, false, false, false, 0, 0, true), S::kError, "error wins over unobserved"},
      {obs(true, false, true, true, 1, 1, false), S::kUnknown, "unobserved is never running"},
      {obs(false, false, false, false, 0, 0, false), S::kUnknown, "unobserved is never terminated"},
      {obs(true, true, true, true, 1, 1, false, false, true), S::kRunning, "all observed"},
      {obs(true, true, true, true, 3, 3, false, false, true), S::kRunning, "several ready pods"},
      {obs(true, true, true, true, 1, 1, false, false, false, true), S::kRunning,
       "no DPU object: nothing can take the Node's label away"},
      {obs(true, true, true, true, 1, 1), S::kPending, "the DPU object lost the key: it will go"},
      {obs(true, true, false, true, 1, 1, false, false, true), S::kPending, "device label missing"},
      {obs(true, true, true, false, 1, 1, false, false, true), S::kPending, "node label missing"},
      {obs(true, true, true, true, 0, 1, false, false, true), S::kPending,
       "no Ready pod of the applied revision"},
      {obs(true, true, false, false, 0, 0), S::kPending, "nothing yet"},
      {obs(false, true, false, false, 0, 0), S::kTerminated, "all gone"},
      {obs(false, true, true, false, 0, 0), S::kTerminating, "device label remains"},
      {obs(false, true, false, true, 0, 0), S::kTerminating, "node label remains"},
      {obs(false, true, false, false, 0, 0, false, false, true), S::kTerminating,
       "the key is still on the DPU object: it can still reach the Node"},
      {obs(false, true, false, false, 0, 1), S::kTerminating, "pod remains"},
      {obs(false, true, true, true, 1, 1), S::kTerminating, "still running"},
      {obs(false, false, false, false, 0, 0, false, true), S::kTerminated, "DPU gone, not wanted"},
      {obs(true, false, false, false, 0, 0, false, true), S::kError, "DPU gone but wanted"},
      {obs(false, true, false, false, 0, 2), S::kTerminating, "terminating pods count"},
      {obs(true, true, true, true, 1, 1, false, false, true, false, true), S::kUnknown,
       "a Node that stopped reporting is never RUNNING"},
      {obs(true, true, true, true, 0, 1, false, false, true, false, true), S::kUnknown,
       "nor PENDING for its pods' guessed readiness"},
      {obs(false, true, false, false, 0, 0, false, false, false, false, true), S::kUnknown,
       "nor TERMINATED"},
      {obs(false, true, false, true, 0, 0, false, false, false, false, true), S::kTerminating,
       "a remnant is still a remnant"},
  };
  for (const auto& r : rows) EXPECT_EQ(derive_deployment_state(r.obs), r.out) << r.why;
}

}  // namespace
}  // namespace extsvc::core
