// The resync's cluster side: one LIST of our DPUServices compared with the
// desired objects of every READY service (rendered here from the same work
// objects a claim returns), DPF's view of each, and the orphan candidates the
// database is asked about afterwards.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "controller/runtime.hpp"
#include "reconcile/drift_detector.hpp"

namespace extsvc::controller {

struct SnapshotRow {
  std::string service_id;
  std::string work;  // the work object (wire.hpp)
};

struct ResyncResult {
  bool listed = false;  // false: the LIST failed and nothing was concluded
  std::vector<std::pair<std::string, std::string>> drifted;  // service_id, what differs
  std::string dpf_statuses;  // for extsvc.record_dpf_status, or empty
  // listed objects with our ownership label and this site's label and no live service name, not
  // already being deleted
  std::vector<reconcile::OrphanCandidate> orphans;
  // issue 25: listed objects of this site (the orphan guard's base), and those left alone as not
  // this site's (another site's label, or none and no live service of this database)
  size_t site_objects = 0;
  size_t other_site = 0, unlabelled = 0;
  std::vector<std::string> foreign_names;  // the first few, for the log
};

// A row whose work does not decode or render is left out of the comparison
// (its next pass marks it FAILED). With the watch caches (rt.cache(), listed)
// the live side is the cache and no call is made; otherwise one LIST.
ResyncResult resync(Runtime& rt, const std::vector<SnapshotRow>& snapshot,
                    const std::vector<std::string>& known_names);

// The same comparison for the services a watch event concerned (their
// snapshot rows), from the cache; orphans are the cached objects of those
// service ids that are not among known_names. Needs a listed cache.
ResyncResult check_changed(Runtime& rt, const std::vector<SnapshotRow>& snapshot,
                           const std::vector<std::string>& service_ids,
                           const std::vector<std::string>& known_names);

}  // namespace extsvc::controller
