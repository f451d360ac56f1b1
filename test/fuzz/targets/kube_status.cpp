// Kubernetes error responses: Status bodies, Retry-After values, redaction
// and sanitizing of server text. Input layout: two bytes choose the HTTP
// status (300-599), then "<Retry-After value>\n<response body>".
// Properties: nothing throws; Error fields are bounded, valid UTF-8 without
// line breaks; Retry-After is finite and non-negative; redact() is
// idempotent; sanitize_utf8() never exceeds its bound.
#include <cmath>
#include <ctime>
#include <exception>
#include <string>

#include "core/utf8.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"
#include "kube/detail/internal.hpp"
#include "kube/error.hpp"

namespace extsvc::fuzz {

namespace {

bool clean_text(std::string_view s, std::size_t max_bytes) {
  if (s.size() > max_bytes || core::first_invalid_utf8(s)) return false;
  for (char c : s)
    if (c == '\n' || c == '\r' || c == '\0') return false;
  return true;
}

constexpr std::time_t kNow = 1767225600;  // 2026-01-01T00:00:00Z

}  // namespace

int kube_status(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const int status = 300 + ((data[0] << 8) | data[1]) % 300;
  std::string_view rest = as_text(data + 2, size - 2);
  std::string_view retry_header;
  std::string_view body = rest;
  if (const auto nl = rest.find('\n'); nl != std::string_view::npos) {
    retry_header = rest.substr(0, nl);
    body = rest.substr(nl + 1);
  }
  try {
    const auto ra = kube::detail::parse_retry_after(retry_header, kNow);
    if (ra) FUZZ_CHECK(std::isfinite(*ra) && *ra >= 0);

    const kube::Error e = kube::detail::error_from_response(status, body, ra);
    FUZZ_CHECK(e.http_status == status);
    FUZZ_CHECK(e.kind != kube::ErrorKind::kNone);
    FUZZ_CHECK(clean_text(e.message, 512));
    FUZZ_CHECK(clean_text(e.reason, 64));
    if (e.retry_after_s) FUZZ_CHECK(std::isfinite(*e.retry_after_s) && *e.retry_after_s >= 0);
    for (const auto& [field, message] : e.causes) {
      FUZZ_CHECK(clean_text(field, 1024));
      FUZZ_CHECK(clean_text(message, 1024));
    }
    (void)kube::is_transient(e);
    const std::string line = kube::describe(e);
    FUZZ_CHECK(!core::first_invalid_utf8(line));
    FUZZ_CHECK(line.find('\n') == std::string::npos);

    const std::string once = kube::redact(body);
    FUZZ_CHECK(kube::redact(once) == once);

    const std::size_t bound = size > 2 ? data[2] : 0;
    const std::string s = kube::detail::sanitize_utf8(body, bound);
    FUZZ_CHECK(s.size() <= bound);
    FUZZ_CHECK(!core::first_invalid_utf8(s));
  } catch (const std::exception& ex) {
    fail(__FILE__, __LINE__, ex.what());
  }
  return 0;
}

}  // namespace extsvc::fuzz
