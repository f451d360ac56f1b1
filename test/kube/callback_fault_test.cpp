// No C++ exception crosses libcurl's C frames (issue 24, part 4): a callback that fails (here:
// the test probe throws std::bad_alloc inside it, as an allocation would) ends its transfer with
// an error, pump() returns normally, and the same Multi serves the next request.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "client_test_support.hpp"
#include "kube/client.hpp"
#include "kube/detail/callback_probe.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {
namespace {

using test::http_config;
using test::TestServer;

const char* g_fail_in = nullptr;  // the callback the probe makes throw; nullptr: none

void throwing_probe(const char* callback) {
  if (g_fail_in != nullptr && std::string(callback) == g_fail_in) throw std::bad_alloc();
}

class CallbackFault : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.srv().Get("/x", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Retry-After", "1");
      res.set_content("{\"kind\":\"Status\"}", "application/json");
    });
    server_.start();
    client_ = std::make_unique<Client>(http_config(server_));
    detail::callback_probe = &throwing_probe;
  }
  void TearDown() override {
    detail::callback_probe = nullptr;
    g_fail_in = nullptr;
  }

  // Starts a GET and pumps until it ends; false when pump() threw or it never ended.
  bool run(Multi& multi, std::optional<Result>* out) {
    Client::AsyncOptions o;
    auto get = client_->get_async(multi, "/x", o);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!get->done() && std::chrono::steady_clock::now() < end) {
      try {
        multi.pump();
      } catch (...) {
        ADD_FAILURE() << "an exception came out of Multi::pump() (through libcurl)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!get->done()) return false;
    out->emplace(get->result());
    return true;
  }

  TestServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(CallbackFault, AHeaderCallbackThatThrowsEndsItsTransferWithAnError) {
  Multi multi;
  g_fail_in = "header";
  std::optional<Result> r;
  ASSERT_TRUE(run(multi, &r));
  ASSERT_FALSE(r->ok());
  EXPECT_NE(r->error().message.find("out of memory"), std::string::npos) << r->error().message;
  g_fail_in = nullptr;
  ASSERT_TRUE(run(multi, &r));
  EXPECT_TRUE(r->ok()) << (r->ok() ? "" : r->error().message);  // the same multi serves the next
}

TEST_F(CallbackFault, ASocketCallbackThatThrowsEndsTheTransfersWithAnError) {
  Multi multi;
  g_fail_in = "socket";
  std::optional<Result> r;
  ASSERT_TRUE(run(multi, &r));
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(multi.transfers(), 0u);
  g_fail_in = nullptr;
  ASSERT_TRUE(run(multi, &r));
  EXPECT_TRUE(r->ok()) << (r->ok() ? "" : r->error().message);
}

}  // namespace
}  // namespace extsvc::kube
