// The DPF API level from the served CRDs' OpenAPI v3 documents (issue 23, part 5).
#include "core/dpf_api_level.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace extsvc::core {
namespace {

using nlohmann::json;

json schema(const std::string& kind, const json& spec_props) {
  return {{"type", "object"},
          {"properties", {{"spec", {{"type", "object"}, {"properties", spec_props}}}}},
          {"x-kubernetes-group-version-kind",
           {{{"group", "x"}, {"version", "v1alpha1"}, {"kind", kind}}}}};
}

json doc(const std::string& name, const json& s) {
  return {{"openapi", "3.0.0"}, {"components", {{"schemas", {{name, s}}}}}};
}

const json kSvc = doc("com.nvidia.dpu.svc.v1alpha1.DPUService",
                      schema("DPUService", {{"helmChart", {{"type", "object"}}},
                                            {"security", {{"type", "object"}}}}));
const json kSvcOld = doc("com.nvidia.dpu.svc.v1alpha1.DPUService",
                         schema("DPUService", {{"helmChart", {{"type", "object"}}}}));
const json kDev = doc("com.nvidia.dpu.provisioning.v1alpha1.DPUDevice",
                      schema("DPUDevice", {{"cluster", {{"type", "object"}}}}));
const json kDevOld = doc("com.nvidia.dpu.provisioning.v1alpha1.DPUDevice",
                         schema("DPUDevice", {{"serialNumber", {{"type", "string"}}}}));

TEST(DpfApiLevel, V26_8ServesEverything) {
  const DpfApiLevel l = dpf_api_level(kSvc, kDev);
  EXPECT_TRUE(l.sufficient());
  EXPECT_EQ(l.level(), "v26.8+");
  EXPECT_TRUE(l.missing().empty());
}

TEST(DpfApiLevel, V24_10ServesNoDpuDeviceAndNoSecurity) {
  // the provisioning group-version answered 404 for the DPUDevice's document, or lacks the kind
  for (const json& prov :
       {json(), doc("com.nvidia.dpu.provisioning.v1alpha1.DPU", schema("DPU", json::object()))}) {
    const DpfApiLevel l = dpf_api_level(kSvcOld, prov);
    EXPECT_FALSE(l.sufficient());
    EXPECT_EQ(l.level(), "below v26.8");
    EXPECT_EQ(l.missing(),
              (std::vector<std::string>{"DPUService.spec.security", "DPUDevice (resource)"}));
  }
}

TEST(DpfApiLevel, V25_7HasADpuDeviceWithoutSpecCluster) {
  const DpfApiLevel l = dpf_api_level(kSvcOld, kDevOld);
  EXPECT_EQ(l.missing_for_services(), std::vector<std::string>{"DPUService.spec.security"});
  EXPECT_EQ(l.missing_for_placement(), std::vector<std::string>{"DPUDevice.spec.cluster"});
  const std::string m = DpfApiLevel::message(l.missing());
  EXPECT_NE(m.find("DPUService.spec.security, DPUDevice.spec.cluster"), std::string::npos) << m;
  EXPECT_NE(m.find("v26.8 or later"), std::string::npos) << m;
}

TEST(DpfApiLevel, UnknownUntilReadAndBitsRoundTrip) {
  const DpfApiLevel unknown;
  EXPECT_EQ(unknown.level(), "unknown");
  EXPECT_TRUE(unknown.missing().empty());  // nothing is refused on a guess
  EXPECT_EQ(unknown.bits(), 0u);
  for (const auto& l : {dpf_api_level(kSvc, kDev), dpf_api_level(kSvcOld, kDevOld),
                        dpf_api_level(kSvcOld, json()), dpf_api_level(json(), json())}) {
    const DpfApiLevel back = DpfApiLevel::from_bits(l.bits());
    EXPECT_EQ(back.missing(), l.missing());
    EXPECT_EQ(back.level(), l.level());
  }
  EXPECT_EQ(dpf_api_level(json(), json()).missing(),
            (std::vector<std::string>{"DPUService (resource)", "DPUDevice (resource)"}));
}

TEST(DpfApiLevel, OddDocumentsNeverThrow) {
  EXPECT_NO_THROW((void)dpf_api_level(json::array(), json("x")));
  json bad = kSvc;
  bad["components"]["schemas"]["com.nvidia.dpu.svc.v1alpha1.DPUService"]
     ["x-kubernetes-group-version-kind"] = "DPUService";
  EXPECT_FALSE(dpf_api_level(bad, kDev).dpuservice_served);
}

}  // namespace
}  // namespace extsvc::core
