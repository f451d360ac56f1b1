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

TEST(DeploymentState, AggregateTable) {
  struct Row {
    std::vector<S> in;
    S out;
  };
  const Row rows[] = {
      {{}, S::kUnknown},
      {{S::kRunning}, S::kRunning},
      {{S::kRunning, S::kRunning}, S::kRunning},
      {{S::kTerminated, S::kTerminated}, S::kTerminated},
      {{S::kRunning, S::kError, S::kUnknown}, S::kError},
      {{S::kTerminated, S::kError}, S::kError},
      {{S::kRunning, S::kUnknown, S::kPending}, S::kUnknown},
      {{S::kTerminated, S::kUnknown}, S::kUnknown},
      {{S::kRunning, S::kPending}, S::kPending},
      {{S::kPending, S::kTerminating}, S::kPending},
      {{S::kRunning, S::kTerminating}, S::kTerminating},
      {{S::kTerminated, S::kTerminating}, S::kTerminating},
      {{S::kTerminating}, S::kTerminating},
      {{S::kRunning, S::kTerminated, S::kTerminating}, S::kTerminating},
      // Neither "running" nor "terminated" holds for every DPU.
      {{S::kRunning, S::kTerminated}, S::kUnknown},
  };
  for (const auto& r : rows) {
    std::string in;
    for (S s : r.in) in += std::string(to_string(s)) + " ";
    EXPECT_EQ(aggregate(r.in), r.out) << in;
  }
}

TEST(DeploymentState, DeriveTable) {
  struct Row {
    DpuObservation obs;
    S out;
    const char* why;
  };
  // wanted, observed, device label, node label, ready pods of the applied revision,
  // pods on the node (terminating included), error, DPU gone
  const Row rows[] = {
      {{true, true, true, true, 1, 1, true}, S::kError, "error wins over running"},
      {{false, false, false, false, 0, 0, true}, S::kError, "error wins over unobserved"},
      {{true, false, true, true, 1, 1, false}, S::kUnknown, "unobserved is never running"},
      {{false, false, false, false, 0, 0, false}, S::kUnknown, "unobserved is never terminated"},
      {{true, true, true, true, 1, 1, false}, S::kRunning, "all three observed"},
      {{true, true, true, true, 3, 3, false}, S::kRunning, "several ready pods"},
      {{true, true, false, true, 1, 1, false}, S::kPending, "device label missing"},
      {{true, true, true, false, 1, 1, false}, S::kPending, "node label missing"},
      {{true, true, true, true, 0, 1, false}, S::kPending, "no Ready pod of the applied revision"},
      {{true, true, false, false, 0, 0, false}, S::kPending, "nothing yet"},
      {{false, true, false, false, 0, 0, false}, S::kTerminated, "all gone"},
      {{false, true, true, false, 0, 0, false}, S::kTerminating, "device label remains"},
      {{false, true, false, true, 0, 0, false}, S::kTerminating, "node label remains"},
      {{false, true, false, false, 0, 1, false}, S::kTerminating, "pod remains"},
      {{false, true, true, true, 1, 1, false}, S::kTerminating, "still running"},
      {{false, false, false, false, 0, 0, false, true}, S::kTerminated, "DPU gone, not wanted"},
      {{true, false, false, false, 0, 0, false, true}, S::kError, "DPU gone but wanted"},
      {{false, true, false, false, 0, 2, false}, S::kTerminating, "terminating pods count"},
  };
  for (const auto& r : rows) EXPECT_EQ(derive_deployment_state(r.obs), r.out) << r.why;
}

}  // namespace
}  // namespace extsvc::core
