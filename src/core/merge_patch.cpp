#include "core/merge_patch.hpp"

#include <array>
#include <vector>

#include "core/identity.hpp"
#include "core/json_access.hpp"

namespace extsvc::core {

using nlohmann::json;

json merge_diff(const json& from, const json& to) {
  if (!to.is_object() || !from.is_object()) return to;
  json patch = json::object();
  for (const auto& [key, old_value] : from.items()) {
    if (old_value.is_null()) continue;
    const auto it = to.find(key);
    if (it == to.end() || it->is_null()) patch[key] = nullptr;
  }
  for (const auto& [key, new_value] : to.items()) {
    if (new_value.is_null()) continue;
    const auto it = from.find(key);
    if (it == from.end() || it->is_null()) {
      patch[key] = new_value;
    } else if (*it != new_value) {
      if (it->is_object() && new_value.is_object()) {
        // Objects that differ only in null (absent) members need no change.
        json sub = merge_diff(*it, new_value);
        if (!sub.empty()) patch[key] = std::move(sub);
      } else {
        patch[key] = new_value;
      }
    }
  }
  return patch;
}

json apply_merge_patch(json target, const json& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = json::object();
  for (const auto& [key, value] : patch.items()) {
    if (value.is_null()) {
      target.erase(key);
    } else {
      json current = target.contains(key) ? std::move(target[key]) : json();
      target[key] = apply_merge_patch(std::move(current), value);
    }
  }
  return target;
}

const std::array<std::vector<std::string>, 10>& dpuservice_owned_paths() {
  static const std::array<std::vector<std::string>, 10> kOwned = {{
      {"spec", "helmChart", "source", "repoURL"},
      {"spec", "helmChart", "source", "chart"},
      {"spec", "helmChart", "source", "version"},
      {"spec", "helmChart", "values"},
      {"spec", "security", "privileged"},
      {"spec", "security", "spiffe"},
      {"spec", "serviceDaemonSet", "labels"},
      {"spec", "serviceDaemonSet", "annotations"},
      {"spec", "serviceDaemonSet", "resources"},
      {"spec", "serviceDaemonSet", "updateStrategy"},
  }};
  return kOwned;
}

json dpuservice_mutable_patch(const json& live, const json& desired) {
  const auto& kOwned = dpuservice_owned_paths();
  // DPF writes its own keys into spec.serviceDaemonSet.labels (the newest
  // controller persists svc.dpu.nvidia.com/service there); they are DPF's,
  // never compared and never nulled, so a resync does not fight DPF.
  const json* live_labels = json_find(live, {"spec", "serviceDaemonSet", "labels"});
  bool dpf_keys = false;
  json dpf_free_labels;
  if (live_labels != nullptr && live_labels->is_object()) {
    dpf_free_labels = json::object();
    for (const auto& [key, value] : live_labels->items()) {
      if (std::string_view(key).starts_with(kDpfOwnedKeyPrefix))
        dpf_keys = true;
      else
        dpf_free_labels[key] = value;
    }
  }
  json patch = json::object();
  for (const auto& path : kOwned) {
    const bool labels_path = path.size() == 3 && path[2] == "labels";
    const json* have = (labels_path && dpf_keys) ? &dpf_free_labels : json_find(live, path);
    const json* want = json_find(desired, path);
    if (want == nullptr) {
      if (have != nullptr && labels_path && dpf_keys) {
        // Null our keys one by one: a whole-object null would drop DPF's.
        json nulls = json::object();
        for (const auto& [key, _] : have->items()) nulls[key] = nullptr;
        if (!nulls.empty()) json_put(patch, path, std::move(nulls));
      } else if (have != nullptr) {
        json_put(patch, path, nullptr);
      }
    } else if (have == nullptr) {
      json_put(patch, path, *want);
    } else if (*have != *want) {
      // Objects are replaced key by key so the result is a full replacement
      // of that field without resending unchanged keys.
      json diff = merge_diff(*have, *want);
      // Differences that are only nulls in `desired` need no write.
      if (!(diff.is_object() && diff.empty() && have->is_object()))
        json_put(patch, path, std::move(diff));
    }
  }
  return patch;
}

json node_labels_patch(const json& current_node_labels, const std::set<std::string>& wanted_keys,
                       std::string_view owned_prefix) {
  const json empty = json::object();
  const json& current = current_node_labels.is_object() ? current_node_labels : empty;
  const std::string enabled(kPlacementLabelValue);
  json changes = json::object();
  for (const auto& key : wanted_keys) {
    const auto it = current.find(key);
    if (it == current.end() || !it->is_string() || it->get_ref<const std::string&>() != enabled)
      changes[key] = enabled;
  }
  for (const auto& [key, value] : current.items()) {
    if (value.is_null() || !std::string_view(key).starts_with(owned_prefix)) continue;
    if (!wanted_keys.contains(key)) changes[key] = nullptr;
  }
  if (changes.empty()) return json::object();
  return {{"spec", {{"cluster", {{"nodeLabels", std::move(changes)}}}}}};
}

}  // namespace extsvc::core
