// DPF's privileged-pod admission in the DPU cluster (v26.8+): the ValidatingAdmissionPolicy
// `dpf-deny-privileged-pods` and its binding of the same name, as DPF installs them
// (internal/dpuservice/controllers/manifests/privileged-pod-enforcement-vap.yaml and
// dpuservice_privileged_pod_enforcement.go in NVIDIA/doca-platform):
//   * matched: CREATE/UPDATE of pods, daemonsets, deployments, replicasets, statefulsets, jobs and
//     cronjobs in a namespace labelled svc.dpu.nvidia.com/dpuservice-namespace (DPF labels the
//     namespaces its Applications deploy to);
//   * the DPUService is named by the label svc.dpu.nvidia.com/service on the object or on its pod
//     template; an object without it is outside the policy (so is one being deleted);
//   * a privileged container (or init / ephemeral container) is denied unless that service id is
//     in the allowlist ConfigMap, which holds every DPUService whose spec.security.privileged
//     resolves to true (unset resolves to true: privilegedDefaultForUnsetSecurity);
//   * the binding's action is Deny while DPFOperatorConfig enforces (the default), Audit (nothing
//     denied) otherwise.
// A denial is the API server's 422 Invalid Status: `<resource> "<name>" is forbidden:
// ValidatingAdmissionPolicy 'dpf-deny-privileged-pods' with binding 'dpf-deny-privileged-pods'
// denied request: Privileged containers are not allowed for this DPUService unless
// security.privileged is set to true.`
#pragma once

#include <optional>

#include "kube_errors.h"
#include "store.h"

namespace dpfsim {

inline constexpr const char* kPrivilegedPolicyName = "dpf-deny-privileged-pods";
inline constexpr const char* kDpuServiceNamespaceScopeLabel =
    "svc.dpu.nvidia.com/dpuservice-namespace";

// The error for obj (a DPU-cluster pod or workload), or nullopt when admitted. The caller holds
// the store mutex; enforce is DPFOperatorConfig's privilegedPodEnforcement.
std::optional<ApiError> privileged_admission_l(const Store& st, bool enforce,
                                               const ResourceInfo& ri, const json& obj);

}  // namespace dpfsim
