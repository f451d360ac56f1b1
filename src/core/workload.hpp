// Which DPUService a workload object belongs to when the chart dropped our labels (issue 23,
// part 2; DPF's chart contract in docs/operator-guide.md). A chart decides names, labels and
// namespaces; what it cannot decide is what Argo CD writes on every object it applies for the
// DPUService's Application (the tracking-id annotation, "<app>:<group>/<Kind>:<ns>/<name>";
// under Argo's label tracking the app.kubernetes.io/instance label) and the controller
// ownerReference Kubernetes puts on a DaemonSet's pods. DPF names the Application
// "<dpuClusterName>-<dpuServiceName>", so our DPUService's name ends it. Pure logic.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace extsvc::core {

inline constexpr const char* kArgoTrackingAnnotation = "argocd.argoproj.io/tracking-id";

// The name of our DPUService ("extsvc-" and the 20-character identity hash) whose Argo
// Application applied this object, or "" when the object is not tracked for one of ours.
std::string tracked_dpuservice(const nlohmann::json& object);

// The uid of the object's controller ownerReference of kind DaemonSet, or "".
std::string daemonset_owner_uid(const nlohmann::json& object);

// The PENDING message's reason when pods of the release on the Node cannot prove a revision
// because the chart dropped what the contract makes it copy onto them.
inline constexpr const char* kChartContractMessage =
    "chart does not propagate serviceDaemonSet.labels/annotations: revision cannot be proven";

}  // namespace extsvc::core
