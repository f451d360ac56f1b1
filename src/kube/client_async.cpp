// Asynchronous GETs on a Multi: the informers' LIST pages and WATCH streams. Same connection
// setup, credentials, observer and error mapping as the synchronous calls; the transfer runs
// inside Multi::pump() on the caller's thread.
#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/http_date.hpp"
#include "kube/client.hpp"
#include "kube/detail/callback_probe.hpp"
#include "kube/detail/client_impl.hpp"
#include "kube/detail/connection.hpp"
#include "kube/detail/internal.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {

using detail::make_error;

struct AsyncGet::State : Multi::Owner {
  Client::Impl* impl = nullptr;
  Multi* multi = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string url;
  std::string token;
  std::string verb;
  bool stream = false;
  bool raw_body = false;
  size_t limit = 0;
  std::string buffer;
  bool too_large = false;
  bool callback_failed = false;  // a header callback threw (out of memory): the transfer failed
  bool headers_done = false;
  bool reported = false;
  int status = 0;
  std::optional<double> retry_after;
  int64_t server_date = 0;      // the Date header (core::parse_imf_fixdate; 0: none)
  double date_received_at = 0;  // our wall clock when it arrived (seconds since the Unix epoch)
  bool finished = false;
  int curl_code = CURLE_OK;
  std::optional<Error> early_error;  // configuration or token: never reached the network
  char errbuf[CURL_ERROR_SIZE] = {};
  Client::Impl::Clock::time_point started;

  ~State() override {
    if (easy != nullptr) {
      if (!finished && multi != nullptr) multi->remove(easy);
      curl_easy_cleanup(easy);
    }
    if (headers != nullptr) curl_slist_free_all(headers);
    std::fill(token.begin(), token.end(), '\0');
  }

  void report(int http_status) {
    if (reported || impl == nullptr) return;
    reported = true;
    if (impl->observer == nullptr) return;
    RequestEvent ev;
    ev.cluster = impl->observer_cluster;
    ev.verb = verb;
    ev.http_status = http_status;
    ev.seconds = std::chrono::duration<double>(Client::Impl::Clock::now() - started).count();
    if (http_status != 0) {
      ev.server_date = server_date;
      ev.received_at = date_received_at;
    }
    impl->observer->on_request(ev);
  }

  void on_transfer_done(int code) override {
    finished = true;
    curl_code = code;
    long http = 0;
    if (code == CURLE_OK) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &http);
    if (status == 0) status = static_cast<int>(http);
    report(code == CURLE_OK ? status : 0);
    curl_off_t down = 0;
    curl_easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
    impl->stats.bytes_received += static_cast<uint64_t>(std::max<curl_off_t>(0, down));
    long connects = 0;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    impl->stats.connects += static_cast<uint64_t>(std::max(0L, connects));
    if (code != CURLE_OK || status < 200 || status >= 300) ++impl->stats.errors;
    if (status == 401) impl->token_stale = true;
  }
};

namespace {

size_t async_write(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* s = static_cast<AsyncGet::State*>(userdata);
  const size_t n = size * nmemb;
  if (n > s->limit || s->buffer.size() > s->limit - n) {
    s->too_large = true;
    return 0;
  }
  try {
    s->buffer.append(ptr, n);
  } catch (...) {
    s->too_large = true;
    return 0;
  }
  return n;
}

size_t async_header(char* ptr, size_t size, size_t nitems, void* userdata) {
  auto* s = static_cast<AsyncGet::State*>(userdata);
  const size_t n = size * nitems;
  try {
    detail::probe("header");
    std::string_view line(ptr, n);
    if (line == "\r\n" || line == "\n") {
      long code = 0;
      curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
      if (code >= 200) {
        s->status = static_cast<int>(code);
        s->headers_done = true;
        if (s->stream) s->report(s->status);  // a stream is reported when it starts
      }
    } else if (line.size() > 12 && strncasecmp(line.data(), "Retry-After:", 12) == 0) {
      std::string value(line.substr(12));
      value.erase(0, value.find_first_not_of(" \t"));
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
      s->retry_after = detail::parse_retry_after(value, std::time(nullptr));
    } else if (line.size() > 5 && strncasecmp(line.data(), "Date:", 5) == 0) {
      std::string_view value = line.substr(5);
      while (!value.empty() && (value.back() == '\r' || value.back() == '\n'))
        value.remove_suffix(1);
      const auto d = core::parse_imf_fixdate(value);
      s->server_date = d ? *d : 0;
      s->date_received_at =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    }
  } catch (...) {
    s->callback_failed = true;
    return 0;  // curl ends the transfer (CURLE_WRITE_ERROR)
  }
  return n;
}

}  // namespace

AsyncGet::AsyncGet(std::unique_ptr<State> s) : s_(std::move(s)) {}
AsyncGet::~AsyncGet() = default;

bool AsyncGet::done() const {
  return s_->early_error.has_value() || s_->finished;
}

int AsyncGet::http_status() const {
  return s_->status;
}

std::string AsyncGet::take() {
  std::string out;
  out.swap(s_->buffer);
  return out;
}

Result AsyncGet::result() {
  if (s_->early_error) return *s_->early_error;
  if (!s_->finished) return make_error(ErrorKind::kOther, 0, "InProgress", "transfer in progress");
  if (s_->callback_failed)
    return make_error(ErrorKind::kOther, 0, "InternalError",
                      "reading the response headers failed (out of memory)");
  if (s_->too_large)
    return make_error(
        ErrorKind::kOther, s_->status, "ResponseTooLarge",
        "response body exceeds the client limit of " + std::to_string(s_->limit) + " bytes");
  if (s_->curl_code != CURLE_OK) {
    // A stream that ran and then broke is still reported with its status.
    Error e = detail::transport_error(static_cast<CURLcode>(s_->curl_code), s_->errbuf, s_->token);
    e.http_status = s_->status >= 200 && s_->status < 300 ? 0 : s_->status;
    return e;
  }
  if (s_->status >= 200 && s_->status < 300) {
    Response r;
    r.http_status = s_->status;
    if (!s_->stream && !s_->raw_body &&
        s_->buffer.find_first_not_of(" \t\r\n") != std::string::npos) {
      r.body = nlohmann::json::parse(s_->buffer, nullptr, false);
      if (r.body.is_discarded())
        return make_error(ErrorKind::kOther, s_->status, "InvalidResponse",
                          "the server returned HTTP " + std::to_string(s_->status) +
                              " with a body that is not valid JSON");
    }
    return r;
  }
  Error e = detail::error_from_response(s_->status, s_->buffer, s_->retry_after);
  detail::scrub(e.message, s_->token);
  return e;
}

void Client::token_rejected() {
  impl_->token_stale = true;
}

std::unique_ptr<AsyncGet> Client::get_async(Multi& multi, const std::string& path,
                                            const AsyncOptions& options) {
  auto s = std::make_unique<AsyncGet::State>();
  Impl& impl = *impl_;
  s->impl = &impl;
  s->verb = options.verb != nullptr ? options.verb : "GET";
  s->stream = options.stream;
  s->raw_body = options.raw_body;
  s->limit = detail::body_limit(options.body_limit != 0 ? options.body_limit
                                : options.list_limit    ? impl.cfg.max_list_bytes
                                                        : impl.cfg.max_response_bytes);
  s->started = Impl::Clock::now();
  if (impl.config_error) {
    s->early_error = make_error(ErrorKind::kOther, 0, "InvalidConfig",
                                "invalid cluster configuration: " + *impl.config_error);
    return std::unique_ptr<AsyncGet>(new AsyncGet(std::move(s)));
  }
  auto tok = impl.current_token(impl.token_stale);
  impl.token_stale = false;
  if (auto* e = std::get_if<Error>(&tok)) {
    s->early_error = *e;
    return std::unique_ptr<AsyncGet>(new AsyncGet(std::move(s)));
  }
  s->token = std::get<std::string>(std::move(tok));
  s->easy = curl_easy_init();
  if (s->easy == nullptr) {
    s->early_error = make_error(ErrorKind::kOther, 0, "InternalError", "curl_easy_init failed");
    return std::unique_ptr<AsyncGet>(new AsyncGet(std::move(s)));
  }
  s->url = impl.cfg.server + path;
  CURL* c = s->easy;
  curl_easy_setopt(c, CURLOPT_URL, s->url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, s->errbuf);
  curl_easy_setopt(c, CURLOPT_PRIVATE, s.get());
  detail::apply_connection_options(c, impl.cfg);
  if (options.stream) {
    // A watch lasts as long as the server's timeoutSeconds; a silent peer is noticed by the
    // low-speed limit (bookmarks keep a healthy stream above it) and TCP keep-alive.
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    if (options.low_speed_time_s > 0) {
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options.low_speed_time_s);
    }
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 10L);
  } else {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, impl.cfg.timeout_ms);
  }
  curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, async_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, s.get());
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, async_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, s.get());
  s->headers = detail::request_headers(s->token, nullptr);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, s->headers);
  ++impl.stats.requests;
  if (!multi.add(c, s.get())) {
    s->early_error = make_error(ErrorKind::kOther, 0, "InternalError", "curl_multi_add failed");
    return std::unique_ptr<AsyncGet>(new AsyncGet(std::move(s)));
  }
  s->multi = &multi;
  if (impl.log().should_log(spdlog::level::debug))
    impl.log().debug("kube {} {} started", s->verb, redact(path));
  return std::unique_ptr<AsyncGet>(new AsyncGet(std::move(s)));
}

}  // namespace extsvc::kube
