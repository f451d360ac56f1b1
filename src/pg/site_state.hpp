// What the site's writer state looks like to every process of the server (issue 25): the lease
// process (lease_worker.cpp) publishes whether this server holds the site Lease and until when
// a call may start under it, or why writes are paused; every worker's fence reads it before each
// Kubernetes call, together with its row lease (worker_batch.cpp). Also the orphan guard's
// budgets for the watcher's deletions between resyncs, and what the last resync found foreign.
#pragma once

#include "pg_prelude.hpp"

#include "shared_memory.hpp"

namespace extsvc::pg {

// Why the workers write nothing now (kNone: they may).
enum class PauseReason : uint32 {
  kNone = 0,
  kStarting,          // the lease process has not decided yet
  kDisabled,          // extsvc.enabled is off
  kSiteId,            // extsvc.site_id unset, invalid, or changed while the server runs
  kTimingSettings,    // the timing settings do not work together
  kDatabaseIdentity,  // the database runs under an identity it did not record
  kLease,             // another holder has the site Lease, or it could not be acquired
  kDeposed,           // a promoted standby of this cluster holds it (higher timeline)
};
const char* pause_reason_name(PauseReason r);  // "site_id", ... ; nullptr for kNone
constexpr PauseReason kLastPauseReason = PauseReason::kDeposed;

struct SiteShared {
  // Steady-clock (CLOCK_MONOTONIC, shared by every process of the host) nanoseconds: a call may
  // start while now + its budget <= valid_until and now <= renew_until; 0 = none may.
  pg_atomic_uint64 valid_until_ns;
  pg_atomic_uint64 renew_until_ns;
  pg_atomic_uint32 reason;  // PauseReason
  pg_atomic_uint64 acquisitions;
  // Per worker slot: the latest moment a call its fence let through can end. The lease process
  // waits for these before it releases the Lease at shutdown.
  pg_atomic_uint64 write_until_ns[kMaxWorkers];
  // The orphan guard between resyncs: DPUService deletions and DPUs with derived label removals
  // still allowed without confirmation (set by each resync's census, spent by the watcher).
  pg_atomic_uint64 orphan_budget;
  pg_atomic_uint64 label_budget;
  pg_atomic_uint32 lease_pid;
  Latch* lease_latch;
  slock_t lock;  // guards the rest
  bool held;
  TimestampTz since;         // held: acquired at; else when the state last changed
  char site_id[64];          // the site id in force (adopted once per server start)
  char identity[320];        // this server's holderIdentity
  char holder[320];          // spec.holderIdentity as last seen
  char detail[512];          // why not writing, in words
  char settings_error[512];  // a reload refused (the previous timing settings stay)
  int64 foreign_other_site, foreign_unlabelled, foreign_keys;  // the last census
  bool census_done;
};

SiteShared* site_shared();  // null unless preloaded
void request_site_memory();
void attach_site_memory();

// The fence's site half (any worker): true when a call whose budget is budget_ns may start under
// the site Lease now. permit also records (for slot) that such a call may run until now + budget
// before it answers, so that a release waits for it.
bool site_writes_allowed(int64 budget_ns);
bool site_write_permit(int slot, int64 budget_ns);
// Steady-clock now in nanoseconds (the clock of the fields above).
int64 site_now_ns();

// The site id in force (empty until the lease process adopted one), copied into buf.
void site_id_in_force(char* buf, size_t size);
void site_identity(char* buf, size_t size);

// Spends one unit of a budget; false (nothing spent) when none is left.
bool site_take_budget(pg_atomic_uint64* budget);

}  // namespace extsvc::pg
