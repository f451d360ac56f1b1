#include "controller/resync.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <new>
#include <set>
#include <unordered_set>

#include "controller/wire.hpp"
#include "core/drift_key.hpp"
#include "core/site.hpp"

namespace extsvc::controller {

namespace {

std::vector<reconcile::DesiredService> desired_of(const std::vector<SnapshotRow>& snapshot,
                                                  const std::string& site_id) {
  std::vector<reconcile::DesiredService> services;
  services.reserve(snapshot.size());
  for (const auto& row : snapshot) {
    try {
      ServiceItem item = decode_service_work(row.work);
      render_desired(item, site_id);
      services.push_back({item.work.service_id, item.work.dpf_service_name,
                          item.work.attachable_version, std::move(item.work.desired)});
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      spdlog::debug("resync: service {} left out: {}", row.service_id, e.what());
    }
  }
  return services;
}

// detect_drift's comparison with the watch cache as the live side: the drift key holds exactly
// what identity_mismatch and dpuservice_mutable_patch compare (core/drift_key.hpp).
reconcile::DriftReport drift_from_cache(const ClusterCache& cache,
                                        const std::vector<reconcile::DesiredService>& services,
                                        const std::vector<std::string>& known_names,
                                        const std::set<std::string>* only_ids,
                                        const std::string& site_id) {
  reconcile::DriftReport report;
  const auto& live = cache.services_by_name();
  report.listed = live.size();
  for (const auto& s : services) {
    const auto it = live.find(s.dpf_service_name);
    if (it == live.end()) {
      report.drifted.emplace_back(s.service_id, "DPUService is missing");
      continue;
    }
    // (DPF's status reaches the database from the watch events themselves)
    const std::string want = core::dpuservice_drift_key(s.desired);
    if (!std::equal(want.begin(), want.end(), it->second.drift_key.begin(),
                    it->second.drift_key.end()))
      report.drifted.emplace_back(
          s.service_id, "DPUService differs from the desired revision (seen by the watch)");
  }
  const std::unordered_set<std::string> known(known_names.begin(), known_names.end());
  for (const auto& [name, f] : live) {
    const auto site = site_id.empty()     ? core::SiteMembership::kOurs
                      : !f.has_site       ? core::SiteMembership::kUnlabelled
                      : f.site == site_id ? core::SiteMembership::kOurs
                                          : core::SiteMembership::kForeign;
    if (site == core::SiteMembership::kOurs) ++report.ours;
    if (site == core::SiteMembership::kForeign) ++report.other_site;
    if (site == core::SiteMembership::kUnlabelled) ++report.unlabelled;
    if (known.count(name)) continue;
    if (only_ids != nullptr && !only_ids->count(f.service_id)) continue;
    reconcile::OrphanCandidate c;
    c.name = name;
    c.uid = f.uid;
    c.being_deleted = f.being_deleted;
    c.service_id = f.service_id;
    c.site = site;
    report.orphans.push_back(std::move(c));
  }
  return report;
}

// Only this site's objects are orphan candidates; the others are counted and named (issue 25):
// never patched or deleted, whatever the database holds.
ResyncResult to_result(const reconcile::DriftReport& report) {
  constexpr size_t kNamed = 20;
  ResyncResult out;
  out.listed = true;
  out.drifted = report.drifted;
  out.dpf_statuses = encode_dpf_statuses(report.dpf);
  out.site_objects = report.ours;
  out.other_site = report.other_site;
  out.unlabelled = report.unlabelled;
  for (const auto& o : report.orphans) {
    if (o.site != core::SiteMembership::kOurs) {
      if (out.foreign_names.size() < kNamed)
        out.foreign_names.push_back(o.name + " (" + core::to_string(o.site) + ")");
      continue;
    }
    if (!o.being_deleted) out.orphans.push_back(o);
  }
  return out;
}

}  // namespace

ResyncResult check_changed(Runtime& rt, const std::vector<SnapshotRow>& snapshot,
                           const std::vector<std::string>& service_ids,
                           const std::vector<std::string>& known_names) {
  ClusterCache* cache = rt.cache();
  if (cache == nullptr || !cache->management_synced()) return {};
  const std::set<std::string> ids(service_ids.begin(), service_ids.end());
  const auto services = desired_of(snapshot, rt.site_id());
  return to_result(drift_from_cache(*cache, services, known_names, &ids, rt.site_id()));
}

ResyncResult resync(Runtime& rt, const std::vector<SnapshotRow>& snapshot,
                    const std::vector<std::string>& known_names) {
  ResyncResult out;
  const auto services = desired_of(snapshot, rt.site_id());
  // the cache answers only while its streams are open: a cache that lost them would report the
  // DPUServices created since as missing (the LIST below then answers, or fails and concludes
  // nothing, as before the watch)
  if (ClusterCache* cache = rt.cache();
      cache != nullptr && cache->management_synced() && cache->management_current()) {
    out = to_result(drift_from_cache(*cache, services, known_names, nullptr, rt.site_id()));
    spdlog::debug("resync (watch cache): {} cached, {} READY services, {} drifted",
                  cache->services_by_name().size(), services.size(), out.drifted.size());
    return out;
  }
  const auto report =
      reconcile::detect_drift(rt.management(), rt.ns(), services, known_names, rt.site_id());
  if (report.error) {
    spdlog::warn("resync LIST failed: {}", kube::describe(*report.error));
    return out;
  }
  out = to_result(report);
  spdlog::debug("resync: {} listed, {} READY services, {} drifted", report.listed, services.size(),
                out.drifted.size());
  return out;
}

}  // namespace extsvc::controller
