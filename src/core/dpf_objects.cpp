#include "core/dpf_objects.hpp"

#include "core/identity.hpp"
#include "core/json_access.hpp"

namespace extsvc::core {

namespace {

using nlohmann::json;

}  // namespace

NicoLabels nico_labels_of(const json& labels) {
  NicoLabels out;
  if (!labels.is_object()) return out;
  for (auto it = labels.begin(); it != labels.end(); ++it)
    if (it.key().rfind(kPlacementLabelPrefix, 0) == 0)
      out.emplace(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
  return out;
}

DpuObjectFacts dpu_object_facts(const json& dpu) {
  DpuObjectFacts f;
  f.name = json_text(json_at(dpu, {"metadata", "name"}));
  f.device = json_text(json_at(dpu, {"spec", "dpuDeviceName"}));
  f.labels = nico_labels_of(json_at(dpu, {"spec", "cluster", "nodeLabels"}));
  f.phase = json_text(json_at(dpu, {"status", "phase"}));
  const json& conds = json_at(dpu, {"status", "conditions"});
  if (conds.is_array())
    for (const char* type : {"Ready", "DPUClusterReady", "NodeEffectReady", "NodeEffectRemoved"})
      for (const auto& c : conds) {
        if (json_text(json_at(c, {"type"})) != type) continue;
        const std::string status = json_text(json_at(c, {"status"}));
        if (status == "True" || !f.condition.empty()) break;
        f.condition = std::string(type) + "=" + status;
        if (const std::string reason = json_text(json_at(c, {"reason"})); !reason.empty())
          f.condition += " " + reason;
        if (const std::string message = json_text(json_at(c, {"message"})); !message.empty())
          f.condition += ": " + message.substr(0, 200);
        break;
      }
  return f;
}

std::string describe_dpu(const DpuObjectFacts& dpu) {
  std::string out = "DPU " + dpu.name + ": phase " + (dpu.phase.empty() ? "(none)" : dpu.phase);
  if (!dpu.condition.empty()) out += " (" + dpu.condition + ")";
  return out;
}

NodeFacts node_facts(const json& node) {
  NodeFacts f;
  f.labels = nico_labels_of(json_at(node, {"metadata", "labels"}));
  const json& conds = json_at(node, {"status", "conditions"});
  if (conds.is_array())
    for (const auto& c : conds) {
      if (json_text(json_at(c, {"type"})) != "Ready") continue;
      f.ready = json_text(json_at(c, {"status"}));
      const std::string reason = json_text(json_at(c, {"reason"}));
      const std::string message = json_text(json_at(c, {"message"}));
      f.ready_why = reason + (message.empty() ? "" : (reason.empty() ? "" : ": ") + message);
      f.ready_why = f.ready_why.substr(0, 200);
      f.ready_since = json_text(json_at(c, {"lastTransitionTime"}));
      break;
    }
  return f;
}

std::string describe_node_readiness(const std::string& name, const NodeFacts& node) {
  std::string out = "Node " + name + " is Ready=" + (node.ready.empty() ? "(none)" : node.ready);
  if (!node.ready_since.empty()) out += " since " + node.ready_since;
  if (!node.ready_why.empty()) out += " (" + node.ready_why + ")";
  return out;
}

}  // namespace extsvc::core
