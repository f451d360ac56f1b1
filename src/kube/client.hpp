// Minimal synchronous Kubernetes REST client (libcurl) for a single-threaded PostgreSQL
// background worker. No public function throws, except Result::value()/error() when called on the
// wrong alternative (documented precondition, like std::get).
//
// Secrets (bearer token, Authorization header, client key data) are never logged and never put
// into Error::message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kube/budget.hpp"
#include "kube/config.hpp"
#include "kube/error.hpp"
#include "kube/observer.hpp"

namespace spdlog {
class logger;
}

namespace extsvc::kube {

struct Response {
  int http_status = 0;
  nlohmann::json body;  // parsed JSON body; null for an empty body
  // Values of the response's `Warning` headers (RFC 7234 / Kubernetes API warnings such as
  // deprecations or unknown fields under fieldValidation=Warn), as received, in order. For list()
  // the warnings of every page, without repeats. At most kMaxWarnings are kept.
  std::vector<std::string> warnings;
};

// Either a Response (HTTP 2xx) or an Error.
class Result {
 public:
  Result(Response r) : v_(std::move(r)) {}  // NOLINT(google-explicit-constructor)
  Result(Error e) : v_(std::move(e)) {}     // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  // Preconditions: ok() for value(), !ok() for error(); otherwise std::bad_variant_access.
  const Response& value() const { return std::get<Response>(v_); }
  Response& value() { return std::get<Response>(v_); }
  const Error& error() const { return std::get<Error>(v_); }
  Error& error() { return std::get<Error>(v_); }
  // ErrorKind::kNone when ok().
  ErrorKind kind() const { return ok() ? ErrorKind::kNone : error().kind; }

 private:
  std::variant<Response, Error> v_;
};

class Multi;
class AsyncGet;

class Client {
 public:
  struct Stats {
    uint64_t requests = 0;        // HTTP requests attempted (including 401 retries, list pages)
    uint64_t errors = 0;          // requests that ended in an Error
    uint64_t bytes_sent = 0;      // request bodies
    uint64_t bytes_received = 0;  // response bodies
    uint64_t connects = 0;        // new TCP connections (CURLINFO_NUM_CONNECTS)
    double throttled_ms = 0;      // time spent waiting in the client-side token bucket
    uint64_t fenced = 0;          // writes not sent because the budget's fence said no
  };

  // An invalid configuration does not throw: every call then returns
  // Error{kOther, 0, "InvalidConfig", <validate() text>}.
  explicit Client(ClusterConfig cfg);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) = delete;
  Client& operator=(Client&&) = delete;

  // `path` starts with "/" (e.g. "/api/v1/nodes/x") and may carry a query string.
  Result get(const std::string& path);
  // Follows `continue` pages; returns {"apiVersion","kind","items":[...all pages...],
  // "metadata":{"resourceVersion": <first page's>}}. limit <= 0 = no limit parameter.
  // A 410 Gone on a continuation page restarts the list once.
  Result list(const std::string& collection_path, const std::string& label_selector,
              const std::string& field_selector = "", int limit = 500);
  Result create(const std::string& collection_path, const nlohmann::json& obj);  // POST
  // PATCH with Content-Type application/merge-patch+json.
  Result merge_patch(const std::string& path, const nlohmann::json& patch);
  Result put(const std::string& path, const nlohmann::json& obj);
  Result del(const std::string& path);
  // DELETE with a DeleteOptions body, e.g. {"preconditions":{"uid":...}}: the API server refuses
  // with 409 Conflict when the precondition no longer holds.
  Result del(const std::string& path, const nlohmann::json& options);

  // Starts a GET of `path` on `multi` (see AsyncGet) and returns at once; the transfer makes
  // progress inside multi.pump(). Not throttled by the token bucket: the informers make a few
  // long-running requests, not a stream of calls. The AsyncGet must not outlive this client or
  // the multi. Never null; an invalid configuration or an unreadable token gives a transfer that
  // is already done with that error.
  struct AsyncOptions {
    const char* verb = "LIST";  // what the observer is told: LIST (a page) or WATCH (a stream)
    bool stream = false;        // a watch: the body is taken as it arrives, no total timeout
    long low_speed_time_s = 0;  // stream only: give up when no byte arrived for this long
    size_t body_limit = 0;      // bytes buffered and not taken; 0 = max_response_bytes
    bool raw_body = false;      // result() does not parse a 2xx body: the caller take()s it
    bool list_limit = false;    // body_limit 0 means max_list_bytes instead
  };
  std::unique_ptr<AsyncGet> get_async(Multi& multi, const std::string& path,
                                      const AsyncOptions& options);
  // The server refused the token (401 on an asynchronous request): re-read the token file before
  // the next request.
  void token_rejected();

  // Every synchronous call (get, list, the writes) runs as one transfer on a Multi and waits
  // through budget.wait_on() until it ends, pumping that multi: the other transfers on it (the
  // watches) make progress meanwhile. `multi` (not owned) must outlive its use; nullptr (the
  // default) = a multi of the client's own.
  void use_multi(Multi* multi);

  const Stats& stats() const;
  // Replaces the configuration (e.g. on SIGHUP): drops pooled connections and the token cache.
  void reload(ClusterConfig cfg);
  // Logger for debug request lines and warnings; nullptr (default) = spdlog::default_logger().
  void set_logger(std::shared_ptr<spdlog::logger> logger);
  // Reports every HTTP attempt to `observer` (not owned; nullptr = none) under the label
  // `cluster`. Requests that never reach the network (invalid configuration, unreadable token,
  // interrupted while throttled) are not attempts and are not reported.
  void set_observer(RequestObserver* observer, std::string cluster);

  // What the calls may spend (kube/budget.hpp); the default is unbounded and never stops. A pass
  // runs its calls under its own with BudgetScope.
  // - stop(): checked before a call, between the token bucket's waits (<= 100 ms each, through
  //   wait(), so a latch ends them) and between the waits of a transfer (<= 100 ms each, through
  //   wait_on()); when it says yes the call ends with Error{kTransport, 0, "Interrupted",
  //   "interrupted"}.
  // - may_write(): consulted right before every write (POST, PUT, PATCH, DELETE) is sent, after
  //   the token bucket granted it: a caller's fence checked before the call cannot see a lease
  //   lost while the call waited for the bucket. When it says no (or throws) nothing is sent and
  //   the call returns Error{kOther, 0, "Fenced", ...}. Under a bounded budget (a lease) it also
  //   guards the single resend after a 401 (token rotation), reads included: the lease allowed
  //   one call, and a second one might land after it is gone; then the 401 answer is returned.
  Budget budget;

 private:
  friend class AsyncGet;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs the calls of one scope (a reconciler's pass) under `b` and gives the client back its budget
// at the end, also when the pass throws. A null client is left alone.
class BudgetScope {
 public:
  BudgetScope(Client* c, const Budget& b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Client* client_;
  Budget saved_;
};

// One asynchronous GET (a LIST page, or a WATCH stream) on a Multi. Destroying it ends the
// transfer.
class AsyncGet {
 public:
  ~AsyncGet();
  AsyncGet(const AsyncGet&) = delete;
  AsyncGet& operator=(const AsyncGet&) = delete;

  bool done() const;
  // 0 until the response headers arrived.
  int http_status() const;
  // Body bytes received and not yet taken. A stream's caller takes them after every pump();
  // a LIST page's caller reads them once done.
  std::string take();
  // Once done: the response (2xx; body parsed as JSON unless stream) or the Error (transport,
  // timeout, HTTP error with its Status body, body over the limit).
  Result result();

  struct State;

 private:
  friend class Client;
  explicit AsyncGet(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// Path helpers (segments are url_encode()d). An empty namespace means all namespaces (collection
// paths only).
std::string dpuservices_path(const std::string& ns, const std::string& name = "");
std::string dpudevices_path(const std::string& ns, const std::string& name = "");
// Argo CD's Applications (argoproj.io/v1alpha1), which DPF writes in its own namespace.
std::string applications_path(const std::string& ns, const std::string& name = "");
std::string dpus_path(const std::string& ns, const std::string& name = "");
std::string nodes_path(const std::string& name = "");
std::string pods_path(const std::string& ns = "");
std::string daemonsets_path(const std::string& ns, const std::string& name = "");
std::string controllerrevisions_path(const std::string& ns);
std::string events_path(const std::string& ns);
// Percent-encodes everything except RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~).
std::string url_encode(std::string_view s);

}  // namespace extsvc::kube
