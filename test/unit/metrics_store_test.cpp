// The workers' shared-memory event counters (issue 12): vocabulary mapping,
// bounded request series with the "other" overflow, cumulative histogram.
#include "core/metrics_store.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace extsvc::core {
namespace {

using Samples = std::vector<MetricsStore::Sample>;

std::string key(const MetricsStore::Sample& s) {
  std::string k = s.metric + "{";
  for (const auto& [n, v] : s.labels) k += n + "=" + v + ",";
  return k + "}";
}

std::map<std::string, double> by_key(const Samples& samples) {
  std::map<std::string, double> m;
  for (const auto& s : samples) m[key(s)] = s.value;
  return m;
}

TEST(MetricsStore, CountsRequestsByClusterVerbAndCode) {
  auto st = std::make_unique<MetricsStore>();
  st->record_request("management", "GET", 200, 0.003);
  st->record_request("management", "GET", 200, 0.02);
  st->record_request("dpu", "LIST", 200, 0.2);
  st->record_request("management", "POST", 0, 3.0);     // no response
  st->record_request("elsewhere", "BREW", 418, 0.001);  // outside the vocabularies
  const auto m = by_key(st->snapshot(0));
  EXPECT_EQ(m.at("extsvc_kube_requests_total{cluster=management,verb=GET,code=200,}"), 2);
  EXPECT_EQ(m.at("extsvc_kube_requests_total{cluster=dpu,verb=LIST,code=200,}"), 1);
  EXPECT_EQ(m.at("extsvc_kube_requests_total{cluster=management,verb=POST,code=error,}"), 1);
  EXPECT_EQ(m.at("extsvc_kube_requests_total{cluster=management,verb=OTHER,code=418,}"), 1);
}

TEST(MetricsStore, HistogramIsCumulativeWithSumAndCount) {
  auto st = std::make_unique<MetricsStore>();
  st->record_request("management", "GET", 200, 0.003);  // <= 0.005
  st->record_request("management", "GET", 200, 0.02);   // <= 0.025
  st->record_request("management", "GET", 404, 0.02);
  st->record_request("management", "GET", 200, 45.0);  // only +Inf
  const auto m = by_key(st->snapshot(0));
  const std::string b =
      "extsvc_kube_request_duration_seconds_bucket{cluster=management,verb=GET,le=";
  EXPECT_EQ(m.at(b + "0.005,}"), 1);
  EXPECT_EQ(m.at(b + "0.01,}"), 1);
  EXPECT_EQ(m.at(b + "0.025,}"), 3);
  EXPECT_EQ(m.at(b + "30,}"), 3);
  EXPECT_EQ(m.at(b + "+Inf,}"), 4);
  EXPECT_EQ(m.at("extsvc_kube_request_duration_seconds_count{cluster=management,verb=GET,}"), 4);
  EXPECT_NEAR(m.at("extsvc_kube_request_duration_seconds_sum{cluster=management,verb=GET,}"),
              45.043, 1e-6);
  // unused (cluster, verb) pairs have no histogram
  EXPECT_EQ(m.count("extsvc_kube_request_duration_seconds_count{cluster=dpu,verb=GET,}"), 0u);
  EXPECT_EQ(MetricsStore::bucket_index(0.005), 0);
  EXPECT_EQ(MetricsStore::bucket_index(30), MetricsStore::kBuckets - 1);
  EXPECT_EQ(MetricsStore::bucket_index(30.001), MetricsStore::kBuckets);
}

TEST(MetricsStore, RequestSeriesAreBoundedWithOverflowAsOther) {
  auto st = std::make_unique<MetricsStore>();
  // more distinct (cluster, verb, code) keys than the table holds
  int distinct = 0;
  for (int code = 200; distinct < MetricsStore::kRequestSeries + 20; ++code, ++distinct)
    st->record_request("management", "GET", code, 0.01);
  st->record_request("management", "GET", 200, 0.01);  // an existing key still counts as itself
  const auto samples = st->snapshot(0);
  int series = 0;
  double total = 0, other = 0;
  for (const auto& s : samples) {
    if (s.metric != "extsvc_kube_requests_total") continue;
    ++series;
    total += s.value;
    if (s.labels[2].second == "other") other = s.value;
  }
  EXPECT_EQ(series, MetricsStore::kRequestSeries + 1);  // the table plus one overflow series
  EXPECT_EQ(other, 20);
  EXPECT_EQ(total, distinct + 1);  // nothing is lost
  EXPECT_EQ(by_key(samples).at("extsvc_kube_requests_total{cluster=management,verb=GET,code=200,}"),
            2);
}

TEST(MetricsStore, ConcurrentWritersLoseNothing) {
  auto st = std::make_unique<MetricsStore>();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&st, t] {
      for (int i = 0; i < 5000; ++i) st->record_request("dpu", "GET", 200 + (i + t) % 3, 0.001);
    });
  for (auto& th : threads) th.join();
  double total = 0;
  int series = 0;
  for (const auto& s : st->snapshot(0))
    if (s.metric == "extsvc_kube_requests_total") {
      total += s.value;
      ++series;
    }
  EXPECT_EQ(total, 20000);
  EXPECT_EQ(series, 3);  // one entry per key, however the inserts raced
}

TEST(MetricsStore, RetriesResyncsAndStarts) {
  auto st = std::make_unique<MetricsStore>();
  st->record_retry(0, "too_many_requests");
  st->record_retry(0, "too_many_requests");
  st->record_retry(1, "no such reason");
  st->record_retry(7, "transport");  // unknown queue: ignored
  st->record_worker_start(0);
  st->record_worker_start(0);
  EXPECT_EQ(st->worker_starts(0), 2u);
  EXPECT_EQ(st->worker_starts(99), 0u);
  auto m = by_key(st->snapshot(0));
  EXPECT_EQ(m.at("extsvc_retries_total{queue=service,reason=too_many_requests,}"), 2);
  EXPECT_EQ(m.at("extsvc_retries_total{queue=dpu,reason=other,}"), 1);
  EXPECT_EQ(m.at("extsvc_retries_total{queue=service,reason=transport,}"), 0);  // zeros are kept
  EXPECT_EQ(m.count("extsvc_last_resync_age_seconds{}"), 0u);                   // none yet
  st->record_resync(false, 1.0, 5'000'000);
  st->record_resync(true, 0.25, 10'000'000);
  m = by_key(st->snapshot(12'500'000));
  EXPECT_EQ(m.at("extsvc_resyncs_total{result=ok,}"), 1);
  EXPECT_EQ(m.at("extsvc_resyncs_total{result=failed,}"), 1);
  EXPECT_DOUBLE_EQ(m.at("extsvc_last_resync_age_seconds{}"), 2.5);
  EXPECT_DOUBLE_EQ(m.at("extsvc_last_resync_duration_seconds{}"), 0.25);
}

}  // namespace
}  // namespace extsvc::core
