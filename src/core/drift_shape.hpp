// What the watch cache keeps of a DPUService besides its drift key, so that a drift is repaired
// with one PATCH and no GET (issue 26, part 2). A merge patch that repairs a drift must name
// every key of the live object that the desired one lacks (as null) and every value that
// differs; the drift key tells neither. The shape keeps exactly that and not the values
// (a DPUService's Helm values can be large, and a site has thousands of them): the SHA-256 of
// the identity fields of the drift projection, whether DPF's keys are in
// spec.serviceDaemonSet.labels, and the NICo-owned mutable fields as a tree of their object keys
// with a 64-bit digest of every other value (arrays and scalars are compared whole by the merge
// patch, so they are leaves). Tested against dpuservice_mutable_patch on random mutations.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace extsvc::core {

// The shape of a DPUService, as compact bytes (MessagePack), from its drift projection
// (dpuservice_drift_projection(dpuservice), made once for the key and the shape).
std::string dpuservice_drift_shape(const nlohmann::json& dpuservice,
                                   const nlohmann::json& projection);
std::string dpuservice_drift_shape(const nlohmann::json& dpuservice);

// The merge patch that turns the object of that shape into `desired` in the NICo-owned fields:
// what dpuservice_mutable_patch(live, desired) sends, computed without the live object ({} when
// they already agree). nullopt when the shape cannot say: unreadable, or the object's identity
// fields differ from desired's (identity_mismatch would report one, or the object lacks the
// site label and is adopted: the read path decides). A value that differs only in its number
// type (1 against 1.0) is sent again, which changes nothing.
std::optional<nlohmann::json> dpuservice_patch_from_shape(const std::string& shape,
                                                          const nlohmann::json& desired);

}  // namespace extsvc::core
