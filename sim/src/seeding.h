// Seeding of DPUDevices, DPUs and DPU-cluster Nodes, and builders shared with the controllers.
//
// Naming (index i, zero-padded to 4 digits), all in namespace dpf-operator-system:
//   DPUDevice  dpu-device-0000   label provisioning.dpu.nvidia.com/dpunode-name=host-0000
//   DPU        host-0000-dpu-device-0000   (<dpunode>-<dpudevice>)
//   Node       host-0000-dpu-device-0000   (DPU cluster, cluster-scoped, same name as the DPU)
#pragma once

#include <string>

#include "sim_context.h"
#include "store.h"

namespace dpfsim {

// Trailing digits of a name (host-0007-dpu-device-0007 -> 7); used for stable IPs.
int index_from_name(const std::string& name);
std::string dpu_object_name(const std::string& dpu_node, const std::string& dpu_device);

// Labels DPF itself puts into DPU.spec.cluster.nodeLabels.
json dpf_system_node_labels(const std::string& dpu_node, const std::string& ns);
json make_dpudevice(const std::string& ns, const std::string& name, const std::string& dpu_node,
                    int index);
// DPU object for a device; user_labels is the device's spec.cluster.nodeLabels.
json make_dpu(const std::string& ns, const json& device, const json& user_labels);
// Ready DPU-cluster Node for a DPU object (labels already applied).
json make_node(const json& dpu, int index);
json make_namespace(const std::string& name);

// Caller holds store.mutex().
void seed_baseline_l(Store& store);
void seed_dpus_l(Store& store, int n);
// Seed file / POST /seed body: {"dpus": N, "objects": [{"cluster": "management|dpu", ...object...}
// | object]}.
void seed_from_json_l(Store& store, const json& spec);

}  // namespace dpfsim
