// What a placement pass reads of DPF's DPU object and of the DPU-cluster Node, small enough to
// keep one of each per DPU in the worker's watch cache. The label path has three hops (DPUDevice
// spec.cluster.nodeLabels -> DPU spec.cluster.nodeLabels -> Node labels, each done by a DPF
// controller on its own schedule), so the DPU object is evidence of its own: a key can still be
// on it, and reach the Node, after the DPUDevice dropped it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace extsvc::core {

// Only the keys NICo owns (nico/extsvc-*), as strings.
using NicoLabels = std::map<std::string, std::string>;
NicoLabels nico_labels_of(const nlohmann::json& labels);

struct DpuObjectFacts {
  std::string name;    // = the DPU-cluster Node's name (DPF's GenerateNodeName)
  std::string device;  // spec.dpuDeviceName
  NicoLabels labels;   // spec.cluster.nodeLabels, NICo's keys
  std::string phase;   // status.phase ("Ready", "DPU Cluster Config", "Node Effect", ...)
  // The first condition that is not True among Ready, DPUClusterReady, NodeEffectReady and
  // NodeEffectRemoved, as "DPUClusterReady=False NodeNotReady: node is not ready"; "" when none.
  std::string condition;
  bool operator==(const DpuObjectFacts&) const = default;
};
DpuObjectFacts dpu_object_facts(const nlohmann::json& dpu);

// "DPU x: phase DPU Cluster Config (DPUClusterReady=False NodeNotReady: node is not ready)".
std::string describe_dpu(const DpuObjectFacts& dpu);

struct NodeFacts {
  NicoLabels labels;        // metadata.labels, NICo's keys
  std::string ready;        // the Ready condition's status: True, False, Unknown ("" when absent)
  std::string ready_why;    // "NodeStatusUnknown: Kubelet stopped posting node status."
  std::string ready_since;  // its lastTransitionTime
  bool operator==(const NodeFacts&) const = default;
};
NodeFacts node_facts(const nlohmann::json& node);

// The Node's kubelet stopped reporting (Ready=Unknown: the node-lifecycle controller's verdict
// after its grace period): nothing observed of its pods is current.
inline bool unreachable(const NodeFacts& node) {
  return node.ready == "Unknown";
}

// "Node n is Ready=Unknown since T (NodeStatusUnknown: Kubelet stopped posting node status.)".
std::string describe_node_readiness(const std::string& name, const NodeFacts& node);

}  // namespace extsvc::core
