// Error responses mapped to Error kinds and details, success bodies that are not JSON, and
// Warning headers, against a real local HTTP server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "client_test_support.hpp"
#include "kube/client.hpp"

namespace extsvc::kube {
namespace {

using nlohmann::json;
using test::http_config;
using test::status_body;
using test::TestServer;

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
