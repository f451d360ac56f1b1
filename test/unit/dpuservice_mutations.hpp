// Random edits of a rendered DPUService for the tests of what the watch cache keeps of it
// (drift_key_test, drift_shape_test): the owned and identity fields (values, nulls, DPF's keys,
// type changes, removals, keys added by hand) and fields nobody compares.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"

namespace extsvc::core::mutations {

inline constexpr const char* kId = "7a2d1f5b-2e3c-4d4e-9f50-000000000001";
inline constexpr const char* kVersion = "V1-T1700000000000000";
inline constexpr const char* kNs = "dpf-operator-system";
inline constexpr const char* kSite = "site-a";

inline nlohmann::json desired() {
  const nlohmann::json data = validate_helm_chart_data(
      R"({"repoURL":"https://charts.example.com/stable","chartName":"agent","chartVersion":"1.2.3",)"
      R"("security":{"privileged":false},"values":{"a":{"b":1,"c":[1,null]},"d":"x"},)"
      R"("serviceDaemonSet":{"labels":{"team":"blue"},"resources":{"cpu":"100m"}}})");
  return render_dpuservice(kId, kVersion, 3, data, kNs, kSite);
}

inline nlohmann::json original(const nlohmann::json& root, const std::vector<std::string>& path) {
  const nlohmann::json* cur = &root;
  for (const auto& k : path) {
    if (!cur->is_object() || !cur->contains(k)) return nullptr;
    cur = &(*cur)[k];
  }
  return *cur;
}

// One to three edits of `want`.
inline nlohmann::json mutated(const nlohmann::json& want, std::mt19937& rng) {
  using json = nlohmann::json;
  static const std::vector<std::vector<std::string>> paths = {
      {"spec", "helmChart", "source", "repoURL"},
      {"spec", "helmChart", "source", "chart"},
      {"spec", "helmChart", "source", "version"},
      {"spec", "helmChart", "source", "releaseName"},
      {"spec", "helmChart", "values"},
      {"spec", "helmChart", "values", "a"},
      {"spec", "helmChart", "values", "a", "b"},
      {"spec", "helmChart", "values", "a", "c"},
      {"spec", "helmChart", "values", "d"},
      {"spec", "helmChart", "values", "hand"},  // a key added by hand
      {"spec", "security", "privileged"},
      {"spec", "security", "spiffe"},
      {"spec", "serviceDaemonSet", "labels"},
      {"spec", "serviceDaemonSet", "labels", "team"},
      {"spec", "serviceDaemonSet", "labels", "svc.dpu.nvidia.com/service"},
      {"spec", "serviceDaemonSet", "labels", "nico/extension-service-id"},
      {"spec", "serviceDaemonSet", "annotations"},
      {"spec", "serviceDaemonSet", "resources", "cpu"},
      {"spec", "serviceDaemonSet", "updateStrategy"},
      {"spec", "serviceDaemonSet", "nodeSelector"},
      {"spec", "deployInCluster"},
      {"spec", "paused"},
      {"spec", "interfaces"},
      {"metadata", "labels", "nico/extension-service-id"},
      {"metadata", "labels", "other"},
      {"metadata", "labels", "nico/site"},
      {"metadata", "name"},
      {"metadata", "namespace"},
      {"metadata", "annotations", "x"},
      {"status", "phase"},
  };
  static const std::vector<json> values = {nullptr,
                                           json::object(),
                                           json::array(),
                                           1,
                                           "x",
                                           true,
                                           json{{"k", nullptr}},
                                           json{{"b", 1}, {"z", nullptr}},
                                           json::array({1, nullptr}),
                                           "enabled"};
  json live = want;
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    const auto& path = paths[rng() % paths.size()];
    json* cur = &live;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      if (!cur->is_object()) *cur = json::object();
      cur = &(*cur)[path[i]];
    }
    if (!cur->is_object()) *cur = json::object();
    if (rng() % 4 == 0)
      cur->erase(path.back());
    else if (rng() % 3 == 0)
      (*cur)[path.back()] = original(want, path);  // back to the desired value: often equal
    else
      (*cur)[path.back()] = values[rng() % values.size()];
  }
  return live;
}

}  // namespace extsvc::core::mutations
