// The public face of Client: the typed verbs, which never let an exception escape, and the
// lifecycle of the configuration and the libcurl handle. The work is in client_request.cpp
// (one call: checks, throttling, the 401 resend), client_transport.cpp (one HTTP attempt),
// client_token.cpp (the bearer token file) and client_list.cpp (pagination).
#include "kube/client.hpp"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "kube/detail/client_impl.hpp"
#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using nlohmann::json;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

namespace detail {

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

// Replaces every occurrence of `secret` in `s`.
void scrub(std::string& s, const std::string& secret) {
  if (secret.size() < 4) return;
  size_t pos = 0;
  while ((pos = s.find(secret, pos)) != std::string::npos) {
    s.replace(pos, secret.size(), "[REDACTED]");
    pos += 10;
  }
}

// The effective body limit for a configured value (0 = the hard ceiling).
size_t body_limit(size_t configured) {
  return configured == 0 ? kMaxResponseBytes : std::min(configured, kMaxResponseBytes);
}

}  // namespace detail

Client::Impl::Impl(ClusterConfig c) {
  configure(std::move(c));
}

Client::Impl::~Impl() {
  if (curl != nullptr) curl_easy_cleanup(curl);
}

void Client::Impl::configure(ClusterConfig c) {
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

spdlog::logger& Client::Impl::log() {
  if (logger) return *logger;
  return *spdlog::default_logger_raw();
}

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
  impl_->budget = &budget;
}

Client::~Client() = default;

BudgetScope::BudgetScope(Client* c, const Budget& b) : client_(c) {
  if (client_ == nullptr) return;
  saved_ = std::move(client_->budget);
  client_->budget = b;
}

BudgetScope::~BudgetScope() {
  if (client_ != nullptr) client_->budget = std::move(saved_);
}

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
    // the pooled connections were made under the old configuration
    impl_->own_multi.reset();
    impl_->fresh_connect = true;
  } catch (...) {
    impl_->config_error = "reload failed";
  }
}

void Client::use_multi(Multi* multi) {
  impl_->lent_multi = multi;
}

void Client::set_logger(std::shared_ptr<spdlog::logger> logger) {
  impl_->logger = std::move(logger);
}

void Client::set_observer(RequestObserver* observer, std::string cluster) {
  impl_->observer = observer;
  impl_->observer_cluster = std::move(cluster);
}

}  // namespace extsvc::kube
