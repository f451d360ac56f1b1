#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace extsvc::core {

// Per-DPU deployment state of one attachment (SPEC 2.8).
enum class DeploymentState { kPending, kRunning, kTerminating, kTerminated, kError, kUnknown };

std::string_view to_string(DeploymentState state);
std::optional<DeploymentState> deployment_state_from_string(std::string_view text);

// Aggregate over DPUs: ERROR > UNKNOWN > PENDING > (all RUNNING -> RUNNING)
// > TERMINATING > (all TERMINATED -> TERMINATED). An empty set and a mix of
// only RUNNING and TERMINATED are UNKNOWN: neither claim holds for every DPU,
// and the aggregate must never claim more than was observed.
DeploymentState aggregate(const std::vector<DeploymentState>& states);

// One DPU's observation for one service version.
struct DpuObservation {
  bool wanted;    // an active reason to carry the label exists
  bool observed;  // false => DPU cluster unreachable, Node unmapped or observation stale
  bool device_has_label;
  bool node_has_label;
  int ready_pods_current_revision;  // Ready pods of the DaemonSet's current revision on the Node
  int nonterminal_pods;             // pods of the service on the Node not yet Succeeded/Failed/gone
  bool error;                       // non-transient failure (patch refused, DPUDevice missing)
};

DeploymentState derive_deployment_state(const DpuObservation& obs);

}  // namespace extsvc::core
