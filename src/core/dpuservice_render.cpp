#include "core/dpuservice_render.hpp"

#include <stdexcept>

#include "core/identity.hpp"
#include "core/site.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

std::string require_uuid(std::string_view uuid) {
  auto canonical = canonical_uuid(uuid);
  if (!canonical) throw std::invalid_argument("service id is not a UUID");
  return *canonical;
}

// Follows `keys` through objects; null counts as absent, as Kubernetes omits
// empty optional fields and clients may spell them either way.
const json* lookup(const json& root, std::initializer_list<std::string_view> keys) {
  const json* cur = &root;
  for (auto k : keys) {
    if (!cur->is_object()) return nullptr;
    const auto it = cur->find(std::string(k));
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
  }
  return cur;
}

bool string_equals(const json* v, std::string_view expected) {
  return v != nullptr && v->is_string() && v->get_ref<const std::string&>() == expected;
}

}  // namespace

json placement_node_selector(std::string_view label_key) {
  return {
      {"nodeSelectorTerms",
       json::array(
           {{{"matchExpressions",
              json::array({{{"key", std::string(label_key)},
                            {"operator", "In"},
                            {"values", json::array({std::string(kPlacementLabelValue)})}}})}}})}};
}

json render_dpuservice(std::string_view uuid, std::string_view version, int revision,
                       const json& normalized_data, std::string_view ns, std::string_view site_id) {
  const std::string id = require_uuid(uuid);
  if (revision < 1) throw std::invalid_argument("revision must be at least 1");
  const std::string name = dpf_service_name(id, version);

  json source = {{"repoURL", normalized_data.at("repoURL")},
                 {"chart", normalized_data.at("chartName")},
                 {"version", normalized_data.at("chartVersion")},
                 {"releaseName", name}};
  json helm_chart = {{"source", std::move(source)}};
  if (const auto it = normalized_data.find("values"); it != normalized_data.end() && !it->is_null())
    helm_chart["values"] = *it;

  const json& sec = normalized_data.at("security");
  json security = {{"privileged", sec.at("privileged")}};
  if (sec.contains("spiffe")) security["spiffe"] = json::object();

  json daemon_set = json::object();
  if (const auto it = normalized_data.find("serviceDaemonSet"); it != normalized_data.end()) {
    for (const char* key : {"labels", "annotations", "resources", "updateStrategy"})
      if (it->contains(key)) daemon_set[key] = it->at(key);
  }
  // Tenants cannot set nico/ keys (validation refuses them), so these never
  // overwrite tenant data.
  daemon_set["labels"][std::string(kOwnerIdLabel)] = id;
  daemon_set["annotations"][std::string(kRevisionAnnotation)] = std::to_string(revision);
  daemon_set["nodeSelector"] = placement_node_selector(placement_label_key(id, version));

  json labels = {{std::string(kOwnerIdLabel), id},
                 {std::string(kOwnerVersionLabel), std::string(version)}};
  if (!site_id.empty()) labels[std::string(kSiteLabel)] = std::string(site_id);
  return {{"apiVersion", std::string(kDpuServiceApiVersion)},
          {"kind", std::string(kDpuServiceKind)},
          {"metadata", {{"name", name}, {"namespace", std::string(ns)}, {"labels", labels}}},
          {"spec",
           {{"deployInCluster", false},
            {"helmChart", std::move(helm_chart)},
            {"security", std::move(security)},
            {"serviceDaemonSet", std::move(daemon_set)}}}};
}

std::optional<std::string> identity_mismatch(const json& live, std::string_view uuid,
                                             std::string_view version, std::string_view ns,
                                             std::string_view site_id) {
  const std::string id = require_uuid(uuid);
  const std::string name = dpf_service_name(id, version);

  // Ownership first: a foreign object should be reported as foreign, not as
  // ours with a strange field.
  if (!string_equals(lookup(live, {"metadata", "labels", kOwnerIdLabel}), id))
    return "metadata.labels[\"nico/extension-service-id\"]";
  if (!site_id.empty() && !string_equals(lookup(live, {"metadata", "labels", kSiteLabel}), site_id))
    return std::string(kSiteLabelPath);
  if (!string_equals(lookup(live, {"metadata", "labels", kOwnerVersionLabel}), version))
    return "metadata.labels[\"nico/extension-service-version\"]";
  if (!string_equals(lookup(live, {"metadata", "name"}), name)) return "metadata.name";
  if (!string_equals(lookup(live, {"metadata", "namespace"}), ns)) return "metadata.namespace";

  const json* deploy = lookup(live, {"spec", "deployInCluster"});
  if (deploy == nullptr || !deploy->is_boolean() || deploy->get<bool>())
    return "spec.deployInCluster";
  if (!string_equals(lookup(live, {"spec", "helmChart", "source", "releaseName"}), name))
    return "spec.helmChart.source.releaseName";
  const json* selector = lookup(live, {"spec", "serviceDaemonSet", "nodeSelector"});
  if (selector == nullptr || *selector != placement_node_selector(placement_label_key(id, version)))
    return "spec.serviceDaemonSet.nodeSelector";
  // Attachment-bound fields NICo never sets; their presence means someone
  // else is steering this object.
  for (const char* field : {"serviceID", "interfaces", "configPorts", "dpuClusterSelector"})
    if (lookup(live, {"spec", field}) != nullptr) return std::string("spec.") + field;
  return std::nullopt;
}

bool owned_by(const json& live, std::string_view uuid) {
  const auto id = canonical_uuid(uuid);
  return id && string_equals(lookup(live, {"metadata", "labels", kOwnerIdLabel}), *id);
}

}  // namespace extsvc::core
