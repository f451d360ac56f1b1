// The outcomes a pass of the service reconciler decides, shared by its read path
// (service_reconciler.cpp) and its path from the watch cache (service_cached.cpp).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/json_access.hpp"
#include "core/merge_patch.hpp"
#include "kube/error.hpp"
#include "reconcile/errors.hpp"
#include "reconcile/service_work.hpp"

namespace extsvc::reconcile::service_outcomes {

using kube::ErrorKind;

inline Outcome transition(std::string state, std::string reason, std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kTransition;
  o.new_state = std::move(state);
  o.reason = std::move(reason);
  o.message = std::move(message);
  return o;
}

inline Outcome event(std::string reason, std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kEvent;
  o.reason = std::move(reason);
  o.message = std::move(message);
  return o;
}

inline Outcome done() {
  return Outcome{};
}

inline Outcome poll(std::string message) {
  Outcome o;
  o.kind = Outcome::Kind::kPoll;
  o.message = std::move(message);
  return o;
}

// A failed call: transient ones retry with backoff, the rest fail the service.
inline Outcome from_error(const kube::Error& e, const std::string& what) {
  Outcome o;
  o.http_status = e.http_status ? std::optional<int>(e.http_status) : std::nullopt;
  o.retry_after_s = e.retry_after_s;
  // describe() is already redacted; it never carries request headers.
  o.message = what + ": " + kube::describe(e);
  if (const auto fields = strict_refused_fields(e); !fields.empty()) {
    o.kind = Outcome::Kind::kTransition;
    o.new_state = "FAILED";
    o.reason = "unknown_fields";
    o.message = what + ": " + core::unknown_fields_message(fields);
    return o;
  }
  if (retryable(e)) {
    o.kind = Outcome::Kind::kRetry;
    o.retry_reason = retry_reason(e);
  } else {
    o.kind = Outcome::Kind::kTransition;
    o.new_state = "FAILED";
    o.reason = kPermanentError;
  }
  return o;
}

// The fence said no: the lease could run out during the next call.
inline Outcome lost(const std::string& before) {
  Outcome o;
  o.kind = Outcome::Kind::kLost;
  o.retry_reason = "lease_fence";
  o.message = "lease fence: the lease could expire during the next Kubernetes call (" + before +
              "); nothing more was sent";
  return o;
}

inline bool fenced(const ServiceWork& w) {
  return !w.budget.may_write();
}

// The API server answered 2xx but without fields we sent: it prunes unknown
// fields (an API server that ignores fieldValidation). Permanent: the same
// request would be pruned again.
inline std::optional<Outcome> pruned(const nlohmann::json& sent, const nlohmann::json& echoed,
                                     const std::string& what) {
  const auto dropped = core::dropped_fields(sent, echoed);
  if (dropped.empty()) return std::nullopt;
  std::string list;
  for (const auto& f : dropped) list += (list.empty() ? "" : ", ") + f;
  return transition("FAILED", "unknown_fields",
                    what + ": the API server answered without " + list +
                        ": its DPUService CRD does not define them (fields were dropped). "
                        "Upgrade DPF or update the service without them");
}

// A 2xx must carry the object: a proxy's page, a Status body or an empty
// answer is "not the expected JSON" (SPEC 2.5), retried, never trusted.
inline std::optional<Outcome> not_a_dpuservice(const kube::Response& r, const std::string& what) {
  const auto& b = r.body;
  if (core::json_text_at(b, {"kind"}) == "DPUService" &&
      !core::json_text_at(b, {"metadata", "name"}).empty())
    return std::nullopt;
  Outcome o;
  o.kind = Outcome::Kind::kRetry;
  o.retry_reason = "invalid_response";
  o.http_status = r.http_status;
  o.message = what + ": the API answered " + std::to_string(r.http_status) +
              " without a DPUService object; retrying";
  return o;
}

inline void observe(Outcome& o, const nlohmann::json& obj) {
  o.dpf = core::dpf_status(obj);
  const auto& md = obj.value("metadata", nlohmann::json::object());
  if (md.contains("generation") && md["generation"].is_number_integer())
    o.observed_generation = md["generation"].get<int64_t>();
  if (md.contains("resourceVersion") && md["resourceVersion"].is_string())
    o.observed_resource_version = md["resourceVersion"].get<std::string>();
}

}  // namespace extsvc::reconcile::service_outcomes
