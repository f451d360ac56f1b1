#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

// Registers extsvc.workers static background workers (from _PG_init).
void register_workers();

}  // namespace extsvc::pg

extern "C" {
// Entry point of one worker; the Datum is its slot index.
PGDLLEXPORT void nico_extsvc_worker_main(Datum arg);
}
