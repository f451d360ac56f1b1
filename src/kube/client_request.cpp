// One call as the caller sees it: configuration and path checks, the client-side token bucket,
// the single resend after a 401 with a rotated token, and the mapping of the answer to a Result.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kube/detail/client_impl.hpp"
#include "kube/detail/internal.hpp"

namespace extsvc::kube {

namespace {

using detail::body_limit;
using detail::interrupted_error;
using detail::make_error;
using detail::scrub;
using nlohmann::json;

constexpr auto kMaxSleepSlice = std::chrono::milliseconds(100);

}  // namespace

// A throwing fence answers "no" (Budget::may_write): a write is never sent on doubt.
bool Client::Impl::write_allowed(const char* method) {
  if (std::strcmp(method, "GET") == 0) return true;
  return budget->may_write();
}

// A second call after a 401: under a lease (a bounded budget) it must fit the lease like the
// first, reads included; without one only the write fence applies, when the write leaves.
bool Client::Impl::resend_allowed() {
  return !budget->bounded() || budget->may_write();
}

// Blocks until the token bucket grants a request, waiting through the budget in slices so that a
// latch (SIGTERM, postmaster death) ends the wait at once. False when the budget says stop.
bool Client::Impl::throttle() {
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
    if (budget->stop()) {
      stats.throttled_ms += std::chrono::duration<double, std::milli>(now - start).count();
      return false;
    }
    auto need = std::chrono::duration<double>((1.0 - bucket) / cfg.qps);
    auto slice = std::min<Clock::duration>(
        std::chrono::duration_cast<Clock::duration>(need) + std::chrono::microseconds(50),
        kMaxSleepSlice);
    budget->wait(slice);
    waited = true;
  }
  if (waited) {
    stats.throttled_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  return true;
}

Result Client::Impl::to_result(Raw&& raw, const std::string& token) {
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
Result Client::Impl::request(const char* method, const std::string& path, const std::string* body,
                             const char* content_type, size_t limit) {
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
  if (budget->stop()) return interrupted_error();
  auto tok = current_token(false);
  if (auto* e = std::get_if<Error>(&tok)) {
    ++stats.errors;
    return *e;
  }
  std::string token = std::get<std::string>(std::move(tok));
  if (!throttle()) return interrupted_error();
  if (!write_allowed(method)) {
    ++stats.fenced;
    return make_error(ErrorKind::kOther, 0, "Fenced",
                      std::string("not sent: the write fence closed before ") + method + " " +
                          redact(path) + " (the lease can no longer cover the call)");
  }
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
      if (!write_allowed(method)) {
        ++stats.fenced;
        return to_result(std::move(raw), token);
      }
      raw = perform(method, path, body, content_type, token, limit);
    }
  }
  return to_result(std::move(raw), token);
}

}  // namespace extsvc::kube
