#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/validation_error.hpp"

namespace extsvc::core {

inline constexpr std::size_t kMaxHelmChartDataBytes = 131072;

// Validates the `data` text of a DPF_HELM_CHART service (SPEC 2.3) and
// returns its normalized form, keys in the order
//   repoURL, chartName, chartVersion, security{privileged, spiffe?},
//   serviceDaemonSet?{labels?, annotations?, resources?,
//                     updateStrategy?{type, rollingUpdate?{maxSurge?, maxUnavailable?}}},
//   values?
// `values: null` and an absent `values` both normalize to absent; `{}` stays.
// Throws ValidationError naming the JSON path of the first problem.
nlohmann::ordered_json validate_helm_chart_data(std::string_view text);

}  // namespace extsvc::core
