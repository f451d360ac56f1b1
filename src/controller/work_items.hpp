// One claimed row through its reconciler: decode the work (wire.hpp), render,
// reconcile under the pass's budget (its lease fence), encode the outcome. A row that cannot be
// decoded or rendered, or a reconciler that fails, becomes an outcome too, so
// the caller always has something to complete; only std::bad_alloc escapes.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/runtime.hpp"
#include "core/dpf_status.hpp"
#include "kube/budget.hpp"

namespace extsvc::controller {

struct ItemResult {
  std::string outcome;                 // JSON object for extsvc.complete
  bool retry = false;                  // the outcome is a retry
  const char* retry_reason = nullptr;  // static; why, for the metrics (may be null)
  bool fenced = false;                 // the lease fence stopped the pass
  std::string warning;                 // why the claimed work did not fit the wire schema
  std::string summary;                 // one debug line: what was decided
};

using DpfSeen = std::vector<std::pair<std::string, core::DpfStatus>>;

// A claimed DPF service. DPF's view of the service, when a live object was
// seen, is appended to *dpf_seen.
ItemResult work_service(Runtime& rt, std::string_view work_json, const kube::Budget& budget,
                        DpfSeen* dpf_seen);

// Issue 25: which present placement keys a DPU pass may remove (reconcile::DpuWork).
struct DpuKeyPolicy {
  const std::set<std::string>* registered = nullptr;  // the site's registry; null: all are ours
  std::function<bool()> derived_removal_ok;           // the orphan guard; empty: allowed
};

// A claimed DPU, with the batch's reconciler. A DPU has no FAILED state and
// its work is rebuilt from the tables at every claim: one that cannot be
// decoded backs off for undecodable_backoff_s with the reason as its error.
ItemResult work_dpu(Runtime& rt, reconcile::DpuReconciler& rec, std::string_view work_json,
                    const kube::Budget& budget, double undecodable_backoff_s,
                    const DpuKeyPolicy& keys = {});

}  // namespace extsvc::controller
