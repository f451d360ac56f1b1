// Shared memory of nico_extsvc: the workers' latches and counters, and the
// wake-at-commit mechanism that lets intent reach the API in milliseconds.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

constexpr int kMaxWorkers = 16;

struct WorkerSlot {
  pg_atomic_uint32 pid;  // 0 when the slot is free
  Latch* latch;          // the worker's own process latch while running
  pg_atomic_uint64 iterations;
  pg_atomic_uint64 claimed;
  pg_atomic_uint64 completed;
  pg_atomic_uint64 stale;
  pg_atomic_uint64 http_requests;
  pg_atomic_uint64 http_errors;
  pg_atomic_uint64 last_activity_us;  // GetCurrentTimestamp() of the last loop
  pg_atomic_uint64 wake_seen_us;      // SharedState::wake_set_us when that loop began
  pg_atomic_uint64 fenced;            // passes stopped by the lease fence before a call
  pg_atomic_uint64 renewals;          // lease renewals (one UPDATE each)
  pg_atomic_uint64 orphans_deleted;   // DPUServices deleted by the resync's cleanup
  pg_atomic_uint64 dpus_rederived;    // DPUs marked for label re-derivation by the resync
  pg_atomic_uint64 leases_released;   // leases of this slot's previous process freed at start
  pg_atomic_uint64 watch_dpu_wakes;   // DPU rows made due by watch events (the watcher)
  pg_atomic_uint64 handed_over;       // rows taken from the hand-over at commit (hand_over.hpp)
  // What the worker is doing, as operators read it (extsvc.worker_status(), issue 28): a
  // WorkerState, and under text_lock the words that go with it and the last error it met.
  pg_atomic_uint32 state;
  slock_t text_lock;
  char state_reason[256];
  char config_error[256];  // the cluster settings' error ("" when they are usable)
  char last_error[256];
  TimestampTz last_error_at;  // 0 = none since shared memory was initialised
};

// The states of extsvc.worker_status().state (worker_state_name gives the SQL word).
enum class WorkerState : uint32 {
  kStarting = 0,  // never published (the slot's process has not run an iteration)
  kWorking,
  kDisabled,
  kUnconfigured,
  kConfigError,
  kStandby,
  kVersionMismatch,
  kPaused,
  kWaitingForLease,
};
constexpr int kWorkerStates = 9;
const char* worker_state_name(WorkerState s);

// One informer of the watcher as operators see it (extsvc.watch_status()),
// written by the watcher under informers_lock, counters since it started.
constexpr int kMaxInformers = 8;
struct InformerSlot {
  char resource[32];
  char cluster[16];
  bool synced;
  bool current;
  int64 objects;
  int64 lists;
  int64 watches;
  int64 events;
  int64 bookmarks;
  int64 expired;
  int64 errors;
  TimestampTz current_at;  // 0 = never
  char last_error[256];
};

struct SharedState {
  pg_atomic_uint32 wake_pending;  // 1 while a wake is requested and not yet seen
  pg_atomic_uint32 resync_requested;
  pg_atomic_uint64 wakes_requested;
  // when the last wake at commit set the latches (PostgreSQL microseconds): bench/commit_burst.py
  // splits a burst's head into the committing backend's part and the woken worker's
  pg_atomic_uint64 wake_set_us;
  WorkerSlot slots[kMaxWorkers];
  slock_t informers_lock;
  int32 informer_count;  // 0 when no watcher runs
  int32 watcher_pid;
  InformerSlot informers[kMaxInformers];
  // issue 23, part 5: the DPF API the workers detected (core::DpfApiLevel::bits(); 0: not yet)
  pg_atomic_uint32 dpf_api;
  // When this block was initialised (server start or crash restart: a crash loop shows as this
  // time moving, issue 28) and when the running watcher started (the age of an informer that
  // never was current).
  TimestampTz initialized_at;
  TimestampTz watcher_started_at;
  // The last HTTP answer each cluster gave (0: management, 1: dpu; code 0: no response) and
  // when, and when it last answered 2xx (TimestampTz; 0 = never): "reachable as last seen".
  pg_atomic_uint32 cluster_last_code[2];
  pg_atomic_uint64 cluster_last_at[2];
  pg_atomic_uint64 cluster_last_ok_at[2];
  // The clock skew of each cluster's API server as last measured from the Date header of a
  // response (issue 28, part 3; core::clock_skew_seconds): its clock minus ours in milliseconds,
  // signed (an int64 stored as its bits), and when (TimestampTz; 0 = never measured).
  pg_atomic_uint64 cluster_skew_ms[2];
  pg_atomic_uint64 cluster_skew_at[2];
};

// Publishes slot's state and reason (the worker, once per iteration).
void publish_worker_state(WorkerSlot* slot, WorkerState state, const char* reason,
                          const char* config_error);
// Records the last error the worker met (its WARNINGs), with the time.
void note_worker_error(WorkerSlot* slot, const char* message);

// NULL unless the library was preloaded (shared memory exists only then).
SharedState* shared_state();

void request_shared_memory();  // shmem_request_hook
void attach_shared_memory();   // shmem_startup_hook

// Registers (once per transaction) a callback that sets every worker's latch
// when the current transaction commits. A no-op without shared memory.
void wake_workers_at_commit();
// Sets every worker's latch now.
void wake_workers_now();

}  // namespace extsvc::pg
