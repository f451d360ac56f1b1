#include "core/dpf_api_level.hpp"

#include "core/json_access.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

// The schema of kind in an OpenAPI v3 document, found by its x-kubernetes-group-version-kind
// (the apiserver's name for a CRD schema is reverse-DNS, e.g.
// com.nvidia.dpu.svc.v1alpha1.DPUService; the extension is what it promises).
const json* schema_of(const json& doc, const std::string& kind) {
  const json& schemas = json_at(doc, {"components", "schemas"});
  if (!schemas.is_object()) return nullptr;
  for (auto it = schemas.begin(); it != schemas.end(); ++it)
    for (const auto& gvk : json_at(*it, {"x-kubernetes-group-version-kind"}))
      if (json_text_at(gvk, {"kind"}) == kind) return &*it;
  return nullptr;
}

bool has_spec_field(const json* schema, const char* field) {
  return schema != nullptr &&
         json_at(*schema, {"properties", "spec", "properties", field}).is_object();
}

}  // namespace

DpfApiLevel dpf_api_level(const json& svc_doc, const json& provisioning_doc) {
  DpfApiLevel l;
  l.known = true;
  const json* svc = schema_of(svc_doc, "DPUService");
  l.dpuservice_served = svc != nullptr;
  l.dpuservice_security = has_spec_field(svc, "security");
  const json* dev = schema_of(provisioning_doc, "DPUDevice");
  l.dpudevice_served = dev != nullptr;
  l.dpudevice_cluster = has_spec_field(dev, "cluster");
  return l;
}

std::string DpfApiLevel::level() const {
  if (!known) return "unknown";
  return sufficient() ? std::string(kMinimumDpfRelease) + "+"
                      : "below " + std::string(kMinimumDpfRelease);
}

std::vector<std::string> DpfApiLevel::missing_for_services() const {
  std::vector<std::string> out;
  if (!known) return out;
  if (!dpuservice_served)
    out.emplace_back("DPUService (resource)");
  else if (!dpuservice_security)
    out.emplace_back("DPUService.spec.security");
  return out;
}

std::vector<std::string> DpfApiLevel::missing_for_placement() const {
  std::vector<std::string> out;
  if (!known) return out;
  if (!dpudevice_served)
    out.emplace_back("DPUDevice (resource)");
  else if (!dpudevice_cluster)
    out.emplace_back("DPUDevice.spec.cluster");
  return out;
}

std::vector<std::string> DpfApiLevel::missing() const {
  std::vector<std::string> out = missing_for_services();
  for (auto& m : missing_for_placement()) out.push_back(std::move(m));
  return out;
}

std::string DpfApiLevel::message(const std::vector<std::string>& missing) {
  std::string fields;
  for (const auto& m : missing) fields += (fields.empty() ? "" : ", ") + m;
  return "the DPF release the cluster serves lacks " + fields + ": nico_extsvc needs DPF " +
         kMinimumDpfRelease + " or later (upgrade DPF; nothing is sent until then)";
}

uint32_t DpfApiLevel::bits() const {
  if (!known) return 0;
  return 1u | (dpuservice_served ? 2u : 0u) | (dpuservice_security ? 4u : 0u) |
         (dpudevice_served ? 8u : 0u) | (dpudevice_cluster ? 16u : 0u);
}

DpfApiLevel DpfApiLevel::from_bits(uint32_t bits) {
  DpfApiLevel l;
  l.known = (bits & 1u) != 0;
  l.dpuservice_served = (bits & 2u) != 0;
  l.dpuservice_security = (bits & 4u) != 0;
  l.dpudevice_served = (bits & 8u) != 0;
  l.dpudevice_cluster = (bits & 16u) != 0;
  return l;
}

}  // namespace extsvc::core
