// What the worker claimed for one DPU, and what it observed.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kube/budget.hpp"

namespace extsvc::reconcile {

// One reason to look at a service on this DPU: an attachment row of an
// instance, or an ALL_DPUS ("site") service.
struct DpuItem {
  std::string kind;  // "attachment" or "site"
  std::string instance_id;
  std::string service_id;
  std::string version;
  std::string label_key;
  std::string dpf_service_name;  // the DPUService (and Helm release) name
  int applied_revision = 0;      // the revision a pod must carry to prove RUNNING; 0 = none yet
  bool wanted = false;
};

struct DpuWork {
  std::string dpu_machine_id;
  int64_t state_version = 0;
  std::string lease_token;
  std::string device_name;
  std::string node_name;
  bool deregistered = false;
  int attempts = 0;
  std::set<std::string> wanted_keys;
  std::vector<DpuItem> items;
  // What the pass may spend (see ServiceWork::budget): its fence is consulted before every call.
  kube::Budget budget;
  // Issue 25. The site's registry of placement keys: a present nico/extsvc-* key outside it was
  // never written by this site and is left alone (null: every such key counts as the site's).
  const std::set<std::string>* registered_keys = nullptr;
  // Consulted once by a pass that would remove registered keys no item names (removals derived
  // from absence: a late patch, or a database that lost rows); false keeps them (the orphan
  // guard holds them back). Empty: allowed.
  std::function<bool()> derived_removal_ok;
};

struct DpuItemResult {
  const DpuItem* item = nullptr;
  std::string state;  // PENDING, RUNNING, TERMINATING, TERMINATED, ERROR, UNKNOWN
  std::string message;
};

// A pod of one of our services on this DPU that no item of the DPU explains (issue 23, part 2):
// the chart ignores nodeSelector, or a key of ours reached the Node without the DPUDevice.
struct StrayPod {
  std::string service_id;  // its label; "" for a chart that drops it
  std::string release;     // the DPUService whose Argo Application applied it; "" when unknown
  std::string pod;         // "<namespace>/<name>"
  std::string reason;      // "no_attachment" or "node_key_without_dpudevice"
};

struct DpuOutcome {
  bool retry = false;  // transient failure before anything could be observed
  bool lost = false;   // the lease fence stopped the pass (retry is set too)
  std::vector<DpuItemResult> results;
  std::string message;  // error text (redacted) or empty
  std::optional<int> http_status;
  std::optional<double> retry_after_s;
  nlohmann::json observation = nlohmann::json::object();  // for operators
  // When the evidence was observed (Unix seconds); nullopt = now. A watch cache that lost its
  // stream gives the time it was last known current, so the staleness bound applies.
  std::optional<double> observed_at;
  // The evidence came from the watch caches: a change wakes the DPU again, so the queue need not
  // poll it while it converges.
  bool watched = false;
  int api_calls = 0;
  bool patched = false;
  // Look again soon (the queue's brisk schedule) rather than wait for a change: the pass could
  // not conclude (a watch cache that is not current cannot confirm an absence).
  bool keep_polling = false;
  // retry: why (retry_reason() of errors.hpp, "lease_fence"); static.
  const char* retry_reason = nullptr;
  // Present keys left alone: never written by this site, or held back by the orphan guard.
  std::set<std::string> foreign_keys, held_keys;
  // The pods were observed (strays is the whole list); false: strays says nothing.
  bool strays_observed = false;
  std::vector<StrayPod> strays;
  // Keys of ours removed from the Node because neither the DPUDevice nor the DPU object carries
  // them (DPF never removes a key it did not apply).
  std::set<std::string> node_keys_removed;
};

}  // namespace extsvc::reconcile
