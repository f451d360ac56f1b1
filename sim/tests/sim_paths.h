// Paths and names the simulator tests share (one definition, so that the test files can be
// compiled together in one unity unit).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace simtest {

inline const std::string kDevPath =
    "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpudevices/";
inline const std::string kDpuPath =
    "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus/";
inline const std::string kPods = "/api/v1/namespaces/dpf-operator-system/pods";
inline const std::string kApps =
    "/apis/argoproj.io/v1alpha1/namespaces/dpf-operator-system/applications/";

// The Node of DPU i, as dpfsim seeds it.
inline std::string node_name(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "host-%04d-dpu-device-%04d", i, i);
  return buf;
}

// The DPUDevice of DPU i, as dpfsim seeds it.
inline std::string dev_name(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "dpu-device-%04d", i);
  return buf;
}

// The condition of that type in an object's status (an empty object when there is none, or no
// object at all: a 404's empty body).
inline nlohmann::json cond(const nlohmann::json& obj, const std::string& type) {
  if (!obj.is_object() || !obj.contains("status") || !obj["status"].is_object())
    return nlohmann::json::object();
  for (const auto& c : obj["status"].value("conditions", nlohmann::json::array()))
    if (c.is_object() && c.value("type", "") == type) return c;
  return nlohmann::json::object();
}

}  // namespace simtest
