// The DPF API the clusters serve, read from the API server's OpenAPI v3 documents (issue 23,
// part 5): nico_extsvc needs DPF v26.8 or later, where DPUService has spec.security and the
// DPUDevice resource exists with spec.cluster (v24.10 serves no DPUDevice; v25.x-v26.7's has no
// spec.cluster; spec.security first appears in v26.8). Pure logic.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace extsvc::core {

inline constexpr const char* kMinimumDpfRelease = "v26.8";

struct DpfApiLevel {
  bool known = false;  // both documents were read
  bool dpuservice_served = false;
  bool dpuservice_security = false;
  bool dpudevice_served = false;
  bool dpudevice_cluster = false;

  // Every field the product needs is served.
  bool sufficient() const {
    return known && dpuservice_served && dpuservice_security && dpudevice_served &&
           dpudevice_cluster;
  }
  // "v26.8+", "below v26.8", or "unknown" (not read yet).
  std::string level() const;
  // What the product needs and the API lacks, as paths: "DPUService.spec.security",
  // "DPUDevice (resource)", "DPUDevice.spec.cluster".
  std::vector<std::string> missing() const;
  std::vector<std::string> missing_for_services() const;   // what a DPUService write needs
  std::vector<std::string> missing_for_placement() const;  // what a DPUDevice label needs
  // The one message for a row the release cannot serve: names the fields and the minimum release.
  static std::string message(const std::vector<std::string>& missing);
  // For shared memory: one bit per fact (0: not known).
  uint32_t bits() const;
  static DpfApiLevel from_bits(uint32_t bits);
};

// From the OpenAPI v3 documents of svc.dpu.nvidia.com/v1alpha1 and
// provisioning.dpu.nvidia.com/v1alpha1 (null: that group-version is not served).
DpfApiLevel dpf_api_level(const nlohmann::json& svc_doc, const nlohmann::json& provisioning_doc);

}  // namespace extsvc::core
