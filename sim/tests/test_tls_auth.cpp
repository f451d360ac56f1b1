// TLS with the generated CA and bearer-token authentication with rotation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "sim_harness.h"

using namespace simtest;

namespace {
std::string tmpdir() {
  char tmpl[] = "/tmp/dpfsim-test-XXXXXX";
  return mkdtemp(tmpl);
}
void write_file(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << content;
  std::filesystem::rename(tmp, path);
}
}  // namespace

TEST(TlsAuth, GeneratedCaAndBearerTokenWithRotation) {
  std::string dir = tmpdir();
  write_file(dir + "/token", "first-token\n");
  auto sim =
      SimProcess::start({"--dpus", "1", "--tls-dir", dir + "/tls", "--token-file", dir + "/token"});
  ASSERT_EQ(sim->ca_file, dir + "/tls/ca.crt");
  EXPECT_EQ(sim->mgmt.rfind("https://127.0.0.1:", 0), 0u);
  EXPECT_EQ(sim->control.rfind("http://", 0), 0u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/tls/server.key"));

  HttpOpts ok;
  ok.ca_file = sim->ca_file;
  ok.token = "first-token";
  Resp r = sim->m("GET", "/apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices", "",
                  "application/json", ok);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(sim->d("GET", "/api/v1/nodes", "", "application/json", ok).status, 200);

  // Without the CA the server certificate is not trusted.
  HttpOpts untrusted = ok;
  untrusted.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_FALSE(sim->m("GET", "/version", "", "application/json", untrusted).ok);

  // No token / wrong token -> 401 Status.
  HttpOpts notoken = ok;
  notoken.token.clear();
  r = sim->m("GET", "/api/v1/namespaces", "", "application/json", notoken);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(
      r.body,
      R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})");
  HttpOpts wrong = ok;
  wrong.token = "nope";
  EXPECT_EQ(sim->d("GET", "/api/v1/nodes", "", "application/json", wrong).status, 401);

  // Rotation: the new token works, the old one stops working.
  write_file(dir + "/token", "second-token\n");
  HttpOpts second = ok;
  second.token = "second-token";
  EXPECT_TRUE(wait_until(
      [&] { return sim->m("GET", "/version", "", "application/json", second).status == 200; },
      3000));
  EXPECT_EQ(sim->m("GET", "/version", "", "application/json", ok).status, 401);

  // The control API stays plain HTTP without auth.
  EXPECT_EQ(sim->ctl("GET", "/counts").status, 200);
  sim.reset();
  std::filesystem::remove_all(dir);
}
