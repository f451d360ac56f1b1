// The watch cache keeps a drift key per DPUService instead of the object (issue 11): two keys
// must be equal exactly when the drift check on whole objects (identity_mismatch plus
// dpuservice_mutable_patch) finds nothing. Checked on hand-picked cases and on 20,000 random
// mutations of a rendered object.
#include "core/drift_key.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/merge_patch.hpp"
#include "dpuservice_mutations.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

using mutations::desired;
using mutations::kId;
using mutations::kNs;
using mutations::kSite;
using mutations::kVersion;

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
  int equal = 0, differ = 0;
  for (int round = 0; round < 20000; ++round) {
    const json live = mutations::mutated(want, rng);
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
