#include "core/metrics_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace extsvc::core {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

template <size_t N>
int index_of(const std::array<std::string_view, N>& names, std::string_view v, int fallback) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == v) return static_cast<int>(i);
  return fallback;
}

std::string format_bound(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", b);
  return buf;
}

}  // namespace

int MetricsStore::cluster_index(std::string_view cluster) noexcept {
  return index_of(kClusterNames, cluster, 0);
}

int MetricsStore::verb_index(std::string_view verb) noexcept {
  return index_of(kVerbNames, verb, kVerbs - 1);
}

int MetricsStore::retry_reason_index(std::string_view reason) noexcept {
  return index_of(kRetryReasonNames, reason, kRetryReasons - 1);
}

int MetricsStore::bucket_index(double seconds) noexcept {
  for (int i = 0; i < kBuckets; ++i)
    if (seconds <= kBucketBounds[static_cast<size_t>(i)]) return i;
  return kBuckets;
}

uint32_t MetricsStore::encode(int cluster, int verb, int code) noexcept {
  // code 0..999, never 0 as a whole: cluster + 1 in the top bits
  return (static_cast<uint32_t>(cluster + 1) << 24) | (static_cast<uint32_t>(verb) << 16) |
         static_cast<uint32_t>(code);
}

void MetricsStore::record_request(std::string_view cluster, std::string_view verb, int http_status,
                                  double seconds) noexcept {
  const int c = cluster_index(cluster);
  const int v = verb_index(verb);
  const int code = http_status >= 100 && http_status <= 999 ? http_status : 0;
  const uint32_t key = encode(c, v, code);
  bool counted = false;
  // Lock-free insert: the first free entry is claimed with a CAS; a concurrent
  // claim of the same key is found on the way.
  for (auto& s : series_) {
    uint32_t k = s.key.load(std::memory_order_acquire);
    if (k == 0) {
      uint32_t expected = 0;
      if (s.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel))
        k = key;
      else
        k = expected;
    }
    if (k == key) {
      s.count.fetch_add(1, kRelaxed);
      counted = true;
      break;
    }
  }
  auto& cv = overflow_[static_cast<size_t>(c)][static_cast<size_t>(v)];
  if (!counted) cv.fetch_add(1, kRelaxed);
  auto& h = latency_[static_cast<size_t>(c)][static_cast<size_t>(v)];
  const double s = std::isfinite(seconds) && seconds > 0 ? seconds : 0;
  const int b = bucket_index(s);
  if (b < kBuckets) h.buckets[static_cast<size_t>(b)].fetch_add(1, kRelaxed);
  h.sum_us.fetch_add(static_cast<uint64_t>(std::llround(std::min(s, 1e9) * 1e6)), kRelaxed);
  h.count.fetch_add(1, kRelaxed);
}

void MetricsStore::record_retry(int queue, std::string_view reason) noexcept {
  if (queue < 0 || queue >= kQueues) return;
  retries_[static_cast<size_t>(queue)][static_cast<size_t>(retry_reason_index(reason))].fetch_add(
      1, kRelaxed);
}

void MetricsStore::record_worker_start(int slot) noexcept {
  if (slot < 0 || slot >= kMaxWorkers) return;
  worker_starts_[static_cast<size_t>(slot)].fetch_add(1, kRelaxed);
}

uint64_t MetricsStore::worker_starts(int slot) const noexcept {
  if (slot < 0 || slot >= kMaxWorkers) return 0;
  return worker_starts_[static_cast<size_t>(slot)].load(kRelaxed);
}

void MetricsStore::record_resync(bool ok, double seconds, int64_t end_us) noexcept {
  if (!ok) {
    resyncs_failed_.fetch_add(1, kRelaxed);
    return;
  }
  const double s = std::isfinite(seconds) && seconds > 0 ? std::min(seconds, 1e9) : 0;
  last_resync_duration_us_.store(static_cast<uint64_t>(std::llround(s * 1e6)), kRelaxed);
  last_resync_end_us_.store(end_us, std::memory_order_release);
  resyncs_ok_.fetch_add(1, kRelaxed);
}

std::vector<MetricsStore::Sample> MetricsStore::snapshot(int64_t now_us) const {
  std::vector<Sample> out;
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  // requests by (cluster, verb, code)
  for (const auto& s : series_) {
    const uint32_t k = s.key.load(std::memory_order_acquire);
    if (k == 0) continue;
    const int c = static_cast<int>(k >> 24) - 1;
    const int v = static_cast<int>((k >> 16) & 0xff);
    const int code = static_cast<int>(k & 0xffff);
    if (c < 0 || c >= kClusters || v >= kVerbs) continue;
    out.push_back({"extsvc_kube_requests_total",
                   {{"cluster", std::string(kClusterNames[static_cast<size_t>(c)])},
                    {"verb", std::string(kVerbNames[static_cast<size_t>(v)])},
                    {"code", code == 0 ? std::string("error") : std::to_string(code)}},
                   d(s.count.load(kRelaxed))});
  }
  for (int c = 0; c < kClusters; ++c)
    for (int v = 0; v < kVerbs; ++v) {
      const uint64_t n = overflow_[static_cast<size_t>(c)][static_cast<size_t>(v)].load(kRelaxed);
      if (n == 0) continue;
      out.push_back({"extsvc_kube_requests_total",
                     {{"cluster", std::string(kClusterNames[static_cast<size_t>(c)])},
                      {"verb", std::string(kVerbNames[static_cast<size_t>(v)])},
                      {"code", "other"}},
                     d(n)});
    }
  // latency histograms, cumulative buckets
  for (int c = 0; c < kClusters; ++c)
    for (int v = 0; v < kVerbs; ++v) {
      const auto& h = latency_[static_cast<size_t>(c)][static_cast<size_t>(v)];
      const uint64_t count = h.count.load(kRelaxed);
      if (count == 0) continue;
      const std::string cl(kClusterNames[static_cast<size_t>(c)]);
      const std::string vb(kVerbNames[static_cast<size_t>(v)]);
      uint64_t cum = 0;
      for (int b = 0; b < kBuckets; ++b) {
        cum += h.buckets[static_cast<size_t>(b)].load(kRelaxed);
        out.push_back({"extsvc_kube_request_duration_seconds_bucket",
                       {{"cluster", cl},
                        {"verb", vb},
                        {"le", format_bound(kBucketBounds[static_cast<size_t>(b)])}},
                       d(cum)});
      }
      // +Inf equals _count; read once so the two always agree, and never
      // below the last finite bucket (updates are not one atomic step)
      const uint64_t total = std::max(count, cum);
      out.push_back({"extsvc_kube_request_duration_seconds_bucket",
                     {{"cluster", cl}, {"verb", vb}, {"le", "+Inf"}},
                     d(total)});
      out.push_back({"extsvc_kube_request_duration_seconds_sum",
                     {{"cluster", cl}, {"verb", vb}},
                     d(h.sum_us.load(kRelaxed)) / 1e6});
      out.push_back({"extsvc_kube_request_duration_seconds_count",
                     {{"cluster", cl}, {"verb", vb}},
                     d(total)});
    }
  for (int q = 0; q < kQueues; ++q)
    for (int r = 0; r < kRetryReasons; ++r)
      out.push_back({"extsvc_retries_total",
                     {{"queue", std::string(kQueueNames[static_cast<size_t>(q)])},
                      {"reason", std::string(kRetryReasonNames[static_cast<size_t>(r)])}},
                     d(retries_[static_cast<size_t>(q)][static_cast<size_t>(r)].load(kRelaxed))});
  out.push_back({"extsvc_resyncs_total", {{"result", "ok"}}, d(resyncs_ok_.load(kRelaxed))});
  out.push_back(
      {"extsvc_resyncs_total", {{"result", "failed"}}, d(resyncs_failed_.load(kRelaxed))});
  const int64_t end = last_resync_end_us_.load(std::memory_order_acquire);
  if (end != 0) {
    out.push_back({"extsvc_last_resync_age_seconds",
                   {},
                   static_cast<double>(std::max<int64_t>(0, now_us - end)) / 1e6});
    out.push_back({"extsvc_last_resync_duration_seconds",
                   {},
                   d(last_resync_duration_us_.load(kRelaxed)) / 1e6});
  }
  return out;
}

}  // namespace extsvc::core
