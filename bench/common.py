"""Shared helpers of the benchmarks: sizes from the environment, the e2e
harness (imported, not copied), a persistent session, statistics, worker
RSS and table printing."""
import http.client
import json
import os
import re
import statistics
import subprocess  # noqa: F401  (bench/fleet.py runs its tools through c.subprocess)
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
from extsvc_testkit import db, harness  # noqa: E402  (BUILD_DIR / DPFSIM are read from the environment by the harness)
from extsvc_testkit.harness import FAST_DELAYS, PG_USER, PGBIN, Env, helm_data, lit, wait_until  # noqa: E402,F401
from extsvc_testkit.invariants import machine_line  # noqa: E402,F401

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")

# Extra dpfsim arguments (e.g. BENCH_SIM_ARGS="--tick-ms 500") go through a
# wrapper, since the harness starts dpfsim with a fixed command line.
SIM_ARGS = os.environ.get("BENCH_SIM_ARGS", "")
REAL_DPFSIM = harness.DPFSIM
WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dpfsim_wrapper.sh")

# Benchmarks run the worker at log level info (debug logs every request) and
# without a periodic resync during the measurement (it is requested explicitly).
# The e2e harness shortens retries and leases for tests; the benchmarks put
# the product defaults back (they set how often a PENDING DPU is looked at).
BENCH_GUCS = {"extsvc.log_level": "'info'", "extsvc.resync_interval": "'300s'",
              "extsvc.retry_base": "'%s'" % os.environ.get("BENCH_RETRY_BASE", "500ms"),
              "extsvc.retry_cap": "'300s'", "extsvc.lease_time": "'60s'", "extsvc.http_timeout": "'10s'"}



def size(name, full, quick):
    """An integer size: env var `name` if set, else the quick or the full default."""
    v = os.environ.get(name)
    if v:
        return int(v)
    return quick if QUICK else full


def env(dpus=4, workers=2, extra=None, sim_args=None):
    """An e2e harness Env with the benchmark GUCs; sim_args (default
    BENCH_SIM_ARGS) are appended to dpfsim's command line."""
    args = SIM_ARGS if sim_args is None else sim_args
    if args:
        os.environ["BENCH_REAL_DPFSIM"] = REAL_DPFSIM
        os.environ["BENCH_SIM_ARGS"] = args
        harness.DPFSIM = WRAPPER
    else:
        harness.DPFSIM = REAL_DPFSIM
    gucs = dict(BENCH_GUCS)
    gucs.update(extra or {})
    return Env(dpus=dpus, workers=workers, extra=gucs)


def seeded_number(expr):
    """dpfsim's seeded names number DPUs with printf's %04d (sim/src/seeding.cpp): four
    digits at least, more past 9,999. As an SQL expression of the integer expr (lpad
    alone would cut 10000 to '1000' and give two DPUs one name)."""
    return f"lpad(({expr})::text, greatest(4, length(({expr})::text)), '0')"


def now():
    return time.perf_counter()


# --- statistics -------------------------------------------------------------

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, p):
    """Nearest-rank percentile (p in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def fmt(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


def table(title, header, rows):
    """Prints a Markdown table (so the output can be pasted into docs)."""
    cells = [[str(h) for h in header]] + [[fmt(c) if not isinstance(c, str) else c for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n### {title}\n", flush=True)
    for n, r in enumerate(cells):
        print("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(flush=True)


# --- processes ---------------------------------------------------------------

def proc_mem(pid):
    """VmRSS, RssAnon, VmHWM of a process in MiB (None when it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssShmem", "VmHWM"):
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        return None
    return out


def cpu_seconds(pid):
    """user+system CPU seconds of a process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


class CpuMeter:
    """CPU seconds used by the workers and by dpfsim between start() and read()."""

    def __init__(self, e):
        self.pids = {"workers": e.pg.worker_pids(), "dpfsim": [e.sim.proc.pid]}
        self.start()

    def start(self):
        self.base = {k: sum(cpu_seconds(p) for p in v) for k, v in self.pids.items()}

    def read(self):
        return {k: sum(cpu_seconds(p) for p in v) - self.base[k] for k, v in self.pids.items()}


def worker_mem(e):
    """Per-worker memory rows: (pid, VmRSS, RssAnon, RssShmem, VmHWM) in MiB."""
    rows = []
    for pid in e.pg.worker_pids():
        m = proc_mem(pid) or {}
        rows.append((pid, m.get("VmRSS"), m.get("RssAnon"), m.get("RssShmem"), m.get("VmHWM")))
    return rows


def pg_contexts_mib(e, pid, timeout=10):
    """The PostgreSQL memory contexts of a server process, MiB (the "Grand total" that
    pg_log_backend_memory_contexts writes into the server log), so that a worker's RssAnon can be
    told apart into PostgreSQL's memory and the rest (the C++ heap); None when nothing came."""
    log = e.pg.logfile
    start = os.path.getsize(log) if os.path.exists(log) else 0
    e.pg.sql(f"SELECT pg_log_backend_memory_contexts({int(pid)})")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log, errors="replace") as f:
            f.seek(start)
            for line in f:  # log_line_prefix '%m [%p] %b ' (extsvc_testkit.cluster)
                m = re.search(r"\[(\d+)\] .*Grand total: (\d+) bytes", line)
                if m and int(m.group(1)) == int(pid):
                    return int(m.group(2)) / 1048576.0
        time.sleep(0.2)
    return None


def sim_mem(e):
    m = proc_mem(e.sim.proc.pid) or {}
    return m.get("VmRSS"), m.get("VmHWM")


def worker_status(e):
    return e.pg.sql("SELECT slot, iterations, claimed, completed, stale, http_requests, http_errors "
                    "FROM extsvc.worker_status() ORDER BY slot")


# --- a persistent session (commit time as the client sees it) --------------

def Session(pg):  # noqa: N802 (the test kit's class, bound to the harness user)
    """One kept connection (extsvc_testkit.db.QuietSession): a refused
    statement answers no rows, as the psql session with ON_ERROR_STOP=0 it
    replaces did."""
    return db.QuietSession(pg, PG_USER)


# --- dpfsim control API over one keep-alive connection ---------------------

class Control:
    """dpfsim's control API, one connection per request: on a kept-alive
    connection its answers wait ~40 ms (Nagle on the server's split writes
    against the client's delayed ACK), far coarser than a fresh connection."""

    def __init__(self, sim):
        u = urllib.parse.urlparse(sim.control)
        self.host, self.port = u.hostname, u.port

    def get(self, path):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def count(self, key, cluster="management"):
        return self.get("/counts").get(cluster, {}).get(key, 0)

    def close(self):
        pass


class CountWatcher(threading.Thread):
    """Polls GET /counts until counts[cluster][key] >= target; `seen_at` is the
    midpoint of the first poll that saw it (the sim counts a request when it
    starts handling it), `period` the median poll period (the resolution)."""

    def __init__(self, sim, key, target, cluster="management", sleep_s=0.0005, timeout=30):
        super().__init__(daemon=True)
        self.ctl = Control(sim)
        self.key, self.target, self.cluster = key, target, cluster
        self.sleep_s, self.timeout = sleep_s, timeout
        self.seen_at = None
        self.periods = []
        self.stop_flag = False

    def run(self):
        deadline = now() + self.timeout
        last = None
        while not self.stop_flag and now() < deadline:
            t0 = now()
            c = self.ctl.get("/counts").get(self.cluster, {}).get(self.key, 0)
            t1 = now()
            if last is not None:
                self.periods.append(t1 - last)
            last = t1
            if c >= self.target:
                self.seen_at = (t0 + t1) / 2
                break
            time.sleep(self.sleep_s)
        self.ctl.close()


def wait_sql(session_or_pg, query, want, timeout, interval=0.2):
    """Polls a one-value query until it equals `want`; returns the time it did."""
    deadline = now() + timeout
    last = None
    while now() < deadline:
        last = session_or_pg.one(query)
        if last == want:
            return now()
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {query!r} = {want!r} (last {last!r})")


def json_lines(path, record):
    """Appends one JSON record to `path` when BENCH_JSON is set (for docs)."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def settle(e, quiet_s=1.0, timeout=60):
    """Waits until dpfsim's total request count stops moving for quiet_s;
    returns False when it still moved at the timeout."""
    deadline = now() + timeout
    last = e.sim.work_requests()  # the site Lease's renewals never stop: not counted
    still = now()
    while now() < deadline:
        time.sleep(0.2)
        cur = e.sim.work_requests()
        if cur != last:
            last, still = cur, now()
        elif now() - still >= quiet_s:
            return True
    return False
