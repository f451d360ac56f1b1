// The budget of this process's Kubernetes calls (kube/budget.hpp, issue 24): they stop at SIGTERM
// or postmaster death, and the client's rate limiter waits on the process latch, so that either
// ends a throttled burst at once.
#pragma once

#include "kube/budget.hpp"

namespace extsvc::pg {

// Stop and wait only: the lease process, whose only writes are the Lease itself.
kube::Budget process_budget();
// A worker's: writes need the site Lease too (issue 25). A pass adds its row lease's deadline.
kube::Budget worker_budget(int slot);
// The budget's wait resets the latch it woke on; a wake meant for the loop (a commit, SIGHUP, the
// lease process's news) is set again here, before the loop's own wait, so that it is not lost.
void restore_latch_wake();

}  // namespace extsvc::pg
