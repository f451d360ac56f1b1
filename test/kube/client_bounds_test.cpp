// Limits on what a server can make the client hold, against a real local HTTP server.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "client_test_support.hpp"
#include "kube/client.hpp"

namespace extsvc::kube {
namespace {

using nlohmann::json;
using test::http_config;
using test::status_body;
using test::TestServer;

// ---------------------------------------------------------------- issue #10

TEST(KubeClient, RetryAfterHeaderIsClamped) {
  TestServer s;
  s.srv().Get("/slow-down", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", req.get_param_value("s"));
    res.set_content(status_body(429, "TooManyRequests", "later"), "application/json");
  });
  s.start();
  Client c(http_config(s));
  for (const char* v : {"1000000000", "10000000000000"}) {
    Result r = c.get(std::string("/slow-down?s=") + v);
    ASSERT_FALSE(r.ok());
    ASSERT_TRUE(r.error().retry_after_s.has_value()) << v;
    EXPECT_EQ(*r.error().retry_after_s, kMaxRetryAfterSeconds) << v;
  }
  Result r = c.get("/slow-down?s=7");
  ASSERT_TRUE(r.error().retry_after_s.has_value());
  EXPECT_EQ(*r.error().retry_after_s, 7.0);
}

TEST(KubeClient, ResponseBodiesAreCapped) {
  TestServer s;
  const std::string big = "{\"pad\":\"" + std::string(5u << 20, 'x') + "\"}";  // 5 MiB
  s.srv().Get("/big", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(big, "application/json");
  });
  s.srv().Get("/small", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"pad\":\"" + std::string(2000, 'y') + "\"}", "application/json");
  });
  s.srv().Get("/huge-error", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(big, "text/plain");
  });
  s.start();
  // The default single-object limit (4 MiB) refuses a 5 MiB object.
  Client c(http_config(s));
  Result r = c.get("/big");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "ResponseTooLarge");
  EXPECT_EQ(r.error().http_status, 200);
  EXPECT_TRUE(is_transient(r.error()));
  EXPECT_NE(r.error().message.find("4194304"), std::string::npos) << r.error().message;
  EXPECT_EQ(c.get("/huge-error").error().reason, "ResponseTooLarge");
  // Configurable, both ways.
  ClusterConfig tight = http_config(s);
  tight.max_response_bytes = 1000;
  Client t(tight);
  EXPECT_EQ(t.get("/small").error().reason, "ResponseTooLarge");
  ClusterConfig roomy = http_config(s);
  roomy.max_response_bytes = 8u << 20;
  Client ro(roomy);
  EXPECT_TRUE(ro.get("/big").ok());
}

TEST(KubeClient, ListPagesShareOneBudget) {
  TestServer s;
  std::atomic<int> pages{0};
  s.srv().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    ++pages;
    // An endless pagination of 10 KB pages.
    const std::string cont = req.get_param_value("continue");
    json page = {{"kind", "PodList"},
                 {"metadata", {{"continue", cont + "x"}}},
                 {"items", json::array({{{"pad", std::string(10000, 'p')}}})}};
    res.set_content(page.dump(), "application/json");
  });
  s.start();
  ClusterConfig cfg = http_config(s);
  cfg.max_list_bytes = 55000;
  cfg.max_response_bytes = 1000;  // single-object limit does not apply to list pages
  Client c(cfg);
  Result r = c.list(pods_path(), "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "ResponseTooLarge");
  EXPECT_NE(r.error().message.find("55000"), std::string::npos) << r.error().message;
  EXPECT_EQ(pages.load(), 6);  // 5 pages fit, the 6th overflows the remaining budget
}

}  // namespace
}  // namespace extsvc::kube
