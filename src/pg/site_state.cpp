#include "pg_prelude.hpp"

#include "site_state.hpp"

#include <time.h>

#include <string>

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_site_wake);
PG_FUNCTION_INFO_V1(nico_extsvc_site_metrics);
}

namespace extsvc::pg {

namespace {

SiteShared* g_site = nullptr;

}  // namespace

const char* pause_reason_name(PauseReason r) {
  switch (r) {
    case PauseReason::kNone:
      return nullptr;
    case PauseReason::kStarting:
      return "starting";
    case PauseReason::kDisabled:
      return "disabled";
    case PauseReason::kSiteId:
      return "site_id";
    case PauseReason::kTimingSettings:
      return "timing_settings";
    case PauseReason::kDatabaseIdentity:
      return "database_identity";
    case PauseReason::kLease:
      return "lease";
    case PauseReason::kDeposed:
      return "deposed";
  }
  return "lease";
}

SiteShared* site_shared() {
  return g_site;
}

void request_site_memory() {
  RequestAddinShmemSpace(MAXALIGN(sizeof(SiteShared)));
}

void attach_site_memory() {
  bool found = false;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  g_site =
      static_cast<SiteShared*>(ShmemInitStruct("nico_extsvc site", sizeof(SiteShared), &found));
  if (!found) {
    memset(static_cast<void*>(g_site), 0, sizeof(SiteShared));
    pg_atomic_init_u64(&g_site->valid_until_ns, 0);
    pg_atomic_init_u64(&g_site->renew_until_ns, 0);
    pg_atomic_init_u32(&g_site->reason, static_cast<uint32>(PauseReason::kStarting));
    pg_atomic_init_u64(&g_site->acquisitions, 0);
    for (auto& w : g_site->write_until_ns) pg_atomic_init_u64(&w, 0);
    pg_atomic_init_u64(&g_site->orphan_budget, 0);
    pg_atomic_init_u64(&g_site->label_budget, 0);
    pg_atomic_init_u32(&g_site->lease_pid, 0);
    g_site->lease_latch = nullptr;
    SpinLockInit(&g_site->lock);
    snprintf(g_site->detail, sizeof g_site->detail, "the lease process has not started yet");
  }
  LWLockRelease(AddinShmemInitLock);
}

int64 site_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool site_writes_allowed(int64 budget_ns) {
  if (g_site == nullptr) return false;
  if (static_cast<PauseReason>(pg_atomic_read_u32(&g_site->reason)) != PauseReason::kNone)
    return false;
  const int64 now = site_now_ns();
  const auto valid = static_cast<int64>(pg_atomic_read_u64(&g_site->valid_until_ns));
  const auto renew = static_cast<int64>(pg_atomic_read_u64(&g_site->renew_until_ns));
  return now + budget_ns <= valid && now <= renew;
}

bool site_write_permit(int slot, int64 budget_ns) {
  if (g_site == nullptr || slot < 0 || slot >= kMaxWorkers) return false;
  if (!site_writes_allowed(budget_ns)) return false;
  // Announce the call first, then look again: the lease process clears valid_until before it
  // reads the announcements, so either it sees this call or this call sees the cleared lease.
  const uint64 until = static_cast<uint64>(site_now_ns() + budget_ns);
  pg_atomic_write_u64(&g_site->write_until_ns[slot],
                      Max(until, pg_atomic_read_u64(&g_site->write_until_ns[slot])));
  pg_memory_barrier();
  return site_writes_allowed(budget_ns);
}

void site_id_in_force(char* buf, size_t size) {
  buf[0] = '\0';
  if (g_site == nullptr) return;
  SpinLockAcquire(&g_site->lock);
  strlcpy(buf, g_site->site_id, size);
  SpinLockRelease(&g_site->lock);
}

void site_identity(char* buf, size_t size) {
  buf[0] = '\0';
  if (g_site == nullptr) return;
  SpinLockAcquire(&g_site->lock);
  strlcpy(buf, g_site->identity, size);
  SpinLockRelease(&g_site->lock);
}

bool site_take_budget(pg_atomic_uint64* budget) {
  uint64 v = pg_atomic_read_u64(budget);
  while (v > 0)
    if (pg_atomic_compare_exchange_u64(budget, &v, v - 1)) return true;
  return false;
}

}  // namespace extsvc::pg

using namespace extsvc::pg;

// extsvc._site_wake(): after an admin's confirmation, the lease process looks again at once and
// the watcher resyncs (no-op without shared memory).
extern "C" Datum nico_extsvc_site_wake(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  SharedState* st = shared_state();
  if (st != nullptr) {
    pg_atomic_write_u32(&st->resync_requested, 1);
    wake_workers_now();
  }
  SiteShared* site = site_shared();
  if (site != nullptr) {
    Latch* latch = site->lease_latch;  // read once: the lease process may be exiting
    if (pg_atomic_read_u32(&site->lease_pid) != 0 && latch != nullptr) SetLatch(latch);
  }
  PG_RETURN_VOID();
}

// extsvc._site_metrics(): extsvc_lease_held, extsvc_lease_acquired_total, extsvc_writes_paused
// by reason, extsvc_foreign_objects; no rows without shared memory.
extern "C" Datum nico_extsvc_site_metrics(PG_FUNCTION_ARGS) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  SiteShared* site = site_shared();
  if (site == nullptr) return (Datum)0;
  SpinLockAcquire(&site->lock);
  const bool held = site->held;
  const int64 other = site->foreign_other_site, unlabelled = site->foreign_unlabelled,
              keys = site->foreign_keys;
  const bool census = site->census_done;
  SpinLockRelease(&site->lock);
  const auto reason = static_cast<PauseReason>(pg_atomic_read_u32(&site->reason));
  auto row = [&](const char* metric, const char* labels, double value) {
    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = CStringGetTextDatum(metric);
    values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(labels));
    values[2] = Float8GetDatum(value);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  };
  row("extsvc_lease_held", "{}", held && reason == PauseReason::kNone ? 1 : 0);
  row("extsvc_lease_acquired_total", "{}",
      static_cast<double>(pg_atomic_read_u64(&site->acquisitions)));
  for (uint32 r = 1; r <= static_cast<uint32>(kLastPauseReason); ++r) {
    char labels[64];
    snprintf(labels, sizeof labels, "{\"reason\": \"%s\"}",
             pause_reason_name(static_cast<PauseReason>(r)));
    row("extsvc_writes_paused", labels, static_cast<uint32>(reason) == r ? 1 : 0);
  }
  if (census) {
    row("extsvc_foreign_objects", "{\"kind\": \"dpuservice\", \"reason\": \"other_site\"}",
        static_cast<double>(other));
    row("extsvc_foreign_objects", "{\"kind\": \"dpuservice\", \"reason\": \"no_site_label\"}",
        static_cast<double>(unlabelled));
    row("extsvc_foreign_objects", "{\"kind\": \"placement_key\", \"reason\": \"unregistered\"}",
        static_cast<double>(keys));
  }
  return (Datum)0;
}
