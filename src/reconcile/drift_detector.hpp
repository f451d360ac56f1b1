// Drift detection for READY services: one label-selected, paged LIST of the
// DPUServices we own, compared in memory with the desired objects (no GET
// per object, no write when nothing differs).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dpf_status.hpp"
#include "kube/client.hpp"

namespace extsvc::reconcile {

struct DesiredService {
  std::string service_id;
  std::string dpf_service_name;
  std::string attachable_version;
  nlohmann::json desired;  // rendered DPUService
};

struct DriftReport {
  std::vector<std::pair<std::string, std::string>> drifted;  // service_id, what differs
  std::vector<std::string> orphans;  // owned-labelled objects with no READY service
  // DPF's Ready condition of every listed service that is ours and intact
  std::vector<std::pair<std::string, core::DpfStatus>> dpf;
  size_t listed = 0;
  std::optional<kube::Error> error;  // the LIST failed: nothing can be concluded
};

DriftReport detect_drift(kube::Client& api, const std::string& ns,
                         const std::vector<DesiredService>& services,
                         const std::vector<std::string>& known_names);

}  // namespace extsvc::reconcile
