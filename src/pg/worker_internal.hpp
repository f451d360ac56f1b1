// What the worker's files share: the process's runtime, its slot and name,
// and the steps of one loop iteration (worker_main.cpp runs them).
#pragma once

#include "pg_prelude.hpp"

#include <chrono>
#include <set>
#include <string>

#include "controller/resync.hpp"
#include "controller/runtime.hpp"
#include "queue_access.hpp"
#include "shared_memory.hpp"

namespace extsvc::pg {

// Owned; replaced on SIGHUP. Null while unconfigured or after a failed
// rebuild (the loop then idles and rebuilds): never dereferenced when null.
extern controller::Runtime* g_runtime;
extern int g_slot;
extern char g_worker_name[64];

// The runtime's settings from the GUCs (the timing settings in force), for this site and with this
// User-Agent (worker_main.cpp; the lease process builds its client from them too).
controller::Settings runtime_settings(const char* site_id, const char* user_agent);

// The lease of a claim, in whole seconds (extsvc.lease_time in force, rounded up).
int lease_seconds();
// Claims one batch of the queue and works it (renewing leases as the batch
// goes on); returns how many rows were claimed.
int work_batch(MemoryContext cxt, Queue queue, WorkerSlot* slot);
// Works the creates handed over to this worker at commit (hand_over.hpp) as claimed rows;
// returns how many.
int work_handed_over(MemoryContext cxt, WorkerSlot* slot);
// Works rows claimed already (by work_batch, or by the watcher's publication), renewing their
// leases as the batch goes on; claimed_from: a moment before the claim's transaction began (the
// lease's local start, never later than the database's).
void work_rows(MemoryContext cxt, Queue queue, WorkerSlot* slot, const QueueBatch& batch,
               std::chrono::steady_clock::time_point claimed_from);

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
// The DPU rows the watcher's publication claimed, for watch_work_claimed in the same iteration.
struct ClaimedByEvents {
  QueueBatch batch{};
  std::chrono::steady_clock::time_point claimed_from{};
};
// Step one of the watcher's iteration: pumps, takes what changed in the caches and publishes it
// in one transaction (the rows it concerns made due, and the DPU rows among them claimed while
// this worker may work them), then the drift check of the changed services. What could not be
// published is kept for the next call. False when the publication failed.
bool watch_publish(MemoryContext cxt, WorkerSlot* slot, ClaimedByEvents* claimed);
// Step two: works the DPU rows the publication claimed.
void watch_work_claimed(MemoryContext cxt, WorkerSlot* slot, const ClaimedByEvents& claimed);
// Something changed in the caches since the last publication (it arrived while the batches ran).
bool watch_changes_pending();
// Waits for the latch, a cache socket, the caches' timers or timeout_ms.
void watch_wait(long timeout_ms);
// when the last wait of watch_wait returned (issue 26, part 4: the claim log splits the wake)
extern TimestampTz g_wait_returned_us;
// Forgets the wait set (the runtime and its caches were rebuilt).
void watch_reset();
// Publishes the informers' state to shared memory (extsvc.watch_status()).
void watch_report();

}  // namespace extsvc::pg
