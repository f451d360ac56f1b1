// corev1.NodeSelector semantics: terms ORed, expressions within a term ANDed.
#pragma once

#include "util.h"

namespace dpfsim {

// nodeSelector: corev1.NodeSelector JSON ({"nodeSelectorTerms":[...]}); null/absent matches every
// node.
bool node_selector_matches(const json& node_selector, const json& node);
// Whether a pod template (affinity.nodeAffinity.required... and spec.nodeSelector map) fits a node.
bool pod_spec_fits_node(const json& pod_spec, const json& node);

}  // namespace dpfsim
