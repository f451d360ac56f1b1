// Client behaviour against a real local HTTP server.
#include "kube/client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.hpp"

namespace extsvc::kube {
namespace {

using nlohmann::json;
using test::TestServer;
using Clock = std::chrono::steady_clock;

std::string status_body(int code, const std::string& reason, const std::string& message,
                        json details = nullptr) {
  json j = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason}};
  if (!details.is_null()) j["details"] = details;
  j["code"] = code;
  return j.dump();
}

ClusterConfig http_config(const TestServer& s) {
  ClusterConfig c;
  c.server = s.url();
  c.qps = 0;  // no throttling unless a test wants it
  c.connect_timeout_ms = 2000;
  c.timeout_ms = 5000;
  c.allow_insecure_http = true;  // the plain-HTTP test server receives test tokens
  return c;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

TEST(KubeClient, GetReturnsBodyAndSendsHeaders) {
  TestServer s;
  std::mutex mu;
  httplib::Headers seen;
  s.srv().Get("/api/v1/nodes/n1", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    seen = req.headers;
    res.set_content(R"({"kind":"Node","metadata":{"name":"n1"}})", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.token = "static-token-123456";
  Client c(cfg);
  Result r = c.get(nodes_path("n1"));
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r.value().http_status, 200);
  EXPECT_EQ(r.value().body["metadata"]["name"], "n1");
  EXPECT_EQ(r.kind(), ErrorKind::kNone);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen.find("Accept")->second, "application/json");
  EXPECT_EQ(seen.find("User-Agent")->second, "nico-extsvc/0.1");
  EXPECT_EQ(seen.find("Authorization")->second, "Bearer static-token-123456");
  EXPECT_EQ(c.stats().requests, 1u);
  EXPECT_EQ(c.stats().errors, 0u);
  EXPECT_GT(c.stats().bytes_received, 0u);
}

TEST(KubeClient, ListFollowsContinueAndEncodesSelectors) {
  TestServer s;
  std::mutex mu;
  std::vector<std::string> targets;
  std::vector<std::string> selectors;
  const std::string path = dpuservices_path("dpf-operator-system");
  s.srv().Get(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    targets.push_back(req.target);
    selectors.push_back(req.get_param_value("labelSelector"));
    std::string cont = req.get_param_value("continue");
    json page;
    page["apiVersion"] = "svc.dpu.nvidia.com/v1alpha1";
    page["kind"] = "DPUServiceList";
    if (cont.empty()) {
      page["metadata"] = {{"resourceVersion", "100"}, {"continue", "tok/1+="}};
      page["items"] =
          json::array({{{"metadata", {{"name", "a"}}}}, {{"metadata", {{"name", "b"}}}}});
    } else if (cont == "tok/1+=") {
      page["metadata"] = {{"resourceVersion", "100"}, {"continue", "tok2"}};
      page["items"] =
          json::array({{{"metadata", {{"name", "c"}}}}, {{"metadata", {{"name", "d"}}}}});
    } else {
      page["metadata"] = {{"resourceVersion", "100"}};
      page["items"] = json::array({{{"metadata", {{"name", "e"}}}}});
    }
    res.set_content(page.dump(), "application/json");
  });
  s.start();
  Client c(http_config(s));
  const std::string selector = "app=x,tier in (a,b),!legacy";
  Result r = c.list(path, selector, "metadata.name!=z", 2);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  const json& body = r.value().body;
  ASSERT_EQ(body["items"].size(), 5u);
  EXPECT_EQ(body["items"][4]["metadata"]["name"], "e");
  EXPECT_EQ(body["metadata"]["resourceVersion"], "100");
  EXPECT_FALSE(body["metadata"].contains("continue"));
  EXPECT_EQ(body["kind"], "DPUServiceList");
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(targets.size(), 3u);
  for (const auto& sel : selectors) EXPECT_EQ(sel, selector);
  EXPECT_NE(targets[0].find("labelSelector=app%3Dx%2Ctier%20in%20%28a%2Cb%29%2C%21legacy"),
            std::string::npos)
      << targets[0];
  EXPECT_NE(targets[0].find("fieldSelector=metadata.name%21%3Dz"), std::string::npos);
  EXPECT_NE(targets[0].find("limit=2"), std::string::npos);
  EXPECT_EQ(targets[0].find("continue="), std::string::npos);
  EXPECT_NE(targets[1].find("continue=tok%2F1%2B%3D"), std::string::npos) << targets[1];
  EXPECT_EQ(c.stats().requests, 3u);
}

TEST(KubeClient, ListRestartsOnceWhenContinueTokenExpired) {
  TestServer s;
  std::atomic<int> calls{0};
  std::atomic<int> gone{0};
  s.srv().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    ++calls;
    std::string cont = req.get_param_value("continue");
    if (cont == "stale" && gone.fetch_add(1) == 0) {
      res.status = 410;
      res.set_content(status_body(410, "Expired", "The provided continue parameter is too old"),
                      "application/json");
      return;
    }
    json page = {{"metadata", {{"resourceVersion", "7"}}}, {"items", json::array({1})}};
    if (cont.empty()) page["metadata"]["continue"] = "stale";
    res.set_content(page.dump(), "application/json");
  });
  s.start();
  Client c(http_config(s));
  Result r = c.list(pods_path(), "");
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r.value().body["items"].size(), 2u);  // not 3: the restart discarded page one
  EXPECT_EQ(calls.load(), 4);
}

TEST(KubeClient, ListWithoutPagingOrItems) {
  TestServer s;
  s.srv().Get("/api/v1/nodes", [&](const httplib::Request& req, httplib::Response& res) {
    EXPECT_FALSE(req.has_param("limit"));
    EXPECT_FALSE(req.has_param("labelSelector"));
    res.set_content(R"({"kind":"NodeList","metadata":{"resourceVersion":"9"},"items":null})",
                    "application/json");
  });
  s.start();
  Client c(http_config(s));
  Result r = c.list(nodes_path(), "", "", 0);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_TRUE(r.value().body["items"].is_array());
  EXPECT_TRUE(r.value().body["items"].empty());
  EXPECT_EQ(r.value().body["metadata"]["resourceVersion"], "9");
}

TEST(KubeClient, CreateSendsJsonBody) {
  TestServer s;
  std::mutex mu;
  std::string ctype;
  std::string body;
  const std::string path = dpuservices_path("ns1");
  s.srv().Post(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    ctype = req.get_header_value("Content-Type");
    body = req.body;
    res.status = 201;
    json obj = json::parse(req.body);
    obj["metadata"]["resourceVersion"] = "1";
    res.set_content(obj.dump(), "application/json");
  });
  s.start();
  Client c(http_config(s));
  json obj = {{"apiVersion", "svc.dpu.nvidia.com/v1alpha1"},
              {"kind", "DPUService"},
              {"metadata", {{"name", "svc-1"}, {"labels", {{"nico/extsvc", "true"}}}}}};
  Result r = c.create(path, obj);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r.value().http_status, 201);
  EXPECT_EQ(r.value().body["metadata"]["resourceVersion"], "1");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(ctype, "application/json");
  EXPECT_EQ(json::parse(body), obj);
  EXPECT_EQ(c.stats().bytes_sent, body.size());
}

TEST(KubeClient, MergePatchContentTypeAndBody) {
  TestServer s;
  std::mutex mu;
  std::string method;
  std::string ctype;
  std::string body;
  const std::string path = dpudevices_path("ns1", "dev-1");
  s.srv().Patch(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    method = req.method;
    ctype = req.get_header_value("Content-Type");
    body = req.body;
    res.set_content(R"({"metadata":{"name":"dev-1","resourceVersion":"5"}})", "application/json");
  });
  s.start();
  Client c(http_config(s));
  json patch = {
      {"spec",
       {{"cluster", {{"nodeLabels", {{"nico/extsvc-a", "1"}, {"nico/extsvc-b", nullptr}}}}}}}};
  Result r = c.merge_patch(path, patch);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r.value().body["metadata"]["resourceVersion"], "5");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(method, "PATCH");
  EXPECT_EQ(ctype, "application/merge-patch+json");
  EXPECT_EQ(json::parse(body), patch);
  EXPECT_TRUE(json::parse(body)["spec"]["cluster"]["nodeLabels"]["nico/extsvc-b"].is_null());
}

TEST(KubeClient, PutAndDelete) {
  TestServer s;
  std::atomic<int> puts{0};
  std::atomic<int> deletes{0};
  const std::string path = daemonsets_path("ns1", "ds-1");
  s.srv().Put(path, [&](const httplib::Request& req, httplib::Response& res) {
    ++puts;
    EXPECT_EQ(req.get_header_value("Content-Type"), "application/json");
    res.set_content(req.body, "application/json");
  });
  s.srv().Delete(path, [&](const httplib::Request& req, httplib::Response& res) {
    ++deletes;
    EXPECT_TRUE(req.body.empty());
    res.set_content(R"({"kind":"Status","status":"Success","details":{"name":"ds-1"}})",
                    "application/json");
  });
  s.start();
  Client c(http_config(s));
  Result p = c.put(path, json{{"metadata", {{"name", "ds-1"}, {"resourceVersion", "3"}}}});
  ASSERT_TRUE(p.ok()) << describe(p.error());
  EXPECT_EQ(p.value().body["metadata"]["resourceVersion"], "3");
  Result d = c.del(path);
  ASSERT_TRUE(d.ok()) << describe(d.error());
  EXPECT_EQ(d.value().body["status"], "Success");
  EXPECT_EQ(puts.load(), 1);
  EXPECT_EQ(deletes.load(), 1);
}

struct StatusCase {
  const char* route;
  int code;
  ErrorKind kind;
  const char* reason;
  bool transient;
};

class KubeStatus : public ::testing::TestWithParam<StatusCase> {};

TEST_P(KubeStatus, MapsStatusBodies) {
  const StatusCase& tc = GetParam();
  TestServer s;
  s.srv().Get("/nf", [](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content(
        status_body(404, "NotFound", "dpuservices.svc.dpu.nvidia.com \"x\" not found",
                    {{"name", "x"}, {"group", "svc.dpu.nvidia.com"}, {"kind", "dpuservices"}}),
        "application/json");
  });
  s.srv().Get("/exists", [](const httplib::Request&, httplib::Response& res) {
    res.status = 409;
    res.set_content(
        status_body(409, "AlreadyExists", "dpuservices.svc.dpu.nvidia.com \"x\" already exists"),
        "application/json");
  });
  s.srv().Get("/conflict", [](const httplib::Request&, httplib::Response& res) {
    res.status = 409;
    res.set_content(status_body(409, "Conflict",
                                "Operation cannot be fulfilled on dpuservices.svc.dpu.nvidia.com "
                                "\"x\": the object has been modified; please apply your changes to "
                                "the latest version and try again"),
                    "application/json");
  });
  s.srv().Get("/invalid", [](const httplib::Request&, httplib::Response& res) {
    res.status = 422;
    json details = {
        {"name", "x"},
        {"kind", "DPUService"},
        {"causes", json::array({{{"reason", "FieldValueInvalid"},
                                 {"message", "Invalid value: \"bad\": must be a DNS label"},
                                 {"field", "spec.helmChart.source.chart"}},
                                {{"reason", "FieldValueRequired"},
                                 {"message", "Required value"},
                                 {"field", "metadata.resourceVersion"}}})}};
    res.set_content(
        status_body(422, "Invalid", "DPUService.svc.dpu.nvidia.com \"x\" is invalid: ...", details),
        "application/json");
  });
  s.srv().Get("/throttle", [](const httplib::Request&, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", "3");
    res.set_content(
        status_body(429, "TooManyRequests", "Too many requests, please try again later."),
        "application/json");
  });
  s.srv().Get("/boom", [](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content(
        status_body(500, "InternalError", "Internal error occurred: etcdserver: leader changed"),
        "application/json");
  });
  s.srv().Get("/gateway", [](const httplib::Request&, httplib::Response& res) {
    res.status = 502;
    res.set_content("<html><body>502 Bad Gateway</body></html>", "text/html");
  });
  s.srv().Get("/forbidden", [](const httplib::Request&, httplib::Response& res) {
    res.status = 403;
    res.set_content("forbidden", "text/plain");  // non-JSON, reason from the code
  });
  s.srv().Get("/media", [](const httplib::Request&, httplib::Response& res) {
    res.status = 415;
    res.set_content(
        status_body(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media "
                    "types include: application/json-patch+json, application/merge-patch+json"),
        "application/json");
  });
  s.srv().Get("/nostatus", [](const httplib::Request&, httplib::Response& res) {
    res.status = 409;  // JSON without a reason: falls back to the HTTP code
    res.set_content(R"({"error":"x"})", "application/json");
  });
  s.start();
  Client c(http_config(s));
  Result r = c.get(tc.route);
  ASSERT_FALSE(r.ok());
  const Error& e = r.error();
  EXPECT_EQ(e.kind, tc.kind) << describe(e);
  EXPECT_EQ(e.http_status, tc.code);
  EXPECT_EQ(e.reason, tc.reason);
  EXPECT_FALSE(e.message.empty());
  EXPECT_LE(e.message.size(), 512u);
  EXPECT_EQ(is_transient(e), tc.transient) << describe(e);
  EXPECT_EQ(c.stats().errors, 1u);
}

INSTANTIATE_TEST_SUITE_P(
    All, KubeStatus,
    ::testing::Values(
        StatusCase{"/nf", 404, ErrorKind::kNotFound, "NotFound", false},
        StatusCase{"/exists", 409, ErrorKind::kAlreadyExists, "AlreadyExists", false},
        StatusCase{"/conflict", 409, ErrorKind::kConflict, "Conflict", true},
        StatusCase{"/invalid", 422, ErrorKind::kInvalid, "Invalid", false},
        StatusCase{"/throttle", 429, ErrorKind::kTooManyRequests, "TooManyRequests", true},
        StatusCase{"/boom", 500, ErrorKind::kServerError, "InternalError", true},
        StatusCase{"/gateway", 502, ErrorKind::kServerError, "InternalError", true},
        StatusCase{"/forbidden", 403, ErrorKind::kForbidden, "Forbidden", false},
        StatusCase{"/media", 415, ErrorKind::kUnsupportedMediaType, "UnsupportedMediaType", false},
        StatusCase{"/nostatus", 409, ErrorKind::kConflict, "Conflict", true}),
    [](const ::testing::TestParamInfo<StatusCase>& info) {
      return std::string(info.param.route + 1);
    });

TEST(KubeClient, StatusDetailsAreExposed) {
  TestServer s;
  s.srv().Get("/invalid", [](const httplib::Request&, httplib::Response& res) {
    res.status = 422;
    json details = {
        {"causes", json::array({{{"message", "must be a DNS label"}, {"field", "spec.a"}},
                                {{"message", "Required value"}, {"field", "spec.b"}}})}};
    res.set_content(status_body(422, "Invalid", "DPUService \"x\" is invalid", details),
                    "application/json");
  });
  s.srv().Get("/throttle", [](const httplib::Request&, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", "3");
    res.set_content(status_body(429, "TooManyRequests", "slow down"), "application/json");
  });
  s.srv().Get("/gateway", [](const httplib::Request&, httplib::Response& res) {
    res.status = 502;
    res.set_content("<html>Bad Gateway\x01</html>", "text/html");
  });
  s.srv().Get("/nf", [](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content(status_body(404, "NotFound", "nodes \"x\" not found"), "application/json");
  });
  s.start();
  Client c(http_config(s));
  Result inv = c.get("/invalid");
  ASSERT_FALSE(inv.ok());
  ASSERT_EQ(inv.error().causes.size(), 2u);
  EXPECT_EQ(inv.error().causes[0].first, "spec.a");
  EXPECT_EQ(inv.error().causes[0].second, "must be a DNS label");
  EXPECT_EQ(inv.error().causes[1].first, "spec.b");
  EXPECT_EQ(inv.error().message, "DPUService \"x\" is invalid");

  Result thr = c.get("/throttle");
  ASSERT_FALSE(thr.ok());
  ASSERT_TRUE(thr.error().retry_after_s.has_value());
  EXPECT_DOUBLE_EQ(*thr.error().retry_after_s, 3.0);

  Result gw = c.get("/gateway");
  ASSERT_FALSE(gw.ok());
  EXPECT_NE(gw.error().message.find("502"), std::string::npos) << gw.error().message;
  EXPECT_NE(gw.error().message.find("Bad Gateway"), std::string::npos);
  EXPECT_EQ(gw.error().message.find('\x01'), std::string::npos);
  EXPECT_FALSE(gw.error().retry_after_s.has_value());

  Result nf = c.get("/nf");
  ASSERT_FALSE(nf.ok());
  EXPECT_EQ(nf.error().message, "nodes \"x\" not found");
}

TEST(KubeClient, SuccessBodiesThatAreNotJson) {
  TestServer s;
  s.srv().Get("/text", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  s.srv().Get("/empty", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  s.start();
  Client c(http_config(s));
  Result t = c.get("/text");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().kind, ErrorKind::kOther);
  EXPECT_EQ(t.error().reason, "InvalidResponse");
  Result e = c.get("/empty");
  ASSERT_TRUE(e.ok()) << describe(e.error());
  EXPECT_TRUE(e.value().body.is_null());
}

TEST(KubeClient, TransportErrorOnClosedPort) {
  ClusterConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(test::closed_port());
  cfg.qps = 0;
  Client c(cfg);
  Result r = c.get("/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kTransport);
  EXPECT_EQ(r.error().http_status, 0);
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_TRUE(is_transient(r.error()));
  EXPECT_EQ(c.stats().errors, 1u);
}

// Metrics (issue 12): one observer call per HTTP attempt, list pages as LIST,
// no response as code 0, the cluster label as given.
struct RecordingObserver final : RequestObserver {
  struct Seen {
    std::string cluster, verb;
    int status;
    double seconds;
  };
  std::vector<Seen> seen;
  void on_request(const RequestEvent& e) noexcept override {
    seen.push_back({std::string(e.cluster), std::string(e.verb), e.http_status, e.seconds});
  }
};

TEST(KubeClient, ObserverSeesEveryAttempt) {
  TestServer s;
  s.srv().Get("/api/v1/nodes/n1", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"kind":"Node","metadata":{"name":"n1"}})", "application/json");
  });
  s.srv().Get("/api/v1/nodes/missing", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content(status_body(404, "NotFound", "nodes \"missing\" not found"),
                    "application/json");
  });
  s.srv().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    json page = {{"metadata", json::object()}, {"items", json::array({1})}};
    if (req.get_param_value("continue").empty()) page["metadata"]["continue"] = "next";
    res.set_content(page.dump(), "application/json");
  });
  s.srv().Patch("/api/v1/nodes/n1", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", "1");
    res.set_content(status_body(429, "TooManyRequests", "slow down"), "application/json");
  });
  s.start();
  RecordingObserver obs;
  Client c(http_config(s));
  c.set_observer(&obs, "dpu");
  EXPECT_TRUE(c.get(nodes_path("n1")).ok());
  EXPECT_FALSE(c.get(nodes_path("missing")).ok());
  EXPECT_TRUE(c.list(pods_path(), "").ok());
  EXPECT_FALSE(c.merge_patch(nodes_path("n1"), json{{"metadata", json::object()}}).ok());
  ASSERT_EQ(obs.seen.size(), 5u);
  EXPECT_EQ(obs.seen[0].verb, "GET");
  EXPECT_EQ(obs.seen[0].status, 200);
  EXPECT_EQ(obs.seen[1].status, 404);
  EXPECT_EQ(obs.seen[2].verb, "LIST");
  EXPECT_EQ(obs.seen[3].verb, "LIST");
  EXPECT_EQ(obs.seen[4].verb, "PATCH");
  EXPECT_EQ(obs.seen[4].status, 429);
  for (const auto& x : obs.seen) {
    EXPECT_EQ(x.cluster, "dpu");
    EXPECT_GE(x.seconds, 0.0);
    EXPECT_LT(x.seconds, 5.0);
  }
  // after a list, plain GETs are GETs again
  EXPECT_TRUE(c.get(nodes_path("n1")).ok());
  EXPECT_EQ(obs.seen.back().verb, "GET");
  // detached: nothing more is reported
  c.set_observer(nullptr, "");
  EXPECT_TRUE(c.get(nodes_path("n1")).ok());
  EXPECT_EQ(obs.seen.size(), 6u);
}

TEST(KubeClient, ObserverSeesTransportErrorsAsCodeZero) {
  ClusterConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(test::closed_port());
  cfg.qps = 0;
  RecordingObserver obs;
  Client c(cfg);
  c.set_observer(&obs, "management");
  EXPECT_FALSE(c.del("/api/v1/nodes/x").ok());
  ASSERT_EQ(obs.seen.size(), 1u);
  EXPECT_EQ(obs.seen[0].cluster, "management");
  EXPECT_EQ(obs.seen[0].verb, "DELETE");
  EXPECT_EQ(obs.seen[0].status, 0);
}

TEST(KubeClient, TimeoutWhenServerIsSlow) {
  TestServer s;
  s.srv().Get("/slow", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.timeout_ms = 250;
  Client c(cfg);
  auto t0 = Clock::now();
  Result r = c.get("/slow");
  double elapsed = ms_since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(r.error().reason, "Timeout");
  EXPECT_TRUE(is_transient(r.error()));
  EXPECT_GE(elapsed, 200);
}

TEST(KubeClient, KeepAliveReusesOneConnection) {
  TestServer s;
  std::atomic<int> hits{0};
  s.srv().Get("/api/v1/nodes/n", [&](const httplib::Request&, httplib::Response& res) {
    ++hits;
    res.set_content(R"({"metadata":{"name":"n"}})", "application/json");
  });
  s.srv().Patch("/api/v1/nodes/n", [&](const httplib::Request&, httplib::Response& res) {
    ++hits;
    res.set_content(R"({"metadata":{"name":"n"}})", "application/json");
  });
  s.start();
  Client c(http_config(s));
  for (int i = 0; i < 50; ++i) {
    Result r =
        (i % 5 == 4) ? c.merge_patch("/api/v1/nodes/n", json{{"a", i}}) : c.get("/api/v1/nodes/n");
    ASSERT_TRUE(r.ok()) << describe(r.error());
  }
  EXPECT_EQ(hits.load(), 50);
  EXPECT_EQ(c.stats().requests, 50u);
  EXPECT_EQ(c.stats().connects, 1u);
}

TEST(KubeClient, TokenBucketThrottles) {
  TestServer s;
  s.srv().Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.qps = 20;
  cfg.burst = 2;
  Client c(cfg);
  auto t0 = Clock::now();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.get("/x").ok());
  // A lower bound only: 8 requests beyond the burst at 20/s take at least
  // 400 ms however fast the server is. How much of it the client spends
  // waiting depends on how slow the requests themselves are (a loaded or
  // sanitized run refills the bucket while requests run), so the waiting time
  // is only checked to be accounted and bounded.
  const double elapsed = ms_since(t0);
  EXPECT_GE(elapsed, 350);
  EXPECT_GE(c.stats().throttled_ms, 0);
  EXPECT_LE(c.stats().throttled_ms, elapsed + 1);
}

TEST(KubeClient, ThrottlingDisabledWhenQpsIsZero) {
  TestServer s;
  s.srv().Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.qps = 0;
  cfg.burst = 1;
  Client c(cfg);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(c.get("/x").ok());
  EXPECT_EQ(c.stats().throttled_ms, 0);
}

TEST(KubeClient, InterruptedWhileThrottled) {
  TestServer s;
  s.srv().Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.start();
  auto cfg = http_config(s);
  cfg.qps = 0.5;  // the second request would wait 2 s
  cfg.burst = 1;
  Client c(cfg);
  ASSERT_TRUE(c.get("/x").ok());
  int checks = 0;
  c.interrupted = [&] { return ++checks >= 3; };
  Result r = c.get("/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kTransport);
  EXPECT_EQ(r.error().http_status, 0);
  EXPECT_EQ(r.error().reason, "Interrupted");
  EXPECT_EQ(r.error().message, "interrupted");
  // aborted, not sent after the refill (no wall-clock bound: shared machines)
  EXPECT_EQ(c.stats().requests, 1u);
}

TEST(KubeClient, InterruptedDuringTransfer) {
  TestServer s;
  s.srv().Get("/slow", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    res.set_content("{}", "application/json");
  });
  s.start();
  Client c(http_config(s));
  auto t0 = Clock::now();
  c.interrupted = [&] { return ms_since(t0) > 200; };
  Result r = c.get("/slow");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "Interrupted");
  EXPECT_EQ(r.error().kind, ErrorKind::kTransport);
}

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

// The lease fence: after a 401 the rotated token is not tried when the fence says the lease no
// longer covers a second call; the 401 is the answer. With the fence open the resend happens.
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
  int asked = 0;
  c.may_resend = [&] {
    ++asked;
    return false;
  };
  ASSERT_TRUE(c.get("/x").ok());  // caches the old token
  {
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-new-bbbbbbbb";
  }
  test::write_file(token_file, "token-new-bbbbbbbb\n");
  Result fenced = c.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_FALSE(fenced.ok());
  EXPECT_EQ(fenced.error().http_status, 401);
  EXPECT_EQ(asked, 1);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(patches, 1);  // no second PATCH
  }
  // Same rotation with the fence open (a fresh client; same-size token, same second, as in
  // TokenFileRotationAfter401): the resend happens.
  Client c2(cfg);
  c2.may_resend = [&] {
    ++asked;
    return true;
  };
  ASSERT_TRUE(c2.get("/x").ok());  // caches token-new
  {
    std::lock_guard<std::mutex> lock(mu);
    valid = "token-nxt-cccccccc";
  }
  test::write_file(token_file, "token-nxt-cccccccc\n");
  Result resent = c2.merge_patch("/x", nlohmann::json{{"a", 1}});
  ASSERT_TRUE(resent.ok()) << describe(resent.error());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(patches, 3);  // the 401 and the resend
  EXPECT_EQ(asked, 2);
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

TEST(KubeClient, InvalidConfigNeverThrows) {
  ClusterConfig cfg;
  cfg.server = "ftp://example";
  Client c(cfg);
  Result r = c.get("/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "InvalidConfig");
  EXPECT_FALSE(is_transient(r.error()));
  ClusterConfig ok;
  ok.server = "http://127.0.0.1:1";
  Client c2(ok);
  Result bad_path = c2.get("no-slash");
  ASSERT_FALSE(bad_path.ok());
  EXPECT_EQ(bad_path.error().reason, "InvalidRequest");
}

TEST(KubeClient, ReloadSwitchesServer) {
  TestServer a;
  TestServer b;
  a.srv().Get("/who", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"server":"a"})", "application/json");
  });
  b.srv().Get("/who", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"server":"b"})", "application/json");
  });
  a.start();
  b.start();
  Client c(http_config(a));
  Result ra = c.get("/who");
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra.value().body["server"], "a");
  c.reload(http_config(b));
  Result rb = c.get("/who");
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb.value().body["server"], "b");
  EXPECT_EQ(c.stats().connects, 2u);
  EXPECT_EQ(c.stats().requests, 2u);
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

TEST(KubeClient, WarningHeadersAreCaptured) {
  TestServer s;
  s.srv().Get("/warn", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Warning", "299 - \"svc.dpu.nvidia.com/v1alpha1 DPUService is deprecated\"");
    res.set_header("Warning", "299 - \"unknown field \\\"spec.foo\\\"\"");
    res.set_content("{}", "application/json");
  });
  s.srv().Get("/quiet", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.srv().Patch("/warn-error", [](const httplib::Request&, httplib::Response& res) {
    res.status = 422;
    res.set_header("Warning", "299 - \"unknown field \\\"spec.bar\\\"\"");
    res.set_content(status_body(422, "Invalid", "invalid"), "application/json");
  });
  s.srv().Get("/api/v1/pods", [](const httplib::Request& req, httplib::Response& res) {
    const std::string cont = req.get_param_value("continue");
    res.set_header("Warning", "299 - \"same on every page\"");
    if (cont.empty()) {
      res.set_header("Warning", "299 - \"first page\"");
      res.set_content(R"({"metadata":{"continue":"c1"},"items":[{}]})", "application/json");
    } else {
      res.set_header("Warning", "299 - \"second page\"");
      res.set_content(R"({"metadata":{},"items":[{}]})", "application/json");
    }
  });
  s.start();
  Client c(http_config(s));
  Result r = c.get("/warn");
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(
      r.value().warnings,
      (std::vector<std::string>{"299 - \"svc.dpu.nvidia.com/v1alpha1 DPUService is deprecated\"",
                                "299 - \"unknown field \\\"spec.foo\\\"\""}));
  Result q = c.get("/quiet");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q.value().warnings.empty());
  Result e = c.merge_patch("/warn-error", json::object());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().warnings,
            (std::vector<std::string>{"299 - \"unknown field \\\"spec.bar\\\"\""}));
  Result l = c.list(pods_path(), "");
  ASSERT_TRUE(l.ok()) << describe(l.error());
  EXPECT_EQ(l.value().warnings,
            (std::vector<std::string>{"299 - \"same on every page\"", "299 - \"first page\"",
                                      "299 - \"second page\""}));
}

}  // namespace
}  // namespace extsvc::kube
