// Module entry: GUCs, shared memory and background-worker registration.
#include "pg_prelude.hpp"

#include "gucs.hpp"
#include "metrics.hpp"
#include "site_state.hpp"
#include "shared_memory.hpp"
#include "worker.hpp"

extern "C" {
PG_MODULE_MAGIC;
PGDLLEXPORT void _PG_init(void);
}

namespace {

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

void on_shmem_request() {
  if (prev_shmem_request_hook) prev_shmem_request_hook();
  extsvc::pg::request_shared_memory();
  extsvc::pg::request_metrics_memory();
  extsvc::pg::request_site_memory();
}

void on_shmem_startup() {
  if (prev_shmem_startup_hook) prev_shmem_startup_hook();
  extsvc::pg::attach_shared_memory();
  extsvc::pg::attach_metrics_memory();
  extsvc::pg::attach_site_memory();
}

}  // namespace

extern "C" void _PG_init(void) {
  extsvc::pg::define_gucs();
  // Without preloading, the SQL functions work but there is no worker and no
  // shared memory; worker-only functions say so with a hint.
  if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade) return;

  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = on_shmem_request;
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = on_shmem_startup;

  extsvc::pg::register_workers();
}
