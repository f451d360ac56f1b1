// The nico_extsvc background worker: claim -> commit -> Kubernetes calls
// outside any transaction -> compare-and-swap completion; woken at commit of
// new intent, with a periodic scan as fallback and drift detector.
#include "pg_prelude.hpp"

#include "worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "gucs.hpp"
#include "guard.hpp"
#include "core/dpf_status.hpp"
#include "kube/client.hpp"
#include "kube/config.hpp"
#include "log_sink.hpp"
#include "metrics.hpp"
#include "reconcile/dpu_reconciler.hpp"
#include "reconcile/dpu_work_decode.hpp"
#include "reconcile/drift_detector.hpp"
#include "reconcile/service_reconciler.hpp"
#include "wake.hpp"
#include "worker_spi.hpp"

extern "C" {
PG_FUNCTION_INFO_V1(nico_extsvc_worker_status);
PG_FUNCTION_INFO_V1(nico_extsvc_request_resync);
}

namespace extsvc::pg {

namespace {

// The extension version this library was built for (default_version of the
// control file, through CMake). The workers run only against SQL objects of
// exactly this version.
constexpr const char* kLibraryVersion = EXTSVC_VERSION;

// --- C++ runtime: clients and reconcilers, rebuilt on SIGHUP ---------------

struct ClusterSettings {
  std::string kubeconfig, server, ca_file, token_file;
};

struct Settings {
  ClusterSettings management;
  ClusterSettings dpu;
  bool insecure = false;
  std::string ns;
  double qps = 50;
  int burst = 100;
  long connect_timeout_ms = 5000, timeout_ms = 30000;
};

class Runtime {
 public:
  explicit Runtime(const Settings& s) : ns_(s.ns) {
    auto cfg = cluster_config(s, s.management);
    if (cfg) {
      management_ = std::make_unique<kube::Client>(*cfg);
      management_->interrupted = [] { return ProcDiePending != 0; };
      management_->set_observer(metrics_observer(), "management");
      reconciler_ = std::make_unique<reconcile::ServiceReconciler>(*management_, ns_);
      spdlog::info("management cluster configured: {}", cfg->server);
    }
    std::string mgmt_error = config_error_;
    if (!s.dpu.kubeconfig.empty() || !s.dpu.server.empty()) {
      if (auto dcfg = cluster_config(s, s.dpu)) {
        dpu_ = std::make_unique<kube::Client>(*dcfg);
        dpu_->interrupted = [] { return ProcDiePending != 0; };
        dpu_->set_observer(metrics_observer(), "dpu");
        spdlog::info("DPU cluster configured: {}", dcfg->server);
      } else {
        spdlog::warn("DPU cluster not usable ({}); DPU states will be UNKNOWN", config_error_);
      }
    } else {
      spdlog::info("no DPU cluster configured; DPU states will be UNKNOWN");
    }
    config_error_ = mgmt_error;
  }

  // A fresh reconciler per batch: it caches ControllerRevisions for one batch.
  std::unique_ptr<reconcile::DpuReconciler> dpu_reconciler() {
    return std::make_unique<reconcile::DpuReconciler>(*management_, dpu_.get(), ns_);
  }

  bool configured() const { return management_ != nullptr; }

  // The current item's lease fence also guards the client's one resend after
  // a 401; an empty function (between items) lets it through.
  void set_fence(const std::function<bool()>& fence) {
    if (management_) management_->may_resend = fence;
    if (dpu_) dpu_->may_resend = fence;
  }
  const std::string& config_error() const { return config_error_; }

  reconcile::Outcome reconcile(const reconcile::ServiceWork& w) {
    return reconciler_->reconcile(w);
  }

  reconcile::DriftReport detect(const std::vector<reconcile::DesiredService>& services,
                                const std::vector<std::string>& known) {
    return reconcile::detect_drift(*management_, ns_, services, known);
  }

  std::optional<kube::Error> delete_orphan(const reconcile::OrphanCandidate& orphan) {
    return reconcile::delete_orphan(*management_, ns_, orphan);
  }

  uint64_t requests() const {
    return (management_ ? management_->stats().requests : 0) + (dpu_ ? dpu_->stats().requests : 0);
  }
  uint64_t errors() const {
    return (management_ ? management_->stats().errors : 0) + (dpu_ ? dpu_->stats().errors : 0);
  }

 private:
  std::optional<kube::ClusterConfig> cluster_config(const Settings& s, const ClusterSettings& c) {
    kube::ClusterConfig cfg;
    if (!c.kubeconfig.empty()) {
      auto loaded = kube::load_kubeconfig(c.kubeconfig);
      if (auto* err = std::get_if<std::string>(&loaded)) {
        config_error_ = "kubeconfig " + c.kubeconfig + ": " + *err;
        return std::nullopt;
      }
      cfg = std::get<kube::ClusterConfig>(loaded);
    } else if (!c.server.empty()) {
      cfg.server = c.server;
      cfg.ca_file = c.ca_file;
      cfg.token_file = c.token_file;
    } else {
      config_error_ = "no cluster configured (set extsvc.kubeconfig or extsvc.kube_server)";
      return std::nullopt;
    }
    cfg.insecure_skip_verify = s.insecure;
    cfg.qps = s.qps;
    cfg.burst = s.burst;
    cfg.connect_timeout_ms = s.connect_timeout_ms;
    cfg.timeout_ms = s.timeout_ms;
    cfg.max_response_bytes = static_cast<size_t>(gucs.kube_max_response_kb) * 1024;
    cfg.max_list_bytes = static_cast<size_t>(gucs.kube_max_list_kb) * 1024;
    cfg.allow_insecure_http = gucs.kube_allow_insecure_http;
    if (auto err = kube::validate(cfg)) {
      config_error_ = *err;
      return std::nullopt;
    }
    return cfg;
  }

  std::string ns_;
  std::string config_error_;
  std::unique_ptr<kube::Client> management_;
  std::unique_ptr<kube::Client> dpu_;
  std::unique_ptr<reconcile::ServiceReconciler> reconciler_;
};

Runtime* g_runtime = nullptr;  // owned; replaced on SIGHUP, freed at exit
int g_slot = -1;
char g_worker_name[64];

std::string str(const char* s) {
  return s ? std::string(s) : std::string();
}

// --- the lease fence (issue 10) ---------------------------------------------
//
// The lease of a claimed batch as this process sees it: it starts before the
// claim transaction (whose now() stamps lease_expires_at), so the local
// deadline is never later than the database's. A Kubernetes call starts only
// while http_timeout + lease_margin of it remain: http_timeout is libcurl's
// CURLOPT_TIMEOUT_MS, the total of one attempt including DNS, connect and
// TLS (connect_timeout only bounds a part of it), so a call that starts ends
// (or is abandoned by the client) before the lease expires.
using SteadyClock = std::chrono::steady_clock;

std::chrono::milliseconds call_budget() {
  return std::chrono::milliseconds(static_cast<int64>(gucs.http_timeout_ms) + gucs.lease_margin_ms);
}

SteadyClock::time_point lease_deadline(SteadyClock::time_point start) {
  return start + std::chrono::seconds(gucs.lease_time_s);
}

// Installs an item's fence on the clients for the item's calls, also when
// the reconciler throws.
struct FenceScope {
  Runtime& runtime;
  FenceScope(Runtime& r, const std::function<bool()>& fence) : runtime(r) { r.set_fence(fence); }
  ~FenceScope() { runtime.set_fence({}); }
  FenceScope(const FenceScope&) = delete;
  FenceScope& operator=(const FenceScope&) = delete;
};

// Pure C++: what the reconcilers consult before each call.
std::function<bool()> fence_for(SteadyClock::time_point deadline) {
  const auto budget = call_budget();
  return [deadline, budget] { return SteadyClock::now() + budget <= deadline; };
}

// Renewal between items: when less than max(lease_time / 2, one call's
// budget) is left, one UPDATE extends every lease of the batch's remaining
// items (CAS on lease_token and lease_owner). Items whose lease was not
// renewed belong to another worker by now and are skipped (*alive false).
// Returns false when the renewal itself failed (the fence then stops calls
// as the old deadline approaches).
bool maybe_renew(MemoryContext cxt, const char* const* tokens, bool* alive, int from, int count,
                 SteadyClock::time_point* deadline, WorkerSlot* slot) {
  const auto left = *deadline - SteadyClock::now();
  const auto threshold =
      std::max<SteadyClock::duration>(std::chrono::seconds(gucs.lease_time_s) / 2, call_budget());
  if (left >= threshold) return true;
  StringInfoData buf;
  initStringInfo(&buf);
  appendStringInfoChar(&buf, '{');
  bool any = false;
  for (int i = from; i < count; ++i) {
    if (!alive[i] || tokens[i] == nullptr) continue;
    if (any) appendStringInfoChar(&buf, ',');
    appendStringInfoString(&buf, tokens[i]);
    any = true;
  }
  appendStringInfoChar(&buf, '}');
  if (!any) return true;
  const auto start = SteadyClock::now();
  char* renewed = nullptr;
  char* error = nullptr;
  if (!spi_renew_leases(cxt, g_worker_name, buf.data, gucs.lease_time_s, &renewed, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: renewing leases failed: %s", error)));
    return false;
  }
  pg_atomic_fetch_add_u64(&slot->renewals, 1);
  *deadline = lease_deadline(start);
  for (int i = from; i < count; ++i)
    if (alive[i] && tokens[i] != nullptr &&
        (renewed == nullptr || strstr(renewed, tokens[i]) == nullptr)) {
      alive[i] = false;
      pg_atomic_fetch_add_u64(&slot->fenced, 1);
      ereport(LOG, (errmsg("nico_extsvc: lease %s was taken over before it could be renewed; "
                           "the row is skipped",
                           tokens[i])));
    }
  return true;
}

Settings current_settings() {
  Settings s;
  s.management = {str(gucs.management.kubeconfig), str(gucs.management.server),
                  str(gucs.management.ca_file), str(gucs.management.token_file)};
  s.dpu = {str(gucs.dpu.kubeconfig), str(gucs.dpu.server), str(gucs.dpu.ca_file),
           str(gucs.dpu.token_file)};
  s.insecure = gucs.insecure_skip_verify;
  s.ns = str(gucs.ns);
  s.qps = gucs.kube_qps;
  s.burst = gucs.kube_burst;
  s.connect_timeout_ms = gucs.connect_timeout_ms;
  s.timeout_ms = gucs.http_timeout_ms;
  return s;
}

// On failure g_runtime stays null: the loop then idles and tries again (a
// null runtime is "not configured", never dereferenced).
void rebuild_runtime() {
  PendingError err;
  cpp_call(err, [] {
    delete g_runtime;  // first: a failed rebuild must not leave the old clients running
    g_runtime = nullptr;
    set_log_level(gucs.log_level);
    auto fresh = std::make_unique<Runtime>(current_settings());
    if (!fresh->configured()) spdlog::warn("worker idle: {}", fresh->config_error());
    g_runtime = fresh.release();
  });
  if (std::chrono::seconds(gucs.lease_time_s) <= call_budget())
    ereport(WARNING, (errmsg("nico_extsvc: extsvc.lease_time (%d s) does not exceed http_timeout + "
                             "lease_margin; every Kubernetes call would be fenced",
                             gucs.lease_time_s),
                      errhint("Raise extsvc.lease_time or lower the timeouts.")));
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
}

// DPF statuses seen during one batch, recorded with one call after it.
nlohmann::json dpf_json(const std::string& service_id, const core::DpfStatus& st) {
  return {{"service_id", service_id},
          {"ready", st.ready ? nlohmann::json(*st.ready) : nlohmann::json()},
          {"reason", st.reason.empty() ? nlohmann::json() : nlohmann::json(st.reason)},
          {"message", st.message.empty() ? nlohmann::json() : nlohmann::json(st.message)}};
}

// Records what was collected. Called outside any guard; SPI copies the text
// and run_transaction catches every PostgreSQL error.
void record_dpf(MemoryContext cxt, const std::string& statuses) {
  if (statuses.empty()) return;
  char* error = nullptr;
  if (!spi_record_dpf_status(cxt, statuses.c_str(), &error))
    ereport(WARNING, (errmsg("nico_extsvc: recording DPF status failed: %s", error)));
}

void on_exit_clear_slot(int, Datum) {
  SharedState* st = shared_state();
  if (st != nullptr && g_slot >= 0) {
    st->slots[g_slot].latch = nullptr;
    pg_atomic_write_u32(&st->slots[g_slot].pid, 0);
  }
}

// One claimed row through the reconciler and back into the database.
void process_row(MemoryContext cxt, const ClaimedRow& row, WorkerSlot* slot,
                 nlohmann::json* dpf_seen, SteadyClock::time_point deadline) {
  // Everything C++ happens inside cpp_call; its results are copied into
  // palloc'd memory before the database is touched again.
  Completion c{};
  c.service_id = row.service_id;
  c.state_version = row.state_version;
  c.lease_token = row.lease_token;
  c.applied_revision = 0;
  c.http_status = 0;
  c.retry_after_s = -1;
  c.observed_generation = -1;
  bool fenced = false;
  const char* retry_reason = nullptr;  // metrics: static string of the reconciler
  PendingError err;
  uint64 before = g_runtime->requests(), errors_before = g_runtime->errors();
  // A row that cannot be rendered or decoded can never succeed: FAILED with
  // the reason, instead of retrying it forever.
  bool decoded = false;
  // (a delete needs no rendered object and goes on)
  const bool deleting =
      row.lifecycle_state != nullptr && strcmp(row.lifecycle_state, "DELETING") == 0;
  if (!deleting && (row.render_error != nullptr || row.desired == nullptr)) {
    c.outcome = "transition";
    c.new_state = "FAILED";
    c.reason = "permanent_error";
    c.message = psprintf("the desired DPUService could not be rendered: %s",
                         row.render_error ? row.render_error : "no rendered object");
    decoded = true;
  } else {
    cpp_call(err, [&] {
      reconcile::ServiceWork w;
      w.service_id = row.service_id;
      w.state_version = row.state_version;
      w.lease_token = row.lease_token;
      w.lifecycle_state = str(row.lifecycle_state);
      w.deployment_scope = str(row.deployment_scope);
      w.dpf_service_name = str(row.dpf_service_name);
      w.attachable_version = str(row.attachable_version);
      w.desired_revision = row.desired_revision;
      if (row.applied_revision > 0) w.applied_revision = row.applied_revision;
      w.attempts = row.attempts;
      w.placement_clear = row.placement_clear;
      if (row.desired != nullptr) w.desired = nlohmann::json::parse(row.desired);
      decoded = true;
      w.lease_ok = fence_for(deadline);
      const FenceScope fence_scope(*g_runtime, w.lease_ok);
      const reconcile::Outcome o = g_runtime->reconcile(w);
      auto keep = [&](const std::string& s) -> const char* {
        return s.empty() ? nullptr : copy_out(cxt, s);
      };
      c.outcome = reconcile::to_string(o.kind);
      retry_reason = o.retry_reason;
      // fenced: recorded as a retry (with backoff, so a lease too short for the
      // calls does not spin); the CAS drops it if the row is someone else's
      if (o.kind == reconcile::Outcome::Kind::kLost) {
        c.outcome = "retry";
        fenced = true;
        spdlog::warn("{}: {}", w.dpf_service_name, o.message);
      }
      c.new_state = keep(o.new_state);
      c.reason = keep(o.reason);
      c.message = keep(o.message);
      c.applied_revision = o.applied_revision.value_or(0);
      c.http_status = o.http_status.value_or(0);
      c.retry_after_s = o.retry_after_s.value_or(-1);
      c.observed_generation = o.observed_generation.value_or(-1);
      c.observed_resource_version = keep(o.observed_resource_version);
      if (o.dpf) dpf_seen->push_back(dpf_json(w.service_id, *o.dpf));
      spdlog::debug("{} {} {}: {} {} ({} API calls)", w.dpf_service_name, w.lifecycle_state,
                    c.outcome, o.new_state, o.message, o.api_calls);
    });
  }
  flush_logs();
  pg_atomic_fetch_add_u64(&slot->http_requests, g_runtime->requests() - before);
  pg_atomic_fetch_add_u64(&slot->http_errors, g_runtime->errors() - errors_before);
  if (fenced) pg_atomic_fetch_add_u64(&slot->fenced, 1);
  if (err.sqlstate != 0 && !decoded) {
    // the claimed row itself is unreadable: retrying cannot help
    c.outcome = "transition";
    c.new_state = "FAILED";
    c.reason = "permanent_error";
    c.message = psprintf("the claimed row could not be decoded: %s", err.message);
  } else if (err.sqlstate != 0) {
    // A bug, not a cluster condition: retry with backoff, keep the text.
    c.outcome = "retry";
    c.message = err.message;
    retry_reason = "internal";
  }
  if (strcmp(c.outcome, "retry") == 0) metrics_retry(kMetricsQueueService, retry_reason);
  char* result = nullptr;
  char* error = nullptr;
  if (!spi_complete(cxt, &c, &result, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: recording the outcome for %s failed: %s", row.service_id,
                             error)));
    return;
  }
  pg_atomic_fetch_add_u64(&slot->completed, 1);
  if (result != nullptr && strcmp(result, "applied") != 0) {
    pg_atomic_fetch_add_u64(&slot->stale, 1);
    ereport(LOG, (errmsg("nico_extsvc: %s result for %s discarded (%s)", c.outcome,
                         row.dpf_service_name, result)));
  }
}

// One claimed DPU through the placement reconciler and back.
void process_dpu(MemoryContext cxt, const ClaimedDpu& row, reconcile::DpuReconciler* rec,
                 WorkerSlot* slot, SteadyClock::time_point deadline) {
  DpuCompletion c{};
  c.dpu_machine_id = row.dpu_machine_id;
  c.state_version = row.state_version;
  c.lease_token = row.lease_token;
  c.outcome = "retry";
  c.retry_after_s = -1;
  bool fenced = false;
  bool decoded = false;
  const char* retry_reason = "internal";  // metrics: static string of the reconciler
  PendingError err;
  const uint64 before = g_runtime->requests(), errors_before = g_runtime->errors();
  cpp_call(err, [&] {
    reconcile::DpuWork w;
    w.dpu_machine_id = row.dpu_machine_id;
    w.state_version = row.state_version;
    w.lease_token = row.lease_token;
    w.device_name = str(row.device_name);
    w.node_name = str(row.node_name);
    w.deregistered = row.deregistered;
    w.attempts = row.attempts;
    reconcile::decode_dpu_items(str(row.wanted_keys), str(row.items), w);
    decoded = true;
    w.lease_ok = fence_for(deadline);
    const FenceScope fence_scope(*g_runtime, w.lease_ok);
    const reconcile::DpuOutcome o = rec->reconcile(w);
    if (o.lost) {
      fenced = true;
      spdlog::warn("DPU {}: {}", w.device_name, o.message);
    }
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : o.results)
      results.push_back(
          {{"kind", r.item->kind},
           {"instance_id",
            r.item->instance_id.empty() ? nlohmann::json() : nlohmann::json(r.item->instance_id)},
           {"service_id", r.item->service_id},
           {"version", r.item->version},
           {"state", r.state},
           {"message", r.message}});
    auto keep = [&](const std::string& s) -> const char* {
      return s.empty() ? nullptr : copy_out(cxt, s);
    };
    c.outcome = o.retry ? "retry" : "observed";
    retry_reason = o.retry_reason;
    c.results = keep(results.dump());
    c.message = keep(o.message);
    c.http_status = o.http_status.value_or(0);
    c.retry_after_s = o.retry_after_s.value_or(-1);
    c.observation = keep(o.observation.dump());
    c.keep_polling = o.keep_polling;
    spdlog::debug("DPU {}: {} ({} API calls{})", w.device_name, c.outcome, o.api_calls,
                  o.patched ? ", labels patched" : "");
  });
  flush_logs();
  pg_atomic_fetch_add_u64(&slot->http_requests, g_runtime->requests() - before);
  pg_atomic_fetch_add_u64(&slot->http_errors, g_runtime->errors() - errors_before);
  if (fenced) pg_atomic_fetch_add_u64(&slot->fenced, 1);
  if (err.sqlstate != 0 && !decoded) {
    // A DPU has no FAILED state and its row is rebuilt from the tables at
    // every claim: back off at the full cap, say why in last_error (shown by
    // dpu_status) and in the log, and let the other DPUs of the batch go on.
    c.message = psprintf("the claimed DPU row could not be decoded: %s", err.message);
    c.retry_after_s = gucs.retry_cap_s;
    ereport(WARNING,
            (errmsg("nico_extsvc: DPU %s: %s",
                    row.device_name != nullptr ? row.device_name : "(unnamed)", c.message)));
  } else if (err.sqlstate != 0) {
    c.message = err.message;
  }
  if (strcmp(c.outcome, "retry") == 0) metrics_retry(kMetricsQueueDpu, retry_reason);
  char* result = nullptr;
  char* error = nullptr;
  if (!spi_complete_dpu(cxt, &c, &result, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: recording the DPU pass for %s failed: %s",
                             row.device_name, error)));
    return;
  }
  pg_atomic_fetch_add_u64(&slot->completed, 1);
  if (result != nullptr && strcmp(result, "applied") != 0) pg_atomic_fetch_add_u64(&slot->stale, 1);
}

// Claims and processes one batch of due DPUs; returns how many were claimed.
int dpu_batch(MemoryContext cxt, WorkerSlot* slot) {
  DpuClaimResult batch{};
  char* error = nullptr;
  const auto claim_start = SteadyClock::now();
  if (!spi_claim_dpus(cxt, g_worker_name, gucs.batch_size, gucs.lease_time_s, &batch, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: DPU claim failed: %s", error)));
    return 0;
  }
  if (batch.count == 0) return 0;
  pg_atomic_fetch_add_u64(&slot->claimed, batch.count);
  reconcile::DpuReconciler* rec = nullptr;
  PendingError err;
  cpp_call(err, [&] { rec = g_runtime->dpu_reconciler().release(); });
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("%s", err.message)));
    return batch.count;
  }
  auto deadline = lease_deadline(claim_start);
  const char** tokens = static_cast<const char**>(palloc0(sizeof(char*) * (batch.count + 1)));
  bool* alive = static_cast<bool*>(palloc0(sizeof(bool) * (batch.count + 1)));
  for (int i = 0; i < batch.count; ++i) {
    tokens[i] = batch.rows[i].lease_token;
    alive[i] = true;
  }
  for (int i = 0; i < batch.count; ++i) {
    CHECK_FOR_INTERRUPTS();
    maybe_renew(cxt, tokens, alive, i, batch.count, &deadline, slot);
    if (alive[i]) process_dpu(cxt, batch.rows[i], rec, slot, deadline);
  }
  std::string statuses;
  cpp_call(err, [&] {
    nlohmann::json seen = nlohmann::json::array();
    for (const auto& [id, st] : rec->dpf_statuses()) seen.push_back(dpf_json(id, st));
    delete rec;
    rec = nullptr;
    if (!seen.empty()) statuses = seen.dump();
  });
  record_dpf(cxt, statuses);
  return batch.count;
}

// Level-triggered cleanup: DPUServices with our ownership label that belong
// to no live service version (DELETED, unknown, superseded) are deleted, each
// with preconditions.uid of the listed object. The database is asked after
// the LIST, so a service whose DPUService was just created is known.
void cleanup_orphans(MemoryContext cxt, WorkerSlot* slot,
                     std::vector<reconcile::OrphanCandidate>* candidates,
                     const std::string& names) {
  char** orphans = nullptr;
  int count = 0;
  char* error = nullptr;
  if (candidates != nullptr && !names.empty() &&
      !spi_orphaned_dpuservices(cxt, names.c_str(), &orphans, &count, &error))
    ereport(WARNING,
            (errmsg("nico_extsvc: resync: checking orphaned DPUServices failed: %s", error)));
  int deleted = 0;
  PendingError err;
  cpp_call(err, [&] {
    for (int i = 0; i < count; ++i)
      for (const auto& c : *candidates) {
        if (c.name != orphans[i]) continue;
        if (auto e = g_runtime->delete_orphan(c)) {
          spdlog::warn("resync: deleting orphaned DPUService {} failed: {}", c.name,
                       kube::describe(*e));
        } else {
          ++deleted;
          spdlog::warn(
              "resync: deleted orphaned DPUService {} (uid {}): it carries our ownership label "
              "but belongs to no live service version",
              c.name, c.uid);
        }
      }
    delete candidates;
  });
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
  pg_atomic_fetch_add_u64(&slot->orphans_deleted, static_cast<uint64>(deleted));
}

// Drift detection: one LIST, compare, mark drifted services due. False when
// the snapshot or the LIST failed (nothing could be compared).
bool resync(MemoryContext cxt, WorkerSlot* slot) {
  SnapshotResult snap{};
  char* error = nullptr;
  if (!spi_resync_snapshot(cxt, &snap, &error)) {
    ereport(WARNING, (errmsg("nico_extsvc: resync snapshot failed: %s", error)));
    return false;
  }
  bool listed = false;
  PendingError err;
  int ndrift = 0;
  char** drift_ids = nullptr;
  char** drift_details = nullptr;
  std::string dpf_statuses;
  std::string orphan_names;  // text[] literal of the candidates
  std::vector<reconcile::OrphanCandidate>* candidates = nullptr;
  cpp_call(err, [&] {
    std::vector<reconcile::DesiredService> services;
    services.reserve(snap.count);
    for (int i = 0; i < snap.count; ++i)
      services.push_back({snap.rows[i].service_id, snap.rows[i].dpf_service_name,
                          snap.rows[i].attachable_version,
                          nlohmann::json::parse(snap.rows[i].desired)});
    std::vector<std::string> known;
    for (int i = 0; i < snap.known_count; ++i) known.push_back(str(snap.known_names[i]));
    const auto report = g_runtime->detect(services, known);
    if (report.error) {
      spdlog::warn("resync LIST failed: {}", kube::describe(*report.error));
      return;
    }
    listed = true;
    ndrift = static_cast<int>(report.drifted.size());
    drift_ids = alloc_out<char*>(cxt, ndrift + 1);
    drift_details = alloc_out<char*>(cxt, ndrift + 1);
    for (int i = 0; i < ndrift; ++i) {
      drift_ids[i] = copy_out(cxt, report.drifted[i].first);
      drift_details[i] = copy_out(cxt, report.drifted[i].second);
    }
    if (!report.dpf.empty()) {
      nlohmann::json seen = nlohmann::json::array();
      for (const auto& [id, st] : report.dpf) seen.push_back(dpf_json(id, st));
      dpf_statuses = seen.dump();
    }
    // candidates for the cleanup; the database decides after the LIST
    candidates = new std::vector<reconcile::OrphanCandidate>();
    for (const auto& o : report.orphans) {
      if (o.being_deleted) continue;
      candidates->push_back(o);
      orphan_names += orphan_names.empty() ? "{\"" : ",\"";
      for (char ch : o.name) {
        if (ch == '"' || ch == '\\') orphan_names += '\\';
        orphan_names += ch;
      }
      orphan_names += '"';
    }
    if (!orphan_names.empty()) orphan_names += '}';
    spdlog::debug("resync: {} listed, {} READY services, {} drifted", report.listed,
                  services.size(), ndrift);
  });
  flush_logs();
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("nico_extsvc: resync failed: %s", err.message)));
    return false;
  }
  record_dpf(cxt, dpf_statuses);
  cleanup_orphans(cxt, slot, candidates, orphan_names);
  for (int i = 0; i < ndrift; ++i) {
    if (!spi_mark_drift(cxt, drift_ids[i], drift_details[i], &error))
      ereport(WARNING, (errmsg("nico_extsvc: marking drift failed: %s", error)));
    else
      ereport(LOG,
              (errmsg("nico_extsvc: drift on service %s: %s", drift_ids[i], drift_details[i])));
  }
  return listed;
}

void worker_loop() {
  SharedState* st = shared_state();
  WorkerSlot* slot = &st->slots[g_slot];
  MemoryContext iter_cxt =
      AllocSetContextCreate(TopMemoryContext, "nico_extsvc iteration", ALLOCSET_DEFAULT_SIZES);
  rebuild_runtime();
  TimestampTz next_resync = 0;  // now: the first pass also checks drift
  // What the worker last waited for (logged once per change): nothing, the
  // extension missing, or an installed version other than the library's.
  enum class Waiting { no, missing, version } waiting = Waiting::no;
  bool released = false;

  for (;;) {
    CHECK_FOR_INTERRUPTS();
    MemoryContextReset(iter_cxt);
    MemoryContext old = MemoryContextSwitchTo(iter_cxt);
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
      rebuild_runtime();
    }
    pg_atomic_write_u32(&st->wake_pending, 0);
    pg_atomic_fetch_add_u64(&slot->iterations, 1);
    pg_atomic_write_u64(&slot->last_activity_us, static_cast<uint64>(GetCurrentTimestamp()));

    long timeout_ms = 10000;
    char* installed = nullptr;
    char* error = nullptr;
    if (g_runtime == nullptr) {
      rebuild_runtime();  // the last rebuild failed (logged): try again
      timeout_ms = 5000;
    } else if (!gucs.enabled || RecoveryInProgress() || !g_runtime->configured()) {
      timeout_ms = 60000;  // waits for SIGHUP (or promotion) — the latch wakes us
    } else if (!spi_extension_version(iter_cxt, &installed, &error) || installed == nullptr) {
      if (waiting != Waiting::missing)
        ereport(LOG, (errmsg("nico_extsvc: extension not installed in database \"%s\"; waiting",
                             gucs.database),
                      errhint("CREATE EXTENSION nico_extsvc in that database.")));
      waiting = Waiting::missing;
      timeout_ms = 5000;
    } else if (strcmp(installed, kLibraryVersion) != 0) {
      // The SQL objects are another version's (the library was upgraded and
      // ALTER EXTENSION UPDATE has not run yet): the worker's SQL calls could
      // name functions that do not exist, or exist with other signatures.
      if (waiting != Waiting::version)
        ereport(LOG,
                (errmsg("nico_extsvc: extension nico_extsvc in database \"%s\" is version %s but "
                        "the library is version %s; waiting",
                        gucs.database, installed, kLibraryVersion),
                 errhint("Run ALTER EXTENSION nico_extsvc UPDATE in database \"%s\"; the workers "
                         "resume by themselves.",
                         gucs.database)));
      waiting = Waiting::version;
      timeout_ms = 5000;
    } else {
      if (waiting == Waiting::version)
        ereport(LOG, (errmsg("nico_extsvc: extension nico_extsvc is version %s now; resuming",
                             kLibraryVersion)));
      waiting = Waiting::no;
      if (!released) {
        // Only one process runs per slot: leases under this slot's name are
        // its previous process's (killed, crashed) and are freed now rather
        // than after extsvc.lease_time.
        int n = 0;
        if (spi_release_leases(iter_cxt, g_worker_name, &n, &error)) {
          released = true;
          pg_atomic_fetch_add_u64(&slot->leases_released, static_cast<uint64>(n));
          if (n > 0)
            ereport(LOG, (errmsg("nico_extsvc: %s freed %d lease(s) of its previous process",
                                 g_worker_name, n)));
        } else {
          ereport(WARNING, (errmsg("nico_extsvc: releasing old leases failed: %s", error)));
        }
      }
      ClaimResult batch{};
      const auto claim_start = SteadyClock::now();
      if (!spi_claim(iter_cxt, g_worker_name, gucs.batch_size, gucs.lease_time_s, &batch, &error)) {
        ereport(WARNING, (errmsg("nico_extsvc: claim failed: %s", error)));
      } else {
        pg_atomic_fetch_add_u64(&slot->claimed, batch.count);
        nlohmann::json* dpf_seen = nullptr;
        PendingError jerr;
        cpp_call(jerr, [&] { dpf_seen = new nlohmann::json(nlohmann::json::array()); });
        auto deadline = lease_deadline(claim_start);
        const char** tokens = static_cast<const char**>(palloc0(sizeof(char*) * (batch.count + 1)));
        bool* alive = static_cast<bool*>(palloc0(sizeof(bool) * (batch.count + 1)));
        for (int i = 0; i < batch.count; ++i) {
          tokens[i] = batch.rows[i].lease_token;
          alive[i] = true;
        }
        for (int i = 0; dpf_seen != nullptr && i < batch.count; ++i) {
          CHECK_FOR_INTERRUPTS();
          maybe_renew(iter_cxt, tokens, alive, i, batch.count, &deadline, slot);
          if (alive[i]) process_row(iter_cxt, batch.rows[i], slot, dpf_seen, deadline);
        }
        std::string statuses;
        cpp_call(jerr, [&] {
          if (dpf_seen != nullptr && !dpf_seen->empty()) statuses = dpf_seen->dump();
          delete dpf_seen;
        });
        record_dpf(iter_cxt, statuses);
      }
      const int ndpus = dpu_batch(iter_cxt, slot);
      // Drift detection is one LIST per pass; the first worker does it.
      const TimestampTz now = GetCurrentTimestamp();
      if (g_slot == 0 && (now >= next_resync || pg_atomic_exchange_u32(&st->resync_requested, 0))) {
        const auto resync_start = SteadyClock::now();
        const bool resynced = resync(iter_cxt, slot);
        metrics_resync(resynced,
                       std::chrono::duration<double>(SteadyClock::now() - resync_start).count());
        // level-triggered placement: every DPU's labels are derived again
        int marked = 0;
        if (!spi_mark_dpus_due(iter_cxt, &marked, &error)) {
          ereport(WARNING, (errmsg("nico_extsvc: marking DPUs due failed: %s", error)));
        } else {
          pg_atomic_fetch_add_u64(&slot->dpus_rederived, static_cast<uint64>(marked));
          ereport(LOG,
                  (errmsg("nico_extsvc: resync: labels of %d DPU(s) are derived again", marked)));
        }
        next_resync = TimestampTzPlusMilliseconds(
            GetCurrentTimestamp(), static_cast<int64>(gucs.resync_interval_s) * 1000);
      }
      if (batch.count >= gucs.batch_size || ndpus >= gucs.batch_size) {
        timeout_ms = 0;  // more may be due right now
      } else {
        bool any = false;
        double due_s = 0;
        if (spi_next_due(iter_cxt, &any, &due_s, &error) && any)
          timeout_ms = std::clamp<long>(static_cast<long>(due_s * 1000) + 1, 0, timeout_ms);
      }
      if (g_slot == 0) {
        const long to_resync = static_cast<long>((next_resync - GetCurrentTimestamp()) / 1000);
        timeout_ms = std::max<long>(0, std::min(timeout_ms, to_resync));
      }
    }
    MemoryContextSwitchTo(old);
    if (timeout_ms > 0) {
      (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout_ms,
                      PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
    }
  }
}

}  // namespace

void register_workers() {
  for (int i = 0; i < gucs.workers && i < kMaxWorkers; ++i) {
    BackgroundWorker w;
    memset(&w, 0, sizeof w);
    w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    w.bgw_start_time = BgWorkerStart_RecoveryFinished;
    w.bgw_restart_time = 5;
    snprintf(w.bgw_library_name, BGW_MAXLEN, "nico_extsvc");
    snprintf(w.bgw_function_name, BGW_MAXLEN, "nico_extsvc_worker_main");
    snprintf(w.bgw_name, BGW_MAXLEN, "nico_extsvc worker %d", i);
    snprintf(w.bgw_type, BGW_MAXLEN, "nico_extsvc worker");
    w.bgw_main_arg = Int32GetDatum(i);
    RegisterBackgroundWorker(&w);
  }
}

}  // namespace extsvc::pg

using namespace extsvc::pg;

extern "C" void nico_extsvc_worker_main(Datum arg) {
  g_slot = DatumGetInt32(arg);
  snprintf(g_worker_name, sizeof g_worker_name, "nico_extsvc worker %d", g_slot);
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  SharedState* st = shared_state();
  if (st == nullptr) ereport(FATAL, (errmsg("nico_extsvc shared memory is missing")));
  BackgroundWorkerInitializeConnection(gucs.database, nullptr, 0);
  pgstat_report_appname(g_worker_name);
  st->slots[g_slot].latch = MyLatch;
  pg_atomic_write_u32(&st->slots[g_slot].pid, static_cast<uint32>(MyProcPid));
  metrics_worker_started(g_slot);
  before_shmem_exit(on_exit_clear_slot, 0);
  install_log_sink(g_worker_name);
  ereport(LOG, (errmsg("%s started in database \"%s\"", g_worker_name, gucs.database)));
  worker_loop();
}

// --- operator functions over shared memory ---------------------------------

static SharedState* require_shared() {
  SharedState* st = shared_state();
  if (st == nullptr)
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("nico_extsvc workers are not running"),
             errdetail("The library was not loaded through shared_preload_libraries."),
             errhint("Add nico_extsvc to shared_preload_libraries and restart the server.")));
  return st;
}

extern "C" Datum nico_extsvc_worker_status(PG_FUNCTION_ARGS) {
  SharedState* st = require_shared();
  ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  InitMaterializedSRF(fcinfo, 0);
  for (int i = 0; i < kMaxWorkers; ++i) {
    WorkerSlot& s = st->slots[i];
    const uint32 pid = pg_atomic_read_u32(&s.pid);
    if (pid == 0 && pg_atomic_read_u64(&s.iterations) == 0) continue;
    Datum values[14];
    bool nulls[14] = {false};
    values[0] = Int32GetDatum(i);
    nulls[1] = pid == 0;
    values[1] = Int32GetDatum(static_cast<int32>(pid));
    values[2] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.iterations)));
    values[3] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.claimed)));
    values[4] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.completed)));
    values[5] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.stale)));
    values[6] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.http_requests)));
    values[7] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.http_errors)));
    const uint64 last = pg_atomic_read_u64(&s.last_activity_us);
    nulls[8] = last == 0;
    values[8] = TimestampTzGetDatum(static_cast<TimestampTz>(last));
    values[9] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.fenced)));
    values[10] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.renewals)));
    values[11] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.orphans_deleted)));
    values[12] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.dpus_rederived)));
    values[13] = Int64GetDatum(static_cast<int64>(pg_atomic_read_u64(&s.leases_released)));
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
  }
  return (Datum)0;
}

extern "C" Datum nico_extsvc_request_resync(PG_FUNCTION_ARGS) {
  (void)fcinfo;
  SharedState* st = require_shared();
  pg_atomic_write_u32(&st->resync_requested, 1);
  wake_workers_now();
  PG_RETURN_VOID();
}
