// Event counters of the workers (issue 12), laid out for a fixed-size block of
// PostgreSQL shared memory: standard layout, fixed capacity, lock-free
// std::atomic members only (address-free on every platform we build for), so
// any process that maps the block may update or read it, and no operation can
// fail, allocate or throw. Pure C++: src/pg places one in shared memory and
// turns a snapshot into rows of extsvc.metrics().
//
// Cardinality is bounded by construction: clusters and verbs are fixed
// vocabularies, HTTP codes are kept in a table of kRequestSeries entries and a
// code that finds no free entry is counted under code "other".
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace extsvc::core {

class MetricsStore {
 public:
  static constexpr int kClusters = 2;  // "management", "dpu"
  static constexpr std::array<std::string_view, kClusters> kClusterNames = {"management", "dpu"};
  static constexpr int kVerbs = 8;
  static constexpr std::array<std::string_view, kVerbs> kVerbNames = {
      "GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "OTHER"};
  // Upper bounds (seconds) of the latency histogram; +Inf is the count.
  static constexpr int kBuckets = 12;
  static constexpr std::array<double, kBuckets> kBucketBounds = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  static constexpr int kRequestSeries = 64;  // (cluster, verb, code) entries
  static constexpr int kQueues = 2;          // "service", "dpu"
  static constexpr std::array<std::string_view, kQueues> kQueueNames = {"service", "dpu"};
  // Why a reconciliation pass ended in a retry (reconcile::retry_reason).
  static constexpr int kRetryReasons = 14;
  static constexpr std::array<std::string_view, kRetryReasons> kRetryReasonNames = {
      "transport",          "timeout",     "server_error",
      "too_many_requests",  "conflict",    "unauthorized",
      "token_unavailable",  "forbidden",   "invalid_response",
      "response_too_large", "lease_fence", "not_synced",
      "internal",           "other",
  };
  static constexpr int kMaxWorkers = 16;

  // One sample of a snapshot: Prometheus-style name, labels in order, value.
  struct Sample {
    std::string metric;
    std::vector<std::pair<std::string, std::string>> labels;
    double value = 0;
  };

  // A zeroed store is a valid empty store (std::atomic's value-initialisation);
  // construct it in place in the shared block once.
  MetricsStore() noexcept = default;
  MetricsStore(const MetricsStore&) = delete;
  MetricsStore& operator=(const MetricsStore&) = delete;

  // One HTTP attempt. cluster and verb outside the vocabularies count as
  // "management"/"OTHER" resp.; http_status 0 means no response (transport
  // error, timeout, TLS, interrupted) and is labelled code "error".
  void record_request(std::string_view cluster, std::string_view verb, int http_status,
                      double seconds) noexcept;
  // A pass that ended in a retry; an unknown reason counts as "other".
  void record_retry(int queue, std::string_view reason) noexcept;
  void record_worker_start(int slot) noexcept;
  // A resync (drift detection) ended; end_us is its end time in microseconds
  // on the clock snapshot() is given (PostgreSQL's GetCurrentTimestamp()).
  void record_resync(bool ok, double seconds, int64_t end_us) noexcept;

  // Every counter as samples (zero-valued retry series included, so rates
  // work from the first retry on; histograms and request series only once
  // used). now_us turns the last resync time into an age.
  std::vector<Sample> snapshot(int64_t now_us) const;

  // Index helpers (exposed for tests).
  static int cluster_index(std::string_view cluster) noexcept;
  static int verb_index(std::string_view verb) noexcept;
  static int retry_reason_index(std::string_view reason) noexcept;
  static int bucket_index(double seconds) noexcept;  // kBuckets = only +Inf
  uint64_t worker_starts(int slot) const noexcept;

 private:
  struct RequestSeries {
    std::atomic<uint32_t> key{0};  // 0 = free; else encode(cluster, verb, code)
    std::atomic<uint64_t> count{0};
  };
  struct Histogram {
    std::array<std::atomic<uint64_t>, kBuckets> buckets{};  // non-cumulative
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_us{0};
  };
  static uint32_t encode(int cluster, int verb, int code) noexcept;

  std::array<RequestSeries, kRequestSeries> series_{};
  std::array<std::array<std::atomic<uint64_t>, kVerbs>, kClusters> overflow_{};
  std::array<std::array<Histogram, kVerbs>, kClusters> latency_{};
  std::array<std::array<std::atomic<uint64_t>, kRetryReasons>, kQueues> retries_{};
  std::array<std::atomic<uint64_t>, kMaxWorkers> worker_starts_{};
  std::atomic<uint64_t> resyncs_ok_{0};
  std::atomic<uint64_t> resyncs_failed_{0};
  std::atomic<int64_t> last_resync_end_us_{0};        // 0 = none yet
  std::atomic<uint64_t> last_resync_duration_us_{0};  // of the last successful one
};

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free,
              "the metrics store lives in shared memory: its atomics must be lock-free");

}  // namespace extsvc::core
