// Operator functions over the workers' shared memory: the per-slot counters
// (extsvc.worker_status) and a resync on demand (extsvc.request_resync).
#include "pg_prelude.hpp"

#include "wake.hpp"

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
  for (int i = 0; i < kMaxWorkers; ++i) {
    WorkerSlot& s = st->slots[i];
    const uint32 pid = pg_atomic_read_u32(&s.pid);
    if (pid == 0 && pg_atomic_read_u64(&s.iterations) == 0) continue;
    Datum values[15];
    bool nulls[15] = {false};
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
