// The worker's database side: each function runs one short transaction
// through SPI and copies its results into a caller-owned memory context.
// Errors are caught here (PG_TRY) and returned as text, so the worker loop
// never sees a longjmp. No C++ objects with destructors live in these frames.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

struct ClaimedRow {
  char* service_id;
  int64 state_version;
  char* lease_token;
  char* lifecycle_state;
  char* deployment_scope;
  char* dpf_service_name;
  char* attachable_version;
  int desired_revision;
  int applied_revision;  // 0 = none
  int attempts;
  char* desired;  // rendered DPUService JSON; NULL when it could not be rendered
  bool placement_clear;
  char* render_error;  // why it could not be rendered, or NULL
};

struct ClaimResult {
  int count;
  ClaimedRow* rows;
};

struct Completion {
  const char* service_id;
  int64 state_version;
  const char* lease_token;
  const char* outcome;
  const char* new_state;  // NULL when not a transition
  const char* reason;
  const char* message;
  int applied_revision;       // 0 = NULL
  int http_status;            // 0 = NULL
  double retry_after_s;       // < 0 = NULL
  int64 observed_generation;  // < 0 = NULL
  const char* observed_resource_version;
};

struct SnapshotRow {
  char* service_id;
  char* dpf_service_name;
  char* attachable_version;
  char* desired;
};

struct SnapshotResult {
  int count;
  SnapshotRow* rows;
  int known_count;
  char** known_names;  // every non-DELETED DPF service name (for orphan reports)
};

struct ClaimedDpu {
  char* dpu_machine_id;
  int64 state_version;
  char* lease_token;
  char* device_name;
  char* node_name;
  bool deregistered;
  int attempts;
  char* wanted_keys;  // JSON array of strings
  char* items;        // JSON array (see extsvc.claim_dpu_reconciliations)
};

struct DpuClaimResult {
  int count;
  ClaimedDpu* rows;
};

struct DpuCompletion {
  const char* dpu_machine_id;
  int64 state_version;
  const char* lease_token;
  const char* outcome;  // observed | retry
  const char* results;  // JSON
  const char* message;
  int http_status;          // 0 = NULL
  double retry_after_s;     // < 0 = NULL
  const char* observation;  // JSON or NULL
  bool keep_polling;
};

// All return false and set *error (allocated in cxt) when the transaction failed.
// *version: the installed version of extension nico_extsvc, NULL when it is
// not installed in this database.
bool spi_extension_version(MemoryContext cxt, char** version, char** error);
bool spi_claim(MemoryContext cxt, const char* worker, int batch, int lease_s, ClaimResult* out,
               char** error);
bool spi_complete(MemoryContext cxt, const Completion* c, char** result, char** error);
// Seconds until the earliest due row becomes claimable (*any false: none);
// negative when one is overdue.
bool spi_next_due(MemoryContext cxt, bool* any, double* seconds, char** error);
bool spi_resync_snapshot(MemoryContext cxt, SnapshotResult* out, char** error);
bool spi_mark_drift(MemoryContext cxt, const char* service_id, const char* detail, char** error);
bool spi_claim_dpus(MemoryContext cxt, const char* worker, int batch, int lease_s,
                    DpuClaimResult* out, char** error);
bool spi_complete_dpu(MemoryContext cxt, const DpuCompletion* c, char** result, char** error);
// *marked: how many DPUs were made due for label re-derivation.
bool spi_mark_dpus_due(MemoryContext cxt, int* marked, char** error);
// Renews the leases of tokens (a PostgreSQL uuid[] literal, "{a,b}");
// *renewed (allocated in cxt) is a string with every renewed token, or "".
bool spi_renew_leases(MemoryContext cxt, const char* worker, const char* tokens, int lease_s,
                      char** renewed, char** error);
// Frees the leases held under this worker's name (its previous process).
bool spi_release_leases(MemoryContext cxt, const char* worker, int* released, char** error);
// names: text[] literal; *orphans: NULL-terminated array of the orphaned ones.
bool spi_orphaned_dpuservices(MemoryContext cxt, const char* names, char*** orphans, int* count,
                              char** error);
// statuses: JSON array for extsvc.record_dpf_status().
bool spi_record_dpf_status(MemoryContext cxt, const char* statuses, char** error);

}  // namespace extsvc::pg
