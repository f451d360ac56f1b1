#include "controller/resync.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <new>

#include "controller/wire.hpp"

namespace extsvc::controller {

ResyncResult resync(Runtime& rt, const std::vector<SnapshotRow>& snapshot,
                    const std::vector<std::string>& known_names) {
  ResyncResult out;
  std::vector<reconcile::DesiredService> services;
  services.reserve(snapshot.size());
  for (const auto& row : snapshot) {
    try {
      ServiceItem item = decode_service_work(row.work);
      render_desired(item);
      services.push_back({item.work.service_id, item.work.dpf_service_name,
                          item.work.attachable_version, std::move(item.work.desired)});
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      spdlog::debug("resync: service {} left out: {}", row.service_id, e.what());
    }
  }
  const auto report = reconcile::detect_drift(rt.management(), rt.ns(), services, known_names);
  if (report.error) {
    spdlog::warn("resync LIST failed: {}", kube::describe(*report.error));
    return out;
  }
  out.listed = true;
  out.drifted = report.drifted;
  out.dpf_statuses = encode_dpf_statuses(report.dpf);
  for (const auto& o : report.orphans)
    if (!o.being_deleted) out.orphans.push_back(o);
  spdlog::debug("resync: {} listed, {} READY services, {} drifted", report.listed, services.size(),
                out.drifted.size());
  return out;
}

}  // namespace extsvc::controller
