// Site identity (issue 25): every DPUService a site creates carries the label nico/site with the
// site's id next to the service id, and one Kubernetes Lease named after the site decides which
// database writes. Pure functions over names and labels; the Lease protocol is lease_record.hpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace extsvc::core {

inline constexpr std::string_view kSiteLabel = "nico/site";
inline constexpr std::string_view kLeaseNamePrefix = "nico-extsvc-";

// Why a site id cannot be used (nullopt: it can). The id is a Kubernetes label value (it becomes
// nico/site) and names the Lease nico-extsvc-<site_id>, a DNS-1123 subdomain: so lowercase
// letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63
// characters, and not empty.
std::optional<std::string> site_id_error(std::string_view site_id);

// "nico-extsvc-<site_id>".
std::string lease_name(std::string_view site_id);

// Whose a DPUService (or any object) is, by its nico/site label: this site's, without the label
// (made before the label existed, 0.2.0), or another site's.
enum class SiteMembership { kOurs, kUnlabelled, kForeign };
SiteMembership site_membership(const nlohmann::json& object, std::string_view site_id);
const char* to_string(SiteMembership m);

}  // namespace extsvc::core
