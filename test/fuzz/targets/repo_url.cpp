// Chart repository URL parser and allow-list matcher: never crashes; a parsed
// URL rebuilds into text that parses to the same URL, every URL matches an
// allow-list entry equal to itself, and a match implies both sides parse with
// equal scheme and host. Input: "<url>" or "<allow-list entry>\n<url>".
#include <string>
#include <variant>

#include "core/url.hpp"
#include "fuzz_check.hpp"
#include "fuzz_targets.hpp"

namespace extsvc::fuzz {

namespace {

void check_one(std::string_view text) {
  const auto parsed = core::parse_repo_url_detailed(text);
  const bool simple_ok = core::parse_repo_url(text).has_value();
  if (const auto* problem = std::get_if<core::RepoUrlProblem>(&parsed)) {
    FUZZ_CHECK(!simple_ok);
    FUZZ_CHECK(!core::describe(*problem).empty());
    return;
  }
  FUZZ_CHECK(simple_ok);
  const auto& url = std::get<core::RepoUrl>(parsed);
  FUZZ_CHECK(url.scheme == "https" || url.scheme == "oci");
  FUZZ_CHECK(!url.host.empty());
  FUZZ_CHECK(url.path.empty() || url.path[0] == '/');
  FUZZ_CHECK(!url.port || (*url.port >= 1 && *url.port <= 65535));
  const std::string rebuilt = core::to_string(url);
  const auto again = core::parse_repo_url(rebuilt);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(*again == url);
  FUZZ_CHECK(core::to_string(*again) == rebuilt);
  FUZZ_CHECK(core::allowlist_matches(text, text));
  FUZZ_CHECK(core::allowlist_matches(rebuilt, text));
}

}  // namespace

int repo_url(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) {
    check_one(text);
    return 0;
  }
  const auto entry = text.substr(0, nl);
  const auto url = text.substr(nl + 1);
  check_one(entry);
  check_one(url);
  if (core::allowlist_matches(entry, url)) {
    const auto e = core::parse_repo_url(entry);
    const auto u = core::parse_repo_url(url);
    FUZZ_CHECK(e && u);
    FUZZ_CHECK(e->scheme == u->scheme && e->host == u->host);
    FUZZ_CHECK(e->port.value_or(443) == u->port.value_or(443));
    // The entry's path is a prefix of the URL's path.
    std::string_view ep = e->path;
    while (!ep.empty() && ep.back() == '/') ep.remove_suffix(1);
    FUZZ_CHECK(std::string_view(u->path).starts_with(ep));
  }
  return 0;
}

}  // namespace extsvc::fuzz
