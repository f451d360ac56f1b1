// One HTTP attempt with libcurl: TLS and credentials, the bounded response body, the transfer on
// a Multi waited for through the budget (a stop ends it), statistics and the observer, and the
// mapping of libcurl failures to Error kinds.
#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/http_date.hpp"
#include "kube/detail/client_impl.hpp"
#include "kube/detail/connection.hpp"
#include "kube/detail/internal.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {

namespace {

using detail::interrupted_error;
using detail::kMaxResponseBytes;
using detail::make_error;
using detail::scrub;

struct Transfer : Multi::Owner {
  std::string body;
  size_t limit = kMaxResponseBytes;
  bool too_large = false;
  const Budget* budget = nullptr;
  bool was_interrupted = false;
  bool done = false;
  int code = CURLE_OK;
  std::chrono::system_clock::time_point handed{};  // the first pump after the add
  void on_transfer_done(int curl_code) override {
    done = true;
    code = curl_code;
  }
};

// At most this long between two looks at the budget's stop(), whatever the wait function does.
constexpr auto kMaxWaitSlice = std::chrono::milliseconds(100);

// Runs the prepared easy handle on `multi` until it ends, waiting through the budget (in the
// worker: the latch, postmaster death and the multi's sockets) and pumping the multi, which moves
// its other transfers too. A stop removes the transfer: it ends as interrupted.
CURLcode run_on(Multi& multi, CURL* curl, Transfer& t, const Budget& budget) {
  if (!multi.add(curl, &t)) return CURLE_FAILED_INIT;
  // curl starts a transfer at its first timer, due at once after the add: pumping before the
  // first wait sends the request on a kept connection without one (issue 26, part 4: the
  // worker's wait builds a wait set each time)
  bool first = true;
  while (!t.done) {
    if (budget.stop()) {
      multi.remove(curl);
      t.was_interrupted = true;
      return CURLE_ABORTED_BY_CALLBACK;
    }
    if (!first) budget.wait_on(multi, kMaxWaitSlice);
    if (first) t.handed = std::chrono::system_clock::now();
    first = false;
    multi.pump();
  }
  return static_cast<CURLcode>(t.code);
}

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
  // Budget::stop() catches what its check throws: nothing unwinds through libcurl
  if (t->budget != nullptr && t->budget->stop()) {
    t->was_interrupted = true;
    return 1;
  }
  return 0;
}

}  // namespace

Multi& Client::Impl::multi() {
  if (lent_multi != nullptr) return *lent_multi;
  if (!own_multi) own_multi = std::make_unique<Multi>();
  return *own_multi;
}

Client::Impl::Raw Client::Impl::perform(const char* method, const std::string& path,
                                        const std::string* body, const char* content_type,
                                        const std::string& token, size_t limit) {
  Raw raw;
  Transfer t;
  t.limit = limit;
  t.budget = budget;
  const std::string url = cfg.server + path;
  curl_easy_reset(curl);
  errbuf[0] = '\0';
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  detail::apply_connection_options(curl, cfg);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, cfg.timeout_ms);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  if (fresh_connect) {
    curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
    fresh_connect = false;
  }
  struct curl_slist* headers = detail::request_headers(token, content_type);
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
  const auto wall_start = std::chrono::system_clock::now();
  CURLcode rc = run_on(multi(), curl, t, *budget);
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
    const double wall_start_s =
        std::chrono::duration<double>(wall_start.time_since_epoch()).count();
    if (t.handed != std::chrono::system_clock::time_point{})
      ev.sent_at = std::chrono::duration<double>(t.handed.time_since_epoch()).count();
    struct curl_header* date = nullptr;
    if (code != 0 && curl_easy_header(curl, "Date", 0, CURLH_HEADER, -1, &date) == CURLHE_OK &&
        date != nullptr && date->value != nullptr) {
      if (const auto d = core::parse_imf_fixdate(date->value)) {
        // the headers arrived when the first byte did (time since the start of the transfer)
        curl_off_t first_byte_us = 0;
        curl_easy_getinfo(curl, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
        ev.server_date = *d;
        ev.received_at = wall_start_s + static_cast<double>(first_byte_us) / 1e6;
      }
    }
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
      raw.error = detail::transport_error(rc, errbuf, token);
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
  if (curl_easy_header(curl, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK && h != nullptr &&
      h->value != nullptr) {
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
std::vector<std::string> Client::Impl::warning_headers() {
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

}  // namespace extsvc::kube
