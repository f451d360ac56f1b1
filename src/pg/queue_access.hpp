// The worker's database side: the worker queue (sql/parts/76_worker_queue.sql)
// and the observation functions (77_worker_observe.sql) as typed statements,
// prepared once and kept for the life of the process, each run in one short
// transaction. Results are copied into a caller-owned memory context; a
// PostgreSQL error inside is caught and returned as text in *error, so the
// worker loop never sees a longjmp. No C++ object with a destructor lives in
// these frames.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

enum class Queue { kService, kDpu };
const char* queue_name(Queue q);  // the queue's name in SQL: service, dpu

// One claimed row: work is the wire schema's work object as JSON text.
struct QueueItem {
  char* id;
  int64 state_version;
  char* lease_token;
  char* work;
};

struct QueueBatch {
  int count;
  QueueItem* items;
};

struct ResyncSnapshot {
  int count;
  char** service_ids;
  char** works;
  int known_count;
  char** known_names;  // every non-DELETED DPF service name (for orphan reports)
};

// All return false and set *error (allocated in cxt) when the transaction failed.
// creates_only (service queue): the CREATING services alone (issue 26, part 2: in watch mode
// the watcher claims the rest, which it writes from its cache).
bool queue_claim(MemoryContext cxt, Queue q, const char* worker, int batch, int lease_s,
                 QueueBatch* out, char** error, bool creates_only = false);
// *result: applied, stale or lost.
bool queue_complete(MemoryContext cxt, Queue q, const QueueItem& item, const char* outcome,
                    char** result, char** error);
// Extends the leases of tokens still held under this worker's name;
// *renewed: the tokens renewed (an array of *nrenewed strings).
bool queue_renew(MemoryContext cxt, const char* worker, const char* const* tokens, int ntokens,
                 int lease_s, char*** renewed, int* nrenewed, char** error);
// Frees the leases held under this worker's name (its previous process).
bool queue_release(MemoryContext cxt, const char* worker, int* released, char** error);
// Seconds until the earliest row of any queue becomes claimable (*any false:
// none); negative when one is overdue.
// services_only: the service queue alone (a worker that leaves the DPU queue
// to the watcher).
bool queue_next_due(MemoryContext cxt, bool* any, double* seconds, char** error,
                    bool services_only = false);

bool resync_snapshot(MemoryContext cxt, ResyncSnapshot* out, char** error);
bool mark_drift(MemoryContext cxt, const char* service_id, const char* detail, char** error);
// *marked: how many DPUs were made due for label re-derivation.
bool mark_dpus_due(MemoryContext cxt, int* marked, char** error);
// Of names (DPUServices listed with our ownership label), those that belong
// to no live service version.
bool orphaned_dpuservices(MemoryContext cxt, const char* const* names, int n, char*** orphans,
                          int* count, char** error);
// statuses: JSON array for extsvc.record_dpf_status().
bool record_dpf_status(MemoryContext cxt, const char* statuses, char** error);
// The watcher's publication of what changed in its caches (issues 11, 24), in one transaction:
// the DELETING services among services made due (extsvc.wake_services), DPF's statuses recorded,
// the READY services among services read for the drift check, and the DPU rows that the devices,
// nodes and context services name made due and, with a worker, up to max_claims of them claimed by
// one statement (extsvc.mark_and_claim_dpus). Service ids are uuids in text form.
struct WatchChanges {
  const char* const* devices = nullptr;
  int ndevices = 0;
  const char* const* nodes = nullptr;
  int nnodes = 0;
  const char* const* services = nullptr;  // their DPUService changed
  int nservices = 0;
  bool every_deleting = false;  // a fresh cache's first list: every DELETING service is woken
  const char* const* context = nullptr;  // their context changed (FailedCreate, DPF's Ready)
  int ncontext = 0;
  const char* dpf = nullptr;     // JSON array for extsvc.record_dpf_status(); null: none
  const char* worker = nullptr;  // null: the DPU rows are marked, not claimed
  int lease_s = 60;
  int max_claims = 0;
};
struct WatchPublished {
  QueueBatch claimed;       // the DPU rows claimed for the worker, in key order
  int woken;                // DPU rows this publication made due
  ResyncSnapshot snapshot;  // the READY services among services (known_names empty)
};
bool publish_watch_changes(MemoryContext cxt, const WatchChanges& in, WatchPublished* out,
                           char** error);
// *version: the installed version of extension nico_extsvc, NULL when it is not installed in
// this database. The library's own version is kept between calls until an invalidation (see the
// .cpp), so the steady loop does not read pg_extension every iteration.
bool installed_extension_version(MemoryContext cxt, char** version, char** error);

// body(arg) in one worker transaction like every call above (timeouts, SPI connected, a
// snapshot, errors caught into *error): for the statements of other files (site_access.cpp).
// body runs PostgreSQL code only.
bool worker_transaction(const char* activity, MemoryContext cxt, char** error, void (*body)(void*),
                        void* arg);

}  // namespace extsvc::pg
