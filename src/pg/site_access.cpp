#include "pg_prelude.hpp"

#include "site_access.hpp"

#include "kept_statement.hpp"
#include "queue_access.hpp"

namespace extsvc::pg {

namespace {

Statement s_identity{
    "SELECT matches, current_identity, recorded FROM extsvc.database_identity_status()",
    0,
    {},
    nullptr};
Statement s_registry_version{"SELECT extsvc.placement_key_registry_version()", 0, {}, nullptr};
Statement s_registry{"SELECT k FROM extsvc.placement_key_registry() k", 0, {}, nullptr};
Statement s_forget{"SELECT extsvc.forget_placement_keys($1)", 1, {TEXTARRAYOID}, nullptr};
Statement s_register_orphans{
    "SELECT extsvc.register_orphan_placement_keys($1, $2)", 2, {TEXTOID, JSONBOID}, nullptr};
Statement s_census{
    "SELECT device_name, wanted, explained FROM extsvc.dpu_label_census()", 0, {}, nullptr};
Statement s_live{"SELECT extsvc.live_service_count()", 0, {}, nullptr};
Statement s_pending{
    "SELECT name, uid FROM extsvc.record_pending_orphans($1, $2)", 2, {TEXTOID, JSONBOID}, nullptr};

Datum text_array(const char* const* v, int n) {
  Datum* elems = static_cast<Datum*>(palloc(sizeof(Datum) * (n > 0 ? n : 1)));
  for (int i = 0; i < n; ++i) elems[i] = CStringGetTextDatum(v[i]);
  return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

// worker_transaction takes a plain function: each call's state travels in one of these.
struct Call {
  MemoryContext cxt;
  void* out;
  const void* in;
  const void* in2;
  int n;
};

template <void (*F)(Call&)>
void trampoline(void* arg) {
  F(*static_cast<Call*>(arg));
}

void identity_body(Call& c) {
  auto* out = static_cast<IdentityStatus*>(c.out);
  if (run(s_identity) == 0) return;
  bool isnull = true;
  const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  out->matches = !isnull && DatumGetBool(d);
  out->current_identity = text_col(c.cxt, 0, 2);
  out->recorded = text_col(c.cxt, 0, 3);
}

void registry_version_body(Call& c) {
  if (run(s_registry_version) > 0) *static_cast<char**>(c.out) = text_col(c.cxt, 0, 1);
}

struct RowsOut {
  char*** rows;
  int* count;
};

void registry_body(Call& c) {
  auto* out = static_cast<RowsOut*>(c.out);
  const int n = run(s_registry);
  *out->rows = text_rows(c.cxt, n, 1);
  *out->count = n;
}

void forget_body(Call& c) {
  const Datum args[] = {text_array(static_cast<const char* const*>(c.in), c.n)};
  int* forgotten = static_cast<int*>(c.out);
  *forgotten = 0;
  if (run(s_forget, args) > 0) {
    bool isnull = true;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull) *forgotten = DatumGetInt32(d);
  }
}

void register_orphans_body(Call& c) {
  const Datum args[] = {
      CStringGetTextDatum(static_cast<const char*>(c.in)),
      DirectFunctionCall1(jsonb_in, CStringGetDatum(static_cast<const char*>(c.in2)))};
  int* registered = static_cast<int*>(c.out);
  *registered = 0;
  if (run(s_register_orphans, args) > 0) {
    bool isnull = true;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull) *registered = DatumGetInt32(d);
  }
}

void census_body(Call& c) {
  auto* out = static_cast<CensusRows*>(c.out);
  const int n = run(s_census);
  out->devices = text_rows(c.cxt, n, 1);
  out->wanted = text_rows(c.cxt, n, 2);
  out->explained = text_rows(c.cxt, n, 3);
  out->count = n;
}

void live_body(Call& c) {
  auto* out = static_cast<int64*>(c.out);
  *out = 0;
  if (run(s_live) > 0) {
    bool isnull = true;
    const Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    if (!isnull) *out = DatumGetInt64(d);
  }
}

struct PendingOut {
  char*** names;
  char*** uids;
  int* count;
};

void pending_body(Call& c) {
  auto* out = static_cast<PendingOut*>(c.out);
  const Datum args[] = {
      CStringGetTextDatum(static_cast<const char*>(c.in)),
      DirectFunctionCall1(jsonb_in, CStringGetDatum(static_cast<const char*>(c.in2)))};
  const int n = run(s_pending, args);
  *out->names = text_rows(c.cxt, n, 1);
  *out->uids = text_rows(c.cxt, n, 2);
  *out->count = n;
}

}  // namespace

bool database_identity_status(MemoryContext cxt, IdentityStatus* out, char** error) {
  *out = IdentityStatus{false, nullptr, nullptr};
  Call c{cxt, out, nullptr, nullptr, 0};
  return worker_transaction("nico_extsvc: database identity", cxt, error, trampoline<identity_body>,
                            &c);
}

bool placement_key_registry_version(MemoryContext cxt, char** version, char** error) {
  *version = nullptr;
  Call c{cxt, version, nullptr, nullptr, 0};
  return worker_transaction("nico_extsvc: placement key registry", cxt, error,
                            trampoline<registry_version_body>, &c);
}

bool placement_key_registry(MemoryContext cxt, char*** keys, int* count, char** error) {
  *keys = nullptr;
  *count = 0;
  RowsOut out{keys, count};
  Call c{cxt, &out, nullptr, nullptr, 0};
  return worker_transaction("nico_extsvc: placement key registry", cxt, error,
                            trampoline<registry_body>, &c);
}

bool forget_placement_keys(MemoryContext cxt, const char* const* present, int n, int* forgotten,
                           char** error) {
  Call c{cxt, forgotten, present, nullptr, n};
  return worker_transaction("nico_extsvc: forget placement keys", cxt, error,
                            trampoline<forget_body>, &c);
}

bool register_orphan_placement_keys(MemoryContext cxt, const char* site_id, const char* orphans,
                                    int* registered, char** error) {
  Call c{cxt, registered, site_id, orphans, 0};
  return worker_transaction("nico_extsvc: register orphaned placement keys", cxt, error,
                            trampoline<register_orphans_body>, &c);
}

bool dpu_label_census(MemoryContext cxt, CensusRows* out, char** error) {
  *out = CensusRows{0, nullptr, nullptr, nullptr};
  Call c{cxt, out, nullptr, nullptr, 0};
  return worker_transaction("nico_extsvc: label census", cxt, error, trampoline<census_body>, &c);
}

bool live_service_count(MemoryContext cxt, int64* count, char** error) {
  Call c{cxt, count, nullptr, nullptr, 0};
  return worker_transaction("nico_extsvc: live services", cxt, error, trampoline<live_body>, &c);
}

bool record_pending_orphans(MemoryContext cxt, const char* kind, const char* entries, char*** names,
                            char*** uids, int* count, char** error) {
  *names = nullptr;
  *uids = nullptr;
  *count = 0;
  PendingOut out{names, uids, count};
  Call c{cxt, &out, kind, entries, 0};
  return worker_transaction("nico_extsvc: pending orphans", cxt, error, trampoline<pending_body>,
                            &c);
}

}  // namespace extsvc::pg
