// One informer's protocol half, as client-go's Reflector: LIST (paged) then WATCH from the
// list's resourceVersion with bookmarks; on a stream that ends, watch again from the last
// resourceVersion seen; on 410 Gone (an expired resourceVersion or continue token), list again;
// on errors, back off (0.8 s doubling, jittered, at most 30 s) and retry; a periodic re-list on
// request (the resync's safety net). It stores nothing: every object goes to the handler, which
// keeps what it needs (the typed caches of src/controller). Runs on a Multi, on the caller's
// thread: step() after every Multi::pump().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "kube/client.hpp"
#include "kube/watch_decoder.hpp"

namespace extsvc::kube {

class ReflectorHandler {
 public:
  virtual ~ReflectorHandler() = default;
  // A (re-)list starts delivering: every object of it comes through on_list_item, then
  // on_list_end, after which objects not delivered since on_list_begin are gone.
  virtual void on_list_begin() = 0;
  virtual void on_list_item(const nlohmann::json& object) = 0;
  virtual void on_list_end() = 0;
  // ADDED, MODIFIED or DELETED from the watch (a DELETED may also mean "left the selector").
  virtual void on_event(WatchEventType type, const nlohmann::json& object) = 0;
};

struct ReflectorSpec {
  std::string name;     // for logs and metrics: "dpuservices", "pods", ...
  std::string cluster;  // "management" or "dpu"
  std::string path;     // collection path, e.g. /api/v1/namespaces/ns/pods
  std::string label_selector;
  std::string field_selector;
  int page_limit = 500;
  // Each watch asks for timeoutSeconds drawn from [watch_timeout_s, 2 * watch_timeout_s), as
  // client-go does, so watches of many clients do not end together.
  int watch_timeout_s = 300;
  // A stream silent for this long is given up and re-established (bookmarks keep a healthy one
  // talking). 0 = never.
  int silence_limit_s = 150;
};

class Reflector {
 public:
  using Clock = std::chrono::steady_clock;

  struct Stats {
    uint64_t lists = 0;  // completed lists (initial, after 410, resync, after errors)
    uint64_t list_pages = 0;
    uint64_t watches = 0;  // watch requests started
    uint64_t events = 0;   // ADDED/MODIFIED/DELETED received
    uint64_t bookmarks = 0;
    uint64_t expired = 0;  // 410 Gone: resourceVersion or continue token too old
    uint64_t errors = 0;   // failed requests and broken streams
  };
  enum class Phase { kListing, kWatching, kBackoff };

  Reflector(Client& client, Multi& multi, ReflectorSpec spec, ReflectorHandler& handler,
            uint64_t seed = 0);
  ~Reflector();
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Consumes what the transfers received and advances the state machine. Call after every
  // Multi::pump(), and when next_step_in() has elapsed.
  void step();
  // Milliseconds until step() has timed work (the end of a backoff), -1 when none.
  long next_step_in() const;
  // List again now (the periodic safety net); a list already running counts. Returns the start
  // time the list that answers the request has (or will have at least): a resync waits until
  // last_list_started() reaches it.
  Clock::time_point request_relist();

  // A list has completed since construction: the handler holds the cluster's state.
  bool synced() const { return synced_; }
  // A watch stream is open (HTTP 200): the handler's state is the server's, up to the stream's
  // latency.
  bool current() const;
  // The last moment the handler's state was known to be the server's: now while current(),
  // otherwise when the stream was last open (or the last list ended); nullopt before any list.
  std::optional<Clock::time_point> current_at() const;
  // The list that completed last started at this time (a resync waits for a list that started
  // after it asked).
  std::optional<Clock::time_point> last_list_started() const { return list_started_done_; }

  Phase phase() const { return phase_; }
  const std::string& last_rv() const { return last_rv_; }
  const std::string& last_error() const { return last_error_; }
  const Stats& stats() const { return stats_; }
  const ReflectorSpec& spec() const { return spec_; }

 private:
  void start_list(const char* why);
  void start_page();
  void start_watch();
  void backoff(const std::string& why, std::optional<double> retry_after_s = std::nullopt);
  void on_page_done();
  void on_watch_data();
  void on_watch_done();
  std::string query(bool watch);

  Client& client_;
  Multi& multi_;
  ReflectorSpec spec_;
  ReflectorHandler& handler_;
  std::mt19937_64 rng_;

  Phase phase_ = Phase::kListing;
  std::unique_ptr<AsyncGet> transfer_;
  std::string continue_;
  bool unpaged_ = false;  // the list after an expired continue token asks for one page
  std::string list_rv_;
  bool list_begun_ = false;
  size_t list_bytes_ = 0;
  Clock::time_point list_started_{};
  std::optional<Clock::time_point> list_started_done_;
  bool relist_after_backoff_ = false;
  bool relist_requested_ = false;
  std::string last_rv_;
  bool synced_ = false;
  std::optional<Clock::time_point> current_at_;
  bool stream_open_ = false;
  Clock::time_point watch_started_{};
  std::unique_ptr<WatchDecoder> decoder_;
  Clock::time_point backoff_until_{};
  std::chrono::milliseconds backoff_step_{0};
  std::string last_error_;
  Stats stats_;
};

}  // namespace extsvc::kube
