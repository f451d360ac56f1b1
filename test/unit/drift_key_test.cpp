// The watch cache keeps a drift key per DPUService instead of the object (issue 11): two keys
// must be equal exactly when the drift check on whole objects (identity_mismatch plus
// dpuservice_mutable_patch) finds nothing. Checked on hand-picked cases and on 20,000 random
// mutations of a rendered object.
#include "core/drift_key.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/dpuservice_render.hpp"
#include "core/helm_chart_data.hpp"
#include "core/merge_patch.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

constexpr const char* kId = "7a2d1f5b-2e3c-4d4e-9f50-000000000001";
constexpr const char* kVersion = "V1-T1700000000000000";
constexpr const char* kNs = "dpf-operator-system";
constexpr const char* kSite = "site-a";

json desired() {
  const json data = validate_helm_chart_data(
      R"({"repoURL":"https://charts.example.com/stable","chartName":"agent","chartVersion":"1.2.3",)"
      R"("security":{"privileged":false},"values":{"a":{"b":1,"c":[1,null]},"d":"x"},)"
      R"("serviceDaemonSet":{"labels":{"team":"blue"},"resources":{"cpu":"100m"}}})");
  return render_dpuservice(kId, kVersion, 3, data, kNs, kSite);
}

json original(const json& root, const std::vector<std::string>& path) {
  const json* cur = &root;
  for (const auto& k : path) {
    if (!cur->is_object() || !cur->contains(k)) return nullptr;
    cur = &(*cur)[k];
  }
  return *cur;
}

bool no_drift(const json& live, const json& want) {
  return !identity_mismatch(live, kId, kVersion, kNs, kSite) &&
         dpuservice_mutable_patch(live, want).empty();
}

TEST(DriftKey, EqualForTheSameObjectAndWhatAServerAdds) {
  const json want = desired();
  json live = want;
  EXPECT_EQ(dpuservice_drift_key(live), dpuservice_drift_key(want));
  // what the API server and DPF add is not compared
  live["metadata"]["uid"] = "u-1";
  live["metadata"]["resourceVersion"] = "42";
  live["metadata"]["finalizers"] = {"dpu.nvidia.com/dpuservice"};
  live["status"] = {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  live["spec"]["serviceDaemonSet"]["labels"]["svc.dpu.nvidia.com/service"] = "abc";
  live["spec"]["helmChart"]["values"]["a"]["gone"] = nullptr;  // null = absent
  EXPECT_TRUE(no_drift(live, want));
  EXPECT_EQ(dpuservice_drift_key(live), dpuservice_drift_key(want));
}

TEST(DriftKey, DiffersWhenAnOwnedOrIdentityFieldDiffers) {
  const json want = desired();
  const std::string k = dpuservice_drift_key(want);
  auto changed = [&](auto edit) {
    json live = want;
    edit(live);
    EXPECT_FALSE(no_drift(live, want)) << live.dump();
    return dpuservice_drift_key(live) != k;
  };
  EXPECT_TRUE(changed([](json& o) { o["spec"]["helmChart"]["source"]["version"] = "1.2.4"; }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["helmChart"]["values"]["a"]["c"] = {1}; }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["helmChart"]["values"].erase("d"); }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["serviceDaemonSet"]["labels"]["team"] = "red"; }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["security"]["privileged"] = true; }));
  EXPECT_TRUE(
      changed([](json& o) { o["metadata"]["labels"]["nico/extension-service-version"] = "V2"; }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["deployInCluster"] = true; }));
  // issue 25: the site label is identity (a 0.2.0 object without it drifts and is adopted)
  EXPECT_TRUE(changed([](json& o) { o["metadata"]["labels"].erase("nico/site"); }));
  EXPECT_TRUE(changed([](json& o) { o["metadata"]["labels"]["nico/site"] = "site-b"; }));
  EXPECT_TRUE(changed([](json& o) { o["spec"]["serviceID"] = "x"; }));
  EXPECT_TRUE(
      changed([](json& o) { o["spec"]["serviceDaemonSet"]["nodeSelector"] = json::object(); }));
  EXPECT_TRUE(changed([](json& o) {
    o["spec"]["serviceDaemonSet"]["updateStrategy"] = {{"type", "OnDelete"}};
  }));
}

// Random edits of the owned and identity fields (values, nulls, DPF's keys, type changes,
// removals) and of fields nobody compares: the keys agree with the whole-object check.
TEST(DriftKey, AgreesWithTheWholeObjectCheckOnRandomMutations) {
  const json want = desired();
  const std::string want_key = dpuservice_drift_key(want);
  std::mt19937 rng(20261202);
  const std::vector<std::vector<std::string>> paths = {
      {"spec", "helmChart", "source", "repoURL"},
      {"spec", "helmChart", "source", "chart"},
      {"spec", "helmChart", "source", "version"},
      {"spec", "helmChart", "source", "releaseName"},
      {"spec", "helmChart", "values"},
      {"spec", "helmChart", "values", "a"},
      {"spec", "helmChart", "values", "a", "b"},
      {"spec", "helmChart", "values", "a", "c"},
      {"spec", "helmChart", "values", "d"},
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
  const std::vector<json> values = {nullptr,
                                    json::object(),
                                    json::array(),
                                    1,
                                    "x",
                                    true,
                                    json{{"k", nullptr}},
                                    json{{"b", 1}, {"z", nullptr}},
                                    json::array({1, nullptr}),
                                    "enabled"};
  int equal = 0, differ = 0;
  for (int round = 0; round < 20000; ++round) {
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
    const bool whole = no_drift(live, want);
    const bool keyed = dpuservice_drift_key(live) == want_key;
    ASSERT_EQ(whole, keyed) << "round " << round << ": " << live.dump();
    (whole ? equal : differ)++;
  }
  // both outcomes were exercised
  EXPECT_GT(equal, 500);
  EXPECT_GT(differ, 500);
}

}  // namespace
}  // namespace extsvc::core
