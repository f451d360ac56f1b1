#include "resources.h"

namespace dpfsim {

const char* cluster_name(ClusterId c) {
  return c == ClusterId::Management ? "management" : "dpu";
}

static std::vector<ResourceInfo> build() {
  std::vector<ResourceInfo> v;
  auto add = [&](ClusterId c, std::string g, std::string ver, std::string plural,
                 std::string singular, std::string kind, bool namespaced, bool has_status,
                 bool custom, bool has_generation, std::vector<std::string> shorts,
                 std::vector<std::string> cats) {
    ResourceInfo r;
    r.cluster = c;
    r.group = std::move(g);
    r.version = std::move(ver);
    r.plural = std::move(plural);
    r.singular = std::move(singular);
    r.kind = std::move(kind);
    r.namespaced = namespaced;
    r.has_status = has_status;
    r.custom = custom;
    r.has_generation = has_generation;
    r.short_names = std::move(shorts);
    r.categories = std::move(cats);
    v.push_back(std::move(r));
  };
  const auto M = ClusterId::Management;
  const auto D = ClusterId::Dpu;
  add(M, "svc.dpu.nvidia.com", "v1alpha1", "dpuservices", "dpuservice", "DPUService", true, true,
      true, true, {}, {});
  add(M, "provisioning.dpu.nvidia.com", "v1alpha1", "dpudevices", "dpudevice", "DPUDevice", true,
      true, true, true, {}, {});
  add(M, "provisioning.dpu.nvidia.com", "v1alpha1", "dpus", "dpu", "DPU", true, true, true, true,
      {}, {});
  // Argo CD Application CRD: namespaced, no status subresource.
  add(M, "argoproj.io", "v1alpha1", "applications", "application", "Application", true, false, true,
      true, {"app", "apps"}, {"argo"});
  add(M, "", "v1", "namespaces", "namespace", "Namespace", false, true, false, false, {"ns"}, {});
  // coordination.k8s.io/v1 Lease (issue 25: the site's writer lease): native, no status, no
  // generation; pkg/registry/coordination/lease/strategy.go: AllowUnconditionalUpdate false,
  // AllowCreateOnUpdate true.
  add(M, "coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false, false, false, {},
      {});
  v.back().allow_unconditional_update = false;
  v.back().allow_create_on_update = true;
  add(D, "", "v1", "nodes", "node", "Node", false, true, false, false, {"no"}, {});
  add(D, "", "v1", "pods", "pod", "Pod", true, true, false, false, {"po"}, {"all"});
  add(D, "", "v1", "namespaces", "namespace", "Namespace", false, true, false, false, {"ns"}, {});
  add(D, "", "v1", "events", "event", "Event", true, false, false, false, {"ev"}, {});
  add(D, "apps", "v1", "daemonsets", "daemonset", "DaemonSet", true, true, false, true, {"ds"},
      {"all"});
  add(D, "apps", "v1", "controllerrevisions", "controllerrevision", "ControllerRevision", true,
      false, false, false, {}, {});
  return v;
}

const std::vector<ResourceInfo>& all_resources() {
  static const std::vector<ResourceInfo> v = build();
  return v;
}

const ResourceInfo* find_resource(ClusterId c, const std::string& group, const std::string& version,
                                  const std::string& plural) {
  for (const auto& r : all_resources())
    if (r.cluster == c && r.group == group && r.version == version && r.plural == plural) return &r;
  return nullptr;
}

const ResourceInfo* find_resource_by_kind(ClusterId c, const std::string& api_version,
                                          const std::string& kind) {
  for (const auto& r : all_resources())
    if (r.cluster == c && r.api_version() == api_version && r.kind == kind) return &r;
  return nullptr;
}

const ResourceInfo* find_resource_by_plural(ClusterId c, const std::string& plural) {
  for (const auto& r : all_resources())
    if (r.cluster == c && r.plural == plural) return &r;
  return nullptr;
}

}  // namespace dpfsim
