// The nico_extsvc background worker's process: start, the loop (claim and
// work both queues, resync, sleep until woken at commit or the next due
// time) and the runtime rebuilt on SIGHUP.
#include "pg_prelude.hpp"

#include "worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include "guard.hpp"
#include "hand_over.hpp"
#include "heap_trim.hpp"
#include "gucs.hpp"
#include "log_sink.hpp"
#include "metrics.hpp"
#include "process_budget.hpp"
#include "sched_slice.hpp"
#include "server_identity.hpp"
#include "site_state.hpp"
#include "timing_in_force.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

controller::Runtime* g_runtime = nullptr;
int g_slot = -1;
char g_worker_name[64];

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string str(const char* s) {
  return s ? std::string(s) : std::string();
}

}  // namespace

controller::Settings runtime_settings(const char* site_id, const char* user_agent) {
  controller::Settings s;
  s.management = {str(gucs.management.kubeconfig), str(gucs.management.server),
                  str(gucs.management.ca_file), str(gucs.management.token_file)};
  s.dpu = {str(gucs.dpu.kubeconfig), str(gucs.dpu.server), str(gucs.dpu.ca_file),
           str(gucs.dpu.token_file)};
  s.insecure = gucs.insecure_skip_verify;
  s.ns = str(gucs.ns);
  s.qps = gucs.kube_qps;
  s.burst = gucs.kube_burst;
  s.connect_timeout_ms = gucs.connect_timeout_ms;
  s.timeout_ms = timing_in_force().http_timeout_ms;
  s.max_response_bytes = static_cast<size_t>(gucs.kube_max_response_kb) * 1024;
  s.max_list_bytes = static_cast<size_t>(gucs.kube_max_list_kb) * 1024;
  s.allow_insecure_http = gucs.kube_allow_insecure_http;
  s.watch_timeout_s = gucs.watch_timeout_s;
  s.site_id = str(site_id);
  s.user_agent = str(user_agent);
  return s;
}

namespace {

ServerIdentity g_identity;

// What the runtime was built from: its settings, and the identity of the files they name (a CA
// bundle or kubeconfig replaced under the same path is a change; the token file is re-read by the
// clients themselves). A reload that changes neither keeps the runtime and its caches: no re-list.
struct BuiltFrom {
  controller::Settings settings;
  std::string files;
  bool watch = false;  // extsvc.watch: the caches are part of the runtime
};
BuiltFrom* g_built = nullptr;
// When the watch caches last listed everything: the runtime's start (its informers list first)
// or the last safety-net re-list of a resync.
SteadyClock::time_point g_caches_listed_at{};

std::string file_stamp(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return path + ":-;";
  return path + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
}

std::string files_of(const controller::Settings& s) {
  return file_stamp(s.management.kubeconfig) + file_stamp(s.management.ca_file) +
         file_stamp(s.dpu.kubeconfig) + file_stamp(s.dpu.ca_file);
}
// Why the last rebuild of the runtime failed ("" when it did not), for worker_status().
char g_rebuild_error[256];

// On failure g_runtime stays null: the loop then idles and tries again (a
// null runtime is "not configured", never dereferenced).
// The site id in force (issue 25) is part of the runtime: it renders nico/site and the
// User-Agent names this server; the loop rebuilds when it changes (once: unset -> set).
void rebuild_runtime() {
  watch_reset();  // the wait set holds the old caches' sockets
  char site[64];
  site_id_in_force(site, sizeof site);
  PendingError err;
  cpp_call(err, [&] {
    delete g_runtime;  // first: a failed rebuild must not leave the old clients running
    g_runtime = nullptr;
    delete g_built;
    g_built = nullptr;
    set_log_level(gucs.log_level);
    controller::Hooks hooks;
    hooks.observer = metrics_observer();
    // between passes: stop at shutdown, wait on the latch, write only under the site Lease
    hooks.budget = worker_budget(g_slot);
    auto built = std::make_unique<BuiltFrom>();
    built->settings = runtime_settings(site, g_identity.user_agent);
    built->files = files_of(built->settings);
    built->watch = gucs.watch;
    auto fresh = std::make_unique<controller::Runtime>(built->settings, hooks);
    if (!fresh->configured()) spdlog::warn("worker idle: {}", fresh->config_error());
    g_runtime = fresh.release();
    g_built = built.release();
    g_caches_listed_at = SteadyClock::now();
  });
  flush_logs();
  g_rebuild_error[0] = '\0';
  if (err.sqlstate != 0) {
    strlcpy(g_rebuild_error, err.message, sizeof g_rebuild_error);
    if (g_slot >= 0) note_worker_error(&shared_state()->slots[g_slot], err.message);
    ereport(WARNING, (errmsg_internal("%s", err.message)));
  }
}

// After a reload: true when the runtime was built from exactly what the settings say now (then
// only the log level is applied).
bool runtime_current() {
  if (g_runtime == nullptr || g_built == nullptr) return false;
  char site[64];
  site_id_in_force(site, sizeof site);
  bool same = false;
  PendingError err;
  cpp_call(err, [&] {
    const controller::Settings now = runtime_settings(site, g_identity.user_agent);
    same =
        now == g_built->settings && files_of(now) == g_built->files && gucs.watch == g_built->watch;
    if (same) set_log_level(gucs.log_level);
  });
  flush_logs();
  return err.sqlstate == 0 && same;
}

// Publishes what this worker does now (issue 28), with the settings' error of the runtime.
void publish(WorkerSlot* slot, WorkerState state, const char* reason) {
  char cfg[256] = "";
  if (g_runtime == nullptr) {
    strlcpy(cfg, g_rebuild_error, sizeof cfg);
  } else {
    PendingError err;
    cpp_call(err, [&] {
      std::string e = g_runtime->configured() ? std::string() : g_runtime->config_error();
      const std::string& d = g_runtime->dpu_config_error();
      if (!d.empty()) e += (e.empty() ? "" : "; ") + std::string("DPU cluster: ") + d;
      strlcpy(cfg, e.c_str(), sizeof cfg);
    });
  }
  publish_worker_state(slot, state, reason, cfg);
}

// The state of a worker that may not write now: why, from the lease process's last word.
void publish_not_writing(WorkerSlot* slot) {
  SiteShared* site = site_shared();
  PauseReason r = PauseReason::kStarting;
  char detail[512] = "";
  if (site != nullptr) {
    r = static_cast<PauseReason>(pg_atomic_read_u32(&site->reason));
    SpinLockAcquire(&site->lock);
    strlcpy(detail, site->detail, sizeof detail);
    SpinLockRelease(&site->lock);
  }
  char reason[256];
  if (r == PauseReason::kNone) {
    publish(slot, WorkerState::kWaitingForLease,
            "the site Lease's renewal is overdue: no call may start under it");
    return;
  }
  snprintf(reason, sizeof reason, "%s: %s", pause_reason_name(r), detail);
  switch (r) {
    case PauseReason::kStarting:
    case PauseReason::kLease:
    case PauseReason::kDeposed:
      publish(slot, WorkerState::kWaitingForLease, reason);
      break;
    case PauseReason::kDisabled:
      publish(slot, WorkerState::kDisabled, reason);
      break;
    default:
      publish(slot, WorkerState::kPaused, reason);
      break;
  }
}

bool cluster_settings_empty() {
  auto blank = [](const char* v) { return v == nullptr || v[0] == '\0'; };
  return blank(gucs.management.kubeconfig) && blank(gucs.management.server);
}

void on_exit_clear_slot(int, Datum) {
  SharedState* st = shared_state();
  if (st != nullptr && g_slot >= 0) {
    hand_over_accepting(g_slot, false, 0, g_worker_name);
    st->slots[g_slot].latch = nullptr;
    pg_atomic_write_u32(&st->slots[g_slot].pid, 0);
  }
}

// The resync proper: drift detection (with the watch caches: against them),
// DPF's statuses, orphans, and every DPU's labels derived again.
void run_resync(MemoryContext cxt, WorkerSlot* slot) {
  char* error = nullptr;
  const auto resync_start = SteadyClock::now();
  const bool resynced = resync(cxt, slot);
  metrics_resync(resynced,
                 std::chrono::duration<double>(SteadyClock::now() - resync_start).count());
  // level-triggered placement: every DPU's labels are derived again, within what the orphan
  // guard's census allows (issue 25)
  if (resynced) label_census(cxt);
  int marked = 0;
  if (!mark_dpus_due(cxt, &marked, &error)) {
    note_worker_error(slot, error);
    ereport(WARNING, (errmsg("nico_extsvc: marking DPUs due failed: %s", error)));
  } else {
    pg_atomic_fetch_add_u64(&slot->dpus_rederived, static_cast<uint64>(marked));
    ereport(LOG, (errmsg("nico_extsvc: resync: labels of %d DPU(s) are derived again", marked)));
  }
}

void request_relist() {
  PendingError err;
  cpp_call(err, [] { g_runtime->cache()->request_relist(); });
  flush_logs();
}

// True once every informer finished the list that answers the resync's
// request (one that backs off is not waited for: a partition must not hold
// the management side's resync back; the timeout in the loop covers the rest).
bool relist_done() {
  bool done = true;
  PendingError err;
  cpp_call(err, [&] {
    auto* c = g_runtime != nullptr ? g_runtime->cache() : nullptr;
    if (c != nullptr) done = c->relist_done();
  });
  return done;
}

bool same_site(const std::string& in_runtime) {
  char site[64];
  site_id_in_force(site, sizeof site);
  return in_runtime == site;
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
  // the watch caches' re-list that a resync started and waits for
  bool relist_pending = false;
  SteadyClock::time_point relist_since{};

  for (;;) {
    CHECK_FOR_INTERRUPTS();
    MemoryContextReset(iter_cxt);
    MemoryContext old = MemoryContextSwitchTo(iter_cxt);
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
      adopt_timing(false);  // a set that does not work is refused (the lease process logs why)
      apply_sched_slice();
      if (runtime_current())
        ereport(DEBUG1, (errmsg_internal("nico_extsvc: configuration reloaded; the clusters' "
                                         "settings are unchanged, the caches are kept")));
      else
        rebuild_runtime();
    } else if (g_runtime != nullptr && !same_site(g_runtime->site_id())) {
      rebuild_runtime();  // the lease process adopted the site id
    }
    // the wake this iteration answers, if one is pending (read before it is reset)
    pg_atomic_write_u64(&slot->wake_seen_us, pg_atomic_read_u64(&st->wake_set_us));
    pg_atomic_write_u32(&st->wake_pending, 0);
    pg_atomic_fetch_add_u64(&slot->iterations, 1);
    pg_atomic_write_u64(&slot->last_activity_us, static_cast<uint64>(GetCurrentTimestamp()));

    long timeout_ms = 10000;
    // Hand-overs at commit (hand_over.hpp) go to a worker that waits for work: none while this
    // iteration runs (a claimed batch may take long at the rate limit; a commit meanwhile wakes
    // every worker and another claims its rows), again when it is about to wait.
    hand_over_accepting(g_slot, false, 0, g_worker_name);
    bool accepting = false;
    char* installed = nullptr;
    char* error = nullptr;
    if (g_runtime == nullptr) {
      rebuild_runtime();  // the last rebuild failed (logged): try again
      if (g_runtime == nullptr)
        publish(slot, WorkerState::kConfigError,
                "the runtime could not be built from the settings");
      timeout_ms = 5000;
    } else if (!gucs.enabled || RecoveryInProgress() || !g_runtime->configured()) {
      if (!gucs.enabled)
        publish(slot, WorkerState::kDisabled, "extsvc.enabled is off");
      else if (RecoveryInProgress())
        publish(slot, WorkerState::kStandby, "the server is in recovery (a standby)");
      else if (cluster_settings_empty())
        publish(slot, WorkerState::kUnconfigured,
                "no cluster configured (set extsvc.kubeconfig or extsvc.kube_server)");
      else
        publish(slot, WorkerState::kConfigError,
                "the management cluster's settings are not usable");
      timeout_ms = 60000;  // waits for SIGHUP (or promotion) — the latch wakes us
    } else if (!installed_extension_version(iter_cxt, &installed, &error) || installed == nullptr) {
      char why[256];
      snprintf(why, sizeof why, "extension nico_extsvc is not installed in database \"%s\"",
               gucs.database);
      if (installed == nullptr && error != nullptr) note_worker_error(slot, error);
      publish(slot, WorkerState::kUnconfigured, why);
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
      char why[256];
      snprintf(why, sizeof why, "extension nico_extsvc is version %s, the library %s", installed,
               kLibraryVersion);
      publish(slot, WorkerState::kVersionMismatch, why);
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
        if (queue_release(iter_cxt, g_worker_name, &n, &error)) {
          released = true;
          pg_atomic_fetch_add_u64(&slot->leases_released, static_cast<uint64>(n));
          if (n > 0)
            ereport(LOG, (errmsg("nico_extsvc: %s freed %d lease(s) of its previous process",
                                 g_worker_name, n)));
        } else {
          note_worker_error(slot, error);
          ereport(WARNING, (errmsg("nico_extsvc: releasing old leases failed: %s", error)));
        }
      }
      // issue 25: nothing is written while this server does not hold the site Lease (or its
      // writes are paused); the watcher keeps its caches, the resync waits
      const bool writing = site_writes_allowed(call_budget_ms() * 1000000LL);
      if (writing)
        publish(slot, WorkerState::kWorking, "");
      else
        publish_not_writing(slot);
      // Issue 26, part 4: the creates handed over at commit first, before anything else of the
      // iteration (the watcher's publication is a transaction of its own).
      accepting = writing && gucs.hand_over;
      if (writing) work_handed_over(iter_cxt, slot);
      watch_start();
      // issue 23, part 5: the DPF API the cluster serves, at the start and after a reconnect
      {
        PendingError api_err;
        bool read = false;
        uint32 bits = 0;
        cpp_call(api_err, [&] {
          read = g_runtime->check_dpf_api();
          bits = g_runtime->dpf_api().bits();
        });
        flush_logs();  // an exception is logged there; the next iteration tries again
        if (read) pg_atomic_write_u32(&st->dpf_api, bits);
      }
      // The resync that a finished re-list allows runs after this iteration's publication, so
      // that what the re-list changed wakes and claims its rows before the resync makes every
      // DPU due.
      const bool resync_after_relist =
          relist_pending && writing &&
          (relist_done() || SteadyClock::now() - relist_since >
                                std::chrono::milliseconds(2 * timing_in_force().http_timeout_ms));
      // The watcher's two steps, once each, first: what woke this iteration is mostly a change
      // in its caches, and the DPU rows it concerns are claimed by the publication and worked
      // right after it, before either queue's backlog, since their passes read the caches and
      // make no call, while a backlog pass may wait for the rate limit (a fleet attach of 1000
      // DPUs showed no RUNNING before its last label patch). What arrives while the batches run
      // is published by the next iteration, which then starts without sleeping.
      ClaimedByEvents claimed;
      const bool published = watch_publish(iter_cxt, slot, &claimed);
      watch_work_claimed(iter_cxt, slot, claimed);
      const int nservices = work_batch(iter_cxt, Queue::kService, slot);
      const int ndpus = works_dpu_queue() ? work_batch(iter_cxt, Queue::kDpu, slot) : 0;
      if (resync_after_relist) {
        relist_pending = false;
        run_resync(iter_cxt, slot);
      }
      // Drift detection is one LIST per pass (or, with the watch caches, a comparison in
      // memory, after a re-list of every informer once extsvc.relist_interval has passed); the
      // first worker does it.
      const TimestampTz now = GetCurrentTimestamp();
      if (g_slot == 0 && writing &&
          (now >= next_resync || pg_atomic_exchange_u32(&st->resync_requested, 0))) {
        next_resync =
            TimestampTzPlusMilliseconds(now, static_cast<int64>(gucs.resync_interval_s) * 1000);
        if (g_runtime->cache() != nullptr) {
          // The watch keeps the caches current (a 410 or a lost stream lists again by itself),
          // so the re-list is a safety net, not the resync's price: at 25,000 DPUs it is 180
          // LISTs. It runs when extsvc.relist_interval has passed since the caches last listed
          // everything, else the resync compares the caches at once (issue 26).
          const auto since_listed = SteadyClock::now() - g_caches_listed_at;
          if (relist_pending) {
            // the comparison follows the re-list under way
          } else if (since_listed >= std::chrono::seconds(gucs.relist_interval_s)) {
            request_relist();  // the safety net; the comparison follows once it is done
            relist_since = g_caches_listed_at = SteadyClock::now();
            relist_pending = true;
          } else {
            run_resync(iter_cxt, slot);
          }
        } else {
          run_resync(iter_cxt, slot);
        }
      }
      if (!writing) {
        // due rows wait (nothing is claimed); the lease process wakes the workers when writes
        // resume, but a renewal that comes back after a failure does not: look again each
        // retry period
        timeout_ms = timing_in_force().retry_period_ms;
      } else if (nservices >= gucs.batch_size || ndpus >= gucs.batch_size) {
        timeout_ms = 0;  // more may be due right now
      } else {
        bool any = false;
        double due_s = 0;
        if (queue_next_due(iter_cxt, &any, &due_s, &error, !works_dpu_queue()) && any)
          timeout_ms = std::clamp<long>(static_cast<long>(due_s * 1000) + 1, 0, timeout_ms);
        // in watch mode the others claim only creates (issue 26, part 2): an overdue update or
        // delete is the watcher's, and must not make them spin (a new create wakes them anyway)
        if (gucs.watch && g_slot != 0 && nservices == 0) timeout_ms = std::max(timeout_ms, 250L);
      }
      if (writing && g_slot == 0) {
        const long to_resync = static_cast<long>((next_resync - GetCurrentTimestamp()) / 1000);
        timeout_ms = std::max<long>(0, std::min(timeout_ms, to_resync));
        if (relist_pending) timeout_ms = std::min(timeout_ms, 200L);
      }
      // a failed publication is retried at the next iteration's pace, not in a busy loop
      if (published && watch_changes_pending()) timeout_ms = 0;
    }
    if (accepting && timeout_ms > 0)
      hand_over_accepting(g_slot, true, lease_seconds(), g_worker_name);
    watch_report();
    MemoryContextSwitchTo(old);
    restore_latch_wake();  // a wake the rate limiter's wait took is this wait's
    if (timeout_ms > 0) {
      give_back_free_heap();  // idle now: what the work freed goes back to the system
      watch_wait(timeout_ms);
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
  if (gucs.workers < 1) return;
  BackgroundWorker lease;
  memset(&lease, 0, sizeof lease);
  lease.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  lease.bgw_start_time = BgWorkerStart_RecoveryFinished;
  lease.bgw_restart_time = 5;
  snprintf(lease.bgw_library_name, BGW_MAXLEN, "nico_extsvc");
  snprintf(lease.bgw_function_name, BGW_MAXLEN, "nico_extsvc_lease_main");
  snprintf(lease.bgw_name, BGW_MAXLEN, "nico_extsvc lease");
  snprintf(lease.bgw_type, BGW_MAXLEN, "nico_extsvc lease");
  RegisterBackgroundWorker(&lease);
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
  // The workers run as the bootstrap superuser: the search_path of the
  // database or role (say "$user", public, with public writable by others)
  // must never resolve a name in their statements (issue 29). The same
  // always-safe path PostgreSQL's own background processes use, as an
  // override: a reload of postgresql.conf, ALTER DATABASE/ROLE ... SET or a
  // RESET cannot bring another one back; a function's own SET search_path
  // still applies inside it.
  SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
  // No JIT: the workers' statements are short and planned for a site's row counts, where the
  // planner's cost estimates pass jit_above_cost; compiling them took longer than running them,
  // and LLVM's inlining summaries and code stayed resident in the watcher (issue 26: over 10 MiB
  // of its heap at 10,000 DPUs, heaptrack). A session setting, so that an
  // operator's jit = on for NICo's sessions is not touched.
  SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
  pgstat_report_appname(g_worker_name);
  st->slots[g_slot].latch = MyLatch;
  pg_atomic_write_u32(&st->slots[g_slot].pid, static_cast<uint32>(MyProcPid));
  metrics_worker_started(g_slot);
  before_shmem_exit(on_exit_clear_slot, 0);
  // before this slot's old leases are released (the first working iteration): what was handed
  // over to the previous process is void
  hand_over_worker_start(g_slot);
  install_log_sink(g_worker_name);
  server_identity(&g_identity);
  adopt_timing(false);
  apply_sched_slice();
  ereport(LOG, (errmsg("%s started in database \"%s\"", g_worker_name, gucs.database)));
  worker_loop();
}
