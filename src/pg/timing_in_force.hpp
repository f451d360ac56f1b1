// The timing settings a process uses (issue 25): the configuration's when they work together
// (core/site_timing.hpp); after a reload that breaks a rule, the previous set stays in force and
// the reason is logged once and shown as worker_status().settings_error. A set that does not work
// at server start leaves nothing in force: the workers write nothing and say so.
#pragma once

#include "pg_prelude.hpp"

#include "core/site_timing.hpp"

namespace extsvc::pg {

// Reads the GUCs; the first call (start) and each call after ProcessConfigFile (reload).
// log: this process reports a refused set (the lease process; the workers adopt silently).
void adopt_timing(bool log);
// The set in force; usable false when none is (a bad set at start).
const core::SiteTiming& timing_in_force();
bool timing_usable();
// Why the configured set is not in force ("" when it is), for worker_status and the log.
const char* timing_refusal();

// http_timeout + lease_margin of the set in force, in milliseconds (the per-call budget).
inline long call_budget_ms() {
  return timing_in_force().call_budget_ms();
}

}  // namespace extsvc::pg
