// The service reconciler against a dpfsim child process, without PostgreSQL
// (issue 8: what envtest is to controller-runtime). Each test plays the
// worker: it builds the claimed work as the queue would, runs one pass, and
// checks both the decided outcome and what the API server holds afterwards.
#include "reconcile/service_reconciler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/dpuservice_render.hpp"
#include "core/drift_key.hpp"
#include "core/drift_shape.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "kube/client.hpp"
#include "shared_sim.hpp"
#include "sim_harness.h"

namespace extsvc::reconcile {
namespace {

using nlohmann::json;
using Kind = Outcome::Kind;

constexpr const char* kServiceNs = "dpf-operator-system";
constexpr const char* kServiceVersion = "V1-T1700000000000000";

class ServiceReconcilerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = &testfixture::shared_reconcile_sim(); }
  static void TearDownTestSuite() { sim_ = nullptr; }

  void SetUp() override {
    sim_->reset(2, 0);
    sim_->ctl("DELETE", "/faults");
    kube::ClusterConfig cfg;
    cfg.server = sim_->mgmt;
    cfg.ca_file = sim_->ca_file;
    cfg.timeout_ms = 3000;
    client_ = std::make_unique<kube::Client>(cfg);
    rec_ = std::make_unique<ServiceReconciler>(*client_, kServiceNs);
  }

  // The claimed work of a service at a Helm revision with these chart values.
  static ServiceWork work(const std::string& uuid, const std::string& state, int revision,
                          const json& values) {
    json data = {{"repoURL", "https://charts.example.com/stable"},
                 {"chartName", "demo-agent"},
                 {"chartVersion", "1.2.3"},
                 {"security", {{"privileged", false}}}};
    if (!values.is_null()) data["values"] = values;
    const auto normalized = json::parse(core::validate_helm_chart_data(data.dump()).dump());
    ServiceWork w;
    w.service_id = uuid;
    w.lifecycle_state = state;
    w.deployment_scope = "INSTANCE_DPUS";
    w.attachable_version = kServiceVersion;
    w.dpf_service_name = core::dpf_service_name(uuid, kServiceVersion);
    w.desired_revision = revision;
    if (state != "CREATING") w.applied_revision = revision - 1;
    w.desired = core::render_dpuservice(uuid, kServiceVersion, revision, normalized, kServiceNs);
    return w;
  }

  // One pass, repeated while it ends in a 409 Conflict: the patch carries the
  // resourceVersion it was decided from, and DPF's controller (dpfsim, with
  // no delays) may have written the object between the read and the patch.
  Outcome settle(const ServiceWork& w) {
    Outcome o = rec_->reconcile(w);
    for (int i = 0; i < 5 && o.kind == Kind::kRetry && o.http_status == 409; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      o = rec_->reconcile(w);
    }
    return o;
  }

  static json live(const std::string& name) {
    auto r = sim_->m("GET", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" +
                                std::string(kServiceNs) + "/dpuservices/" + name);
    return r.status == 200 ? r.j() : json();
  }

  // A DPUService put in place by hand (another owner's, say): the status of the POST.
  static int post_by_hand(const json& obj) {
    return sim_
        ->m("POST",
            "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kServiceNs) +
                "/dpuservices",
            obj.dump())
        .status;
  }

  static int count(const std::string& key) {
    return sim_->ctl("GET", "/counts").j()["management"].value(key, 0);
  }

  // What the watcher's cache holds of the object of that name (issue 26, part 2), as
  // ClusterCache::dpuservice() makes it from a watch event.
  static CachedDpuService cached_of(const std::string& name) {
    CachedDpuService c;
    const json obj = live(name);
    if (!obj.is_object()) return c;
    const json& md = obj["metadata"];
    c.present = true;
    c.uid = md.value("uid", "");
    c.resource_version = md.value("resourceVersion", "");
    c.service_id = md["labels"].value("nico/extension-service-id", "");
    c.being_deleted = md.contains("deletionTimestamp");
    c.drift_key = core::dpuservice_drift_key(obj);
    c.drift_shape = core::dpuservice_drift_shape(obj);
    return c;
  }

  // Waits until DPF's controller (dpfsim) stopped writing the object (its status after a
  // create or a patch), so that a resourceVersion read now is the one the next write meets.
  static void quiet(const std::string& name) {
    std::string rv;
    for (int i = 0; i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const json obj = live(name);
      const std::string now = obj.is_object() ? obj["metadata"].value("resourceVersion", "") : "";
      if (!rv.empty() && now == rv) return;
      rv = now;
    }
  }

  static int total() { return sim_->ctl("GET", "/counts").j().value("total", 0); }

  static void fault(const json& rule) {
    json r = rule;
    r["cluster"] = "management";
    const auto resp = sim_->ctl("POST", "/faults", r);
    ASSERT_EQ(resp.status, 200) << resp.body;
  }

  static simtest::SimProcess* sim_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<ServiceReconciler> rec_;
};

simtest::SimProcess* ServiceReconcilerTest::sim_ = nullptr;

TEST_F(ServiceReconcilerTest, CreatesTheDpuServiceAndAReplayedCreateAdoptsIt) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000001";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}});
  Outcome o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.new_state, "READY");
  EXPECT_EQ(o.reason, "dpuservice_created");
  EXPECT_EQ(o.applied_revision, 1);
  const json obj = live(w.dpf_service_name);
  ASSERT_TRUE(obj.is_object());
  EXPECT_EQ(obj["metadata"]["labels"]["nico/extension-service-id"], id);
  EXPECT_TRUE(core::owned_by(obj, id));
  // the completion was lost (a crash after the POST): the same work again
  // adopts the object instead of creating a second one
  const int posts = count("POST dpuservices");
  Outcome again = rec_->reconcile(w);
  ASSERT_EQ(again.kind, Kind::kTransition) << again.message;
  EXPECT_EQ(again.reason, "dpuservice_adopted");
  EXPECT_EQ(count("POST dpuservices"), posts + 1);  // one refused POST (409), no second object
}

TEST_F(ServiceReconcilerTest, AnUpdateThatRemovesAValueRemovesItFromTheLiveObject) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000002";
  ASSERT_EQ(rec_->reconcile(work(id, "CREATING", 1, json{{"keep", 1}, {"drop", 2}})).kind,
            Kind::kTransition);
  ServiceWork w = work(id, "UPDATING", 2, json{{"keep", 1}});
  Outcome o = settle(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.reason, "revision_applied");
  EXPECT_EQ(o.applied_revision, 2);
  const json values = live(w.dpf_service_name)["spec"]["helmChart"]["values"];
  EXPECT_EQ(values.value("keep", 0), 1);
  EXPECT_FALSE(values.contains("drop")) << values.dump();
  // applied already: the same update again writes nothing
  const int patches = count("PATCH dpuservices");
  EXPECT_EQ(settle(w).reason, "revision_applied");
  EXPECT_EQ(count("PATCH dpuservices"), patches);
}

TEST_F(ServiceReconcilerTest, DriftIsPatchedBackAndAMissingObjectIsRecreated) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000003";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}});
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  const std::string path = "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" +
                           std::string(kServiceNs) + "/dpuservices/" + w.dpf_service_name;
  ASSERT_EQ(sim_->m("PATCH", path, R"({"spec":{"helmChart":{"values":{"a":99}}}})",
                    "application/merge-patch+json")
                .status,
            200);
  ServiceWork ready = work(id, "READY", 1, json{{"a", 1}});
  ready.applied_revision = 1;
  Outcome o = settle(ready);
  ASSERT_EQ(o.kind, Kind::kEvent) << o.message;
  EXPECT_EQ(o.reason, "drift_patched");
  EXPECT_EQ(live(w.dpf_service_name)["spec"]["helmChart"]["values"]["a"], 1);
  // in sync: a resync pass is done without a write
  EXPECT_EQ(settle(ready).kind, Kind::kDone);
  // deleted by hand (the sim removes it once DPF's finalizer is gone)
  ASSERT_EQ(sim_->m("DELETE", path).status / 100, 2);
  ASSERT_TRUE(simtest::wait_until([&] { return live(w.dpf_service_name).is_null(); }, 5000));
  Outcome back = settle(ready);
  ASSERT_EQ(back.kind, Kind::kEvent) << back.message;
  EXPECT_EQ(back.reason, "drift_recreated");
  EXPECT_TRUE(live(w.dpf_service_name).is_object());
}

TEST_F(ServiceReconcilerTest, DeleteWaitsForTheFinalizersThenReportsDeleted) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000004";
  ServiceWork w = work(id, "CREATING", 1, json());
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  sim_->ctl("POST", "/delays", json{{"finalizer_ms", 500}});
  const int deletes = count("DELETE dpuservices");
  ServiceWork d = work(id, "DELETING", 1, json());
  d.applied_revision = 1;
  Outcome first = rec_->reconcile(d);
  ASSERT_EQ(first.kind, Kind::kPoll) << first.message;
  Outcome o;
  ASSERT_TRUE(simtest::wait_until(
      [&] {
        o = rec_->reconcile(d);
        return o.kind == Kind::kTransition;
      },
      10000));
  EXPECT_EQ(o.new_state, "DELETED");
  EXPECT_EQ(o.reason, "dpuservice_deleted");
  EXPECT_TRUE(live(w.dpf_service_name).is_null());
  EXPECT_EQ(count("DELETE dpuservices"), deletes + 1);  // polls read; they do not delete again
}

TEST_F(ServiceReconcilerTest, AnotherOwnersObjectIsAConflictNotAnAdoption) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000005";
  ServiceWork w = work(id, "CREATING", 1, json());
  json foreign = w.desired;
  foreign["metadata"]["labels"]["nico/extension-service-id"] =
      "6f1c0e4a-1d2b-4c3d-8e4f-0000000000ff";
  ASSERT_EQ(post_by_hand(foreign), 201);
  Outcome o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.new_state, "FAILED");
  EXPECT_EQ(o.reason, "ownership_conflict");
  EXPECT_EQ(live(w.dpf_service_name)["metadata"]["labels"]["nico/extension-service-id"],
            "6f1c0e4a-1d2b-4c3d-8e4f-0000000000ff");  // left alone
}

TEST_F(ServiceReconcilerTest, TransientFaultsAreRetriesWithTheirEvidence) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000006";
  ServiceWork w = work(id, "CREATING", 1, json());
  fault({{"verb", "POST"}, {"path_regex", "/dpuservices"}, {"status", 503}, {"count", 1}});
  Outcome o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_EQ(o.http_status, 503);
  fault({{"verb", "POST"},
         {"path_regex", "/dpuservices"},
         {"status", 429},
         {"retry_after", 7},
         {"count", 1}});
  o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_EQ(o.http_status, 429);
  EXPECT_EQ(o.retry_after_s, 7.0);
  // libcurl retries once on a fresh connection when a reused one dies before
  // any answer, so the reset must hit that retry too
  fault({{"verb", "POST"}, {"path_regex", "/dpuservices"}, {"action", "reset"}, {"count", 2}});
  o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kRetry);
  EXPECT_FALSE(o.http_status.has_value());
  // nothing was created by the failed attempts; the next pass creates it
  EXPECT_TRUE(live(w.dpf_service_name).is_null());
  o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.reason, "dpuservice_created");
}

TEST_F(ServiceReconcilerTest, AClosedFenceSendsNothing) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000007";
  ServiceWork w = work(id, "CREATING", 1, json());
  w.budget = kube::Budget().with_fence([] { return false; });
  const int before = sim_->ctl("GET", "/counts").j().value("total", 0);
  Outcome o = rec_->reconcile(w);
  EXPECT_EQ(o.kind, Kind::kLost);
  EXPECT_EQ(o.api_calls, 0);
  EXPECT_EQ(sim_->ctl("GET", "/counts").j().value("total", 0), before);
}

// Issue 26, part 2: with the watch cache, an update is one PATCH carrying the cached
// resourceVersion (no GET first); a stale cache costs one GET and one retry.
TEST_F(ServiceReconcilerTest, AnUpdateFromTheCacheIsOnePatch) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000008";
  ServiceWork created = work(id, "CREATING", 1, json{{"keep", 1}, {"drop", 2}});
  ASSERT_EQ(rec_->reconcile(created).kind, Kind::kTransition);
  ServiceWork w = work(id, "UPDATING", 2, json{{"keep", 1}});
  w.applied = created.desired;
  quiet(w.dpf_service_name);
  w.cached = cached_of(w.dpf_service_name);
  const int gets = count("GET dpuservices"), patches = count("PATCH dpuservices");
  const int before = total();
  Outcome o = rec_->reconcile(w);
  ASSERT_EQ(o.kind, Kind::kTransition) << o.message;
  EXPECT_EQ(o.reason, "revision_applied");
  EXPECT_EQ(o.applied_revision, 2);
  EXPECT_EQ(o.api_calls, 1);
  EXPECT_FALSE(o.stale_cache);
  EXPECT_EQ(total(), before + 1);
  EXPECT_EQ(count("GET dpuservices"), gets);
  EXPECT_EQ(count("PATCH dpuservices"), patches + 1);
  const json values = live(w.dpf_service_name)["spec"]["helmChart"]["values"];
  EXPECT_FALSE(values.contains("drop")) << values.dump();  // the patch base removed it
  // the cache still holds the version before the patch: 409, then one GET and one PATCH
  quiet(w.dpf_service_name);
  ServiceWork again = work(id, "UPDATING", 3, json{{"keep", 3}});
  // the cached version's rv is the one before the PATCH; its facts otherwise match revision 2
  again.applied = w.desired;
  again.cached = w.cached;
  again.cached->drift_key = core::dpuservice_drift_key(w.desired);
  const int before_stale = total();
  Outcome stale = rec_->reconcile(again);
  ASSERT_EQ(stale.kind, Kind::kTransition) << stale.message;
  EXPECT_EQ(stale.reason, "revision_applied");
  EXPECT_TRUE(stale.stale_cache);
  EXPECT_EQ(stale.api_calls, 3);  // the refused PATCH, the GET, the PATCH
  EXPECT_EQ(total(), before_stale + 3);
  EXPECT_EQ(live(w.dpf_service_name)["spec"]["helmChart"]["values"].value("keep", 0), 3);
}

// A cached object that is not this service's is never written from the cache: the read path
// decides (and reports the conflict), as strictly as before.
TEST_F(ServiceReconcilerTest, ACachedObjectOfAnotherOwnerIsNotWrittenFromTheCache) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-000000000009";
  ServiceWork created = work(id, "CREATING", 1, json{{"a", 1}});
  json foreign = created.desired;
  foreign["metadata"]["labels"]["nico/extension-service-id"] =
      "6f1c0e4a-1d2b-4c3d-8e4f-0000000000fe";
  ASSERT_EQ(post_by_hand(foreign), 201);
  ServiceWork d = work(id, "DELETING", 1, json{{"a", 1}});
  d.cached = cached_of(d.dpf_service_name);
  const int deletes = count("DELETE dpuservices");
  Outcome o = rec_->reconcile(d);
  EXPECT_EQ(o.reason, "ownership_conflict") << o.message;
  EXPECT_EQ(count("DELETE dpuservices"), deletes);
  ServiceWork u = work(id, "UPDATING", 2, json{{"a", 2}});
  u.applied = created.desired;
  u.cached = d.cached;
  const int patches = count("PATCH dpuservices");
  EXPECT_EQ(rec_->reconcile(u).reason, "ownership_conflict");
  EXPECT_EQ(count("PATCH dpuservices"), patches);
}

// With the cache, a delete is one DELETE with the cached uid; the end is the watch seeing that
// uid go, with no GET; a stale uid is refused (409) and read once.
TEST_F(ServiceReconcilerTest, ADeleteFromTheCacheIsOneDeleteAndTheWatchEndsIt) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-00000000000a";
  ServiceWork w = work(id, "CREATING", 1, json());
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  ServiceWork d = work(id, "DELETING", 1, json());
  d.applied_revision = 1;
  quiet(d.dpf_service_name);
  d.cached = cached_of(d.dpf_service_name);
  const std::string uid = d.cached->uid;
  const int before = total(), deletes = count("DELETE dpuservices");
  Outcome first = rec_->reconcile(d);
  ASSERT_EQ(first.kind, Kind::kPoll) << first.message;
  EXPECT_EQ(first.api_calls, 1);
  EXPECT_GE(first.retry_after_s.value_or(0), 60.0);  // a safety net, not a poll
  EXPECT_EQ(total(), before + 1);
  ASSERT_TRUE(simtest::wait_until([&] { return live(d.dpf_service_name).is_null(); }, 5000));
  // the watch saw it go
  d.cached = CachedDpuService{};
  d.cached->gone_uid = uid;
  const int after_delete = total();
  Outcome end = rec_->reconcile(d);
  ASSERT_EQ(end.kind, Kind::kTransition) << end.message;
  EXPECT_EQ(end.new_state, "DELETED");
  EXPECT_EQ(end.api_calls, 0);
  EXPECT_EQ(total(), after_delete);
  EXPECT_EQ(count("DELETE dpuservices"), deletes + 1);

  // a uid the watch saw go that this reconciler did not delete proves nothing: read
  ServiceWork other = work("6f1c0e4a-1d2b-4c3d-8e4f-00000000000b", "CREATING", 1, json());
  ASSERT_EQ(rec_->reconcile(other).kind, Kind::kTransition);
  ServiceWork od = work("6f1c0e4a-1d2b-4c3d-8e4f-00000000000b", "DELETING", 1, json());
  od.cached = CachedDpuService{};
  od.cached->gone_uid = "an-older-incarnation";
  const int gets = count("GET dpuservices");
  Outcome read = rec_->reconcile(od);
  EXPECT_EQ(count("GET dpuservices"), gets + 1);
  EXPECT_EQ(read.kind, Kind::kPoll) << read.message;  // it exists: deleted by the read path
  EXPECT_TRUE(simtest::wait_until([&] { return live(od.dpf_service_name).is_null(); }, 5000));
}

TEST_F(ServiceReconcilerTest, ADeleteWithAStaleCachedUidDeletesNothingItDidNotRead) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-00000000000c";
  ServiceWork w = work(id, "CREATING", 1, json());
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  ServiceWork d = work(id, "DELETING", 1, json());
  d.cached = cached_of(d.dpf_service_name);
  d.cached->uid = "00000000-0000-0000-0000-000000000000";  // an earlier object of that name
  const int deletes = count("DELETE dpuservices"), gets = count("GET dpuservices");
  Outcome o = rec_->reconcile(d);
  ASSERT_EQ(o.kind, Kind::kPoll) << o.message;
  EXPECT_TRUE(o.stale_cache);
  EXPECT_EQ(o.api_calls, 3);  // the refused DELETE, the GET, the DELETE with the read uid
  EXPECT_EQ(count("DELETE dpuservices"), deletes + 2);
  EXPECT_EQ(count("GET dpuservices"), gets + 1);
}

// Issue 26, part 2: a drift repaired from the cache is one PATCH computed from the cached shape,
// with the cached resourceVersion: keys added by hand are removed, changed values set back, no GET.
TEST_F(ServiceReconcilerTest, ADriftRepairFromTheCacheIsOnePatch) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-00000000000d";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}, {"keep", {{"x", 1}}}});
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  const std::string path = "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" +
                           std::string(kServiceNs) + "/dpuservices/" + w.dpf_service_name;
  ASSERT_EQ(sim_->m("PATCH", path,
                    R"({"spec":{"helmChart":{"values":{"a":99,"hand":{"deep":true},)"
                    R"("keep":{"y":2}}},"serviceDaemonSet":{"labels":{"by-hand":"y"}}}})",
                    "application/merge-patch+json")
                .status,
            200);
  quiet(w.dpf_service_name);
  ServiceWork ready = work(id, "READY", 1, json{{"a", 1}, {"keep", {{"x", 1}}}});
  ready.applied_revision = 1;
  ready.cached = cached_of(w.dpf_service_name);
  ASSERT_NE(ready.cached->drift_key, core::dpuservice_drift_key(ready.desired));
  const int gets = count("GET dpuservices"), patches = count("PATCH dpuservices");
  const int before = total();
  Outcome o = rec_->reconcile(ready);
  ASSERT_EQ(o.kind, Kind::kEvent) << o.message;
  EXPECT_EQ(o.reason, "drift_patched");
  EXPECT_EQ(o.api_calls, 1);
  EXPECT_FALSE(o.stale_cache);
  EXPECT_EQ(total(), before + 1);
  EXPECT_EQ(count("GET dpuservices"), gets);
  EXPECT_EQ(count("PATCH dpuservices"), patches + 1);
  const json obj = live(w.dpf_service_name);
  EXPECT_EQ(obj["spec"]["helmChart"]["values"], json({{"a", 1}, {"keep", {{"x", 1}}}}))
      << obj["spec"]["helmChart"]["values"].dump();
  EXPECT_FALSE(obj["spec"]["serviceDaemonSet"]["labels"].contains("by-hand"));
  EXPECT_EQ(core::dpuservice_drift_key(obj), core::dpuservice_drift_key(ready.desired));
  // in sync now, as the watch would show it: done, no request
  ready.cached = cached_of(w.dpf_service_name);
  const int after = total();
  EXPECT_EQ(rec_->reconcile(ready).kind, Kind::kDone);
  EXPECT_EQ(total(), after);
}

// A cache behind the object (a write after the event it holds): the PATCH meets a 409, then one
// GET and one PATCH, counted as a stale cache; an object the watch saw go is re-created with one
// POST.
TEST_F(ServiceReconcilerTest, AStaleDriftRepairReadsOnceAndAMissingObjectIsOnePost) {
  const std::string id = "6f1c0e4a-1d2b-4c3d-8e4f-00000000000e";
  ServiceWork w = work(id, "CREATING", 1, json{{"a", 1}});
  ASSERT_EQ(rec_->reconcile(w).kind, Kind::kTransition);
  const std::string path = "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/" +
                           std::string(kServiceNs) + "/dpuservices/" + w.dpf_service_name;
  ASSERT_EQ(sim_->m("PATCH", path, R"({"spec":{"helmChart":{"values":{"hand":1}}}})",
                    "application/merge-patch+json")
                .status,
            200);
  quiet(w.dpf_service_name);
  ServiceWork ready = work(id, "READY", 1, json{{"a", 1}});
  ready.applied_revision = 1;
  ready.cached = cached_of(w.dpf_service_name);
  // another write the cache has not seen (an annotation: no drift of its own)
  ASSERT_EQ(sim_->m("PATCH", path, R"({"metadata":{"annotations":{"note":"later"}}})",
                    "application/merge-patch+json")
                .status,
            200);
  quiet(w.dpf_service_name);
  const int gets = count("GET dpuservices"), before = total();
  Outcome o = rec_->reconcile(ready);
  ASSERT_EQ(o.kind, Kind::kEvent) << o.message;
  EXPECT_EQ(o.reason, "drift_patched");
  EXPECT_TRUE(o.stale_cache);
  EXPECT_EQ(o.api_calls, 3);  // the refused PATCH, the GET, the PATCH
  EXPECT_EQ(total(), before + 3);
  EXPECT_EQ(count("GET dpuservices"), gets + 1);
  EXPECT_FALSE(live(w.dpf_service_name)["spec"]["helmChart"]["values"].contains("hand"));

  // deleted by hand; the watch saw that uid go: one POST, no GET
  const std::string uid = live(w.dpf_service_name)["metadata"].value("uid", "");
  ASSERT_EQ(sim_->m("DELETE", path).status / 100, 2);
  ASSERT_TRUE(simtest::wait_until([&] { return live(w.dpf_service_name).is_null(); }, 5000));
  ready.cached = CachedDpuService{};
  ready.cached->gone_uid = uid;
  const int gets2 = count("GET dpuservices"), posts = count("POST dpuservices");
  const int before2 = total();
  Outcome back = rec_->reconcile(ready);
  ASSERT_EQ(back.kind, Kind::kEvent) << back.message;
  EXPECT_EQ(back.reason, "drift_recreated");
  EXPECT_EQ(back.api_calls, 1);
  EXPECT_EQ(total(), before2 + 1);
  EXPECT_EQ(count("GET dpuservices"), gets2);
  EXPECT_EQ(count("POST dpuservices"), posts + 1);
  EXPECT_TRUE(live(w.dpf_service_name).is_object());
}

}  // namespace
}  // namespace extsvc::reconcile
