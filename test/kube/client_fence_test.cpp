// The write fence at the moment a write leaves (issue 25): a lease lost while a write waited for
// the client's token bucket must stop it, although the caller's fence said yes before the call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "client_test_support.hpp"
#include "kube/client.hpp"

namespace extsvc::kube {
namespace {

using test::http_config;
using test::TestServer;

struct Counting {
  TestServer s;
  std::mutex mu;
  int gets = 0, patches = 0;
  Counting() {
    s.srv().Get("/x", [&](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      ++gets;
      res.set_content("{}", "application/json");
    });
    s.srv().Patch("/x", [&](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      ++patches;
      res.set_content("{}", "application/json");
    });
    s.start();
  }
};

TEST(KubeClientFence, AWriteThatWaitedForTheBucketPastTheFenceIsNotSent) {
  Counting server;
  auto cfg = http_config(server.s);
  cfg.qps = 2;  // one request per 500 ms once the burst is spent
  cfg.burst = 1;
  Client c(cfg);
  std::atomic<bool> lease{true};
  std::atomic<int> asked{0};
  c.budget = Budget().with_fence([&] {
    ++asked;
    return lease.load();
  });
  ASSERT_TRUE(c.merge_patch("/x", nlohmann::json{{"a", 1}}).ok());  // spends the burst
  EXPECT_EQ(asked.load(), 1);
  // the caller's own fence would say yes now; the lease is lost while the call waits ~500 ms
  std::thread loser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    lease = false;
  });
  const Result r = c.merge_patch("/x", nlohmann::json{{"a", 2}});
  loser.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "Fenced");
  EXPECT_NE(r.error().message.find("not sent"), std::string::npos) << r.error().message;
  EXPECT_EQ(c.stats().fenced, 1u);
  {
    std::lock_guard<std::mutex> lock(server.mu);
    EXPECT_EQ(server.patches, 1);  // the second PATCH never reached the server
  }
  // reads are not writes: a GET goes out with the fence closed, and does not ask it
  const int before = asked.load();
  EXPECT_TRUE(c.get("/x").ok());
  EXPECT_EQ(asked.load(), before);
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.gets, 1);
}

TEST(KubeClientFence, AThrowingFenceSendsNothing) {
  Counting server;
  Client c(http_config(server.s));
  c.budget = Budget().with_fence([]() -> bool { throw std::runtime_error("fence unreadable"); });
  const Result r = c.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "Fenced");
  std::lock_guard<std::mutex> lock(server.mu);
  EXPECT_EQ(server.patches, 0);
}

}  // namespace
}  // namespace extsvc::kube
