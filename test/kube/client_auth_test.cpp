// Bearer tokens against a real local HTTP server: token file rotation, the lease fence on the
// resend after a 401, and secrets kept out of logs and errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "client_test_support.hpp"
#include "kube/client.hpp"

namespace extsvc::kube {
namespace {

using nlohmann::json;
using test::http_config;
using test::status_body;
using test::TestServer;

TEST(KubeClient, TokenFileRotationAfter401) {
  test::TempDir dir;
  const std::string token_file = dir.file("token");
  test::write_file(token_file, "token-old-aaaaaaaa\n");
  TestServer s;
  std::mutex mu;
  std::string valid = "token-old-aaaaaaaa";
  std::vector<std::string> seen;
  int unauthorized = 0;
  s.srv().Get("/x", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    std::string auth = req.get_header_value("Authorization");
    seen.push_back(auth);
    if (auth != "Bearer " + valid) {
      ++unauthorized;
      res.status = 401;
      res.set_content(status_body(401, "Unauthorized", "Unauthorized"), "application/json");
      return;
    }
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.token_file = token_file;
  cfg.token = "static-fallback-token";  // token_file wins
  Client c(cfg);
  ASSERT_TRUE(c.get("/x").ok());
  {
    // Rotate within the same second, same size: only the 401 path can notice.
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-new-bbbbbbbb";
  }
  test::write_file(token_file, "token-new-bbbbbbbb\n");
  Result r = c.get("/x");
  ASSERT_TRUE(r.ok()) << describe(r.error());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "Bearer token-old-aaaaaaaa");
  EXPECT_EQ(seen[1], "Bearer token-old-aaaaaaaa");
  EXPECT_EQ(seen[2], "Bearer token-new-bbbbbbbb");
  EXPECT_EQ(unauthorized, 1);
  EXPECT_EQ(c.stats().requests, 3u);
}

// The lease fence (a bounded budget): after a 401 the rotated token is not tried when the fence
// says the lease no longer covers a second call; the 401 is the answer. With the fence open the
// resend happens. Without a lease (an unbounded budget) a read is resent whatever the fence says.
TEST(KubeClient, NoResendAfter401WhenTheFenceForbidsIt) {
  test::TempDir dir;
  const std::string token_file = dir.file("token");
  test::write_file(token_file, "token-old-aaaaaaaa\n");
  TestServer s;
  std::mutex mu;
  std::string valid = "token-old-aaaaaaaa";
  int patches = 0;
  auto handler = [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    if (req.method == "PATCH") ++patches;
    if (req.get_header_value("Authorization") != "Bearer " + valid) {
      res.status = 401;
      res.set_content(status_body(401, "Unauthorized", "Unauthorized"), "application/json");
      return;
    }
    res.set_content("{}", "application/json");
  };
  s.srv().Get("/x", handler);
  s.srv().Patch("/x", handler);
  s.start();
  auto cfg = http_config(s);
  cfg.token_file = token_file;
  Client c(cfg);
  const auto lease_end = Budget::Clock::now() + std::chrono::hours(1);
  int asked = 0;
  // the lease covers the first call only
  c.budget = Budget().with_deadline(lease_end).with_fence([&] { return ++asked == 1; });
  ASSERT_TRUE(c.get("/x").ok());  // caches the old token
  {
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-new-bbbbbbbb";
  }
  test::write_file(token_file, "token-new-bbbbbbbb\n");
  Result fenced = c.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_FALSE(fenced.ok());
  EXPECT_EQ(fenced.error().http_status, 401);
  EXPECT_EQ(asked, 2);  // the PATCH as it left, then the resend
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(patches, 1);  // no second PATCH
  }
  // Same rotation with the fence open (a fresh client; same-size token, same second, as in
  // TokenFileRotationAfter401): the resend happens.
  Client c2(cfg);
  asked = 0;
  c2.budget = Budget().with_deadline(lease_end).with_fence([&] {
    ++asked;
    return true;
  });
  ASSERT_TRUE(c2.get("/x").ok());  // caches token-new
  {
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-nxt-cccccccc";
  }
  test::write_file(token_file, "token-nxt-cccccccc\n");
  Result resent = c2.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_TRUE(resent.ok()) << describe(resent.error());
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(patches, 3);  // the 401 and the resend
  }
  EXPECT_EQ(asked, 3);  // the PATCH as it left, the resend, the resend as it left
  // No lease (between passes): a closed fence stops writes only; a read is resent.
  Client c3(cfg);
  asked = 0;
  c3.budget = Budget().with_fence([&] {
    ++asked;
    return false;
  });
  ASSERT_TRUE(c3.get("/x").ok());  // caches token-nxt
  {
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-fin-dddddddd";
  }
  test::write_file(token_file, "token-fin-dddddddd\n");
  Result read = c3.get("/x");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(asked, 0);
}

TEST(KubeClient, TokenFileChangePickedUpWithoutA401) {
  test::TempDir dir;
  const std::string token_file = dir.file("token");
  test::write_file(token_file, "first-token-value");
  TestServer s;
  std::mutex mu;
  std::vector<std::string> seen;
  s.srv().Get("/x", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(req.get_header_value("Authorization"));
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.token_file = token_file;
  Client c(cfg);
  ASSERT_TRUE(c.get("/x").ok());
  test::write_file(token_file, "second-token-value-longer");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(c.get("/x").ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], "Bearer second-token-value-longer");
}

TEST(KubeClient, PersistentUnauthorizedIsReportedAfterOneReread) {
  test::TempDir dir;
  const std::string token_file = dir.file("token");
  test::write_file(token_file, "expired-token-value");
  TestServer s;
  std::atomic<int> hits{0};
  s.srv().Get("/x", [&](const httplib::Request&, httplib::Response& res) {
    ++hits;
    res.status = 401;
    res.set_content(status_body(401, "Unauthorized", "Unauthorized"), "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.token_file = token_file;
  Client c(cfg);
  Result r = c.get("/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUnauthorized);
  EXPECT_EQ(r.error().http_status, 401);
  EXPECT_TRUE(is_transient(r.error()));
  EXPECT_EQ(hits.load(), 1);  // token unchanged after the re-read: no pointless retry
}

TEST(KubeClient, MissingTokenFile) {
  test::TempDir dir;
  ClusterConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(test::closed_port());
  cfg.allow_insecure_http = true;
  cfg.token_file = dir.file("absent");
  Client c(cfg);
  Result r = c.get("/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUnauthorized);
  EXPECT_EQ(r.error().reason, "TokenUnavailable");
  EXPECT_NE(r.error().message.find("absent"), std::string::npos);
  EXPECT_EQ(c.stats().requests, 0u);
}

// Issue 28: the error keeps the OS error, also for a file named "token" (a ServiceAccount's), and
// a missing file logs one WARNING for the outage, not one per call.
TEST(KubeClient, MissingTokenFileKeepsTheOsErrorAndWarnsOnce) {
  test::TempDir dir;
  ClusterConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(test::closed_port());
  cfg.allow_insecure_http = true;
  cfg.token_file = dir.file("token");
  test::LogCapture logs;
  Client c(cfg);
  c.set_logger(logs.logger);
  for (int i = 0; i < 3; ++i) {
    Result r = c.get("/x");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().http_status, 0);
    EXPECT_NE(describe(r.error()).find(cfg.token_file + ": No such file or directory"),
              std::string::npos)
        << describe(r.error());
  }
  const std::string text = logs.text();
  size_t warnings = 0;
  for (size_t p = 0;
       (p = text.find("[warning] kube: cannot read bearer token file", p)) != std::string::npos;
       ++p)
    ++warnings;
  EXPECT_EQ(warnings, 1u) << text;
  EXPECT_NE(text.find("(No such file or directory)"), std::string::npos) << text;
  EXPECT_EQ(text.find("[REDACTED]"), std::string::npos) << text;
  EXPECT_EQ(c.stats().requests, 0u);
}

TEST(KubeClient, SecretsNeverInLogsOrErrors) {
  const std::string token = "s3cr3t-t0ken-abcdefghijklmnop";
  test::TempDir dir;
  test::write_file(dir.file("token"), token);
  TestServer s;
  s.srv().Get("/echo", [&](const httplib::Request& req, httplib::Response& res) {
    // A hostile or buggy server echoing credentials back in several shapes.
    std::string auth = req.get_header_value("Authorization");
    res.status = 403;
    res.set_content(status_body(403, "Forbidden",
                                "forbidden for " + auth + " raw=" + token + " json={\"token\":\"" +
                                    token + "\"}",
                                {{"causes", json::array({{{"field", "x"}, {"message", token}}})}}),
                    "application/json");
  });
  s.srv().Get("/text", [&](const httplib::Request& req, httplib::Response& res) {
    res.status = 500;
    res.set_content("upstream said: Authorization: " + req.get_header_value("Authorization"),
                    "text/plain");
  });
  s.srv().Get("/ok", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.start();
  test::LogCapture logs;
  auto cfg = http_config(s);
  cfg.token_file = dir.file("token");
  Client c(cfg);
  c.set_logger(logs.logger);
  std::vector<Error> errors;
  for (const char* p : {"/echo", "/text", "/ok"}) {
    Result r = c.get(p);
    if (!r.ok()) errors.push_back(r.error());
  }
  ClusterConfig dead = cfg;
  dead.server = "http://127.0.0.1:" + std::to_string(test::closed_port());
  c.reload(dead);
  Result tr = c.get("/ok");
  ASSERT_FALSE(tr.ok());
  errors.push_back(tr.error());
  ASSERT_EQ(errors.size(), 3u);
  for (const auto& e : errors) {
    EXPECT_EQ(e.message.find(token), std::string::npos) << e.message;
    EXPECT_EQ(describe(e).find(token), std::string::npos);
    for (const auto& cause : e.causes) {
      EXPECT_EQ(cause.second.find(token), std::string::npos);
    }
  }
  EXPECT_NE(errors[0].message.find("[REDACTED]"), std::string::npos) << errors[0].message;
  std::string log_text = logs.text();
  EXPECT_NE(log_text.find("GET /echo -> 403"), std::string::npos) << log_text;
  EXPECT_NE(log_text.find("GET /ok -> 200"), std::string::npos) << log_text;
  EXPECT_EQ(log_text.find(token), std::string::npos) << log_text;
  EXPECT_EQ(log_text.find("Authorization"), std::string::npos) << log_text;
  EXPECT_EQ(log_text.find("Bearer"), std::string::npos) << log_text;
}

// ---------------------------------------------------------------- issue #10

TEST(KubeClient, BearerTokenNeverSentOverPlainHttp) {
  TestServer s;
  std::atomic<int> hits{0};
  std::mutex mu;
  std::string auth;
  s.srv().Get("/x", [&](const httplib::Request& req, httplib::Response& res) {
    ++hits;
    std::lock_guard<std::mutex> lock(mu);
    auth = req.get_header_value("Authorization");
    res.set_content("{}", "application/json");
  });
  s.start();
  test::TempDir dir;
  test::write_file(dir.file("token"), "file-token-abcdefgh");
  for (const bool use_file : {false, true}) {
    ClusterConfig cfg = http_config(s);
    cfg.allow_insecure_http = false;
    if (use_file)
      cfg.token_file = dir.file("token");
    else
      cfg.token = "static-token-abcdefgh";
    EXPECT_TRUE(validate(cfg).has_value());
    Client c(cfg);
    Result r = c.get("/x");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().reason, "InvalidConfig");
    EXPECT_NE(r.error().message.find("http://"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("abcdefgh"), std::string::npos);
  }
  EXPECT_EQ(hits.load(), 0);
  // Without a token, plain HTTP is fine; with the explicit opt-in the token is sent.
  ClusterConfig anon = http_config(s);
  anon.allow_insecure_http = false;
  EXPECT_TRUE(Client(anon).get("/x").ok());
  ClusterConfig opted = http_config(s);
  opted.token = "static-token-abcdefgh";
  EXPECT_TRUE(Client(opted).get("/x").ok());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(auth, "Bearer static-token-abcdefgh");
}

}  // namespace
}  // namespace extsvc::kube
