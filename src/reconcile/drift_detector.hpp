// Drift detection for READY services: one label-selected, paged LIST of the
// DPUServices we own, compared in memory with the desired objects (no GET
// per object, no write when nothing differs).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dpf_status.hpp"
#include "core/site.hpp"
#include "kube/client.hpp"

namespace extsvc::reconcile {

struct DesiredService {
  std::string service_id;
  std::string dpf_service_name;
  std::string attachable_version;
  nlohmann::json desired;  // rendered DPUService
};

// A listed DPUService with our ownership label whose name is no live
// service's: a candidate for the resync's cleanup (the database decides).
struct OrphanCandidate {
  std::string name;
  std::string uid;  // sent as preconditions.uid on the DELETE
  bool being_deleted = false;
  std::string service_id;  // its nico/extension-service-id label
  // its nico/site label (issue 25): only this site's objects are ever deleted
  core::SiteMembership site = core::SiteMembership::kOurs;
};

struct DriftReport {
  std::vector<std::pair<std::string, std::string>> drifted;  // service_id, what differs
  std::vector<OrphanCandidate> orphans;  // owned-labelled objects with no live service
  // DPF's Ready condition of every listed service that is ours and intact
  std::vector<std::pair<std::string, core::DpfStatus>> dpf;
  size_t listed = 0;
  size_t ours = 0;  // listed objects that carry this site's label (the orphan guard's base)
  size_t other_site = 0, unlabelled = 0;  // listed, not this site's: never touched
  std::optional<kube::Error> error;       // the LIST failed: nothing can be concluded
};

// Deletes one orphan, only the object that was listed (preconditions.uid).
// A 404 counts as done.
std::optional<kube::Error> delete_orphan(kube::Client& api, const std::string& ns,
                                         const OrphanCandidate& orphan);

// With a site id, the objects of other sites and those without the site label are counted, never
// orphan candidates; a desired object whose live one lacks the label drifts (and is adopted).
DriftReport detect_drift(kube::Client& api, const std::string& ns,
                         const std::vector<DesiredService>& services,
                         const std::vector<std::string>& known_names,
                         const std::string& site_id = "");

}  // namespace extsvc::reconcile
