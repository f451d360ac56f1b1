#pragma once

#include <optional>
#include <string_view>

namespace extsvc::core {

// Per-DPU deployment state of one attachment (SPEC 2.8).
enum class DeploymentState { kPending, kRunning, kTerminating, kTerminated, kError, kUnknown };

std::string_view to_string(DeploymentState state);
std::optional<DeploymentState> deployment_state_from_string(std::string_view text);

// One DPU's observation for one service version (SPEC 2.8). Pods are found
// by the service label and the Node, never by name.
struct DpuObservation {
  bool wanted;    // an active reason to carry the label exists
  bool observed;  // false => DPU cluster unreachable, Node unmapped or observation stale
  bool device_has_label;
  bool node_has_label;
  int ready_pods_applied_revision;  // Running + Ready pods of the applied revision, not deleting
  int pods_on_node;                 // every pod of the service on the Node, terminating included
  bool error;                       // non-transient failure (patch refused, DPUDevice missing)
  bool dpu_gone = false;            // DPUDevice and Node both answered 404
  // The DPU object's spec.cluster.nodeLabels carries the key (the middle hop). dpu_missing: no
  // DPU object exists (nothing can carry a key to the Node then).
  bool dpu_has_label = false;
  bool dpu_missing = false;
  bool node_unreachable = false;  // the Node is Ready=Unknown (its kubelet stopped reporting)
};

DeploymentState derive_deployment_state(const DpuObservation& obs);

}  // namespace extsvc::core
