#include "core/url.hpp"

#include <arpa/inet.h>

#include "core/ascii.hpp"

namespace extsvc::core {
namespace {

constexpr int kDefaultPort = 443;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Dotted quad only, no leading zeros: "010" would be octal to some resolvers.
bool is_ipv4(std::string_view s) {
  int parts = 0;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    const auto part = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (!all_ascii_digits(part) || part.size() > 3 || (part.size() > 1 && part[0] == '0'))
      return false;
    if (std::stoi(std::string(part)) > 255) return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 4;
}

// RFC 1123 host name. A numeric last label is refused unless the whole name
// is an IPv4 address, since resolvers would read it as a (malformed) address.
bool is_hostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  std::string_view last;
  while (true) {
    const auto dot = s.find('.', start);
    const auto label = s.substr(start, dot == std::string_view::npos ? s.npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (!is_ascii_alnum(label.front()) || !is_ascii_alnum(label.back())) return false;
    for (char c : label)
      if (!is_ascii_alnum(c) && c != '-') return false;
    last = label;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return !all_ascii_digits(last);
}

// RFC 3986 pchar plus "/": unreserved, sub-delims, ":", "@" and "%" (escapes
// are checked separately).
bool is_path_char(char c) {
  static constexpr std::string_view kPunctuation = "-._~!$&'()*+,;=:@/%";
  return is_ascii_alnum(c) || kPunctuation.find(c) != std::string_view::npos;
}

// Dot segments are refused, not resolved: "/a/../b" must not pass an
// allow-list entry for "/a".
bool is_dot_segment(std::string_view seg) {
  const std::string s = lower(seg);
  return s == "." || s == ".." || s == "%2e" || s == ".%2e" || s == "%2e." || s == "%2e%2e";
}

bool is_valid_path(std::string_view path) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (!is_path_char(c)) return false;
    if (c == '%' &&
        (i + 2 >= path.size() || !is_ascii_hex(path[i + 1]) || !is_ascii_hex(path[i + 2])))
      return false;
  }
  std::size_t start = 1;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    const auto seg =
        path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    if (is_dot_segment(seg)) return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

std::optional<int> parse_port(std::string_view s) {
  if (!all_ascii_digits(s) || s.size() > 5 || s[0] == '0') return std::nullopt;
  const int port = std::stoi(std::string(s));
  if (port < 1 || port > 65535) return std::nullopt;
  return port;
}

}  // namespace

std::variant<RepoUrl, RepoUrlProblem> parse_repo_url_detailed(std::string_view url) {
  if (url.empty()) return RepoUrlProblem::kEmpty;
  if (url.size() > kMaxRepoUrlLength) return RepoUrlProblem::kTooLong;
  for (char c : url) {
    const auto b = static_cast<unsigned char>(c);
    if (b <= 0x20 || b >= 0x7F) return RepoUrlProblem::kBadCharacter;
  }

  RepoUrl out;
  std::string_view rest;
  if (url.starts_with("https://")) {
    out.scheme = "https";
    rest = url.substr(8);
  } else if (url.starts_with("oci://")) {
    out.scheme = "oci";
    rest = url.substr(6);
  } else {
    return RepoUrlProblem::kScheme;
  }

  // Credentials are looked for before query and fragment are split off, so a
  // password containing "?" or "#" is still reported as a credential.
  const auto slash = rest.find('/');
  const auto authority_candidate = rest.substr(0, slash);
  if (authority_candidate.find('@') != std::string_view::npos) return RepoUrlProblem::kCredentials;
  if (rest.find('?') != std::string_view::npos) return RepoUrlProblem::kQuery;
  if (rest.find('#') != std::string_view::npos) return RepoUrlProblem::kFragment;

  std::string_view authority = authority_candidate;
  out.path = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash));
  if (authority.empty()) return RepoUrlProblem::kHost;

  std::string_view port_text;
  bool has_port = false;
  if (authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return RepoUrlProblem::kHost;
    const std::string inner(authority.substr(1, close - 1));
    unsigned char buf[16];
    if (inner.empty() || inet_pton(AF_INET6, inner.c_str(), buf) != 1) return RepoUrlProblem::kHost;
    out.host = "[" + lower(inner) + "]";
    const auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return RepoUrlProblem::kHost;
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    const auto host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
    if (!is_ipv4(host) && !is_hostname(host)) return RepoUrlProblem::kHost;
    out.host = lower(host);
  }
  if (has_port) {
    out.port = parse_port(port_text);
    if (!out.port) return RepoUrlProblem::kPort;
  }
  if (!is_valid_path(out.path)) return RepoUrlProblem::kPath;
  return out;
}

std::optional<RepoUrl> parse_repo_url(std::string_view url) {
  auto parsed = parse_repo_url_detailed(url);
  if (auto* u = std::get_if<RepoUrl>(&parsed)) return std::move(*u);
  return std::nullopt;
}

std::string_view describe(RepoUrlProblem problem) {
  switch (problem) {
    case RepoUrlProblem::kEmpty:
      return "repoURL must not be empty";
    case RepoUrlProblem::kTooLong:
      return "repoURL is longer than 2048 characters";
    case RepoUrlProblem::kBadCharacter:
      return "repoURL contains whitespace, control or non-ASCII characters";
    case RepoUrlProblem::kScheme:
      return "repoURL must begin with oci:// or https://";
    case RepoUrlProblem::kCredentials:
      return "repoURL must not embed credentials";
    case RepoUrlProblem::kQuery:
      return "repoURL must not contain a query";
    case RepoUrlProblem::kFragment:
      return "repoURL must not contain a fragment";
    case RepoUrlProblem::kHost:
      return "repoURL has no valid host";
    case RepoUrlProblem::kPort:
      return "repoURL has an invalid port";
    case RepoUrlProblem::kPath:
      return "repoURL has an invalid path";
  }
  return "repoURL is invalid";
}

std::string to_string(const RepoUrl& url) {
  std::string out = url.scheme + "://" + url.host;
  if (url.port) out += ":" + std::to_string(*url.port);
  out += url.path;
  return out;
}

bool allowlist_matches(std::string_view entry_url, std::string_view url) {
  const auto entry = parse_repo_url(entry_url);
  const auto target = parse_repo_url(url);
  if (!entry || !target) return false;
  if (entry->scheme != target->scheme || entry->host != target->host) return false;
  if (entry->port.value_or(kDefaultPort) != target->port.value_or(kDefaultPort)) return false;
  std::string_view prefix = entry->path;
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix.empty()) return true;
  const std::string_view path = target->path;
  if (!path.starts_with(prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

}  // namespace extsvc::core
