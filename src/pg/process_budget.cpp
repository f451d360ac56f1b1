// The latch wait of kube::Budget. It runs inside cpp_call, under the client's rate limiter: it
// must raise no PostgreSQL error and must not exit, so it notices what it waits for and returns;
// the budget's stop() then ends the call, and the process exits from its loop, outside C++.
#include "pg_prelude.hpp"

#include "process_budget.hpp"

#include <algorithm>
#include <chrono>

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

void latch_wait(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  const int rc = wait_latch(std::max<long>(1, static_cast<long>(ms)));
  if ((rc & WL_LATCH_SET) != 0) {
    ResetLatch(MyLatch);
    g_latch_taken = true;
  }
}

// a pending SIGTERM, or a dead postmaster (an orphan must not go on calling the API)
bool shutting_down() {
  return ProcDiePending != 0 || !PostmasterIsAlive();
}

}  // namespace

kube::Budget process_budget() {
  return kube::Budget().with_stop(shutting_down).with_wait(latch_wait);
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
