// One batch of a queue: claim -> commit -> each row through the controller
// (Kubernetes calls outside any transaction, under the lease fence) ->
// compare-and-swap completion. One function for both queues: the wire
// schema makes them the same shape.
#include "pg_prelude.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "controller/wire.hpp"
#include "controller/work_items.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "hand_over.hpp"
#include "log_sink.hpp"
#include "metrics.hpp"
#include "process_budget.hpp"
#include "site_access.hpp"
#include "site_state.hpp"
#include "timing_in_force.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

namespace {

// --- the lease fence (issue 10) ---------------------------------------------
//
// The lease of a claimed batch as this process sees it: it starts before the
// claim transaction (whose now() stamps lease_expires_at), so the local
// deadline is never later than the database's. A Kubernetes call starts only
// while http_timeout + lease_margin of it remain: http_timeout is libcurl's
// CURLOPT_TIMEOUT_MS, the total of one attempt including DNS, connect and
// TLS (connect_timeout only bounds a part of it), so a call that starts ends
// (or is abandoned by the client) before the lease expires.
using SteadyClock = std::chrono::steady_clock;

std::chrono::milliseconds call_budget() {
  return std::chrono::milliseconds(pg::call_budget_ms());
}

std::chrono::milliseconds lease_time() {
  return std::chrono::milliseconds(timing_in_force().lease_time_ms);
}

SteadyClock::time_point lease_deadline(SteadyClock::time_point start) {
  return start + lease_time();
}

// What a pass runs under: the worker's budget (stop, latch wait, the site Lease's fence) and the
// row's lease, which must outlive every call that starts.
kube::Budget item_budget(SteadyClock::time_point deadline) {
  return worker_budget(g_slot).with_deadline(deadline - call_budget());
}

bool listed(char* const* tokens, int n, const char* token) {
  for (int i = 0; i < n; ++i)
    if (strcmp(tokens[i], token) == 0) return true;
  return false;
}

// Renewal between items: when less than max(lease_time / 2, one call's
// budget) is left, one UPDATE extends every lease of the batch's remaining
// items (CAS on lease_token and lease_owner). Items whose lease was not
// renewed belong to another worker by now and are skipped (alive false).
// When the renewal itself fails, the fence stops calls as the old deadline
// approaches.
void maybe_renew(MemoryContext cxt, const QueueBatch& batch, bool* alive, int from,
                 SteadyClock::time_point* deadline, WorkerSlot* slot) {
  const auto left = *deadline - SteadyClock::now();
  const auto threshold = std::max<SteadyClock::duration>(lease_time() / 2, call_budget());
  if (left >= threshold) return;
  const char** tokens = static_cast<const char**>(palloc0(sizeof(char*) * (batch.count + 1)));
  int n = 0;
  for (int i = from; i < batch.count; ++i)
    if (alive[i]) tokens[n++] = batch.items[i].lease_token;
  if (n == 0) return;
  const auto start = SteadyClock::now();
  char** renewed = nullptr;
  int nrenewed = 0;
  char* error = nullptr;
  if (!queue_renew(cxt, g_worker_name, tokens, n, lease_seconds(), &renewed, &nrenewed, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: renewing leases failed: %s", error)));
    return;
  }
  pg_atomic_fetch_add_u64(&slot->renewals, 1);
  *deadline = lease_deadline(start);
  for (int i = from; i < batch.count; ++i)
    if (alive[i] && !listed(renewed, nrenewed, batch.items[i].lease_token)) {
      alive[i] = false;
      pg_atomic_fetch_add_u64(&slot->fenced, 1);
      ereport(LOG, (errmsg("nico_extsvc: lease %s was taken over before it could be renewed; "
                           "the row is skipped",
                           batch.items[i].lease_token)));
    }
}

// Issue 25: which present placement keys a DPU pass may remove: registered ones (the
// registry, cached per process and read again when its fingerprint changes), and those no item
// names only while the orphan guard's budget allows.
std::set<std::string>* g_registry = nullptr;
char g_registry_version[128];

void refresh_registry(MemoryContext cxt) {
  char* version = nullptr;
  char* error = nullptr;
  if (!placement_key_registry_version(cxt, &version, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: reading the placement key registry failed: %s", error)));
    return;
  }
  if (version == nullptr || (g_registry != nullptr && strcmp(version, g_registry_version) == 0))
    return;
  char** keys = nullptr;
  int n = 0;
  if (!placement_key_registry(cxt, &keys, &n, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: reading the placement key registry failed: %s", error)));
    return;
  }
  PendingError err;
  cpp_call(err, [&] {
    auto fresh = std::make_unique<std::set<std::string>>();
    for (int i = 0; i < n; ++i) fresh->insert(keys[i]);
    delete g_registry;
    g_registry = fresh.release();
  });
  if (err.sqlstate == 0) strlcpy(g_registry_version, version, sizeof g_registry_version);
}

controller::DpuKeyPolicy dpu_key_policy() {
  controller::DpuKeyPolicy p;
  // without a registry read yet nothing registered can be proven: remove nothing but wanted keys
  static const std::set<std::string> kNone;
  p.registered = g_registry != nullptr ? g_registry : &kNone;
  p.derived_removal_ok = [] {
    SiteShared* site = site_shared();
    return site != nullptr && site_take_budget(&site->label_budget);
  };
  return p;
}

// What one batch needs on the C++ side, built and freed under the guard.
struct BatchState {
  std::unique_ptr<reconcile::DpuReconciler> dpus;  // a fresh one per DPU batch
  controller::DpfSeen dpf_seen;
};

// PostgreSQL's timestamps (microseconds since 2000) as Unix microseconds: the clock of the
// commit timestamps and of dpfsim's request log.
int64 unix_us(TimestampTz t) {
  return t + (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

// Issue 26, part 4: where the reaction to new work goes between a commit and the first request
// (bench/commit_burst.py sets extsvc.log_level = debug and reads these beside the commit
// timestamps and dpfsim's request log): when this iteration began (the latch woke it), when its
// claim began and when the rows were claimed.
// A hand-over at commit is logged the same way, as "service hand-over" with its claim beginning
// and ending when the worker took it.
void log_claim(Queue queue, int rows, WorkerSlot* slot, TimestampTz claim_began,
               const char* what = "claim", TimestampTz claimed = 0) {
  if (spdlog::get_level() > spdlog::level::debug) return;
  if (claimed == 0) claimed = GetCurrentTimestamp();
  const auto began = static_cast<TimestampTz>(pg_atomic_read_u64(&slot->last_activity_us));
  const auto woken = static_cast<TimestampTz>(pg_atomic_read_u64(&slot->wake_seen_us));
  PendingError err;
  cpp_call(err, [&] {
    spdlog::debug(
        "{} {}: {} row(s); iteration began {} us, claim began {} us, claimed {} us, "
        "last wake at commit {} us, wait returned {} us",
        queue_name(queue), what, rows, unix_us(began), unix_us(claim_began), unix_us(claimed),
        unix_us(woken), unix_us(g_wait_returned_us));
  });
  flush_logs();
}

// One claimed row through the controller and back into the database.
void work_item(MemoryContext cxt, Queue queue, const QueueItem& item, BatchState* state,
               WorkerSlot* slot, SteadyClock::time_point deadline) {
  char* outcome = nullptr;
  bool fenced = false, retry = false;
  const char* retry_reason = nullptr;  // static string of the reconciler
  char last_error[256] = "";
  const uint64 before = g_runtime->requests(), errors_before = g_runtime->errors();
  PendingError err;
  // a NULL work (never expected: extsvc.claim reads it after the lease) is an
  // undecodable row that is retried, never a string_view of a null pointer
  const char* work = item.work != nullptr ? item.work : "";
  cpp_call(err, [&] {
    const kube::Budget budget = item_budget(deadline);
    const controller::ItemResult r =
        queue == Queue::kService
            ? controller::work_service(*g_runtime, work, budget, &state->dpf_seen)
            : controller::work_dpu(*g_runtime, *state->dpus, work, budget, gucs.retry_cap_s,
                                   dpu_key_policy());
    if (!r.warning.empty())
      spdlog::warn("{} {}: {}", queue_name(queue), item.id, r.warning);
    else if (!r.summary.empty())
      spdlog::debug("{}", r.summary);
    // issue 28: a pass that ends in a retry is the worker's last error (worker_status())
    if (r.retry || !r.warning.empty())
      snprintf(last_error, sizeof last_error, "%s %s: %s", queue_name(queue), item.id,
               (!r.warning.empty() ? r.warning : r.summary).c_str());
    fenced = r.fenced;
    retry = r.retry;
    retry_reason = r.retry_reason;
    outcome = copy_out(cxt, r.outcome);
  });
  flush_logs();
  pg_atomic_fetch_add_u64(&slot->http_requests, g_runtime->requests() - before);
  pg_atomic_fetch_add_u64(&slot->http_errors, g_runtime->errors() - errors_before);
  if (fenced) pg_atomic_fetch_add_u64(&slot->fenced, 1);
  if (last_error[0] != '\0') note_worker_error(slot, last_error);
  if (err.sqlstate != 0) {
    // only an allocation failure gets here: the lease expires and the row is
    // claimed again
    ereport(WARNING,
            (errmsg_internal("nico_extsvc: %s %s: %s", queue_name(queue), item.id, err.message)));
    return;
  }
  if (retry)
    metrics_retry(queue == Queue::kService ? kMetricsQueueService : kMetricsQueueDpu, retry_reason);
  char* result = nullptr;
  char* error = nullptr;
  if (!queue_complete(cxt, queue, item, outcome, &result, &error)) {
    note_worker_error(slot, error);
    ereport(WARNING, (errmsg("nico_extsvc: recording the outcome for %s %s failed: %s",
                             queue_name(queue), item.id, error)));
    return;
  }
  pg_atomic_fetch_add_u64(&slot->completed, 1);
  if (result != nullptr && strcmp(result, "applied") != 0) {
    pg_atomic_fetch_add_u64(&slot->stale, 1);
    ereport(LOG, (errmsg("nico_extsvc: result for %s %s discarded (%s)", queue_name(queue), item.id,
                         result)));
  }
}

}  // namespace

int lease_seconds() {
  return static_cast<int>((timing_in_force().lease_time_ms + 999) / 1000);
}

const std::set<std::string>* placement_registry(MemoryContext cxt) {
  refresh_registry(cxt);
  return g_registry;
}

void record_dpf(MemoryContext cxt, const char* statuses) {
  if (statuses == nullptr || statuses[0] == '\0') return;
  char* error = nullptr;
  if (!record_dpf_status(cxt, statuses, &error))
    ereport(WARNING, (errmsg("nico_extsvc: recording DPF status failed: %s", error)));
}

int work_handed_over(MemoryContext cxt, WorkerSlot* slot) {
  const TimestampTz took = GetCurrentTimestamp();
  QueueBatch batch{};
  TimestampTz leased_at = 0;
  hand_over_take(cxt, g_slot, &batch, &leased_at);
  if (batch.count == 0) return 0;
  pg_atomic_fetch_add_u64(&slot->handed_over, static_cast<uint64>(batch.count));
  // the lease began in the creating transaction, before its commit: the deadline counts from then
  const auto age = std::chrono::microseconds(std::max<int64>(0, took - leased_at));
  work_rows(cxt, Queue::kService, slot, batch, SteadyClock::now() - age);
  // logged after the rows' requests, which a write to the server log would delay
  log_claim(Queue::kService, batch.count, slot, took, "hand-over", took);
  return batch.count;
}

int work_batch(MemoryContext cxt, Queue queue, WorkerSlot* slot) {
  // issue 25: nothing is claimed while this server may not write (the rows stay due)
  if (!site_writes_allowed(std::chrono::nanoseconds(call_budget()).count())) return 0;
  QueueBatch batch{};
  char* error = nullptr;
  const auto claim_start = SteadyClock::now();
  const TimestampTz claim_began = GetCurrentTimestamp();
  // in watch mode the watcher works a service's updates and deletes from its cache (issue 26,
  // part 2); the other workers take the creates
  const bool creates_only = queue == Queue::kService && gucs.watch && g_slot != 0;
  if (!queue_claim(cxt, queue, g_worker_name, gucs.batch_size, lease_seconds(), &batch, &error,
                   creates_only)) {
    note_worker_error(slot, error);
    ereport(WARNING, (errmsg("nico_extsvc: %s claim failed: %s", queue_name(queue), error)));
    return 0;
  }
  if (batch.count > 0) log_claim(queue, batch.count, slot, claim_began);
  work_rows(cxt, queue, slot, batch, claim_start);
  return batch.count;
}

void work_rows(MemoryContext cxt, Queue queue, WorkerSlot* slot, const QueueBatch& batch,
               SteadyClock::time_point claim_start) {
  if (batch.count == 0) return;
  if (queue == Queue::kDpu) refresh_registry(cxt);
  pg_atomic_fetch_add_u64(&slot->claimed, batch.count);
  BatchState* state = nullptr;
  PendingError err;
  cpp_call(err, [&] {
    auto s = std::make_unique<BatchState>();
    if (queue == Queue::kDpu) s->dpus = g_runtime->dpu_reconciler();
    state = s.release();
  });
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("%s", err.message)));
    return;
  }
  auto deadline = lease_deadline(claim_start);
  bool* alive = static_cast<bool*>(palloc0(sizeof(bool) * (batch.count + 1)));
  for (int i = 0; i < batch.count; ++i) alive[i] = true;
  for (int i = 0; i < batch.count; ++i) {
    CHECK_FOR_INTERRUPTS();
    // an orphan of a dead postmaster stops between items, not at the loop's next WaitLatch
    if (!PostmasterIsAlive()) proc_exit(1);
    watch_pump();  // the watch streams keep flowing while the batch runs
    maybe_renew(cxt, batch, alive, i, &deadline, slot);
    if (alive[i]) work_item(cxt, queue, batch.items[i], state, slot, deadline);
  }
  // DPF's view seen during the batch, recorded with one call after it
  char* statuses = nullptr;
  cpp_call(err, [&] {
    if (state->dpus) {
      for (const auto& [id, st] : state->dpus->dpf_statuses()) state->dpf_seen.emplace_back(id, st);
    }
    const std::string text = controller::encode_dpf_statuses(state->dpf_seen);
    if (!text.empty()) statuses = copy_out(cxt, text);
  });
  PendingError free_err;
  cpp_call(free_err, [&] { delete state; });
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
  record_dpf(cxt, statuses);
}

}  // namespace extsvc::pg
