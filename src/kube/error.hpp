// Typed errors of the Kubernetes REST client, and secret redaction.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace extsvc::kube {

enum class ErrorKind {
  kNone,
  kNotFound,              // 404 / reason NotFound
  kAlreadyExists,         // 409 reason AlreadyExists
  kConflict,              // 409 reason Conflict (stale resourceVersion) or other 409
  kInvalid,               // 422 / reason Invalid
  kBadRequest,            // 400
  kUnauthorized,          // 401 (after one token re-read + retry), or token file unreadable
  kForbidden,             // 403
  kTooManyRequests,       // 429
  kServerError,           // 5xx, reasons InternalError / ServiceUnavailable
  kTimeout,               // client-side timeout, or reasons Timeout / ServerTimeout
  kTransport,             // connect refused, reset, DNS, TLS failure, interrupted
  kUnsupportedMediaType,  // 415
  kMethodNotAllowed,      // 405
  kOther,                 // anything else (410 Gone, invalid config, unparsable 2xx body, ...)
};

const char* to_string(ErrorKind kind);

struct Error {
  ErrorKind kind = ErrorKind::kOther;
  int http_status = 0;  // 0 when no HTTP response was received
  std::string reason;   // Kubernetes Status reason (e.g. "NotFound"), or a client-side reason
  // Status body's message (or curl's error text), redacted, at most 512 bytes, valid UTF-8.
  std::string message;
  std::optional<double> retry_after_s;  // Retry-After header, or details.retryAfterSeconds
  std::vector<std::pair<std::string, std::string>> causes;  // details.causes: (field, message)
  // `Warning` response headers, as received (see Response::warnings); empty without a response.
  std::vector<std::string> warnings;
};

// Upper bound on the Warning header values kept per call.
inline constexpr size_t kMaxWarnings = 64;
// Upper bound on Error::retry_after_s: a Retry-After (header or details.retryAfterSeconds) larger
// than this, e.g. 1e9 or 1e13 seconds from a broken server, is clamped to it.
inline constexpr double kMaxRetryAfterSeconds = 3600;

// True when retrying later may succeed: transport errors, timeouts, 5xx, 429, 409 Conflict, and
// a response larger than the configured body limit (reason "ResponseTooLarge").
// False for 400, 404, 405, 409 AlreadyExists, 415, 422, 403 and kOther.
// 401 is treated as transient: the client has already re-read the token file and retried once,
// so a remaining 401 usually means token rotation has not reached us yet. 403 is permanent.
bool is_transient(const Error& err);

// One-line description for logs: "<Kind> (HTTP <code>, <reason>): <message>". Already redacted.
std::string describe(const Error& err);

// Replaces secrets in free text with [REDACTED]: "Bearer <token>" (keeps the word Bearer),
// values of keys ending in "token" / "password" / "secret" / "client-key-data"
// (YAML `token: x`, JSON `"token":"x"`, `token=x`), the rest of an `Authorization:` value, and
// PEM private key blocks. Use before logging any error text.
std::string redact(std::string_view text);

}  // namespace extsvc::kube
