#include "core/deployment_status.hpp"

#include <array>
#include <utility>

namespace extsvc::core {
namespace {

constexpr std::array<std::pair<DeploymentState, std::string_view>, 6> kNames = {{
    {DeploymentState::kPending, "PENDING"},
    {DeploymentState::kRunning, "RUNNING"},
    {DeploymentState::kTerminating, "TERMINATING"},
    {DeploymentState::kTerminated, "TERMINATED"},
    {DeploymentState::kError, "ERROR"},
    {DeploymentState::kUnknown, "UNKNOWN"},
}};

}  // namespace

std::string_view to_string(DeploymentState state) {
  for (const auto& [s, name] : kNames)
    if (s == state) return name;
  return "UNKNOWN";
}

std::optional<DeploymentState> deployment_state_from_string(std::string_view text) {
  for (const auto& [s, name] : kNames)
    if (name == text) return s;
  return std::nullopt;
}

DeploymentState derive_deployment_state(const DpuObservation& obs) {
  if (obs.error) return DeploymentState::kError;
  // Both objects answered 404: nothing of the service can run there any more,
  // which is termination for an unwanted item and a failure for a wanted one.
  if (obs.dpu_gone) return obs.wanted ? DeploymentState::kError : DeploymentState::kTerminated;
  if (!obs.observed) return DeploymentState::kUnknown;
  if (obs.wanted) {
    // A Node that stopped reporting: what its pods do is not observed (their Ready is the
    // lifecycle controller's guess), so neither RUNNING nor "not running" is a fact.
    if (obs.node_unreachable) return DeploymentState::kUnknown;
    const bool running = obs.device_has_label && (obs.dpu_has_label || obs.dpu_missing) &&
                         obs.node_has_label && obs.ready_pods_applied_revision >= 1;
    return running ? DeploymentState::kRunning : DeploymentState::kPending;
  }
  // Termination needs the key gone from all three objects of the label path: one still on the
  // DPU object reaches the Node later.
  const bool gone =
      !obs.device_has_label && !obs.dpu_has_label && !obs.node_has_label && obs.pods_on_node == 0;
  if (!gone) return DeploymentState::kTerminating;
  return obs.node_unreachable ? DeploymentState::kUnknown : DeploymentState::kTerminated;
}

}  // namespace extsvc::core
