// Who this server is, for the site Lease's holderIdentity and every request's User-Agent (issue
// 25): "<system_identifier>.<timeline>/<database>/<server start>/<host:port>". The same in every
// process of the server (worker, lease process), and across a worker's restart or a crash
// restart (the postmaster's start time stays); a promoted standby differs by its timeline and
// start, a restored copy by its system identifier.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

struct ServerIdentity {
  uint64 system_identifier;
  uint32 timeline;
  char database[NAMEDATALEN];
  char started[40];      // RFC 3339, UTC, microseconds
  char host[300];        // hostname:port
  char text[512];        // the holderIdentity
  char user_agent[600];  // "nico_extsvc/<version> (<holderIdentity>)"
};

// Fills *out for the current process (a worker or the lease process, after recovery).
void server_identity(ServerIdentity* out);

}  // namespace extsvc::pg
