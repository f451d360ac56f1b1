#include "core/placement_keys.hpp"

#include "core/identity.hpp"

namespace extsvc::core {

PresentKeys classify_present_keys(const nlohmann::json& current_labels,
                                  const std::set<std::string>& wanted,
                                  const std::set<std::string>& explained,
                                  const std::set<std::string>* registered) {
  PresentKeys out;
  if (!current_labels.is_object()) return out;
  for (const auto& [key, value] : current_labels.items()) {
    if (value.is_null() || !std::string_view(key).starts_with(kPlacementLabelPrefix)) continue;
    if (wanted.contains(key)) continue;
    if (registered != nullptr && !registered->contains(key))
      out.foreign.insert(key);
    else if (explained.contains(key))
      out.explicit_removals.insert(key);
    else
      out.derived_removals.insert(key);
  }
  return out;
}

nlohmann::json placement_patch(const nlohmann::json& current_labels,
                               const std::set<std::string>& wanted,
                               const std::set<std::string>& remove) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& current = current_labels.is_object() ? current_labels : empty;
  const std::string enabled(kPlacementLabelValue);
  nlohmann::json changes = nlohmann::json::object();
  for (const auto& key : wanted) {
    const auto it = current.find(key);
    if (it == current.end() || !it->is_string() || it->get_ref<const std::string&>() != enabled)
      changes[key] = enabled;
  }
  for (const auto& key : remove) {
    if (wanted.contains(key)) continue;
    const auto it = current.find(key);
    if (it != current.end() && !it->is_null()) changes[key] = nullptr;
  }
  if (changes.empty()) return nlohmann::json::object();
  return {{"spec", {{"cluster", {{"nodeLabels", std::move(changes)}}}}}};
}

}  // namespace extsvc::core
