// metav1.Condition lists as controllers keep them: one entry per type, lastTransitionTime moved
// only when the status changes (k8s.io/apimachinery/pkg/api/meta.SetStatusCondition).
#pragma once

#include <string>

#include "../util.h"

namespace dpfsim {

// Sets (or adds) the condition of `type` in the array at obj["status"]["conditions"]; returns
// true when anything changed.
inline bool set_condition(json& obj, const std::string& type, const std::string& status,
                          const std::string& reason, const std::string& message) {
  json& conds = obj["status"]["conditions"];
  if (!conds.is_array()) conds = json::array();
  for (auto& c : conds) {
    if (c.value("type", "") != type) continue;
    bool changed = false;
    if (c.value("status", "") != status) {
      c["status"] = status;
      c["lastTransitionTime"] = rfc3339_now();
      changed = true;
    }
    if (c.value("reason", "") != reason) {
      c["reason"] = reason;
      changed = true;
    }
    if (c.value("message", "") != message) {
      c["message"] = message;
      changed = true;
    }
    return changed;
  }
  conds.push_back({{"type", type},
                   {"status", status},
                   {"reason", reason},
                   {"message", message},
                   {"lastTransitionTime", rfc3339_now()}});
  return true;
}

// The status of a condition ("" when absent).
inline std::string condition_status(const json& obj, const std::string& type) {
  const json* conds = jptr(obj, {"status", "conditions"});
  if (!conds || !conds->is_array()) return "";
  for (const auto& c : *conds)
    if (c.value("type", "") == type) return c.value("status", "");
  return "";
}

// cutil.IsNodeReady: the Node's Ready condition is True.
inline bool node_is_ready(const json& node) {
  return condition_status(node, "Ready") == "True";
}

}  // namespace dpfsim
