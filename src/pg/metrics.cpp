// Shared-memory metrics of the workers and the SQL function that reads them
// (extsvc._worker_metrics(), wrapped by extsvc.metrics()).
#include "pg_prelude.hpp"

#include "metrics.hpp"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/dpf_api_level.hpp"
#include "core/http_date.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "shared_memory.hpp"

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_worker_metrics);
}

namespace extsvc::pg {

namespace {

core::MetricsStore* g_store = nullptr;

class ShmemObserver final : public kube::RequestObserver {
 public:
  void on_request(const kube::RequestEvent& e) noexcept override {
    if (g_store != nullptr) g_store->record_request(e.cluster, e.verb, e.http_status, e.seconds);
    SharedState* st = shared_state();
    const int c = e.cluster == "management" ? 0 : e.cluster == "dpu" ? 1 : -1;
    if (st == nullptr || c < 0) return;
    const auto now = static_cast<uint64>(GetCurrentTimestamp());
    pg_atomic_write_u32(&st->cluster_last_code[c], static_cast<uint32>(e.http_status));
    pg_atomic_write_u64(&st->cluster_last_at[c], now);
    if (e.http_status >= 200 && e.http_status < 300)
      pg_atomic_write_u64(&st->cluster_last_ok_at[c], now);
    if (e.server_date != 0 && e.received_at > 0) {
      const double skew = core::clock_skew_seconds(e.server_date, e.received_at);
      pg_atomic_write_u64(&st->cluster_skew_ms[c],
                          static_cast<uint64>(static_cast<int64_t>(skew * 1000.0)));
      pg_atomic_write_u64(&st->cluster_skew_at[c], now);
    }
    // issue 26, part 4: when a write left (bench/commit_burst.py reads this beside the claim log
    // and dpfsim's request log); debug only
    if (e.sent_at > 0 && e.verb != "GET" && e.verb != "LIST" &&
        spdlog::should_log(spdlog::level::debug)) {
      try {
        spdlog::debug("{} {} {} sent at {} us", e.cluster, e.verb, e.http_status,
                      static_cast<int64_t>(e.sent_at * 1e6));
      } catch (...) {
        // a log line is not worth an exception through the client
      }
    }
  }
};

ShmemObserver g_observer;

struct Row {
  std::string metric;
  std::string labels;  // JSON object
  double value;
};

std::string labels_json(const std::vector<std::pair<std::string, std::string>>& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j.dump();
}

// Seconds since the Unix epoch of a PostgreSQL timestamp (microseconds since 2000-01-01).
double unix_seconds(int64_t ts) {
  return static_cast<double>(ts) / 1e6 +
         static_cast<double>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
}

// Everything the function returns, built in C++ (no PostgreSQL call that can
// raise in here: atomics and GUC variables only).
std::vector<Row> collect(core::MetricsStore* store, SharedState* st, int workers, int64_t now,
                         const InformerSlot* informers, int ninformers, bool enabled,
                         int64_t watcher_started_at) {
  std::vector<Row> rows;
  if (store == nullptr || st == nullptr) {
    rows.push_back({"extsvc_worker_up", "{}", 0});
    rows.push_back({"extsvc_workers_configured", "{}", 0});
    return rows;
  }
  for (const auto& s : store->snapshot(now))
    rows.push_back({s.metric, labels_json(s.labels), s.value});
  rows.push_back({"extsvc_workers_configured", "{}", static_cast<double>(workers)});
  uint64_t orphans = 0, rederived = 0;
  for (int i = 0; i < kMaxWorkers; ++i) {
    WorkerSlot& w = st->slots[i];
    orphans += pg_atomic_read_u64(&w.orphans_deleted);
    rederived += pg_atomic_read_u64(&w.dpus_rederived);
    if (i >= workers) continue;
    const std::string l = labels_json({{"worker", std::to_string(i)}});
    auto counter = [&](const char* name, uint64 v) {
      rows.push_back({name, l, static_cast<double>(v)});
    };
    rows.push_back({"extsvc_worker_up", l, pg_atomic_read_u32(&w.pid) != 0 ? 1.0 : 0.0});
    // issue 28: one series per state, 1 for the one the worker is in (none before it ran)
    const auto state = static_cast<WorkerState>(pg_atomic_read_u32(&w.state));
    for (uint32 k = 1; k < kWorkerStates; ++k) {
      const auto ks = static_cast<WorkerState>(k);
      rows.push_back(
          {"extsvc_worker_state",
           labels_json({{"worker", std::to_string(i)}, {"state", worker_state_name(ks)}}),
           state == ks ? 1.0 : 0.0});
    }
    const uint64_t starts = store->worker_starts(i);
    counter("extsvc_worker_restarts_total", starts > 0 ? starts - 1 : 0);
    const uint64 last = pg_atomic_read_u64(&w.last_activity_us);
    if (last != 0)
      rows.push_back(
          {"extsvc_worker_last_iteration_age_seconds", l,
           static_cast<double>(std::max<int64_t>(0, now - static_cast<int64_t>(last))) / 1e6});
    counter("extsvc_worker_iterations_total", pg_atomic_read_u64(&w.iterations));
    counter("extsvc_worker_claimed_total", pg_atomic_read_u64(&w.claimed));
    counter("extsvc_worker_completed_total", pg_atomic_read_u64(&w.completed));
    counter("extsvc_worker_stale_results_total", pg_atomic_read_u64(&w.stale));
    counter("extsvc_lease_fenced_total", pg_atomic_read_u64(&w.fenced));
    counter("extsvc_lease_renewals_total", pg_atomic_read_u64(&w.renewals));
    counter("extsvc_leases_released_total", pg_atomic_read_u64(&w.leases_released));
    counter("extsvc_watch_wakes_total", pg_atomic_read_u64(&w.watch_dpu_wakes));
    counter("extsvc_worker_handed_over_total", pg_atomic_read_u64(&w.handed_over));
  }
  // issue 23, part 5: the DPF API level the workers detected
  {
    const auto level = core::DpfApiLevel::from_bits(pg_atomic_read_u32(&st->dpf_api)).level();
    for (const char* l : {"v26.8+", "below v26.8", "unknown"})
      rows.push_back({"extsvc_dpf_api_level", labels_json({{"level", l}}), level == l ? 1.0 : 0.0});
  }
  // the watcher's informers (extsvc.watch_status()); counters since the watcher started
  for (int i = 0; i < ninformers; ++i) {
    const InformerSlot& inf = informers[i];
    const std::string l = labels_json({{"resource", inf.resource}, {"cluster", inf.cluster}});
    auto put = [&](const char* name, double v) { rows.push_back({name, l, v}); };
    put("extsvc_watch_synced", inf.synced ? 1 : 0);
    put("extsvc_watch_current", inf.current ? 1 : 0);
    put("extsvc_watch_objects", static_cast<double>(inf.objects));
    put("extsvc_watch_events_total", static_cast<double>(inf.events));
    put("extsvc_watch_lists_total", static_cast<double>(inf.lists));
    put("extsvc_watch_expired_total", static_cast<double>(inf.expired));
    put("extsvc_watch_errors_total", static_cast<double>(inf.errors));
    // never current: its age counts from when the watcher started (issue 28: the series is there
    // for the alert to see)
    const int64_t since = inf.current_at != 0 ? inf.current_at : watcher_started_at;
    if (inf.current)
      put("extsvc_watch_current_age_seconds", 0);
    else if (since != 0)
      put("extsvc_watch_current_age_seconds",
          static_cast<double>(std::max<int64_t>(0, now - since)) / 1e6);
  }
  rows.push_back({"extsvc_orphans_deleted_total", "{}", static_cast<double>(orphans)});
  rows.push_back({"extsvc_dpus_rederived_total", "{}", static_cast<double>(rederived)});
  // each cluster as last seen (issue 28): the last answer's code (0: none) and its age, and the
  // age of the last 2xx
  static const char* const kClusters[] = {"management", "dpu"};
  for (int c = 0; c < 2; ++c) {
    const auto at = static_cast<int64_t>(pg_atomic_read_u64(&st->cluster_last_at[c]));
    if (at == 0) continue;
    const std::string l = labels_json({{"cluster", kClusters[c]}});
    rows.push_back({"extsvc_kube_last_code", l,
                    static_cast<double>(pg_atomic_read_u32(&st->cluster_last_code[c]))});
    rows.push_back({"extsvc_kube_last_response_age_seconds", l,
                    static_cast<double>(std::max<int64_t>(0, now - at)) / 1e6});
    const auto ok = static_cast<int64_t>(pg_atomic_read_u64(&st->cluster_last_ok_at[c]));
    if (ok != 0)
      rows.push_back({"extsvc_kube_last_success_age_seconds", l,
                      static_cast<double>(std::max<int64_t>(0, now - ok)) / 1e6});
  }
  // the API servers' clocks (issue 28, part 3): the last skew measured from a Date header (their
  // clock minus ours; the header's 1 s resolution leaves about a second of uncertainty) and its age
  for (int c = 0; c < 2; ++c) {
    const auto at = static_cast<int64_t>(pg_atomic_read_u64(&st->cluster_skew_at[c]));
    if (at == 0) continue;
    const std::string l = labels_json({{"cluster", kClusters[c]}});
    const auto ms = static_cast<int64_t>(pg_atomic_read_u64(&st->cluster_skew_ms[c]));
    rows.push_back({"extsvc_kube_clock_skew_seconds", l, static_cast<double>(ms) / 1000.0});
    rows.push_back({"extsvc_kube_clock_skew_age_seconds", l,
                    static_cast<double>(std::max<int64_t>(0, now - at)) / 1e6});
  }
  rows.push_back({"extsvc_workers_enabled", "{}", enabled ? 1.0 : 0.0});
  rows.push_back(
      {"extsvc_shmem_initialized_timestamp_seconds", "{}", unix_seconds(st->initialized_at)});
  rows.push_back({"extsvc_wakes_requested_total", "{}",
                  static_cast<double>(pg_atomic_read_u64(&st->wakes_requested))});
  return rows;
}

}  // namespace

core::MetricsStore* metrics_store() {
  return g_store;
}

void request_metrics_memory() {
  RequestAddinShmemSpace(MAXALIGN(sizeof(core::MetricsStore)));
}

void attach_metrics_memory() {
  bool found = false;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  void* mem = ShmemInitStruct("nico_extsvc metrics", sizeof(core::MetricsStore), &found);
  // a fresh block (server start, crash restart) starts from zero
  g_store = found ? static_cast<core::MetricsStore*>(mem) : new (mem) core::MetricsStore();
  LWLockRelease(AddinShmemInitLock);
}

kube::RequestObserver* metrics_observer() {
  return &g_observer;
}

void metrics_worker_started(int slot) {
  if (g_store != nullptr) g_store->record_worker_start(slot);
}

void metrics_retry(int queue, const char* reason) {
  if (g_store != nullptr) g_store->record_retry(queue, reason != nullptr ? reason : "internal");
}

void metrics_resync(bool ok, double seconds) {
  if (g_store != nullptr)
    g_store->record_resync(ok, seconds, static_cast<int64_t>(GetCurrentTimestamp()));
}

}  // namespace extsvc::pg

using namespace extsvc::pg;

// extsvc._worker_metrics(): (metric text, labels jsonb, value double precision)
extern "C" Datum nico_extsvc_worker_metrics(PG_FUNCTION_ARGS) {
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  const int64_t now = static_cast<int64_t>(GetCurrentTimestamp());
  const int workers = shared_state() != nullptr ? std::min(gucs.workers, kMaxWorkers) : 0;
  InformerSlot informers[kMaxInformers];
  int ninformers = 0;
  int64_t watcher_started_at = 0;
  if (SharedState* st = shared_state()) {
    SpinLockAcquire(&st->informers_lock);
    ninformers = std::min<int>(st->informer_count, kMaxInformers);
    memcpy(informers, st->informers, sizeof informers);
    watcher_started_at = st->watcher_started_at;
    SpinLockRelease(&st->informers_lock);
  }
  std::vector<Row>* rows = nullptr;
  PendingError err;
  cpp_call(err, [&] {
    rows = new std::vector<Row>(collect(g_store, shared_state(), workers, now, informers,
                                        ninformers, gucs.enabled, watcher_started_at));
  });
  raise_if(err);
  // copy out (no C++ call can throw here), free, then hand to PostgreSQL
  const int n = static_cast<int>(rows->size());
  char** metric = static_cast<char**>(palloc(sizeof(char*) * (n + 1)));
  char** labels = static_cast<char**>(palloc(sizeof(char*) * (n + 1)));
  double* value = static_cast<double*>(palloc(sizeof(double) * (n + 1)));
  for (int i = 0; i < n; ++i) {
    const Row& r = (*rows)[static_cast<size_t>(i)];
    metric[i] = pstrdup(r.metric.c_str());
    labels[i] = pstrdup(r.labels.c_str());
    value[i] = r.value;
  }
  cpp_call(err, [&] { delete rows; });
  for (int i = 0; i < n; ++i) {
    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = CStringGetTextDatum(metric[i]);
    values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(labels[i]));
    values[2] = Float8GetDatum(value[i]);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}
