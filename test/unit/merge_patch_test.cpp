#include "core/merge_patch.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace extsvc::core {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------- merge_diff / apply

TEST(MergeDiff, Basics) {
  EXPECT_EQ(merge_diff(json::parse(R"({"a":1})"), json::parse(R"({"a":1})")), json::object());
  EXPECT_EQ(merge_diff(json::parse(R"({"a":1,"b":2})"), json::parse(R"({"a":1})")),
            json::parse(R"({"b":null})"));
  EXPECT_EQ(merge_diff(json::parse(R"({"a":{"x":1,"y":2}})"), json::parse(R"({"a":{"x":1}})")),
            json::parse(R"({"a":{"y":null}})"));
  EXPECT_EQ(merge_diff(json::parse(R"({"a":[1,2]})"), json::parse(R"({"a":[1]})")),
            json::parse(R"({"a":[1]})"));
  EXPECT_EQ(merge_diff(json::parse(R"({"a":1})"), json::parse(R"({"a":{"b":1}})")),
            json::parse(R"({"a":{"b":1}})"));
  EXPECT_EQ(merge_diff(json::parse(R"({"a":{"b":1}})"), json::parse(R"({"a":{}})")),
            json::parse(R"({"a":{"b":null}})"));
  EXPECT_EQ(merge_diff(json::parse(R"({"a":1})"), json::parse("[1]")), json::parse("[1]"));
  EXPECT_EQ(merge_diff(json::parse("3"), json::parse(R"({"a":1})")), json::parse(R"({"a":1})"));
  EXPECT_EQ(merge_diff(json::parse("3"), json::parse("3")), json::parse("3"));
}

TEST(MergeDiff, NullsInTargetMeanAbsent) {
  EXPECT_EQ(merge_diff(json::parse(R"({"a":1})"), json::parse(R"({"a":null})")),
            json::parse(R"({"a":null})"));
  EXPECT_EQ(merge_diff(json::parse(R"({})"), json::parse(R"({"a":null})")), json::object());
  EXPECT_EQ(merge_diff(json::parse(R"({"a":null})"), json::parse(R"({"a":null})")), json::object());
}

// Found by fuzz_merge_patch: nested objects that differ only in null members
// produced a no-op patch {"a":{}} instead of {}, so a DPUService whose desired
// values hold such nulls was patched again on every pass.
TEST(MergeDiff, NestedNullOnlyDifferenceGivesEmptyPatch) {
  EXPECT_EQ(merge_diff(json::parse(R"({"a":{}})"), json::parse(R"({"a":{"x":null}})")),
            json::object());
  EXPECT_EQ(merge_diff(json::parse(R"({"a":{"b":{"c":null}}})"),
                       json::parse(R"({"a":{"b":{"d":null}}})")),
            json::object());
  EXPECT_EQ(merge_diff(json::parse(R"({"a":{"b":{},"c":1}})"),
                       json::parse(R"({"a":{"b":{"x":null},"c":2}})")),
            json::parse(R"({"a":{"c":2}})"));
}

TEST(MutablePatch, ConvergesWhenDesiredValuesHoldNestedNulls) {
  const json desired = json::parse(R"({"spec":{"helmChart":{"values":{"a":{"x":null}}}}})");
  const json live =
      apply_merge_patch(json::object(), dpuservice_mutable_patch(json::object(), desired));
  EXPECT_EQ(live, json::parse(R"({"spec":{"helmChart":{"values":{"a":{}}}}})"));
  EXPECT_EQ(dpuservice_mutable_patch(live, desired), json::object());
}

TEST(ApplyMergePatch, Rfc7396AppendixA) {
  const char* cases[][3] = {
      {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
      {R"({"a":"b"})", R"({"a":null})", R"({})"},
      {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
      {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
      {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
      {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
      {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
      {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
      {R"({"a":"foo"})", "null", "null"},
      {R"({"a":"foo"})", R"("bar")", R"("bar")"},
      {R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
      {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
      {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(apply_merge_patch(json::parse(c[0]), json::parse(c[1])), json::parse(c[2])) << c[1];
}

// ---------------------------------------------------------------- dpuservice_mutable_patch

json base_live() {
  return json::parse(R"({
    "apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
    "metadata": {"name": "extsvc-x", "namespace": "ns", "labels": {"nico/extension-service-id": "u"},
                 "resourceVersion": "7"},
    "spec": {
      "deployInCluster": false,
      "helmChart": {"source": {"repoURL": "oci://r/c", "chart": "c", "version": "1.0.0",
                               "releaseName": "extsvc-x", "path": ""},
                    "values": {"a": 1, "nested": {"keep": 1, "drop": 2}}},
      "security": {"privileged": false},
      "serviceDaemonSet": {"labels": {"l1": "v"}, "annotations": {"a1": "v"},
                           "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                           "nodeSelector": {"nodeSelectorTerms": []}},
      "paused": false
    },
    "status": {"conditions": []}
  })");
}

json desired_from(const json& live) {
  json d = live;
  d.erase("status");
  return d;
}

TEST(MutablePatch, DpfOwnedLabelKeysAreNeverComparedOrNulled) {
  // The newest DPF controller persists svc.dpu.nvidia.com/service into the
  // spec's labels; a resync must not fight it.
  json live = base_live();
  live["spec"]["serviceDaemonSet"]["labels"]["svc.dpu.nvidia.com/service"] = "abc";
  json desired = desired_from(base_live());
  EXPECT_EQ(dpuservice_mutable_patch(live, desired), json::object());
  desired["spec"]["serviceDaemonSet"]["labels"] = {{"l2", "w"}};
  EXPECT_EQ(dpuservice_mutable_patch(live, desired),
            json::parse(R"({"spec":{"serviceDaemonSet":{"labels":{"l1":null,"l2":"w"}}}})"));
  desired["spec"]["serviceDaemonSet"].erase("labels");
  EXPECT_EQ(dpuservice_mutable_patch(live, desired),
            json::parse(R"({"spec":{"serviceDaemonSet":{"labels":{"l1":null}}}})"));
  // Only DPF's key left: nothing of ours to remove.
  live["spec"]["serviceDaemonSet"]["labels"] = {{"svc.dpu.nvidia.com/service", "abc"}};
  EXPECT_EQ(dpuservice_mutable_patch(live, desired), json::object());
  const json after =
      apply_merge_patch(live, dpuservice_mutable_patch(live, desired_from(base_live())));
  EXPECT_EQ(after["spec"]["serviceDaemonSet"]["labels"],
            json::parse(R"({"l1":"v","svc.dpu.nvidia.com/service":"abc"})"));
}

TEST(MutablePatch, NoOpIsEmpty) {
  EXPECT_EQ(dpuservice_mutable_patch(base_live(), desired_from(base_live())), json::object());
}

TEST(MutablePatch, ValuesPresentToAbsent) {
  json desired = desired_from(base_live());
  desired["spec"]["helmChart"].erase("values");
  EXPECT_EQ(dpuservice_mutable_patch(base_live(), desired),
            json::parse(R"({"spec":{"helmChart":{"values":null}}})"));
}

TEST(MutablePatch, EmptyValuesReplacesExistingObject) {
  json desired = desired_from(base_live());
  desired["spec"]["helmChart"]["values"] = json::object();
  const auto patch = dpuservice_mutable_patch(base_live(), desired);
  EXPECT_EQ(patch, json::parse(R"({"spec":{"helmChart":{"values":{"a":null,"nested":null}}}})"));
  EXPECT_EQ(apply_merge_patch(base_live(), patch)["spec"]["helmChart"]["values"], json::object());
}

TEST(MutablePatch, EmptyValuesOverAbsentStaysEmpty) {
  json live = base_live();
  live["spec"]["helmChart"].erase("values");
  json desired = desired_from(live);
  desired["spec"]["helmChart"]["values"] = json::object();
  const auto patch = dpuservice_mutable_patch(live, desired);
  EXPECT_EQ(patch, json::parse(R"({"spec":{"helmChart":{"values":{}}}})"));
  EXPECT_EQ(apply_merge_patch(live, patch)["spec"]["helmChart"]["values"], json::object());
}

TEST(MutablePatch, NestedValueRemovalsBecomeNulls) {
  json desired = desired_from(base_live());
  desired["spec"]["helmChart"]["values"] = json::parse(R"({"a":1,"nested":{"keep":1,"new":[1]}})");
  EXPECT_EQ(dpuservice_mutable_patch(base_live(), desired),
            json::parse(R"({"spec":{"helmChart":{"values":{"nested":{"drop":null,"new":[1]}}}}})"));
}

TEST(MutablePatch, SwitchToOnDeleteNullsRollingUpdate) {
  json desired = desired_from(base_live());
  desired["spec"]["serviceDaemonSet"]["updateStrategy"] = {{"type", "OnDelete"}};
  EXPECT_EQ(
      dpuservice_mutable_patch(base_live(), desired),
      json::parse(
          R"({"spec":{"serviceDaemonSet":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}})"));
}

TEST(MutablePatch, TypedDaemonSetFieldsReplacedAndRemoved) {
  json desired = desired_from(base_live());
  desired["spec"]["serviceDaemonSet"]["labels"] = {{"l2", "v"}};
  desired["spec"]["serviceDaemonSet"].erase("annotations");
  desired["spec"]["serviceDaemonSet"]["resources"] = {{"cpu", "1"}};
  EXPECT_EQ(dpuservice_mutable_patch(base_live(), desired),
            json::parse(R"({"spec":{"serviceDaemonSet":{"labels":{"l1":null,"l2":"v"},
                                                         "annotations":null,
                                                         "resources":{"cpu":"1"}}}})"));
}

TEST(MutablePatch, SourceAndSecurity) {
  json desired = desired_from(base_live());
  desired["spec"]["helmChart"]["source"]["version"] = "1.1.0";
  desired["spec"]["helmChart"]["source"]["repoURL"] = "oci://r2/c";
  desired["spec"]["security"] = {{"privileged", true}, {"spiffe", json::object()}};
  EXPECT_EQ(
      dpuservice_mutable_patch(base_live(), desired),
      json::parse(R"({"spec":{"helmChart":{"source":{"repoURL":"oci://r2/c","version":"1.1.0"}},
                                    "security":{"privileged":true,"spiffe":{}}}})"));
  json live = apply_merge_patch(base_live(), dpuservice_mutable_patch(base_live(), desired));
  desired["spec"]["security"].erase("spiffe");
  EXPECT_EQ(dpuservice_mutable_patch(live, desired),
            json::parse(R"({"spec":{"security":{"spiffe":null}}})"));
}

TEST(MutablePatch, NeverTouchesIdentityOrForeignFields) {
  json live = base_live();
  live["spec"]["foreign"] = {{"x", 1}};
  live["spec"]["serviceID"] = "someone";
  live["spec"]["helmChart"]["source"]["path"] = "p";
  json desired = json::parse(
      R"({"spec":{"helmChart":{"source":{"repoURL":"oci://r/c","chart":"c","version":"2.0.0"}},
                                         "security":{"privileged":false}}})");
  // Desired lacks metadata, nodeSelector, releaseName and deployInCluster entirely.
  const auto patch = dpuservice_mutable_patch(live, desired);
  EXPECT_FALSE(patch.contains("metadata"));
  const auto& spec = patch.at("spec");
  for (const char* f : {"deployInCluster", "serviceID", "interfaces", "configPorts",
                        "dpuClusterSelector", "paused", "foreign"})
    EXPECT_FALSE(spec.contains(f)) << f;
  EXPECT_FALSE(spec["helmChart"]["source"].contains("releaseName"));
  EXPECT_FALSE(spec["helmChart"]["source"].contains("path"));
  EXPECT_FALSE(spec["serviceDaemonSet"].contains("nodeSelector"));
  EXPECT_EQ(spec["serviceDaemonSet"],
            json::parse(R"({"labels":null,"annotations":null,"updateStrategy":null})"));
  EXPECT_EQ(spec["helmChart"]["values"], nullptr);
}

TEST(MutablePatch, LiveWithoutOptionalParents) {
  json live = json::parse(
      R"({"metadata":{"name":"n"},"spec":{"helmChart":{"source":{"repoURL":"oci://r/c","chart":"c","version":"1.0.0"}}}})");
  json desired = json::parse(
      R"({"spec":{"helmChart":{"source":{"repoURL":"oci://r/c","chart":"c","version":"1.0.0"}},
      "security":{"privileged":true},"serviceDaemonSet":{"labels":{"a":"b"}}}})");
  EXPECT_EQ(
      dpuservice_mutable_patch(live, desired),
      json::parse(
          R"({"spec":{"security":{"privileged":true},"serviceDaemonSet":{"labels":{"a":"b"}}}})"));
}

// Restriction of a DPUService to the owned fields, nulls dropped.
json owned(const json& d) {
  static const std::vector<std::vector<std::string>> kPaths = {
      {"spec", "helmChart", "source", "repoURL"}, {"spec", "helmChart", "source", "chart"},
      {"spec", "helmChart", "source", "version"}, {"spec", "helmChart", "values"},
      {"spec", "security", "privileged"},         {"spec", "security", "spiffe"},
      {"spec", "serviceDaemonSet", "labels"},     {"spec", "serviceDaemonSet", "annotations"},
      {"spec", "serviceDaemonSet", "resources"},  {"spec", "serviceDaemonSet", "updateStrategy"}};
  json out = json::object();
  for (const auto& p : kPaths) {
    const json* cur = &d;
    bool found = true;
    for (const auto& k : p) {
      if (!cur->is_object() || !cur->contains(k) || (*cur)[k].is_null()) {
        found = false;
        break;
      }
      cur = &(*cur)[k];
    }
    std::string key;
    for (const auto& k : p) key += "/" + k;
    if (found) out[key] = *cur;
  }
  return out;
}

class RandomJson {
 public:
  explicit RandomJson(unsigned seed) : rng_(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool coin() { return pick(2) == 0; }

  // Null-free values: merge patch cannot store nulls (see merge_diff).
  json value(int depth) {
    switch (pick(depth > 0 ? 6 : 4)) {
      case 0:
        return pick(5);
      case 1:
        return std::string(1, static_cast<char>('a' + pick(3)));
      case 2:
        return coin();
      case 3:
        return json::array({pick(3)});
      default:
        return object(depth - 1);
    }
  }
  json object(int depth) {
    json o = json::object();
    const int n = pick(4);
    for (int i = 0; i < n; ++i) o[std::string(1, static_cast<char>('k' + pick(4)))] = value(depth);
    return o;
  }
  json dpuservice() {
    json d = json::parse(R"({"metadata":{"name":"n"},"spec":{"deployInCluster":false,
        "helmChart":{"source":{"releaseName":"n"}},"serviceDaemonSet":{"nodeSelector":{"x":1}}}})");
    auto& spec = d["spec"];
    for (const char* k : {"repoURL", "chart", "version"})
      if (pick(4) != 0) spec["helmChart"]["source"][k] = value(0);
    if (coin()) spec["helmChart"]["values"] = object(3);
    if (coin()) spec["security"]["privileged"] = coin();
    if (coin()) spec["security"]["spiffe"] = pick(3) == 0 ? object(1) : json::object();
    for (const char* k : {"labels", "annotations", "resources", "updateStrategy"})
      if (coin()) spec["serviceDaemonSet"][k] = object(2);
    if (coin()) spec["foreign"] = value(2);
    return d;
  }

 private:
  std::mt19937 rng_;
};

TEST(MutablePatch, PropertyApplyingPatchConvergesOwnedFields) {
  RandomJson gen(20240601);
  for (int i = 0; i < 3000; ++i) {
    const json live = gen.dpuservice();
    const json desired = gen.dpuservice();
    const json patch = dpuservice_mutable_patch(live, desired);
    const json after = apply_merge_patch(live, patch);
    ASSERT_EQ(owned(after), owned(desired))
        << "live=" << live << "\ndesired=" << desired << "\npatch=" << patch;
    // Nothing outside the owned fields moved.
    json live_rest = live, after_rest = after;
    for (json* d : {&live_rest, &after_rest}) {
      if (!(*d)["spec"].is_object()) continue;
      auto& spec = (*d)["spec"];
      if (spec.contains("helmChart")) {
        for (const char* k : {"repoURL", "chart", "version"}) spec["helmChart"]["source"].erase(k);
        spec["helmChart"].erase("values");
      }
      spec.erase("security");
      for (const char* k : {"labels", "annotations", "resources", "updateStrategy"})
        spec["serviceDaemonSet"].erase(k);
    }
    ASSERT_EQ(live_rest, after_rest) << "patch=" << patch;
    // Converged: a second pass has nothing to do.
    ASSERT_EQ(dpuservice_mutable_patch(after, desired), json::object()) << "patch=" << patch;
    if (owned(live) == owned(desired)) {
      ASSERT_EQ(patch, json::object());
    }
  }
}

// ---------------------------------------------------------------- node_labels_patch

TEST(NodeLabelsPatch, AddsRemovesAndLeavesForeignKeys) {
  const json current = json::parse(R"({"nico/extsvc-a":"enabled","nico/extsvc-old":"enabled",
      "nico/extsvc-b":"disabled","other/label":"x","nico/other":"y","provisioning.dpu.nvidia.com/dpunode-name":"n"})");
  const auto patch =
      node_labels_patch(current, {"nico/extsvc-a", "nico/extsvc-b", "nico/extsvc-c"});
  EXPECT_EQ(patch, json::parse(R"({"spec":{"cluster":{"nodeLabels":{
      "nico/extsvc-b":"enabled","nico/extsvc-c":"enabled","nico/extsvc-old":null}}}})"));
}

TEST(NodeLabelsPatch, IdempotentAndEmptyWhenConverged) {
  const json current = json::parse(R"({"x":"1"})");
  const std::set<std::string> wanted = {"nico/extsvc-a"};
  const auto patch = node_labels_patch(current, wanted);
  const json after = apply_merge_patch({{"spec", {{"cluster", {{"nodeLabels", current}}}}}}, patch);
  const json& labels = after["spec"]["cluster"]["nodeLabels"];
  EXPECT_EQ(labels, json::parse(R"({"x":"1","nico/extsvc-a":"enabled"})"));
  EXPECT_EQ(node_labels_patch(labels, wanted), json::object());
  // Applying the same patch twice changes nothing further.
  EXPECT_EQ(apply_merge_patch(after, patch), after);
}

TEST(NodeLabelsPatch, NullOrMissingLabels) {
  EXPECT_EQ(node_labels_patch(json(), {}), json::object());
  EXPECT_EQ(node_labels_patch(json::object(), {}), json::object());
  EXPECT_EQ(node_labels_patch(json(), {"nico/extsvc-a"}),
            json::parse(R"({"spec":{"cluster":{"nodeLabels":{"nico/extsvc-a":"enabled"}}}})"));
}

TEST(NodeLabelsPatch, RemoveAllOwned) {
  EXPECT_EQ(node_labels_patch(json::parse(R"({"nico/extsvc-a":"enabled","keep":"x"})"), {}),
            json::parse(R"({"spec":{"cluster":{"nodeLabels":{"nico/extsvc-a":null}}}})"));
}

TEST(NodeLabelsPatch, CustomPrefix) {
  EXPECT_EQ(
      node_labels_patch(json::parse(R"({"p/a":"enabled","nico/extsvc-a":"enabled"})"), {}, "p/"),
      json::parse(R"({"spec":{"cluster":{"nodeLabels":{"p/a":null}}}})"));
}

}  // namespace
}  // namespace extsvc::core
