// HTTPS against a local cpp-httplib SSLServer with a throwaway CA.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/client.hpp"
#include "test_support.hpp"

namespace extsvc::kube {
namespace {

using test::pki;
using test::TestServer;

void add_routes(TestServer& s) {
  s.srv().Get("/api/v1/nodes/n1", [](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json j = {{"metadata", {{"name", "n1"}}},
                        {"auth", req.get_header_value("Authorization")}};
    res.set_content(j.dump(), "application/json");
  });
}

ClusterConfig tls_config(const TestServer& s) {
  ClusterConfig c;
  c.server = s.url();
  c.qps = 0;
  c.timeout_ms = 5000;
  return c;
}

TEST(KubeTls, SucceedsWithTheRightCaFile) {
  TestServer s(pki().server_crt, pki().server_key);
  add_routes(s);
  s.start();
  auto cfg = tls_config(s);
  cfg.ca_file = pki().ca_crt;
  cfg.token = "tls-token-value";
  Client c(cfg);
  for (int i = 0; i < 5; ++i) {
    Result r = c.get(nodes_path("n1"));
    ASSERT_TRUE(r.ok()) << describe(r.error());
    EXPECT_EQ(r.value().body["auth"], "Bearer tls-token-value");
  }
  EXPECT_EQ(c.stats().connects, 1u);
}

TEST(KubeTls, SucceedsWithCaData) {
  TestServer s(pki().server_crt, pki().server_key);
  add_routes(s);
  s.start();
  auto cfg = tls_config(s);
  cfg.ca_data = test::read_file(pki().ca_crt);
  Client c(cfg);
  Result r = c.get(nodes_path("n1"));
  ASSERT_TRUE(r.ok()) << describe(r.error());
}

TEST(KubeTls, FailsWithAWrongCa) {
  TestServer s(pki().server_crt, pki().server_key);
  add_routes(s);
  s.start();
  for (bool as_data : {false, true}) {
    auto cfg = tls_config(s);
    if (as_data) {
      cfg.ca_data = test::read_file(pki().other_ca_crt);
    } else {
      cfg.ca_file = pki().other_ca_crt;
    }
    Client c(cfg);
    Result r = c.get(nodes_path("n1"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::kTransport) << describe(r.error());
    EXPECT_EQ(r.error().reason, "TLSError") << describe(r.error());
    EXPECT_EQ(r.error().http_status, 0);
    EXPECT_FALSE(r.error().message.empty());
  }
}

TEST(KubeTls, FailsWithSystemRootsForAPrivateCa) {
  TestServer s(pki().server_crt, pki().server_key);
  add_routes(s);
  s.start();
  Client c(tls_config(s));
  Result r = c.get(nodes_path("n1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TLSError") << describe(r.error());
}

TEST(KubeTls, InsecureSkipVerifyWithoutCa) {
  TestServer s(pki().server_crt, pki().server_key);
  add_routes(s);
  s.start();
  auto cfg = tls_config(s);
  cfg.insecure_skip_verify = true;
  Client c(cfg);
  Result r = c.get(nodes_path("n1"));
  ASSERT_TRUE(r.ok()) << describe(r.error());
}

TEST(KubeTls, InsecureTogetherWithCaIsRefused) {
  ClusterConfig cfg;
  cfg.server = "https://127.0.0.1:6443";
  cfg.insecure_skip_verify = true;
  cfg.ca_file = "/etc/kubernetes/ca.crt";
  auto err = validate(cfg);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(*err, "specifying a root certificates file with the insecure flag is not allowed");
  cfg.ca_file.clear();
  cfg.ca_data = "-----BEGIN CERTIFICATE-----";
  ASSERT_TRUE(validate(cfg).has_value());
  EXPECT_EQ(*validate(cfg),
            "specifying a root certificates file with the insecure flag is not allowed");
  Client c(cfg);
  Result r = c.get("/api");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "InvalidConfig");
  EXPECT_NE(r.error().message.find("insecure flag is not allowed"), std::string::npos);
}

TEST(KubeTls, MutualTlsWithClientCertificate) {
  TestServer s(pki().server_crt, pki().server_key, pki().ca_crt);
  add_routes(s);
  s.start();
  {
    auto cfg = tls_config(s);
    cfg.ca_file = pki().ca_crt;
    cfg.client_cert_data = test::read_file(pki().client_crt);
    cfg.client_key_data = test::read_file(pki().client_key);
    test::LogCapture logs;
    Client c(cfg);
    c.set_logger(logs.logger);
    Result r = c.get(nodes_path("n1"));
    ASSERT_TRUE(r.ok()) << describe(r.error());
    EXPECT_EQ(logs.text().find("PRIVATE KEY"), std::string::npos);
  }
  {
    auto cfg = tls_config(s);
    cfg.ca_file = pki().ca_crt;
    cfg.client_cert_file = pki().client_crt;
    cfg.client_key_file = pki().client_key;
    Client c(cfg);
    Result r = c.get(nodes_path("n1"));
    ASSERT_TRUE(r.ok()) << describe(r.error());
  }
  {
    auto cfg = tls_config(s);  // no client certificate: the handshake is refused
    cfg.ca_file = pki().ca_crt;
    Client c(cfg);
    Result r = c.get(nodes_path("n1"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, ErrorKind::kTransport) << describe(r.error());
  }
}

}  // namespace
}  // namespace extsvc::kube
