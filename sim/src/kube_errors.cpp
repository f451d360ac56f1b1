#include "kube_errors.h"

namespace dpfsim {

std::string reason_for_code(int code) {
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
      return "Expired";
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
      return code >= 500 ? "InternalError" : "BadRequest";
  }
}

std::string status_failure_body(int code, const std::string& reason, const std::string& message,
                                const ojson& details) {
  ojson s;
  s["kind"] = "Status";
  s["apiVersion"] = "v1";
  s["metadata"] = ojson::object();
  s["status"] = "Failure";
  if (!message.empty()) s["message"] = message;
  if (!reason.empty()) s["reason"] = reason;
  if (!details.is_null() && !details.empty()) s["details"] = details;
  s["code"] = code;
  return s.dump();
}

ApiError err_continue_expired(const std::string& new_token) {
  ojson s;
  s["kind"] = "Status";
  s["apiVersion"] = "v1";
  s["metadata"] = ojson{{"continue", new_token}};
  s["status"] = "Failure";
  s["message"] =
      "The provided continue parameter is too old to display a consistent list result. You can "
      "start a new list without the continue parameter, or use the continue token in this "
      "response to retrieve the remainder of the results. Continuing with the provided token "
      "results in an inconsistent list - objects that were created, modified, or deleted between "
      "the time the first chunk was returned and now may show up in the list.";
  s["reason"] = "Expired";
  s["code"] = 410;
  return ApiError(410, s.dump());
}

std::string status_watch_expired(uint64_t rv, uint64_t oldest) {
  return status_failure_body(
      410, "Expired",
      "too old resource version: " + std::to_string(rv) + " (" + std::to_string(oldest) + ")");
}

ApiError make_error(int code, const std::string& reason, const std::string& message,
                    const ojson& details) {
  return ApiError(code, status_failure_body(code, reason, message, details));
}

static ojson name_details(const ResourceInfo& ri, const std::string& name) {
  ojson d;
  d["name"] = name;
  if (!ri.group.empty()) d["group"] = ri.group;
  d["kind"] = ri.plural;
  return d;
}

ApiError err_not_found(const ResourceInfo& ri, const std::string& name) {
  return make_error(404, "NotFound", ri.qualified_resource() + " \"" + name + "\" not found",
                    name_details(ri, name));
}

ApiError err_already_exists(const ResourceInfo& ri, const std::string& name, bool terminating) {
  std::string msg = ri.qualified_resource() + " \"" + name + "\" already exists";
  if (terminating) msg = "object is being deleted: " + msg;
  return make_error(409, "AlreadyExists", msg, name_details(ri, name));
}

ApiError err_conflict(const ResourceInfo& ri, const std::string& name) {
  return err_conflict_msg(ri, name,
                          "the object has been modified; please apply your changes to the latest "
                          "version and try again");
}

ApiError err_conflict_msg(const ResourceInfo& ri, const std::string& name, const std::string& msg) {
  return make_error(
      409, "Conflict",
      "Operation cannot be fulfilled on " + ri.qualified_resource() + " \"" + name + "\": " + msg,
      name_details(ri, name));
}

ApiError err_invalid(const ResourceInfo& ri, const std::string& name,
                     const std::vector<FieldCause>& causes) {
  std::string msg = ri.qualified_kind() + " \"" + name + "\" is invalid: ";
  auto one = [](const FieldCause& c) {
    return c.field.empty() ? c.message : c.field + ": " + c.message;
  };
  if (causes.size() == 1) {
    msg += one(causes[0]);
  } else {
    msg += "[";
    for (size_t i = 0; i < causes.size(); ++i) {
      if (i) msg += ", ";
      msg += one(causes[i]);
    }
    msg += "]";
  }
  ojson d;
  d["name"] = name;
  if (!ri.group.empty()) d["group"] = ri.group;
  d["kind"] = ri.kind;
  ojson arr = ojson::array();
  for (const auto& c : causes) {
    ojson o;
    o["reason"] = c.reason;
    o["message"] = c.message;
    o["field"] = c.field;
    arr.push_back(o);
  }
  d["causes"] = arr;
  return make_error(422, "Invalid", msg, d);
}

ApiError err_unsupported_patch() {
  return make_error(
      415, "UnsupportedMediaType",
      "the body of the request was in an unknown format - accepted media types include: "
      "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml");
}

ApiError err_bad_request(const std::string& msg) {
  return make_error(400, "BadRequest", msg);
}

ApiError err_unknown_path() {
  ojson d;
  d["causes"] = ojson::array(
      {ojson{{"reason", "UnexpectedServerResponse"}, {"message", "404 page not found"}}});
  return make_error(404, "NotFound", "the server could not find the requested resource", d);
}

ApiError err_method_not_allowed(const std::string& msg) {
  return make_error(405, "MethodNotAllowed", msg);
}

ApiError err_unauthorized() {
  return make_error(401, "Unauthorized", "Unauthorized");
}

ApiError err_too_many_requests(int retry_after) {
  ojson d;
  d["retryAfterSeconds"] = retry_after;
  ApiError e = make_error(429, "TooManyRequests", "Too many requests, please try again later.", d);
  e.headers.emplace_back("Retry-After", std::to_string(retry_after));
  return e;
}

ApiError err_injected(int code, int retry_after, const std::string& message) {
  if (code == 429) {
    ApiError e = err_too_many_requests(retry_after > 0 ? retry_after : 1);
    if (!message.empty()) {
      ojson d;
      d["retryAfterSeconds"] = retry_after > 0 ? retry_after : 1;
      e.body = status_failure_body(429, "TooManyRequests", message, d);
    }
    return e;
  }
  std::string msg = message;
  if (msg.empty()) {
    switch (code) {
      case 500:
        msg = "Internal error occurred: injected fault";
        break;
      case 503:
        msg = "the server is currently unable to handle the request";
        break;
      case 504:
        msg =
            "Timeout: request did not complete within requested timeout - context deadline "
            "exceeded";
        break;
      case 403:
        msg = "forbidden: injected fault";
        break;
      case 401:
        msg = "Unauthorized";
        break;
      default:
        msg = "injected fault";
        break;
    }
  }
  ojson d;
  if (retry_after > 0) d["retryAfterSeconds"] = retry_after;
  ApiError e = make_error(code, reason_for_code(code), msg, d);
  if (retry_after > 0) e.headers.emplace_back("Retry-After", std::to_string(retry_after));
  return e;
}

std::string status_success_body(const ResourceInfo& ri, const std::string& name,
                                const std::string& uid) {
  ojson s;
  s["kind"] = "Status";
  s["apiVersion"] = "v1";
  s["metadata"] = ojson::object();
  s["status"] = "Success";
  ojson d;
  d["name"] = name;
  if (!ri.group.empty()) d["group"] = ri.group;
  d["kind"] = ri.plural;
  d["uid"] = uid;
  s["details"] = d;
  return s.dump();
}

static std::string fmt_value(const json& v) {
  if (v.is_string()) return v.dump();
  if (v.is_object()) return "\"object\"";
  if (v.is_array()) return "\"array\"";
  if (v.is_null()) return "\"null\"";
  return v.dump();
}

FieldCause cause_required(const std::string& field) {
  return {"FieldValueRequired", field, "Required value"};
}

FieldCause cause_invalid(const std::string& field, const json& value, const std::string& detail) {
  std::string v = value.is_object() && value.contains("$raw") ? value["$raw"].get<std::string>()
                                                              : fmt_value(value);
  return {"FieldValueInvalid", field, "Invalid value: " + v + ": " + detail};
}

FieldCause cause_forbidden(const std::string& field, const std::string& detail) {
  return {"FieldValueForbidden", field, "Forbidden: " + detail};
}

FieldCause cause_unsupported(const std::string& field, const json& value,
                             const std::vector<std::string>& allowed) {
  std::string m = "Unsupported value: " + fmt_value(value) + ": supported values: ";
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (i) m += ", ";
    m += "\"" + allowed[i] + "\"";
  }
  return {"FieldValueNotSupported", field, m};
}

FieldCause cause_too_many(const std::string& field, size_t actual, size_t max) {
  return {"FieldValueTooMany", field,
          "Too many: " + std::to_string(actual) + ": must have at most " + std::to_string(max) +
              " items"};
}

FieldCause cause_too_few(const std::string& field, size_t actual, size_t min) {
  return {"FieldValueInvalid", field,
          "Invalid value: " + std::to_string(actual) + ": " + field +
              " in body should have at least " + std::to_string(min) + " items"};
}

}  // namespace dpfsim
