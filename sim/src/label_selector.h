// Kubernetes label selector (equality- and set-based) and field selectors.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "util.h"

namespace dpfsim {

struct LabelRequirement {
  enum class Op { Equals, NotEquals, In, NotIn, Exists, DoesNotExist, GreaterThan, LessThan };
  std::string key;
  Op op = Op::Exists;
  std::vector<std::string> values;
};

class LabelSelector {
 public:
  // Throws std::invalid_argument with a Kubernetes-like message on syntax errors.
  static LabelSelector parse(const std::string& text);
  // Builds a selector from a metav1.LabelSelector JSON object (matchLabels/matchExpressions).
  static LabelSelector from_json(const json& sel);
  bool matches(const json& labels) const;  // labels: object of strings (or null)
  bool empty() const { return reqs_.empty(); }
  const std::vector<LabelRequirement>& requirements() const { return reqs_; }

 private:
  std::vector<LabelRequirement> reqs_;
};

struct FieldRequirement {
  std::string field;
  bool negate = false;
  std::string value;
};

class FieldSelector {
 public:
  // allowed: the field names accepted for the resource (metadata.name etc.).
  static FieldSelector parse(const std::string& text, const std::vector<std::string>& allowed);
  bool matches(const json& obj) const;
  bool empty() const { return reqs_.empty(); }

 private:
  std::vector<FieldRequirement> reqs_;
};

// Resolves a dotted field path (metadata.name, spec.nodeName, status.phase) to a string.
std::string field_value(const json& obj, const std::string& path);

}  // namespace dpfsim
