// The lease process (issue 25): one background process per server, beside the workers, that
// holds the site's coordination.k8s.io/v1 Lease for them (controller::SiteLease: client-go's
// leader election plus the timeline rule) and publishes what it concluded in shared memory
// (site_state.hpp): while the Lease is held, until when a Kubernetes call may start under it;
// otherwise why every worker writes nothing (extsvc.site_id unset, timing settings that do not
// work together, a database identity that changed, another holder). Renewals run on their own
// schedule, never behind a worker's slow call. At a clean exit it stops every new call, waits for
// the calls under way, and releases the Lease so that the next holder need not wait.
#include "pg_prelude.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "controller/lease_watch.hpp"
#include "controller/site_lease.hpp"
#include "core/site.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "log_sink.hpp"
#include "metrics.hpp"
#include "process_budget.hpp"
#include "server_identity.hpp"
#include "site_access.hpp"
#include "site_state.hpp"
#include "timing_in_force.hpp"
#include "worker.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

namespace {

constexpr const char* kName = "nico_extsvc lease";
// Owned; rebuilt on SIGHUP and when the site id in force changes. Null until configured.
controller::Runtime* g_rt = nullptr;
// No write before this while we hold the Lease (SiteLease's writes_from after a preemption). Kept
// here, not only in g_lease: a reload rebuilds g_lease, whose first round then merely renews
controller::SiteLease::Clock::time_point g_writes_from{};
controller::SiteLease* g_lease = nullptr;
// The watch on the Lease (after g_lease, which it feeds; destroyed first).
controller::LeaseWatch* g_watch = nullptr;
ServerIdentity g_me;
// What was last published and logged (each change is logged once).
PauseReason g_last_reason = PauseReason::kStarting;
char g_last_detail[512];
char g_last_holder[320];

void destroy() {
  PendingError err;
  cpp_call(err, [] {
    delete g_watch;
    g_watch = nullptr;
    delete g_lease;
    g_lease = nullptr;
    delete g_rt;
    g_rt = nullptr;
  });
}

void rebuild() {
  destroy();
  char site[64];
  site_id_in_force(site, sizeof site);
  PendingError err;
  cpp_call(err, [&] {
    set_log_level(gucs.log_level);
    controller::Settings s = runtime_settings(site, g_me.user_agent);
    s.dpu = {};  // the Lease lives in the management cluster
    controller::Hooks hooks;
    hooks.observer = metrics_observer();
    // stop at shutdown, wait on the latch; the Lease's own writes need no fence
    hooks.budget = process_budget();
    auto rt = std::make_unique<controller::Runtime>(s, hooks);
    if (rt->configured() && site[0] != '\0' && timing_usable()) {
      core::HolderIdentity me;
      me.system_identifier = g_me.system_identifier;
      me.timeline = g_me.timeline;
      me.database = g_me.database;
      me.started = g_me.started;
      me.host = g_me.host;
      const auto& t = timing_in_force();
      controller::LeaseTiming timing;
      timing.duration = std::chrono::milliseconds(t.lease_duration_ms);
      timing.renew_deadline = std::chrono::milliseconds(t.renew_deadline_ms);
      timing.retry_period = std::chrono::milliseconds(t.retry_period_ms);
      timing.call_budget = std::chrono::milliseconds(t.http_timeout_ms + t.lease_margin_ms);
      g_lease = new controller::SiteLease(rt->management(), rt->ns(), site, me, timing);
      g_watch = new controller::LeaseWatch(rt->management(), *g_lease, rt->ns());
    }
    g_rt = rt.release();
  });
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
}

// Publishes the state for every process; logs it when it changed.
void publish(PauseReason reason, const char* detail, bool held, const char* holder,
             int64 valid_until_ns, int64 renew_until_ns) {
  SiteShared* site = site_shared();
  const auto before = static_cast<PauseReason>(pg_atomic_read_u32(&site->reason));
  if (reason != PauseReason::kNone) {
    // no call may start from now on; then the reason
    pg_atomic_write_u64(&site->valid_until_ns, 0);
    pg_atomic_write_u64(&site->renew_until_ns, 0);
    pg_memory_barrier();
    pg_atomic_write_u32(&site->reason, static_cast<uint32>(reason));
  } else {
    pg_atomic_write_u64(&site->valid_until_ns, static_cast<uint64>(valid_until_ns));
    pg_atomic_write_u64(&site->renew_until_ns, static_cast<uint64>(renew_until_ns));
    pg_memory_barrier();
    pg_atomic_write_u32(&site->reason, static_cast<uint32>(reason));
  }
  SpinLockAcquire(&site->lock);
  if (site->held != held || before != reason) site->since = GetCurrentTimestamp();
  site->held = held;
  strlcpy(site->holder, holder != nullptr ? holder : "", sizeof site->holder);
  strlcpy(site->detail, detail != nullptr ? detail : "", sizeof site->detail);
  strlcpy(site->settings_error, timing_refusal(), sizeof site->settings_error);
  SpinLockRelease(&site->lock);
  const bool writing = reason == PauseReason::kNone;
  if (before != reason) {
    if (writing) {
      pg_atomic_fetch_add_u64(&site->acquisitions, 1);
      // the watcher resyncs at once: adoption, orphans and labels after a change of writer
      if (SharedState* st = shared_state(); st != nullptr)
        pg_atomic_write_u32(&st->resync_requested, 1);
      ereport(LOG, (errmsg("nico_extsvc: this server holds the site Lease; the workers write "
                           "(%s)",
                           g_me.text)));
    } else if (reason == PauseReason::kLease || reason == PauseReason::kStarting) {
      ereport(LOG, (errmsg("nico_extsvc: the workers write nothing: %s", detail)));
    } else {
      ereport(WARNING, (errmsg("nico_extsvc: the workers write nothing (%s): %s",
                               pause_reason_name(reason), detail)));
    }
    wake_workers_now();
  } else if (!writing && strcmp(holder != nullptr ? holder : "", g_last_holder) != 0 &&
             holder != nullptr && holder[0] != '\0') {
    ereport(LOG, (errmsg("nico_extsvc: the site Lease is held by %s", holder)));
  }
  g_last_reason = reason;
  strlcpy(g_last_detail, detail != nullptr ? detail : "", sizeof g_last_detail);
  strlcpy(g_last_holder, holder != nullptr ? holder : "", sizeof g_last_holder);
}

void pause(PauseReason reason, const char* detail) {
  publish(reason, detail, false, g_last_holder, 0, 0);
}

// Gives the Lease up when held: a disabled or paused server must not keep others waiting.
void release_if_held(const char* why) {
  if (g_lease == nullptr) return;
  bool held = false;
  PendingError err;
  cpp_call(err, [&] { held = g_lease->status().held; });
  if (!held) return;
  pause(PauseReason::kLease, why);  // no new call from here on
  PendingError err2;
  cpp_call(err2, [&] { (void)g_lease->release(); });
  flush_logs();
}

// One round; returns how long to wait before the next.
long round(MemoryContext cxt) {
  const auto& t = timing_in_force();
  const long retry = timing_usable() ? t.retry_period_ms : 2000;
  if (!gucs.enabled) {
    release_if_held("extsvc.enabled is off");
    pause(PauseReason::kDisabled, "extsvc.enabled is off");
    return 60000;
  }
  // the site id: set, usable, and the one this server started to write for
  char site[64];
  site_id_in_force(site, sizeof site);
  const char* wanted = gucs.site_id != nullptr ? gucs.site_id : "";
  char why[512] = "";
  PendingError err;
  cpp_call(err, [&] {
    if (auto e = core::site_id_error(wanted))
      snprintf(why, sizeof why, "extsvc.site_id cannot be used: %s", e->c_str());
  });
  if (why[0] != '\0') {
    pause(PauseReason::kSiteId, why);
    return retry;
  }
  if (site[0] == '\0') {
    SiteShared* s = site_shared();
    SpinLockAcquire(&s->lock);
    strlcpy(s->site_id, wanted, sizeof s->site_id);
    SpinLockRelease(&s->lock);
    rebuild();
    wake_workers_now();  // their User-Agent and rendering follow the site id in force
  } else if (strcmp(site, wanted) != 0) {
    snprintf(why, sizeof why,
             "extsvc.site_id changed from \"%s\" to \"%s\" while the server runs; restart the "
             "server to write for \"%s\" (never give two sites one site id)",
             site, wanted, wanted);
    release_if_held(why);
    pause(PauseReason::kSiteId, why);
    return retry;
  }
  if (!timing_usable()) {
    strlcpy(why, timing_refusal(), sizeof why);
    pause(PauseReason::kTimingSettings, why);
    return retry;
  }
  if (g_rt == nullptr || !g_rt->configured() || g_lease == nullptr) {
    snprintf(why, sizeof why, "%s",
             g_rt != nullptr ? g_rt->config_error().c_str() : "the Kubernetes client is not built");
    pause(PauseReason::kLease, why);
    return 10000;
  }
  char* installed = nullptr;
  char* error = nullptr;
  if (!installed_extension_version(cxt, &installed, &error) || installed == nullptr ||
      strcmp(installed, kLibraryVersion) != 0) {
    snprintf(why, sizeof why, "extension nico_extsvc %s in database \"%s\" (library %s)",
             installed == nullptr ? "is not installed" : installed, gucs.database, kLibraryVersion);
    release_if_held(why);
    pause(PauseReason::kLease, why);
    return 5000;
  }
  IdentityStatus id{};
  if (!database_identity_status(cxt, &id, &error)) {
    snprintf(why, sizeof why, "reading the database identity failed: %s", error);
    release_if_held(why);
    pause(PauseReason::kDatabaseIdentity, why);
    return retry;
  }
  if (!id.matches) {
    snprintf(why, sizeof why,
             "this database runs as %s but recorded %s (a restore, a clone, or extsvc.database "
             "pointed elsewhere); if it is to write for site \"%s\", an extsvc_admin runs SELECT "
             "extsvc.confirm_database_identity()",
             id.current_identity, id.recorded, site);
    release_if_held(why);
    pause(PauseReason::kDatabaseIdentity, why);
    return retry;
  }
  // the Lease itself
  bool held = false, deposed = false;
  int64 valid = 0, renew = 0;
  long defer_ms = 0;  // held, but a deposed holder may still write
  char holder[320] = "";
  cpp_call(err, [&] {
    const auto& st = g_lease->step();
    held = st.held;
    deposed = st.deposed;
    snprintf(holder, sizeof holder, "%s", st.holder.c_str());
    snprintf(why, sizeof why, "%s", st.why.c_str());
    // steady_clock is CLOCK_MONOTONIC: the clock of site_now_ns()
    valid = std::chrono::duration_cast<std::chrono::nanoseconds>(st.valid_until.time_since_epoch())
                .count();
    renew = std::chrono::duration_cast<std::chrono::nanoseconds>(st.renew_until.time_since_epoch())
                .count();
    const auto now = controller::SiteLease::Clock::now();
    g_writes_from = st.held ? std::max(g_writes_from, st.writes_from)
                            : controller::SiteLease::Clock::time_point{};
    if (st.held && g_writes_from > now) {
      defer_ms = static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(g_writes_from - now).count() + 1);
      snprintf(why, sizeof why,
               "the Lease is ours, taken from a deposed holder on a lower timeline that may "
               "still write until its next renewal; our writes start in %ld ms",
               defer_ms);
    }
  });
  flush_logs();
  if (err.sqlstate != 0) {
    strlcpy(why, err.message, sizeof why);
    held = false;
  }
  if (held && defer_ms > 0)
    publish(PauseReason::kLease, why, true, holder, 0, 0);
  else if (held)
    publish(PauseReason::kNone, "", true, holder, valid, renew);
  else
    publish(deposed ? PauseReason::kDeposed : PauseReason::kLease, why, false, holder, 0, 0);
  if (held) return defer_ms > 0 ? std::min(retry, defer_ms) : retry;
  // client-go jitters the attempts to acquire (JitterFactor 1.2)
  static std::minstd_rand rng(static_cast<unsigned>(MyProcPid));
  return retry + static_cast<long>(rng() % static_cast<unsigned>(retry / 5 + 1));
}

// Waits up to timeout_ms for the latch, or for the watch on the Lease to bring news: a takeover
// closes the fence here, at once (then the caller's next round reads the Lease and says why); a
// release ends the wait so that the next round can take it.
void lease_wait(long timeout_ms) {
  const int64 deadline = site_now_ns() + static_cast<int64>(timeout_ms) * 1000000LL;
  for (;;) {
    const long left = static_cast<long>((deadline - site_now_ns()) / 1000000LL);
    if (left <= 0) return;
    std::vector<kube::Multi::Socket> sockets;
    long timer = -1;
    PendingError err;
    if (g_watch != nullptr)
      cpp_call(err, [&] {
        sockets = g_watch->sockets();
        timer = g_watch->next_timer_ms();
      });
    WaitEventSet* set =
        CreateWaitEventSet(CurrentMemoryContext, static_cast<int>(sockets.size()) + 2);
    AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    for (const auto& s : sockets) {
      const int ev = (s.read ? WL_SOCKET_READABLE : 0) | (s.write ? WL_SOCKET_WRITEABLE : 0);
      if (ev != 0) AddWaitEventToSet(set, ev, s.fd, nullptr, nullptr);
    }
    WaitEvent occurred[4];
    const int n = WaitEventSetWait(set, timer >= 0 ? Min(left, timer) : left, occurred,
                                   lengthof(occurred), PG_WAIT_EXTENSION);
    FreeWaitEventSet(set);
    bool latch = false;
    for (int i = 0; i < n; ++i) latch |= (occurred[i].events & WL_LATCH_SET) != 0;
    if (latch) {
      ResetLatch(MyLatch);
      return;
    }
    if (g_watch == nullptr) continue;
    auto news = controller::SiteLease::Seen::kNothing;
    char why[512] = "", holder[320] = "";
    bool deposed = false;
    cpp_call(err, [&] {
      news = g_watch->step();
      const auto& st = g_lease->status();
      snprintf(why, sizeof why, "%s", st.why.c_str());
      snprintf(holder, sizeof holder, "%s", st.holder.c_str());
      deposed = st.deposed;
    });
    flush_logs();
    if (err.sqlstate != 0) {
      // the rest of the wait without the watch's news (never spin on a ready socket)
      ereport(WARNING, (errmsg_internal("%s", err.message)));
      const long rest = static_cast<long>((deadline - site_now_ns()) / 1000000LL);
      if (rest > 0)
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, rest,
                        PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
      return;
    }
    if (news == controller::SiteLease::Seen::kLost) {
      // no call may start from here on
      g_writes_from = {};
      publish(deposed ? PauseReason::kDeposed : PauseReason::kLease, why, false, holder, 0, 0);
      return;
    }
    if (news == controller::SiteLease::Seen::kFree) return;
  }
}

// At exit: no new call, the calls under way end (each within its budget), then the release.
void on_exit(int, Datum) {
  SiteShared* site = site_shared();
  if (site == nullptr) return;
  pg_atomic_write_u64(&site->valid_until_ns, 0);
  pg_atomic_write_u64(&site->renew_until_ns, 0);
  pg_memory_barrier();
  pg_atomic_write_u32(&site->reason, static_cast<uint32>(PauseReason::kStarting));
  SpinLockAcquire(&site->lock);
  site->held = false;
  strlcpy(site->detail, "the lease process exited; it restarts by itself", sizeof site->detail);
  SpinLockRelease(&site->lock);
  bool held = false;
  PendingError err;
  cpp_call(err, [&] { held = g_lease != nullptr && g_lease->status().held; });
  if (held) {
    const int64 deadline = site_now_ns() + (call_budget_ms() + 500) * 1000000LL;
    for (;;) {
      bool busy = false;
      const int64 now = site_now_ns();
      for (auto& w : site->write_until_ns)
        if (static_cast<int64>(pg_atomic_read_u64(&w)) > now) busy = true;
      if (!busy || now > deadline) break;
      pg_usleep(20000);
    }
    cpp_call(err, [&] {
      // the release must not stop at the pending exit, nor wait on the latch while exiting
      g_rt->management().budget = kube::Budget();
      (void)g_lease->release();
    });
    flush_logs();
  }
  destroy();
  site->lease_latch = nullptr;
  pg_atomic_write_u32(&site->lease_pid, 0);
}

}  // namespace

}  // namespace extsvc::pg

using namespace extsvc::pg;

extern "C" void nico_extsvc_lease_main(Datum) {
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  SiteShared* site = site_shared();
  if (site == nullptr) ereport(FATAL, (errmsg("nico_extsvc shared memory is missing")));
  BackgroundWorkerInitializeConnection(gucs.database, nullptr, 0);
  pgstat_report_appname(kName);
  site->lease_latch = MyLatch;
  pg_atomic_write_u32(&site->lease_pid, static_cast<uint32>(MyProcPid));
  before_shmem_exit(on_exit, 0);
  install_log_sink(kName);
  server_identity(&g_me);
  SpinLockAcquire(&site->lock);
  strlcpy(site->identity, g_me.text, sizeof site->identity);
  SpinLockRelease(&site->lock);
  adopt_timing(true);
  ereport(LOG, (errmsg("%s started in database \"%s\" as %s", kName, gucs.database, g_me.text)));
  rebuild();
  MemoryContext cxt =
      AllocSetContextCreate(TopMemoryContext, "nico_extsvc lease", ALLOCSET_DEFAULT_SIZES);
  for (;;) {
    CHECK_FOR_INTERRUPTS();
    MemoryContextReset(cxt);
    MemoryContext old = MemoryContextSwitchTo(cxt);
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
      adopt_timing(true);
      rebuild();
    }
    const long wait_ms = round(cxt);
    restore_latch_wake();  // a wake the rate limiter's wait took is this wait's
    lease_wait(wait_ms);
    MemoryContextSwitchTo(old);
  }
}
