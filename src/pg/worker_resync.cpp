// The resync: drift detection over one LIST, DPF's view of every service,
// and the level-triggered cleanup of orphaned DPUServices (through the orphan guard of
// site_guard.cpp).
#include "pg_prelude.hpp"

#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "controller/resync.hpp"
#include "guard.hpp"
#include "log_sink.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

namespace {

// What a comparison concluded, applied to the database: DPF's statuses, the
// orphans' cleanup, the drifted services made due.
void apply_result(MemoryContext cxt, WorkerSlot* slot, controller::ResyncResult* result,
                  bool listed, int ndrift, char** drift_ids, char** drift_details,
                  char** orphan_names, int norphans, char* dpf_statuses, bool census) {
  if (!listed) return;
  char* error = nullptr;
  record_dpf(cxt, dpf_statuses);
  cleanup_orphans(cxt, slot, result, orphan_names, norphans, census);
  for (int i = 0; i < ndrift; ++i) {
    if (!mark_drift(cxt, drift_ids[i], drift_details[i], &error))
      ereport(WARNING, (errmsg("nico_extsvc: marking drift failed: %s", error)));
    else
      ereport(LOG,
              (errmsg("nico_extsvc: drift on service %s: %s", drift_ids[i], drift_details[i])));
  }
}

std::vector<controller::SnapshotRow> snapshot_rows(const ResyncSnapshot& snap) {
  std::vector<controller::SnapshotRow> rows;
  rows.reserve(snap.count);
  for (int i = 0; i < snap.count; ++i) rows.push_back({snap.service_ids[i], snap.works[i]});
  return rows;
}

// Runs compare() (C++, under the guard) and applies its result.
// census: the resync's comparison of everything listed (the orphan guard counts), not a watch
// event's few services.
template <class Compare>
bool compare_and_apply(MemoryContext cxt, WorkerSlot* slot, bool census, Compare&& compare) {
  bool listed = false;
  int ndrift = 0, norphans = 0;
  char** drift_ids = nullptr;
  char** drift_details = nullptr;
  char** orphan_names = nullptr;
  char* dpf_statuses = nullptr;
  controller::ResyncResult* result = nullptr;  // freed below, under the guard
  PendingError err;
  cpp_call(err, [&] {
    result = new controller::ResyncResult(compare());
    listed = result->listed;
    ndrift = static_cast<int>(result->drifted.size());
    drift_ids = alloc_out<char*>(cxt, ndrift + 1);
    drift_details = alloc_out<char*>(cxt, ndrift + 1);
    for (int i = 0; i < ndrift; ++i) {
      drift_ids[i] = copy_out(cxt, result->drifted[i].first);
      drift_details[i] = copy_out(cxt, result->drifted[i].second);
    }
    norphans = static_cast<int>(result->orphans.size());
    orphan_names = alloc_out<char*>(cxt, norphans + 1);
    for (int i = 0; i < norphans; ++i) orphan_names[i] = copy_out(cxt, result->orphans[i].name);
    if (!result->dpf_statuses.empty()) dpf_statuses = copy_out(cxt, result->dpf_statuses);
  });
  flush_logs();
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("nico_extsvc: resync failed: %s", err.message)));
    listed = false;
  }
  apply_result(cxt, slot, result, listed, ndrift, drift_ids, drift_details, orphan_names, norphans,
               dpf_statuses, census);
  PendingError free_err;
  cpp_call(free_err, [&] { delete result; });
  return listed;
}

}  // namespace

bool resync(MemoryContext cxt, WorkerSlot* slot) {
  ResyncSnapshot snap{};
  char* error = nullptr;
  if (!resync_snapshot(cxt, &snap, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: resync snapshot failed: %s", error)));
    return false;
  }
  return compare_and_apply(cxt, slot, true, [&] {
    const auto rows = snapshot_rows(snap);
    std::vector<std::string> known;
    known.reserve(snap.known_count);
    for (int i = 0; i < snap.known_count; ++i)
      if (snap.known_names[i] != nullptr) known.emplace_back(snap.known_names[i]);
    if (g_runtime->cache() != nullptr) g_runtime->cache()->pump();  // as fresh as it gets
    return controller::resync(*g_runtime, rows, known);
  });
}

void check_drift(MemoryContext cxt, WorkerSlot* slot, const ResyncSnapshot& snap,
                 char* const* service_ids, int nservices) {
  compare_and_apply(cxt, slot, false, [&] {
    const auto rows = snapshot_rows(snap);
    std::vector<std::string> ids;
    for (int i = 0; i < nservices; ++i) ids.emplace_back(service_ids[i]);
    return controller::check_changed(*g_runtime, rows, ids, {});
  });
}

}  // namespace extsvc::pg
