// Operator functions over the workers' shared memory: the per-slot counters
// (extsvc.worker_status) and a resync on demand (extsvc.request_resync).
#include "pg_prelude.hpp"

#include <string>

#include "core/dpf_api_level.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "site_state.hpp"
#include "shared_memory.hpp"

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_worker_status);
PG_FUNCTION_INFO_V1(nico_extsvc_request_resync);
PG_FUNCTION_INFO_V1(nico_extsvc_watch_status);
}

using namespace extsvc::pg;

// --- operator functions over shared memory ---------------------------------

static SharedState* require_shared() {
  SharedState* st = shared_state();
  if (st == nullptr)
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("nico_extsvc workers are not running"),
             errdetail("The library was not loaded through shared_preload_libraries."),
             errhint("Add nico_extsvc to shared_preload_libraries and restart the server.")));
  return st;
}

extern "C" Datum nico_extsvc_worker_status(PG_FUNCTION_ARGS) {
  SharedState* st = require_shared();
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  // the site's writer state (issue 25), the same on every row
  SiteShared* site = site_shared();
  bool held = false;
  TimestampTz since = 0;
  char holder[320] = "", detail[512] = "", settings_error[512] = "";
  PauseReason reason = PauseReason::kStarting;
  if (site != nullptr) {
    SpinLockAcquire(&site->lock);
    held = site->held;
    since = site->since;
    strlcpy(holder, site->holder, sizeof holder);
    strlcpy(detail, site->detail, sizeof detail);
    strlcpy(settings_error, site->settings_error, sizeof settings_error);
    SpinLockRelease(&site->lock);
    reason = static_cast<PauseReason>(pg_atomic_read_u32(&site->reason));
  }
  char api_level[32] = "", api_missing[160] = "";
  {
    const uint32 bits = pg_atomic_read_u32(&st->dpf_api);
    PendingError err;
    cpp_call(err, [&] {
      const auto l = extsvc::core::DpfApiLevel::from_bits(bits);
      if (!l.known) return;
      strlcpy(api_level, l.level().c_str(), sizeof api_level);
      std::string m;
      for (const auto& f : l.missing()) m += (m.empty() ? "" : ", ") + f;
      strlcpy(api_missing, m.c_str(), sizeof api_missing);
    });
    raise_if(err);
  }
  // the workers start only once recovery finished: on a standby every configured slot is shown
  // as waiting for that (issue 28)
  const bool standby = RecoveryInProgress();
  const int configured = Min(gucs.workers, kMaxWorkers);
  for (int i = 0; i < kMaxWorkers; ++i) {
    WorkerSlot& s = st->slots[i];
    const uint32 pid = pg_atomic_read_u32(&s.pid);
    const bool never_ran = pid == 0 && pg_atomic_read_u64(&s.iterations) == 0;
    if (never_ran && !(standby && i < configured)) continue;
    Datum values[28];
    bool nulls[28] = {false};
    values[0] = Int32GetDatum(i);
    nulls[1] = pid == 0;
    values[1] = Int32GetDatum(static_cast<int32>(pid));
    values[2] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.iterations)));
    values[3] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.claimed)));
    values[4] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.completed)));
    values[5] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.stale)));
    values[6] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.http_requests)));
    values[7] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.http_errors)));
    const uint64 last = pg_atomic_read_u64(&s.last_activity_us);
    nulls[8] = last == 0;
    values[8] = TimestampTzGetDatum(static_cast<TimestampTz>(last));
    values[9] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.fenced)));
    values[10] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.renewals)));
    values[11] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.orphans_deleted)));
    values[12] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.dpus_rederived)));
    values[13] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.leases_released)));
    values[14] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.watch_dpu_wakes)));
    values[15] = BoolGetDatum(held && reason == PauseReason::kNone);
    nulls[16] = holder[0] == '\0';
    values[16] = CStringGetTextDatum(holder);
    nulls[17] = since == 0;
    values[17] = TimestampTzGetDatum(since);
    const char* name = pause_reason_name(reason);
    nulls[18] = name == nullptr;
    values[18] = CStringGetTextDatum(name != nullptr ? name : "");
    nulls[19] = name == nullptr || detail[0] == '\0';
    values[19] = CStringGetTextDatum(detail);
    nulls[20] = settings_error[0] == '\0';
    values[20] = CStringGetTextDatum(settings_error);
    // issue 23, part 5: the DPF API level the workers detected, and what it lacks
    nulls[21] = api_level[0] == '\0';
    values[21] = CStringGetTextDatum(api_level);
    nulls[22] = api_missing[0] == '\0';
    values[22] = CStringGetTextDatum(api_missing);
    // issue 28: what the worker does, in one word, and why; its settings' error; its last error
    char state_reason[256], config_error[256], last_error[256];
    TimestampTz last_error_at;
    SpinLockAcquire(&s.text_lock);
    strlcpy(state_reason, s.state_reason, sizeof state_reason);
    strlcpy(config_error, s.config_error, sizeof config_error);
    strlcpy(last_error, s.last_error, sizeof last_error);
    last_error_at = s.last_error_at;
    SpinLockRelease(&s.text_lock);
    WorkerState state = static_cast<WorkerState>(pg_atomic_read_u32(&s.state));
    if (standby && (never_ran || pid == 0)) {
      state = WorkerState::kStandby;
      strlcpy(state_reason, "the server is in recovery (a standby)", sizeof state_reason);
    }
    values[23] = CStringGetTextDatum(worker_state_name(state));
    nulls[24] = state_reason[0] == '\0';
    values[24] = CStringGetTextDatum(state_reason);
    nulls[25] = config_error[0] == '\0';
    values[25] = CStringGetTextDatum(config_error);
    nulls[26] = last_error[0] == '\0';
    values[26] = CStringGetTextDatum(last_error);
    nulls[27] = last_error_at == 0;
    values[27] = TimestampTzGetDatum(last_error_at);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

extern "C" Datum nico_extsvc_watch_status(PG_FUNCTION_ARGS) {
  SharedState* st = require_shared();
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  InformerSlot slots[kMaxInformers];
  SpinLockAcquire(&st->informers_lock);
  const int n = st->informer_count;
  const int32 pid = st->watcher_pid;
  memcpy(slots, st->informers, sizeof slots);
  SpinLockRelease(&st->informers_lock);
  for (int i = 0; i < n && i < kMaxInformers; ++i) {
    const InformerSlot& s = slots[i];
    Datum values[14];
    bool nulls[14] = {false};
    values[0] = CStringGetTextDatum(s.resource);
    values[1] = CStringGetTextDatum(s.cluster);
    values[2] = Int32GetDatum(pid);
    values[3] = BoolGetDatum(s.synced);
    values[4] = BoolGetDatum(s.current);
    nulls[5] = s.current_at == 0;
    values[5] = TimestampTzGetDatum(s.current_at);
    values[6] = Int64GetDatum(s.objects);
    values[7] = Int64GetDatum(s.lists);
    values[8] = Int64GetDatum(s.watches);
    values[9] = Int64GetDatum(s.events);
    values[10] = Int64GetDatum(s.bookmarks);
    values[11] = Int64GetDatum(s.expired);
    values[12] = Int64GetDatum(s.errors);
    nulls[13] = s.last_error[0] == '\0';
    values[13] = CStringGetTextDatum(s.last_error);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

extern "C" Datum nico_extsvc_request_resync(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  SharedState* st = require_shared();
  pg_atomic_write_u32(&st->resync_requested, 1);
  wake_workers_now();
  PG_RETURN_VOID();
}
