// What one pod of a service proves about its DPU (SPEC 2.8). Pure logic over
// the pod JSON as the DPU cluster's API returns it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace extsvc::core {

struct PodVerdict {
  // Running, Ready=True, no deletionTimestamp and the revision annotation
  // equal to the applied revision: the only evidence that counts as RUNNING.
  bool proves_running = false;
  bool terminating = false;  // deletionTimestamp set
  int revision = 0;          // from the revision annotation; 0 when absent or not a number
  // Why it does not prove RUNNING, for status_message ("" when it does):
  // "pod X of revision 3 (applied: 4)", "pod X: container waiting (CrashLoopBackOff)", ...
  std::string reason;
};

// What classify_pod reads of a pod, small enough to keep thousands of them in the worker's
// watch cache.
struct PodFacts {
  std::string name;
  // The Node the pod is for: spec.nodeName once the scheduler bound it; before that the one Node
  // its required node affinity names (matchFields metadata.name In [x], as the DaemonSet
  // controller writes it; Kubernetes' GetTargetNodeName). A pending pod counts for its Node.
  std::string node;
  bool bound = false;      // spec.nodeName is set
  std::string service_id;  // the nico/extension-service-id label
  bool terminating = false;
  int revision = 0;  // the revision annotation; 0 when absent or not a positive number
  std::string phase;
  bool ready = false;   // condition Ready=True
  std::string problem;  // the first waiting/terminated container with a reason, for messages
  // PodScheduled=False as the scheduler wrote it ("Unschedulable: 0/4 nodes are available: ...");
  // "" when scheduled or not judged yet
  std::string unschedulable;
  bool operator==(const PodFacts&) const = default;
};

PodFacts pod_facts(const nlohmann::json& pod);

PodVerdict classify_pod(const PodFacts& pod, int applied_revision);
PodVerdict classify_pod(const nlohmann::json& pod, int applied_revision);

// The PENDING message for a wanted service on one Node from its pods'
// verdicts: the most telling reason first ("no pod of the service on Node
// N yet" when there is none).
std::string pending_pods_reason(const std::vector<PodVerdict>& pods, const std::string& node);

}  // namespace extsvc::core
