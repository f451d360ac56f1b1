#include "pg_prelude.hpp"

#include "server_identity.hpp"

extern "C" {
#include "access/xlog.h"
#include "postmaster/postmaster.h"
}

#include <time.h>
#include <unistd.h>

#include "gucs.hpp"

namespace extsvc::pg {

void server_identity(ServerIdentity* out) {
  memset(out, 0, sizeof *out);
  out->system_identifier = GetSystemIdentifier();
  out->timeline = RecoveryInProgress() ? 0 : GetWALInsertionTimeLine();
  strlcpy(out->database, gucs.database != nullptr ? gucs.database : "", sizeof out->database);
  // the postmaster's start (kept by a crash restart), as Unix microseconds
  const int64 us = PgStartTime + static_cast<int64>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                     SECS_PER_DAY * USECS_PER_SEC;
  const time_t secs = static_cast<time_t>(us / USECS_PER_SEC);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char started[96];
  snprintf(started, sizeof started, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           static_cast<int>(us % USECS_PER_SEC));
  strlcpy(out->started, started, sizeof out->started);
  char hostname[256];
  if (gethostname(hostname, sizeof hostname) != 0) strlcpy(hostname, "localhost", sizeof hostname);
  hostname[sizeof hostname - 1] = '\0';
  snprintf(out->host, sizeof out->host, "%s:%d", hostname, PostPortNumber);
  snprintf(out->text, sizeof out->text, "%llu.%u/%s/%s/%s",
           static_cast<unsigned long long>(out->system_identifier), out->timeline, out->database,
           out->started, out->host);
  // a header value: no control characters (a database name may hold anything)
  for (char* p = out->text; *p != '\0'; ++p)
    if (static_cast<unsigned char>(*p) < 0x20 || *p == 0x7f) *p = '?';
  snprintf(out->user_agent, sizeof out->user_agent, "nico_extsvc/%s (%s)", EXTSVC_VERSION,
           out->text);
}

}  // namespace extsvc::pg
