#include "kube/reflector.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/json_access.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {

namespace {

using nlohmann::json;

// client-go's reflector backoff: 800 ms doubling to 30 s, jitter (capped), reset after a healthy
// minute.
constexpr auto kBackoffFirst = std::chrono::milliseconds(800);
constexpr auto kBackoffCap = std::chrono::milliseconds(30000);
constexpr auto kHealthy = std::chrono::seconds(60);
// One watch event line (a whole object) and the bytes buffered between two pumps.
constexpr size_t kMaxEventBytes = size_t{16} << 20;

void append_param(std::string& q, const char* key, const std::string& value) {
  if (value.empty()) return;
  q += q.empty() ? '?' : '&';
  q += key;
  q += '=';
  q += url_encode(value);
}

}  // namespace

Reflector::Reflector(Client& client, Multi& multi, ReflectorSpec spec, ReflectorHandler& handler,
                     uint64_t seed)
    : client_(client),
      multi_(multi),
      spec_(std::move(spec)),
      handler_(handler),
      rng_(seed != 0 ? seed : std::random_device{}()) {
  start_list("initial");
}

Reflector::~Reflector() = default;

std::string Reflector::query(bool watch) {
  std::string q;
  if (watch) {
    q = "?watch=true";
    append_param(q, "resourceVersion", last_rv_);
    q += "&allowWatchBookmarks=true";
    const int base = std::max(1, spec_.watch_timeout_s);
    std::uniform_int_distribution<int> jitter(0, base - 1);
    q += "&timeoutSeconds=" + std::to_string(base + jitter(rng_));
  } else if (spec_.page_limit > 0 && !unpaged_) {
    q = "?limit=" + std::to_string(spec_.page_limit);
  }
  append_param(q, "labelSelector", spec_.label_selector);
  append_param(q, "fieldSelector", spec_.field_selector);
  if (!watch) append_param(q, "continue", continue_);
  return q;
}

void Reflector::start_list(const char* why) {
  transfer_.reset();
  if (stream_open_) current_at_ = Clock::now();
  stream_open_ = false;
  decoder_.reset();
  phase_ = Phase::kListing;
  continue_.clear();
  list_rv_.clear();
  list_begun_ = false;
  list_bytes_ = 0;
  list_started_ = Clock::now();
  relist_requested_ = false;
  spdlog::debug("informer {}: listing ({})", spec_.name, why);
  start_page();
}

void Reflector::start_page() {
  Client::AsyncOptions o;
  o.verb = "LIST";
  o.raw_body = true;
  o.list_limit = true;
  transfer_ = client_.get_async(multi_, spec_.path + query(false), o);
}

void Reflector::start_watch() {
  transfer_.reset();
  decoder_ = std::make_unique<WatchDecoder>(kMaxEventBytes);
  phase_ = Phase::kWatching;
  stream_open_ = false;
  watch_started_ = Clock::now();
  ++stats_.watches;
  Client::AsyncOptions o;
  o.verb = "WATCH";
  o.stream = true;
  o.low_speed_time_s = spec_.silence_limit_s;
  o.body_limit = kMaxEventBytes;
  transfer_ = client_.get_async(multi_, spec_.path + query(true), o);
}

void Reflector::backoff(const std::string& why, std::optional<double> retry_after_s) {
  ++stats_.errors;
  last_error_ = why;
  const bool listing = phase_ == Phase::kListing;
  transfer_.reset();
  decoder_.reset();
  if (stream_open_) current_at_ = Clock::now();
  stream_open_ = false;
  relist_after_backoff_ = listing || relist_after_backoff_;
  phase_ = Phase::kBackoff;
  backoff_step_ = backoff_step_.count() == 0
                      ? std::chrono::duration_cast<std::chrono::milliseconds>(kBackoffFirst)
                      : std::min<std::chrono::milliseconds>(backoff_step_ * 2, kBackoffCap);
  std::uniform_int_distribution<long> jitter(0, backoff_step_.count());
  // jittered, but never beyond the cap: a cluster back from an outage is seen within 30 s
  auto wait = std::min<std::chrono::milliseconds>(
      backoff_step_ + std::chrono::milliseconds(jitter(rng_)),
      std::chrono::duration_cast<std::chrono::milliseconds>(kBackoffCap));
  if (retry_after_s && *retry_after_s > 0) {
    const auto server = std::chrono::milliseconds(static_cast<long>(
        std::min(*retry_after_s, std::chrono::duration<double>(kBackoffCap).count()) * 1000));
    wait = std::max(wait, server);
  }
  backoff_until_ = Clock::now() + wait;
  spdlog::debug("informer {}: {}; retrying in {} ms", spec_.name, why, wait.count());
}

long Reflector::next_step_in() const {
  if (phase_ != Phase::kBackoff) return -1;
  return wait_ms_until(backoff_until_, Clock::now());  // rounded up: a wait of 0 would spin
}

Reflector::Clock::time_point Reflector::request_relist() {
  switch (phase_) {
    case Phase::kListing:
      return list_started_;  // the list under way is as good
    case Phase::kWatching:
      start_list("resync");
      return list_started_;
    case Phase::kBackoff:
      relist_requested_ = true;
      break;
  }
  return Clock::now();
}

bool Reflector::current() const {
  return phase_ == Phase::kWatching && stream_open_;
}

std::optional<Reflector::Clock::time_point> Reflector::current_at() const {
  if (current()) return Clock::now();
  return current_at_;
}

void Reflector::step() {
  if (phase_ == Phase::kBackoff) {
    if (Clock::now() < backoff_until_) return;
    if (relist_after_backoff_ || relist_requested_ || !synced_) {
      relist_after_backoff_ = false;
      start_list(relist_requested_ ? "resync" : "retry");
    } else {
      start_watch();
    }
    return;
  }
  if (!transfer_) return;
  if (phase_ == Phase::kListing) {
    if (transfer_->done()) on_page_done();
    return;
  }
  on_watch_data();
  if (phase_ == Phase::kWatching && transfer_ && transfer_->done()) on_watch_done();
}

void Reflector::on_page_done() {
  Result r = transfer_->result();
  if (!r.ok()) {
    const Error& e = r.error();
    if (e.http_status == 410 && !continue_.empty()) {
      // the continue token expired (compaction): as client-go's pager (FullListIfExpired), the
      // list starts over in one page, which cannot expire again
      ++stats_.expired;
      spdlog::info("informer {}: continue token expired; listing again in one page", spec_.name);
      unpaged_ = true;
      start_list("continue expired");
      return;
    }
    if (e.http_status == 401) client_.token_rejected();
    backoff("LIST failed: " + describe(e), e.retry_after_s);
    return;
  }
  std::string body = transfer_->take();
  transfer_.reset();
  list_bytes_ += body.size();
  ++stats_.list_pages;
  std::string why;
  auto page = parse_list_page(body, &why);
  body.clear();
  body.shrink_to_fit();
  if (!page) {
    backoff("LIST answered 2xx but " + why);
    return;
  }
  const json& md = (*page)["metadata"];
  if (continue_.empty()) list_rv_ = core::json_text_at(md, {"resourceVersion"});
  if (!list_begun_) {
    list_begun_ = true;
    handler_.on_list_begin();
  }
  for (const auto& item : (*page)["items"])
    if (item.is_object()) handler_.on_list_item(item);
  continue_ = core::json_text_at(md, {"continue"});
  if (!continue_.empty()) {
    start_page();
    return;
  }
  // complete: the handler holds the state at list_rv_
  last_rv_ = list_rv_;
  synced_ = true;
  unpaged_ = false;
  relist_after_backoff_ = false;
  current_at_ = Clock::now();
  list_started_done_ = list_started_;
  ++stats_.lists;
  backoff_step_ = std::chrono::milliseconds(0);
  handler_.on_list_end();
  start_watch();
}

void Reflector::on_watch_data() {
  if (!transfer_ || transfer_->http_status() != 200) return;  // an error body waits for done
  stream_open_ = true;
  current_at_ = Clock::now();
  if (Clock::now() - watch_started_ >= kHealthy) backoff_step_ = std::chrono::milliseconds(0);
  const std::string bytes = transfer_->take();
  if (bytes.empty()) return;
  std::vector<WatchEvent> events;
  decoder_->feed(bytes, events);
  for (auto& ev : events) {
    switch (ev.type) {
      case WatchEventType::kAdded:
      case WatchEventType::kModified:
      case WatchEventType::kDeleted: {
        std::string rv = resource_version(ev.object);
        if (!rv.empty()) last_rv_ = std::move(rv);
        ++stats_.events;
        handler_.on_event(ev.type, ev.object);
        break;
      }
      case WatchEventType::kBookmark: {
        std::string rv = resource_version(ev.object);
        if (!rv.empty()) last_rv_ = std::move(rv);
        ++stats_.bookmarks;
        break;
      }
      case WatchEventType::kError: {
        const json& code = core::json_at(ev.object, {"code"});
        const std::string message = core::json_text_at(ev.object, {"message"});
        if (code.is_number_integer() && code.get<int>() == 410) {
          ++stats_.expired;
          spdlog::info("informer {}: watch expired ({}); listing again", spec_.name,
                       redact(message.substr(0, 200)));
          start_list("expired");
        } else {
          backoff("watch ERROR event: " + redact(message.substr(0, 300)));
        }
        return;
      }
    }
  }
  if (decoder_->error()) backoff("watch stream: " + *decoder_->error());
}

void Reflector::on_watch_done() {
  Result r = transfer_->result();
  const auto lasted = Clock::now() - watch_started_;
  if (r.ok()) {
    // the server ended the stream (timeoutSeconds): watch again from where it left off
    transfer_.reset();
    if (stream_open_) current_at_ = Clock::now();
    stream_open_ = false;
    if (lasted < std::chrono::seconds(1)) {
      backoff("the watch stream ended at once");
      return;
    }
    start_watch();
    return;
  }
  const Error& e = r.error();
  if (e.http_status == 410) {
    ++stats_.expired;
    start_list("expired");
    return;
  }
  if (e.http_status == 401) client_.token_rejected();
  backoff("WATCH failed: " + describe(e), e.retry_after_s);
}

}  // namespace extsvc::kube
