// The workers' scheduling slice (issue 26, part 4): a woken worker competes for a CPU with every
// backend of a burst of NICo's commits, and on a loaded server waited 2-9 ms for one after the
// wake at commit set its latch. Linux's EEVDF scheduler takes a SCHED_OTHER task's sched_runtime
// as a slice request from 6.12 on, and a shorter slice as a request for lower latency: the
// task's virtual deadline comes earlier, so a woken worker runs next (preempting the running
// task), while its share of the CPU stays what its weight gives it. Older kernels accept the
// value and ignore it.
#pragma once

namespace extsvc::pg {

// Applies extsvc.worker_sched_slice to this process (at the start and after each reload; a
// change is applied then). A kernel that refuses it is logged once, never an error.
void apply_sched_slice();

}  // namespace extsvc::pg
