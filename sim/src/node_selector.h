// corev1.NodeSelector semantics: terms ORed, expressions within a term ANDed.
#pragma once

#include <initializer_list>
#include <string>

#include "util.h"

namespace dpfsim {

// nodeSelector: corev1.NodeSelector JSON ({"nodeSelectorTerms":[...]}); null/absent matches every
// node.
bool node_selector_matches(const json& node_selector, const json& node);
// The node a pod is for: spec.nodeName once bound, else the one node its required node affinity
// names with a matchFields metadata.name In [x] term (Kubernetes' daemon util GetTargetNodeName,
// pkg/controller/daemon/util); "" when neither says.
std::string pod_target_node(const json& pod);
// Whether a pod template (affinity.nodeAffinity.required... and spec.nodeSelector map) fits a node.
bool pod_spec_fits_node(const json& pod_spec, const json& node);

// Kubernetes' toleration matching (corev1 Toleration.ToleratesTaint): the first of the Node's
// taints whose effect is one of effects and that no toleration tolerates; nullptr when none.
const json* untolerated_taint(const json& node, const json* tolerations,
                              std::initializer_list<const char*> effects);
// "{key: value}", as the scheduler names a taint in its messages.
std::string describe_taint(const json& taint);

}  // namespace dpfsim
