// Internal helpers of extsvc_kube, exposed for unit tests only. Not a stable API.
#pragma once

#include <cstddef>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "kube/error.hpp"

namespace extsvc::kube::detail {

// The bound of an Error's message (bytes of UTF-8 after redaction).
inline constexpr size_t kMaxMessageBytes = 512;

// Parses a kubeconfig YAML document into JSON with yaml-cpp. Plain scalars stay strings except
// null/~/empty (null) and true/false (bool); quoted and block scalars are strings. Anchors,
// aliases and `<<` merge keys resolve (expansion bounded to 1e6 nodes / 64 MiB of text, depth to
// 64); `!!str`/`!!bool`/`!!null`/`!!int`/`!!float` tags are understood, other tags, complex keys,
// duplicate keys and more than one non-empty document are refused. Returns JSON (null for an
// empty stream) or an error text with a line number, never the content of the offending line.
std::variant<nlohmann::json, std::string> parse_yaml(std::string_view text);

// Standard base64 (whitespace ignored, padding optional). nullopt on invalid input.
std::optional<std::string> base64_decode(std::string_view in);

// Retry-After: delta-seconds or an HTTP-date (relative to `now`). Negative results clamp to 0.
std::optional<double> parse_retry_after(std::string_view value, std::time_t now);

// Builds an Error from an HTTP error response (status >= 300). `body` may be anything.
Error error_from_response(int http_status, std::string_view body,
                          std::optional<double> retry_after_s);

// Truncates to at most max_bytes without splitting a UTF-8 sequence; invalid UTF-8 bytes and
// control characters (except \t) are replaced by '?'.
std::string sanitize_utf8(std::string_view s, size_t max_bytes);

}  // namespace extsvc::kube::detail
