// Kubernetes metav1.Status error bodies (see dpf-api.md section 5).
#pragma once

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "resources.h"
#include "util.h"

namespace dpfsim {

struct FieldCause {
  std::string reason;   // FieldValueInvalid, FieldValueRequired, FieldValueForbidden, ...
  std::string field;    // e.g. spec.helmChart.source.repoURL
  std::string message;  // e.g. Required value
};

// An API error carries its HTTP code and the exact Status JSON text.
struct ApiError : std::exception {
  int code = 500;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  ApiError(int c, std::string b) : code(c), body(std::move(b)) {}
  const char* what() const noexcept override { return body.c_str(); }
};

std::string reason_for_code(int code);
// Generic failure Status. details may be null.
std::string status_failure_body(int code, const std::string& reason, const std::string& message,
                                const ojson& details = ojson());
ApiError make_error(int code, const std::string& reason, const std::string& message,
                    const ojson& details = ojson());

ApiError err_not_found(const ResourceInfo& ri, const std::string& name);
ApiError err_already_exists(const ResourceInfo& ri, const std::string& name, bool terminating);
ApiError err_conflict(const ResourceInfo& ri, const std::string& name);
ApiError err_conflict_msg(const ResourceInfo& ri, const std::string& name, const std::string& msg);
ApiError err_invalid(const ResourceInfo& ri, const std::string& name,
                     const std::vector<FieldCause>& causes);
ApiError err_unsupported_patch();
ApiError err_bad_request(const std::string& msg);
ApiError err_unknown_path();  // 404 "the server could not find the requested resource"
ApiError err_method_not_allowed(const std::string& msg);
ApiError err_unauthorized();
ApiError err_too_many_requests(int retry_after);
ApiError err_injected(int code, int retry_after, const std::string& message);
// 410 Expired for a LIST continue token older than the kept history (etcd3/errors.go,
// inconsistentContinue), with a token that continues from the same key at the latest version.
ApiError err_continue_expired(const std::string& new_token);
// The Status a watch sends as its one ERROR event when resourceVersion N is older than the
// window (watch_cache.go: "too old resource version: N (M)").
std::string status_watch_expired(uint64_t rv, uint64_t oldest);

// Success Status returned when an object is actually removed.
std::string status_success_body(const ResourceInfo& ri, const std::string& name,
                                const std::string& uid);

// Cause constructors with Kubernetes' message formats.
FieldCause cause_required(const std::string& field);
FieldCause cause_invalid(const std::string& field, const json& value, const std::string& detail);
FieldCause cause_forbidden(const std::string& field, const std::string& detail);
FieldCause cause_unsupported(const std::string& field, const json& value,
                             const std::vector<std::string>& allowed);
FieldCause cause_too_many(const std::string& field, size_t actual, size_t max);
FieldCause cause_too_few(const std::string& field, size_t actual, size_t min);

}  // namespace dpfsim
