// What the worker claimed for one DPF service, and what it decided.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/dpf_status.hpp"
#include "kube/budget.hpp"

namespace extsvc::reconcile {

// Issue 26, part 2: what the watcher's cache (LIST+WATCH, controller/cluster_cache.hpp) holds of
// the service's DPUService, so that an update or a delete is one request: the write carries the
// cached resourceVersion or uid as its precondition, so it reaches only the object whose facts
// were checked here (409 otherwise: then one GET and one retry).
struct CachedDpuService {
  bool present = false;  // the cache holds an object of that name (the fields below are its)
  // absent, and the watch saw the object of this uid go (empty: not seen going)
  std::string gone_uid;
  std::string uid;
  std::string resource_version;
  std::string service_id;  // its ownership label
  std::string site;        // its nico/site label
  bool has_site = false;
  bool being_deleted = false;
  bool paused = false;    // spec.paused (DPF does not finish a delete meanwhile)
  std::string drift_key;  // core::dpuservice_drift_key of the cached object
  // core::dpuservice_drift_shape of the cached object: what a drift repair's merge patch is
  // computed from (its keys and value digests), with no GET
  std::string drift_shape;
};

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
  // The rendered DPUService of the applied revision (UPDATING only; null otherwise): with a
  // cache whose drift key equals its key, the update's patch is computed from it, not from a GET.
  nlohmann::json applied;
  // Null: no current cache (watch off, a worker other than the watcher, a stream not open): the
  // pass reads the object with a GET first, as before.
  std::optional<CachedDpuService> cached;
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
  // A write refused with 409 because the cached resourceVersion/uid was stale: the pass then read
  // the object (one GET) and wrote again; counted apart from the one-call path.
  bool stale_cache = false;
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
