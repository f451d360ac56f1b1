// The latch waits of kube::Budget: the client's rate limiter's, and a request's for its transfer
// (the latch, postmaster death and the sockets of the curl multi it runs on, with curl's timer).
// They run inside cpp_call: they must raise no PostgreSQL error and must not exit, so they notice
// what they wait for and return; the budget's stop() then ends the call, and the process exits
// from its loop, outside C++.
#include "pg_prelude.hpp"

#include "process_budget.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kube/multi.hpp"

#include "site_state.hpp"
#include "timing_in_force.hpp"

namespace extsvc::pg {

namespace {

bool g_latch_taken = false;

// No C++ object lives in this frame: an error of WaitLatch (epoll failing) is caught here and
// never crosses C++ frames; the wait then ends as a timeout after a plain sleep.
int wait_latch(long timeout_ms) {
  volatile int rc = WL_TIMEOUT;
  MemoryContext cxt = CurrentMemoryContext;
  PG_TRY();
  {
    rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH, timeout_ms,
                   PG_WAIT_EXTENSION);
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(cxt);
    FlushErrorState();
    pg_usleep(timeout_ms * 1000L);
  }
  PG_END_TRY();
  return rc;
}

// As wait_latch, with the sockets too. The set lives for one wait: a request waits a few times,
// and a set kept across requests could name a socket curl has closed since.
int wait_sockets(const int* fds, const int* events, int n, long timeout_ms) {
  volatile int rc = WL_TIMEOUT;
  WaitEventSet* volatile set = nullptr;
  MemoryContext cxt = CurrentMemoryContext;
  PG_TRY();
  {
    set = CreateWaitEventSet(cxt, n + 2);
    AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(set, WL_POSTMASTER_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    for (int i = 0; i < n; ++i) AddWaitEventToSet(set, events[i], fds[i], nullptr, nullptr);
    WaitEvent occurred[8];
    const int k =
        WaitEventSetWait(set, timeout_ms, occurred, lengthof(occurred), PG_WAIT_EXTENSION);
    int got = k == 0 ? WL_TIMEOUT : 0;
    for (int i = 0; i < k; ++i) got |= static_cast<int>(occurred[i].events);
    rc = got;
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(cxt);
    FlushErrorState();
    pg_usleep(Min(timeout_ms, 100L) * 1000L);
  }
  PG_END_TRY();
  if (set != nullptr) FreeWaitEventSet(set);
  return rc;
}

void take_latch(int rc) {
  if ((rc & WL_LATCH_SET) != 0) {
    ResetLatch(MyLatch);
    g_latch_taken = true;
  }
}

void multi_wait(kube::Multi& multi, std::chrono::steady_clock::duration d) {
  long ms = static_cast<long>(std::chrono::ceil<std::chrono::milliseconds>(d).count());
  const long timer = multi.timeout_ms();
  if (timer >= 0) ms = std::min(ms, timer);
  std::vector<int> fds;
  std::vector<int> events;
  for (const auto& s : multi.sockets()) {
    const int ev = (s.read ? WL_SOCKET_READABLE : 0) | (s.write ? WL_SOCKET_WRITEABLE : 0);
    if (ev == 0) continue;
    fds.push_back(s.fd);
    events.push_back(ev);
  }
  take_latch(
      wait_sockets(fds.data(), events.data(), static_cast<int>(fds.size()), std::max(0L, ms)));
}

void latch_wait(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  take_latch(wait_latch(std::max<long>(1, static_cast<long>(ms))));
}

// a pending SIGTERM, or a dead postmaster (an orphan must not go on calling the API)
bool shutting_down() {
  return ProcDiePending != 0 || !PostmasterIsAlive();
}

}  // namespace

kube::Budget process_budget() {
  return kube::Budget().with_stop(shutting_down).with_wait(latch_wait).with_multi_wait(multi_wait);
}

kube::Budget worker_budget(int slot) {
  // the site Lease must outlive every call at the moment it starts, and every write when it is
  // sent (the announcement lets a release at shutdown wait for it)
  return process_budget().with_fence(
      [slot] { return site_write_permit(slot, call_budget_ms() * 1000000LL); });
}

void restore_latch_wake() {
  if (!g_latch_taken) return;
  g_latch_taken = false;
  SetLatch(MyLatch);
}

}  // namespace extsvc::pg
