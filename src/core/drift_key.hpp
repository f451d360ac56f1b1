// A digest of everything the drift check compares in a DPUService: the identity fields
// (identity_mismatch) and the NICo-owned mutable fields as dpuservice_mutable_patch sees them
// (null members absent, DPF's svc.dpu.nvidia.com/ label keys ignored). Two objects have the same
// key exactly when a live object with the first key needs no patch towards a desired object with
// the second and its identity holds (unit- and fuzz-tested against those two functions). The
// watch cache keeps this key instead of the object: a DPUService's values can be large, and a
// site has thousands of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace extsvc::core {

// 32 bytes (SHA-256 of the canonical projection).
std::string dpuservice_drift_key(const nlohmann::json& dpuservice);

// The projection itself (for tests and debugging, and for drift_shape.hpp).
nlohmann::json dpuservice_drift_projection(const nlohmann::json& dpuservice);

// The key of a projection already made: dpuservice_drift_key(o) is
// drift_key_of_projection(dpuservice_drift_projection(o)). The watch cache makes the projection
// once for the key and the shape (drift_shape.hpp).
std::string drift_key_of_projection(const nlohmann::json& projection);

// SHA-256 of text (32 bytes).
std::string sha256_bytes(const std::string& text);

}  // namespace extsvc::core
