#include "pg_prelude.hpp"

#include "worker_nice.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/resource.h>
#include <unistd.h>

#include "gucs.hpp"

namespace extsvc::pg {

namespace {

constexpr int kUnset = 100;  // outside nice's range: nothing applied yet
int g_applied = kUnset;
bool g_refused_logged = false;

void log_refusal(int want, const char* what, int err) {
  if (g_refused_logged) return;
  g_refused_logged = true;
  ereport(LOG,
          (errmsg("nico_extsvc: the kernel refused extsvc.worker_nice = %d for the %s: %s", want,
                  what, strerror(err)),
           errhint("A negative value, and any lowering, needs a privilege the server's service "
                   "grants: systemd's LimitNICE=%+d (or AmbientCapabilities=CAP_SYS_NICE), or a "
                   "nice limit in limits.conf. The workers run at the nice they have; a restarted "
                   "worker starts at the server's.",
                   want < 0 ? want : 0)));
}

// Where autogroups exist and this process leads its session, the autogroup is this process's
// alone: its nice is the weight the scheduler gives it against other sessions. A process that
// does not lead its session shares the group with others and leaves it alone. The kernel takes
// one such write per 100 ms from the whole system (EAGAIN otherwise): workers that start together
// take turns, with a bound.
bool set_autogroup_nice(int want) {
  if (getsid(0) != getpid()) return true;
  int err = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    FILE* f = fopen("/proc/self/autogroup", "w");
    if (f == nullptr) {
      if (errno == ENOENT) return true;  // no autogroups in this kernel: the nice is the weight
      err = errno;
      break;
    }
    const bool written = fprintf(f, "%d", want) > 0;
    err = errno;
    const bool closed = fclose(f) == 0;  // the kernel answers the write at the flush
    if (written && closed) return true;
    if (!closed) err = errno;
    if (err != EAGAIN) break;
    pg_usleep(100000 + random() % 100000);
  }
  log_refusal(want, "autogroup", err);
  return false;
}

}  // namespace

void apply_worker_nice() {
  const int want = gucs.worker_nice;
  if (want == g_applied || (g_applied == kUnset && want == 0)) return;
  // both, whatever the other answers: lowering an autogroup's nice to 0 or above needs no
  // privilege, lowering a process's does
  bool applied = true;
  if (setpriority(PRIO_PROCESS, 0, want) != 0) {
    log_refusal(want, "process", errno);
    applied = false;
  }
  if (!set_autogroup_nice(want)) applied = false;
  if (!applied) return;
  g_applied = want;
  g_refused_logged = false;  // a later refusal (after a reload) is news again
}

}  // namespace extsvc::pg
