// The site Lease (issue 25) against dpfsim: client-go's acquire / renew / expire / release over a
// real API server with optimistic concurrency, and the timeline rule (a promoted standby takes
// the Lease at once; its old primary is deposed and never takes it back).
#include "controller/site_lease.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "controller/lease_watch.hpp"
#include "kube/client.hpp"
#include "sim_harness.h"

namespace extsvc::controller {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kLeaseNs = "dpf-operator-system";
const std::string kLeasePath = std::string("/apis/coordination.k8s.io/v1/namespaces/") + kLeaseNs +
                               "/leases/nico-extsvc-site-a";

core::HolderIdentity id(uint64_t sys, uint32_t tl, const char* started) {
  core::HolderIdentity h;
  h.system_identifier = sys;
  h.timeline = tl;
  h.database = "nico";
  h.started = started;
  h.host = "db:5432";
  return h;
}

class SiteLeaseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = simtest::SimProcess::start({"--dpus", "1"}); }
  static void TearDownTestSuite() { sim_.reset(); }
  void SetUp() override {
    sim_->reset(1, 0);
    kube::ClusterConfig cfg;
    cfg.server = sim_->mgmt;
    cfg.timeout_ms = 3000;
    client_ = std::make_unique<kube::Client>(cfg);
  }
  std::unique_ptr<SiteLease> candidate(const core::HolderIdentity& me) {
    LeaseTiming t;
    t.duration = 2000ms;
    t.renew_deadline = 1500ms;
    t.retry_period = 200ms;
    t.call_budget = 500ms;  // http_timeout + lease_margin
    return std::make_unique<SiteLease>(*client_, kLeaseNs, "site-a", me, t);
  }
  json lease() { return sim_->m("GET", kLeasePath).j(); }

  static std::unique_ptr<simtest::SimProcess> sim_;
  std::unique_ptr<kube::Client> client_;
};
std::unique_ptr<simtest::SimProcess> SiteLeaseTest::sim_;

TEST_F(SiteLeaseTest, AcquireRenewAndAnotherClusterWaitsForExpiry) {
  auto a = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  auto b = candidate(id(200, 1, "2026-01-05T10:00:00.000000Z"));  // a restored copy
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(a->step().held) << a->status().why;
  EXPECT_EQ(a->status().writes_from, SiteLease::Clock::time_point{});  // nobody to wait out
  EXPECT_EQ(lease()["spec"]["holderIdentity"], a->me().format());
  EXPECT_EQ(lease()["spec"]["leaseTransitions"], 0);
  EXPECT_GE(a->status().valid_until, t0 + 2000ms);
  EXPECT_FALSE(b->step().held);
  EXPECT_EQ(b->status().holder, a->me().format());
  // while a renews, b never gets it
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(a->step().held);
    ASSERT_FALSE(b->step().held) << "taken at round " << i;
  }
  // a stops renewing (a killed server): b takes over once the Lease is lease_duration old in its
  // own eyes, not sooner
  const auto stopped = std::chrono::steady_clock::now();
  while (!b->step().held) {
    ASSERT_LT(std::chrono::steady_clock::now() - stopped, 5s) << b->status().why;
    std::this_thread::sleep_for(100ms);
  }
  const auto took = std::chrono::steady_clock::now() - stopped;
  EXPECT_GE(took, 1800ms);
  EXPECT_EQ(lease()["spec"]["holderIdentity"], b->me().format());
  EXPECT_EQ(lease()["spec"]["leaseTransitions"], 1);
  // a comes back: it sees b's live Lease and stops
  EXPECT_FALSE(a->step().held);
  EXPECT_EQ(a->status().action, core::LeaseAction::kWait);
}

TEST_F(SiteLeaseTest, TheSameServerResumesAtOnce) {
  const auto me = id(100, 1, "2026-01-05T10:00:00.000000Z");
  auto first = candidate(me);
  ASSERT_TRUE(first->step().held);
  // a restarted worker of the same server (same identity): no wait
  auto again = candidate(me);
  ASSERT_TRUE(again->step().held) << again->status().why;
  EXPECT_EQ(again->status().action, core::LeaseAction::kRenew);
  EXPECT_EQ(lease()["spec"]["leaseTransitions"], 0);
}

TEST_F(SiteLeaseTest, PromotedStandbyTakesOverAndTheOldPrimaryIsDeposed) {
  auto primary = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  auto standby = candidate(id(100, 2, "2026-01-05T11:00:00.000000Z"));
  ASSERT_TRUE(primary->step().held);
  // promoted: takes the live Lease at once
  const auto before = SiteLease::Clock::now();
  ASSERT_TRUE(standby->step().held) << standby->status().why;
  EXPECT_EQ(standby->status().action, core::LeaseAction::kPreempt);
  // but writes only once the old primary's last possible call has ended: min(renew deadline,
  // duration - budget) + one call budget after the takeover (the old one learns of it only at
  // its next renewal)
  EXPECT_GE(standby->status().writes_from, before + 2000ms);
  EXPECT_LE(standby->status().writes_from, SiteLease::Clock::now() + 2000ms);
  EXPECT_EQ(lease()["metadata"]["annotations"]["nico/highest-timeline"], "100.2");
  // the old primary, still running, sees it at its next round and stops for good
  EXPECT_FALSE(primary->step().held);
  EXPECT_TRUE(primary->status().deposed);
  EXPECT_NE(primary->status().why.find("timeline 2"), std::string::npos) << primary->status().why;
  // even after the new primary released the Lease
  ASSERT_TRUE(standby->release());
  EXPECT_EQ(lease()["spec"]["holderIdentity"], "");
  EXPECT_FALSE(primary->step().held);
  EXPECT_TRUE(primary->status().deposed);
  // another cluster may take a released Lease at once
  auto other = candidate(id(300, 1, "2026-01-05T12:00:00.000000Z"));
  EXPECT_TRUE(other->step().held) << other->status().why;
}

TEST_F(SiteLeaseTest, AWriteBetweenReadAndUpdateLoses) {
  auto a = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  ASSERT_TRUE(a->step().held);
  // someone (kubectl) hands the Lease to another holder: a's next renewal reads it and stops
  json l = lease();
  l["spec"]["holderIdentity"] = "someone-else";
  ASSERT_EQ(sim_->m("PUT", kLeasePath, l.dump()).status, 200);
  EXPECT_FALSE(a->step().held);
  EXPECT_NE(a->status().why.find("someone-else"), std::string::npos);
  // a stale write is refused by the API server (409), never applied
  json stale = l;
  stale["spec"]["holderIdentity"] = "stale-writer";
  EXPECT_EQ(sim_->m("PUT", kLeasePath, stale.dump()).status, 409);
}

TEST_F(SiteLeaseTest, AHolderThatCannotRenewStopsAtTheRenewDeadline) {
  auto a = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  ASSERT_TRUE(a->step().held);
  const auto renewed_until = a->status().renew_until;
  sim_->ctl("POST", "/faults",
            {{"cluster", "management"},
             {"verb", "*"},
             {"path_regex", "/leases"},
             {"action", "status"},
             {"status", 503}});
  // failures within the renew deadline keep it (the fence stops writes by valid_until)
  EXPECT_TRUE(a->step().held);
  while (std::chrono::steady_clock::now() <= renewed_until) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(a->step().held);
  EXPECT_NE(a->status().why.find("lease_renew_deadline"), std::string::npos) << a->status().why;
  sim_->ctl("DELETE", "/faults");
  // once the API answers again, the Lease (still naming us) is ours again
  EXPECT_TRUE(a->step().held);
}

TEST_F(SiteLeaseTest, ACrashRestartOfTheTakerKeepsTheTakeoverWait) {
  auto primary = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  auto standby = candidate(id(100, 2, "2026-01-05T11:00:00.000000Z"));
  ASSERT_TRUE(primary->step().held);
  ASSERT_TRUE(standby->step().held);
  const auto wait_until = standby->status().writes_from;
  ASSERT_GT(wait_until, SiteLease::Clock::now() + 1500ms);
  EXPECT_FALSE(lease()["metadata"]["annotations"]["nico/writes-from"].get<std::string>().empty());
  // the promoted server crashes and restarts at once: same identity (the postmaster's start
  // survives a crash restart), no memory; it resumes its Lease and still waits
  standby.reset();
  auto restarted = candidate(id(100, 2, "2026-01-05T11:00:00.000000Z"));
  ASSERT_TRUE(restarted->step().held) << restarted->status().why;
  EXPECT_EQ(restarted->status().action, core::LeaseAction::kRenew);
  EXPECT_GE(restarted->status().writes_from, wait_until - 50ms);
  EXPECT_LE(restarted->status().writes_from, wait_until + 50ms);
  // once the wait is over a restart writes at once
  std::this_thread::sleep_for(
      std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - SiteLease::Clock::now()) +
      50ms);
  auto again = candidate(id(100, 2, "2026-01-05T11:00:00.000000Z"));
  ASSERT_TRUE(again->step().held);
  EXPECT_EQ(again->status().writes_from, SiteLease::Clock::time_point{});
}

// The watch on the Lease (lease_watch.hpp): the old primary hears of the takeover when it happens,
// without a renewal; its own renewals and the versions from before its last write are no news.
SiteLease::Seen watch_until(LeaseWatch& w, SiteLease::Seen wanted,
                            std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  SiteLease::Seen last = SiteLease::Seen::kNothing;
  while (std::chrono::steady_clock::now() < end) {
    last = w.step();
    if (last == wanted) return last;
    std::this_thread::sleep_for(5ms);
  }
  return last;
}

TEST_F(SiteLeaseTest, TheWatchTellsTheOldPrimaryOfTheTakeoverBeforeItsNextRenewal) {
  auto primary = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  auto standby = candidate(id(100, 2, "2026-01-05T11:00:00.000000Z"));
  ASSERT_TRUE(primary->step().held);
  LeaseWatch watch(*client_, *primary, kLeaseNs);
  // listed and watching; several renewals of our own come back on it as no news
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(primary->step().held);
    EXPECT_EQ(watch_until(watch, SiteLease::Seen::kLost, 100ms), SiteLease::Seen::kNothing);
    ASSERT_TRUE(primary->status().held) << primary->status().why;
  }
  EXPECT_TRUE(watch.current());
  ASSERT_TRUE(standby->step().held) << standby->status().why;
  // no primary->step() from here: only the watch can tell it
  EXPECT_EQ(watch_until(watch, SiteLease::Seen::kLost, 5000ms), SiteLease::Seen::kLost);
  EXPECT_FALSE(primary->status().held);
  EXPECT_TRUE(primary->status().deposed);
  EXPECT_EQ(primary->status().valid_until, SiteLease::Clock::time_point{});
  EXPECT_NE(primary->status().why.find("seen on the watch"), std::string::npos)
      << primary->status().why;
  // and its next round agrees
  EXPECT_FALSE(primary->step().held);
  EXPECT_TRUE(primary->status().deposed);
}

TEST_F(SiteLeaseTest, TheWatchTellsACandidateOfARelease) {
  auto a = candidate(id(100, 1, "2026-01-05T10:00:00.000000Z"));
  auto b = candidate(id(200, 1, "2026-01-05T10:00:00.000000Z"));
  ASSERT_TRUE(a->step().held);
  ASSERT_FALSE(b->step().held);
  LeaseWatch watch(*client_, *b, kLeaseNs);
  ASSERT_TRUE(a->step().held);
  EXPECT_EQ(watch_until(watch, SiteLease::Seen::kFree, 300ms), SiteLease::Seen::kNothing);
  ASSERT_TRUE(a->release());
  EXPECT_EQ(watch_until(watch, SiteLease::Seen::kFree, 5000ms), SiteLease::Seen::kFree);
  EXPECT_TRUE(b->step().held) << b->status().why;
  // what the watch delivers after b's acquisition (b's own write) is no news
  EXPECT_EQ(watch_until(watch, SiteLease::Seen::kLost, 300ms), SiteLease::Seen::kNothing);
  EXPECT_TRUE(b->status().held);
}

}  // namespace
}  // namespace extsvc::controller
