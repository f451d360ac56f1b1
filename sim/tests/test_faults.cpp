// Fault injection, DPU-cluster reachability, request counters and the recent-request log.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "sim_harness.h"

using namespace simtest;

namespace {
class Faults : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(2, 0); }
  const std::string node0 = "/api/v1/nodes/host-0000-dpu-device-0000";
};
}  // namespace

TEST_F(Faults, StatusWithRetryAfterIsCountLimitedAndCounted) {
  sim.ctl("POST", "/counts/reset");
  Resp f = sim.ctl("POST", "/faults",
                   json{{"cluster", "management"},
                        {"verb", "LIST"},
                        {"path_regex", "dpudevices"},
                        {"action", "status"},
                        {"status", 503},
                        {"retry_after", 2},
                        {"count", 2}});
  ASSERT_EQ(f.status, 200) << f.body;
  const std::string path = "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices";
  for (int i = 0; i < 2; ++i) {
    Resp r = sim.m("GET", path);
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.header("Retry-After"), "2");
    EXPECT_EQ(r.j()["kind"], "Status");
    EXPECT_EQ(r.j()["reason"], "ServiceUnavailable");
  }
  EXPECT_EQ(sim.m("GET", path).status, 200);
  EXPECT_EQ(sim.m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpus").status, 200);
  json c = sim.ctl("GET", "/counts").j();
  EXPECT_EQ(c["management"]["LIST dpudevices"], 3);
  EXPECT_EQ(c["management"]["LIST dpus"], 1);
  EXPECT_GE(c["total"].get<int>(), 4);
  sim.ctl("POST", "/faults",
          json{{"verb", "*"}, {"action", "status"}, {"status", 429}, {"count", 1}});
  Resp r = sim.d("GET", node0);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_EQ(r.j()["details"]["retryAfterSeconds"], 1);
}

TEST_F(Faults, LatencyResetAndHang) {
  sim.ctl("POST", "/faults",
          json{{"cluster", "dpu"},
               {"verb", "GET"},
               {"action", "latency"},
               {"latency_ms", 300},
               {"count", 1}});
  auto t0 = std::chrono::steady_clock::now();
  Resp r = sim.d("GET", node0);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(r.status, 200);
  EXPECT_GE(ms, 290);
  sim.ctl("POST", "/faults",
          json{{"cluster", "dpu"}, {"verb", "GET"}, {"action", "reset"}, {"count", 1}});
  r = sim.d("GET", node0);
  EXPECT_FALSE(r.ok) << "connection must be dropped";
  EXPECT_TRUE(sim.d("GET", node0).ok);
  sim.ctl("POST", "/faults",
          json{{"cluster", "dpu"}, {"verb", "GET"}, {"action", "hang"}, {"count", 1}});
  HttpOpts o;
  o.timeout_ms = 300;
  t0 = std::chrono::steady_clock::now();
  r = sim.d("GET", node0, "", "application/json", o);
  EXPECT_FALSE(r.ok);
  sim.ctl("DELETE", "/faults");  // releases the hanging handler
  EXPECT_EQ(sim.d("GET", node0).status, 200);
}

TEST_F(Faults, ConflictOnNextWrite) {
  sim.ctl("POST", "/faults", json{{"verb", "*"}, {"action", "conflict"}, {"count", 1}});
  EXPECT_EQ(sim.d("GET", node0).status, 200) << "reads are not affected by conflict faults";
  Resp r =
      sim.d("PATCH", node0, R"({"metadata":{"labels":{"a":"b"}}})", "application/merge-patch+json");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.j()["reason"], "Conflict");
  EXPECT_EQ(r.j()["details"]["name"], "host-0000-dpu-device-0000");
  r = sim.d("PATCH", node0, R"({"metadata":{"labels":{"a":"b"}}})", "application/merge-patch+json");
  EXPECT_EQ(r.status, 200);
}

TEST_F(Faults, ProbabilityIsDeterministic) {
  auto pattern = [&] {
    sim.ctl("DELETE", "/faults");
    sim.ctl("POST", "/faults",
            json{{"cluster", "dpu"}, {"action", "status"}, {"status", 500}, {"probability", 0.5}});
    std::string out;
    for (int i = 0; i < 24; ++i) out += sim.d("GET", node0).status == 500 ? 'x' : '.';
    return out;
  };
  std::string a = pattern();
  std::string b = pattern();
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find('x'), std::string::npos);
  EXPECT_NE(a.find('.'), std::string::npos);
}

TEST_F(Faults, DpuClusterUnreachable) {
  sim.ctl("POST", "/dpu-cluster", json{{"reachable", false}});
  EXPECT_FALSE(sim.d("GET", node0).ok);
  EXPECT_EQ(sim.m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpus").status, 200);
  sim.ctl("POST", "/dpu-cluster", json{{"reachable", false}, {"mode", "503"}});
  Resp r = sim.d("GET", node0);
  EXPECT_EQ(r.status, 503);
  // Label changes do not reach the DPU cluster while it is unreachable.
  sim.m("PATCH",
        "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpudevices/"
        "dpu-device-0000",
        R"({"spec":{"cluster":{"nodeLabels":{"late":"yes"}}}})", "application/merge-patch+json");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sim.ctl("POST", "/dpu-cluster", json{{"reachable", true}});
  ASSERT_TRUE(wait_until(
      [&] { return sim.d("GET", node0).j()["metadata"]["labels"].value("late", "") == "yes"; }));
}

TEST_F(Faults, RecentRequestsShowPatchBody) {
  sim.ctl("DELETE", "/requests");
  const std::string body = R"({"metadata":{"labels":{"exact":"body"}}})";
  ASSERT_EQ(sim.d("PATCH", node0, body, "application/merge-patch+json").status, 200);
  json reqs = sim.ctl("GET", "/requests?limit=5").j()["requests"];
  ASSERT_GE(reqs.size(), 1u);
  json last = reqs.back();
  EXPECT_EQ(last["method"], "PATCH");
  EXPECT_EQ(last["cluster"], "dpu");
  EXPECT_EQ(last["path"], "/api/v1/nodes/host-0000-dpu-device-0000");
  EXPECT_EQ(last["content_type"], "application/merge-patch+json");
  EXPECT_EQ(last["body"], body);
  EXPECT_EQ(last["status"], 200);
  json state = sim.ctl("GET", "/state").j();
  EXPECT_EQ(state["dpu"]["nodes"].size(), 2u);
  EXPECT_EQ(state["management"]["dpudevices"].size(), 2u);
}

namespace {
// seconds since the Unix epoch of an IMF-fixdate Date header, -1 when it is not one
long long date_header_seconds(const std::string& v) {
  std::tm tm{};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0' || v.size() != 29) return -1;
  return static_cast<long long>(timegm(&tm));
}
long long now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

TEST_F(Faults, DateHeaderAndClockOffset) {
  // every API answer carries the server's time, as kube-apiserver's do, also an error
  Resp r = sim.m("GET", "/api/v1/namespaces/default");
  long long d = date_header_seconds(r.header("Date"));
  ASSERT_GT(d, 0) << r.header("Date");
  EXPECT_LE(std::llabs(d - now_seconds()), 2);
  r = sim.d("GET", "/api/v1/nodes/no-such-node");
  EXPECT_EQ(r.status, 404);
  EXPECT_GT(date_header_seconds(r.header("Date")), 0) << r.header("Date");
  // an API server 90 s ahead, then 3600 s behind: the header moves, both clusters
  ASSERT_EQ(sim.ctl("POST", "/clock", json{{"offset_ms", 90000}}).status, 200);
  EXPECT_EQ(sim.ctl("GET", "/clock").j()["offset_ms"], 90000);
  d = date_header_seconds(sim.m("GET", "/api/v1/namespaces/default").header("Date"));
  EXPECT_LE(std::llabs(d - now_seconds() - 90), 2);
  sim.ctl("POST", "/clock", json{{"offset_ms", -3600000}});
  d = date_header_seconds(sim.d("GET", node0).header("Date"));
  EXPECT_LE(std::llabs(d - now_seconds() + 3600), 2);
  // refused: not an integer, beyond ten years
  EXPECT_EQ(sim.ctl("POST", "/clock", json{{"offset_ms", "1s"}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/clock", json{{"offset_ms", 400000000000LL}}).status, 400);
  // POST /reset restores the host's clock
  sim.reset(2, 0);
  EXPECT_EQ(sim.ctl("GET", "/clock").j()["offset_ms"], 0);
  d = date_header_seconds(sim.m("GET", "/api/v1/namespaces/default").header("Date"));
  EXPECT_LE(std::llabs(d - now_seconds()), 2);
}
