// The test's own view of a release's pods (issue 23, part 2), read straight from dpfsim the way
// Argo CD and Kubernetes define them: pods controlled by a DaemonSet whose tracking-id annotation
// names the DPUService's Application, in any namespace, labelled or not.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim_harness.h"

namespace extsvc::testfixture {

inline nlohmann::json release_pods_on(simtest::SimProcess& sim, const std::string& release,
                                      const std::string& node_name) {
  using nlohmann::json;
  json out = json::array();
  const json ds = sim.d("GET", "/apis/apps/v1/daemonsets").j()["items"];
  const json pods = sim.d("GET", "/api/v1/pods").j()["items"];
  for (const auto& d : ds) {
    const json annotations = d["metadata"].value("annotations", json::object());
    const std::string track = annotations.value("argocd.argoproj.io/tracking-id", "");
    if (track.find("-" + release + ":") == std::string::npos) continue;
    for (const auto& p : pods) {
      bool owned = false;
      for (const auto& ref : p["metadata"].value("ownerReferences", json::array()))
        owned = owned || ref.value("uid", "") == d["metadata"].value("uid", "");
      if (!owned) continue;
      std::string on = p["spec"].value("nodeName", "");
      if (on.empty()) {  // unbound: its required node affinity names the Node
        const json& terms =
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
             ["nodeSelectorTerms"];
        on = terms[0]["matchFields"][0]["values"][0].get<std::string>();
      }
      if (on == node_name) out.push_back(p);
    }
  }
  return out;
}

}  // namespace extsvc::testfixture
