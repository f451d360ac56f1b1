// Watch as kube-apiserver's watch cache serves it: selector transitions (ADDED / MODIFIED /
// DELETED with the previous content), resourceVersion "", "0" and N, 410 Expired for a version
// older than the (shrunk) window, bookmarks, timeoutSeconds, cuts that lose no event, LIST
// continue tokens that expire, and streams that never starve other clients.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "sim_harness.h"
#include "sim_paths.h"

using namespace simtest;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kNodes = "/api/v1/nodes";

struct Watch {
  bool ok = false;  // the response ended cleanly (terminating chunk received)
  int status = 0;
  std::vector<json> events;
  double seconds = 0;
  std::string error;
  std::vector<json> of(const std::string& type) const {
    std::vector<json> out;
    for (const auto& e : events)
      if (e["type"] == type) out.push_back(e);
    return out;
  }
};

// Streams a watch until the server ends it (or max_ms passes).
Watch watch(const std::string& base, const std::string& path, int max_ms = 10000) {
  Watch w;
  httplib::Client cli(base);
  cli.set_read_timeout(max_ms / 1000, (max_ms % 1000) * 1000);
  std::string buf;
  auto t0 = Clock::now();
  auto r = cli.Get(
      path.c_str(), httplib::Headers{},
      [&](const httplib::Response& res) {
        w.status = res.status;
        return true;
      },
      [&](const char* data, size_t len) {
        buf.append(data, len);
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
          w.events.push_back(json::parse(buf.substr(0, nl)));
          buf.erase(0, nl + 1);
        }
        return true;
      });
  w.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  w.ok = static_cast<bool>(r);
  if (!r) w.error = httplib::to_string(r.error());
  return w;
}

std::future<Watch> watch_async(const std::string& base, const std::string& path,
                               int max_ms = 10000) {
  return std::async(std::launch::async, [=] { return watch(base, path, max_ms); });
}

std::string rv_of(const json& o) {
  return o["metadata"]["resourceVersion"].get<std::string>();
}
uint64_t rvn(const std::string& s) {
  return std::stoull(s);
}

class WatchTest : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(4, 0); }

  std::string list_rv(const std::string& path) {
    return sim.d("GET", path).j()["metadata"]["resourceVersion"];
  }
  json label_node(int i, const json& labels) {
    Resp r = sim.d("PATCH", kNodes + "/" + node_name(i),
                   json{{"metadata", {{"labels", labels}}}}.dump(), "application/merge-patch+json");
    EXPECT_EQ(r.status, 200) << r.body;
    return r.j();
  }
  void label_device(int i, const std::string& k, const std::string& v) {
    char dev[32];
    snprintf(dev, sizeof dev, "dpu-device-%04d", i);
    json p{{"metadata", {{"labels", {{k, v}}}}}};
    ASSERT_EQ(sim.m("PATCH", kDevPath + dev, p.dump(), "application/merge-patch+json").status, 200);
  }
  json watches() { return sim.ctl("GET", "/watches").j(); }
};

}  // namespace

TEST_F(WatchTest, LabelSelectorTransitionsAddModifyDeleteWithPreviousContent) {
  std::string rv = list_rv(kNodes);
  auto f = watch_async(sim.dpu, kNodes + "?watch=1&labelSelector=tenant%3Dred&timeoutSeconds=2" +
                                    "&resourceVersion=" + rv);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  json a = label_node(0, {{"tenant", "red"}});                          // starts matching: ADDED
  json b = label_node(0, {{"zone", "z1"}});                             // still matching: MODIFIED
  json c = label_node(0, {{"tenant", "blue"}});                         // stops matching: DELETED
  label_node(0, {{"zone", "z2"}});                                      // matches neither: nothing
  label_node(1, {{"other", "x"}});                                      // never matches: nothing
  json d = label_node(0, {{"tenant", "red"}});                          // ADDED again
  ASSERT_EQ(sim.d("DELETE", kNodes + "/" + node_name(0)).status, 200);  // DELETED
  Watch w = f.get();
  ASSERT_EQ(w.status, 200);
  EXPECT_TRUE(w.ok) << w.error;
  ASSERT_EQ(w.events.size(), 5u) << json(w.events).dump();
  EXPECT_EQ(w.events[0]["type"], "ADDED");
  EXPECT_EQ(rv_of(w.events[0]["object"]), rv_of(a));
  EXPECT_EQ(w.events[1]["type"], "MODIFIED");
  EXPECT_EQ(w.events[1]["object"]["metadata"]["labels"]["zone"], "z1");
  // Leaving the selector: the previous content (tenant=red), the new resourceVersion.
  EXPECT_EQ(w.events[2]["type"], "DELETED");
  EXPECT_EQ(w.events[2]["object"]["metadata"]["labels"]["tenant"], "red");
  EXPECT_EQ(rv_of(w.events[2]["object"]), rv_of(c));
  EXPECT_GT(rvn(rv_of(c)), rvn(rv_of(b)));
  EXPECT_EQ(w.events[3]["type"], "ADDED");
  EXPECT_EQ(rv_of(w.events[3]["object"]), rv_of(d));
  EXPECT_EQ(w.events[4]["type"], "DELETED");
  EXPECT_EQ(w.events[4]["object"]["metadata"]["labels"]["tenant"], "red");
  EXPECT_GT(rvn(rv_of(w.events[4]["object"])), rvn(rv_of(d)));
}

TEST_F(WatchTest, FieldSelectorTransitionOnPodPhase) {
  // A pod Pending -> Running (kubelet) enters a status.phase=Running watch as ADDED.
  sim.ctl("POST", "/delays", json{{"pod_ready_ms", 300}});
  std::string rv = list_rv(kPods);
  auto running = watch_async(sim.dpu, kPods + "?watch=1&fieldSelector=status.phase%3DRunning" +
                                          "&timeoutSeconds=2&resourceVersion=" + rv);
  auto pending = watch_async(sim.dpu, kPods + "?watch=1&fieldSelector=status.phase%3DPending" +
                                          "&timeoutSeconds=2&resourceVersion=" + rv);
  json pod{{"apiVersion", "v1"},
           {"kind", "Pod"},
           {"metadata", {{"name", "p1"}}},
           {"spec", {{"nodeName", node_name(2)}, {"containers", {{{"name", "c"}}}}}}};
  ASSERT_EQ(sim.d("POST", kPods, pod.dump()).status, 201);
  Watch r = running.get(), p = pending.get();
  ASSERT_EQ(r.events.size(), 1u) << json(r.events).dump();
  EXPECT_EQ(r.events[0]["type"], "ADDED");
  EXPECT_EQ(r.events[0]["object"]["status"]["phase"], "Running");
  ASSERT_EQ(p.events.size(), 2u) << json(p.events).dump();
  EXPECT_EQ(p.events[0]["type"], "ADDED");
  EXPECT_EQ(p.events[1]["type"], "DELETED");  // left the selector by turning Running
  EXPECT_EQ(p.events[1]["object"]["status"]["phase"], "Pending");
  EXPECT_EQ(rv_of(p.events[1]["object"]), rv_of(r.events[0]["object"]));
}

TEST_F(WatchTest, ResourceVersionUnsetAndZeroSendTheCurrentStateFirst) {
  label_node(3, {{"tenant", "red"}});
  for (std::string rv : {"", "&resourceVersion=0"}) {
    auto all = watch_async(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1" + rv);
    auto sel = watch_async(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1&labelSelector=tenant" + rv);
    Watch w = all.get();
    ASSERT_EQ(w.events.size(), 4u) << rv;
    for (const auto& e : w.events) EXPECT_EQ(e["type"], "ADDED");
    Watch s1 = sel.get();
    ASSERT_EQ(s1.events.size(), 1u) << rv;
    EXPECT_EQ(s1.events[0]["object"]["metadata"]["name"], node_name(3));
  }
  // N: only what happened after N.
  std::string rv = list_rv(kNodes);
  auto f = watch_async(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1&resourceVersion=" + rv);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  label_node(2, {{"a", "b"}});
  Watch w = f.get();
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_EQ(w.events[0]["type"], "MODIFIED");
}

TEST_F(WatchTest, TooOldResourceVersionIsOneErrorEvent410WithAShrunkWindow) {
  std::string old_rv = list_rv(kNodes);
  ASSERT_EQ(sim.ctl("POST", "/watch-config", json{{"window_events", 3}}).status, 200);
  EXPECT_EQ(sim.ctl("GET", "/watch-config").j()["window_events"], 3);
  for (int i = 0; i < 5; ++i) label_node(0, {{"n", std::to_string(i)}});
  Watch w = watch(sim.dpu, kNodes + "?watch=1&resourceVersion=" + old_rv);
  EXPECT_EQ(w.status, 200);
  EXPECT_TRUE(w.ok);
  EXPECT_LT(w.seconds, 2.0);
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_EQ(w.events[0]["type"], "ERROR");
  const json& st = w.events[0]["object"];
  EXPECT_EQ(st["kind"], "Status");
  EXPECT_EQ(st["code"], 410);
  EXPECT_EQ(st["reason"], "Expired");
  std::string msg = st["message"];
  EXPECT_EQ(msg.rfind("too old resource version: " + old_rv + " (", 0), 0u) << msg;
  EXPECT_GE(watches()["expired"].get<int>(), 1);
  // The window holds the last 3 events: resuming from the third newest write works.
  std::string recent = list_rv(kNodes);
  label_node(1, {{"n", "x"}});
  Watch ok = watch(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1&resourceVersion=" + recent);
  ASSERT_EQ(ok.events.size(), 1u);
  EXPECT_EQ(ok.events[0]["type"], "MODIFIED");

  // Age: events older than window_ms leave the window.
  ASSERT_EQ(
      sim.ctl("POST", "/watch-config", json{{"window_events", 1000}, {"window_ms", 100}}).status,
      200);
  std::string before = list_rv(kNodes);
  label_node(2, {{"n", "y"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  label_node(2, {{"n", "z"}});
  Watch aged = watch(sim.dpu, kNodes + "?watch=1&resourceVersion=" + before);
  ASSERT_EQ(aged.events.size(), 1u);
  EXPECT_EQ(aged.events[0]["object"]["code"], 410);
  EXPECT_EQ(sim.ctl("POST", "/watch-config", json{{"window_ms", 0}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/watch-config", json{{"nope", 1}}).status, 400);
}

TEST_F(WatchTest, BookmarksOnlyWhenAskedAtTheIntervalAndBeforeTheTimeout) {
  ASSERT_EQ(sim.ctl("POST", "/watch-config", json{{"bookmark_ms", 300}}).status, 200);
  std::string rv = list_rv(kNodes);
  auto with = watch_async(
      sim.dpu, kNodes + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion=" + rv);
  auto without = watch_async(sim.dpu, kNodes + "?watch=1&timeoutSeconds=4&resourceVersion=" + rv);
  // Writes elsewhere (management cluster) move the resourceVersion a bookmark may carry.
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    label_device(1, "tick", std::to_string(i));
  }
  Watch w = with.get(), n = without.get();
  EXPECT_TRUE(n.events.empty()) << json(n.events).dump();
  auto bms = w.of("BOOKMARK");
  EXPECT_GE(bms.size(), 5u);  // every 300 ms until 2 s before the timeout, then that one
  EXPECT_LE(bms.size(), 10u);
  uint64_t last = 0;
  for (const auto& b : bms) {
    EXPECT_EQ(b["object"]["kind"], "Node");
    EXPECT_EQ(b["object"]["apiVersion"], "v1");
    uint64_t r = rvn(rv_of(b["object"]));
    EXPECT_GT(r, rvn(rv));
    EXPECT_GE(r, last);
    last = r;
  }
  EXPECT_GE(watches()["bookmarks_sent"].get<int>(), 5);

  // Default interval (60 s): the only bookmark comes 2 s before the timeout.
  sim.ctl("POST", "/watch-config", json{{"bookmark_ms", 60000}});
  rv = list_rv(kNodes);
  auto pre = watch_async(
      sim.dpu, kNodes + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion=" + rv);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  label_device(2, "tick", "x");
  auto t0 = Clock::now();
  Watch p = pre.get();
  ASSERT_EQ(p.events.size(), 1u) << json(p.events).dump();
  EXPECT_EQ(p.events[0]["type"], "BOOKMARK");
  EXPECT_GT(rvn(rv_of(p.events[0]["object"])), rvn(rv));
  EXPECT_GT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  // No bookmark at all with a timeout under 2 s.
  Watch shortw = watch(sim.dpu, kNodes + "?watch=1&allowWatchBookmarks=1&timeoutSeconds=1" +
                                    "&resourceVersion=" + list_rv(kNodes));
  EXPECT_TRUE(shortw.events.empty());
}

TEST_F(WatchTest, TimeoutSecondsEndsTheStreamCleanly) {
  Watch w = watch(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1&resourceVersion=" + list_rv(kNodes));
  EXPECT_EQ(w.status, 200);
  EXPECT_TRUE(w.ok) << w.error;
  EXPECT_GE(w.seconds, 0.9);
  EXPECT_LT(w.seconds, 2.5);
  EXPECT_GE(watches()["timeouts"].get<int>(), 1);
  EXPECT_EQ(watches()["open"], 0);
}

TEST_F(WatchTest, CutEndsStreamsMidFlightAndAResumeLosesNoEvent) {
  std::string rv = list_rv(kNodes);
  auto dpu_w = watch_async(sim.dpu, kNodes + "?watch=1&timeoutSeconds=30&resourceVersion=" + rv);
  auto mgmt_w = watch_async(sim.mgmt,
                            "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices?watch=1&"
                            "timeoutSeconds=5&resourceVersion=" +
                                rv);
  label_node(0, {{"before", "cut"}});
  ASSERT_TRUE(wait_until([&] { return watches()["open"] == 2; }));
  json streams = watches()["streams"];
  ASSERT_EQ(streams.size(), 2u);
  Resp cut = sim.ctl("POST", "/watch-cut", json{{"cluster", "dpu"}});
  ASSERT_EQ(cut.status, 200);
  EXPECT_EQ(cut.j()["cut"], 1);
  auto t0 = Clock::now();
  Watch w = dpu_w.get();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_FALSE(w.ok);  // dropped: no terminating chunk
  ASSERT_EQ(w.events.size(), 1u);
  std::string last = rv_of(w.events[0]["object"]);
  // Changes while nobody watched are delivered on resume from the last seen version.
  label_node(1, {{"during", "gap"}});
  label_node(2, {{"during", "gap"}});
  Watch again = watch(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1&resourceVersion=" + last);
  ASSERT_EQ(again.events.size(), 2u);
  EXPECT_EQ(again.events[0]["object"]["metadata"]["name"], node_name(1));
  EXPECT_EQ(again.events[1]["object"]["metadata"]["name"], node_name(2));
  // The management watch was not cut; "end" mode ends a stream cleanly.
  EXPECT_EQ(watches()["open"], 1);
  EXPECT_EQ(sim.ctl("POST", "/watch-cut", json{{"mode", "end"}}).j()["cut"], 1);
  Watch m = mgmt_w.get();
  EXPECT_TRUE(m.ok);
  EXPECT_GE(watches()["cuts"].get<int>(), 2);
  EXPECT_EQ(sim.ctl("POST", "/watch-cut", json{{"cluster", "x"}}).status, 400);
}

TEST_F(WatchTest, PartitionCutsDpuWatchesAtOnce) {
  auto f = watch_async(sim.dpu,
                       kNodes + "?watch=1&timeoutSeconds=30&resourceVersion=" + list_rv(kNodes));
  ASSERT_TRUE(wait_until([&] { return watches()["open"] == 1; }));
  auto t0 = Clock::now();
  sim.ctl("POST", "/dpu-cluster", json{{"reachable", false}});
  Watch w = f.get();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_FALSE(w.ok);
  EXPECT_EQ(watches()["partition_cuts"], 1);
  sim.ctl("POST", "/dpu-cluster", json{{"reachable", true}});
}

TEST_F(WatchTest, WatchGoesThroughFaultsAndTheRequestLog) {
  sim.ctl("POST", "/faults",
          json{{"cluster", "dpu"}, {"verb", "WATCH"}, {"status", 503}, {"count", 1}});
  Resp r = sim.d("GET", kNodes + "?watch=1&timeoutSeconds=1");
  EXPECT_EQ(r.status, 503);
  Watch w = watch(sim.dpu, kNodes + "?watch=1&timeoutSeconds=1");
  EXPECT_EQ(w.status, 200);
  json c = sim.ctl("GET", "/counts").j();
  EXPECT_EQ(c["dpu"]["WATCH nodes"], 2);
  json reqs = sim.ctl("GET", "/requests?limit=5").j()["requests"];
  bool seen = false;
  for (const auto& q : reqs)
    if (q["verb"] == "WATCH" && q["status"] == 200) seen = true;
  EXPECT_TRUE(seen);
}

TEST_F(WatchTest, ContinueTokensAreConsistentAndExpire) {
  // Page 1 at RV R; then a delete and a create: page 2 still shows the state at R.
  json p1 = sim.d("GET", kNodes + "?limit=2").j();
  std::string tok = p1["metadata"]["continue"];
  ASSERT_FALSE(tok.empty());
  ASSERT_EQ(sim.d("DELETE", kNodes + "/" + node_name(3)).status, 200);
  label_node(2, {{"changed", "after-page-1"}});
  json node{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "zz-new"}}}};
  ASSERT_EQ(sim.d("POST", kNodes, node.dump()).status, 201);
  json p2 = sim.d("GET", kNodes + "?limit=2&continue=" + tok).j();
  ASSERT_EQ(p2["items"].size(), 2u) << p2.dump();
  EXPECT_EQ(p2["metadata"]["resourceVersion"], p1["metadata"]["resourceVersion"]);
  EXPECT_EQ(p2["items"][0]["metadata"]["name"], node_name(2));
  EXPECT_FALSE(p2["items"][0]["metadata"]["labels"].contains("changed"));
  EXPECT_EQ(p2["items"][1]["metadata"]["name"], node_name(3));  // deleted since, still listed
  EXPECT_FALSE(p2["metadata"].contains("continue"));

  // A token older than continue_ttl_ms: 410 Expired with a token to go on inconsistently.
  sim.ctl("POST", "/watch-config", json{{"continue_ttl_ms", 200}});
  tok = sim.d("GET", kNodes + "?limit=1").j()["metadata"]["continue"];
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Resp gone = sim.d("GET", kNodes + "?limit=1&continue=" + tok);
  ASSERT_EQ(gone.status, 410);
  json st = gone.j();
  EXPECT_EQ(st["reason"], "Expired");
  EXPECT_EQ(st["code"], 410);
  EXPECT_EQ(
      st["message"].get<std::string>().rfind(
          "The provided continue parameter is too old to display a consistent list result.", 0),
      0u);
  std::string again = st["metadata"]["continue"];
  Resp rest = sim.d("GET", kNodes + "?limit=10&continue=" + again);
  ASSERT_EQ(rest.status, 200) << rest.body;
  // Everything after node 0, as it is now.
  EXPECT_EQ(rest.j()["items"].size(), sim.d("GET", kNodes).j()["items"].size() - 1);

  // A token whose resourceVersion left the window: 410 as well.
  sim.ctl("POST", "/watch-config", json{{"continue_ttl_ms", 300000}, {"window_events", 2}});
  tok = sim.d("GET", kNodes + "?limit=1").j()["metadata"]["continue"];
  for (int i = 0; i < 3; ++i) label_node(1, {{"w", std::to_string(i)}});
  EXPECT_EQ(sim.d("GET", kNodes + "?limit=1&continue=" + tok).status, 410);
  EXPECT_GE(watches()["continue_expired"].get<int>(), 2);
}

TEST_F(WatchTest, ManyOpenWatchesDoNotStarveOtherRequests) {
  // More streams than the old fixed pool of 128 threads.
  constexpr int kStreams = 150;
  std::vector<std::future<Watch>> fs;
  for (int i = 0; i < kStreams; ++i)
    fs.push_back(watch_async(
        sim.dpu, kNodes + "?watch=1&timeoutSeconds=30&resourceVersion=" + list_rv(kNodes), 30000));
  ASSERT_TRUE(wait_until([&] { return watches()["open"].get<int>() == kStreams; }, 8000));
  auto t0 = Clock::now();
  Resp r = sim.d("GET", kNodes + "/" + node_name(0));
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(r.status, 200);
  EXPECT_LT(ms, 500.0);
  label_node(0, {{"fan", "out"}});
  ASSERT_TRUE(wait_until([&] { return watches()["events_sent"].get<int>() >= kStreams; }, 5000));
  sim.ctl("POST", "/watch-cut", json{{"mode", "end"}});
  int got = 0;
  for (auto& f : fs) got += f.get().events.size() == 1 ? 1 : 0;
  EXPECT_EQ(got, kStreams);
}
