#include "core/dpuservice_render.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

constexpr std::string_view kUuid = "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d";
constexpr std::string_view kVersion = "V1-T1700000000000000";
constexpr std::string_view kNs = "dpf-operator-system";
// From identity_vectors.txt.
constexpr std::string_view kName = "extsvc-qquz5u6fxoepw7najclp";

json normalized(std::string_view text) {
  // Through jsonb-like unordered JSON, as the SQL layer passes it.
  return json::parse(validate_helm_chart_data(text).dump());
}

json selector() {
  return json::parse(R"({"nodeSelectorTerms":[{"matchExpressions":[
      {"key":"nico/extsvc-qquz5u6fxoepw7najclp","operator":"In","values":["enabled"]}]}]})");
}

TEST(RenderDpuService, Minimal) {
  const auto data = normalized(R"({"repoURL":"oci://registry.example.com/charts",
      "chartName":"tenant-service","chartVersion":"1.2.3","security":{"privileged":false}})");
  const json expected = json::parse(R"({
    "apiVersion": "svc.dpu.nvidia.com/v1alpha1",
    "kind": "DPUService",
    "metadata": {
      "name": "extsvc-qquz5u6fxoepw7najclp",
      "namespace": "dpf-operator-system",
      "labels": {"nico/extension-service-id": "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d",
                 "nico/extension-service-version": "V1-T1700000000000000"}
    },
    "spec": {
      "deployInCluster": false,
      "helmChart": {"source": {"repoURL": "oci://registry.example.com/charts",
                               "chart": "tenant-service", "version": "1.2.3",
                               "releaseName": "extsvc-qquz5u6fxoepw7najclp"}},
      "security": {"privileged": false},
      "serviceDaemonSet": {
        "labels": {"nico/extension-service-id": "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d"},
        "annotations": {"nico/extension-service-revision": "1"},
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nico/extsvc-qquz5u6fxoepw7najclp", "operator": "In", "values": ["enabled"]}]}]}}
    }
  })");
  EXPECT_EQ(render_dpuservice(kUuid, kVersion, 1, data, kNs), expected);
}

TEST(RenderDpuService, Full) {
  const auto data = normalized(R"({"repoURL":"https://charts.example.com/a","chartName":"svc",
      "chartVersion":"v2.0.0","security":{"privileged":true,"spiffe":{}},
      "serviceDaemonSet":{"labels":{"app":"x"},"annotations":{"a":"b"},"resources":{"cpu":"1"},
                          "updateStrategy":{"type":"OnDelete"}},
      "values":{"image":{"tag":"1"},"serviceDaemonSet":{"labels":{"v":"w"}}}})");
  const json expected = json::parse(R"({
    "apiVersion": "svc.dpu.nvidia.com/v1alpha1",
    "kind": "DPUService",
    "metadata": {
      "name": "extsvc-qquz5u6fxoepw7najclp",
      "namespace": "other-ns",
      "labels": {"nico/extension-service-id": "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d",
                 "nico/extension-service-version": "V1-T1700000000000000"}
    },
    "spec": {
      "deployInCluster": false,
      "helmChart": {"source": {"repoURL": "https://charts.example.com/a", "chart": "svc",
                               "version": "v2.0.0", "releaseName": "extsvc-qquz5u6fxoepw7najclp"},
                    "values": {"image": {"tag": "1"}, "serviceDaemonSet": {"labels": {"v": "w"}}}},
      "security": {"privileged": true, "spiffe": {}},
      "serviceDaemonSet": {
        "labels": {"app": "x", "nico/extension-service-id": "7b4d3c2a-1e5f-4a6b-9c8d-0e1f2a3b4c5d"},
        "annotations": {"a": "b", "nico/extension-service-revision": "7"}, "resources": {"cpu": "1"},
        "updateStrategy": {"type": "OnDelete"},
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
          {"key": "nico/extsvc-qquz5u6fxoepw7najclp", "operator": "In", "values": ["enabled"]}]}]}}
    }
  })");
  EXPECT_EQ(render_dpuservice(kUuid, kVersion, 7, data, "other-ns"), expected);
}

TEST(RenderDpuService, EmptyValuesKeptAndNeverAttachmentFields) {
  const auto data = normalized(R"({"repoURL":"oci://r.io/c","chartName":"c","chartVersion":"1.0.0",
      "security":{"privileged":false},"values":{}})");
  const auto r = render_dpuservice(kUuid, kVersion, 1, data, kNs);
  EXPECT_EQ(r["spec"]["helmChart"]["values"], json::object());
  for (const char* f : {"serviceID", "interfaces", "configPorts", "dpuClusterSelector", "paused"})
    EXPECT_FALSE(r["spec"].contains(f)) << f;
}

TEST(RenderDpuService, CanonicalizesUuidAndRefusesBadOne) {
  const auto data = normalized(R"({"repoURL":"oci://r.io/c","chartName":"c","chartVersion":"1.0.0",
      "security":{"privileged":false}})");
  const auto r = render_dpuservice("7B4D3C2A-1E5F-4A6B-9C8D-0E1F2A3B4C5D", kVersion, 1, data, kNs);
  EXPECT_EQ(r["metadata"]["name"], kName);
  EXPECT_EQ(r["metadata"]["labels"]["nico/extension-service-id"], std::string(kUuid));
  EXPECT_THROW(render_dpuservice("nope", kVersion, 1, data, kNs), std::invalid_argument);
  EXPECT_THROW(render_dpuservice(kUuid, kVersion, 0, data, kNs), std::invalid_argument);
}

// Issue 25: the site label goes on the DPUService's metadata only; the DaemonSet template
// (spec.serviceDaemonSet) is the same with and without it, so adding it restarts no pod.
TEST(RenderDpuService, SiteLabelOnMetadataOnly) {
  const auto data = normalized(R"({"repoURL":"oci://registry.example.com/charts",
      "chartName":"tenant-service","chartVersion":"1.2.3","security":{"privileged":false},
      "serviceDaemonSet":{"labels":{"team":"blue"}}})");
  const json without = render_dpuservice(kUuid, kVersion, 1, data, kNs);
  const json with = render_dpuservice(kUuid, kVersion, 1, data, kNs, "site-a");
  EXPECT_EQ(with["metadata"]["labels"]["nico/site"], "site-a");
  EXPECT_FALSE(without["metadata"]["labels"].contains("nico/site"));
  EXPECT_EQ(with["spec"], without["spec"]);
  json stripped = with;
  stripped["metadata"]["labels"].erase("nico/site");
  EXPECT_EQ(stripped, without);
}

// ---------------------------------------------------------------- identity_mismatch

json live_object() {
  const auto data = normalized(R"({"repoURL":"oci://r.io/c","chartName":"c","chartVersion":"1.0.0",
      "security":{"privileged":false},"values":{"secret":"s3cret"}})");
  json live = render_dpuservice(kUuid, kVersion, 1, data, kNs);
  // Fields the API server and DPF add are not identity.
  live["metadata"]["resourceVersion"] = "42";
  live["metadata"]["finalizers"] = json::array({"dpu.nvidia.com/dpuservice"});
  live["metadata"]["labels"]["other"] = "x";
  live["status"] = {{"conditions", json::array()}};
  live["spec"]["paused"] = false;
  return live;
}

TEST(IdentityMismatch, OwnedObjectMatches) {
  EXPECT_EQ(identity_mismatch(live_object(), kUuid, kVersion, kNs), std::nullopt);
  // Nulls are absent, as Kubernetes omits empty optional fields.
  auto live = live_object();
  live["spec"]["serviceID"] = nullptr;
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs), std::nullopt);
}

TEST(IdentityMismatch, SiteLabelIsCheckedOnlyWithASiteId) {
  const auto data = normalized(R"({"repoURL":"oci://r.io/c","chartName":"c","chartVersion":"1.0.0",
      "security":{"privileged":false}})");
  json live = render_dpuservice(kUuid, kVersion, 1, data, kNs, "site-a");
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs, "site-a"), std::nullopt);
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs), std::nullopt);
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs, "site-b"),
            "metadata.labels[\"nico/site\"]");
  live["metadata"]["labels"].erase("nico/site");
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs, "site-a"),
            "metadata.labels[\"nico/site\"]");
  // ownership first: another service's object is reported by its owner label
  live["metadata"]["labels"]["nico/extension-service-id"] = "x";
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs, "site-a"),
            "metadata.labels[\"nico/extension-service-id\"]");
}

struct MismatchCase {
  const char* name;
  void (*edit)(json&);
  const char* path;
};

TEST(IdentityMismatch, EachFieldIsReportedByPathOnly) {
  const MismatchCase cases[] = {
      {"foreign owner",
       [](json& j) {
         j["metadata"]["labels"]["nico/extension-service-id"] =
             "00000000-0000-0000-0000-000000000000";
       },
       R"(metadata.labels["nico/extension-service-id"])"},
      {"no owner", [](json& j) { j["metadata"]["labels"].erase("nico/extension-service-id"); },
       R"(metadata.labels["nico/extension-service-id"])"},
      {"no labels", [](json& j) { j["metadata"].erase("labels"); },
       R"(metadata.labels["nico/extension-service-id"])"},
      {"uppercase owner",
       [](json& j) {
         j["metadata"]["labels"]["nico/extension-service-id"] =
             "7B4D3C2A-1E5F-4A6B-9C8D-0E1F2A3B4C5D";
       },
       R"(metadata.labels["nico/extension-service-id"])"},
      {"version",
       [](json& j) { j["metadata"]["labels"]["nico/extension-service-version"] = "V1-T2"; },
       R"(metadata.labels["nico/extension-service-version"])"},
      {"name", [](json& j) { j["metadata"]["name"] = "extsvc-other"; }, "metadata.name"},
      {"namespace", [](json& j) { j["metadata"]["namespace"] = "default"; }, "metadata.namespace"},
      {"deployInCluster true", [](json& j) { j["spec"]["deployInCluster"] = true; },
       "spec.deployInCluster"},
      {"deployInCluster absent", [](json& j) { j["spec"].erase("deployInCluster"); },
       "spec.deployInCluster"},
      {"deployInCluster string", [](json& j) { j["spec"]["deployInCluster"] = "false"; },
       "spec.deployInCluster"},
      {"releaseName",
       [](json& j) { j["spec"]["helmChart"]["source"]["releaseName"] = "s3cret-release"; },
       "spec.helmChart.source.releaseName"},
      {"releaseName absent", [](json& j) { j["spec"]["helmChart"]["source"].erase("releaseName"); },
       "spec.helmChart.source.releaseName"},
      {"nodeSelector value",
       [](json& j) {
         j["spec"]["serviceDaemonSet"]["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"]
          [0]["values"][0] = "s3cret";
       },
       "spec.serviceDaemonSet.nodeSelector"},
      {"nodeSelector extra term",
       [](json& j) {
         j["spec"]["serviceDaemonSet"]["nodeSelector"]["nodeSelectorTerms"].push_back(
             json::object());
       },
       "spec.serviceDaemonSet.nodeSelector"},
      {"nodeSelector absent", [](json& j) { j["spec"]["serviceDaemonSet"].erase("nodeSelector"); },
       "spec.serviceDaemonSet.nodeSelector"},
      {"serviceID", [](json& j) { j["spec"]["serviceID"] = "s3cret"; }, "spec.serviceID"},
      {"interfaces", [](json& j) { j["spec"]["interfaces"] = json::array({"p0"}); },
       "spec.interfaces"},
      {"configPorts", [](json& j) { j["spec"]["configPorts"] = json::object(); },
       "spec.configPorts"},
      {"dpuClusterSelector", [](json& j) { j["spec"]["dpuClusterSelector"] = json::object(); },
       "spec.dpuClusterSelector"},
  };
  for (const auto& c : cases) {
    auto live = live_object();
    c.edit(live);
    const auto m = identity_mismatch(live, kUuid, kVersion, kNs);
    ASSERT_TRUE(m) << c.name;
    EXPECT_EQ(*m, c.path) << c.name;
    EXPECT_EQ(m->find("s3cret"), std::string::npos) << c.name;
  }
}

TEST(IdentityMismatch, MutableFieldsAreNotIdentity) {
  auto live = live_object();
  live["spec"]["helmChart"]["source"]["version"] = "9.9.9";
  live["spec"]["helmChart"]["values"] = json::object();
  live["spec"]["security"]["privileged"] = true;
  live["spec"]["serviceDaemonSet"]["labels"] = {{"x", "y"}};
  EXPECT_EQ(identity_mismatch(live, kUuid, kVersion, kNs), std::nullopt);
}

TEST(IdentityMismatch, NonObjectLiveIsForeign) {
  EXPECT_EQ(identity_mismatch(json::array(), kUuid, kVersion, kNs),
            R"(metadata.labels["nico/extension-service-id"])");
  EXPECT_EQ(identity_mismatch(json(), kUuid, kVersion, kNs),
            R"(metadata.labels["nico/extension-service-id"])");
}

TEST(OwnedBy, OnlyTheOwnerLabelCounts) {
  auto live = live_object();
  live["spec"]["serviceID"] = "x";
  live["metadata"]["labels"]["nico/extension-service-version"] = "V9-T9";
  EXPECT_TRUE(owned_by(live, kUuid));
  EXPECT_TRUE(owned_by(live, "7B4D3C2A-1E5F-4A6B-9C8D-0E1F2A3B4C5D"));
  EXPECT_FALSE(owned_by(live, "00000000-0000-0000-0000-000000000000"));
  EXPECT_FALSE(owned_by(live, "not-a-uuid"));
  live["metadata"]["labels"].erase("nico/extension-service-id");
  EXPECT_FALSE(owned_by(live, kUuid));
  EXPECT_FALSE(owned_by(json::object(), kUuid));
}

TEST(PlacementNodeSelector, Shape) {
  EXPECT_EQ(placement_node_selector(placement_label_key(kUuid, kVersion)), selector());
}

}  // namespace
}  // namespace extsvc::core
