#include "kube/error.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

constexpr size_t kMaxCauseBytes = 256;
constexpr size_t kMaxCauses = 32;

}  // namespace

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "None";
    case ErrorKind::kNotFound:
      return "NotFound";
    case ErrorKind::kAlreadyExists:
      return "AlreadyExists";
    case ErrorKind::kConflict:
      return "Conflict";
    case ErrorKind::kInvalid:
      return "Invalid";
    case ErrorKind::kBadRequest:
      return "BadRequest";
    case ErrorKind::kUnauthorized:
      return "Unauthorized";
    case ErrorKind::kForbidden:
      return "Forbidden";
    case ErrorKind::kTooManyRequests:
      return "TooManyRequests";
    case ErrorKind::kServerError:
      return "ServerError";
    case ErrorKind::kTimeout:
      return "Timeout";
    case ErrorKind::kTransport:
      return "Transport";
    case ErrorKind::kUnsupportedMediaType:
      return "UnsupportedMediaType";
    case ErrorKind::kMethodNotAllowed:
      return "MethodNotAllowed";
    case ErrorKind::kOther:
      return "Other";
  }
  return "Other";
}

bool is_transient(const Error& err) {
  switch (err.kind) {
    case ErrorKind::kTransport:
    case ErrorKind::kTimeout:
    case ErrorKind::kServerError:
    case ErrorKind::kTooManyRequests:
    case ErrorKind::kConflict:
    case ErrorKind::kUnauthorized:  // after the client's token re-read + retry: rotation lag
      return true;
    case ErrorKind::kNone:
    case ErrorKind::kNotFound:
    case ErrorKind::kAlreadyExists:
    case ErrorKind::kInvalid:
    case ErrorKind::kBadRequest:
    case ErrorKind::kForbidden:
    case ErrorKind::kUnsupportedMediaType:
    case ErrorKind::kMethodNotAllowed:
      return false;
    case ErrorKind::kOther:
      // The limit may be raised by the operator, or the object may shrink.
      return err.reason == "ResponseTooLarge";
  }
  return false;
}

std::string describe(const Error& err) {
  std::string out = to_string(err.kind);
  out += " (HTTP ";
  out += std::to_string(err.http_status);
  if (!err.reason.empty()) {
    out += ", ";
    out += err.reason;
  }
  out += "): ";
  out += err.message;
  return redact(out);
}

namespace detail {

namespace {

struct ReasonMap {
  const char* reason;
  ErrorKind kind;
};

constexpr ReasonMap kReasons[] = {
    {"NotFound", ErrorKind::kNotFound},
    {"AlreadyExists", ErrorKind::kAlreadyExists},
    {"Conflict", ErrorKind::kConflict},
    {"Invalid", ErrorKind::kInvalid},
    {"BadRequest", ErrorKind::kBadRequest},
    {"Unauthorized", ErrorKind::kUnauthorized},
    {"Forbidden", ErrorKind::kForbidden},
    {"TooManyRequests", ErrorKind::kTooManyRequests},
    {"InternalError", ErrorKind::kServerError},
    {"ServiceUnavailable", ErrorKind::kServerError},
    {"Timeout", ErrorKind::kTimeout},
    {"ServerTimeout", ErrorKind::kTimeout},
    {"UnsupportedMediaType", ErrorKind::kUnsupportedMediaType},
    {"MethodNotAllowed", ErrorKind::kMethodNotAllowed},
    {"Gone", ErrorKind::kOther},
    {"Expired", ErrorKind::kOther},
    {"NotAcceptable", ErrorKind::kOther},
    {"RequestEntityTooLarge", ErrorKind::kOther},
};

ErrorKind kind_from_status(int code) {
  switch (code) {
    case 400:
      return ErrorKind::kBadRequest;
    case 401:
      return ErrorKind::kUnauthorized;
    case 403:
      return ErrorKind::kForbidden;
    case 404:
      return ErrorKind::kNotFound;
    case 405:
      return ErrorKind::kMethodNotAllowed;
    case 409:
      return ErrorKind::kConflict;
    case 415:
      return ErrorKind::kUnsupportedMediaType;
    case 422:
      return ErrorKind::kInvalid;
    case 429:
      return ErrorKind::kTooManyRequests;
    case 504:
      return ErrorKind::kTimeout;
    default:
      break;
  }
  if (code >= 500 && code <= 599) return ErrorKind::kServerError;
  return ErrorKind::kOther;
}

const char* default_reason(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      break;
  }
  if (code >= 500 && code <= 599) return "InternalError";
  return "Unknown";
}

const std::string* get_string(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

}  // namespace

Error error_from_response(int http_status, std::string_view body,
                          std::optional<double> retry_after_s) {
  Error e;
  e.http_status = http_status;
  e.retry_after_s = retry_after_s;
  std::string reason;
  std::string message;
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  bool json_ok = !j.is_discarded() && j.is_object();
  if (json_ok) {
    if (const auto* r = get_string(j, "reason")) reason = *r;
    if (const auto* m = get_string(j, "message")) message = *m;
    auto d = j.find("details");
    if (d != j.end() && d->is_object()) {
      auto ra = d->find("retryAfterSeconds");
      if (!e.retry_after_s && ra != d->end() && ra->is_number() && ra->get<double>() > 0)
        e.retry_after_s = std::min(ra->get<double>(), kMaxRetryAfterSeconds);
      auto causes = d->find("causes");
      if (causes != d->end() && causes->is_array()) {
        for (const auto& c : *causes) {
          if (e.causes.size() >= kMaxCauses) break;
          const auto* f = get_string(c, "field");
          const auto* m = get_string(c, "message");
          e.causes.emplace_back(sanitize_utf8(redact(f ? *f : ""), kMaxCauseBytes),
                                sanitize_utf8(redact(m ? *m : ""), kMaxCauseBytes));
        }
      }
    }
  }
  e.kind = ErrorKind::kOther;
  bool known = false;
  for (const auto& rm : kReasons) {
    if (reason == rm.reason) {
      e.kind = rm.kind;
      known = true;
      break;
    }
  }
  if (!known) e.kind = kind_from_status(http_status);
  // A 409 without a recognisable reason stays kConflict (transient), the safer default for writes.
  e.reason = reason.empty() ? default_reason(http_status) : sanitize_utf8(reason, 64);
  if (message.empty()) {
    message = "the server responded with HTTP " + std::to_string(http_status);
    if (!json_ok && !body.empty()) {
      message += ": ";
      message += sanitize_utf8(body.substr(0, 200), 200);
    }
  }
  e.message = sanitize_utf8(redact(message), detail::kMaxMessageBytes);
  return e;
}

}  // namespace detail
}  // namespace extsvc::kube
