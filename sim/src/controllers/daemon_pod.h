// What the DaemonSet controller decides per Node, as Kubernetes' pkg/controller/daemon does it:
//   * NodeShouldRunDaemonPod (daemon_controller.go): a Node the template's node selector and
//     required affinity do not match gets no pod; nor does one with a NoSchedule or NoExecute
//     taint the pod does not tolerate (shouldRun false), where an existing pod may stay unless a
//     NoExecute taint is untolerated (shouldContinueRunning);
//   * NewPod + util.ReplaceDaemonSetPodNodeNameNodeAffinity + AddOrUpdateDaemonPodTolerations: the
//     pod is created *unbound* (no spec.nodeName), its Node named only by a required node affinity
//     term matchFields metadata.name In [node], with the tolerations every daemon pod gets; the
//     scheduler binds it (scheduler.cpp).
#pragma once

#include <string>

#include "util.h"

namespace dpfsim {

struct ShouldRun {
  bool run = false;   // a pod should run here (create one if there is none)
  bool keep = false;  // an existing pod may keep running here
};

// pod_spec: the template's spec (tolerations without the daemon defaults).
ShouldRun node_should_run_daemon_pod(const json& pod_spec, const json& node);

// The template's tolerations plus the ones the DaemonSet controller adds to every daemon pod.
json daemon_pod_tolerations(const json& pod_spec);

// The pod the controller creates for a node (metadata without name; status Pending, unbound).
json new_daemon_pod(const json& tmpl, const std::string& node, const std::string& hash,
                    long long generation, const json& owner_refs);

// corev1 QoS class of a pod spec (only cpu and memory count, as GetPodQOS).
std::string qos_class(const json& pod_spec);

}  // namespace dpfsim
