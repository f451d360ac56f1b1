#include "pg_prelude.hpp"

#include "queue_access.hpp"

extern "C" {
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/syscache.h"
}

#include "gucs.hpp"
#include "kept_statement.hpp"

namespace extsvc::pg {

namespace {

// The worker's claim is extsvc.claim split in two kept statements (issue 26, part 4): the lease
// by the queue's own claim function, then the work of the leased rows. Each statement of a
// transaction that is not read-only runs with a new snapshot (SPI), so the work is read after
// the lease, as extsvc.claim reads it; what this saves is extsvc.claim's own PL/pgSQL call (a
// SECURITY DEFINER function with a SET clause) and the executor start-up of its statements
// (starting executors was a third of a claim's time in a perf profile).
Statement s_lease_services{
    "SELECT id::pg_catalog.text, state_version, lease_token, attempts "
    "FROM extsvc._claim_service($1, $2, $3)",
    3,
    {TEXTOID, INT4OID, INT4OID},
    nullptr};
Statement s_lease_creates{
    "SELECT id::pg_catalog.text, state_version, lease_token, attempts "
    "FROM extsvc._claim_service_creates($1, $2, $3)",
    3,
    {TEXTOID, INT4OID, INT4OID},
    nullptr};
Statement s_lease_dpus{
    "SELECT id, state_version, lease_token, attempts FROM extsvc._claim_dpu($1, $2, $3)",
    3,
    {TEXTOID, INT4OID, INT4OID},
    nullptr};
Statement s_service_work{
    "SELECT extsvc._service_work(w.id::pg_catalog.uuid, w.attempts) "
    "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) "
    "WITH ORDINALITY w(id, attempts, o) ORDER BY w.o",
    2,
    {TEXTARRAYOID, INT4ARRAYOID},
    nullptr};
Statement s_dpu_work{
    "SELECT extsvc._dpu_work(w.id, w.attempts) "
    "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) "
    "WITH ORDINALITY w(id, attempts, o) ORDER BY w.o",
    2,
    {TEXTARRAYOID, INT4ARRAYOID},
    nullptr};
Statement s_complete{"SELECT extsvc.complete($1, $2, $3, $4, $5)",
                     5,
                     {TEXTOID, TEXTOID, INT8OID, UUIDOID, JSONBOID},
                     nullptr};
Statement s_renew{"SELECT t FROM extsvc.renew_leases($1, $2, $3) t",
                  3,
                  {TEXTOID, UUIDARRAYOID, INT4OID},
                  nullptr};
Statement s_release{"SELECT extsvc.release_leases($1)", 1, {TEXTOID}, nullptr};
Statement s_next_due{"SELECT extsvc.next_due_in()", 0, {}, nullptr};
Statement s_next_due_service{"SELECT extsvc.next_due_in('service')", 0, {}, nullptr};  // (text)
Statement s_snapshot{"SELECT service_id, work FROM extsvc.resync_snapshot()", 0, {}, nullptr};
// Operators qualified (issue 29): the worker pins search_path at connect
// (worker_main.cpp), and a kept plan must not depend on it either; an
// unqualified <> on the lifecycle_state domain found a public.<> defined on
// that domain before pg_catalog's text operator, and ran it as superuser.
Statement s_known{
    "SELECT dpf_service_name FROM extsvc.service_records "
    "WHERE service_type OPERATOR(pg_catalog.=) 'DPF_HELM_CHART'::pg_catalog.text "
    "AND lifecycle_state OPERATOR(pg_catalog.<>) 'DELETED'::pg_catalog.text",
    0,
    {},
    nullptr};
Statement s_drift{"SELECT extsvc.mark_drift($1, $2)", 2, {UUIDOID, TEXTOID}, nullptr};
Statement s_dpus_due{"SELECT extsvc.mark_dpus_due()", 0, {}, nullptr};
Statement s_orphans{"SELECT n FROM extsvc.orphaned_dpuservices($1) n", 1, {TEXTARRAYOID}, nullptr};
Statement s_dpf{"SELECT extsvc.record_dpf_status($1)", 1, {JSONBOID}, nullptr};
Statement s_wake_services{
    "SELECT extsvc.wake_services($1, $2)", 2, {UUIDARRAYOID, BOOLOID}, nullptr};
Statement s_mark_and_claim{
    "SELECT id, state_version, lease_token, work, woken "
    "FROM extsvc.mark_and_claim_dpus($1, $2, $3, $4, $5, $6)",
    6,
    {TEXTARRAYOID, TEXTARRAYOID, UUIDARRAYOID, TEXTOID, INT4OID, INT4OID},
    nullptr};
Statement s_snapshot_of{
    "SELECT service_id, work FROM extsvc.resync_snapshot_of($1)", 1, {UUIDARRAYOID}, nullptr};
Statement s_version{
    "SELECT extversion FROM pg_catalog.pg_extension "
    "WHERE extname OPERATOR(pg_catalog.=) 'nico_extsvc'::pg_catalog.name",
    0,
    {},
    nullptr};

// One transaction around body(); an ERROR inside is turned into *error.
// body runs PostgreSQL code only (it may raise).
template <class Body>
bool in_transaction(const char* activity, MemoryContext cxt, char** error, Body&& body) {
  MemoryContext caller = CurrentMemoryContext;
  volatile bool ok = true;
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  // Bounded waits: a session idle in transaction on one of our rows makes
  // this transaction fail (and the worker move on), not stall the worker
  // until its other leases expire. Both revert at the end of the transaction.
  const bool timed = gucs.worker_statement_timeout_ms > 0;
  PG_TRY();
  {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", gucs.worker_lock_timeout_ms);
    (void)set_config_option("lock_timeout", buf, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true,
                            0, false);
    // SPI does not arm statement_timeout (only the client protocol does).
    if (timed) enable_timeout_after(STATEMENT_TIMEOUT, gucs.worker_statement_timeout_ms);
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, activity);
    body();
    SPI_finish();
    PopActiveSnapshot();
    if (timed) disable_timeout(STATEMENT_TIMEOUT, false);
    CommitTransactionCommand();
  }
  PG_CATCH();
  {
    if (timed) disable_timeout(STATEMENT_TIMEOUT, false);
    MemoryContextSwitchTo(caller);
    ErrorData* ed = CopyErrorData();
    FlushErrorState();
    *error = MemoryContextStrdup(cxt, ed->message ? ed->message : "unknown error");
    FreeErrorData(ed);
    AbortCurrentTransaction();
    ok = false;
  }
  PG_END_TRY();
  MemoryContextSwitchTo(caller);
  pgstat_report_stat(false);
  pgstat_report_activity(STATE_IDLE, nullptr);
  return ok;
}

// --- arguments and columns --------------------------------------------------

Datum text_arg(const char* s) {
  return CStringGetTextDatum(s);
}

Datum uuid_arg(const char* s) {
  return DirectFunctionCall1(uuid_in, CStringGetDatum(s));
}

Datum jsonb_arg(const char* s) {
  return DirectFunctionCall1(jsonb_in, CStringGetDatum(s));
}

Datum array_arg(const char* const* v, int n, Oid type) {
  Datum* elems = static_cast<Datum*>(palloc(sizeof(Datum) * (n > 0 ? n : 1)));
  for (int i = 0; i < n; ++i) elems[i] = type == UUIDOID ? uuid_arg(v[i]) : text_arg(v[i]);
  ArrayType* a = type == UUIDOID
                     ? construct_array(elems, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR)
                     : construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
  return PointerGetDatum(a);
}

Datum bin_col(int row, int col, bool* isnull) {
  return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

int int4_scalar() {
  bool isnull = true;
  const Datum d = SPI_processed > 0 ? bin_col(0, 1, &isnull) : Datum(0);
  return isnull ? 0 : DatumGetInt32(d);
}

// The (id, state_version, lease_token, work) rows of mark_and_claim_dpus.
void read_batch(MemoryContext cxt, int n, QueueBatch* out) {
  auto* items = static_cast<QueueItem*>(MemoryContextAllocZero(cxt, sizeof(QueueItem) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    bool isnull = false;
    items[i].id = text_col(cxt, i, 1);
    items[i].state_version = DatumGetInt64(bin_col(i, 2, &isnull));
    items[i].lease_token = text_col(cxt, i, 3);
    items[i].work = text_col(cxt, i, 4);
  }
  out->items = items;
  out->count = n;
}

Datum int4_array_arg(const int32* v, int n) {
  Datum* elems = static_cast<Datum*>(palloc(sizeof(Datum) * (n > 0 ? n : 1)));
  for (int i = 0; i < n; ++i) elems[i] = Int32GetDatum(v[i]);
  return PointerGetDatum(construct_array(elems, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
}

// A claim: the leased rows (id, state_version, lease_token, attempts) of the first statement,
// then their work, one row each in the same order, from the second.
void claim_batch(MemoryContext cxt, Statement& lease, Statement& work, const Datum* args,
                 QueueBatch* out) {
  const int n = run(lease, args);
  if (n == 0) return;
  auto* items = static_cast<QueueItem*>(MemoryContextAllocZero(cxt, sizeof(QueueItem) * (n + 1)));
  const char** ids = static_cast<const char**>(palloc(sizeof(char*) * n));
  auto* attempts = static_cast<int32*>(palloc(sizeof(int32) * n));
  for (int i = 0; i < n; ++i) {
    bool isnull = false;
    items[i].id = text_col(cxt, i, 1);
    items[i].state_version = DatumGetInt64(bin_col(i, 2, &isnull));
    items[i].lease_token = text_col(cxt, i, 3);
    const Datum a = bin_col(i, 4, &isnull);
    attempts[i] = isnull ? 0 : DatumGetInt32(a);
    ids[i] = items[i].id;
  }
  const Datum work_args[] = {array_arg(ids, n, TEXTOID), int4_array_arg(attempts, n)};
  if (run(work, work_args) != n)
    elog(ERROR, "nico_extsvc: the work of %d leased row(s) was not read back", n);
  for (int i = 0; i < n; ++i) items[i].work = text_col(cxt, i, 1);
  out->items = items;
  out->count = n;
}

}  // namespace

const char* queue_name(Queue q) {
  return q == Queue::kService ? "service" : "dpu";
}

bool queue_claim(MemoryContext cxt, Queue q, const char* worker, int batch, int lease_s,
                 QueueBatch* out, char** error, bool creates_only) {
  out->count = 0;
  out->items = nullptr;
  return in_transaction(
      q == Queue::kService ? "nico_extsvc: claim services" : "nico_extsvc: claim DPUs", cxt, error,
      [&] {
        // A lease need not survive a crash: the crash ends the worker that held it, and its row
        // is claimable again after the restart (a repeated call is idempotent; docs/worker.md).
        // So the claim's commit does not wait for its WAL flush, which under a burst of commits
        // queues behind the committing sessions' flushes (issue 26, part 4). The setting reverts
        // at the end of this transaction; every other transaction of the worker commits as
        // configured.
        (void)set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
                                GUC_ACTION_LOCAL, true, 0, false);
        const Datum args[] = {text_arg(worker), Int32GetDatum(batch), Int32GetDatum(lease_s)};
        if (q == Queue::kDpu)
          claim_batch(cxt, s_lease_dpus, s_dpu_work, args, out);
        else
          claim_batch(cxt, creates_only ? s_lease_creates : s_lease_services, s_service_work, args,
                      out);
      });
}

bool queue_complete(MemoryContext cxt, Queue q, const QueueItem& item, const char* outcome,
                    char** result, char** error) {
  *result = nullptr;
  return in_transaction(
      q == Queue::kService ? "nico_extsvc: complete service" : "nico_extsvc: complete DPU pass",
      cxt, error, [&] {
        // a row's id as claim returned it: a service's uuid or a DPU's MachineId
        const Datum args[] = {text_arg(queue_name(q)), text_arg(item.id),
                              Int64GetDatum(item.state_version), uuid_arg(item.lease_token),
                              jsonb_arg(outcome)};
        if (run(s_complete, args) > 0) *result = text_col(cxt, 0, 1);
      });
}

bool queue_renew(MemoryContext cxt, const char* worker, const char* const* tokens, int ntokens,
                 int lease_s, char*** renewed, int* nrenewed, char** error) {
  *renewed = nullptr;
  *nrenewed = 0;
  return in_transaction("nico_extsvc: renew leases", cxt, error, [&] {
    const Datum args[] = {text_arg(worker), array_arg(tokens, ntokens, UUIDOID),
                          Int32GetDatum(lease_s)};
    const int n = run(s_renew, args);
    *renewed = text_rows(cxt, n, 1);
    *nrenewed = n;
  });
}

bool queue_release(MemoryContext cxt, const char* worker, int* released, char** error) {
  *released = 0;
  return in_transaction("nico_extsvc: release leases", cxt, error, [&] {
    const Datum args[] = {text_arg(worker)};
    run(s_release, args);
    *released = int4_scalar();
  });
}

bool queue_next_due(MemoryContext cxt, bool* any, double* seconds, char** error,
                    bool services_only) {
  *any = false;
  *seconds = 0;
  return in_transaction("nico_extsvc: next due", cxt, error, [&] {
    bool isnull = true;
    Statement& st = services_only ? s_next_due_service : s_next_due;
    const Datum d = run(st) > 0 ? bin_col(0, 1, &isnull) : Datum(0);
    *any = !isnull;
    *seconds = isnull ? 0.0 : DatumGetFloat8(d);
  });
}

bool resync_snapshot(MemoryContext cxt, ResyncSnapshot* out, char** error) {
  *out = ResyncSnapshot{};
  return in_transaction("nico_extsvc: resync snapshot", cxt, error, [&] {
    int n = run(s_snapshot);
    out->service_ids = text_rows(cxt, n, 1);
    out->works = text_rows(cxt, n, 2);
    out->count = n;
    n = run(s_known);
    out->known_names = text_rows(cxt, n, 1);
    out->known_count = n;
  });
}

bool mark_drift(MemoryContext cxt, const char* service_id, const char* detail, char** error) {
  return in_transaction("nico_extsvc: mark drift", cxt, error, [&] {
    const Datum args[] = {uuid_arg(service_id), detail ? text_arg(detail) : Datum(0)};
    const char nulls[] = {' ', detail ? ' ' : 'n'};
    run(s_drift, args, nulls);
  });
}

bool mark_dpus_due(MemoryContext cxt, int* marked, char** error) {
  *marked = 0;
  return in_transaction("nico_extsvc: mark DPUs due", cxt, error, [&] {
    run(s_dpus_due);
    *marked = int4_scalar();
  });
}

bool orphaned_dpuservices(MemoryContext cxt, const char* const* names, int n, char*** orphans,
                          int* count, char** error) {
  *orphans = nullptr;
  *count = 0;
  return in_transaction("nico_extsvc: orphaned DPUServices", cxt, error, [&] {
    const Datum args[] = {array_arg(names, n, TEXTOID)};
    const int rows = run(s_orphans, args);
    *orphans = text_rows(cxt, rows, 1);
    *count = rows;
  });
}

bool record_dpf_status(MemoryContext cxt, const char* statuses, char** error) {
  return in_transaction("nico_extsvc: record DPF status", cxt, error, [&] {
    const Datum args[] = {jsonb_arg(statuses)};
    run(s_dpf, args);
  });
}

bool publish_watch_changes(MemoryContext cxt, const WatchChanges& in, WatchPublished* out,
                           char** error) {
  *out = WatchPublished{};
  return in_transaction("nico_extsvc: publish watch changes", cxt, error, [&] {
    // Service rows before DPU rows: the order of the API's service calls (the service's rows,
    // then the work rows of its DPUs), so this transaction waits behind them, never across them.
    if (in.nservices > 0 || in.every_deleting) {
      const Datum args[] = {array_arg(in.services, in.nservices, UUIDOID),
                            BoolGetDatum(in.every_deleting)};
      run(s_wake_services, args);
    }
    if (in.dpf != nullptr) {
      const Datum args[] = {jsonb_arg(in.dpf)};
      run(s_dpf, args);
    }
    if (in.nservices > 0) {
      const Datum ids[] = {array_arg(in.services, in.nservices, UUIDOID)};
      const int rows = run(s_snapshot_of, ids);
      out->snapshot.service_ids = text_rows(cxt, rows, 1);
      out->snapshot.works = text_rows(cxt, rows, 2);
      out->snapshot.count = rows;
    }
    if (in.ndevices + in.nnodes + in.ncontext == 0) return;
    const Datum args[] = {array_arg(in.devices, in.ndevices, TEXTOID),
                          array_arg(in.nodes, in.nnodes, TEXTOID),
                          array_arg(in.context, in.ncontext, UUIDOID),
                          in.worker != nullptr ? text_arg(in.worker) : Datum(0),
                          Int32GetDatum(in.lease_s),
                          Int32GetDatum(in.max_claims)};
    const char nulls[] = {' ', ' ', ' ', in.worker != nullptr ? ' ' : 'n', ' ', ' '};
    const int n = run(s_mark_and_claim, args, nulls);
    // claimed rows come first (a lease token), then the rows only woken
    int claimed = 0;
    for (bool token_null = false; claimed < n; ++claimed) {
      (void)bin_col(claimed, 3, &token_null);
      if (token_null) break;
    }
    read_batch(cxt, claimed, &out->claimed);
    for (int i = 0; i < n; ++i) {
      bool isnull = true;
      const Datum d = bin_col(i, 5, &isnull);
      if (!isnull && DatumGetBool(d)) ++out->woken;
    }
  });
}

namespace {

// Issue 24 (4.5): the version is read once and kept while it is the library's, as pg_cron keeps
// its job cache: ALTER EXTENSION UPDATE and DROP EXTENSION change functions (pg_proc
// invalidations) and relations (relcache invalidations), and either makes the next call read
// pg_extension again. The invalidations arrive at the start of the worker's next transaction,
// which is as soon as the separate read of every iteration saw them before. A missing extension
// or another version is read every time (the waits poll), and a kept one at least once a minute.
bool s_version_kept = false;
TimestampTz s_version_read_at = 0;
constexpr int kVersionRereadMs = 60000;

void forget_version(Datum, int, uint32) {
  s_version_kept = false;
}
void forget_version_rel(Datum, Oid) {
  s_version_kept = false;
}

}  // namespace

bool installed_extension_version(MemoryContext cxt, char** version, char** error) {
  static bool registered = false;
  if (!registered) {
    CacheRegisterSyscacheCallback(PROCOID, forget_version, static_cast<Datum>(0));
    CacheRegisterRelcacheCallback(forget_version_rel, static_cast<Datum>(0));
    registered = true;
  }
  *version = nullptr;
  if (s_version_kept &&
      !TimestampDifferenceExceeds(s_version_read_at, GetCurrentTimestamp(), kVersionRereadMs)) {
    *version = MemoryContextStrdup(cxt, EXTSVC_VERSION);
    return true;
  }
  s_version_kept = false;
  const bool ok = in_transaction("nico_extsvc: check extension", cxt, error, [&] {
    if (run(s_version) > 0) *version = text_col(cxt, 0, 1);
  });
  if (ok && *version != nullptr && strcmp(*version, EXTSVC_VERSION) == 0) {
    s_version_kept = true;
    s_version_read_at = GetCurrentTimestamp();
  }
  return ok;
}

bool worker_transaction(const char* activity, MemoryContext cxt, char** error, void (*body)(void*),
                        void* arg) {
  return in_transaction(activity, cxt, error, [&] { body(arg); });
}

}  // namespace extsvc::pg
