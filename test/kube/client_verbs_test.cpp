// The verbs against a real local HTTP server: what each sends and how the answer comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
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

}  // namespace
}  // namespace extsvc::kube
