#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/base32.hpp"

namespace extsvc::core {

inline constexpr std::string_view kNamePrefix = "extsvc-";
inline constexpr std::string_view kPlacementLabelPrefix = "nico/extsvc-";
inline constexpr std::string_view kPlacementLabelValue = "enabled";
inline constexpr std::string_view kOwnerIdLabel = "nico/extension-service-id";
inline constexpr std::string_view kOwnerVersionLabel = "nico/extension-service-version";
// Put on the chart's pods through spec.serviceDaemonSet.annotations (DPF's
// chart contract copies them onto pods): the revision a pod was rendered from.
inline constexpr std::string_view kRevisionAnnotation = "nico/extension-service-revision";
// Keys DPF itself writes into the DPUService spec (serviceDaemonSet.labels).
inline constexpr std::string_view kDpfOwnedKeyPrefix = "svc.dpu.nvidia.com/";
inline constexpr std::size_t kIdentityHashLength = 20;

// Lowercase 8-4-4-4-12 form of a hyphenated UUID in any case; nullopt for
// anything else (no braces, no URN prefix, no unhyphenated form).
std::optional<std::string> canonical_uuid(std::string_view uuid);

// SPEC 2.2: first 20 characters of base32_lower(SHA-256(lower(uuid) "/" version)).
// Throws std::invalid_argument when `uuid` is not a UUID.
std::string identity_hash(std::string_view uuid, std::string_view version);

// "extsvc-<hash>": DPUService name and Helm release name (27 characters).
std::string dpf_service_name(std::string_view uuid, std::string_view version);

// "nico/extsvc-<hash>": the placement node-label key.
std::string placement_label_key(std::string_view uuid, std::string_view version);

// NICo ConfigVersion "V<n>-T<unix micros>": n >= 1 without leading zeros
// (at most 10 digits), micros 1 to 20 decimal digits. The bounds keep the
// string a valid Kubernetes label value, which it becomes.
bool is_config_version(std::string_view version);

}  // namespace extsvc::core
