// DPF release profiles (--dpf-version): the DPUService and DPUDevice CRD schemas of a release and
// the few controller behaviours that differ between releases. Schemas are structural OpenAPI v3
// schemas (descriptions dropped) transcribed from NVIDIA/doca-platform CRDs; see docs/dpfsim.md.
#pragma once

#include <string>
#include <vector>

#include "resources.h"
#include "util.h"

namespace dpfsim {

struct Profile {
  std::string name;        // "v24.10", "v25.7", "v26.10"
  json dpuservice_schema;  // openAPIV3Schema of the DPUService CRD
  json dpudevice_schema;   // openAPIV3Schema of the DPUDevice CRD
  // v24.10: svc.dpu.nvidia.com/service is injected into the values only when spec.serviceID is set.
  bool inject_service_label_always = true;
  // Newest controller: the injected label lands in spec.serviceDaemonSet.labels of the stored
  // DPUService (aliasing + spec patch), bumping its generation.
  bool persist_service_label_in_spec = true;
  bool status_service_id = true;       // status.serviceID exists in the schema
  bool name_length_cel = true;         // CEL self.metadata.name.size() <= 63
  bool privileged_cel = true;          // security.privileged CEL rules
  bool config_ports_condition = true;  // ConditionPortsReconciled condition
  // The DPUDevice CRD exists (v24.10 has none: its DPUSets select Nodes, DPUs come from them).
  bool serves_dpudevices = true;
};

// The names of all profiles, newest last; the default is the newest.
std::vector<std::string> profile_names();
// Selects the active profile; throws std::invalid_argument for an unknown name. May be called
// while serving (POST /profile: DPF upgraded or downgraded in place; stored objects stay as they
// are, as a CRD change leaves stored objects alone until they are written again).
void set_profile(const std::string& name);
const Profile& profile();

// Whether the active profile's cluster serves the resource at all (discovery, OpenAPI, the API
// paths, seeding). A resource it does not serve answers 404 for the resource, as a real API
// server without that CRD does.
bool served(const ResourceInfo& ri);

// The schema the active profile has for a resource (nullptr: no structural schema; nothing is
// pruned).
const json* schema_for(const ResourceInfo& ri);

// Structural pruning: removes every field the schema does not know and appends its path
// ("spec.security") to unknown. metadata is not touched.
void prune_with_schema(const json& schema, json& obj, const std::string& path,
                       std::vector<std::string>* unknown);

// OpenAPI documents for one simulated cluster.
std::string openapi_v2(ClusterId c);
std::string openapi_v3_root(ClusterId c);
// path: "api/v1" or "apis/<group>/<version>"; empty when unknown.
std::string openapi_v3_group_version(ClusterId c, const std::string& path);

}  // namespace dpfsim
