#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace extsvc::core {

inline constexpr std::size_t kMaxRepoUrlLength = 2048;

// A chart repository URL reduced to what the allow-list compares.
struct RepoUrl {
  std::string scheme;  // "oci" or "https"
  std::string host;    // lowercased; IPv6 keeps its brackets
  std::string path;    // "" or starting with "/"
  std::optional<int> port;

  bool operator==(const RepoUrl&) const = default;
};

// Why a repoURL was refused; lets callers pick the error class (credentials
// are "unsupported", everything else an invalid field) without the URL text.
enum class RepoUrlProblem {
  kEmpty,
  kTooLong,
  kBadCharacter,  // whitespace, control or non-ASCII byte
  kScheme,
  kCredentials,
  kQuery,
  kFragment,
  kHost,
  kPort,
  kPath,
};

std::variant<RepoUrl, RepoUrlProblem> parse_repo_url_detailed(std::string_view url);
std::optional<RepoUrl> parse_repo_url(std::string_view url);

// A one-line reason that never contains the URL itself.
std::string_view describe(RepoUrlProblem problem);

// The URL rebuilt from its parts: scheme://host[:port]path.
std::string to_string(const RepoUrl& url);

// True when `url` is covered by the allow-list entry `entry_url`: equal
// scheme, host and port (absent port = 443, the default for both schemes),
// and the entry path (trailing "/" ignored) equals the URL path or is a
// prefix of it ending at a "/". Unparseable input never matches.
bool allowlist_matches(std::string_view entry_url, std::string_view url);

}  // namespace extsvc::core
