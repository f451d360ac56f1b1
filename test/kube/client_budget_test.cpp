// The budget of a call (issue 24): one value carries the deadline, the lease fence, the shutdown
// check and the wait; the client's rate limiter waits through it, so a stop ends a throttled burst
// at once instead of after the bucket refills.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "client_test_support.hpp"
#include "kube/budget.hpp"
#include "kube/client.hpp"

namespace extsvc::kube {
namespace {

using namespace std::chrono_literals;
using test::http_config;
using test::TestServer;

TEST(KubeBudget, TheDefaultIsUnboundedUnfencedAndNeverStops) {
  const Budget b;
  EXPECT_FALSE(b.bounded());
  EXPECT_TRUE(b.may_write());
  EXPECT_FALSE(b.stop());
}

TEST(KubeBudget, APastDeadlineClosesTheFence) {
  const auto now = Budget::Clock::now();
  EXPECT_TRUE(Budget().with_deadline(now + 1h).may_write());
  EXPECT_FALSE(Budget().with_deadline(now - 1ms).may_write());
  EXPECT_TRUE(Budget().with_deadline(now).bounded());
  // the deadline and the fence must both allow the call
  EXPECT_FALSE(Budget().with_deadline(now + 1h).with_fence([] { return false; }).may_write());
}

TEST(KubeBudget, ThrowingChecksAnswerNoAndAThrowingWaitStillWaits) {
  auto thrower = []() -> bool { throw std::runtime_error("unreadable"); };
  EXPECT_FALSE(Budget().with_fence(thrower).may_write());
  EXPECT_FALSE(Budget().with_stop(thrower).stop());
  const Budget b = Budget().with_wait([](Budget::Clock::duration) { throw std::bad_alloc(); });
  const auto t0 = Budget::Clock::now();
  b.wait(30ms);
  EXPECT_GE(Budget::Clock::now() - t0, 30ms);
}

// A stand-in for the process latch: a wait that a "signal" ends at once.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  std::atomic<int> waits{0};
  void wait(Budget::Clock::duration d) {
    ++waits;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, d, [&] { return set; });
  }
  void signal() {
    {
      std::lock_guard<std::mutex> lock(mu);
      set = true;
    }
    cv.notify_all();
  }
};

TEST(KubeBudget, AStopEndsAThrottledBurstThroughTheBudgetsWait) {
  TestServer s;
  std::atomic<int> patches{0};
  s.srv().Patch("/x", [&](const httplib::Request&, httplib::Response& res) {
    ++patches;
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.qps = 1;  // ten writes would take nine seconds
  cfg.burst = 1;
  Client c(cfg);
  Latch latch;
  std::atomic<bool> terminated{false};
  c.budget = Budget()
                 .with_stop([&] { return terminated.load(); })
                 .with_wait([&](Budget::Clock::duration d) { latch.wait(d); });
  Budget::Clock::time_point stopped_at{};
  std::thread sigterm([&] {
    std::this_thread::sleep_for(300ms);
    stopped_at = Budget::Clock::now();
    terminated = true;
    latch.signal();  // what die() does: ProcDiePending, then SetLatch
  });
  int ok = 0, interrupted = 0;
  for (int i = 0; i < 10; ++i) {
    const Result r = c.merge_patch("/x", nlohmann::json{{"i", i}});
    if (r.ok())
      ++ok;
    else if (r.error().reason == "Interrupted")
      ++interrupted;
  }
  const auto ended_at = Budget::Clock::now();
  sigterm.join();
  EXPECT_EQ(ok, 1);  // the burst
  EXPECT_EQ(interrupted, 9);
  EXPECT_EQ(patches.load(), 1);
  EXPECT_LT(ended_at - stopped_at, 1s);
  // the limiter waited through the budget (slices of at most 100 ms), never in a sleep of its own
  EXPECT_GE(latch.waits.load(), 1);
  EXPECT_GT(c.stats().throttled_ms, 0);
}

TEST(KubeBudget, APassInstallsItsBudgetAndGivesTheOldOneBack) {
  Client c(ClusterConfig{});
  c.budget = Budget().with_fence([] { return true; });
  {
    const BudgetScope pass(&c, Budget().with_deadline(Budget::Clock::now() - 1ms));
    EXPECT_TRUE(c.budget.bounded());
    EXPECT_FALSE(c.budget.may_write());
  }
  EXPECT_FALSE(c.budget.bounded());
  EXPECT_TRUE(c.budget.may_write());
  const BudgetScope none(nullptr, Budget());  // a missing client is left alone
}

}  // namespace
}  // namespace extsvc::kube
