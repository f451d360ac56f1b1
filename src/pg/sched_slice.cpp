#include "pg_prelude.hpp"

#include "sched_slice.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gucs.hpp"

namespace extsvc::pg {

namespace {

// The kernel's struct sched_attr (linux/sched/types.h, SCHED_ATTR_SIZE_VER1); glibc 2.36 has no
// wrapper for sched_setattr.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // SCHED_OTHER: the requested slice in ns (0 = the kernel's default)
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

int g_applied_us = -1;  // what this process has in force (-1: nothing set yet)
bool g_refused_logged = false;

}  // namespace

void apply_sched_slice() {
  const int want = gucs.worker_sched_slice_us;
  if (want == g_applied_us || (g_applied_us < 0 && want == 0)) return;
  // the process's own policy and nice stay: sched_setattr sets both, so they are read first
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);
  const int policy = sched_getscheduler(0);
  if (errno != 0 || policy != SCHED_OTHER) return;  // an operator's chrt choice is not undone
  SchedAttr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  attr.sched_nice = nice;
  attr.sched_runtime = static_cast<uint64_t>(want) * 1000;
  if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) {
    const int err = errno;
    if (!g_refused_logged)
      ereport(LOG, (errmsg("nico_extsvc: the kernel refused extsvc.worker_sched_slice = %d: %s",
                           want, strerror(err)),
                    errhint("The workers run with the kernel's default slice.")));
    g_refused_logged = true;
    return;
  }
  g_applied_us = want;
}

}  // namespace extsvc::pg
