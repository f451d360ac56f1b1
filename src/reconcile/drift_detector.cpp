#include "reconcile/drift_detector.hpp"

#include <unordered_map>
#include <unordered_set>

#include "core/dpuservice_render.hpp"
#include "core/json_access.hpp"
#include "core/merge_patch.hpp"

namespace extsvc::reconcile {

DriftReport detect_drift(kube::Client& api, const std::string& ns,
                         const std::vector<DesiredService>& services,
                         const std::vector<std::string>& known_names, const std::string& site_id) {
  DriftReport report;
  auto listed = api.list(kube::dpuservices_path(ns), "nico/extension-service-id");
  if (!listed.ok()) {
    report.error = listed.error();
    return report;
  }
  std::unordered_map<std::string, const nlohmann::json*> by_name;
  const auto& items = listed.value().body["items"];
  report.listed = items.size();
  for (const auto& item : items) {
    const auto name = core::json_text_at(item, {"metadata", "name"});
    by_name.emplace(name, &item);
  }
  for (const auto& s : services) {
    const auto it = by_name.find(s.dpf_service_name);
    if (it == by_name.end()) {
      report.drifted.emplace_back(s.service_id, "DPUService is missing");
      continue;
    }
    const auto& live = *it->second;
    if (auto field =
            core::identity_mismatch(live, s.service_id, s.attachable_version, ns, site_id)) {
      report.drifted.emplace_back(s.service_id, "identity differs at " + *field);
    } else {
      report.dpf.emplace_back(s.service_id, core::dpf_status(live));
      if (!core::dpuservice_mutable_patch(live, s.desired).empty())
        report.drifted.emplace_back(s.service_id,
                                    "DPUService spec differs from the desired revision");
    }
  }
  const std::unordered_set<std::string> known(known_names.begin(), known_names.end());
  for (const auto& [name, item] : by_name) {
    const auto site =
        site_id.empty() ? core::SiteMembership::kOurs : core::site_membership(*item, site_id);
    if (site == core::SiteMembership::kOurs) ++report.ours;
    if (site == core::SiteMembership::kForeign) ++report.other_site;
    if (site == core::SiteMembership::kUnlabelled) ++report.unlabelled;
    if (known.count(name)) continue;
    OrphanCandidate c;
    c.name = name;
    c.site = site;
    c.service_id = core::json_text_at(*item, {"metadata", "labels", "nico/extension-service-id"});
    const auto& md = (*item)["metadata"];
    if (md.contains("uid") && md["uid"].is_string()) c.uid = md["uid"].get<std::string>();
    c.being_deleted = md.contains("deletionTimestamp") && !md["deletionTimestamp"].is_null();
    report.orphans.push_back(std::move(c));
  }
  return report;
}

std::optional<kube::Error> delete_orphan(kube::Client& api, const std::string& ns,
                                         const OrphanCandidate& orphan) {
  nlohmann::json options = nlohmann::json::object();
  if (!orphan.uid.empty()) options["preconditions"]["uid"] = orphan.uid;
  auto deleted = api.del(kube::dpuservices_path(ns, orphan.name), options);
  if (deleted.ok() || deleted.kind() == kube::ErrorKind::kNotFound) return std::nullopt;
  return deleted.error();
}

}  // namespace extsvc::reconcile
