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
  pg_atomic_uint64 fenced;            // passes stopped by the lease fence before a call
  pg_atomic_uint64 renewals;          // lease renewals (one UPDATE each)
  pg_atomic_uint64 orphans_deleted;   // DPUServices deleted by the resync's cleanup
  pg_atomic_uint64 dpus_rederived;    // DPUs marked for label re-derivation by the resync
  pg_atomic_uint64 leases_released;   // leases of this slot's previous process freed at start
  pg_atomic_uint64 watch_dpu_wakes;   // DPU rows made due by watch events (the watcher)
};

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
  WorkerSlot slots[kMaxWorkers];
  slock_t informers_lock;
  int32 informer_count;  // 0 when no watcher runs
  int32 watcher_pid;
  InformerSlot informers[kMaxInformers];
  // issue 23, part 5: the DPF API the workers detected (core::DpfApiLevel::bits(); 0: not yet)
  pg_atomic_uint32 dpf_api;
};

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
