#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

// Reading what an API server (or a proxy in front of it) answered: any member
// may be missing or of another type. nlohmann's value(key, default) throws
// type_error 302 when the member exists with another type, and operator[] on a
// const non-object is undefined; these never throw and never assert.
namespace extsvc::core {

// The member at path, or null when a step is missing or not an object.
inline const nlohmann::json& json_at(const nlohmann::json& j,
                                     std::initializer_list<std::string_view> path) {
  static const nlohmann::json kNull;
  const nlohmann::json* cur = &j;
  for (auto k : path) {
    if (!cur->is_object()) return kNull;
    const auto it = cur->find(k);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

// The string, or "" for any other type.
inline std::string json_text(const nlohmann::json& j) {
  return j.is_string() ? j.get<std::string>() : std::string();
}

// The string at path, or "" when missing or not a string.
inline std::string json_text_at(const nlohmann::json& j,
                                std::initializer_list<std::string_view> path) {
  return json_text(json_at(j, path));
}

// The member at a path known only at run time, or nullptr when a step is missing, null or
// not an object (a JSON merge patch's null means "absent").
inline const nlohmann::json* json_find(const nlohmann::json& root,
                                       const std::vector<std::string>& path) {
  const nlohmann::json* cur = &root;
  for (const auto& k : path) {
    if (!cur->is_object()) return nullptr;
    const auto it = cur->find(k);
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// Writes `value` at `path` (not empty) inside `patch`, creating the objects on the way.
inline void json_put(nlohmann::json& patch, const std::vector<std::string>& path,
                     nlohmann::json value) {
  nlohmann::json* cur = &patch;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) cur = &(*cur)[path[i]];
  (*cur)[path.back()] = std::move(value);
}

}  // namespace extsvc::core
