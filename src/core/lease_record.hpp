// The site's coordination.k8s.io/v1 Lease (issue 25) as data: who holds it, and what a candidate
// may do about it. The protocol is client-go's leader election (tools/leaderelection): a holder
// renews; a candidate acquires a Lease that is free (empty holderIdentity) or expired (no change
// observed for leaseDurationSeconds, by the candidate's own clock); every write carries the
// resourceVersion read, so two candidates cannot both win. One rule is added: a holder of the
// same PostgreSQL system identifier on a higher timeline (a promoted standby) takes the Lease at
// once, and a candidate on a lower timeline than the highest the Lease has seen for its system
// identifier never takes it (a deposed primary). Pure functions; the calls are
// controller/site_lease.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace extsvc::core {

inline constexpr std::string_view kLeaseApiVersion = "coordination.k8s.io/v1";
// Annotations of the holder's facts (the same as in holderIdentity, parsed), and the highest
// timeline the Lease has seen for a system identifier, which a release keeps.
inline constexpr std::string_view kAnnSystemIdentifier = "nico/system-identifier";
inline constexpr std::string_view kAnnTimeline = "nico/timeline";
inline constexpr std::string_view kAnnDatabase = "nico/database";
inline constexpr std::string_view kAnnServerStarted = "nico/server-started";
inline constexpr std::string_view kAnnHost = "nico/host";
inline constexpr std::string_view kAnnHighestTimeline = "nico/highest-timeline";
// Set by a holder that took the Lease from a deposed one (a promotion): no holder writes before
// this time, whatever happens to the taker's memory (a crash restart of its server resumes the
// Lease at once under the same identity). A MicroTime.
inline constexpr std::string_view kAnnWritesFrom = "nico/writes-from";

// Who writes: "<system_identifier>.<timeline>/<database>/<server start>/<host:port>", e.g.
// "7301234567890123456.2/nico/2026-01-05T10:00:00.123456Z/db-1:5432". The server start is the
// postmaster's (RFC 3339, UTC, microseconds): it stays the same when a worker restarts or the
// server restarts after a crash, so such a worker resumes its own Lease at once. The database
// name may hold '/', so parsing takes the first field and the last two from the ends.
struct HolderIdentity {
  uint64_t system_identifier = 0;
  uint32_t timeline = 0;
  std::string database;
  std::string started;
  std::string host;  // may be empty

  std::string format() const;
  static std::optional<HolderIdentity> parse(std::string_view text);
  bool same_system(const HolderIdentity& o) const {
    return system_identifier == o.system_identifier;
  }
};

// The fields of a Lease the protocol reads.
struct LeaseRecord {
  std::string resource_version;
  std::string holder;  // spec.holderIdentity ("" = free)
  int duration_s = 0;  // spec.leaseDurationSeconds
  std::string acquire_time, renew_time;
  int transitions = 0;
  std::optional<HolderIdentity> highest;  // the nico/highest-timeline annotation
  nlohmann::json object;                  // as read (metadata kept on the next write)

  static LeaseRecord from_json(const nlohmann::json& lease);
  // What client-go compares to tell that a holder is alive: any change of the record.
  bool same_record(const LeaseRecord& o) const;
};

enum class LeaseAction {
  kRenew,    // the Lease is ours: renew (keep acquireTime and leaseTransitions)
  kAcquire,  // free or expired: take it (a new acquireTime, leaseTransitions + 1)
  kPreempt,  // held by our system identifier on a lower timeline: take it at once
  kWait,     // another live holder
  kDeposed,  // our system identifier is on a higher timeline there: never take it
};
const char* to_string(LeaseAction a);

// expired: no change of the record was observed for its leaseDurationSeconds.
LeaseAction decide(const LeaseRecord& observed, const HolderIdentity& me, bool expired);

// MicroTime: "2006-01-02T15:04:05.000000Z".
std::string micro_time(std::chrono::system_clock::time_point t);
// Its inverse (also without the fraction); nullopt on anything else.
std::optional<std::chrono::system_clock::time_point> parse_micro_time(std::string_view text);

// The Lease to write: the object read (its metadata and annotations kept, resourceVersion as the
// precondition) or a new one, with me as holder. acquired: acquireTime now and transitions + 1
// (a new holder) or kept (a renewal).
nlohmann::json lease_for(const std::optional<LeaseRecord>& observed, std::string_view ns,
                         std::string_view name, std::string_view site_id, const HolderIdentity& me,
                         int duration_s, bool acquired, std::chrono::system_clock::time_point now);

// The release of our Lease (client-go's ReleaseOnCancel): holderIdentity "", leaseDurationSeconds
// 1, the holder's annotations removed, the highest timeline kept.
nlohmann::json released_lease(const LeaseRecord& observed,
                              std::chrono::system_clock::time_point now);

}  // namespace extsvc::core
