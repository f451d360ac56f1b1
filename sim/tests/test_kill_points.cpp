// Kill points: SIGKILL of the given pid on the nth matching request, before or after the request
// is applied, with the connection dropped either way.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "sim_harness.h"

extern char** environ;

using namespace simtest;

namespace {

// A process to be killed: `sleep 60`, reaped by the test.
struct Victim {
  pid_t pid = -1;
  Victim() {
    char sleep_bin[] = "sleep";
    char secs[] = "60";
    char* argv[] = {sleep_bin, secs, nullptr};
    if (posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ) != 0) pid = -1;
  }
  ~Victim() {
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // The signal that ended it (0: still running after timeout_ms).
  int wait_signal(int timeout_ms = 3000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFSIGNALED(st) ? WTERMSIG(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return 0;
  }
  bool running() { return pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0; }
};

class KillPoints : public ::testing::Test {
 protected:
  SimProcess& sim = shared_sim();
  void SetUp() override { sim.reset(2, 0); }
  void TearDown() override { sim.ctl("DELETE", "/kill-points"); }
  const std::string device0 =
      "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpudevices/"
      "dpu-device-0000";
  Resp patch_label(const std::string& v) {
    return sim.m("PATCH", device0, R"({"metadata":{"labels":{"k":")" + v + R"("}}})",
                 "application/merge-patch+json");
  }
  std::string label() { return sim.m("GET", device0).j()["metadata"]["labels"].value("k", ""); }
  json point(int i = 0) { return sim.ctl("GET", "/kill-points").j()["kill_points"][i]; }
};

}  // namespace

TEST_F(KillPoints, BeforeKillsThePidDropsTheConnectionAndAppliesNothing) {
  Victim v;
  ASSERT_GT(v.pid, 0);
  const pid_t victim = v.pid;
  Resp a = sim.ctl("POST", "/kill-points",
                   json{{"name", "t.before"},
                        {"pid", v.pid},
                        {"cluster", "management"},
                        {"verb", "PATCH"},
                        {"path_regex", "/dpudevices/dpu-device-0000$"},
                        {"when", "before"}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_FALSE(point()["fired"].get<bool>());
  Resp r = patch_label("one");
  EXPECT_FALSE(r.ok) << "the connection must be dropped, got " << r.status;
  EXPECT_EQ(v.wait_signal(), SIGKILL);
  EXPECT_EQ(label(), "") << "before: the request is not applied";
  json p = point();
  EXPECT_TRUE(p["fired"].get<bool>());
  EXPECT_EQ(p["name"], "t.before");
  EXPECT_EQ(p["seen"], 1);
  EXPECT_EQ(p["pids"], json::array({victim}));
  EXPECT_EQ(p["killed"], json::array({victim}));
  EXPECT_EQ(p["fired_request"], "PATCH " + device0);
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(p["fired_at"].get<double>(), now, 10.0);
  // fired once: the next matching request goes through
  EXPECT_EQ(patch_label("two").status, 200);
  EXPECT_EQ(label(), "two");
}

TEST_F(KillPoints, AfterAppliesTheRequestThenKillsAndNeverAnswers) {
  Victim v;
  ASSERT_GT(v.pid, 0);
  ASSERT_EQ(sim.ctl("POST", "/kill-points",
                    json{{"pid", v.pid},
                         {"verb", "PATCH"},
                         {"path_regex", "dpu-device-0000"},
                         {"when", "after"}})
                .status,
            200);
  Resp r = patch_label("applied");
  EXPECT_FALSE(r.ok) << "no response may reach the client, got " << r.status;
  EXPECT_EQ(v.wait_signal(), SIGKILL);
  EXPECT_EQ(label(), "applied") << "after: the write happened";
  json reqs = sim.ctl("GET", "/requests?limit=50").j()["requests"];
  bool logged = false;
  for (const auto& q : reqs)
    if (q["method"] == "PATCH" && q.value("fault", "").rfind("kill-after#", 0) == 0) logged = true;
  EXPECT_TRUE(logged) << reqs.dump();
}

TEST_F(KillPoints, NthMatchingRequestOnlyAndFiltersAreHonoured) {
  Victim v;
  ASSERT_GT(v.pid, 0);
  ASSERT_EQ(sim.ctl("POST", "/kill-points",
                    json{{"pid", v.pid},
                         {"cluster", "management"},
                         {"verb", "PATCH"},
                         {"path_regex", "dpu-device-0000"},
                         {"nth", 3}})
                .status,
            200);
  EXPECT_EQ(sim.m("GET", device0).status, 200);  // other verb: not counted
  EXPECT_EQ(sim.d("PATCH", "/api/v1/nodes/host-0000-dpu-device-0000",
                  R"({"metadata":{"labels":{"x":"y"}}})", "application/merge-patch+json")
                .status,
            200);  // other cluster and path: not counted
  EXPECT_EQ(patch_label("1").status, 200);
  EXPECT_EQ(patch_label("2").status, 200);
  EXPECT_EQ(point()["seen"], 2);
  EXPECT_TRUE(v.running());
  EXPECT_FALSE(patch_label("3").ok);
  EXPECT_EQ(v.wait_signal(), SIGKILL);
  EXPECT_EQ(label(), "2");
  EXPECT_EQ(point()["seen"], 3);
}

TEST_F(KillPoints, RequestsAnsweredByAFaultAreNotCounted) {
  Victim v;
  ASSERT_GT(v.pid, 0);
  sim.ctl("POST", "/faults",
          json{{"verb", "PATCH"}, {"action", "status"}, {"status", 503}, {"count", 1}});
  sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"verb", "PATCH"}});
  EXPECT_EQ(patch_label("x").status, 503);
  EXPECT_TRUE(v.running());
  EXPECT_EQ(point()["seen"], 0);
  EXPECT_FALSE(patch_label("y").ok);
  EXPECT_EQ(v.wait_signal(), SIGKILL);
}

TEST_F(KillPoints, BadSpecsAreRefusedAndDeleteAndResetClear) {
  Victim v;
  ASSERT_GT(v.pid, 0);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"verb", "PATCH"}}).status, 400);  // no pid
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", 1}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", sim.pid}}).status, 400);  // dpfsim
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", "12"}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"when", "during"}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"nth", 0}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"verb", "FETCH"}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"path_regex", "("}}).status, 400);
  EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"cluster", "x"}}).status, 400);
  {
    Victim gone;
    pid_t p = gone.pid;
    kill(p, SIGKILL);
    EXPECT_EQ(gone.wait_signal(), SIGKILL);
    EXPECT_EQ(sim.ctl("POST", "/kill-points", json{{"pid", p}}).status, 400) << "no such process";
  }
  EXPECT_EQ(sim.ctl("GET", "/kill-points").j()["kill_points"].size(), 0u);

  Resp a = sim.ctl("POST", "/kill-points",
                   json::array({json{{"pid", v.pid}, {"verb", "PUT"}},
                                json{{"pids", json::array({v.pid})}, {"verb", "DELETE"}}}));
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.j()["id"].size(), 2u);
  EXPECT_EQ(sim.ctl("DELETE", "/kill-points/" + a.j()["id"][0].dump()).status, 200);
  EXPECT_EQ(sim.ctl("DELETE", "/kill-points/" + a.j()["id"][0].dump()).status, 404);
  EXPECT_EQ(sim.ctl("GET", "/kill-points").j()["kill_points"].size(), 1u);
  EXPECT_EQ(sim.ctl("DELETE", "/kill-points").status, 200);
  EXPECT_EQ(sim.ctl("GET", "/kill-points").j()["kill_points"].size(), 0u);
  sim.ctl("POST", "/kill-points", json{{"pid", v.pid}, {"verb", "PATCH"}});
  sim.reset(2, 0);
  EXPECT_EQ(sim.ctl("GET", "/kill-points").j()["kill_points"].size(), 0u);
  EXPECT_EQ(patch_label("safe").status, 200);
  EXPECT_TRUE(v.running());
}
