#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

// The extension version this library was built for (default_version of the
// control file, through CMake). The workers and the lease process run only
// against SQL objects of exactly this version.
inline constexpr const char* kLibraryVersion = EXTSVC_VERSION;

// Registers extsvc.workers static background workers and, with at least one, the lease process
// (issue 25: it holds the site Lease for them) (from _PG_init).
void register_workers();

}  // namespace extsvc::pg

extern "C" {
// Entry point of one worker; the Datum is its slot index.
PGDLLEXPORT void nico_extsvc_worker_main(Datum arg);
// Entry point of the lease process (lease_worker.cpp).
PGDLLEXPORT void nico_extsvc_lease_main(Datum arg);
}
