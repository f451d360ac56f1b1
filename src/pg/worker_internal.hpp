// What the worker's files share: the process's runtime, its slot and name,
// and the steps of one loop iteration (worker_main.cpp runs them).
#pragma once

#include "pg_prelude.hpp"

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
// goes on); returns how many rows were claimed.
int work_batch(MemoryContext cxt, Queue queue, WorkerSlot* slot);

// Drift detection and orphan cleanup: one LIST, compare, mark drifted
// services due. False when the snapshot or the LIST failed.
bool resync(MemoryContext cxt, WorkerSlot* slot);

// Records DPF statuses (JSON array text; nothing when empty).
void record_dpf(MemoryContext cxt, const char* statuses);

}  // namespace extsvc::pg
