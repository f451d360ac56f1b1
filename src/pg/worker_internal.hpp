// What the worker's files share: the process's runtime, its slot and name,
// and the steps of one loop iteration (worker_main.cpp runs them).
#pragma once

#include "pg_prelude.hpp"

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
// Deletes the orphan candidates of result that the database does not know.
void cleanup_orphans(MemoryContext cxt, WorkerSlot* slot, controller::ResyncResult* result,
                     char** names, int nnames);

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
