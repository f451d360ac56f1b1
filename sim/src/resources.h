// Registry of the Kubernetes resources each simulated cluster serves.
#pragma once

#include <string>
#include <vector>

namespace dpfsim {

enum class ClusterId { Management = 0, Dpu = 1 };

const char* cluster_name(ClusterId c);  // "management" | "dpu"

struct ResourceInfo {
  ClusterId cluster;
  std::string group;  // "" for core
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = true;
  bool has_status = true;       // status subresource
  bool custom = false;          // CustomResource semantics (strict PUT, no strategic merge)
  bool has_generation = false;  // metadata.generation maintained
  // The registry strategy's AllowUnconditionalUpdate / AllowCreateOnUpdate (kube-apiserver): a
  // PUT without metadata.resourceVersion is refused (422) when unconditional updates are not
  // allowed; a PUT of a missing object creates it when create-on-update is allowed (Lease).
  bool allow_unconditional_update = true;
  bool allow_create_on_update = false;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  std::string list_kind() const { return kind + "List"; }
  // "dpuservices.svc.dpu.nvidia.com" or "nodes" for core.
  std::string qualified_resource() const { return group.empty() ? plural : plural + "." + group; }
  // "DPUService.svc.dpu.nvidia.com" or "Node" for core.
  std::string qualified_kind() const { return group.empty() ? kind : kind + "." + group; }
};

const std::vector<ResourceInfo>& all_resources();
const ResourceInfo* find_resource(ClusterId c, const std::string& group, const std::string& version,
                                  const std::string& plural);
const ResourceInfo* find_resource_by_kind(ClusterId c, const std::string& api_version,
                                          const std::string& kind);
const ResourceInfo* find_resource_by_plural(ClusterId c, const std::string& plural);
// A resource every simulated cluster serves (the controllers' own kinds).
inline const ResourceInfo& known_resource(ClusterId c, const char* plural) {
  return *find_resource_by_plural(c, plural);
}

// Well-known names.
namespace names {
inline constexpr const char* kDpfNamespace = "dpf-operator-system";
inline constexpr const char* kDpuServiceFinalizer = "dpu.nvidia.com/dpuservice";
inline constexpr const char* kServiceIdLabel = "svc.dpu.nvidia.com/service";
inline constexpr const char* kDpuNodeNameLabel = "provisioning.dpu.nvidia.com/dpunode-name";
inline constexpr const char* kDpuNodeNamespaceLabel =
    "provisioning.dpu.nvidia.com/dpunode-namespace";
inline constexpr const char* kDpfVersionLabel = "operator.dpu.nvidia.com/dpf-version";
inline constexpr const char* kLastAppliedLabels =
    "provisioning.dpu.nvidia.com/last-applied-labels-on-dpu";
inline constexpr const char* kDpuServiceNameLabel = "dpu.nvidia.com/dpuservice-name";
inline constexpr const char* kDpuServiceNamespaceLabel = "dpu.nvidia.com/dpuservice-namespace";
inline constexpr const char* kRevisionHashLabel = "controller-revision-hash";
inline constexpr const char* kCurrentRevisionAnnotation =
    "sim.dpu.nvidia.com/current-revision-hash";
inline constexpr const char* kDpfVersion = "v25.10.0";
inline constexpr const char* kDpuClusterName = "dpu-cplane-tenant1";
inline constexpr const char* kDpuClusterLabel = "dpu.nvidia.com/cluster";
inline constexpr const char* kComponentLabel = "dpu.nvidia.com/component";
inline constexpr const char* kArgoFinalizer = "resources-finalizer.argocd.argoproj.io";
inline constexpr const char* kArgoTrackingId = "argocd.argoproj.io/tracking-id";
inline constexpr const char* kArgoProject = "doca-platform-project-dpu";
}  // namespace names

}  // namespace dpfsim
