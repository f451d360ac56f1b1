// The kept window of watch events of one resource, as kube-apiserver's watch cache keeps it
// (staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go): a resourceVersion older than
// the window is "too old" (410 Expired), every event carries the object before the change so a
// filtered watch can tell ADDED, MODIFIED and DELETED apart, and watchers wait on a condition
// variable of their own resource instead of polling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "util.h"

namespace dpfsim {

using ObjPtr = std::shared_ptr<const json>;

// Window and timing knobs of the watch machinery (POST /watch-config). Defaults are
// kube-apiserver's: the watch cache keeps eventFreshDuration = 75 s of events and at most
// defaultUpperBoundCapacity = 100 * 1024 per resource (watch_cache.go); bookmarks go out about
// once a minute (cacher.go, defaultBookmarkFrequency); etcd is compacted every 5 minutes
// (--etcd-compaction-interval), after which a LIST continue token answers 410.
struct WatchConfig {
  static constexpr long kDefaultWindowEvents = 100 * 1024;
  static constexpr long kDefaultWindowMs = 75000;
  static constexpr long kDefaultBookmarkMs = 60000;
  static constexpr long kDefaultContinueTtlMs = 300000;
  std::atomic<long> window_events{kDefaultWindowEvents};
  std::atomic<long> window_ms{kDefaultWindowMs};
  std::atomic<long> bookmark_ms{kDefaultBookmarkMs};
  std::atomic<long> continue_ttl_ms{kDefaultContinueTtlMs};

  json to_json() const;
  // Applies the given keys; throws std::invalid_argument for unknown keys or bad values.
  void apply(const json& j);
  void restore_defaults();
};

// One stored change. DELETED carries the last stored state with the deletion's resourceVersion.
struct LogEntry {
  uint64_t rv = 0;
  const char* type = "";  // ADDED | MODIFIED | DELETED
  ObjPtr obj;
  ObjPtr prev;  // the object before the change; null for ADDED
  SteadyClock::time_point at;

  // Serialized once and shared by every watcher of the resource.
  const std::string& obj_json() const;
  // The previous object with this event's resourceVersion: what a filtered watch sends as DELETED
  // when the change made the object leave its selector (cache_watcher.go, convertToWatchEvent).
  const std::string& prev_as_deleted_json() const;

 private:
  mutable std::once_flag obj_once_, prev_once_;
  mutable std::string obj_json_, prev_json_;
};
using EntryPtr = std::shared_ptr<const LogEntry>;

class EventLog {
 public:
  // Appends (the store's mutex is held by the caller) and wakes the resource's watchers.
  void push(EntryPtr e, const WatchConfig& cfg);
  // Empties the window; rv becomes the list resourceVersion it can be resumed from.
  void reset(uint64_t rv);
  // The oldest resourceVersion a watch or a continue token may still start from: RVs below it
  // are "too old". As the watch cache: the reset RV while nothing was evicted, else the first
  // kept event's RV - 1 (the cache does not remember the last evicted RV).
  uint64_t oldest_valid(const WatchConfig& cfg);
  // Entries with rv > after, at most max. False when 'after' is older than the window.
  bool since(uint64_t after, size_t max, std::vector<EntryPtr>& out, const WatchConfig& cfg);
  // Entries with rv > after for a consistent continue page; same window rule.
  bool since_all(uint64_t after, std::vector<EntryPtr>& out, const WatchConfig& cfg) {
    return since(after, static_cast<size_t>(-1), out, cfg);
  }
  size_t size();
  // True when an entry newer than after exists (the caller holds mutex()).
  bool has_newer_l(uint64_t after) const { return !events_.empty() && events_.back()->rv > after; }
  std::mutex& mutex() { return mu_; }
  std::condition_variable& cv() { return cv_; }

 private:
  void evict_l(const WatchConfig& cfg, SteadyClock::time_point now);
  uint64_t oldest_valid_l() const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EntryPtr> events_;
  uint64_t list_rv_ = 0;
  bool evicted_ = false;
  uint64_t last_evicted_rv_ = 0;
};

}  // namespace dpfsim
