// The timing settings that must work together (issue 25): a Kubernetes call starts only while
// http_timeout + lease_margin of both the row lease and the site Lease remain, and client-go's
// order lease duration > renew deadline > retry period. A set that breaks one of these would not
// fail loudly: it would fence every call. Checked when a setting is changed and at each reload.
#pragma once

#include <optional>
#include <string>

namespace extsvc::core {

struct SiteTiming {
  long http_timeout_ms = 10000;    // extsvc.http_timeout
  long lease_margin_ms = 2000;     // extsvc.lease_margin
  long lease_time_ms = 60000;      // extsvc.lease_time (a claimed row's lease)
  long lease_duration_ms = 15000;  // extsvc.lease_duration (the site Lease)
  long renew_deadline_ms = 10000;  // extsvc.lease_renew_deadline
  long retry_period_ms = 2000;     // extsvc.lease_retry_period

  long call_budget_ms() const { return http_timeout_ms + lease_margin_ms; }
  bool operator==(const SiteTiming&) const = default;
};

// The first rule the set breaks, with the arithmetic; nullopt when it works.
std::optional<std::string> timing_error(const SiteTiming& t);

// "15 s", "1.5 s", "200 ms"
std::string duration_text(long ms);

}  // namespace extsvc::core
