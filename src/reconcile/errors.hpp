// The reconcilers' classification of API failures (SPEC 2.5): what waits and
// retries, what fails the service for good.
#pragma once

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

// Kubernetes' fieldValidation=Strict: unknown fields are refused with 400
// instead of being dropped with a Warning header.
inline constexpr const char* kStrict = "?fieldValidation=Strict";

}  // namespace extsvc::reconcile
