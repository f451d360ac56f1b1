// The worker's wire schema: the work object extsvc.claim returns and the
// outcome object extsvc.complete takes, for both queues (service, dpu), and
// the statuses extsvc.record_dpf_status takes. This file and wire.cpp are the
// one place on the C++ side that knows their JSON keys; docs/worker.md
// describes them and sql/parts/76_worker_queue.sql builds and reads them.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dpf_status.hpp"
#include "reconcile/dpu_work.hpp"
#include "reconcile/service_work.hpp"

namespace extsvc::controller {

// A work object that does not fit the schema: what names the first field
// that does not fit (items[0].version is not a string). Such a row cannot be
// worked, and the caller says so instead of guessing.
struct WireError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A claimed service: the decoded work (desired not rendered yet) and what the
// DPUService is rendered from.
struct ServiceItem {
  reconcile::ServiceWork work;
  std::optional<nlohmann::json> helm_data;  // normalized data of the desired revision
  // of the applied revision, UPDATING only (issue 26, part 2: the one-call update's patch base)
  std::optional<nlohmann::json> applied_helm_data;
  std::string ns;
};

// {service_id, lifecycle_state, deployment_scope, dpf_service_name,
//  attachable_version: strings; desired_revision: integer; applied_revision:
//  integer or null; attempts: integer; placement_clear: boolean; namespace:
//  string; helm_data: object or null}. Throws WireError.
ServiceItem decode_service_work(std::string_view work_json);

// Renders item.work.desired from the Helm data (core::render_dpuservice, the
// function extsvc.render_dpuservice calls too). Throws what rendering throws.
void render_desired(ServiceItem& item, const std::string& site_id = "");

// {outcome: transition|event|done|retry|poll, new_state, reason, message,
//  observed_resource_version: strings; applied_revision, http_status,
//  observed_generation: integers; retry_after_s: number}; absent fields are
// left out. A pass the lease fence stopped (kLost) is sent as a retry.
nlohmann::json encode_service_outcome(const reconcile::Outcome& o);

// What the worker records when a row never reaches its reconciler or the pass fails in the worker
// itself, in the shapes above. A service row that can never be worked (undecodable, unrenderable):
// {outcome: transition, new_state: FAILED, reason: permanent_error, message}.
nlohmann::json encode_service_failure(const std::string& message);
// A retry of either queue: {outcome: retry, message, retry_after_s (absent without a delay)}.
nlohmann::json encode_retry(const std::string& message,
                            std::optional<double> retry_after_s = std::nullopt);

// {dpu_machine_id, device_name, node_name: strings (names may be null);
//  deregistered: boolean; attempts: integer; wanted_keys: array of label
//  keys; items: array of {kind: "attachment"|"site", instance_id: string (null
//  for "site"), service_id, version, label_key, dpf_service_name: strings,
//  applied_revision: integer or null, wanted: boolean}}. Throws WireError.
reconcile::DpuWork decode_dpu_work(std::string_view work_json);

// {outcome: observed|retry, results: [{kind, instance_id, service_id,
//  version, state, message}], message, http_status, retry_after_s,
//  observation, keep_polling, observed_at (Unix seconds: when the evidence
//  was observed, absent = now), watched (true: from the watch caches)}.
nlohmann::json encode_dpu_outcome(const reconcile::DpuOutcome& o);

// [{service_id, ready: boolean or null, reason, message}] for
// extsvc.record_dpf_status; empty string when there is nothing to record.
std::string encode_dpf_statuses(
    const std::vector<std::pair<std::string, core::DpfStatus>>& statuses);

}  // namespace extsvc::controller
