// The synchronous calls run as transfers on a Multi (issue 24, part 4.3): a watch on the same
// multi keeps receiving while a write is in flight, and a stop ends a slow request within a
// second, whether the budget's wait is the default poll(2) or a hook of the host's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "client_test_support.hpp"
#include "kube/budget.hpp"
#include "kube/client.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {
namespace {

using namespace std::chrono_literals;
using test::http_config;
using test::TestServer;

// What the server's handler threads and the test wait for.
struct Signals {
  std::mutex mu;
  std::condition_variable cv;
  bool patch_started = false;
  bool event_sent = false;
  bool release = false;  // the test is over: every handler returns
  template <typename Pred>
  bool wait_for(std::chrono::milliseconds d, Pred p) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, d, p);
  }
  void set(bool Signals::*flag) {
    {
      std::lock_guard<std::mutex> lock(mu);
      this->*flag = true;
    }
    cv.notify_all();
  }
};

TEST(KubeClientMulti, AWatchOnTheSameMultiReceivesWhileAWriteIsInFlight) {
  Signals sig;  // outlives the server, whose handlers use it
  TestServer s;
  s.srv().Get("/watch", [&](const httplib::Request&, httplib::Response& res) {
    // octet-stream: the test server would gzip JSON and hold the lines back
    res.set_chunked_content_provider(
        "application/octet-stream", [&](size_t, httplib::DataSink& sink) {
          const std::string hello = R"({"type":"BOOKMARK"})"
                                    "\n";
          sink.write(hello.data(), hello.size());
          // the event leaves only once the write is being served
          if (sig.wait_for(3000ms, [&] { return sig.patch_started || sig.release; })) {
            const std::string event = R"({"type":"ADDED","object":{"n":1}})"
                                      "\n";
            sink.write(event.data(), event.size());
            sig.set(&Signals::event_sent);
          }
          sig.wait_for(5000ms, [&] { return sig.release; });
          sink.done();
          return true;
        });
  });
  s.srv().Patch("/x", [&](const httplib::Request&, httplib::Response& res) {
    sig.set(&Signals::patch_started);
    // answers only after the watch event went out, and some time after
    sig.wait_for(3000ms, [&] { return sig.event_sent; });
    std::this_thread::sleep_for(200ms);
    res.set_content("{}", "application/json");
  });
  s.start();

  Multi multi;
  Client c(http_config(s));
  c.use_multi(&multi);
  Client::AsyncOptions o;
  o.verb = "WATCH";
  o.stream = true;
  auto watch = c.get_async(multi, "/watch", o);
  std::string got;
  const auto until = test::Clock::now() + 3s;
  while (got.find("BOOKMARK") == std::string::npos && test::Clock::now() < until) {
    multi.poll_wait(50);
    multi.pump();
    got += watch->take();
  }
  ASSERT_NE(got.find("BOOKMARK"), std::string::npos);

  const Result r = c.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  // nothing pumped the multi since the write returned: the write's own waits read the stream
  const std::string during = watch->take();
  EXPECT_NE(during.find("ADDED"), std::string::npos) << during;
  EXPECT_FALSE(watch->done());
  EXPECT_EQ(multi.transfers(), 1u);  // the write left the multi, the watch is still on it

  sig.set(&Signals::release);
  watch.reset();
}

TEST(KubeClientMulti, AStopEndsASlowWriteWithinASecond) {
  Signals sig;
  TestServer s;
  s.srv().Patch("/slow", [&](const httplib::Request&, httplib::Response& res) {
    sig.set(&Signals::patch_started);
    sig.wait_for(10000ms, [&] { return sig.release; });
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.timeout_ms = 20000;  // the transfer's own timeout is far away

  for (const bool hook : {false, true}) {
    SCOPED_TRACE(hook ? "the host's wait" : "the default poll(2)");
    Client c(cfg);
    std::atomic<bool> terminated{false};
    std::atomic<int> waits{0};
    c.budget = Budget().with_stop([&] { return terminated.load(); });
    if (hook) {
      // a host's wait that never wakes for the stop: the client's slices still bound it
      c.budget = c.budget.with_multi_wait([&](Multi& m, Budget::Clock::duration d) {
        ++waits;
        m.poll_wait(std::chrono::ceil<std::chrono::milliseconds>(d).count());
      });
    }
    {
      std::lock_guard<std::mutex> lock(sig.mu);
      sig.patch_started = false;
    }
    Budget::Clock::time_point stopped_at{};
    std::thread sigterm([&] {
      sig.wait_for(3000ms, [&] { return sig.patch_started; });
      std::this_thread::sleep_for(200ms);
      stopped_at = Budget::Clock::now();
      terminated = true;
    });
    const auto started = Budget::Clock::now();
    const Result r = c.merge_patch("/slow", nlohmann::json{{"a", 1}});
    const auto ended = Budget::Clock::now();
    sigterm.join();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().reason, "Interrupted");
    EXPECT_GE(ended - started, 200ms);  // it was in flight when the stop came
    EXPECT_LT(ended - stopped_at, 1s);
    EXPECT_EQ(c.stats().requests, 1u);
    EXPECT_EQ(c.stats().errors, 1u);
    if (hook) {
      EXPECT_GE(waits.load(), 1);
    }
  }
  sig.set(&Signals::release);
}

TEST(KubeClientMulti, AThrowingWaitFallsBackToPollAndTheCallCompletes) {
  TestServer s;
  s.srv().Get("/ok", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"ok":true})", "application/json");
  });
  s.start();
  Client c(http_config(s));
  std::atomic<int> waits{0};
  c.budget = Budget().with_multi_wait([&](Multi&, Budget::Clock::duration) {
    ++waits;
    throw std::bad_alloc();
  });
  const Result r = c.get("/ok");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().body["ok"], true);
  EXPECT_GE(waits.load(), 1);
}

TEST(KubeClientMulti, CallsOnALentMultiReuseItsConnections) {
  TestServer s;
  s.srv().Get("/ok", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.start();
  Multi multi;
  Client c(http_config(s));
  c.use_multi(&multi);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.get("/ok").ok());
  EXPECT_EQ(c.stats().connects, 1u);
  EXPECT_EQ(multi.transfers(), 0u);
  c.use_multi(nullptr);  // back to a multi of its own: a new pool
  ASSERT_TRUE(c.get("/ok").ok());
  EXPECT_EQ(c.stats().connects, 2u);
}

}  // namespace
}  // namespace extsvc::kube
