// The site's statements (issue 25; sql/parts/74_site.sql): the database's identity, the registry
// of placement keys, the resync's census and the orphan guard's pending list. Each runs in one
// short worker transaction (queue_access.hpp's worker_transaction); results are copied into the
// caller's memory context, errors come back as text.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

struct IdentityStatus {
  bool matches;
  char* current_identity;
  char* recorded;
};
bool database_identity_status(MemoryContext cxt, IdentityStatus* out, char** error);

bool placement_key_registry_version(MemoryContext cxt, char** version, char** error);
// *keys: *count registered keys.
bool placement_key_registry(MemoryContext cxt, char*** keys, int* count, char** error);
bool forget_placement_keys(MemoryContext cxt, const char* const* present, int n, int* forgotten,
                           char** error);

struct CensusRows {
  int count;
  char** devices;
  char** wanted;  // each a text[] in its text form ("{a,b}")
  char** explained;
};
bool dpu_label_census(MemoryContext cxt, CensusRows* out, char** error);
bool live_service_count(MemoryContext cxt, int64* count, char** error);

// entries: a JSON array of {name, uid, detail}; *names/*uids: the confirmed ones.
bool record_pending_orphans(MemoryContext cxt, const char* kind, const char* entries, char*** names,
                            char*** uids, int* count, char** error);

}  // namespace extsvc::pg
