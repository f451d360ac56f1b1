#include "core/url.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace extsvc::core {
namespace {

std::optional<RepoUrlProblem> problem(std::string_view url) {
  const auto r = parse_repo_url_detailed(url);
  if (std::holds_alternative<RepoUrl>(r)) return std::nullopt;
  return std::get<RepoUrlProblem>(r);
}

TEST(RepoUrl, ParsesParts) {
  auto u = parse_repo_url("oci://Registry.Example.COM:5000/charts/Sub");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "oci");
  EXPECT_EQ(u->host, "registry.example.com");
  EXPECT_EQ(u->port, 5000);
  EXPECT_EQ(u->path, "/charts/Sub");
  EXPECT_EQ(to_string(*u), "oci://registry.example.com:5000/charts/Sub");

  u = parse_repo_url("https://charts.example.com");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->path, "");
  EXPECT_FALSE(u->port);

  u = parse_repo_url("https://10.0.0.1:8443/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->path, "/");

  u = parse_repo_url("https://[FE80::1]:443/x");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "[fe80::1]");
  EXPECT_EQ(u->port, 443);

  EXPECT_TRUE(parse_repo_url("https://h/a%20b/c@d:e;f=g"));
  EXPECT_TRUE(parse_repo_url("oci://nvcr.io/nvidia/doca"));
  EXPECT_TRUE(parse_repo_url("https://localhost:1/"));
  EXPECT_TRUE(parse_repo_url("https://h:65535"));
}

TEST(RepoUrl, Refusals) {
  EXPECT_EQ(problem(""), RepoUrlProblem::kEmpty);
  EXPECT_EQ(problem("https://h/" + std::string(2048, 'a')), RepoUrlProblem::kTooLong);
  EXPECT_EQ(problem("http://h/x"), RepoUrlProblem::kScheme);
  EXPECT_EQ(problem("HTTPS://h/x"), RepoUrlProblem::kScheme);
  EXPECT_EQ(problem("Oci://h/x"), RepoUrlProblem::kScheme);
  EXPECT_EQ(problem("ftp://h"), RepoUrlProblem::kScheme);
  EXPECT_EQ(problem("h/x"), RepoUrlProblem::kScheme);
  EXPECT_EQ(problem("https://user:pass@h/x"), RepoUrlProblem::kCredentials);
  EXPECT_EQ(problem("https://user@h"), RepoUrlProblem::kCredentials);
  EXPECT_EQ(problem("oci://token@registry/x"), RepoUrlProblem::kCredentials);
  EXPECT_EQ(problem("https://u:p?w#d@h/x"), RepoUrlProblem::kCredentials);
  EXPECT_EQ(problem("https://h/x?y=1"), RepoUrlProblem::kQuery);
  EXPECT_EQ(problem("https://h?"), RepoUrlProblem::kQuery);
  EXPECT_EQ(problem("https://h/x#frag"), RepoUrlProblem::kFragment);
  EXPECT_EQ(problem("https://h/a b"), RepoUrlProblem::kBadCharacter);
  EXPECT_EQ(problem(" https://h"), RepoUrlProblem::kBadCharacter);
  EXPECT_EQ(problem("https://h/\tx"), RepoUrlProblem::kBadCharacter);
  EXPECT_EQ(problem("https://h/\x7f"), RepoUrlProblem::kBadCharacter);
  EXPECT_EQ(problem("https://h/\xC3\xA9"), RepoUrlProblem::kBadCharacter);
  EXPECT_EQ(problem("https://"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https:///x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://-h/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://h_1/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://h./x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://a..b/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://256.1.1.1/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://1.2.3/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://010.0.0.1/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://[zz::1]/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://[::1/x"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://" + std::string(64, 'a') + ".com"), RepoUrlProblem::kHost);
  EXPECT_EQ(problem("https://h:/x"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h:0"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h:65536"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h:0443"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h:x"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h:1:2"), RepoUrlProblem::kPort);
  EXPECT_EQ(problem("https://h/a/../b"), RepoUrlProblem::kPath);
  EXPECT_EQ(problem("https://h/a/%2E%2e/b"), RepoUrlProblem::kPath);
  EXPECT_EQ(problem("https://h/./b"), RepoUrlProblem::kPath);
  EXPECT_EQ(problem("https://h/a%zz"), RepoUrlProblem::kPath);
  EXPECT_EQ(problem("https://h/a\\b"), RepoUrlProblem::kPath);
  EXPECT_EQ(problem("https://h/a<b>"), RepoUrlProblem::kPath);
}

TEST(RepoUrl, DescriptionsNeverContainTheUrl) {
  for (auto p : {RepoUrlProblem::kEmpty, RepoUrlProblem::kTooLong, RepoUrlProblem::kBadCharacter,
                 RepoUrlProblem::kScheme, RepoUrlProblem::kCredentials, RepoUrlProblem::kQuery,
                 RepoUrlProblem::kFragment, RepoUrlProblem::kHost, RepoUrlProblem::kPort,
                 RepoUrlProblem::kPath}) {
    const std::string d(describe(p));
    EXPECT_FALSE(d.empty());
    EXPECT_TRUE(d.starts_with("repoURL ")) << d;
  }
  EXPECT_EQ(describe(RepoUrlProblem::kCredentials), "repoURL must not embed credentials");
}

TEST(Allowlist, Spec210Cases) {
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com/a"));
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com/a/b"));
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com/a/"));
  EXPECT_FALSE(
      allowlist_matches("https://charts.example.com/a", "https://charts.example.com.evil.io/a"));
  EXPECT_FALSE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com/ab"));
  EXPECT_FALSE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com/"));
  EXPECT_FALSE(allowlist_matches("https://charts.example.com/a", "https://charts.example.com"));
}

TEST(Allowlist, TrailingSlashAndEmptyPath) {
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/a/", "https://charts.example.com/a"));
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/a/", "https://charts.example.com/a/b"));
  EXPECT_FALSE(allowlist_matches("https://charts.example.com/a/", "https://charts.example.com/ab"));
  EXPECT_TRUE(allowlist_matches("https://charts.example.com", "https://charts.example.com/x/y"));
  EXPECT_TRUE(allowlist_matches("https://charts.example.com/", "https://charts.example.com"));
}

TEST(Allowlist, SchemeHostPort) {
  EXPECT_FALSE(allowlist_matches("https://r.example.com/a", "oci://r.example.com/a"));
  EXPECT_TRUE(allowlist_matches("oci://r.example.com/a", "oci://r.example.com/a/c"));
  EXPECT_TRUE(allowlist_matches("https://Charts.Example.com/a", "https://charts.example.COM/a"));
  EXPECT_FALSE(
      allowlist_matches("https://charts.example.com/a", "https://evil.charts.example.com/a"));
  EXPECT_FALSE(allowlist_matches("https://example.com", "https://badexample.com"));
  EXPECT_FALSE(allowlist_matches("https://h:8443/a", "https://h/a"));
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://h:8443/a"));
  EXPECT_TRUE(allowlist_matches("https://h:8443/a", "https://h:8443/a/b"));
  // 443 is the default for both schemes.
  EXPECT_TRUE(allowlist_matches("https://h:443/a", "https://h/a"));
  EXPECT_TRUE(allowlist_matches("oci://h/a", "oci://h:443/a"));
}

TEST(Allowlist, PathsAreCaseSensitiveAndNotDecoded) {
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://h/A"));
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://h/%61"));
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://h/a%2Fb"));
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://h/a/../b"));
}

TEST(Allowlist, UnparseableNeverMatches) {
  EXPECT_FALSE(allowlist_matches("", "https://h/a"));
  EXPECT_FALSE(allowlist_matches("https://h/a", "https://u:p@h/a"));
  EXPECT_FALSE(allowlist_matches("https://h", "https://h/a?x"));
  EXPECT_FALSE(allowlist_matches("not a url", "not a url"));
}

}  // namespace
}  // namespace extsvc::core
