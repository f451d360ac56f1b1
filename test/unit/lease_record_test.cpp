// The site Lease's records and decisions (issue 25): client-go's rules plus the timeline rule.
#include "core/lease_record.hpp"

#include <gtest/gtest.h>

namespace extsvc::core {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

HolderIdentity id(uint64_t sys, uint32_t tl, std::string started = "2026-01-05T10:00:00.000001Z") {
  HolderIdentity h;
  h.system_identifier = sys;
  h.timeline = tl;
  h.database = "nico";
  h.started = std::move(started);
  h.host = "db-1:5432";
  return h;
}

LeaseRecord held_by(const HolderIdentity& h, const std::string& highest = "") {
  json lease = {{"metadata", {{"resourceVersion", "7"}, {"annotations", json::object()}}},
                {"spec",
                 {{"holderIdentity", h.format()},
                  {"leaseDurationSeconds", 15},
                  {"renewTime", "2026-01-05T10:00:01.000000Z"},
                  {"leaseTransitions", 3}}}};
  if (!highest.empty()) lease["metadata"]["annotations"]["nico/highest-timeline"] = highest;
  return LeaseRecord::from_json(lease);
}

TEST(HolderIdentity, FormatAndParse) {
  HolderIdentity h = id(7301234567890123456ull, 2);
  h.database = "odd/name/db";
  const std::string s = h.format();
  EXPECT_EQ(s, "7301234567890123456.2/odd/name/db/2026-01-05T10:00:00.000001Z/db-1:5432");
  const auto p = HolderIdentity::parse(s);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->system_identifier, 7301234567890123456ull);
  EXPECT_EQ(p->timeline, 2u);
  EXPECT_EQ(p->database, "odd/name/db");
  EXPECT_EQ(p->started, "2026-01-05T10:00:00.000001Z");
  EXPECT_EQ(p->host, "db-1:5432");
  EXPECT_FALSE(HolderIdentity::parse(""));
  EXPECT_FALSE(HolderIdentity::parse("some-controller-pod-abc"));
  EXPECT_FALSE(HolderIdentity::parse("x.1/db/start/host"));
  EXPECT_FALSE(HolderIdentity::parse("1.1/db"));
}

TEST(LeaseDecision, ClientGoRules) {
  const auto me = id(100, 1);
  const auto other_cluster = id(200, 5);
  // our own identity (a restarted worker of the same server): renew at once
  EXPECT_EQ(decide(held_by(me), me, false), LeaseAction::kRenew);
  // free: acquire
  LeaseRecord free = held_by(me);
  free.holder = "";
  EXPECT_EQ(decide(free, me, false), LeaseAction::kAcquire);
  // another cluster (a restored copy): wait, unless it stopped renewing
  EXPECT_EQ(decide(held_by(other_cluster), me, false), LeaseAction::kWait);
  EXPECT_EQ(decide(held_by(other_cluster), me, true), LeaseAction::kAcquire);
  // the same cluster and timeline, another server start (a physical copy): waits as well
  EXPECT_EQ(decide(held_by(id(100, 1, "2026-02-01T00:00:00.000000Z")), me, false),
            LeaseAction::kWait);
  // a holder that is not ours at all (another tool's identity): client-go's rules
  LeaseRecord foreign = held_by(me);
  foreign.holder = "some-pod";
  EXPECT_EQ(decide(foreign, me, false), LeaseAction::kWait);
  EXPECT_EQ(decide(foreign, me, true), LeaseAction::kAcquire);
}

TEST(LeaseDecision, TimelinesOfOneCluster) {
  const auto old_primary = id(100, 1);
  const auto promoted = id(100, 2, "2026-01-05T11:00:00.000000Z");
  // a promoted standby takes the Lease from its old primary at once, expired or not
  EXPECT_EQ(decide(held_by(old_primary), promoted, false), LeaseAction::kPreempt);
  // the old primary sees the higher timeline and never takes it back, even once expired
  EXPECT_EQ(decide(held_by(promoted), old_primary, false), LeaseAction::kDeposed);
  EXPECT_EQ(decide(held_by(promoted), old_primary, true), LeaseAction::kDeposed);
  // ... nor after a release (holderIdentity empty), which keeps the highest timeline
  LeaseRecord released = held_by(promoted, "100.2");
  released.holder = "";
  EXPECT_EQ(decide(released, old_primary, true), LeaseAction::kDeposed);
  // another cluster's highest timeline does not depose us
  LeaseRecord other = held_by(id(200, 9), "200.9");
  other.holder = "";
  EXPECT_EQ(decide(other, old_primary, false), LeaseAction::kAcquire);
}

TEST(LeaseObject, MicroTimeRoundTrips) {
  const auto t = system_clock::time_point(std::chrono::microseconds(1767607200123456LL));
  EXPECT_EQ(parse_micro_time(micro_time(t)), t);
  EXPECT_EQ(parse_micro_time("2026-01-05T10:00:00Z"),
            system_clock::time_point(std::chrono::seconds(1767607200)));
  EXPECT_EQ(parse_micro_time("2026-01-05T10:00:00.5Z"),
            system_clock::time_point(std::chrono::microseconds(1767607200500000LL)));
  for (const char* bad : {"", "2026-01-05", "2026-01-05T10:00:00", "2026-13-05T10:00:00Z",
                          "2026-01-05T10:00:00.Z", "2026-01-05T10:00:00.12x456Z", "tomorrow"})
    EXPECT_EQ(parse_micro_time(bad), std::nullopt) << bad;
}

TEST(LeaseObject, AcquireRenewRelease) {
  const auto me = id(100, 2);
  const auto t = system_clock::time_point(std::chrono::microseconds(1767607200123456LL));
  EXPECT_EQ(micro_time(t), "2026-01-05T10:00:00.123456Z");
  // created
  json created = lease_for(std::nullopt, "ns", "nico-extsvc-a", "a", me, 15, true, t);
  EXPECT_EQ(created["apiVersion"], "coordination.k8s.io/v1");
  EXPECT_EQ(created["spec"]["holderIdentity"], me.format());
  EXPECT_EQ(created["spec"]["leaseTransitions"], 0);
  EXPECT_EQ(created["spec"]["acquireTime"], created["spec"]["renewTime"]);
  EXPECT_FALSE(created["metadata"].contains("resourceVersion"));
  EXPECT_EQ(created["metadata"]["labels"]["nico/site"], "a");
  EXPECT_EQ(created["metadata"]["annotations"]["nico/timeline"], "2");
  EXPECT_EQ(created["metadata"]["annotations"]["nico/highest-timeline"], "100.2");
  // taken from another holder: the precondition, transitions + 1, a new acquireTime; the
  // highest timeline of our system identifier is kept when higher (it cannot be lower here)
  LeaseRecord observed = held_by(id(100, 1), "100.1");
  json taken = lease_for(observed, "ns", "nico-extsvc-a", "a", me, 15, true, t);
  EXPECT_EQ(taken["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(taken["spec"]["leaseTransitions"], 4);
  EXPECT_EQ(taken["metadata"]["annotations"]["nico/highest-timeline"], "100.2");
  // renewed: acquireTime and transitions kept
  LeaseRecord mine = LeaseRecord::from_json(taken);
  mine.resource_version = "8";
  const auto later = t + std::chrono::seconds(2);
  json renewed = lease_for(mine, "ns", "nico-extsvc-a", "a", me, 15, false, later);
  EXPECT_EQ(renewed["spec"]["acquireTime"], taken["spec"]["acquireTime"]);
  EXPECT_EQ(renewed["spec"]["renewTime"], micro_time(later));
  EXPECT_EQ(renewed["spec"]["leaseTransitions"], 4);
  EXPECT_EQ(renewed["metadata"]["resourceVersion"], "8");
  // released: free for anyone, but the highest timeline stays
  json released = released_lease(LeaseRecord::from_json(renewed), later);
  EXPECT_EQ(released["spec"]["holderIdentity"], "");
  EXPECT_EQ(released["spec"]["leaseDurationSeconds"], 1);
  EXPECT_FALSE(released["metadata"]["annotations"].contains("nico/timeline"));
  EXPECT_EQ(released["metadata"]["annotations"]["nico/highest-timeline"], "100.2");
  EXPECT_EQ(decide(LeaseRecord::from_json(released), id(100, 1), false), LeaseAction::kDeposed);
  EXPECT_EQ(decide(LeaseRecord::from_json(released), id(300, 1), false), LeaseAction::kAcquire);
}

}  // namespace
}  // namespace extsvc::core
