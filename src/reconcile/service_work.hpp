// What the worker claimed for one DPF service, and what it decided.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/dpf_status.hpp"
#include "kube/budget.hpp"

namespace extsvc::reconcile {

struct ServiceWork {
  std::string service_id;
  int64_t state_version = 0;
  std::string lease_token;
  std::string lifecycle_state;  // CREATING, READY, UPDATING, DELETING, ...
  std::string deployment_scope;
  std::string dpf_service_name;
  std::string attachable_version;
  int desired_revision = 0;
  std::optional<int> applied_revision;
  int attempts = 0;
  nlohmann::json desired;  // the rendered DPUService of the desired revision
  // ALL_DPUS deletion waits until every DPU was observed without the label.
  bool placement_clear = true;
  // What the pass may spend (kube/budget.hpp): its calls run under it, and its fence
  // (may_write()) is consulted before every Kubernetes call. No means the claim's lease could
  // expire before the call ends (its timeout plus the margin no longer fits), or the site Lease
  // no longer covers it: the reconciler stops and returns kLost. The default is unbounded and
  // unfenced (unit tests).
  kube::Budget budget;
};

// Mirrors the outcomes extsvc.complete('service', ...) applies (encoded by controller/wire.cpp).
struct Outcome {
  // kLost: the lease fence stopped the pass before a call; nothing more was
  // sent. The worker records it as a retry (the CAS on lease_token discards it
  // when another worker holds the row by now).
  enum class Kind { kTransition, kEvent, kDone, kRetry, kPoll, kLost };
  Kind kind = Kind::kDone;
  std::string new_state;  // kTransition
  std::string reason;     // kTransition, kEvent
  std::string message;    // status message or last error; never secret
  std::optional<int> applied_revision;
  std::optional<int> http_status;
  std::optional<double> retry_after_s;
  std::optional<int64_t> observed_generation;
  std::string observed_resource_version;
  std::optional<core::DpfStatus> dpf;  // DPF's view when a live object was seen
  int api_calls = 0;
  // kRetry, kLost: why (retry_reason() of errors.hpp, "lease_fence"); static.
  const char* retry_reason = nullptr;
};

const char* to_string(Outcome::Kind kind);

// The reason of a transition to FAILED that the API's refusal caused (4xx other than a conflict):
// one spelling for the reconciler and for the worker's own failures (controller/wire.cpp); the
// SQL side knows it from extsvc.lifecycle_transitions (sql/parts/20_lifecycle.sql), where the
// metrics count it as the tenant's failure.
inline constexpr const char* kPermanentError = "permanent_error";

}  // namespace extsvc::reconcile
