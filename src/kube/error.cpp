#include "kube/error.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

constexpr size_t kMaxMessageBytes = 512;
constexpr size_t kMaxCauseBytes = 256;
constexpr size_t kMaxCauses = 32;

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_secret_key(const std::string& key_lower) {
  static const char* const kSuffixes[] = {"token",    "password", "passwd",        "secret",
                                          "key-data", "keydata",  "authorization", "apikey",
                                          "api_key",  "api-key"};
  return std::any_of(std::begin(kSuffixes), std::end(kSuffixes),
                     [&](const char* s) { return ends_with(key_lower, s); });
}

// Characters that end an unquoted secret value.
bool ends_bare_value(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0 || c == ',' || c == '"' || c == '\'' ||
         c == '\\' || c == ';' || c == '&' || c == '}' || c == ']' || c == ')';
}

// A short lower-case word ("token" in "bearer token file") is prose, not a credential: real bearer
// tokens (JWTs, opaque tokens) are long and mix case, digits or punctuation. Redacting such a word
// turned "cannot read bearer token file" into "bearer [REDACTED] file" and hid the subject.
bool is_plain_word(std::string_view v) {
  return !v.empty() && v.size() <= 16 &&
         std::all_of(v.begin(), v.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

// End of an unquoted secret value starting at k. A value that is already the
// redaction marker stays one, so redacting twice changes nothing.
size_t bare_value_end(std::string_view in, size_t k) {
  constexpr std::string_view kMarker = "[REDACTED]";
  if (in.compare(k, kMarker.size(), kMarker) == 0 &&
      (k + kMarker.size() == in.size() || ends_bare_value(in[k + kMarker.size()])))
    return k + kMarker.size();
  size_t v = k;
  while (v < in.size() && !ends_bare_value(in[v])) ++v;
  return v;
}

}  // namespace

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "None";
    case ErrorKind::kNotFound:
      return "NotFound";
    case ErrorKind::kAlreadyExists:
      return "AlreadyExists";
    case ErrorKind::kConflict:
      return "Conflict";
    case ErrorKind::kInvalid:
      return "Invalid";
    case ErrorKind::kBadRequest:
      return "BadRequest";
    case ErrorKind::kUnauthorized:
      return "Unauthorized";
    case ErrorKind::kForbidden:
      return "Forbidden";
    case ErrorKind::kTooManyRequests:
      return "TooManyRequests";
    case ErrorKind::kServerError:
      return "ServerError";
    case ErrorKind::kTimeout:
      return "Timeout";
    case ErrorKind::kTransport:
      return "Transport";
    case ErrorKind::kUnsupportedMediaType:
      return "UnsupportedMediaType";
    case ErrorKind::kMethodNotAllowed:
      return "MethodNotAllowed";
    case ErrorKind::kOther:
      return "Other";
  }
  return "Other";
}

bool is_transient(const Error& err) {
  switch (err.kind) {
    case ErrorKind::kTransport:
    case ErrorKind::kTimeout:
    case ErrorKind::kServerError:
    case ErrorKind::kTooManyRequests:
    case ErrorKind::kConflict:
    case ErrorKind::kUnauthorized:  // after the client's token re-read + retry: rotation lag
      return true;
    case ErrorKind::kNone:
    case ErrorKind::kNotFound:
    case ErrorKind::kAlreadyExists:
    case ErrorKind::kInvalid:
    case ErrorKind::kBadRequest:
    case ErrorKind::kForbidden:
    case ErrorKind::kUnsupportedMediaType:
    case ErrorKind::kMethodNotAllowed:
      return false;
    case ErrorKind::kOther:
      // The limit may be raised by the operator, or the object may shrink.
      return err.reason == "ResponseTooLarge";
  }
  return false;
}

std::string describe(const Error& err) {
  std::string out = to_string(err.kind);
  out += " (HTTP ";
  out += std::to_string(err.http_status);
  if (!err.reason.empty()) {
    out += ", ";
    out += err.reason;
  }
  out += "): ";
  out += err.message;
  return redact(out);
}

namespace {
std::string redact_once(std::string_view in);
}

// One pass can leave text that a second pass would change (found by fuzzing:
// a secret key right after a half-formed PEM block); passes run until the
// text no longer changes, so what is logged is a fixed point.
std::string redact(std::string_view in) {
  std::string out = redact_once(in);
  for (int pass = 0; pass < 8; ++pass) {
    std::string next = redact_once(out);
    if (next == out) break;
    out = std::move(next);
  }
  return out;
}

namespace {
std::string redact_once(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    // PEM private key blocks.
    if (in[i] == '-' && in.compare(i, 11, "-----BEGIN ") == 0) {
      size_t hdr_end = in.find("-----", i + 11);
      if (hdr_end != std::string_view::npos &&
          in.substr(i, hdr_end - i).find("PRIVATE KEY") != std::string_view::npos) {
        size_t end = in.find("-----END", hdr_end + 5);
        size_t stop = n;
        if (end != std::string_view::npos) {
          size_t tail = in.find("-----", end + 8);
          stop = tail == std::string_view::npos ? n : tail + 5;
        }
        out += "[REDACTED]";
        i = stop;
        continue;
      }
    }
    // An identifier starts where the output so far does not end in one: right
    // after a redacted PEM block, the input's previous byte is not what counts.
    if (!is_ident_char(in[i]) || (!out.empty() && is_ident_char(out.back()))) {
      out += in[i++];
      continue;
    }
    // An identifier starts at i.
    size_t j = i;
    while (j < n && is_ident_char(in[j])) ++j;
    std::string_view ident = in.substr(i, j - i);
    std::string ident_lower = lower(ident);
    out.append(ident);

    if (ident_lower == "bearer") {
      size_t k = j;
      while (k < n && (in[k] == ' ' || in[k] == '\t')) ++k;
      size_t v = bare_value_end(in, k);
      if (k > j && v > k && !is_plain_word(in.substr(k, v - k))) {
        out.append(in.substr(j, k - j));
        out += "[REDACTED]";
        i = v;
        continue;
      }
      i = j;
      continue;
    }
    // A path's last component ("/var/run/secrets/.../token: No such file or directory") is a
    // file name, not a key: its "value" is the OS error, which the operator needs (issue 28).
    if (!is_secret_key(ident_lower) || (i > 0 && in[i - 1] == '/')) {
      i = j;
      continue;
    }
    // Optional closing quote of a JSON key (possibly JSON-escaped), spaces, then ':' or '='.
    size_t k = j;
    if (k < n && in[k] == '\\' && k + 1 < n && (in[k + 1] == '"' || in[k + 1] == '\''))
      k += 2;
    else if (k < n && (in[k] == '"' || in[k] == '\''))
      ++k;
    while (k < n && (in[k] == ' ' || in[k] == '\t')) ++k;
    if (k >= n || (in[k] != ':' && in[k] != '=')) {
      i = j;
      continue;
    }
    ++k;
    while (k < n && (in[k] == ' ' || in[k] == '\t')) ++k;
    out.append(in.substr(j, k - j));
    if (k >= n) {
      i = k;
      continue;
    }
    if (ident_lower.size() >= 13 && ends_with(ident_lower, "authorization")) {
      // Everything up to the end of the line or the closing quote.
      size_t v = k;
      char quote = 0;
      if (in[v] == '"' || in[v] == '\'') {
        quote = in[v];
        out += in[v++];
      } else if (in[v] == '\\' && v + 1 < n && (in[v + 1] == '"' || in[v + 1] == '\'')) {
        quote = in[v + 1];
        out.append(in.substr(v, 2));
        v += 2;
      }
      size_t e = v;
      while (e < n && in[e] != '\n' && in[e] != '\r' && (quote == 0 || in[e] != quote) &&
             !(quote != 0 && in[e] == '\\' && e + 1 < n && in[e + 1] == quote))
        ++e;
      out += "[REDACTED]";
      i = e;
      continue;
    }
    if (in[k] == '"' || in[k] == '\'' ||
        (in[k] == '\\' && k + 1 < n && (in[k + 1] == '"' || in[k + 1] == '\''))) {
      bool escaped_quote = in[k] == '\\';
      char quote = escaped_quote ? in[k + 1] : in[k];
      size_t v = k + (escaped_quote ? 2 : 1);
      out.append(in.substr(k, v - k));
      size_t e = v;
      while (e < n) {
        if (escaped_quote) {
          if (in[e] == '\\' && e + 1 < n && in[e + 1] == quote) break;
        } else {
          if (in[e] == '\\' && quote == '"' && e + 1 < n) {
            e += 2;
            continue;
          }
          if (in[e] == quote) break;
        }
        ++e;
      }
      out += "[REDACTED]";
      i = std::min(e, n);
      continue;
    }
    if (in[k] == '{' || in[k] == '[') {
      i = k;
      continue;
    }
    size_t v = bare_value_end(in, k);
    if (v > k) out += "[REDACTED]";
    i = v;
  }
  return out;
}
}  // namespace

namespace detail {

std::string sanitize_utf8(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  size_t i = 0;
  bool truncated = false;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    bool valid = true;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
    } else {
      valid = false;
    }
    if (valid) {
      if (i + len > s.size()) {
        valid = false;
      } else {
        for (size_t k = 1; k < len; ++k) {
          if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) valid = false;
        }
        if (valid && len == 3) {
          auto c1 = static_cast<unsigned char>(s[i + 1]);
          if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) valid = false;
        }
        if (valid && len == 4) {
          auto c1 = static_cast<unsigned char>(s[i + 1]);
          if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) valid = false;
        }
      }
    }
    std::string piece;
    if (!valid) {
      piece = "?";
      len = 1;
    } else if (len == 1) {
      if (c == '\n' || c == '\r')
        piece = " ";
      else if (c < 0x20 && c != '\t')
        piece = "?";
      else if (c == 0x7F)
        piece = "?";
      else
        piece = std::string(1, static_cast<char>(c));
    } else {
      piece = std::string(s.substr(i, len));
    }
    if (out.size() + piece.size() > max_bytes) {
      truncated = true;
      break;
    }
    out += piece;
    i += len;
  }
  if (truncated && max_bytes >= 3) {
    // Make room for "..." without splitting a UTF-8 sequence.
    while (out.size() + 3 > max_bytes) {
      size_t cut = out.size() - 1;
      while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
      out.resize(cut);
    }
    out += "...";
  }
  return out;
}

std::optional<double> parse_retry_after(std::string_view value, std::time_t now) {
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
    value.remove_prefix(1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
    value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  std::string s(value);
  if (std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.';
      })) {
    errno = 0;
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || *end != '\0') return std::nullopt;
    // ERANGE (e.g. 400 digits) is just "very large": clamp like any other large value.
    if (errno == ERANGE && d < 1) return std::nullopt;
    return std::clamp(d, 0.0, kMaxRetryAfterSeconds);
  }
  std::time_t t = curl_getdate(s.c_str(), nullptr);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::clamp(static_cast<double>(t) - static_cast<double>(now), 0.0, kMaxRetryAfterSeconds);
}

namespace {

struct ReasonMap {
  const char* reason;
  ErrorKind kind;
};

constexpr ReasonMap kReasons[] = {
    {"NotFound", ErrorKind::kNotFound},
    {"AlreadyExists", ErrorKind::kAlreadyExists},
    {"Conflict", ErrorKind::kConflict},
    {"Invalid", ErrorKind::kInvalid},
    {"BadRequest", ErrorKind::kBadRequest},
    {"Unauthorized", ErrorKind::kUnauthorized},
    {"Forbidden", ErrorKind::kForbidden},
    {"TooManyRequests", ErrorKind::kTooManyRequests},
    {"InternalError", ErrorKind::kServerError},
    {"ServiceUnavailable", ErrorKind::kServerError},
    {"Timeout", ErrorKind::kTimeout},
    {"ServerTimeout", ErrorKind::kTimeout},
    {"UnsupportedMediaType", ErrorKind::kUnsupportedMediaType},
    {"MethodNotAllowed", ErrorKind::kMethodNotAllowed},
    {"Gone", ErrorKind::kOther},
    {"Expired", ErrorKind::kOther},
    {"NotAcceptable", ErrorKind::kOther},
    {"RequestEntityTooLarge", ErrorKind::kOther},
};

ErrorKind kind_from_status(int code) {
  switch (code) {
    case 400:
      return ErrorKind::kBadRequest;
    case 401:
      return ErrorKind::kUnauthorized;
    case 403:
      return ErrorKind::kForbidden;
    case 404:
      return ErrorKind::kNotFound;
    case 405:
      return ErrorKind::kMethodNotAllowed;
    case 409:
      return ErrorKind::kConflict;
    case 415:
      return ErrorKind::kUnsupportedMediaType;
    case 422:
      return ErrorKind::kInvalid;
    case 429:
      return ErrorKind::kTooManyRequests;
    case 504:
      return ErrorKind::kTimeout;
    default:
      break;
  }
  if (code >= 500 && code <= 599) return ErrorKind::kServerError;
  return ErrorKind::kOther;
}

const char* default_reason(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      break;
  }
  if (code >= 500 && code <= 599) return "InternalError";
  return "Unknown";
}

const std::string* get_string(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

}  // namespace

Error error_from_response(int http_status, std::string_view body,
                          std::optional<double> retry_after_s) {
  Error e;
  e.http_status = http_status;
  e.retry_after_s = retry_after_s;
  std::string reason;
  std::string message;
  auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  bool json_ok = !j.is_discarded() && j.is_object();
  if (json_ok) {
    if (const auto* r = get_string(j, "reason")) reason = *r;
    if (const auto* m = get_string(j, "message")) message = *m;
    auto d = j.find("details");
    if (d != j.end() && d->is_object()) {
      auto ra = d->find("retryAfterSeconds");
      if (!e.retry_after_s && ra != d->end() && ra->is_number() && ra->get<double>() > 0)
        e.retry_after_s = std::min(ra->get<double>(), kMaxRetryAfterSeconds);
      auto causes = d->find("causes");
      if (causes != d->end() && causes->is_array()) {
        for (const auto& c : *causes) {
          if (e.causes.size() >= kMaxCauses) break;
          const auto* f = get_string(c, "field");
          const auto* m = get_string(c, "message");
          e.causes.emplace_back(sanitize_utf8(redact(f ? *f : ""), kMaxCauseBytes),
                                sanitize_utf8(redact(m ? *m : ""), kMaxCauseBytes));
        }
      }
    }
  }
  e.kind = ErrorKind::kOther;
  bool known = false;
  for (const auto& rm : kReasons) {
    if (reason == rm.reason) {
      e.kind = rm.kind;
      known = true;
      break;
    }
  }
  if (!known) e.kind = kind_from_status(http_status);
  // A 409 without a recognisable reason stays kConflict (transient), the safer default for writes.
  e.reason = reason.empty() ? default_reason(http_status) : sanitize_utf8(reason, 64);
  if (message.empty()) {
    message = "the server responded with HTTP " + std::to_string(http_status);
    if (!json_ok && !body.empty()) {
      message += ": ";
      message += sanitize_utf8(body.substr(0, 200), 200);
    }
  }
  e.message = sanitize_utf8(redact(message), kMaxMessageBytes);
  return e;
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  size_t symbols = 0;
  for (char c : in) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0) return std::nullopt;  // data after padding
    int v = val(c);
    if (v < 0) return std::nullopt;
    ++symbols;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (pad > 2 || symbols % 4 == 1) return std::nullopt;
  if (pad > 0 && (symbols + pad) % 4 != 0) return std::nullopt;
  return out;
}

}  // namespace detail
}  // namespace extsvc::kube
