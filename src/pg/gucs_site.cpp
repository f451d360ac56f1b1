// The check hooks of the issue 25 settings (gucs.hpp): extsvc.site_id, and the timing settings
// that must work together, checked against the values in force when a statement sets one.
#include "pg_prelude.hpp"

#include <optional>
#include <string>

#include "core/site.hpp"
#include "core/site_timing.hpp"
#include "gucs.hpp"

namespace extsvc::pg {

namespace {

bool g_defined = false;

enum class Timing { kHttp, kMargin, kLeaseTime, kDuration, kRenew, kRetry };

// C++ strings may throw (bad_alloc) and nothing may escape into PostgreSQL's frames.
template <class F>
std::optional<std::string> guarded(F&& f) {
  try {
    return f();
  } catch (...) {
    return std::string("the settings could not be checked (out of memory)");
  }
}

bool check_timing(Timing which, int value) {
  // Only where a statement sets the value (ALTER SYSTEM, SET): the others are then the values in
  // force. Reading the configuration file (server start, reload) sets them one by one in file
  // order, so a check here would judge a new value against old neighbours; there the processes
  // check the whole set (site_timing_in_force) and keep the previous one when it does not work.
  if (!g_defined || !IsTransactionState()) return true;
  core::SiteTiming t;
  t.http_timeout_ms = gucs.http_timeout_ms;
  t.lease_margin_ms = gucs.lease_margin_ms;
  t.lease_time_ms = static_cast<long>(gucs.lease_time_s) * 1000;
  t.lease_duration_ms = gucs.lease_duration_ms;
  t.renew_deadline_ms = gucs.lease_renew_deadline_ms;
  t.retry_period_ms = gucs.lease_retry_period_ms;
  switch (which) {
    case Timing::kHttp:
      t.http_timeout_ms = value;
      break;
    case Timing::kMargin:
      t.lease_margin_ms = value;
      break;
    case Timing::kLeaseTime:
      t.lease_time_ms = static_cast<long>(value) * 1000;
      break;
    case Timing::kDuration:
      t.lease_duration_ms = value;
      break;
    case Timing::kRenew:
      t.renew_deadline_ms = value;
      break;
    case Timing::kRetry:
      t.retry_period_ms = value;
      break;
  }
  const auto error = guarded([&] { return core::timing_error(t); });
  if (!error) return true;
  GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
  GUC_check_errmsg("%s", error->c_str());
  GUC_check_errhint(
      "The other timing settings keep their values in force; change them first (ALTER SYSTEM "
      "applies at the next reload, one setting at a time), or all together in postgresql.conf.");
  return false;
}

}  // namespace

void gucs_defined() {
  g_defined = true;
}

bool check_site_id(char** newval, void**, GucSource) {
  if (*newval == nullptr || (*newval)[0] == '\0') return true;  // unset: the worker waits
  const std::string value(*newval);
  const auto error = guarded([&] { return core::site_id_error(value); });
  if (!error) return true;
  GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
  GUC_check_errdetail("extsvc.site_id cannot be used: %s.", error->c_str());
  return false;
}

bool check_http_timeout(int* newval, void**, GucSource) {
  return check_timing(Timing::kHttp, *newval);
}
bool check_lease_margin(int* newval, void**, GucSource) {
  return check_timing(Timing::kMargin, *newval);
}
bool check_lease_time(int* newval, void**, GucSource) {
  return check_timing(Timing::kLeaseTime, *newval);
}
bool check_lease_duration(int* newval, void**, GucSource) {
  return check_timing(Timing::kDuration, *newval);
}
bool check_lease_renew_deadline(int* newval, void**, GucSource) {
  return check_timing(Timing::kRenew, *newval);
}
bool check_lease_retry_period(int* newval, void**, GucSource) {
  return check_timing(Timing::kRetry, *newval);
}

}  // namespace extsvc::pg
