// kubeconfig loading (YAML subset and JSON).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/client.hpp"
#include "test_support.hpp"

namespace extsvc::kube {
namespace {

using test::TempDir;
using test::write_file;

std::string b64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += t[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

const ClusterConfig& ok(const std::variant<ClusterConfig, std::string>& v) {
  if (auto* e = std::get_if<std::string>(&v)) ADD_FAILURE() << *e;
  static const ClusterConfig kEmpty;
  return std::holds_alternative<ClusterConfig>(v) ? std::get<ClusterConfig>(v) : kEmpty;
}

std::string err(const std::variant<ClusterConfig, std::string>& v) {
  if (std::holds_alternative<ClusterConfig>(v)) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return std::get<std::string>(v);
}

const char* kKindStyle = R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: CA_B64
    server: https://127.0.0.1:6443
  name: kind-mgmt
- cluster:
    server: "https://10.0.0.2:6443"   # quoted, with a comment
    insecure-skip-tls-verify: true
  name: kind-dpu
contexts:
- context:
    cluster: kind-mgmt
    user: kind-mgmt
  name: kind-mgmt
- context:
    cluster: kind-dpu
    user: dpu-admin
    namespace: dpf-operator-system
  name: dpu
current-context: kind-mgmt
kind: Config
preferences: {}
users:
- name: kind-mgmt
  user:
    client-certificate-data: CERT_B64
    client-key-data: KEY_B64
- name: dpu-admin
  user:
    token: 'kubeconfig-secret-token'
)";

std::string fill(std::string text, const std::string& ca, const std::string& cert,
                 const std::string& key) {
  auto rep = [&](const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
  };
  rep("CA_B64", b64(ca));
  rep("CERT_B64", b64(cert));
  rep("KEY_B64", b64(key));
  return text;
}

TEST(KubeConfig, YamlWithDataFieldsAndCurrentContext) {
  TempDir dir;
  const std::string ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
  const std::string cert = "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n";
  const std::string key = "-----BEGIN EC PRIVATE KEY-----\nKEY\n-----END EC PRIVATE KEY-----\n";
  write_file(dir.file("config"), fill(kKindStyle, ca, cert, key));
  auto v = load_kubeconfig(dir.file("config"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.server, "https://127.0.0.1:6443");
  EXPECT_EQ(c.ca_data, ca);
  EXPECT_EQ(c.client_cert_data, cert);
  EXPECT_EQ(c.client_key_data, key);
  EXPECT_TRUE(c.token.empty());
  EXPECT_FALSE(c.insecure_skip_verify);

  auto v2 = load_kubeconfig(dir.file("config"), "dpu");
  const ClusterConfig& d = ok(v2);
  EXPECT_EQ(d.server, "https://10.0.0.2:6443");
  EXPECT_TRUE(d.insecure_skip_verify);
  EXPECT_EQ(d.token, "kubeconfig-secret-token");
  EXPECT_TRUE(d.ca_data.empty());
}

TEST(KubeConfig, RelativePathsResolveAgainstTheKubeconfigDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("sub/certs"));
  write_file(dir.file("sub/kubeconfig.yaml"), R"(
# indented sequences, another style
apiVersion: v1
kind: Config
current-context: ctx
contexts:
  - name: ctx
    context: {cluster: c1, user: u1}
clusters:
  - name: c1
    cluster:
      server: https://api.example:6443
      certificate-authority: certs/ca.crt
users:
  - name: u1
    user:
      tokenFile: ../token
      client-certificate: /abs/client.crt
      client-key: certs/client.key
)");
  auto v = load_kubeconfig(dir.file("sub/kubeconfig.yaml"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.ca_file, dir.file("sub/certs/ca.crt"));
  EXPECT_EQ(c.token_file, dir.file("token"));
  EXPECT_EQ(c.client_cert_file, "/abs/client.crt");
  EXPECT_EQ(c.client_key_file, dir.file("sub/certs/client.key"));
}

TEST(KubeConfig, JsonKubeconfig) {
  TempDir dir;
  nlohmann::json j = {
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"current-context", "x"},
      {"contexts", {{{"name", "x"}, {"context", {{"cluster", "c"}, {"user", "u"}}}}}},
      {"clusters",
       {{{"name", "c"},
         {"cluster", {{"server", "https://h:1"}, {"certificate-authority", "ca.pem"}}}}}},
      {"users", {{{"name", "u"}, {"user", {{"token", "json-token"}}}}}}};
  write_file(dir.file("kc.json"), j.dump(2));
  auto v = load_kubeconfig(dir.file("kc.json"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.server, "https://h:1");
  EXPECT_EQ(c.ca_file, dir.file("ca.pem"));
  EXPECT_EQ(c.token, "json-token");
}

TEST(KubeConfig, MissingPiecesGiveClearErrors) {
  TempDir dir;
  const std::string secret = "very-secret-token-value";
  auto load = [&](const std::string& text, const std::string& ctx = "") {
    write_file(dir.file("kc"), text);
    return load_kubeconfig(dir.file("kc"), ctx);
  };
  const std::string users = "users:\n- name: u\n  user:\n    token: " + secret + "\n";
  const std::string clusters = "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n";
  const std::string contexts = "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n";

  std::string e = err(load_kubeconfig(dir.file("does-not-exist")));
  EXPECT_NE(e.find("cannot read kubeconfig"), std::string::npos) << e;

  e = err(load(clusters + contexts + users));
  EXPECT_NE(e.find("no current-context"), std::string::npos) << e;

  e = err(load("current-context: y\n" + clusters + contexts + users));
  EXPECT_NE(e.find("context \"y\" not found"), std::string::npos) << e;

  e = err(load("current-context: x\n" + contexts + users));
  EXPECT_NE(e.find("cluster \"c\""), std::string::npos) << e;
  EXPECT_NE(e.find("not found"), std::string::npos) << e;

  e = err(load("current-context: x\n" + clusters + contexts));
  EXPECT_NE(e.find("user \"u\""), std::string::npos) << e;

  e = err(load(
      "current-context: x\nclusters:\n- name: c\n  cluster:\n    insecure-skip-tls-verify: true\n" +
      contexts + users));
  EXPECT_NE(e.find("has no server"), std::string::npos) << e;

  e =
      err(load("current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
               "    certificate-authority-data: '!!notbase64!!'\n" +
               contexts + users));
  EXPECT_NE(e.find("invalid base64 in certificate-authority-data"), std::string::npos) << e;

  e = err(load("current-context: x\n" + clusters + contexts +
               "users:\n- name: u\n  user:\n    client-key-data: '%%%" + secret + "'\n"));
  EXPECT_NE(e.find("client-key-data"), std::string::npos) << e;
  EXPECT_EQ(e.find(secret), std::string::npos) << e;

  e = err(load("current-context: x\n" + clusters + contexts +
               "users:\n- name: u\n  user:\n    exec:\n      command: kubelogin\n      args:\n"
               "      - get-token\n      env: null\n"));
  EXPECT_NE(e.find("exec"), std::string::npos) << e;

  e =
      err(load("current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
               "    certificate-authority: ca.crt\n    insecure-skip-tls-verify: true\n" +
               contexts + users));
  EXPECT_NE(e.find("insecure flag is not allowed"), std::string::npos) << e;

  e = err(load("current-context: x\n\tclusters: []\n"));
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;

  e = err(load("- just\n- a list\n"));
  EXPECT_NE(e.find("not a mapping"), std::string::npos) << e;

  e = err(load("{\"current-context\": " + secret));
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  EXPECT_EQ(e.find(secret), std::string::npos) << e;
}

TEST(KubeConfig, ContextWithoutUserMeansNoCredentials) {
  TempDir dir;
  write_file(dir.file("kc"),
             "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
             "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:8080\n");
  auto v = load_kubeconfig(dir.file("kc"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.server, "http://127.0.0.1:8080");
  EXPECT_TRUE(c.token.empty());
}

TEST(KubeConfig, EndToEndAgainstTlsServer) {
  test::TestServer s(test::pki().server_crt, test::pki().server_key);
  s.srv().Get("/api/v1/nodes", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer e2e-token-value") {
      res.status = 401;
      return;
    }
    res.set_content(R"({"kind":"NodeList","metadata":{"resourceVersion":"1"},"items":[]})",
                    "application/json");
  });
  s.start();
  TempDir dir;
  write_file(dir.file("token"), "e2e-token-value\n");
  write_file(dir.file("kc"),
             "apiVersion: v1\ncurrent-context: e2e\ncontexts:\n- name: e2e\n"
             "  context:\n    cluster: local\n    user: me\nclusters:\n"
             "- name: local\n  cluster:\n    server: " +
                 s.url() +
                 "\n    certificate-authority-data: " + b64(test::read_file(test::pki().ca_crt)) +
                 "\nusers:\n- name: me\n  user:\n    tokenFile: token\n");
  auto v = load_kubeconfig(dir.file("kc"));
  ClusterConfig cfg = ok(v);
  cfg.qps = 0;
  Client c(cfg);
  Result r = c.list(nodes_path(), "");
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r.value().body["kind"], "NodeList");
}

// ---------------------------------------------------------------- yaml-cpp (issue #12)

TEST(KubeConfig, AnchorsBlockScalarsAndDocumentMarkers) {
  TempDir dir;
  const std::string ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
  const std::string cert = "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n";
  const std::string key = "-----BEGIN EC PRIVATE KEY-----\nKEY\n-----END EC PRIVATE KEY-----\n";
  write_file(dir.file("kc"), R"(%YAML 1.2
---
apiVersion: v1
kind: Config
current-context: dpu
clusters:
- name: mgmt
  cluster: &common
    server: https://127.0.0.1:6443
    certificate-authority-data: >-
      CA_B64
- name: dpu
  cluster:
    <<: *common
    server: https://10.0.0.2:6443
contexts:
- name: dpu
  context: {cluster: dpu, user: cert-user}
users:
- name: cert-user
  user:
    client-certificate-data: |
      CERT_B64
    client-key-data: KEY_B64
...
)");
  std::string text = test::read_file(dir.file("kc"));
  write_file(dir.file("kc"), fill(text, ca, cert, key));
  auto v = load_kubeconfig(dir.file("kc"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.server, "https://10.0.0.2:6443");
  EXPECT_EQ(c.ca_data, ca);  // inherited through the merge key
  EXPECT_EQ(c.client_cert_data, cert);
  EXPECT_EQ(c.client_key_data, key);
}

TEST(KubeConfig, ClientCertificateFilesAndTokenFile) {
  TempDir dir;
  write_file(dir.file("kc"), R"(current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://h:6443", certificate-authority: ca.crt}}]
users:
- name: u
  user:
    client-certificate: tls/client.crt
    client-key: 'tls/client.key'
    tokenFile: "token"
)");
  auto v = load_kubeconfig(dir.file("kc"));
  const ClusterConfig& c = ok(v);
  EXPECT_EQ(c.client_cert_file, dir.file("tls/client.crt"));
  EXPECT_EQ(c.client_key_file, dir.file("tls/client.key"));
  EXPECT_EQ(c.token_file, dir.file("token"));
  EXPECT_EQ(c.ca_file, dir.file("ca.crt"));
}

TEST(KubeConfig, ExecAndAuthProviderPluginsRefusedClearly) {
  TempDir dir;
  const std::string head =
      "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n"
      "clusters:\n- name: c\n  cluster: {server: 'https://h:1'}\n";
  // Refused even when a token is present: the file would mean something else to kubectl.
  write_file(dir.file("kc"),
             head +
                 "users:\n- name: u\n  user:\n    token: tok-abcdefgh\n    exec:\n"
                 "      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n");
  std::string e = err(load_kubeconfig(dir.file("kc")));
  EXPECT_NE(e.find("exec credential plugins are not supported"), std::string::npos) << e;
  EXPECT_EQ(e.find("tok-abcdefgh"), std::string::npos) << e;
  write_file(dir.file("kc"),
             head + "users:\n- name: u\n  user:\n    auth-provider:\n      name: oidc\n");
  e = err(load_kubeconfig(dir.file("kc")));
  EXPECT_NE(e.find("auth-provider credential plugins are not supported"), std::string::npos) << e;
  // `exec: null` (what some tools write) is not a plugin.
  write_file(dir.file("kc"), head + "users:\n- name: u\n  user:\n    token: t\n    exec: null\n");
  EXPECT_EQ(ok(load_kubeconfig(dir.file("kc"))).token, "t");
}

TEST(KubeConfig, TwoDocumentsAreRefused) {
  TempDir dir;
  write_file(dir.file("kc"), "current-context: x\n---\ncurrent-context: y\n");
  std::string e = err(load_kubeconfig(dir.file("kc")));
  EXPECT_NE(e.find("multiple YAML documents"), std::string::npos) << e;
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
}

TEST(KubeConfig, PlainHttpWithTokenNeedsTheExplicitOptIn) {
  TempDir dir;
  write_file(dir.file("kc"),
             "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8080'}}]\n"
             "users: [{name: u, user: {token: tok-abcdefgh}}]\n");
  // Loading succeeds; the final configuration decides.
  ClusterConfig c = ok(load_kubeconfig(dir.file("kc")));
  auto e = validate(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("http://"), std::string::npos) << *e;
  c.allow_insecure_http = true;
  EXPECT_FALSE(validate(c).has_value());
}

TEST(KubeConfig, DpfsimWriterOutputLoads) {
  // The exact shapes sim/src/main.cpp writes (with and without a token file).
  TempDir dir;
  for (const bool with_token : {true, false}) {
    std::string text =
        "apiVersion: v1\nkind: Config\nclusters:\n- name: management\n  cluster:\n    server: "
        "https://127.0.0.1:40001\n    certificate-authority: /tmp/tls/ca.crt\nusers:\n- name: "
        "management-user\n  user:\n";
    text += with_token ? "    tokenFile: /tmp/token\n" : "    {}\n";
    text +=
        "contexts:\n- name: management\n  context:\n    cluster: management\n    user: "
        "management-user\ncurrent-context: management\n";
    write_file(dir.file("kc"), text);
    const ClusterConfig c = ok(load_kubeconfig(dir.file("kc")));
    EXPECT_EQ(c.server, "https://127.0.0.1:40001");
    EXPECT_EQ(c.ca_file, "/tmp/tls/ca.crt");
    EXPECT_EQ(c.token_file, with_token ? "/tmp/token" : "");
  }
}

}  // namespace
}  // namespace extsvc::kube
