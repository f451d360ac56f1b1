#include "pg_prelude.hpp"

#include "timing_in_force.hpp"

#include <string>

#include "guard.hpp"
#include "gucs.hpp"

namespace extsvc::pg {

namespace {

core::SiteTiming g_in_force;
bool g_usable = false;
char g_refusal[512];

core::SiteTiming from_gucs() {
  core::SiteTiming t;
  t.http_timeout_ms = gucs.http_timeout_ms;
  t.lease_margin_ms = gucs.lease_margin_ms;
  t.lease_time_ms = static_cast<long>(gucs.lease_time_s) * 1000;
  t.lease_duration_ms = gucs.lease_duration_ms;
  t.renew_deadline_ms = gucs.lease_renew_deadline_ms;
  t.retry_period_ms = gucs.lease_retry_period_ms;
  return t;
}

}  // namespace

void adopt_timing(bool log) {
  const core::SiteTiming wanted = from_gucs();
  char why[512] = "";
  PendingError err;
  cpp_call(err, [&] {
    if (auto e = core::timing_error(wanted)) snprintf(why, sizeof why, "%s", e->c_str());
  });
  if (err.sqlstate != 0) strlcpy(why, err.message, sizeof why);
  if (why[0] == '\0') {
    g_in_force = wanted;
    g_usable = true;
    g_refusal[0] = '\0';
    return;
  }
  const bool repeated = strcmp(why, g_refusal) == 0;
  strlcpy(g_refusal, why, sizeof g_refusal);
  if (!log || repeated) return;
  if (g_usable)
    ereport(WARNING,
            (errmsg("nico_extsvc: the reloaded timing settings do not work together; the "
                    "previous ones stay in force"),
             errdetail("%s.", why),
             errhint("In force: extsvc.http_timeout %ld ms, extsvc.lease_margin %ld ms, "
                     "extsvc.lease_time %ld ms, extsvc.lease_duration %ld ms, "
                     "extsvc.lease_renew_deadline %ld ms, extsvc.lease_retry_period %ld ms.",
                     g_in_force.http_timeout_ms, g_in_force.lease_margin_ms,
                     g_in_force.lease_time_ms, g_in_force.lease_duration_ms,
                     g_in_force.renew_deadline_ms, g_in_force.retry_period_ms)));
  else
    ereport(WARNING, (errmsg("nico_extsvc: the timing settings do not work together; the "
                             "workers write nothing"),
                      errdetail("%s.", why), errhint("Fix them in postgresql.conf and reload.")));
}

const core::SiteTiming& timing_in_force() {
  return g_in_force;
}

bool timing_usable() {
  return g_usable;
}

const char* timing_refusal() {
  return g_refusal;
}

}  // namespace extsvc::pg
