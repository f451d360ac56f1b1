#include "core/pod_status.hpp"

#include <gtest/gtest.h>

#include "core/dpf_status.hpp"

namespace extsvc::core {
namespace {

using nlohmann::json;

json pod(const std::string& name, const std::string& revision, const std::string& phase,
         bool ready) {
  json p = {
      {"metadata",
       {{"name", name},
        {"labels", {{"nico/extension-service-id", "u"}}},
        {"annotations", {{"nico/extension-service-revision", revision}}}}},
      {"spec", {{"nodeName", "host-0"}}},
      {"status",
       {{"phase", phase},
        {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
  return p;
}

TEST(ClassifyPod, OnlyARunningReadyPodOfTheAppliedRevisionProvesRunning) {
  EXPECT_TRUE(classify_pod(pod("a", "4", "Running", true), 4).proves_running);
  const auto old = classify_pod(pod("a", "3", "Running", true), 4);
  EXPECT_FALSE(old.proves_running);
  EXPECT_EQ(old.revision, 3);
  EXPECT_EQ(old.reason, "pod a is of revision 3 (applied: 4)");
  EXPECT_FALSE(classify_pod(pod("a", "4", "Running", false), 4).proves_running);
  EXPECT_FALSE(classify_pod(pod("a", "4", "Pending", true), 4).proves_running);
  json deleting = pod("a", "4", "Running", true);
  deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  const auto d = classify_pod(deleting, 4);
  EXPECT_FALSE(d.proves_running);
  EXPECT_TRUE(d.terminating);
  json bare = pod("a", "4", "Running", true);
  bare["metadata"].erase("annotations");
  EXPECT_FALSE(classify_pod(bare, 4).proves_running);
  EXPECT_EQ(classify_pod(bare, 4).reason, "pod a carries no revision annotation");
  for (const char* bad : {"", "4x", "-4", "04a", "99999999999999999999"})
    EXPECT_FALSE(classify_pod(pod("a", bad, "Running", true), 4).proves_running) << bad;
}

TEST(ClassifyPod, ContainerWaitingReasonsReachTheMessage) {
  json crash = pod("a-x", "2", "Running", false);
  crash["status"]["containerStatuses"] =
      json::array({{{"name", "main"}, {"state", {{"waiting", {{"reason", "CrashLoopBackOff"}}}}}}});
  EXPECT_EQ(classify_pod(crash, 2).reason,
            "pod a-x is not Ready: container main waiting (CrashLoopBackOff)");
  json pull = pod("a-y", "2", "Pending", false);
  pull["status"]["containerStatuses"] =
      json::array({{{"name", "main"}, {"state", {{"waiting", {{"reason", "ImagePullBackOff"}}}}}}});
  EXPECT_EQ(classify_pod(pull, 2).reason,
            "pod a-y is Pending: container main waiting (ImagePullBackOff)");
}

// A DaemonSet pod is created unbound; its Node is named by its required node affinity until the
// scheduler binds it. Unschedulable, it stays Pending with PodScheduled=False and no nodeName.
TEST(ClassifyPod, AnUnboundPodCountsForItsAffinityNodeAndNamesTheSchedulersReason) {
  json p = pod("a", "4", "Pending", false);
  p["spec"] = {
      {"affinity",
       {{"nodeAffinity",
         {{"requiredDuringSchedulingIgnoredDuringExecution",
           {{"nodeSelectorTerms",
             json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                         {"operator", "In"},
                                                         {"values", {"host-7"}}}})}}})}}}}}}}};
  PodFacts f = pod_facts(p);
  EXPECT_EQ(f.node, "host-7");
  EXPECT_FALSE(f.bound);
  EXPECT_EQ(classify_pod(f, 4).reason, "pod a is not scheduled yet");
  p["status"]["conditions"].push_back(
      {{"type", "PodScheduled"},
       {"status", "False"},
       {"reason", "Unschedulable"},
       {"message", "0/4 nodes are available: 1 Insufficient nvidia.com/bf_sf."}});
  const PodVerdict v = classify_pod(p, 4);
  EXPECT_FALSE(v.proves_running);
  EXPECT_EQ(v.reason,
            "pod a is not scheduled (Unschedulable: 0/4 nodes are available: 1 Insufficient "
            "nvidia.com/bf_sf.)");
  // even a status that claims Running proves nothing without a Node
  p["status"]["phase"] = "Running";
  p["status"]["conditions"][0]["status"] = "True";
  EXPECT_FALSE(classify_pod(p, 4).proves_running);
  // no affinity, no nodeName: for no Node
  json bare = pod("b", "4", "Pending", false);
  bare.erase("spec");
  EXPECT_EQ(pod_facts(bare).node, "");
  // bound: nodeName wins over the affinity, and the scheduler's old condition is not read
  p["spec"]["nodeName"] = "host-7";
  p["status"]["conditions"][1]["status"] = "True";
  EXPECT_TRUE(pod_facts(p).bound);
  EXPECT_TRUE(classify_pod(p, 4).proves_running);
}

TEST(PendingPodsReason, PrefersThePodOfTheAppliedRevision) {
  EXPECT_EQ(pending_pods_reason({}, "n1"), "no pod of the service on Node n1 yet");
  json crash = pod("new", "5", "Running", false);
  const std::vector<PodVerdict> v = {classify_pod(pod("old", "4", "Running", true), 5),
                                     classify_pod(crash, 5)};
  EXPECT_EQ(pending_pods_reason(v, "n1"), "pod new is not Ready (2 pods on the Node)");
}

TEST(DpfStatus, ReadsReadyConditionGenerationAndPaused) {
  const json svc = json::parse(R"({"metadata":{"generation":3},"spec":{"paused":true},
    "status":{"observedGeneration":3,"conditions":[{"type":"ApplicationsReady","status":"True"},
      {"type":"Ready","status":"False","reason":"Pending","message":"chart pull failed"}]}})");
  const auto s = dpf_status(svc);
  EXPECT_EQ(s.ready, std::optional<bool>(false));
  EXPECT_EQ(s.reason, "Pending");
  EXPECT_TRUE(s.paused);
  EXPECT_TRUE(s.generation_observed);
  EXPECT_NE(s.message.find("chart pull failed"), std::string::npos);
  EXPECT_NE(s.message.find("spec.paused"), std::string::npos);
  // DPF's Ready only names the conditions that are not ready; their messages carry the cause
  const auto sync = dpf_status(json::parse(R"({"metadata":{"generation":1},"status":{"conditions":[
      {"type":"ApplicationsReconciled","status":"True","message":"fine"},
      {"type":"ApplicationsReady","status":"False","reason":"Pending",
       "message":"Application is not ready (Sync: OutOfSync, Health: Missing)."},
      {"type":"Ready","status":"False","reason":"Pending",
       "message":"The following conditions are not ready: ApplicationsReady"}]}})"));
  EXPECT_EQ(sync.message,
            "The following conditions are not ready: ApplicationsReady; ApplicationsReady: "
            "Application is not ready (Sync: OutOfSync, Health: Missing).");
  const auto none = dpf_status(json::parse(R"({"metadata":{"generation":2},"status":{}})"));
  EXPECT_FALSE(none.ready.has_value());
  EXPECT_FALSE(none.generation_observed);
  EXPECT_FALSE(none.paused);
}

// Issue 23, part 3: DPF says only "Sync: OutOfSync"; the Application says why.
TEST(ArgoSyncNote, DpfOutOfSyncTriggersTheRead) {
  DpfStatus s;
  s.ready = false;
  s.message = "ApplicationsReady: Application is not ready (Sync: OutOfSync, Health: Missing).";
  EXPECT_TRUE(dpf_reports_out_of_sync(s));
  s.message = "ApplicationsReady: Application is not ready (Sync: Unknown, Health: Missing).";
  EXPECT_FALSE(dpf_reports_out_of_sync(s));
  s.message = "ApplicationsReady: Application is not ready (Sync: OutOfSync, Health: Healthy).";
  s.ready = true;  // Ready: nothing to explain
  EXPECT_FALSE(dpf_reports_out_of_sync(s));
  s.ready.reset();
  EXPECT_FALSE(dpf_reports_out_of_sync(s));
  EXPECT_EQ(argo_application_selector("extsvc-abc", "dpf-operator-system"),
            "dpu.nvidia.com/dpuservice-name=extsvc-abc,"
            "dpu.nvidia.com/dpuservice-namespace=dpf-operator-system");
}

TEST(ArgoSyncNote, NamesTheAdmissionPolicyFromTheFailedOperation) {
  const std::string denial =
      "one or more objects failed to apply, reason: daemonsets.apps \"a-priv\" is forbidden: "
      "ValidatingAdmissionPolicy 'dpf-deny-privileged-pods' with binding "
      "'dpf-deny-privileged-pods' denied request: Privileged containers are not allowed";
  const json failed = {{"metadata", {{"name", "dpu-cplane-tenant1-a"}}},
                       {"status",
                        {{"sync", {{"status", "OutOfSync"}}},
                         {"operationState", {{"phase", "Failed"}, {"message", denial}}}}}};
  auto same = [](std::string_view t) { return std::string(t); };
  EXPECT_EQ(argo_sync_failure(failed), denial);
  EXPECT_EQ(argo_sync_note(json::array({failed}), same), "sync failed: " + denial);
  // a succeeded or running operation is no failure, whatever the sync status says
  for (const char* phase : {"Succeeded", "Running", ""}) {
    json other = failed;
    other["status"]["operationState"]["phase"] = phase;
    EXPECT_EQ(argo_sync_failure(other), "") << phase;
    EXPECT_EQ(argo_sync_note(json::array({other}), same), "") << phase;
  }
  // no operation, but a SyncError condition (an automated sync Argo refused to attempt)
  const json cond = {{"metadata", {{"name", "b"}}},
                     {"status",
                      {{"conditions",
                        {{{"type", "ComparisonError"}, {"message", "not this one"}},
                         {{"type", "SyncError"}, {"message", "Failed sync attempt: denied"}}}}}}};
  EXPECT_EQ(argo_sync_failure(cond), "Failed sync attempt: denied");
  // several DPU clusters: each failing Application named, the others left out
  json ok = failed;
  ok["metadata"]["name"] = "c";
  ok["status"]["operationState"]["phase"] = "Succeeded";
  EXPECT_EQ(argo_sync_note(json::array({failed, ok, cond}), same),
            "Application dpu-cplane-tenant1-a sync failed: " + denial +
                "; Application b sync failed: Failed sync attempt: denied");
  // bounded (valid UTF-8) and passed through the caller's redaction first
  json long_one = failed;
  long_one["status"]["operationState"]["message"] = "token=s3cr3t " + std::string(1000, 'x');
  const std::string note = argo_sync_note(
      json::array({long_one}),
      [](std::string_view t) {
        std::string out(t);
        out.replace(out.find("s3cr3t"), 6, "[REDACTED]");
        return out;
      },
      100);
  EXPECT_EQ(note.size(), std::string("sync failed: ").size() + 100);
  EXPECT_EQ(note.find("s3cr3t"), std::string::npos);
  EXPECT_NE(note.find("[REDACTED]"), std::string::npos);
  // odd shapes never throw
  EXPECT_EQ(argo_sync_note(json::object(), same), "");
  EXPECT_EQ(argo_sync_note(json::array({7, "x", json::object()}), same), "");
}

TEST(ArgoSyncNote, UnreadableSaysWhyAndTheRbacOn403) {
  const std::string forbidden = argo_unreadable_note(
      403, "Forbidden (HTTP 403, Forbidden): applications.argoproj.io is forbidden", "dpf-ns");
  EXPECT_NE(forbidden.find("could not be read (Forbidden"), std::string::npos) << forbidden;
  EXPECT_NE(forbidden.find("grant get and list on applications.argoproj.io in namespace dpf-ns"),
            std::string::npos)
      << forbidden;
  const std::string down = argo_unreadable_note(503, "ServerError (HTTP 503)", "dpf-ns");
  EXPECT_EQ(down, "the Argo CD sync message could not be read (ServerError (HTTP 503))");
}

// fuzz finding (watch_events, 2026-12-02): a condition whose "type" is not a
// string threw nlohmann's type_error 302 out of the watcher's cache update
TEST(ClassifyPod, ConditionsOfAnotherTypeAreNotReadyAndNeverThrow) {
  json odd = pod("a", "4", "Running", true);
  odd["status"]["conditions"] = json::array({{{"type", {{"running", json::object()}}}},
                                             {{"type", "Ready"}, {"status", true}},
                                             7,
                                             "Ready"});
  PodVerdict v;
  EXPECT_NO_THROW(v = classify_pod(odd, 4));
  EXPECT_FALSE(v.proves_running);
  EXPECT_NO_THROW((void)pod_facts(odd));
  const json svc = json::parse(R"({"status":{"conditions":[{"type":{"x":1}},
    {"type":"Ready","status":["True"],"reason":3,"message":{"m":1}}]}})");
  DpfStatus s;
  EXPECT_NO_THROW(s = dpf_status(svc));
  EXPECT_FALSE(s.ready.has_value());
  EXPECT_EQ(s.reason, "");
  EXPECT_EQ(s.message, "");
}

TEST(StrictUnknownFields, ParsesTheApiServersMessage) {
  EXPECT_EQ(strict_unknown_fields(
                "DPUService in version \"v1alpha1\" cannot be handled as a DPUService: strict "
                "decoding error: unknown field \"spec.security\", unknown field "
                "\"spec.serviceDaemonSet.resources\", unknown field \"spec.security\""),
            (std::vector<std::string>{"spec.security", "spec.serviceDaemonSet.resources"}));
  EXPECT_TRUE(strict_unknown_fields("unknown field \"x\"").empty());
  EXPECT_TRUE(strict_unknown_fields("spec.x: Invalid value").empty());
  EXPECT_NE(unknown_fields_message({"spec.security"}).find("spec.security"), std::string::npos);
  // each known field names the releases read; an unknown one is listed bare
  const std::string m =
      unknown_fields_message({"spec.security.spiffe", "spec.serviceDaemonSet.resources", "spec.x"});
  EXPECT_NE(m.find("spec.security.spiffe (not in DPF v24.10's or v25.7's DPUService CRD; first in "
                   "DPF v26.8, the minimum release)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("spec.serviceDaemonSet.resources (not in DPF v24.10's"), std::string::npos) << m;
  EXPECT_NE(m.find(", spec.x (fieldValidation=Strict)"), std::string::npos) << m;
  EXPECT_EQ(unknown_fields_message({"spec.securityx"}).find("v24.10"), std::string::npos);
}

TEST(DroppedFields, NamesWhatThePrunedEchoLacks) {
  const json sent = json::parse(R"({"spec":{"helmChart":{"source":{"repoURL":"oci://r/c",
    "chart":"c","version":"1.0.0"}},"security":{"privileged":false,"spiffe":{}},
    "serviceDaemonSet":{"labels":{"a":"b"},"resources":{"cpu":"1"}}}})");
  json echoed = sent;
  EXPECT_TRUE(dropped_fields(sent, echoed).empty());
  echoed["spec"].erase("security");
  echoed["spec"]["serviceDaemonSet"].erase("resources");
  echoed["spec"]["serviceDaemonSet"]["labels"]["svc.dpu.nvidia.com/service"] = "x";
  EXPECT_EQ(dropped_fields(sent, echoed),
            (std::vector<std::string>{"spec.security", "spec.serviceDaemonSet.resources"}));
  echoed["spec"]["security"] = {{"privileged", false}};
  EXPECT_EQ(dropped_fields(sent, echoed),
            (std::vector<std::string>{"spec.security.spiffe", "spec.serviceDaemonSet.resources"}));
}

}  // namespace
}  // namespace extsvc::core
