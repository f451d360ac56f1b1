#pragma once

#include <cstddef>
#include <string_view>

namespace extsvc::core {

// Kubernetes caps the summed size of an object's annotation keys and values.
inline constexpr std::size_t kMaxAnnotationBytes = 256 * 1024;

// DNS-1123 subdomain: lowercase alphanumerics, "-" and ".", at most 253.
bool is_dns1123_subdomain(std::string_view s);

// Kubernetes qualified name: [prefix "/"] name, where prefix is a DNS-1123
// subdomain and name is at most 63 characters of [A-Za-z0-9-_.] starting and
// ending alphanumeric. Used for label, annotation and resource keys.
bool is_qualified_name(std::string_view s);

// Label value: empty, or a name-part of a qualified name.
bool is_label_value(std::string_view s);

// Keys whose prefix is "nico" or "svc.dpu.nvidia.com": NICo and DPF set
// these themselves (ownership, placement, service id), tenants may not.
bool is_reserved_metadata_key(std::string_view key);

}  // namespace extsvc::core
