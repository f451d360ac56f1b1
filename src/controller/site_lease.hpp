// The site's Lease over the management cluster's API (issue 25): client-go's leader election
// (tryAcquireOrRenew: GET, decide, one write with the resourceVersion read; acquire when free or
// expired by our own clock, renew, release) with the timeline rule of core/lease_record.hpp. One
// step() per retry period; the caller publishes what it concluded to every worker. Nothing here
// knows PostgreSQL.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/lease_record.hpp"
#include "kube/client.hpp"

namespace extsvc::controller {

struct LeaseTiming {
  std::chrono::milliseconds duration{15000};        // extsvc.lease_duration
  std::chrono::milliseconds renew_deadline{10000};  // extsvc.lease_renew_deadline
  std::chrono::milliseconds retry_period{2000};     // extsvc.lease_retry_period
  std::chrono::milliseconds call_budget{12000};     // extsvc.http_timeout + extsvc.lease_margin
};

struct LeaseStatus {
  using Clock = std::chrono::steady_clock;
  bool held = false;
  bool deposed = false;  // our system identifier runs on a higher timeline elsewhere
  std::string holder;    // spec.holderIdentity as last seen ("" = free or never read)
  // held: when we acquired it; otherwise when the holder last changed in our eyes
  std::chrono::system_clock::time_point since{};
  // held only: a write may start while now + its budget <= valid_until (nobody can acquire before
  // the send time of our last successful write plus leaseDurationSeconds) and now <= renew_until
  // (we stop leading when no renewal succeeded for the renew deadline)
  Clock::time_point valid_until{}, renew_until{};
  // held only: no write before this. Taken from a deposed holder (a lower timeline), the Lease
  // is ours at once, but that holder learns it only at its next renewal and may start a call
  // until its renew deadline, each ending within a call budget; two writers at once would undo
  // each other's patches, so ours wait that out (then resync and repair what it wrote)
  Clock::time_point writes_from{};
  std::string why;  // not held: who holds it, or what failed
  core::LeaseAction action = core::LeaseAction::kWait;
  int transitions = 0;
};

class SiteLease {
 public:
  using Clock = std::chrono::steady_clock;

  SiteLease(kube::Client& api, std::string ns, std::string site_id, core::HolderIdentity me,
            LeaseTiming timing);

  // One round: GET the Lease (create it when missing), decide, write at most once.
  const LeaseStatus& step();
  // Gives our Lease up (holderIdentity ""), so the next candidate need not wait for expiry;
  // true when nothing was held or the release was written.
  bool release();
  // Stops holding without a call (the database's identity changed, the worker is disabled).
  void drop(const std::string& why);

  // The Lease as the watch delivered it (lease_watch.hpp): a holder learns of a takeover when it
  // happens, not at its next renewal (client-go's leader election only reads at renewals, which
  // leaves a deposed holder writing for up to the retry period).
  enum class Seen {
    kNothing,  // our own renewal, or nothing that changes what we do
    kLost,     // we held it and someone else holds it now: stop writing at once
    kFree,     // we do not hold it and it was released: try at once
  };
  Seen seen(const nlohmann::json& lease);

  const LeaseStatus& status() const { return status_; }
  const std::string& name() const { return name_; }
  const core::HolderIdentity& me() const { return me_; }

 private:
  void observe(const core::LeaseRecord& r, Clock::time_point now);
  void lose(const std::string& why);
  void failed(const kube::Error& e, const std::string& what, Clock::time_point now);
  void won(const nlohmann::json& lease, Clock::time_point sent, bool acquired);

  kube::Client& api_;
  std::string ns_, site_id_, name_, path_;
  core::HolderIdentity me_;
  std::string me_text_;
  LeaseTiming timing_;
  LeaseStatus status_;
  std::optional<core::LeaseRecord> observed_;
  // The watch (seen()): the resourceVersion our last write returned, and whether the watch has
  // delivered it yet.
  std::string written_rv_;
  bool echoed_ = false;
  Clock::time_point observed_at_{};
};

}  // namespace extsvc::controller
