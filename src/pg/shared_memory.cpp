#include "pg_prelude.hpp"

#include "shared_memory.hpp"

#include "hand_over.hpp"

namespace extsvc::pg {

namespace {

SharedState* g_shared = nullptr;
bool g_callback_registered = false;  // once per backend
bool g_wake_requested = false;       // by the current transaction

void at_commit(XactEvent event, void*) {
  if (!g_wake_requested) return;
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
      // Many concurrent commits collapse into one wake: only the transition
      // 0 -> 1 sets the latches; a worker resets it when it starts a pass.
      g_wake_requested = false;
      if (g_shared != nullptr) {
        uint32 expected = 0;
        pg_atomic_fetch_add_u64(&g_shared->wakes_requested, 1);
        if (pg_atomic_compare_exchange_u32(&g_shared->wake_pending, &expected, 1)) {
          pg_atomic_write_u64(&g_shared->wake_set_us, static_cast<uint64>(GetCurrentTimestamp()));
          wake_workers_now();
        }
      }
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      // Nothing to do after an abort; a prepared transaction's work is found
      // by the periodic scan.
      g_wake_requested = false;
      break;
    default:
      break;
  }
}

}  // namespace

SharedState* shared_state() {
  return g_shared;
}

void request_shared_memory() {
  RequestAddinShmemSpace(MAXALIGN(sizeof(SharedState)));
  RequestAddinShmemSpace(hand_over_shmem_size());
}

void attach_shared_memory() {
  bool found = false;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  g_shared = static_cast<SharedState*>(ShmemInitStruct("nico_extsvc", sizeof(SharedState), &found));
  if (!found) {
    pg_atomic_init_u32(&g_shared->wake_pending, 0);
    pg_atomic_init_u32(&g_shared->resync_requested, 0);
    pg_atomic_init_u64(&g_shared->wakes_requested, 0);
    pg_atomic_init_u64(&g_shared->wake_set_us, 0);
    pg_atomic_init_u32(&g_shared->dpf_api, 0);
    SpinLockInit(&g_shared->informers_lock);
    g_shared->informer_count = 0;
    g_shared->watcher_pid = 0;
    memset(g_shared->informers, 0, sizeof g_shared->informers);
    for (auto& s : g_shared->slots) {
      pg_atomic_init_u32(&s.pid, 0);
      s.latch = nullptr;
      pg_atomic_init_u64(&s.iterations, 0);
      pg_atomic_init_u64(&s.claimed, 0);
      pg_atomic_init_u64(&s.completed, 0);
      pg_atomic_init_u64(&s.stale, 0);
      pg_atomic_init_u64(&s.http_requests, 0);
      pg_atomic_init_u64(&s.http_errors, 0);
      pg_atomic_init_u64(&s.last_activity_us, 0);
      pg_atomic_init_u64(&s.wake_seen_us, 0);
      pg_atomic_init_u64(&s.fenced, 0);
      pg_atomic_init_u64(&s.renewals, 0);
      pg_atomic_init_u64(&s.orphans_deleted, 0);
      pg_atomic_init_u64(&s.watch_dpu_wakes, 0);
      pg_atomic_init_u64(&s.dpus_rederived, 0);
      pg_atomic_init_u64(&s.leases_released, 0);
      pg_atomic_init_u64(&s.handed_over, 0);
      pg_atomic_init_u32(&s.state, static_cast<uint32>(WorkerState::kStarting));
      SpinLockInit(&s.text_lock);
      s.state_reason[0] = s.config_error[0] = s.last_error[0] = '\0';
      s.last_error_at = 0;
    }
    g_shared->initialized_at = GetCurrentTimestamp();
    g_shared->watcher_started_at = 0;
    for (int c = 0; c < 2; ++c) {
      pg_atomic_init_u32(&g_shared->cluster_last_code[c], 0);
      pg_atomic_init_u64(&g_shared->cluster_last_at[c], 0);
      pg_atomic_init_u64(&g_shared->cluster_last_ok_at[c], 0);
      pg_atomic_init_u64(&g_shared->cluster_skew_ms[c], 0);
      pg_atomic_init_u64(&g_shared->cluster_skew_at[c], 0);
    }
  }
  hand_over_attach_shmem();
  LWLockRelease(AddinShmemInitLock);
}

const char* worker_state_name(WorkerState s) {
  switch (s) {
    case WorkerState::kStarting:
      return "starting";
    case WorkerState::kWorking:
      return "working";
    case WorkerState::kDisabled:
      return "disabled";
    case WorkerState::kUnconfigured:
      return "unconfigured";
    case WorkerState::kConfigError:
      return "config_error";
    case WorkerState::kStandby:
      return "standby";
    case WorkerState::kVersionMismatch:
      return "version_mismatch";
    case WorkerState::kPaused:
      return "paused";
    case WorkerState::kWaitingForLease:
      return "waiting_for_lease";
  }
  return "starting";
}

void publish_worker_state(WorkerSlot* slot, WorkerState state, const char* reason,
                          const char* config_error) {
  SpinLockAcquire(&slot->text_lock);
  strlcpy(slot->state_reason, reason != nullptr ? reason : "", sizeof slot->state_reason);
  strlcpy(slot->config_error, config_error != nullptr ? config_error : "",
          sizeof slot->config_error);
  SpinLockRelease(&slot->text_lock);
  pg_atomic_write_u32(&slot->state, static_cast<uint32>(state));
}

void note_worker_error(WorkerSlot* slot, const char* message) {
  if (slot == nullptr || message == nullptr) return;
  const TimestampTz now = GetCurrentTimestamp();
  SpinLockAcquire(&slot->text_lock);
  strlcpy(slot->last_error, message, sizeof slot->last_error);
  slot->last_error_at = now;
  SpinLockRelease(&slot->text_lock);
}

void wake_workers_at_commit() {
  if (g_shared == nullptr) return;
  if (!g_callback_registered) {
    RegisterXactCallback(at_commit, nullptr);
    g_callback_registered = true;
  }
  g_wake_requested = true;
}

void wake_workers_now() {
  if (g_shared == nullptr) return;
  for (auto& s : g_shared->slots) {
    Latch* latch = s.latch;  // read once: a worker may be exiting
    if (pg_atomic_read_u32(&s.pid) != 0 && latch != nullptr) SetLatch(latch);
  }
}

}  // namespace extsvc::pg
