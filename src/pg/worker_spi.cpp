#include "pg_prelude.hpp"

#include "worker_spi.hpp"

#include "gucs.hpp"

namespace extsvc::pg {

namespace {

typedef void (*TxnBody)(MemoryContext cxt, void* arg);

// One transaction around body(); an ERROR inside is turned into *error.
bool run_transaction(const char* activity, TxnBody body, MemoryContext cxt, void* arg,
                     char** error) {
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
    body(cxt, arg);
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

char* copy_value(MemoryContext cxt, int row, int col) {
  char* v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
  return v ? MemoryContextStrdup(cxt, v) : nullptr;
}

int64 int_value(int row, int col, int64 if_null) {
  char* v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
  return v ? strtoll(v, nullptr, 10) : if_null;
}

void exec_text_args(const char* sql, int nargs, const char* const* args, int expect) {
  Oid types[16] = {};
  Datum values[16] = {};
  char nulls[16] = {};
  for (int i = 0; i < nargs; ++i) {
    types[i] = TEXTOID;
    values[i] = args[i] ? CStringGetTextDatum(args[i]) : (Datum)0;
    nulls[i] = args[i] ? ' ' : 'n';
  }
  const int rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
  if (rc != expect) elog(ERROR, "nico_extsvc worker query failed: %s", SPI_result_code_string(rc));
}

// --- bodies ----------------------------------------------------------------

struct VersionArgs {
  MemoryContext cxt;
  char** version;
};

void installed_body(MemoryContext, void* arg) {
  auto* a = static_cast<VersionArgs*>(arg);
  exec_text_args("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'nico_extsvc'", 0,
                 nullptr, SPI_OK_SELECT);
  *a->version = SPI_processed > 0 ? copy_value(a->cxt, 0, 1) : nullptr;
}

struct ClaimArgs {
  const char* worker;
  char batch[16];
  char lease[16];
  ClaimResult* out;
};

void claim_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<ClaimArgs*>(arg);
  const char* args[] = {a->worker, a->batch, a->lease};
  exec_text_args(
      "SELECT service_id::text, state_version, lease_token::text, lifecycle_state, "
      "deployment_scope, dpf_service_name, attachable_version, desired_revision, "
      "applied_revision, attempts, desired::text, placement_clear, render_error "
      "FROM extsvc.claim_reconciliations($1, $2::int, $3::int)",
      3, args, SPI_OK_SELECT);
  const int n = static_cast<int>(SPI_processed);
  a->out->count = n;
  a->out->rows =
      static_cast<ClaimedRow*>(MemoryContextAllocZero(cxt, sizeof(ClaimedRow) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    ClaimedRow& r = a->out->rows[i];
    r.service_id = copy_value(cxt, i, 1);
    r.state_version = int_value(i, 2, 0);
    r.lease_token = copy_value(cxt, i, 3);
    r.lifecycle_state = copy_value(cxt, i, 4);
    r.deployment_scope = copy_value(cxt, i, 5);
    r.dpf_service_name = copy_value(cxt, i, 6);
    r.attachable_version = copy_value(cxt, i, 7);
    r.desired_revision = static_cast<int>(int_value(i, 8, 0));
    r.applied_revision = static_cast<int>(int_value(i, 9, 0));
    r.attempts = static_cast<int>(int_value(i, 10, 0));
    r.desired = copy_value(cxt, i, 11);
    const char* clear = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 12);
    r.placement_clear = clear == nullptr || clear[0] == 't';
    r.render_error = copy_value(cxt, i, 13);
  }
}

struct CompleteArgs {
  const Completion* c;
  char** result;
};

void complete_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<CompleteArgs*>(arg);
  const Completion* c = a->c;
  char sv[32], applied[16], status[16], retry[32], gen[32];
  snprintf(sv, sizeof sv, "%lld", static_cast<long long>(c->state_version));
  snprintf(applied, sizeof applied, "%d", c->applied_revision);
  snprintf(status, sizeof status, "%d", c->http_status);
  snprintf(retry, sizeof retry, "%.3f", c->retry_after_s);
  snprintf(gen, sizeof gen, "%lld", static_cast<long long>(c->observed_generation));
  const char* args[] = {c->service_id,
                        sv,
                        c->lease_token,
                        c->outcome,
                        c->new_state,
                        c->reason,
                        c->message,
                        c->applied_revision > 0 ? applied : nullptr,
                        c->http_status > 0 ? status : nullptr,
                        c->retry_after_s >= 0 ? retry : nullptr,
                        c->observed_generation >= 0 ? gen : nullptr,
                        c->observed_resource_version};
  exec_text_args(
      "SELECT extsvc.complete_reconciliation($1::uuid, $2::bigint, $3::uuid, $4, $5, $6, $7, "
      "$8::int, $9::int, $10::float8, $11::bigint, $12)",
      12, args, SPI_OK_SELECT);
  *a->result = SPI_processed > 0 ? copy_value(cxt, 0, 1) : nullptr;
}

struct NextDue {
  bool any;
  double seconds;
};

void next_due_body(MemoryContext, void* arg) {
  exec_text_args(
      "SELECT extract(epoch FROM min(t) - now())::float8 FROM ("
      " SELECT greatest(next_due_at, coalesce(lease_expires_at, next_due_at)) AS t"
      "   FROM extsvc.dpf_extension_service_reconciliations WHERE next_due_at IS NOT NULL"
      " UNION ALL"
      " SELECT greatest(next_due_at, coalesce(lease_expires_at, next_due_at))"
      "   FROM extsvc.dpu_reconciliations WHERE next_due_at IS NOT NULL) due",
      0, nullptr, SPI_OK_SELECT);
  char* v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
  auto* out = static_cast<NextDue*>(arg);
  out->any = v != nullptr;
  out->seconds = v ? strtod(v, nullptr) : 0.0;
}

void snapshot_body(MemoryContext cxt, void* arg) {
  auto* out = static_cast<SnapshotResult*>(arg);
  exec_text_args(
      "SELECT s.service_id::text, s.dpf_service_name, r.attachable_version, s.desired::text "
      "FROM extsvc.resync_snapshot() s JOIN extsvc.service_records r USING (service_id)",
      0, nullptr, SPI_OK_SELECT);
  int n = static_cast<int>(SPI_processed);
  out->count = n;
  out->rows = static_cast<SnapshotRow*>(MemoryContextAllocZero(cxt, sizeof(SnapshotRow) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    out->rows[i].service_id = copy_value(cxt, i, 1);
    out->rows[i].dpf_service_name = copy_value(cxt, i, 2);
    out->rows[i].attachable_version = copy_value(cxt, i, 3);
    out->rows[i].desired = copy_value(cxt, i, 4);
  }
  exec_text_args(
      "SELECT dpf_service_name FROM extsvc.service_records "
      "WHERE service_type = 'DPF_HELM_CHART' AND lifecycle_state <> 'DELETED'",
      0, nullptr, SPI_OK_SELECT);
  n = static_cast<int>(SPI_processed);
  out->known_count = n;
  out->known_names = static_cast<char**>(MemoryContextAllocZero(cxt, sizeof(char*) * (n + 1)));
  for (int i = 0; i < n; ++i) out->known_names[i] = copy_value(cxt, i, 1);
}

struct DriftArgs {
  const char* service_id;
  const char* detail;
};

void mark_drift_body(MemoryContext, void* arg) {
  auto* a = static_cast<DriftArgs*>(arg);
  const char* args[] = {a->service_id, a->detail};
  exec_text_args("SELECT extsvc.mark_drift($1::uuid, $2)", 2, args, SPI_OK_SELECT);
}

struct DpuClaimArgs {
  const char* worker;
  char batch[16];
  char lease[16];
  DpuClaimResult* out;
};

void claim_dpus_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<DpuClaimArgs*>(arg);
  DpuClaimResult* out = a->out;
  const char* args[] = {a->worker, a->batch, a->lease};
  exec_text_args(
      "SELECT dpu_machine_id::text, state_version, lease_token::text, dpu_device_name, "
      "dpu_node_name, deregistered, attempts, to_jsonb(wanted_keys)::text, items::text "
      "FROM extsvc.claim_dpu_reconciliations($1, $2::int, $3::int)",
      3, args, SPI_OK_SELECT);
  const int n = static_cast<int>(SPI_processed);
  out->count = n;
  out->rows = static_cast<ClaimedDpu*>(MemoryContextAllocZero(cxt, sizeof(ClaimedDpu) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    ClaimedDpu& r = out->rows[i];
    r.dpu_machine_id = copy_value(cxt, i, 1);
    r.state_version = int_value(i, 2, 0);
    r.lease_token = copy_value(cxt, i, 3);
    r.device_name = copy_value(cxt, i, 4);
    r.node_name = copy_value(cxt, i, 5);
    const char* dereg = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 6);
    r.deregistered = dereg != nullptr && dereg[0] == 't';
    r.attempts = static_cast<int>(int_value(i, 7, 0));
    r.wanted_keys = copy_value(cxt, i, 8);
    r.items = copy_value(cxt, i, 9);
  }
}

struct CompleteDpuArgs {
  const DpuCompletion* c;
  char** result;
};

void complete_dpu_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<CompleteDpuArgs*>(arg);
  const DpuCompletion* c = a->c;
  char sv[32], status[16], retry[32];
  snprintf(sv, sizeof sv, "%lld", static_cast<long long>(c->state_version));
  snprintf(status, sizeof status, "%d", c->http_status);
  snprintf(retry, sizeof retry, "%.3f", c->retry_after_s);
  const char* args[] = {c->dpu_machine_id,
                        sv,
                        c->lease_token,
                        c->outcome,
                        c->results,
                        c->message,
                        c->http_status > 0 ? status : nullptr,
                        c->retry_after_s >= 0 ? retry : nullptr,
                        c->observation,
                        c->keep_polling ? "true" : "false"};
  exec_text_args(
      "SELECT extsvc.complete_dpu_reconciliation($1::uuid, $2::bigint, $3::uuid, $4, $5::jsonb, "
      "$6, $7::int, $8::float8, $9::jsonb, $10::boolean)",
      10, args, SPI_OK_SELECT);
  *a->result = SPI_processed > 0 ? copy_value(cxt, 0, 1) : nullptr;
}

void record_dpf_body(MemoryContext, void* arg) {
  const char* args[] = {static_cast<const char*>(arg)};
  exec_text_args("SELECT extsvc.record_dpf_status($1::jsonb)", 1, args, SPI_OK_SELECT);
}

void mark_dpus_due_body(MemoryContext, void* arg) {
  exec_text_args("SELECT extsvc.mark_dpus_due()", 0, nullptr, SPI_OK_SELECT);
  if (arg != nullptr) *static_cast<int*>(arg) = static_cast<int>(int_value(0, 1, 0));
}

struct RenewArgs {
  const char* worker;
  const char* tokens;
  char lease[16];
  char** renewed;
};

void renew_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<RenewArgs*>(arg);
  const char* args[] = {a->worker, a->tokens, a->lease};
  exec_text_args(
      "SELECT coalesce(string_agg(t::text, ' '), '') FROM extsvc.renew_leases($1, $2::uuid[], "
      "$3::int) t",
      3, args, SPI_OK_SELECT);
  *a->renewed = copy_value(cxt, 0, 1);
}

struct ReleaseArgs {
  const char* worker;
  int* released;
};

void release_body(MemoryContext, void* arg) {
  auto* a = static_cast<ReleaseArgs*>(arg);
  const char* args[] = {a->worker};
  exec_text_args("SELECT extsvc.release_leases($1)", 1, args, SPI_OK_SELECT);
  *a->released = static_cast<int>(int_value(0, 1, 0));
}

struct OrphanArgs {
  const char* names;
  char*** orphans;
  int* count;
};

void orphans_body(MemoryContext cxt, void* arg) {
  auto* a = static_cast<OrphanArgs*>(arg);
  const char* args[] = {a->names};
  exec_text_args("SELECT n FROM extsvc.orphaned_dpuservices($1::text[]) n", 1, args, SPI_OK_SELECT);
  const int n = static_cast<int>(SPI_processed);
  *a->count = n;
  *a->orphans = static_cast<char**>(MemoryContextAllocZero(cxt, sizeof(char*) * (n + 1)));
  for (int i = 0; i < n; ++i) (*a->orphans)[i] = copy_value(cxt, i, 1);
}

}  // namespace

bool spi_claim_dpus(MemoryContext cxt, const char* worker, int batch, int lease_s,
                    DpuClaimResult* out, char** error) {
  DpuClaimArgs a{};
  a.worker = worker;
  snprintf(a.batch, sizeof a.batch, "%d", batch);
  snprintf(a.lease, sizeof a.lease, "%d", lease_s);
  a.out = out;
  out->count = 0;
  out->rows = nullptr;
  return run_transaction("nico_extsvc: claim DPUs", claim_dpus_body, cxt, &a, error);
}

bool spi_complete_dpu(MemoryContext cxt, const DpuCompletion* c, char** result, char** error) {
  CompleteDpuArgs a{c, result};
  *result = nullptr;
  return run_transaction("nico_extsvc: complete DPU pass", complete_dpu_body, cxt, &a, error);
}

bool spi_record_dpf_status(MemoryContext cxt, const char* statuses, char** error) {
  return run_transaction("nico_extsvc: record DPF status", record_dpf_body, cxt,
                         const_cast<char*>(statuses), error);
}

bool spi_mark_dpus_due(MemoryContext cxt, int* marked, char** error) {
  *marked = 0;
  return run_transaction("nico_extsvc: mark DPUs due", mark_dpus_due_body, cxt, marked, error);
}

bool spi_renew_leases(MemoryContext cxt, const char* worker, const char* tokens, int lease_s,
                      char** renewed, char** error) {
  RenewArgs a{};
  a.worker = worker;
  a.tokens = tokens;
  snprintf(a.lease, sizeof a.lease, "%d", lease_s);
  a.renewed = renewed;
  *renewed = nullptr;
  return run_transaction("nico_extsvc: renew leases", renew_body, cxt, &a, error);
}

bool spi_release_leases(MemoryContext cxt, const char* worker, int* released, char** error) {
  ReleaseArgs a{worker, released};
  *released = 0;
  return run_transaction("nico_extsvc: release leases", release_body, cxt, &a, error);
}

bool spi_orphaned_dpuservices(MemoryContext cxt, const char* names, char*** orphans, int* count,
                              char** error) {
  OrphanArgs a{names, orphans, count};
  *orphans = nullptr;
  *count = 0;
  return run_transaction("nico_extsvc: orphaned DPUServices", orphans_body, cxt, &a, error);
}

bool spi_extension_version(MemoryContext cxt, char** version, char** error) {
  *version = nullptr;
  VersionArgs a{cxt, version};
  return run_transaction("nico_extsvc: check extension", installed_body, cxt, &a, error);
}

bool spi_claim(MemoryContext cxt, const char* worker, int batch, int lease_s, ClaimResult* out,
               char** error) {
  ClaimArgs a{};
  a.worker = worker;
  snprintf(a.batch, sizeof a.batch, "%d", batch);
  snprintf(a.lease, sizeof a.lease, "%d", lease_s);
  a.out = out;
  out->count = 0;
  out->rows = nullptr;
  return run_transaction("nico_extsvc: claim reconciliations", claim_body, cxt, &a, error);
}

bool spi_complete(MemoryContext cxt, const Completion* c, char** result, char** error) {
  CompleteArgs a{c, result};
  *result = nullptr;
  return run_transaction("nico_extsvc: complete reconciliation", complete_body, cxt, &a, error);
}

bool spi_next_due(MemoryContext cxt, bool* any, double* seconds, char** error) {
  NextDue d{false, 0.0};
  const bool ok = run_transaction("nico_extsvc: next due", next_due_body, cxt, &d, error);
  *any = d.any;
  *seconds = d.seconds;
  return ok;
}

bool spi_resync_snapshot(MemoryContext cxt, SnapshotResult* out, char** error) {
  out->count = 0;
  out->rows = nullptr;
  out->known_count = 0;
  out->known_names = nullptr;
  return run_transaction("nico_extsvc: resync snapshot", snapshot_body, cxt, out, error);
}

bool spi_mark_drift(MemoryContext cxt, const char* service_id, const char* detail, char** error) {
  DriftArgs a{service_id, detail};
  return run_transaction("nico_extsvc: mark drift", mark_drift_body, cxt, &a, error);
}

}  // namespace extsvc::pg
