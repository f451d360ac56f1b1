#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace extsvc::core {

inline constexpr std::string_view kDpuServiceApiVersion = "svc.dpu.nvidia.com/v1alpha1";
inline constexpr std::string_view kDpuServiceKind = "DPUService";
inline constexpr std::string_view kDefaultNamespace = "dpf-operator-system";

// The detached DPUService for one service version (SPEC 2.3) and Helm
// revision from the data normalized by validate_helm_chart_data. The pods'
// service label and revision annotation (SPEC 2.8) are injected into
// spec.serviceDaemonSet so every pod can be tied to its service and revision.
// With a site id the object's metadata carries nico/site (issue 25) next to the service id;
// never inside spec.serviceDaemonSet, so the DaemonSet template does not depend on it. Empty:
// the object as 0.2.0 rendered it.
// Throws std::invalid_argument on a bad uuid or a revision < 1 and nlohmann
// exceptions when required data fields are missing.
nlohmann::json render_dpuservice(std::string_view uuid, std::string_view version, int revision,
                                 const nlohmann::json& normalized_data, std::string_view ns,
                                 std::string_view site_id = {});

// The node selector that confines the service to labelled DPUs.
nlohmann::json placement_node_selector(std::string_view label_key);

// JSON path of the first ownership or immutable-identity field of `live` that
// differs from what NICo would create, or nullopt when the object is ours and
// intact. The result names the field only, never its value. With a site id, a nico/site label
// other than it (or none) is a mismatch too, reported right after the ownership label.
std::optional<std::string> identity_mismatch(const nlohmann::json& live, std::string_view uuid,
                                             std::string_view version, std::string_view ns,
                                             std::string_view site_id = {});

inline constexpr std::string_view kSiteLabelPath = "metadata.labels[\"nico/site\"]";

// Whether `live` carries NICo's owner label for `uuid`. Delete checks only
// this, so an owned but tampered object can still be cleaned up.
bool owned_by(const nlohmann::json& live, std::string_view uuid);

}  // namespace extsvc::core
