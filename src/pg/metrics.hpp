// Worker event counters in shared memory (issue 12, docs/metrics.md): a
// core::MetricsStore in its own block, the Kubernetes client's observer that
// writes into it, and the hooks the worker calls. The block exists only when
// the library is preloaded; every hook is a no-op without it. Counters survive
// a worker restart (an error exit or SIGTERM: the postmaster restarts only
// that worker) and reset when shared memory is reinitialised (a server
// restart, or the crash restart that follows any backend killed by a signal,
// SIGKILL included).
#pragma once

#include "pg_prelude.hpp"

#include "core/metrics_store.hpp"
#include "kube/observer.hpp"

namespace extsvc::pg {

constexpr int kMetricsQueueService = 0;
constexpr int kMetricsQueueDpu = 1;

core::MetricsStore* metrics_store();  // nullptr unless preloaded
void request_metrics_memory();        // shmem_request_hook
void attach_metrics_memory();         // shmem_startup_hook

// The observer handed to every kube::Client of the worker.
kube::RequestObserver* metrics_observer();

// Worker hooks (no-ops without shared memory; never raise).
void metrics_worker_started(int slot);
void metrics_retry(int queue, const char* reason);
void metrics_resync(bool ok, double seconds);

}  // namespace extsvc::pg
