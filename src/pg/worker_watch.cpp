// The watcher (issue 11): worker 0, with extsvc.watch on, holds the LIST+WATCH caches
// (controller::ClusterCache) and wakes exactly the rows that a change concerns. Its transfers
// run on curl's multi interface inside this process, without threads: the loop waits on a
// WaitEventSet of its latch, postmaster death and curl's sockets (as pg_net waits on its
// sockets), then pumps the caches. What changed is published in one transaction per loop
// iteration, one statement per kind: the DPU rows by DPUDevice/Node name or by a service whose
// context changed, made due and claimed at once (mark_and_claim_dpus), DELETING services
// (wake_services), DPF's status (record_dpf_status) and the work of the READY services for the
// drift check (resync_snapshot_of, compared with the cache after the commit). The claimed DPU
// rows are worked by the next step of the loop (worker_main.cpp).
#include "pg_prelude.hpp"

#include <chrono>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "controller/resync.hpp"
#include "controller/wire.hpp"
#include "guard.hpp"
#include "gucs.hpp"
#include "log_sink.hpp"
#include "metrics.hpp"
#include "process_budget.hpp"
#include "site_state.hpp"
#include "timing_in_force.hpp"
#include "worker_internal.hpp"

namespace extsvc::pg {

namespace {

WaitEventSet* g_set = nullptr;
const void* g_set_cache = nullptr;
uint64 g_set_generation = 0;

controller::ClusterCache* cache() {
  return g_runtime != nullptr ? g_runtime->cache() : nullptr;
}

char** names_out(MemoryContext cxt, const std::set<std::string>& names) {
  char** out = alloc_out<char*>(cxt, names.size() + 1);
  size_t i = 0;
  for (const auto& n : names) out[i++] = copy_out(cxt, n);
  return out;
}

}  // namespace

bool is_watcher() {
  return gucs.watch && g_slot == 0;
}

bool works_dpu_queue() {
  if (!gucs.watch) return true;
  if (g_slot != 0) return false;
  // a restarted watcher works DPUs once its fresh LIST of the management cluster is in
  controller::ClusterCache* c = cache();
  bool synced = false;
  if (c != nullptr) {
    PendingError err;
    cpp_call(err, [&] { synced = c->management_synced(); });
  }
  return synced;
}

void watch_reset() {
  if (g_set != nullptr) FreeWaitEventSet(g_set);
  g_set = nullptr;
  g_set_cache = nullptr;
}

void watch_start() {
  if (!is_watcher() || g_runtime == nullptr || g_runtime->cache() != nullptr) return;
  PendingError err;
  cpp_call(err, [] { g_runtime->start_watching(); });
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
}

void watch_pump() {
  if (cache() == nullptr) return;
  PendingError err;
  cpp_call(err, [] { cache()->pump(); });
  flush_logs();
  if (err.sqlstate != 0) ereport(WARNING, (errmsg_internal("%s", err.message)));
}

long watch_timer_ms() {
  long t = -1;
  if (cache() == nullptr) return t;
  PendingError err;
  cpp_call(err, [&] { t = cache()->next_timer_ms(); });
  return t;
}

bool watch_publish(MemoryContext cxt, WorkerSlot* slot, ClaimedByEvents* claimed) {
  *claimed = ClaimedByEvents{};
  controller::ClusterCache* c = cache();
  if (c == nullptr) return true;
  WatchChanges in;
  char** services = nullptr;           // in.services, as the drift check takes them
  controller::Dirty* dirty = nullptr;  // freed below, under the guard
  bool empty = true;
  PendingError err;
  cpp_call(err, [&] {
    c->pump();
    dirty = new controller::Dirty(c->take_dirty());
    empty = dirty->empty();
    if (empty) return;
    in.ndevices = static_cast<int>(dirty->devices.size());
    in.devices = names_out(cxt, dirty->devices);
    in.nnodes = static_cast<int>(dirty->nodes.size());
    in.nodes = names_out(cxt, dirty->nodes);
    in.nservices = static_cast<int>(dirty->services.size());
    services = names_out(cxt, dirty->services);
    in.services = services;
    in.every_deleting = dirty->every_deleting;
    in.ncontext = static_cast<int>(dirty->context.size());
    in.context = names_out(cxt, dirty->context);
    std::vector<std::pair<std::string, core::DpfStatus>> st(dirty->dpf.begin(), dirty->dpf.end());
    const std::string text = controller::encode_dpf_statuses(st);
    if (!text.empty()) in.dpf = copy_out(cxt, text);
  });
  flush_logs();
  auto free_dirty = [&](bool restore) {
    PendingError free_err;
    cpp_call(free_err, [&] {
      if (restore) c->restore_dirty(std::move(*dirty));  // published next time
      delete dirty;
    });
  };
  if (err.sqlstate != 0 || empty) {
    if (err.sqlstate != 0)
      ereport(WARNING, (errmsg_internal("nico_extsvc: watch: %s", err.message)));
    free_dirty(false);
    return err.sqlstate == 0;
  }
  // The DPU rows the events name are claimed in the same statement that wakes them while this
  // worker may work them (its caches listed, the site's writes allowed); else they are only
  // marked and wait in the queue. At most kMaxClaims: the rest stay due for the queue's claims.
  constexpr int kMaxClaims = 256;
  if (works_dpu_queue() && site_writes_allowed(call_budget_ms() * 1000000LL)) {
    in.worker = g_worker_name;
    in.lease_s = lease_seconds();
    in.max_claims = kMaxClaims;
  }
  WatchPublished out{};
  char* error = nullptr;
  const auto claimed_from = std::chrono::steady_clock::now();
  if (!publish_watch_changes(cxt, in, &out, &error)) {
    note_worker_error(slot, error);
    ereport(WARNING, (errmsg("nico_extsvc: publishing watch events failed: %s", error)));
    free_dirty(true);
    return false;
  }
  free_dirty(false);
  pg_atomic_fetch_add_u64(&slot->watch_dpu_wakes, static_cast<uint64>(out.woken));
  claimed->batch = out.claimed;
  claimed->claimed_from = claimed_from;
  // the drift check compares with the cache and may delete orphans: calls, so after the commit
  if (in.nservices > 0) check_drift(cxt, slot, out.snapshot, services, in.nservices);
  return true;
}

void watch_work_claimed(MemoryContext cxt, WorkerSlot* slot, const ClaimedByEvents& claimed) {
  work_rows(cxt, Queue::kDpu, slot, claimed.batch, claimed.claimed_from);
}

bool watch_changes_pending() {
  controller::ClusterCache* c = cache();
  if (c == nullptr) return false;
  bool pending = false;
  PendingError err;
  cpp_call(err, [&] { pending = c->has_changes(); });
  return err.sqlstate == 0 && pending;
}

namespace {

// What the loop reports of the caches' informers (watch_report) and decides from (the watcher
// works DPUs once synced; the resync waits for a re-list): a change of any of it ends the wait,
// an event that changed none of it does not.
uint64 informer_state_digest(controller::ClusterCache* c) {
  uint64 h = 1469598103934665603ULL;  // FNV-1a
  auto mix = [&h](uint64 v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  PendingError err;
  cpp_call(err, [&] {
    const auto informers = c->informers();
    mix(informers.size());
    for (const auto& i : informers) {
      mix(std::hash<std::string>{}(i.name));
      mix(std::hash<std::string>{}(i.cluster));
      mix((i.synced ? 1U : 0U) | (i.current ? 2U : 0U));
      mix(i.stats.lists);
      mix(i.stats.expired);
      mix(i.stats.errors);
      mix(std::hash<std::string>{}(i.last_error));
    }
  });
  return err.sqlstate == 0 ? h : 0;
}

// Rebuilds the wait set when curl's sockets changed (a new generation) or the caches were
// replaced; false when curl's sockets could not be read (logged).
bool ensure_wait_set(controller::ClusterCache* c) {
  uint64 generation = 0;
  int n = 0;
  int* fds = nullptr;
  int* events = nullptr;
  bool rebuild = false;
  PendingError err;
  cpp_call(err, [&] {
    generation = c->multi().generation();
    rebuild = g_set == nullptr || g_set_cache != c || g_set_generation != generation;
    if (!rebuild) return;
    const auto sockets = c->multi().sockets();
    fds = alloc_out<int>(CurrentMemoryContext, sockets.size() + 1);
    events = alloc_out<int>(CurrentMemoryContext, sockets.size() + 1);
    for (const auto& s : sockets) {
      const int ev = (s.read ? WL_SOCKET_READABLE : 0) | (s.write ? WL_SOCKET_WRITEABLE : 0);
      if (ev == 0) continue;
      fds[n] = s.fd;
      events[n] = ev;
      ++n;
    }
  });
  if (err.sqlstate != 0) {
    ereport(WARNING, (errmsg_internal("%s", err.message)));
    watch_reset();
    return false;
  }
  if (rebuild) {
    watch_reset();
    g_set = CreateWaitEventSet(TopMemoryContext, n + 2);
    AddWaitEventToSet(g_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(g_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    for (int i = 0; i < n; ++i) AddWaitEventToSet(g_set, events[i], fds[i], nullptr, nullptr);
    g_set_cache = c;
    g_set_generation = generation;
  }
  if (fds != nullptr) pfree(fds);
  if (events != nullptr) pfree(events);
  return true;
}

}  // namespace

// Waits up to timeout_ms and pumps the caches on each socket event or curl timer, but returns to
// the loop (whose iteration is several transactions) only for what the loop acts on: its latch
// (a wake, SIGHUP, SIGTERM), the timeout, a change to publish or a changed informer state. A
// watch event for an object no row concerns (a foreign pod, a label of someone else's) is
// taken in here: issue 24 measured 381 iterations for 480 such events before.
TimestampTz g_wait_returned_us = 0;

void watch_wait(long timeout_ms) {
  controller::ClusterCache* c = cache();
  if (c == nullptr) {
    watch_reset();
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout_ms,
                    PG_WAIT_EXTENSION);
    g_wait_returned_us = GetCurrentTimestamp();
    ResetLatch(MyLatch);
    return;
  }
  const TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
  const uint64 state = informer_state_digest(c);
  for (;;) {
    if (!ensure_wait_set(c)) {
      (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                      Min(timeout_ms, 1000L), PG_WAIT_EXTENSION);
      ResetLatch(MyLatch);
      return;
    }
    long left = static_cast<long>(TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline));
    const long timer = watch_timer_ms();
    if (timer >= 0) left = Min(left, timer);
    WaitEvent occurred[8];
    const int nevents =
        WaitEventSetWait(g_set, left, occurred, lengthof(occurred), PG_WAIT_EXTENSION);
    g_wait_returned_us = GetCurrentTimestamp();
    bool latch = false;
    for (int i = 0; i < nevents; ++i) latch = latch || (occurred[i].events & WL_LATCH_SET) != 0;
    // The latch is reset only when it was seen: one set after the wait returned for a socket
    // stays set and ends the next wait at once (a SIGHUP's is never lost in this loop).
    if (latch) ResetLatch(MyLatch);
    // what woke us is read at once: a loop iteration that does not get to the caches (the
    // extension dropped, the worker paused) must not find the same ready socket again and spin
    watch_pump();
    restore_latch_wake();  // a wake the rate limiter's wait took ends this wait
    if (latch || ConfigReloadPending || ProcDiePending) return;
    if (GetCurrentTimestamp() >= deadline) return;
    if (watch_changes_pending() || informer_state_digest(c) != state) return;
    // the counters of watch_status() (events, bookmarks) go on while the loop does not
    watch_report();
    CHECK_FOR_INTERRUPTS();
  }
}

namespace {

// Issue 28: every informer the watcher should run is reported, also one that never started
// (unconfigured or misconfigured cluster, worker disabled): not current, with why. Returns the
// new count.
int add_missing_informers(InformerSlot* slots, int n) {
  auto blank = [](const char* v) { return v == nullptr || v[0] == '\0'; };
  struct Want {
    const char* resource;
    const char* cluster;
  };
  static const Want kWanted[] = {{"dpudevices", "management"},
                                 {"dpuservices", "management"},
                                 {"dpus", "management"},
                                 {"nodes", "dpu"},
                                 {"pods", "dpu"},
                                 {"events", "dpu"},
                                 {"daemonsets", "dpu"}};
  const bool dpu_set = !blank(gucs.dpu.kubeconfig) || !blank(gucs.dpu.server);
  std::string management_error, dpu_error;
  PendingError err;
  cpp_call(err, [&] {
    if (g_runtime == nullptr) {
      management_error = "the runtime could not be built from the settings";
    } else {
      if (!g_runtime->configured()) management_error = g_runtime->config_error();
      dpu_error = g_runtime->dpu_config_error();
    }
  });
  for (const Want& w : kWanted) {
    if (n >= kMaxInformers) break;
    const bool dpu = strcmp(w.cluster, "dpu") == 0;
    if (dpu && !dpu_set) continue;  // no DPU cluster: its informers are not wanted
    bool found = false;
    for (int i = 0; i < n && !found; ++i)
      found =
          strcmp(slots[i].resource, w.resource) == 0 && strcmp(slots[i].cluster, w.cluster) == 0;
    if (found) continue;
    InformerSlot& s = slots[n++];
    memset(&s, 0, sizeof s);
    strlcpy(s.resource, w.resource, sizeof s.resource);
    strlcpy(s.cluster, w.cluster, sizeof s.cluster);
    const char* why = !management_error.empty()   ? management_error.c_str()
                      : dpu && !dpu_error.empty() ? dpu_error.c_str()
                                                  : "the worker does not run its informers now";
    snprintf(s.last_error, sizeof s.last_error, "not started: %s", why);
  }
  return n;
}

}  // namespace

void watch_report() {
  SharedState* st = shared_state();
  if (st == nullptr || !is_watcher()) return;  // only the watcher's informers are reported
  InformerSlot slots[kMaxInformers];
  memset(slots, 0, sizeof slots);
  int n = 0;
  if (controller::ClusterCache* c = cache()) {
    PendingError err;
    cpp_call(err, [&] {
      for (const auto& i : c->informers()) {
        if (n >= kMaxInformers) break;
        InformerSlot& s = slots[n++];
        snprintf(s.resource, sizeof s.resource, "%s", i.name.c_str());
        snprintf(s.cluster, sizeof s.cluster, "%s", i.cluster.c_str());
        s.synced = i.synced;
        s.current = i.current;
        s.objects = static_cast<int64>(i.objects);
        s.lists = static_cast<int64>(i.stats.lists);
        s.watches = static_cast<int64>(i.stats.watches);
        s.events = static_cast<int64>(i.stats.events);
        s.bookmarks = static_cast<int64>(i.stats.bookmarks);
        s.expired = static_cast<int64>(i.stats.expired);
        s.errors = static_cast<int64>(i.stats.errors);
        s.current_at =
            i.current_at_us == 0
                ? 0
                : i.current_at_us - static_cast<int64>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
                                        SECS_PER_DAY * USECS_PER_SEC;
        snprintf(s.last_error, sizeof s.last_error, "%s", i.last_error.c_str());
      }
    });
    if (err.sqlstate != 0) n = 0;
  }
  n = add_missing_informers(slots, n);
  static TimestampTz started_at = 0;  // this watcher process's start, for the informers' age
  if (started_at == 0) started_at = GetCurrentTimestamp();
  SpinLockAcquire(&st->informers_lock);
  // an informer of a rebuilt cache (a reload) that has not listed yet was last current when the
  // previous one was: its age goes on from there
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < st->informer_count && slots[i].current_at == 0; ++j)
      if (strcmp(st->informers[j].resource, slots[i].resource) == 0 &&
          strcmp(st->informers[j].cluster, slots[i].cluster) == 0)
        slots[i].current_at = st->informers[j].current_at;
  }
  memcpy(st->informers, slots, sizeof slots);
  st->informer_count = n;
  st->watcher_pid = n > 0 ? MyProcPid : 0;
  st->watcher_started_at = started_at;
  SpinLockRelease(&st->informers_lock);
}

}  // namespace extsvc::pg
