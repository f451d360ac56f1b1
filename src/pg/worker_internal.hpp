// What the worker's files share: the process's runtime, its slot and name,
// and the steps of one loop iteration (worker_main.cpp runs them).
#pragma once

#include "pg_prelude.hpp"

#include <set>
#include <string>

#include "controller/resync.hpp"
#include "controller/runtime.hpp"
#include "queue_access.hpp"
#include "wake.hpp"

namespace extsvc::pg {

// Owned; replaced on SIGHUP. Null while unconfigured or after a failed
// rebuild (the loop then idles and rebuilds): never dereferenced when null.
extern controller::Runtime* g_runtime;
extern int g_slot;
extern char g_worker_name[64];

// The runtime's settings from the GUCs (the timing settings in force), for this site and with this
// User-Agent (worker_main.cpp; the lease process builds its client from them too).
controller::Settings runtime_settings(const char* site_id, const char* user_agent);

// Claims one batch of the queue and works it (renewing leases as the batch
// goes on); returns how many rows were claimed. With ids: the due rows among
// them (the ones a watch event just woke), before the rest of the queue.
int work_batch(MemoryContext cxt, Queue queue, WorkerSlot* slot, const char* const* ids = nullptr,
               int nids = 0);

// Drift detection and orphan cleanup: one LIST, compare, mark drifted
// services due. False when the snapshot or the LIST failed.
bool resync(MemoryContext cxt, WorkerSlot* slot);

// Records DPF statuses (JSON array text; nothing when empty).
void record_dpf(MemoryContext cxt, const char* statuses);

// The drift check of the services a watch event concerned (snap: their
// READY rows) against the watch cache; drifted ones are made due, orphans
// deleted.
void check_drift(MemoryContext cxt, WorkerSlot* slot, const ResyncSnapshot& snap,
                 char* const* service_ids, int nservices);
// --- the orphan guard (site_guard.cpp, issue 25) ---
// Deletes the orphan candidates of result that the database does not know, within the guard:
// census (the resync) decides and records what is held back; a watch event spends what the last
// census left.
void cleanup_orphans(MemoryContext cxt, WorkerSlot* slot, controller::ResyncResult* result,
                     char** names, int nnames, bool census);
// The resync's label census, before every DPU is derived again.
void label_census(MemoryContext cxt);
// extsvc.orphan_cleanup_max, or max(10, 10 % of owned).
int64 orphan_limit(int64 owned);
// The registry of placement keys (read again when it changed); null when it cannot be read.
const std::set<std::string>* placement_registry(MemoryContext cxt);

// --- the watcher (worker_watch.cpp) ---
// This worker holds the LIST+WATCH caches: worker 0 with extsvc.watch on.
bool is_watcher();
// This worker claims the DPU queue: only the watcher in watch mode (the
// passes read its caches), once its caches of the management cluster have
// listed; every worker otherwise.
bool works_dpu_queue();
// Starts the informers (the watcher, once the worker is active).
void watch_start();
// Moves the caches along without waiting.
void watch_pump();
// Pumps, then wakes the rows that what changed concerns, and (the watcher)
// works the DPU rows it woke before the queue's backlog.
void watch_publish(MemoryContext cxt, WorkerSlot* slot);
// Claims the due rows among ids (DPU queue) and works them.
void work_woken(MemoryContext cxt, WorkerSlot* slot, char* const* ids, int n);
// Waits for the latch, a cache socket, the caches' timers or timeout_ms.
void watch_wait(long timeout_ms);
// Forgets the wait set (the runtime and its caches were rebuilt).
void watch_reset();
// Publishes the informers' state to shared memory (extsvc.watch_status()).
void watch_report();

}  // namespace extsvc::pg
