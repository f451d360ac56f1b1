// What DPF itself says about a DPUService, and what the API server says when
// it refuses fields: pure readings of API objects, for status messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace extsvc::core {

// DPF's Ready condition as last observed. Context, never proof: DPF computes
// it from cached Argo CD status that can describe the previous render.
struct DpfStatus {
  std::optional<bool> ready;  // nullopt: no Ready condition yet
  std::string reason;
  std::string message;  // prefixed with the paused note when spec.paused is true
  bool paused = false;  // spec.paused: DPF does not reconcile (or delete) it
  int64_t generation = 0;
  bool generation_observed = false;  // status.observedGeneration == metadata.generation
};

DpfStatus dpf_status(const nlohmann::json& dpuservice);

// Issue 23, part 3. DPF reports an Argo CD sync that did not converge: its Ready is False and a
// condition it names says "Application is not ready (Sync: OutOfSync, ...)". DPF's word stops
// there; the sync operation's message (the only place that names an admission policy that denied
// the DaemonSet) is on the Application.
bool dpf_reports_out_of_sync(const DpfStatus& status);

// The labels DPF puts on the Argo CD Application(s) it makes for a DPUService (one per DPU
// cluster): "dpu.nvidia.com/dpuservice-name=<name>,dpu.nvidia.com/dpuservice-namespace=<ns>".
std::string argo_application_selector(const std::string& dpuservice_name,
                                      const std::string& dpuservice_namespace);

// The sync failure one Argo CD Application carries: status.operationState.message when the
// operation's phase is Failed or Error, else the message of a SyncError condition; "" when the
// Application reports none (a sync still running or not yet attempted is no failure).
std::string argo_sync_failure(const nlohmann::json& application);

// What the per-DPU PENDING message appends for the Applications of a LIST (`items`):
// "sync failed: <message>" for one failing Application, "Application <name> sync failed: ..."
// per failing one when there are several; each message passed through `clean` (the caller's
// redaction) and cut to `max_bytes` (valid UTF-8). "" when none failed.
std::string argo_sync_note(const nlohmann::json& items,
                           const std::function<std::string(std::string_view)>& clean,
                           std::size_t max_bytes = 400);

// The note when the Applications could not be read: says so, why, and the RBAC it takes
// (`get`/`list` on applications.argoproj.io in `ns`) when the API refused (403).
std::string argo_unreadable_note(int http_status, const std::string& why, const std::string& ns);

// The JSON paths an API server named in a fieldValidation=Strict refusal
// ("strict decoding error: unknown field \"spec.security\", unknown field
// ...") in order of appearance, without duplicates; empty when the message
// is not such a refusal.
std::vector<std::string> strict_unknown_fields(const std::string& status_message);

// The FAILED message for such a refusal: names the fields and what to do.
std::string unknown_fields_message(const std::vector<std::string>& fields);

// The same for a DPUDevice label patch (spec.cluster.nodeLabels): the DPF
// release cannot place NICo's labels through its DPUDevices.
// The DPF API serves no DPUDevice resource at all (a 404 for the resource, not for the object:
// DPF v24.10 has no DPUDevice CRD): the per-DPU message naming the minimum release.
std::string no_dpudevice_resource_message();

std::string unknown_device_fields_message(const std::vector<std::string>& fields);

// JSON paths of the NICo-owned mutable fields present in `sent` but missing
// or different in `echoed` (what an API server that pruned unknown fields
// answers). DPF-owned keys are ignored. Empty when everything was kept.
std::vector<std::string> dropped_fields(const nlohmann::json& sent, const nlohmann::json& echoed);

}  // namespace extsvc::core
