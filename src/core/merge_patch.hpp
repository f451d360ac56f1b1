#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/identity.hpp"

namespace extsvc::core {

// Minimal RFC 7396 merge patch turning `from` into `to`: removed keys become
// null, objects recurse, arrays and scalars are replaced whole; a non-object
// `to` is returned as is; equal objects give {}. A null inside `to` means
// "absent" (merge patch cannot store a null), so it emits null only when
// `from` holds a non-null value there.
nlohmann::json merge_diff(const nlohmann::json& from, const nlohmann::json& to);

// RFC 7396 application of `patch` to `target`.
nlohmann::json apply_merge_patch(nlohmann::json target, const nlohmann::json& patch);

// The minimal merge patch of the NICo-owned mutable DPUService fields:
//   spec.helmChart.source.{repoURL, chart, version}, spec.helmChart.values,
//   spec.security.{privileged, spiffe},
//   spec.serviceDaemonSet.{labels, annotations, resources, updateStrategy}.
// A field present in `live` but absent in `desired` is nulled; everything
// else in `live` (metadata, nodeSelector, releaseName, foreign fields) is
// never mentioned. Keys under svc.dpu.nvidia.com/ in the live
// serviceDaemonSet.labels are DPF's: ignored, never nulled. Returns {} when
// the owned fields already match.
nlohmann::json dpuservice_mutable_patch(const nlohmann::json& live, const nlohmann::json& desired);

// The paths of those NICo-owned mutable fields, in the order the patch visits them.
const std::array<std::vector<std::string>, 10>& dpuservice_owned_paths();

// Merge patch for a DPUDevice's spec.cluster.nodeLabels: sets each wanted key
// to "enabled" unless it already is, removes present keys starting with
// `owned_prefix` that are not wanted, and leaves every other key alone.
// Returns {} when nothing changes.
nlohmann::json node_labels_patch(const nlohmann::json& current_node_labels,
                                 const std::set<std::string>& wanted_keys,
                                 std::string_view owned_prefix = kPlacementLabelPrefix);

}  // namespace extsvc::core
