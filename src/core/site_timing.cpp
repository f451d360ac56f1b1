#include "core/site_timing.hpp"

#include <cstdio>

namespace extsvc::core {

std::string duration_text(long ms) {
  char buf[48];
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%ld ms", ms);
  else if (ms % 1000 == 0)
    std::snprintf(buf, sizeof buf, "%ld s", ms / 1000);
  else
    std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::optional<std::string> timing_error(const SiteTiming& t) {
  const std::string budget =
      "extsvc.http_timeout + extsvc.lease_margin (" + duration_text(t.http_timeout_ms) + " + " +
      duration_text(t.lease_margin_ms) + " = " + duration_text(t.call_budget_ms()) + ")";
  if (t.lease_time_ms <= t.call_budget_ms())
    return "extsvc.lease_time (" + duration_text(t.lease_time_ms) + ") must exceed " + budget +
           ": a claimed row's lease would not cover one call, and every call would be fenced";
  if (t.lease_duration_ms <= t.call_budget_ms())
    return "extsvc.lease_duration (" + duration_text(t.lease_duration_ms) + ") must exceed " +
           budget + ": the site Lease would not cover one call, and every call would be fenced";
  if (t.renew_deadline_ms >= t.lease_duration_ms)
    return "extsvc.lease_renew_deadline (" + duration_text(t.renew_deadline_ms) +
           ") must be below extsvc.lease_duration (" + duration_text(t.lease_duration_ms) +
           "): the holder must stop writing before another candidate may take the Lease";
  if (t.retry_period_ms >= t.renew_deadline_ms)
    return "extsvc.lease_retry_period (" + duration_text(t.retry_period_ms) +
           ") must be below extsvc.lease_renew_deadline (" + duration_text(t.renew_deadline_ms) +
           "): the holder must try to renew more than once before it gives up";
  return std::nullopt;
}

}  // namespace extsvc::core
