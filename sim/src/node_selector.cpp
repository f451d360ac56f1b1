#include "node_selector.h"

#include <cstdlib>

namespace dpfsim {

static bool requirement_matches(const json& req, const json& node, bool field) {
  std::string key = jstr(req, {"key"});
  std::string op = jstr(req, {"operator"});
  std::vector<std::string> values;
  if (auto it = req.find("values"); it != req.end() && it->is_array())
    for (const auto& v : *it)
      if (v.is_string()) values.push_back(v.get<std::string>());
  bool has = false;
  std::string val;
  if (field) {
    if (key == "metadata.name") {
      has = true;
      val = jstr(node, {"metadata", "name"});
    }
  } else {
    const json* labels = jptr(node, {"metadata", "labels"});
    if (labels && labels->is_object()) {
      auto it = labels->find(key);
      if (it != labels->end()) {
        has = true;
        val = it->is_string() ? it->get<std::string>() : "";
      }
    }
  }
  auto contains = [&]() {
    for (const auto& v : values)
      if (v == val) return true;
    return false;
  };
  if (op == "In") return has && contains();
  if (op == "NotIn") return !has || !contains();
  if (op == "Exists") return has;
  if (op == "DoesNotExist") return !has;
  if (op == "Gt" || op == "Lt") {
    if (!has || values.size() != 1) return false;
    char* e1 = nullptr;
    char* e2 = nullptr;
    long long a = std::strtoll(val.c_str(), &e1, 10);
    long long b = std::strtoll(values[0].c_str(), &e2, 10);
    if (val.empty() || *e1 || values[0].empty() || *e2) return false;
    return op == "Gt" ? a > b : a < b;
  }
  return false;
}

bool node_selector_matches(const json& ns, const json& node) {
  if (ns.is_null() || !ns.is_object()) return true;
  auto terms = ns.find("nodeSelectorTerms");
  if (terms == ns.end() || !terms->is_array()) return false;
  for (const auto& term : *terms) {
    bool any = false;
    bool ok = true;
    if (auto me = term.find("matchExpressions"); me != term.end() && me->is_array()) {
      for (const auto& r : *me) {
        any = true;
        if (!requirement_matches(r, node, false)) ok = false;
      }
    }
    if (auto mf = term.find("matchFields"); mf != term.end() && mf->is_array()) {
      for (const auto& r : *mf) {
        any = true;
        if (!requirement_matches(r, node, true)) ok = false;
      }
    }
    if (any && ok) return true;
  }
  return false;
}

std::string pod_target_node(const json& pod) {
  std::string node = jstr(pod, {"spec", "nodeName"});
  if (!node.empty()) return node;
  const json* terms =
      jptr(pod, {"spec", "affinity", "nodeAffinity",
                 "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"});
  if (terms == nullptr || !terms->is_array()) return "";
  for (const auto& term : *terms) {
    const json* mf = jptr(term, {"matchFields"});
    if (mf == nullptr || !mf->is_array()) continue;
    for (const auto& r : *mf) {
      const json* values = jptr(r, {"values"});
      if (jstr(r, {"key"}) == "metadata.name" && jstr(r, {"operator"}) == "In" && values &&
          values->is_array() && values->size() == 1 && (*values)[0].is_string())
        return (*values)[0].get<std::string>();
    }
  }
  return "";
}

bool pod_spec_fits_node(const json& pod_spec, const json& node) {
  if (const json* sel = jptr(pod_spec, {"nodeSelector"}); sel && sel->is_object()) {
    const json* labels = jptr(node, {"metadata", "labels"});
    for (auto& [k, v] : sel->items()) {
      if (!labels || !labels->is_object()) return false;
      auto it = labels->find(k);
      if (it == labels->end() || *it != v) return false;
    }
  }
  const json* req = jptr(
      pod_spec, {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"});
  if (req && req->is_object()) return node_selector_matches(*req, node);
  return true;
}

static bool tolerates(const json& tol, const json& taint) {
  const std::string effect = jstr(tol, {"effect"});
  if (!effect.empty() && effect != jstr(taint, {"effect"})) return false;
  const std::string key = jstr(tol, {"key"});
  if (!key.empty() && key != jstr(taint, {"key"})) return false;
  const std::string op = jstr(tol, {"operator"}, "Equal");
  if (op == "Exists") return true;
  return op == "Equal" && jstr(tol, {"value"}) == jstr(taint, {"value"});
}

const json* untolerated_taint(const json& node, const json* tolerations,
                              std::initializer_list<const char*> effects) {
  const json* taints = jptr(node, {"spec", "taints"});
  if (taints == nullptr || !taints->is_array()) return nullptr;
  for (const auto& t : *taints) {
    bool relevant = false;
    for (const char* e : effects)
      if (jstr(t, {"effect"}) == e) relevant = true;
    if (!relevant) continue;
    bool ok = false;
    if (tolerations != nullptr && tolerations->is_array())
      for (const auto& tol : *tolerations)
        if (tolerates(tol, t)) ok = true;
    if (!ok) return &t;
  }
  return nullptr;
}

std::string describe_taint(const json& taint) {
  return "{" + jstr(taint, {"key"}) + ": " + jstr(taint, {"value"}) + "}";
}

}  // namespace dpfsim
