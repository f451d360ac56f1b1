// The watch cache repairs a drift with one PATCH computed from the object's shape (issue 26,
// part 2): the patch must be the one the read path computes from the whole object
// (dpuservice_mutable_patch), and the shape must not hold the values. Checked on hand-picked
// cases and on 20,000 random mutations of a rendered object.
#include "core/drift_shape.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/dpuservice_render.hpp"
#include "core/drift_key.hpp"
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

std::optional<json> from_shape(const json& live, const json& want) {
  return dpuservice_patch_from_shape(dpuservice_drift_shape(live), want);
}

TEST(DriftShape, AKeyAddedByHandIsNulledAndAChangedValueSetBack) {
  const json want = desired();
  json live = want;
  live["metadata"]["resourceVersion"] = "7";
  live["spec"]["helmChart"]["values"]["hand"] = {{"deep", "x"}};
  live["spec"]["helmChart"]["values"]["a"]["b"] = 99;
  live["spec"]["serviceDaemonSet"]["labels"]["svc.dpu.nvidia.com/service"] = "dpf";
  live["spec"]["serviceDaemonSet"]["labels"]["by-hand"] = "y";
  const auto patch = from_shape(live, want);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ(*patch, dpuservice_mutable_patch(live, want)) << patch->dump();
  const json& values = (*patch)["spec"]["helmChart"]["values"];
  EXPECT_TRUE(values["hand"].is_null()) << patch->dump();
  EXPECT_EQ(values["a"], json({{"b", 1}})) << patch->dump();  // only what differs is sent
  EXPECT_FALSE(values.contains("d"));
  const json& labels = (*patch)["spec"]["serviceDaemonSet"]["labels"];
  EXPECT_TRUE(labels["by-hand"].is_null());
  EXPECT_FALSE(labels.contains("svc.dpu.nvidia.com/service"));  // DPF's key is DPF's
  // applied, the object is the desired one again (by its drift key)
  EXPECT_EQ(dpuservice_drift_key(apply_merge_patch(live, *patch)), dpuservice_drift_key(want));
  // in sync: an empty patch
  EXPECT_EQ(from_shape(want, want), json::object());
}

TEST(DriftShape, AnotherIdentityOrNoSiteLabelIsLeftToTheReadPath) {
  const json want = desired();
  json other = want;
  other["metadata"]["labels"]["nico/extension-service-version"] = "V2";
  EXPECT_FALSE(from_shape(other, want).has_value());
  json unlabelled = want;
  unlabelled["metadata"]["labels"].erase("nico/site");
  EXPECT_FALSE(from_shape(unlabelled, want).has_value());
  json selector = want;
  selector["spec"]["serviceDaemonSet"]["nodeSelector"] = json::object();
  EXPECT_FALSE(from_shape(selector, want).has_value());
  EXPECT_FALSE(dpuservice_patch_from_shape("not msgpack", want).has_value());
  EXPECT_FALSE(dpuservice_patch_from_shape("", want).has_value());
}

// The shape grows with the number of keys, not with the size of the values: a DPUService with
// 64 KiB of values has a shape of a few hundred bytes, and no value's text is in it.
TEST(DriftShape, HoldsNoValues) {
  json want = desired();
  const std::string big(1024, 'v');
  for (int i = 0; i < 64; ++i) want["spec"]["helmChart"]["values"]["k" + std::to_string(i)] = big;
  const std::string shape = dpuservice_drift_shape(want);
  EXPECT_LT(shape.size(), 64u * 24 + 600) << shape.size();
  EXPECT_EQ(shape.find("vvvvvvvv"), std::string::npos);
  EXPECT_EQ(shape.find("charts.example.com"), std::string::npos);
  json live = want;
  live["spec"]["helmChart"]["values"]["k7"] = "changed";
  const auto patch = from_shape(live, want);
  ASSERT_TRUE(patch.has_value());
  EXPECT_EQ(*patch, json::parse(R"({"spec":{"helmChart":{"values":{"k7":")" + big + R"("}}}})"));
}

// Random edits: where identity_mismatch finds nothing the shape decides, and its patch does to
// the object what the read path's patch does (equal patches, but for nulls the read path sends
// for members that are null already); elsewhere it leaves the decision to the read path.
TEST(DriftShape, AgreesWithTheReadPathOnRandomMutations) {
  const json want = desired();
  std::mt19937 rng(20261205);
  int decided = 0, left = 0, patched = 0, same_patch = 0;
  for (int round = 0; round < 20000; ++round) {
    const json live = mutations::mutated(want, rng);
    const auto patch = from_shape(live, want);
    const bool identity_ok = !identity_mismatch(live, kId, kVersion, kNs, kSite);
    ASSERT_EQ(patch.has_value(), identity_ok) << "round " << round << ": " << live.dump();
    if (!patch) {
      ++left;
      continue;
    }
    ++decided;
    const json read = dpuservice_mutable_patch(live, want);
    if (*patch == read) ++same_patch;
    ASSERT_EQ(apply_merge_patch(live, *patch), apply_merge_patch(live, read))
        << "round " << round << ": " << live.dump() << "\nshape: " << patch->dump()
        << "\nread: " << read.dump();
    // never a write where the read path sends none
    if (read.empty()) {
      ASSERT_TRUE(patch->empty()) << "round " << round << ": " << live.dump();
    }
    if (!patch->empty()) ++patched;
  }
  EXPECT_GT(decided, 5000);
  EXPECT_GT(left, 500);
  EXPECT_GT(patched, 2000);
  EXPECT_GT(same_patch, decided * 9 / 10);
}

}  // namespace
}  // namespace extsvc::core
