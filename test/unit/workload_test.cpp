// Which DPUService a workload object belongs to when the chart dropped our labels (issue 23,
// part 2): Argo's tracking, never the object's name.
#include "core/workload.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/pod_status.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

const std::string kOurs = "extsvc-abcdefghij2345672345";  // "extsvc-" and 20 base32 characters

json with_tracking(const std::string& id) {
  return {{"metadata", {{"annotations", {{"argocd.argoproj.io/tracking-id", id}}}}}};
}

TEST(Workload, TheTrackingIdNamesOurDpuServiceAtTheEndOfTheApplication) {
  // DPF names the Application "<dpuClusterName>-<dpuServiceName>"
  EXPECT_EQ(
      tracked_dpuservice(with_tracking("dpu-cplane-tenant1-" + kOurs +
                                       ":apps/DaemonSet:tenant-space/whatever-the-chart-says")),
      kOurs);
  EXPECT_EQ(tracked_dpuservice(with_tracking(kOurs + ":apps/DaemonSet:ns/x")), kOurs);
}

TEST(Workload, NotOursIsEmpty) {
  // another DPUService's Application, a hash of the wrong length, our name glued to a word, no
  // annotation, a malformed one
  EXPECT_EQ(tracked_dpuservice(with_tracking("dpu-cplane-tenant1-ovn:apps/DaemonSet:a/b")), "");
  EXPECT_EQ(tracked_dpuservice(with_tracking("c-" + kOurs + "x:apps/DaemonSet:a/b")), "");
  EXPECT_EQ(tracked_dpuservice(with_tracking("c" + kOurs + ":apps/DaemonSet:a/b")), "");
  EXPECT_EQ(tracked_dpuservice(with_tracking("c-EXTSVC-ABCDEFGHIJ2345672345:apps/DaemonSet:a/b")),
            "");
  EXPECT_EQ(tracked_dpuservice(with_tracking("no colon at all")), "");
  EXPECT_EQ(tracked_dpuservice(json::object()), "");
  EXPECT_EQ(tracked_dpuservice(json{{"metadata", {{"annotations", 7}}}}), "");
  EXPECT_EQ(tracked_dpuservice(json::array()), "");
}

TEST(Workload, ArgosLabelTrackingIsReadWhenThereIsNoAnnotation) {
  json ds = {{"metadata", {{"labels", {{"app.kubernetes.io/instance", "dpu-c-" + kOurs}}}}}};
  EXPECT_EQ(tracked_dpuservice(ds), kOurs);
  ds["metadata"]["labels"]["app.kubernetes.io/instance"] = "someone-else";
  EXPECT_EQ(tracked_dpuservice(ds), "");
}

TEST(Workload, ThePodsControllerDaemonSetUid) {
  json pod = {{"metadata",
               {{"ownerReferences",
                 {{{"kind", "ReplicaSet"}, {"uid", "r1"}, {"controller", true}},
                  {{"kind", "DaemonSet"}, {"uid", "d0"}, {"controller", false}},
                  {{"kind", "DaemonSet"}, {"uid", "d1"}, {"controller", true}}}}}}};
  EXPECT_EQ(daemonset_owner_uid(pod), "d1");
  EXPECT_EQ(pod_facts(pod).owner_uid, "d1");
  pod["metadata"]["ownerReferences"][2]["controller"] = "true";  // wrong type: not a controller
  EXPECT_EQ(daemonset_owner_uid(pod), "");
  EXPECT_EQ(daemonset_owner_uid(json{{"metadata", {{"ownerReferences", "x"}}}}), "");
  EXPECT_EQ(daemonset_owner_uid(json::object()), "");
}

}  // namespace
}  // namespace extsvc::core
