// The reconcilers' classification of API failures (SPEC 2.5): what waits and
// retries, what fails the service for good.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/dpf_status.hpp"
#include "kube/client.hpp"
#include "kube/error.hpp"

namespace extsvc::reconcile {

// Retry with backoff: everything the client calls transient, plus a 403 (RBAC
// may not be granted yet) and a 2xx whose body is not the expected JSON (a
// proxy or a half-started API server). Everything else is permanent.
inline bool retryable(const kube::Error& e) {
  if (kube::is_transient(e)) return true;
  if (e.kind == kube::ErrorKind::kForbidden) return true;
  return e.kind == kube::ErrorKind::kOther && e.reason == "InvalidResponse";
}

// The reason a retried pass is counted under (extsvc_retries_total{reason},
// docs/metrics.md): a static string, one of core::MetricsStore's vocabulary.
inline const char* retry_reason(const kube::Error& e) {
  // the client's own refusal to call without a token (its file is unreadable): not a 401
  if (e.reason == "TokenUnavailable") return "token_unavailable";
  switch (e.kind) {
    case kube::ErrorKind::kTransport:
      return "transport";
    case kube::ErrorKind::kTimeout:
      return "timeout";
    case kube::ErrorKind::kServerError:
      return "server_error";
    case kube::ErrorKind::kTooManyRequests:
      return "too_many_requests";
    case kube::ErrorKind::kConflict:
      return "conflict";
    case kube::ErrorKind::kUnauthorized:
      return "unauthorized";
    case kube::ErrorKind::kForbidden:
      return "forbidden";
    default:
      break;
  }
  if (e.reason == "InvalidResponse") return "invalid_response";
  if (e.reason == "ResponseTooLarge") return "response_too_large";
  return "other";
}

// The API server's Warning headers (deprecations, pruned fields when a server
// ignores fieldValidation) go to the server log: they are the only trace of a
// 2xx that did not do everything that was asked.
inline void log_warnings(const kube::Response& r, std::string_view what) {
  for (const auto& w : r.warnings) spdlog::warn("{}: API warning: {}", what, kube::redact(w));
}

// Kubernetes' fieldValidation=Strict: unknown fields are refused with 400
// instead of being dropped with a Warning header.
inline constexpr const char* kStrict = "?fieldValidation=Strict";

// The fields a 400 under fieldValidation=Strict names as unknown (in the
// message or in its causes), each once; empty for any other failure.
inline std::vector<std::string> strict_refused_fields(const kube::Error& e) {
  if (e.kind != kube::ErrorKind::kBadRequest) return {};
  std::vector<std::string> fields = core::strict_unknown_fields(e.message);
  for (const auto& cause : e.causes)
    for (auto& f : core::strict_unknown_fields("strict decoding error: " + cause.second))
      if (std::find(fields.begin(), fields.end(), f) == fields.end()) fields.push_back(f);
  return fields;
}

}  // namespace extsvc::reconcile
