// Pure helpers: timer rounding, redaction, paths, URL encoding, YAML subset, Status parsing,
// Retry-After.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kube/client.hpp"
#include "kube/detail/internal.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {
namespace {

using nlohmann::json;

// A wait for a timer 0.1 ms away is 1 ms, never 0: a loop that waited 0 found the timer not
// yet due and spun until it was.
TEST(KubeTimer, AWaitForATimerIsRoundedUpToAWholeMillisecond) {
  using std::chrono::microseconds;
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_ms_until(now + microseconds(100), now), 1);
  EXPECT_EQ(wait_ms_until(now + microseconds(999), now), 1);
  EXPECT_EQ(wait_ms_until(now + microseconds(1000), now), 1);
  EXPECT_EQ(wait_ms_until(now + microseconds(1001), now), 2);
  EXPECT_EQ(wait_ms_until(now + std::chrono::nanoseconds(1), now), 1);
  EXPECT_EQ(wait_ms_until(now, now), 0);
  EXPECT_EQ(wait_ms_until(now - microseconds(500), now), 0);
}

TEST(KubeRedact, BearerTokens) {
  EXPECT_EQ(redact("Authorization: Bearer abc.def-ghi"), "Authorization: [REDACTED]");
  EXPECT_EQ(redact("sent bearer eyJhbGciOi.x_y=  then"), "sent bearer [REDACTED]  then");
  EXPECT_EQ(redact("header=\"Bearer abc123\""), "header=\"Bearer [REDACTED]\"");
  EXPECT_EQ(redact("Bearer"), "Bearer");
  EXPECT_EQ(redact("Bearer "), "Bearer ");
}

// Issue 28: redaction hides credentials, not the words around them. "bearer token file" lost its
// subject ("cannot read bearer [REDACTED] file"); a short lower-case word after "bearer" is prose.
TEST(KubeRedact, PlainWordsAfterBearerStay) {
  EXPECT_EQ(redact("cannot read bearer token file /etc/t: Permission denied"),
            "cannot read bearer token file /etc/t: Permission denied");
  EXPECT_EQ(redact("kube: bearer token file /x changed"), "kube: bearer token file /x changed");
  EXPECT_EQ(redact("Bearer authentication failed"), "Bearer authentication failed");
  // anything that could be a credential still goes: digits, case, punctuation, length
  EXPECT_EQ(redact("Bearer averylongtokenvaluex"), "Bearer [REDACTED]");
  EXPECT_EQ(redact("Bearer Token"), "Bearer [REDACTED]");
  EXPECT_EQ(redact("Bearer tok3n"), "Bearer [REDACTED]");
  EXPECT_EQ(redact("Bearer tok-en"), "Bearer [REDACTED]");
  EXPECT_EQ(redact("Authorization: Bearer token"), "Authorization: [REDACTED]");
  EXPECT_EQ(redact("token: abcdef"), "token: [REDACTED]");
}

// Issue 28: the OS error after a token file's path stays (the default ServiceAccount token is a
// file named "token": its path followed by ": No such file or directory" read "[REDACTED] such
// file or directory").
TEST(KubeRedact, OsErrorAfterATokenFilePathStays) {
  const std::string msg =
      "cannot read bearer token file /var/run/secrets/kubernetes.io/serviceaccount/token: No such "
      "file or directory";
  EXPECT_EQ(redact(msg), msg);
  EXPECT_EQ(redact("kube: /etc/extsvc/dpu-token: Permission denied"),
            "kube: /etc/extsvc/dpu-token: Permission denied");
  // a key that is not a path component still hides its value
  EXPECT_EQ(redact("x token: abc123 /a/b"), "x token: [REDACTED] /a/b");
  EXPECT_EQ(redact("https://h/x?token=abc&b=1"), "https://h/x?token=[REDACTED]&b=1");
}

TEST(KubeRedact, TokenKeys) {
  EXPECT_EQ(redact("token: abc123"), "token: [REDACTED]");
  EXPECT_EQ(redact("    token: 'abc 123'\n    x: y"), "    token: '[REDACTED]'\n    x: y");
  EXPECT_EQ(redact(R"({"token":"abc","other":"v"})"), R"({"token":"[REDACTED]","other":"v"})");
  EXPECT_EQ(redact(R"({"token" : "a\"b", "n":1})"), R"({"token" : "[REDACTED]", "n":1})");
  EXPECT_EQ(redact(R"(msg={\"token\":\"abc\"})"), R"(msg={\"token\":\"[REDACTED]\"})");
  EXPECT_EQ(redact("https://h/x?token=abc&b=1"), "https://h/x?token=[REDACTED]&b=1");
  EXPECT_EQ(redact("id-token: x password=hunter2"), "id-token: [REDACTED] password=[REDACTED]");
  EXPECT_EQ(redact("client-key-data: LS0tLS1CRUdJTg=="), "client-key-data: [REDACTED]");
  EXPECT_EQ(redact("authorization: Basic dXNlcjpwYXNz\nnext"), "authorization: [REDACTED]\nnext");
}

TEST(KubeRedact, PrivateKeyBlocks) {
  std::string pem =
      "key=-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY----- tail";
  EXPECT_EQ(redact(pem), "key=[REDACTED] tail");
  std::string cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
  EXPECT_EQ(redact(cert), cert);
}

// Found by fuzz_kube_status: redacting twice (describe() redacts messages
// that error_from_response() already redacted) turned "Bearer [REDACTED]"
// into "Bearer [REDACTED]]".
TEST(KubeRedact, IdempotentOnRedactedText) {
  for (const std::string t : {"Unauthorized: Authorization: Bearer eyJ.abc token=xyz password: p",
                              "sent bearer abc, then token=abc&b=1 and apikey: k]",
                              R"({"token":"abc","x":"Bearer q"})", "token: abc)"}) {
    const std::string once = redact(t);
    EXPECT_EQ(redact(once), once) << t;
  }
  EXPECT_EQ(redact("Bearer [REDACTED]"), "Bearer [REDACTED]");
  EXPECT_EQ(redact("token=[REDACTED]&b=1"), "token=[REDACTED]&b=1");
  Error e;
  e.kind = ErrorKind::kUnauthorized;
  e.http_status = 401;
  e.reason = "Unauthorized";
  e.message = redact("invalid bearer abc.def");
  EXPECT_EQ(describe(e).find("]]"), std::string::npos) << describe(e);
}

// Found by fuzz_kube_status (long run): a secret key directly after a PEM
// private key block was not recognised, because the byte before it (the
// block's last '-') counted as part of a preceding identifier.
TEST(KubeRedact, SecretKeyRightAfterPemBlock) {
  const std::string text =
      "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----client-key-data: QUJD";
  EXPECT_EQ(redact(text), "[REDACTED]client-key-data: [REDACTED]");
  const std::string json =
      "-----BEGIN PRIVATE KEY-----QQ\n-----END PRIVATE KEY--E KEY-----Qkey-data\":\"QUJD\"";
  EXPECT_EQ(redact(json).find("QUJD"), std::string::npos) << redact(json);
  EXPECT_EQ(redact(redact(json)), redact(json));
  // a PEM header nested in a key-data value (found by fuzzing): one call is a fixed point
  const std::string nested =
      "-----BEGIN PRIVAT\xbb\xdfonded----\n\"client-key-data\":-----BEGIN PRIVATE KEY-----x";
  EXPECT_EQ(redact(redact(nested)), redact(nested));
}

TEST(KubeRedact, LeavesOrdinaryTextAlone) {
  const std::string texts[] = {
      "dpuservices.svc.dpu.nvidia.com \"x\" not found",
      "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
      "Failed to connect to 127.0.0.1 port 1: Connection refused",
      "the token is: ",  // nothing after the separator
      "",
  };
  for (const auto& t : texts) EXPECT_EQ(redact(t), t);
}

TEST(KubePaths, Helpers) {
  EXPECT_EQ(dpuservices_path("dpf-operator-system"),
            "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices");
  EXPECT_EQ(dpuservices_path("ns", "svc-1"),
            "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/ns/dpuservices/svc-1");
  EXPECT_EQ(dpuservices_path(""), "/apis/svc.dpu.nvidia.com/v1alpha1/dpuservices");
  EXPECT_EQ(dpudevices_path("ns", "d1"),
            "/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/ns/dpudevices/d1");
  EXPECT_EQ(nodes_path(), "/api/v1/nodes");
  EXPECT_EQ(nodes_path("dpu-node-1"), "/api/v1/nodes/dpu-node-1");
  EXPECT_EQ(pods_path(), "/api/v1/pods");
  EXPECT_EQ(pods_path("kube-system"), "/api/v1/namespaces/kube-system/pods");
  EXPECT_EQ(daemonsets_path("ns"), "/apis/apps/v1/namespaces/ns/daemonsets");
  EXPECT_EQ(daemonsets_path("ns", "ds"), "/apis/apps/v1/namespaces/ns/daemonsets/ds");
  EXPECT_EQ(controllerrevisions_path("ns"), "/apis/apps/v1/namespaces/ns/controllerrevisions");
  EXPECT_EQ(nodes_path("a/b c"), "/api/v1/nodes/a%2Fb%20c");
}

TEST(KubePaths, UrlEncode) {
  EXPECT_EQ(url_encode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(url_encode("app=x,tier in (a,b)"), "app%3Dx%2Ctier%20in%20%28a%2Cb%29");
  EXPECT_EQ(url_encode("nico/extsvc-1!=v"), "nico%2Fextsvc-1%21%3Dv");
  EXPECT_EQ(url_encode("\xC3\xA9+&?#"), "%C3%A9%2B%26%3F%23");
  EXPECT_EQ(url_encode(""), "");
}

TEST(KubeTransient, Classification) {
  auto e = [](ErrorKind k) {
    Error err;
    err.kind = k;
    return err;
  };
  for (auto k : {ErrorKind::kTransport, ErrorKind::kTimeout, ErrorKind::kServerError,
                 ErrorKind::kTooManyRequests, ErrorKind::kConflict, ErrorKind::kUnauthorized})
    EXPECT_TRUE(is_transient(e(k))) << to_string(k);
  for (auto k : {ErrorKind::kNotFound, ErrorKind::kAlreadyExists, ErrorKind::kInvalid,
                 ErrorKind::kBadRequest, ErrorKind::kForbidden, ErrorKind::kUnsupportedMediaType,
                 ErrorKind::kMethodNotAllowed, ErrorKind::kOther, ErrorKind::kNone})
    EXPECT_FALSE(is_transient(e(k))) << to_string(k);
}

TEST(KubeStatusParse, ReasonWinsOverCode) {
  // A 500 whose reason says Conflict is classified by the reason.
  Error e = detail::error_from_response(
      500, R"({"kind":"Status","reason":"Conflict","message":"m"})", std::nullopt);
  EXPECT_EQ(e.kind, ErrorKind::kConflict);
  EXPECT_EQ(e.http_status, 500);
  Error t = detail::error_from_response(
      504,
      R"({"kind":"Status","reason":"Timeout","message":"m","details":{"retryAfterSeconds":2}})",
      std::nullopt);
  EXPECT_EQ(t.kind, ErrorKind::kTimeout);
  ASSERT_TRUE(t.retry_after_s.has_value());
  EXPECT_DOUBLE_EQ(*t.retry_after_s, 2.0);
  Error u = detail::error_from_response(418, "", std::nullopt);
  EXPECT_EQ(u.kind, ErrorKind::kOther);
  EXPECT_EQ(u.reason, "Unknown");
  EXPECT_EQ(u.message, "the server responded with HTTP 418");
  Error m = detail::error_from_response(405, R"({"message":"x","reason":7})", std::nullopt);
  EXPECT_EQ(m.kind, ErrorKind::kMethodNotAllowed);
  EXPECT_EQ(m.reason, "MethodNotAllowed");
}

TEST(KubeStatusParse, MessageIsTruncatedToValidUtf8) {
  std::string msg;
  for (int i = 0; i < 400; ++i) msg += "\xC3\xA9";  // 800 bytes of 'é'
  Error e = detail::error_from_response(422, json{{"reason", "Invalid"}, {"message", msg}}.dump(),
                                        std::nullopt);
  EXPECT_LE(e.message.size(), 512u);
  EXPECT_GE(e.message.size(), 500u);
  EXPECT_EQ(e.message.substr(e.message.size() - 3), "...");
  // Valid UTF-8: re-parsing through nlohmann must succeed.
  EXPECT_NO_THROW({
    std::string dumped = json(e.message).dump();
    (void)dumped;
  });
  EXPECT_EQ(detail::sanitize_utf8("a\xFF"
                                  "b\n\x01",
                                  100),
            "a?b ?");
  EXPECT_EQ(detail::sanitize_utf8("abcdef", 5), "ab...");
}

TEST(KubeRetryAfter, SecondsAndHttpDates) {
  const std::time_t now = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(detail::parse_retry_after("3", now), 3.0);
  EXPECT_EQ(detail::parse_retry_after(" 120 ", now), 120.0);
  EXPECT_EQ(detail::parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), 10.0);
  EXPECT_EQ(detail::parse_retry_after("Sunday, 06-Nov-94 08:50:37 GMT", now), 60.0);
  EXPECT_EQ(detail::parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), 0.0);  // past
  EXPECT_FALSE(detail::parse_retry_after("", now).has_value());
  EXPECT_FALSE(detail::parse_retry_after("soon", now).has_value());
}

TEST(KubeRetryAfter, HugeValuesAreClampedNotOverflowed) {
  const std::time_t now = 784111777;
  EXPECT_EQ(detail::parse_retry_after("1000000000", now), kMaxRetryAfterSeconds);
  EXPECT_EQ(detail::parse_retry_after("10000000000000", now), kMaxRetryAfterSeconds);
  EXPECT_EQ(detail::parse_retry_after(std::string(400, '9'), now), kMaxRetryAfterSeconds);
  EXPECT_EQ(detail::parse_retry_after("3600", now), 3600.0);
  EXPECT_EQ(detail::parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT", now), kMaxRetryAfterSeconds);
  Error e = detail::error_from_response(
      429, R"({"kind":"Status","reason":"TooManyRequests","details":{"retryAfterSeconds":1e13}})",
      std::nullopt);
  ASSERT_TRUE(e.retry_after_s.has_value());
  EXPECT_EQ(*e.retry_after_s, kMaxRetryAfterSeconds);
}

TEST(KubeBase64, Decode) {
  EXPECT_EQ(detail::base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(detail::base64_decode("aGVs\nbG8"), "hello");
  EXPECT_EQ(detail::base64_decode(""), "");
  EXPECT_FALSE(detail::base64_decode("a").has_value());
  EXPECT_FALSE(detail::base64_decode("a*bc").has_value());
  EXPECT_FALSE(detail::base64_decode("aG=Vs").has_value());
}

json yaml_ok(std::string_view text) {
  auto v = detail::parse_yaml(text);
  if (auto* e = std::get_if<std::string>(&v)) {
    ADD_FAILURE() << *e;
    return nullptr;
  }
  return std::get<json>(v);
}

std::string yaml_err(std::string_view text) {
  auto v = detail::parse_yaml(text);
  if (std::holds_alternative<json>(v)) {
    ADD_FAILURE() << "expected an error, got " << std::get<json>(v).dump();
    return "";
  }
  return std::get<std::string>(v);
}

TEST(KubeYaml, ScalarsAndCollections) {
  json j = yaml_ok(R"(---
# comment
a: plain value # trailing comment
b: "double \"quoted\" \u00e9 # not a comment"
c: 'single ''quoted'' # not a comment'
d: 0123
e: true
f: ~
g:
h: {}
i: [x, "y, z", {k: v}]
url: https://10.0.0.1:6443/path#frag
list:
- one
-   two
- - nested
  - seq
- key: v
  other: w
-
  late: item
map:
  inner:
    deep: 1
  sibling: "s"
literal: |
  line1
   indented
  line3
folded: >-
  a
  b

  c
)");
  EXPECT_EQ(j["a"], "plain value");
  EXPECT_EQ(j["b"], "double \"quoted\" \xC3\xA9 # not a comment");
  EXPECT_EQ(j["c"], "single 'quoted' # not a comment");
  EXPECT_EQ(j["d"], "0123");
  EXPECT_EQ(j["e"], true);
  EXPECT_TRUE(j["f"].is_null());
  EXPECT_TRUE(j["g"].is_null());
  EXPECT_EQ(j["h"], json::object());
  EXPECT_EQ(j["i"], json::parse(R"(["x","y, z",{"k":"v"}])"));
  EXPECT_EQ(j["url"], "https://10.0.0.1:6443/path#frag");
  EXPECT_EQ(
      j["list"],
      json::parse(R"(["one","two",["nested","seq"],{"key":"v","other":"w"},{"late":"item"}])"));
  EXPECT_EQ(j["map"], json::parse(R"({"inner":{"deep":"1"},"sibling":"s"})"));
  EXPECT_EQ(j["literal"], "line1\n indented\nline3\n");
  EXPECT_EQ(j["folded"], "a b\nc");
}

TEST(KubeYaml, Errors) {
  EXPECT_NE(yaml_err("a: 1\na: 2\n").find("duplicate"), std::string::npos);
  EXPECT_NE(yaml_err("a: 1\na: 2\n").find("line 2"), std::string::npos);
  EXPECT_NE(yaml_err("a: 1\n---\nb: 2\n").find("multiple"), std::string::npos);
  std::string e = yaml_err("a:\n  b: 1\n c: 2\n");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  yaml_err("a: [1, 2\n");
  EXPECT_NE(yaml_err("? [a, b]\n: c\n").find("complex"), std::string::npos);
  EXPECT_NE(yaml_err("a: !custom x\n").find("tag"), std::string::npos);
  EXPECT_NE(yaml_err("a: *nowhere\n").find("line 1"), std::string::npos);
  // Messages name the problem and the line, never the content.
  EXPECT_EQ(yaml_err("a:\n  b: 1\n c: s3cr3t-value-never-echoed\n").find("s3cr3t"),
            std::string::npos);
  EXPECT_EQ(yaml_err("token: [s3cr3t-value-never-echoed\n").find("s3cr3t"), std::string::npos);
}

TEST(KubeYaml, TokensThatStallYamlCppAreRefusedNotHung) {
  // yaml-cpp 0.7's LoadAll never returns on these (found by fuzzing): a token
  // that cannot start a document is never consumed. The document-counting
  // first pass refuses them.
  for (const char* text : {",:1\nb: *x\n", ",\n", "# c\n  , a\n", "a: 1\n---\n,\n", "--- ,x\n",
                           "]\n", "}\n", "a: 1\n---\n]\n", "--- }\n"}) {
    const std::string e = yaml_err(text);
    EXPECT_TRUE(e.find("a kubeconfig is one document") != std::string::npos ||
                e.find("line") != std::string::npos)
        << text << ": " << e;
  }
  EXPECT_NE(yaml_err(",\n").find("cannot start a document"), std::string::npos);
  EXPECT_NE(yaml_err(std::string("\0,\0\0\0\x02\0\n", 8)).find("control character"),
            std::string::npos);
  // many empty documents are bounded too, and a comma elsewhere is ordinary YAML
  std::string many;
  for (int i = 0; i < 40; ++i) many += "---\n";
  EXPECT_NE(yaml_err(many).find("more than 16"), std::string::npos);
  EXPECT_EQ(detail::parse_yaml("a: x,y\nb: [1, 2]\n").index(), 0u);
  EXPECT_EQ(detail::parse_yaml("---\na: 1\n...\n").index(), 0u);
}

TEST(KubeYaml, AnchorsAliasesAndMergeKeys) {
  json j = yaml_ok(R"(
base: &base
  server: https://a:6443
  insecure-skip-tls-verify: true
copy: *base
merged:
  <<: *base
  server: https://b:6443
many:
  <<: [{x: "1"}, {x: "2", y: "3"}]
names: [&n first, *n]
)");
  EXPECT_EQ(j["copy"], j["base"]);
  EXPECT_EQ(j["merged"]["server"], "https://b:6443");
  EXPECT_EQ(j["merged"]["insecure-skip-tls-verify"], true);
  EXPECT_EQ(j["many"], json::parse(R"({"x":"1","y":"3"})"));
  EXPECT_EQ(j["names"], json::parse(R"(["first","first"])"));
}

TEST(KubeYaml, MultipleDocuments) {
  // Empty documents around the one real document are fine; two real ones are not.
  EXPECT_EQ(yaml_ok("---\na: 1\n---\n")["a"], "1");
  EXPECT_EQ(yaml_ok("---\na: 1\n...\n")["a"], "1");
  EXPECT_NE(yaml_err("---\na: 1\n---\na: 2\n").find("multiple YAML documents"), std::string::npos);
  EXPECT_TRUE(yaml_ok("").is_null());
  EXPECT_TRUE(yaml_ok("# only a comment\n").is_null());
}

TEST(KubeYaml, BlockScalarsAndTags) {
  json j = yaml_ok(R"(keep: |+
  a

strip: |-
  a
  b
folded: >
  one
  two
quoted-number: "0123"
str-tag: !!str true
bool-tag: !!bool "false"
null-tag: !!null ""
yes: yes
)");
  EXPECT_EQ(j["keep"], "a\n\n");
  EXPECT_EQ(j["strip"], "a\nb");
  EXPECT_EQ(j["folded"], "one two\n");
  EXPECT_EQ(j["quoted-number"], "0123");
  EXPECT_EQ(j["str-tag"], "true");
  EXPECT_EQ(j["bool-tag"], false);
  EXPECT_TRUE(j["null-tag"].is_null());
  EXPECT_EQ(j["yes"], "yes");  // YAML 1.2 booleans only: yes/no/on/off stay strings
}

TEST(KubeYaml, HostileDocumentsAreBounded) {
  // "Billion laughs": each level doubles the expansion.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 12; ++i) {
    const std::string p = "a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*" + p + ", *" + p + ", *" +
            p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p + ", *" + p +
            "]\n";
  }
  EXPECT_NE(yaml_err(bomb).find("too many"), std::string::npos);
  // Deep nesting is refused without exhausting the stack.
  yaml_err(std::string(100000, '[') + std::string(100000, ']'));
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += std::string(static_cast<size_t>(i) * 2, ' ') + "k:\n";
  EXPECT_NE(yaml_err(deep).find("deeper"), std::string::npos);
}

}  // namespace
}  // namespace extsvc::kube
