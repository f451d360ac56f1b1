// The worker's informers (issue 11) against a dpfsim child process, without PostgreSQL: LIST
// then WATCH, what wakes and what does not, placement passes that read the caches instead of
// the API, a watch that ends and resumes from its resourceVersion, and a re-list on request.
#include "controller/cluster_cache.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "controller/cache_observer.hpp"
#include "controller/resync.hpp"
#include "controller/runtime.hpp"
#include "core/dpuservice_render.hpp"
#include "core/drift_key.hpp"
#include "core/drift_shape.hpp"
#include "core/helm_chart_data.hpp"
#include "core/identity.hpp"
#include "core/merge_patch.hpp"
#include "dpu_fixture.hpp"
#include "kube/client.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/service_reconciler.hpp"
#include "release_pods.hpp"
#include "shared_sim.hpp"
#include "sim_clients.hpp"
#include "sim_harness.h"

namespace extsvc::controller {
namespace {

using nlohmann::json;
using testfixture::device;
using testfixture::kNs;
using testfixture::kVersion;
using testfixture::node;

constexpr const char* kCacheId = "7a2d1f5b-2e3c-4d4e-9f50-000000000002";

std::string device_path(int i) {
  return "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/" + std::string(kNs) +
         "/dpudevices/" + device(i);
}

reconcile::DpuWork cache_work(int i, bool wanted) {
  return testfixture::dpu_work(i, wanted, kCacheId);
}

class ClusterCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sim_ = &testfixture::shared_reconcile_sim(); }
  static void TearDownTestSuite() { sim_ = nullptr; }

  void SetUp() override {
    sim_->reset(3, 0);
    sim_->ctl("DELETE", "/faults");
    sim_->ctl("DELETE", "/charts");
    auto clients = testfixture::sim_clients(*sim_);
    mgmt_ = std::move(clients.mgmt);
    dpu_ = std::move(clients.dpu);
  }
  void TearDown() override { cache_.reset(); }

  void start(int watch_timeout_s = 300) {
    CacheSettings s;
    s.ns = kNs;
    s.watch_timeout_s = watch_timeout_s;
    cache_ = std::make_unique<ClusterCache>(*mgmt_, dpu_.get(), s);
    ASSERT_TRUE(pump_until([&] { return cache_->management_synced() && cache_->dpu_synced(); }));
    // DPF's DPUDevice controller writes status.observedGeneration (and its finalizer) a moment
    // after the reset: a pass decided on the version before that write meets 409 by design (the
    // worker retries it). The tests start from DPUDevices DPF is done with, as cached.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(device_settled(i)) << device(i);
  }

  bool device_settled(int i) {
    return pump_until([&] {
      const json d = sim_->m("GET", device_path(i)).j();
      const json* st = d.is_object() && d.contains("status") ? &d["status"] : nullptr;
      if (st == nullptr || !st->contains("observedGeneration") ||
          (*st)["observedGeneration"] != d["metadata"].value("generation", 1LL))
        return false;
      const DeviceFacts* cached = cache_->device(device(i));
      return cached != nullptr &&
             cached->resource_version == d["metadata"].value("resourceVersion", "");
    });
  }

  // Pumps the cache (as the worker loop does) until pred holds.
  bool pump_until(const std::function<bool()>& pred, int ms = 10000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      cache_->pump();
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Pumps for `ms`, collecting what woke.
  Dirty collect(int ms) {
    Dirty all;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      cache_->pump();
      Dirty d = cache_->take_dirty();
      all.devices.merge(d.devices);
      all.nodes.merge(d.nodes);
      all.services.merge(d.services);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return all;
  }

  void create_service() {
    ASSERT_EQ(testfixture::create_demo_service(*mgmt_, kCacheId), "dpuservice_created");
  }

  static simtest::SimProcess* sim_;
  std::unique_ptr<kube::Client> mgmt_, dpu_;
  std::unique_ptr<ClusterCache> cache_;
};

simtest::SimProcess* ClusterCacheTest::sim_ = nullptr;

TEST_F(ClusterCacheTest, ListsThenWatchesAndWakesOnlyWhatNicoReads) {
  start();
  Dirty first = cache_->take_dirty();  // the first list: everything is new
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(first.devices.count(device(i))) << device(i);
    EXPECT_TRUE(first.nodes.count(node(i))) << node(i);
  }
  // once per fresh cache: a DELETING service whose object went before this list has no event
  EXPECT_TRUE(first.every_deleting);
  EXPECT_FALSE(cache_->take_dirty().every_deleting);
  const std::string key = "nico/extsvc-test0000000000000000";
  // a NICo label on DPUDevice 1: its device wakes, and its Node once DPF copied the label
  ASSERT_EQ(sim_->m("PATCH", device_path(1),
                    json{{"spec", {{"cluster", {{"nodeLabels", {{key, "enabled"}}}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  // DPF's three hops: DPUDevice -> DPU -> Node, and the DPU walks back through its phases to
  // Ready, every condition True, after the Node was labelled (each phase or condition change of a
  // DPU carrying a NICo key wakes its device: the PENDING message names the phase). The quiet part
  // below starts once DPF is done.
  Dirty woke;
  ASSERT_TRUE(pump_until([&] {
    Dirty d = cache_->take_dirty();
    woke.devices.merge(d.devices);
    woke.nodes.merge(d.nodes);
    const DeviceFacts* dev = cache_->device(device(1));
    const NodeFacts* n = cache_->node(node(1));
    // DPF's DPU controller walks the DPU back to Ready after the Node hop; each phase of a DPU
    // that carries a NICo key wakes its device (the PENDING message names it), so the quiet
    // window below starts once the walk is over; and the device's own event comes on another
    // stream than the DPU object's and the Node's, in no fixed order
    const core::DpuObjectFacts* o = cache_->dpu_object(node(1));
    return woke.devices.count(device(1)) && dev != nullptr && dev->labels.count(key) &&
           n != nullptr && n->labels.count(key) && o != nullptr && o->labels.count(key) &&
           o->phase == "Ready" && o->condition.empty();
  }));
  EXPECT_EQ(woke.devices, std::set<std::string>{device(1)});
  EXPECT_TRUE(woke.nodes.count(node(1)));
  EXPECT_FALSE(woke.nodes.count(node(0)));
  EXPECT_EQ(cache_->device(device(1))->labels.at(key), "enabled");
  // labels that are not NICo's change nothing NICo reads: nothing wakes
  const auto events_before = cache_->informers()[0].stats.events;
  ASSERT_EQ(sim_->m("PATCH", device_path(2),
                    json{{"spec", {{"cluster", {{"nodeLabels", {{"team", "blue"}}}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  ASSERT_EQ(sim_->d("PATCH", "/api/v1/nodes/" + node(0),
                    json{{"metadata", {{"labels", {{"rack", "r7"}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  const Dirty quiet = collect(1500);
  EXPECT_GT(cache_->informers()[0].stats.events, events_before);  // the events did arrive
  EXPECT_TRUE(quiet.devices.empty()) << *quiet.devices.begin();
  EXPECT_FALSE(quiet.nodes.count(node(0)));
  for (const auto& i : cache_->informers()) {
    EXPECT_EQ(i.stats.lists, 1u) << i.name;  // one LIST each, then the watch
    EXPECT_TRUE(i.current) << i.name;
  }
}

TEST_F(ClusterCacheTest, PlacementFromTheCacheWritesOnceAndReadsNothing) {
  create_service();
  start();
  (void)cache_->take_dirty();
  const auto requests_before = mgmt_->stats().requests + dpu_->stats().requests;
  auto pass = [&](bool wanted) {
    reconcile::DpuReconciler rec(*mgmt_, kNs, std::make_unique<CacheObserver>(*cache_));
    return rec.reconcile(cache_work(0, wanted));
  };
  // DPF's DPUDevice controller writes the object too (status, finalizer): a patch decided from an
  // older cached version meets 409 and is a retry, never an ERROR; the next pass patches
  reconcile::DpuOutcome o;
  uint64_t conflicts = 0;
  ASSERT_TRUE(pump_until([&] {
    o = pass(true);
    EXPECT_EQ(o.api_calls, 1) << o.message;  // the label patch, no read
    if (o.retry) {
      EXPECT_STREQ(o.retry_reason, "conflict") << o.message;
      ++conflicts;
    }
    return o.patched;
  }));
  EXPECT_TRUE(o.watched);
  // event-driven: a pass whenever the caches say DPU 0 changed, until RUNNING
  int passes = 1;
  ASSERT_TRUE(pump_until(
      [&] {
        Dirty d = cache_->take_dirty();
        if (!d.devices.count(device(0)) && !d.nodes.count(node(0))) return false;
        o = pass(true);
        ++passes;
        EXPECT_FALSE(o.patched);
        EXPECT_EQ(o.api_calls, 0);
        return !o.results.empty() && o.results.front().state == "RUNNING";
      },
      15000));
  EXPECT_EQ(o.results.front().message.find("Ready pod of revision 1"), 0u);
  // the whole attach made exactly one request, the patch, plus one per patch refused with 409
  // (the watches are not calls of a pass)
  EXPECT_EQ(mgmt_->stats().requests + dpu_->stats().requests - requests_before, 1u + conflicts);
  // a steady pass reads and writes nothing
  o = pass(true);
  EXPECT_EQ(o.api_calls, 0);
  EXPECT_EQ(o.results.front().state, "RUNNING");
  // detach: one patch, then TERMINATED once the pod is gone
  o = pass(false);
  EXPECT_TRUE(o.patched);
  ASSERT_TRUE(pump_until(
      [&] {
        (void)cache_->take_dirty();
        o = pass(false);
        return !o.results.empty() && o.results.front().state == "TERMINATED";
      },
      15000));
  EXPECT_LE(passes, 12);
}

TEST_F(ClusterCacheTest, AWatchThatEndsResumesFromItsResourceVersionWithoutAList) {
  start(/*watch_timeout_s=*/1);  // the server ends each watch after 1-2 s
  (void)cache_->take_dirty();
  ASSERT_TRUE(pump_until([&] { return cache_->informers()[2].stats.watches >= 3; }, 10000));
  const std::string key = "nico/extsvc-resume000000000000000";
  ASSERT_EQ(sim_->m("PATCH", device_path(0),
                    json{{"spec", {{"cluster", {{"nodeLabels", {{key, "enabled"}}}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  ASSERT_TRUE(pump_until([&] {
    const NodeFacts* n = cache_->node(node(0));
    return n != nullptr && n->labels.count(key);
  }));
  for (const auto& i : cache_->informers()) EXPECT_EQ(i.stats.lists, 1u) << i.name;
}

TEST_F(ClusterCacheTest, ARelistOnRequestAndAfter410DropsWhatIsGone) {
  create_service();
  start();
  const std::string name = core::dpf_service_name(kCacheId, kVersion);
  ASSERT_TRUE(cache_->services_by_name().count(name));
  cache_->request_relist();
  ASSERT_TRUE(pump_until([&] { return cache_->relist_done(); }));
  for (const auto& i : cache_->informers()) EXPECT_EQ(i.stats.lists, 2u) << i.name;
  ASSERT_TRUE(cache_->services_by_name().count(name));
  EXPECT_EQ(cache_->services_by_name().at(name).service_id, kCacheId);
  // The watch is cut and the API server keeps only one event: the DPUService deleted meanwhile
  // is never seen as an event; resuming answers 410, the informer lists again, and the list's
  // end drops what it did not contain.
  ASSERT_EQ(sim_->ctl("POST", "/watch-config", json{{"window_events", 1}}).status, 200);
  ASSERT_EQ(sim_->ctl("POST", "/watch-cut", json{{"cluster", "management"}}).status, 200);
  ASSERT_EQ(sim_->m("DELETE", simtest::dpuservice_path(name)).status, 200);
  simtest::wait_until([&] { return sim_->m("GET", simtest::dpuservice_path(name)).status == 404; });
  ASSERT_TRUE(pump_until([&] { return !cache_->services_by_name().count(name); }, 15000));
  const auto services = cache_->informers()[1];
  EXPECT_EQ(services.name, "dpuservices");
  EXPECT_GE(services.stats.expired, 1u);
  EXPECT_EQ(services.stats.lists, 3u);
  EXPECT_TRUE(cache_->take_dirty().services.count(kCacheId));  // and its drift check is due
}

// A DPUService whose service id label is no UUID (someone else's, or edited by hand) names no
// service of ours: it wakes nothing. Published, it failed every publication at the uuid[] cast.
TEST_F(ClusterCacheTest, AServiceIdLabelThatIsNoUuidWakesNothing) {
  start();
  collect(300);
  const json foreign = {{"apiVersion", "svc.dpu.nvidia.com/v1alpha1"},
                        {"kind", "DPUService"},
                        {"metadata",
                         {{"name", "not-ours"},
                          {"namespace", kNs},
                          {"labels", {{std::string(core::kOwnerIdLabel), "someone-else"}}}}},
                        {"spec",
                         {{"deployInCluster", false},
                          {"security", {{"privileged", false}}},
                          {"helmChart",
                           {{"source",
                             {{"repoURL", "https://other.example.com"},
                              {"chart", "theirs"},
                              {"version", "9.9.9"}}}}}}}};
  ASSERT_EQ(sim_->m("POST", simtest::dpuservice_path(), foreign.dump()).status, 201);
  ASSERT_TRUE(pump_until([&] { return cache_->services_by_name().count("not-ours") == 1; }));
  const Dirty d = cache_->take_dirty();
  EXPECT_TRUE(d.services.empty()) << *d.services.begin();
  EXPECT_TRUE(d.dpf.empty());
  EXPECT_TRUE(d.context.empty());
}

// Issue 26: an outage is the time the API server did not answer, not the re-list after it. A
// DPU cluster whose Node list takes 6 s after a 410 (25,000 Nodes take about that) changed
// nothing, and wakes nothing; once it stopped answering for 6 s, every Node counts as changed.
TEST_F(ClusterCacheTest, AnOutageIsTheTimeWithoutAnswersNotTheReListAfterIt) {
  // the worker's default extsvc.http_timeout (10 s), so that the slow list below is answered
  kube::ClusterConfig slow_ok = testfixture::sim_cluster(*sim_, true);
  slow_ok.timeout_ms = 10000;
  dpu_ = std::make_unique<kube::Client>(slow_ok);
  start();
  ASSERT_TRUE(pump_until([&] { return cache_->dpu_current(); }));
  collect(300);  // what the start woke
  auto nodes_listed = [&] {
    for (const auto& i : cache_->informers())
      if (i.name == "nodes") return i.stats.lists;
    return uint64_t{0};
  };
  const uint64_t lists0 = nodes_listed();
  // the cut fails the streams (a backoff); the Nodes' watch then meets 410, and its LIST 6 s
  ASSERT_EQ(sim_->ctl("POST", "/faults",
                      json{{"cluster", "dpu"},
                           {"verb", "WATCH"},
                           {"path_regex", "/nodes$"},
                           {"status", 410},
                           {"count", 1}})
                .status,
            200);
  ASSERT_EQ(sim_->ctl("POST", "/faults",
                      json{{"cluster", "dpu"},
                           {"verb", "LIST"},
                           {"path_regex", "/nodes$"},
                           {"action", "latency"},
                           {"latency_ms", 6000},
                           {"count", 1}})
                .status,
            200);
  ASSERT_EQ(sim_->ctl("POST", "/watch-cut", json{{"cluster", "dpu"}}).status, 200);
  ASSERT_TRUE(pump_until([&] { return nodes_listed() > lists0 && cache_->dpu_current(); }, 20000));
  EXPECT_TRUE(collect(300).nodes.empty()) << "a slow re-list woke every Node";
  // the DPU cluster unreachable for 6 s: an outage; every Node is derived again once current
  sim_->ctl("DELETE", "/faults");
  ASSERT_EQ(sim_->ctl("POST", "/dpu-cluster", json{{"reachable", false}}).status, 200);
  ASSERT_TRUE(pump_until([&] { return !cache_->dpu_current(); }));
  collect(6000);
  ASSERT_EQ(sim_->ctl("POST", "/dpu-cluster", json{{"reachable", true}}).status, 200);
  Dirty woke;
  ASSERT_TRUE(pump_until(
      [&] {
        Dirty d = cache_->take_dirty();
        woke.nodes.merge(d.nodes);
        return cache_->dpu_current() && woke.nodes.size() == 3;
      },
      30000))
      << woke.nodes.size() << " Nodes woke after the outage";
}

// Bookmarks move the resourceVersion a watch resumes from; an expired continue token makes the
// list start over in one page (client-go's FullListIfExpired), which cannot expire again.
TEST_F(ClusterCacheTest, BookmarksAndAnExpiredContinueToken) {
  sim_->reset(1200, 0);  // three pages of 500 Nodes and DPUDevices
  ASSERT_EQ(
      sim_->ctl("POST", "/watch-config", json{{"bookmark_ms", 200}, {"continue_ttl_ms", 1}}).status,
      200);
  start();
  EXPECT_EQ(cache_->informers()[2].objects, 1200u);  // nodes, complete
  const auto nodes = cache_->informers()[2];
  EXPECT_GE(nodes.stats.expired, 1u);  // the paged list's second page was refused
  EXPECT_EQ(nodes.stats.lists, 1u);
  // a bookmark carries a newer resourceVersion than the watch started from (cache_watcher.go):
  // one write anywhere moves it for every resource
  ASSERT_EQ(sim_->d("PATCH", "/api/v1/nodes/" + node(0),
                    json{{"metadata", {{"labels", {{"rack", "r1"}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  const auto bookmarks_before = cache_->informers()[0].stats.bookmarks;
  // every informer gets bookmarks, and the first one a new bookmark after the write (start()
  // may have pumped long enough for the first bookmarks to arrive already)
  ASSERT_TRUE(pump_until(
      [&] {
        for (const auto& i : cache_->informers())
          if (i.stats.bookmarks == 0) return false;
        return cache_->informers()[0].stats.bookmarks > bookmarks_before;
      },
      5000))
      <<
      [&] {
        std::string out;
        for (const auto& i : cache_->informers())
          out += i.name + "=" + std::to_string(i.stats.bookmarks) + "/" +
                 std::to_string(i.stats.watches) + " ";
        return out;
      }()
      << "(dpudevices had " << bookmarks_before << " before the write)";
  sim_->reset(3, 0);
}

// The drift check against the cache (drift keys) finds nothing for a DPUService exactly as
// rendered, and finds a hand edit of an owned field: a false drift costs a GET per service per
// event and went unnoticed once (a signed/unsigned byte comparison of the keys).
TEST_F(ClusterCacheTest, TheDriftCheckFromTheCacheSeesAHandEditAndNothingElse) {
  create_service();
  Settings st;
  st.management.server = sim_->mgmt;
  st.management.ca_file = sim_->ca_file;
  st.dpu.server = sim_->dpu;
  st.dpu.ca_file = sim_->ca_file;
  st.ns = kNs;
  Runtime rt(st, Hooks{});
  ASSERT_TRUE(rt.configured()) << rt.config_error();
  rt.start_watching();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!rt.cache()->management_synced() && std::chrono::steady_clock::now() < end) {
    rt.cache()->pump();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(rt.cache()->management_synced());
  (void)rt.cache()->take_dirty();  // the first list's
  const json cache_work = {
      {"service_id", kCacheId},
      {"lifecycle_state", "READY"},
      {"deployment_scope", "INSTANCE_DPUS"},
      {"dpf_service_name", core::dpf_service_name(kCacheId, kVersion)},
      {"attachable_version", kVersion},
      {"desired_revision", 1},
      {"applied_revision", 1},
      {"attempts", 0},
      {"placement_clear", true},
      {"namespace", kNs},
      {"helm_data", json::parse(core::validate_helm_chart_data(
                                    R"({"repoURL":"https://charts.example.com/stable",)"
                                    R"("chartName":"demo-agent","chartVersion":"1.2.3",)"
                                    R"("security":{"privileged":false}})")
                                    .dump())}};
  const std::vector<SnapshotRow> rows = {{kCacheId, cache_work.dump()}};
  ResyncResult r = check_changed(rt, rows, {kCacheId}, {});
  EXPECT_TRUE(r.listed);
  EXPECT_TRUE(r.drifted.empty()) << r.drifted.front().second;
  r = resync(rt, rows, {core::dpf_service_name(kCacheId, kVersion)});
  EXPECT_TRUE(r.drifted.empty());
  EXPECT_TRUE(r.orphans.empty());
  // a hand edit of the values: seen through the watch, drift
  const std::string name = core::dpf_service_name(kCacheId, kVersion);
  ASSERT_EQ(sim_->m("PATCH", simtest::dpuservice_path(name),
                    json{{"spec", {{"helmChart", {{"values", {{"v", 9}}}}}}}}.dump(),
                    "application/merge-patch+json")
                .status,
            200);
  bool seen = false;
  const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!seen && std::chrono::steady_clock::now() < end2) {
    rt.cache()->pump();
    seen = rt.cache()->take_dirty().services.count(kCacheId) > 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(seen);
  r = check_changed(rt, rows, {kCacheId}, {});
  ASSERT_EQ(r.drifted.size(), 1u);
  EXPECT_EQ(r.drifted.front().first, kCacheId);
  // issue 26, part 2: the cache's shape of the edited object gives the repair's merge patch
  // (the hand-set key nulled), and that patch applied to the live object ends the drift
  const json desired = core::render_dpuservice(kCacheId, kVersion, 1, cache_work["helm_data"], kNs);
  const reconcile::CachedDpuService cached = rt.cache()->dpuservice(name);
  ASSERT_TRUE(cached.present);
  const auto patch = core::dpuservice_patch_from_shape(cached.drift_shape, desired);
  ASSERT_TRUE(patch.has_value());
  EXPECT_TRUE(patch->at("spec").at("helmChart").at("values").is_null()) << patch->dump();
  const json live = sim_->m("GET", simtest::dpuservice_path(name)).j();
  EXPECT_EQ(core::dpuservice_drift_key(core::apply_merge_patch(live, *patch)),
            core::dpuservice_drift_key(desired));
}

// Issue 23, part 2, from the watch caches: a chart that drops the contract's labels and
// annotations. Its pods are kept by the (unselected, every-namespace) pod informer and attributed
// through the DaemonSet informer (Argo's tracking-id); they wake their DPU, the pass names the
// contract, and a detach is TERMINATED only once every pod of the release left the Node.
TEST_F(ClusterCacheTest, AChartThatDropsTheLabelsIsFoundThroughArgosTrackingAndHoldsTheDetach) {
  ASSERT_EQ(sim_->ctl("POST", "/charts",
                      json{{"chart", "demo-agent"},
                           {"ignores_labels", true},
                           {"ignores_annotations", true}})
                .status,
            200);
  create_service();
  start();
  const std::string release = core::dpf_service_name(kCacheId, kVersion);
  auto pass = [&](bool wanted) {
    reconcile::DpuReconciler rec(*mgmt_, kNs, std::make_unique<CacheObserver>(*cache_));
    return rec.reconcile(cache_work(0, wanted));
  };
  // a patch decided from an older cached version meets 409 (DPF's DPUDevice controller wrote the
  // object meanwhile): a retry; the next pass patches
  reconcile::DpuOutcome o;
  ASSERT_TRUE(pump_until([&] {
    o = pass(true);
    if (o.retry) {
      EXPECT_STREQ(o.retry_reason, "conflict") << o.message;
    }
    return o.patched;
  }));
  bool woke = false;
  ASSERT_TRUE(pump_until(
      [&] {
        Dirty d = cache_->take_dirty();
        if (!d.devices.count(device(0)) && !d.nodes.count(node(0))) return false;
        woke = woke || !testfixture::release_pods_on(*sim_, release, node(0)).empty();
        o = pass(true);
        EXPECT_EQ(o.api_calls, 0) << o.message << " " << o.observation.dump();
        return !o.results.empty() &&
               o.results.front().message.find(
                   "chart does not propagate "
                   "serviceDaemonSet.labels/annotations") != std::string::npos;
      },
      20000))
      << (o.results.empty() ? "" : o.results.front().message);
  EXPECT_TRUE(woke);
  EXPECT_EQ(o.results.front().state, "PENDING");
  sim_->ctl("POST", "/delays", json{{"pod_termination_ms", 4000}});
  bool counted = false;
  ASSERT_TRUE(pump_until(
      [&] {
        (void)cache_->take_dirty();
        const bool before = !testfixture::release_pods_on(*sim_, release, node(0)).empty();
        o = pass(false);
        cache_->pump();
        const bool after = !testfixture::release_pods_on(*sim_, release, node(0)).empty();
        if (o.results.empty()) return false;
        if (o.results.front().state == "TERMINATED") {
          // read after the pass: a pod still there was there when the pass concluded (the cache
          // may lag the server, never lead it)
          EXPECT_FALSE(after) << "TERMINATED while a pod of the release was on the Node";
          return true;
        }
        if (before && after &&
            o.results.front().message.find("found through Argo's tracking") != std::string::npos)
          counted = true;
        return false;
      },
      30000));
  EXPECT_TRUE(counted);
}

}  // namespace
}  // namespace extsvc::controller
