// Redaction of secrets in text the client logs or returns (tokens, keys, certificates, passwords
// in URLs): what error messages, debug lines and Status bodies go through before anyone sees them.
#include <algorithm>
#include <cctype>
#include <string>

#include "kube/error.hpp"

namespace extsvc::kube {

namespace {

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

namespace {
std::string redact_once(std::string_view in);
}  // namespace

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

}  // namespace extsvc::kube
