// The workers' scheduling weight (issue 26, part 4). Each PostgreSQL child leads a session of its
// own, so where Linux's autogroups are on (the default on desktops and most distributions' server
// kernels) every backend and every worker is a task group of its own, and a woken worker competes
// for a CPU on equal terms with each backend of a burst of commits: the slice request
// (sched_slice.hpp) gives it an early deadline, but it still waited one backend's slice in about
// a third of its wakes under load. A lower nice value (a larger weight) is what the scheduler has
// for "this task's latency matters more", and lowering it needs a privilege the operator grants
// (systemd's LimitNICE= or AmbientCapabilities=CAP_SYS_NICE, limits.conf's nice); a higher value
// needs none.
#pragma once

namespace extsvc::pg {

// Applies extsvc.worker_nice to this process: its own nice value and, when it leads its session
// (PostgreSQL's children do), its autogroup's, which is what weighs it against the backends where
// autogroups are on. At the start and after each reload; a kernel that refuses it (no privilege
// for a negative value) is logged once, never an error, and the worker runs at the nice it has.
void apply_worker_nice();

}  // namespace extsvc::pg
