// What DPF itself says about a DPUService, and what the API server says when
// it refuses fields: pure readings of API objects, for status messages.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
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
