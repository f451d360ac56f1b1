#include "kube/client.hpp"

#include <curl/curl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Hard ceiling; ClusterConfig::max_response_bytes / max_list_bytes are the working limits.
constexpr size_t kMaxResponseBytes = size_t{512} << 20;
constexpr size_t kMaxTokenBytes = 64 * 1024;
constexpr size_t kMaxMessageBytes = 512;
constexpr int kMaxListPages = 100000;
constexpr auto kTokenRecheck = std::chrono::seconds(1);
constexpr auto kMaxSleepSlice = std::chrono::milliseconds(100);

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Error make_error(ErrorKind kind, int status, std::string reason, std::string message) {
  Error e;
  e.kind = kind;
  e.http_status = status;
  e.reason = std::move(reason);
  e.message = detail::sanitize_utf8(redact(message), kMaxMessageBytes);
  return e;
}

Error interrupted_error() {
  Error e;
  e.kind = ErrorKind::kTransport;
  e.http_status = 0;
  e.reason = "Interrupted";
  e.message = "interrupted";
  return e;
}

std::string trim_ws(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Replaces every occurrence of `secret` in `s`.
void scrub(std::string& s, const std::string& secret) {
  if (secret.size() < 4) return;
  size_t pos = 0;
  while ((pos = s.find(secret, pos)) != std::string::npos) {
    s.replace(pos, secret.size(), "[REDACTED]");
    pos += 10;
  }
}

bool is_tls_error(CURLcode c) {
  switch (c) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
      return true;
    default:
      return false;
  }
}

// The effective body limit for a configured value (0 = the hard ceiling).
size_t body_limit(size_t configured) {
  return configured == 0 ? kMaxResponseBytes : std::min(configured, kMaxResponseBytes);
}

struct Transfer {
  std::string body;
  size_t limit = kMaxResponseBytes;
  bool too_large = false;
  const std::function<bool()>* interrupted = nullptr;
  bool was_interrupted = false;
};

size_t write_cb(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  size_t n = size * nmemb;
  if (n > t->limit || t->body.size() > t->limit - n) {
    t->too_large = true;
    return 0;
  }
  try {
    t->body.append(ptr, n);
  } catch (...) {
    t->too_large = true;
    return 0;
  }
  return n;
}

int xferinfo_cb(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(userdata);
  if (t->interrupted != nullptr && *t->interrupted) {
    bool stop = false;
    try {
      stop = (*t->interrupted)();
    } catch (...) {
      stop = false;
    }
    if (stop) {
      t->was_interrupted = true;
      return 1;
    }
  }
  return 0;
}

}  // namespace

struct Client::Impl {
  ClusterConfig cfg;
  std::optional<std::string> config_error;
  CURL* curl = nullptr;
  Stats stats;
  std::shared_ptr<spdlog::logger> logger;
  const std::function<bool()>* may_resend = nullptr;
  const std::function<bool()>* interrupted = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};
  size_t last_body_bytes = 0;  // decoded body size of the last response
  RequestObserver* observer = nullptr;
  std::string observer_cluster;
  bool listing = false;  // inside list(): attempts are reported as verb LIST

  // Token file cache.
  std::string file_token;
  bool file_token_loaded = false;
  struct stat file_stat = {};
  Clock::time_point token_checked{};

  // Token bucket.
  double bucket = 0;
  Clock::time_point bucket_refilled{};

  struct Raw {
    int status = 0;
    std::string body;
    std::optional<double> retry_after;
    std::vector<std::string> warnings;
    std::optional<Error> error;  // transport-level failure
  };

  explicit Impl(ClusterConfig c) { configure(std::move(c)); }
  ~Impl() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void configure(ClusterConfig c) {
    cfg = std::move(c);
    while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
    config_error = validate(cfg);
    if (curl != nullptr) {
      curl_easy_cleanup(curl);
      curl = nullptr;
    }
    global_init();
    curl = curl_easy_init();
    if (curl == nullptr && !config_error) config_error = "libcurl initialization failed";
    file_token.clear();
    file_token_loaded = false;
    file_stat = {};
    token_checked = {};
    bucket = std::max(0.0, static_cast<double>(cfg.burst));
    bucket_refilled = Clock::now();
  }

  spdlog::logger& log() {
    if (logger) return *logger;
    return *spdlog::default_logger_raw();
  }

  bool is_interrupted() {
    if (interrupted == nullptr || !*interrupted) return false;
    try {
      return (*interrupted)();
    } catch (...) {
      return false;
    }
  }

  // A throwing fence answers "no": a second call is never sent on doubt.
  bool resend_allowed() {
    if (may_resend == nullptr || !*may_resend) return true;
    try {
      return (*may_resend)();
    } catch (...) {
      return false;
    }
  }

  // Returns the bearer token to send ("" = none), or an Error.
  std::variant<std::string, Error> current_token(bool force_reread) {
    if (cfg.token_file.empty()) return cfg.token;
    auto now = Clock::now();
    if (!force_reread && file_token_loaded && now - token_checked < kTokenRecheck)
      return file_token;
    token_checked = now;
    struct stat st = {};
    if (::stat(cfg.token_file.c_str(), &st) != 0) {
      std::string why = std::strerror(errno);
      return token_unavailable(why);
    }
    if (!force_reread && file_token_loaded && st.st_size == file_stat.st_size &&
        st.st_ino == file_stat.st_ino && st.st_dev == file_stat.st_dev &&
        st.st_mtim.tv_sec == file_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == file_stat.st_mtim.tv_nsec) {
      return file_token;
    }
    if (st.st_size > static_cast<off_t>(kMaxTokenBytes)) return token_unavailable("file too large");
    std::ifstream in(cfg.token_file, std::ios::binary);
    if (!in) return token_unavailable("cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string tok = trim_ws(ss.str());
    if (tok.empty()) return token_unavailable("file is empty");
    if (tok.find_first_of("\r\n") != std::string::npos)
      return token_unavailable("file contains more than one line");
    if (file_token_loaded && tok != file_token) {
      log().info("kube: bearer token file {} changed, using the new token", cfg.token_file);
    }
    file_token = std::move(tok);
    file_token_loaded = true;
    file_stat = st;
    return file_token;
  }

  std::variant<std::string, Error> token_unavailable(const std::string& why) {
    if (file_token_loaded) {
      log().warn("kube: cannot re-read bearer token file {} ({}); keeping the previous token",
                 cfg.token_file, why);
      return file_token;
    }
    if (!cfg.token.empty()) {
      log().warn("kube: cannot read bearer token file {} ({}); using the static token",
                 cfg.token_file, why);
      return cfg.token;
    }
    return make_error(ErrorKind::kUnauthorized, 0, "TokenUnavailable",
                      "cannot read bearer token file " + cfg.token_file + ": " + why);
  }

  // Blocks until the token bucket grants a request. False when interrupted.
  bool throttle() {
    if (cfg.qps <= 0) return true;
    const double burst = static_cast<double>(std::max(1, cfg.burst));
    auto start = Clock::now();
    bool waited = false;
    while (true) {
      auto now = Clock::now();
      double elapsed = std::chrono::duration<double>(now - bucket_refilled).count();
      bucket = std::min(burst, bucket + elapsed * cfg.qps);
      bucket_refilled = now;
      if (bucket >= 1.0) {
        bucket -= 1.0;
        break;
      }
      if (is_interrupted()) {
        stats.throttled_ms += std::chrono::duration<double, std::milli>(now - start).count();
        return false;
      }
      auto need = std::chrono::duration<double>((1.0 - bucket) / cfg.qps);
      auto slice = std::min<Clock::duration>(
          std::chrono::duration_cast<Clock::duration>(need) + std::chrono::microseconds(50),
          kMaxSleepSlice);
      std::this_thread::sleep_for(slice);
      waited = true;
    }
    if (waited) {
      stats.throttled_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    }
    return true;
  }

  Raw perform(const char* method, const std::string& path, const std::string* body,
              const char* content_type, const std::string& token, size_t limit) {
    Raw raw;
    Transfer t;
    t.limit = limit;
    t.interrupted = interrupted;
    const std::string url = cfg.server + path;
    curl_easy_reset(curl);
    errbuf[0] = '\0';
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, cfg.connect_timeout_ms);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, cfg.timeout_ms);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, cfg.user_agent.c_str());
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    if (cfg.insecure_skip_verify) {
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
      curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
      if (!cfg.ca_file.empty()) {
        curl_easy_setopt(curl, CURLOPT_CAINFO, cfg.ca_file.c_str());
        curl_easy_setopt(curl, CURLOPT_CAPATH, nullptr);
      } else if (!cfg.ca_data.empty()) {
        curl_blob blob{const_cast<char*>(cfg.ca_data.data()), cfg.ca_data.size(), CURL_BLOB_COPY};
        curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &blob);
        curl_easy_setopt(curl, CURLOPT_CAPATH, nullptr);
      }
    }
    if (!cfg.client_cert_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, cfg.client_cert_file.c_str());
    } else if (!cfg.client_cert_data.empty()) {
      curl_blob blob{const_cast<char*>(cfg.client_cert_data.data()), cfg.client_cert_data.size(),
                     CURL_BLOB_COPY};
      curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &blob);
    }
    if (!cfg.client_key_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLKEY, cfg.client_key_file.c_str());
    } else if (!cfg.client_key_data.empty()) {
      curl_blob blob{const_cast<char*>(cfg.client_key_data.data()), cfg.client_key_data.size(),
                     CURL_BLOB_COPY};
      curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &blob);
    }

    struct curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "Expect:");
    if (content_type != nullptr) {
      headers = curl_slist_append(headers, (std::string("Content-Type: ") + content_type).c_str());
    }
    if (!token.empty()) {
      std::string auth = "Authorization: Bearer " + token;
      headers = curl_slist_append(headers, auth.c_str());
      std::fill(auth.begin(), auth.end(), '\0');
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

    if (std::strcmp(method, "GET") == 0) {
      curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else {
      if (body != nullptr) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
      }
      if (std::strcmp(method, "POST") != 0) curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    }

    auto start = Clock::now();
    CURLcode rc = curl_easy_perform(curl);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    curl_slist_free_all(headers);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);

    ++stats.requests;
    if (observer != nullptr) {
      long code = 0;
      if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
      RequestEvent ev;
      ev.cluster = observer_cluster;
      ev.verb = listing ? std::string_view("LIST") : std::string_view(method);
      ev.http_status = static_cast<int>(code);
      ev.seconds = ms / 1000.0;
      observer->on_request(ev);
    }
    long connects = 0;
    curl_easy_getinfo(curl, CURLINFO_NUM_CONNECTS, &connects);
    stats.connects += static_cast<uint64_t>(std::max(0L, connects));
    curl_off_t up = 0;
    curl_off_t down = 0;
    curl_easy_getinfo(curl, CURLINFO_SIZE_UPLOAD_T, &up);
    curl_easy_getinfo(curl, CURLINFO_SIZE_DOWNLOAD_T, &down);
    stats.bytes_sent += static_cast<uint64_t>(std::max<curl_off_t>(0, up));
    stats.bytes_received += static_cast<uint64_t>(std::max<curl_off_t>(0, down));

    if (rc != CURLE_OK) {
      ++stats.errors;
      if (t.was_interrupted) {
        raw.error = interrupted_error();
      } else if (t.too_large) {
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        raw.error = make_error(
            ErrorKind::kOther, static_cast<int>(status), "ResponseTooLarge",
            "response body exceeds the client limit of " + std::to_string(limit) + " bytes");
      } else {
        std::string text = errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(rc);
        scrub(text, token);
        if (rc == CURLE_OPERATION_TIMEDOUT) {
          raw.error = make_error(ErrorKind::kTimeout, 0, "Timeout", text);
        } else if (is_tls_error(rc)) {
          raw.error = make_error(ErrorKind::kTransport, 0, "TLSError", text);
        } else if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
          raw.error = make_error(ErrorKind::kOther, 0, "InvalidRequest", text);
        } else {
          raw.error = make_error(ErrorKind::kTransport, 0, "TransportError", text);
        }
      }
      if (log().should_log(spdlog::level::debug)) {
        log().debug("kube {} {} -> {} ({}) in {:.1f} ms", method, redact(path), raw.error->reason,
                    raw.error->message, ms);
      }
      return raw;
    }

    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    raw.status = static_cast<int>(status);
    last_body_bytes = t.body.size();
    raw.body = std::move(t.body);
    struct curl_header* h = nullptr;
    if (curl_easy_header(curl, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK &&
        h != nullptr && h->value != nullptr) {
      raw.retry_after = detail::parse_retry_after(h->value, std::time(nullptr));
    }
    raw.warnings = warning_headers();
    if (raw.status < 200 || raw.status >= 300) ++stats.errors;
    if (log().should_log(spdlog::level::debug)) {
      log().debug("kube {} {} -> {} in {:.1f} ms", method, redact(path), raw.status, ms);
    }
    return raw;
  }

  // Values of every Warning header of the last response, as received.
  std::vector<std::string> warning_headers() {
    std::vector<std::string> out;
    struct curl_header* h = nullptr;
    if (curl_easy_header(curl, "Warning", 0, CURLH_HEADER, -1, &h) != CURLHE_OK || h == nullptr)
      return out;
    const size_t amount = std::min(h->amount, kMaxWarnings);
    for (size_t i = 0; i < amount; ++i) {
      if (curl_easy_header(curl, "Warning", i, CURLH_HEADER, -1, &h) != CURLHE_OK || h == nullptr)
        break;
      if (h->value != nullptr) out.emplace_back(h->value);
    }
    return out;
  }

  Result to_result(Raw&& raw, const std::string& token) {
    if (raw.error) return std::move(*raw.error);
    if (raw.status >= 200 && raw.status < 300) {
      Response r;
      r.http_status = raw.status;
      r.warnings = std::move(raw.warnings);
      if (raw.body.find_first_not_of(" \t\r\n") == std::string::npos) return r;
      r.body = json::parse(raw.body, nullptr, false);
      if (r.body.is_discarded()) {
        Error e = make_error(ErrorKind::kOther, raw.status, "InvalidResponse",
                             "the server returned HTTP " + std::to_string(raw.status) +
                                 " with a body that is not valid JSON");
        e.warnings = std::move(r.warnings);
        return e;
      }
      return r;
    }
    Error e = detail::error_from_response(raw.status, raw.body, raw.retry_after);
    e.warnings = std::move(raw.warnings);
    if (!token.empty()) {
      scrub(e.message, token);
      for (auto& c : e.causes) {
        scrub(c.first, token);
        scrub(c.second, token);
      }
    }
    return e;
  }

  // `limit`: the response body limit in bytes; 0 = cfg.max_response_bytes.
  Result request(const char* method, const std::string& path, const std::string* body,
                 const char* content_type, size_t limit = 0) {
    if (limit == 0) limit = body_limit(cfg.max_response_bytes);
    if (config_error) {
      ++stats.errors;
      return make_error(ErrorKind::kOther, 0, "InvalidConfig",
                        "invalid cluster configuration: " + *config_error);
    }
    if (path.empty() || path[0] != '/') {
      ++stats.errors;
      return make_error(ErrorKind::kOther, 0, "InvalidRequest", "request path must start with /");
    }
    if (is_interrupted()) return interrupted_error();
    auto tok = current_token(false);
    if (auto* e = std::get_if<Error>(&tok)) {
      ++stats.errors;
      return *e;
    }
    std::string token = std::get<std::string>(std::move(tok));
    if (!throttle()) return interrupted_error();
    Raw raw = perform(method, path, body, content_type, token, limit);
    if (!raw.error && raw.status == 401 && !cfg.token_file.empty()) {
      // Token rotation: always re-read the file after a 401; retry once if it changed.
      auto fresh = current_token(true);
      const bool allowed = resend_allowed();
      if (auto* s = std::get_if<std::string>(&fresh); s != nullptr && *s != token && !allowed) {
        log().warn(
            "kube {} {} -> 401; the bearer token changed but the lease fence forbids a "
            "second call",
            method, redact(path));
      } else if (s != nullptr && *s != token) {
        log().debug("kube {} {} -> 401, retrying with the re-read bearer token", method,
                    redact(path));
        token = *s;
        if (!throttle()) return interrupted_error();
        raw = perform(method, path, body, content_type, token, limit);
      }
    }
    return to_result(std::move(raw), token);
  }

  Result list(const std::string& collection_path, const std::string& label_selector,
              const std::string& field_selector, int limit) {
    struct Listing {
      bool& flag;
      explicit Listing(bool& f) : flag(f) { flag = true; }
      ~Listing() { flag = false; }
      Listing(const Listing&) = delete;
      Listing& operator=(const Listing&) = delete;
    } listing_scope(listing);
    const char sep = collection_path.find('?') == std::string::npos ? '?' : '&';
    std::string base = collection_path;
    std::string params;
    auto add = [&](const char* k, const std::string& v) {
      params += params.empty() ? sep : '&';
      params += k;
      params += '=';
      params += url_encode(v);
    };
    if (limit > 0) add("limit", std::to_string(limit));
    if (!label_selector.empty()) add("labelSelector", label_selector);
    if (!field_selector.empty()) add("fieldSelector", field_selector);

    json items = json::array();
    json out = json::object();
    std::vector<std::string> warnings;
    auto add_warnings = [&](std::vector<std::string>& more) {
      for (auto& w : more) {
        if (warnings.size() >= kMaxWarnings) break;
        if (std::find(warnings.begin(), warnings.end(), w) == warnings.end())
          warnings.push_back(std::move(w));
      }
    };
    // One budget for the bodies of all pages, so a server cannot grow the result without bound
    // by paginating.
    const size_t budget = body_limit(cfg.max_list_bytes);
    size_t used = 0;
    std::string cont;
    bool restarted = false;
    int pages = 0;
    int last_status = 200;
    while (true) {
      std::string p = base + params;
      if (!cont.empty()) {
        p += params.empty() ? sep : '&';
        p += "continue=" + url_encode(cont);
      }
      if (used >= budget) {
        ++stats.errors;
        Error e = make_error(ErrorKind::kOther, last_status, "ResponseTooLarge",
                             "list response exceeds the client limit of " + std::to_string(budget) +
                                 " bytes over all pages");
        e.warnings = std::move(warnings);
        return e;
      }
      Result r = request("GET", p, nullptr, nullptr, budget - used);
      if (!r.ok()) {
        if (r.error().http_status == 410 && !cont.empty() && !restarted) {
          // Continue token expired: restart the list once from a fresh snapshot.
          restarted = true;
          cont.clear();
          items = json::array();
          out = json::object();
          pages = 0;
          used = 0;
          continue;
        }
        if (r.error().reason == "ResponseTooLarge" && pages > 0) {
          r.error().message =
              detail::sanitize_utf8("list response exceeds the client limit of " +
                                        std::to_string(budget) + " bytes over all pages",
                                    kMaxMessageBytes);
        }
        add_warnings(r.error().warnings);
        r.error().warnings = std::move(warnings);
        return r;
      }
      used += last_body_bytes;
      Response& resp = r.value();
      add_warnings(resp.warnings);
      last_status = resp.http_status;
      if (!resp.body.is_object()) {
        ++stats.errors;
        return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                          "list response is not an object");
      }
      auto it = resp.body.find("items");
      if (it != resp.body.end() && !it->is_null() && !it->is_array()) {
        ++stats.errors;
        return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                          "list response has a malformed items field");
      }
      if (pages == 0) {
        for (const char* k : {"apiVersion", "kind"}) {
          auto f = resp.body.find(k);
          if (f != resp.body.end()) out[k] = *f;
        }
        json meta = json::object();
        auto m = resp.body.find("metadata");
        if (m != resp.body.end() && m->is_object()) {
          auto rv = m->find("resourceVersion");
          if (rv != m->end()) meta["resourceVersion"] = *rv;
        }
        out["metadata"] = std::move(meta);
      }
      if (it != resp.body.end() && it->is_array()) {
        for (auto& item : *it) items.push_back(std::move(item));
      }
      ++pages;
      std::string next;
      auto m = resp.body.find("metadata");
      if (m != resp.body.end() && m->is_object()) {
        auto c = m->find("continue");
        if (c != m->end() && c->is_string()) next = c->get<std::string>();
      }
      if (next.empty()) break;
      if (next == cont || pages >= kMaxListPages) {
        ++stats.errors;
        return make_error(ErrorKind::kOther, resp.http_status, "InvalidResponse",
                          "list pagination does not make progress");
      }
      cont = std::move(next);
    }
    out["items"] = std::move(items);
    Response resp;
    resp.http_status = last_status;
    resp.body = std::move(out);
    resp.warnings = std::move(warnings);
    return resp;
  }
};

namespace {

template <typename F>
Result guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    Error err;
    err.kind = ErrorKind::kOther;
    err.reason = "InternalError";
    err.message = detail::sanitize_utf8(redact(std::string("internal error: ") + e.what()), 512);
    return err;
  } catch (...) {
    Error err;
    err.kind = ErrorKind::kOther;
    err.reason = "InternalError";
    err.message = "internal error";
    return err;
  }
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

Client::Client(ClusterConfig cfg) : impl_(std::make_unique<Impl>(std::move(cfg))) {
  impl_->interrupted = &interrupted;
  impl_->may_resend = &may_resend;
}

Client::~Client() = default;

Result Client::get(const std::string& path) {
  return guarded([&] { return impl_->request("GET", path, nullptr, nullptr); });
}

Result Client::list(const std::string& collection_path, const std::string& label_selector,
                    const std::string& field_selector, int limit) {
  return guarded(
      [&] { return impl_->list(collection_path, label_selector, field_selector, limit); });
}

Result Client::create(const std::string& collection_path, const nlohmann::json& obj) {
  return guarded([&] {
    std::string body = dump(obj);
    return impl_->request("POST", collection_path, &body, "application/json");
  });
}

Result Client::merge_patch(const std::string& path, const nlohmann::json& patch) {
  return guarded([&] {
    std::string body = dump(patch);
    return impl_->request("PATCH", path, &body, "application/merge-patch+json");
  });
}

Result Client::put(const std::string& path, const nlohmann::json& obj) {
  return guarded([&] {
    std::string body = dump(obj);
    return impl_->request("PUT", path, &body, "application/json");
  });
}

Result Client::del(const std::string& path) {
  return guarded([&] { return impl_->request("DELETE", path, nullptr, nullptr); });
}

Result Client::del(const std::string& path, const nlohmann::json& options) {
  return guarded([&] {
    std::string body = dump(options);
    return impl_->request("DELETE", path, &body, "application/json");
  });
}

const Client::Stats& Client::stats() const {
  return impl_->stats;
}

void Client::reload(ClusterConfig cfg) {
  try {
    impl_->configure(std::move(cfg));
  } catch (...) {
    impl_->config_error = "reload failed";
  }
}

void Client::set_logger(std::shared_ptr<spdlog::logger> logger) {
  impl_->logger = std::move(logger);
}

void Client::set_observer(RequestObserver* observer, std::string cluster) {
  impl_->observer = observer;
  impl_->observer_cluster = std::move(cluster);
}

}  // namespace extsvc::kube
