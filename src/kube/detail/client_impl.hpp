// Client::Impl and the helpers shared by the translation units of the client (client*.cpp):
// one per concern, so that each stays small. Not a stable API.
#pragma once

#include <curl/curl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kube/client.hpp"
#include "kube/detail/internal.hpp"
#include "kube/multi.hpp"

namespace extsvc::kube {

namespace detail {

// Hard ceiling; ClusterConfig::max_response_bytes / max_list_bytes are the working limits.
inline constexpr size_t kMaxResponseBytes = size_t{512} << 20;

Error make_error(ErrorKind kind, int status, std::string reason, std::string message);
Error interrupted_error();
void scrub(std::string& s, const std::string& secret);
size_t body_limit(size_t configured);

}  // namespace detail

struct Client::Impl {
  using Clock = std::chrono::steady_clock;

  ClusterConfig cfg;
  std::optional<std::string> config_error;
  CURL* curl = nullptr;  // the synchronous calls', one at a time, on multi()
  // The multi the synchronous calls run on: the host's (the watcher's cache, so that the watch
  // streams flow while a write is in flight; not owned) or, when none is lent, the client's own.
  Multi* lent_multi = nullptr;
  std::unique_ptr<Multi> own_multi;
  bool fresh_connect = false;  // after a reload on a lent multi: its pooled connections predate it
  Stats stats;
  std::shared_ptr<spdlog::logger> logger;
  const Budget* budget = nullptr;  // the Client's
  char errbuf[CURL_ERROR_SIZE] = {};
  size_t last_body_bytes = 0;  // decoded body size of the last response
  RequestObserver* observer = nullptr;
  std::string observer_cluster;
  bool listing = false;      // inside list(): attempts are reported as verb LIST
  bool token_stale = false;  // an asynchronous request got 401: re-read before the next one

  // Token file cache.
  std::string file_token;
  bool file_token_loaded = false;
  struct stat file_stat = {};
  Clock::time_point token_checked{};
  // One WARNING per outage of the token file (the client re-checks it every second).
  bool token_warned = false;

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

  explicit Impl(ClusterConfig c);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Defined in client.cpp.
  void configure(ClusterConfig c);
  spdlog::logger& log();

  // Defined in client_token.cpp.
  std::variant<std::string, Error> current_token(bool force_reread);
  std::variant<std::string, Error> token_unavailable(const std::string& why);

  // Defined in client_transport.cpp.
  Multi& multi();
  Raw perform(const char* method, const std::string& path, const std::string* body,
              const char* content_type, const std::string& token, size_t limit);
  std::vector<std::string> warning_headers();

  // Defined in client_request.cpp.
  // the budget's fence for a request of `method` (reads are always allowed)
  bool write_allowed(const char* method);
  bool resend_allowed();
  bool throttle();
  Result to_result(Raw&& raw, const std::string& token);
  Result request(const char* method, const std::string& path, const std::string* body,
                 const char* content_type, size_t limit = 0);

  // Defined in client_list.cpp.
  Result list(const std::string& collection_path, const std::string& label_selector,
              const std::string& field_selector, int limit);
};

}  // namespace extsvc::kube
