#include "core/site.hpp"

#include "core/kube_metadata.hpp"

namespace extsvc::core {

std::optional<std::string> site_id_error(std::string_view site_id) {
  if (site_id.empty()) return "it is not set";
  if (site_id.size() > 63) return "it is longer than 63 characters";
  if (!is_label_value(site_id) || !is_dns1123_subdomain(site_id))
    return "it must be lowercase letters, digits, '-' and '.', starting and ending with a letter "
           "or digit (a Kubernetes label value that also names the Lease nico-extsvc-<site_id>)";
  return std::nullopt;
}

std::string lease_name(std::string_view site_id) {
  return std::string(kLeaseNamePrefix) + std::string(site_id);
}

SiteMembership site_membership(const nlohmann::json& object, std::string_view site_id) {
  if (!object.is_object()) return SiteMembership::kUnlabelled;
  const auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return SiteMembership::kUnlabelled;
  const auto labels = md->find("labels");
  if (labels == md->end() || !labels->is_object()) return SiteMembership::kUnlabelled;
  const auto it = labels->find(std::string(kSiteLabel));
  if (it == labels->end() || it->is_null()) return SiteMembership::kUnlabelled;
  if (it->is_string() && it->get_ref<const std::string&>() == site_id && !site_id.empty())
    return SiteMembership::kOurs;
  return SiteMembership::kForeign;
}

const char* to_string(SiteMembership m) {
  switch (m) {
    case SiteMembership::kOurs:
      return "ours";
    case SiteMembership::kUnlabelled:
      return "no_site_label";
    case SiteMembership::kForeign:
      return "other_site";
  }
  return "other_site";
}

}  // namespace extsvc::core
