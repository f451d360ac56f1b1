"""The measuring side of bench/nico_handlers.py (issue 26, part 3): the worker's claim
latency sampled beside the sessions, the lock waits and deadlocks of the server log, the
census's table, the profile and the report."""
import json
import os
import re
import threading

import common as c  # bench/common.py

CLAIM_SQL = " UNION ALL ".join(
    f"SELECT '{q}', coalesce(extract(epoch FROM now() - min(next_due_at)), 0)::float8 FROM extsvc.{t} "
    "WHERE next_due_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())"
    for q, t in (("service", "dpf_extension_service_reconciliations"), ("dpu", "dpu_reconciliations")))


class ClaimSampler(threading.Thread):
    """The age of the oldest due, unleased row of each queue, every 0.25 s:
    extsvc_queue_oldest_due_age_seconds's own condition on the two queue
    tables (extsvc.metrics() computes every family and takes ~0.7 s at
    2,500 DPUs on this machine, too much to run beside the handlers)."""

    def __init__(self, connect):
        super().__init__(daemon=True)
        self.conn, self.stop, self.ages, self.cost = connect(), threading.Event(), {}, []

    def run(self):
        while not self.stop.is_set():
            t0 = c.now()
            for q, v in self.conn.execute(CLAIM_SQL).fetchall():
                self.ages.setdefault(q, []).append(v * 1000)
            self.cost.append((c.now() - t0) * 1000)
            self.stop.wait(0.25)


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_class(cmd, role, sim_pid, pid):
    """Which part of the run a process is, from its command line (PostgreSQL's process titles)."""
    if pid == sim_pid or "dpfsim" in cmd:
        return "dpfsim"
    if cmd.startswith("postgres: "):
        if "nico_extsvc" in cmd:
            return "extsvc workers"
        if "autovacuum" in cmd:
            return "autovacuum"
        if cmd.startswith(f"postgres: {role} "):
            return "API backends"
        if cmd.startswith("postgres: postgres postgres"):
            return "superuser backends (reference, sampler)"
        return "postgres, other"
    if "multiprocessing" in cmd or "spawn_main" in cmd:
        return "session clients"
    return None


def cpu_snapshot(role, sim_pid):
    """utime + stime per process of this machine's run, in seconds, with its class."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        k = _cpu_class(cmd, role, sim_pid, int(d))
        if k is not None:
            out[int(d)] = (k, (int(st[11]) + int(st[12])) / TICK)
    return out


def cpu_add(acc, before, after):
    """Adds each class's CPU seconds between two snapshots to acc (a process that ended
    between them is not counted: short autovacuum workers may be missing)."""
    for pid, (k, t) in after.items():
        acc[k] = acc.get(k, 0.0) + t - (before[pid][1] if pid in before else 0.0)


def lock_waits(e, offset):
    with open(e.pg.logfile, errors="replace") as f:
        f.seek(offset)
        text = f.read()
    kinds = {}
    for m in re.finditer(r"still waiting for (\w+) on (\w+)", text):
        kinds[m.group(0)[18:]] = kinds.get(m.group(0)[18:], 0) + 1
    # a deadlock is an error the sessions count; the server's account of it says which calls met
    for m in re.finditer(r"ERROR:  deadlock detected\n(?:.*\n){0,12}?.*STATEMENT:.*\n", text):
        print("    server log: " + m.group(0).rstrip().replace("\n", "\n      "), flush=True)
    return sum(kinds.values()), kinds


def census_report(api, ref, handlers):
    """Per handler and table: rows inserted/updated/deleted by the API's transaction and the
    reference's. The same rows: the same tables, as many inserted and deleted, and updated on
    both sides or neither (the API may update a row more than once in a transaction)."""
    rows, same = [], {}
    for h in handlers:
        a, r = api.get(h, {}), ref.get(h, {})
        ok = True
        for t in sorted(set(a) | set(r)):
            x, y = a.get(t, (0, 0, 0)), r.get(t, (0, 0, 0))
            match = x[0] == y[0] and x[2] == y[2] and (x[1] > 0) == (y[1] > 0)
            ok = ok and match
            rows.append((h, t, "/".join(map(str, x)), "/".join(map(str, y)), "yes" if match else "NO"))
        same[h] = ok
    c.table("Rows written by one transaction per handler, API vs reference (inserted/updated/deleted)",
            ["handler", "table", "API", "reference", "same rows"], rows)
    print("same rows per handler: " + ", ".join(f"{h} {'yes' if v else 'NO'}" for h, v in same.items()),
          flush=True)
    return same


def profile(e):
    """Where the API phase's time went (BENCH_NH_PROFILE=1): the worker's
    statements are in it too, and the reference's (alternate rounds); both
    run as the superuser, the API's calls as the benchmark's role."""
    c.table("Functions by total time in the API phase (track_functions = all)",
            ["function", "calls", "total ms", "self ms", "total ms/call"],
            e.pg.sql("SELECT funcname, calls, round(total_time::numeric, 1), round(self_time::numeric, 1), "
                     "round((total_time / nullif(calls, 0))::numeric, 3) FROM pg_stat_user_functions "
                     "WHERE schemaname = 'extsvc' ORDER BY total_time DESC LIMIT 30"))
    c.table("Statements by total time in the API phase (pg_stat_statements, nested ones included)",
            ["top", "user", "calls", "total ms", "ms/call", "rows", "query"],
            e.pg.sql("SELECT toplevel, userid::regrole, calls, round(total_exec_time::numeric, 1), "
                     "round(mean_exec_time::numeric, 3), rows, "
                     "left(regexp_replace(query, '\\s+', ' ', 'g'), 160) FROM pg_stat_statements "
                     "ORDER BY total_exec_time DESC LIMIT 40"))


def report(api, ref, handlers, sessions):
    rows = []
    for h in handlers:
        a = [x for s in api["sessions"] for x in s.lat[h]]
        r = [x for s in ref["sessions"] for x in s.lat[h]]
        ratio = c.median(a) / c.median(r) if a and r else float("nan")
        rows.append((h, len(a), c.median(a), c.pct(a, 99), len(r), c.median(r), c.pct(r, 99), f"{ratio:.2f}x",
                     "yes" if ratio <= 3 else "NO"))
    c.table(f"NICo's handlers, {sessions} sessions: API vs plain statements (ms)",
            ["handler", "API n", "API p50", "API p99", "ref n", "ref p50", "ref p99", "p50 ratio", "<= 3x"], rows)
    # the same transactions' CPU: what each side costs the server apart from waiting for a CPU
    # or a lock, and what the Python client (NICo's is compiled) spent on each
    crow = []
    for h in handlers:
        a_b = [x for s in api["sessions"] for x in getattr(s, "cpu", {}).get(h, [])]
        r_b = [x for s in ref["sessions"] for x in getattr(s, "cpu", {}).get(h, [])]
        a_c = [x for s in api["sessions"] for x in getattr(s, "client_cpu", {}).get(h, [])]
        r_c = [x for s in ref["sessions"] for x in getattr(s, "client_cpu", {}).get(h, [])]
        if not (a_b and r_b):
            continue
        crow.append((h, c.median(a_b), c.median(r_b), f"{c.median(a_b) / max(c.median(r_b), 1e-9):.2f}x",
                     c.median(a_c) if a_c else float("nan"), c.median(r_c) if r_c else float("nan")))
    if crow:
        c.table("CPU per transaction, p50 (ms): the session's backend (/proc/<pid>/schedstat) and the "
                "Python client's thread (time.thread_time)",
                ["handler", "API backend", "ref backend", "backend ratio", "API client", "ref client"], crow)
    prow = []
    for name, p in (("API", api), ("reference", ref)):
        n = sum(len(x) for s in p["sessions"] for x in s.lat.values())
        errs = {}
        for s in p["sessions"]:
            for k, v in s.errors.items():
                errs[k] = errs.get(k, 0) + v
        claim = "; ".join(f"{q} p50 {c.median(v):.0f} p99 {c.pct(v, 99):.0f} max {max(v):.0f}"
                          for q, v in sorted(p["claim"].items()))
        prow.append((name, n, p["wall"], n / p["wall"], p["waits"], json.dumps(errs) if errs else "0",
                     p["claimed"], claim or "-"))
    c.table("Transactions, lock waits > 10 ms, worker claim latency (oldest due row's age, ms) during the run",
            ["phase", "txns", "wall s", "txn/s", "lock waits", "errors", "worker claims", "claim latency"], prow)
    print(f"claim latency: the oldest due, unleased row's age sampled every 0.25 s (one sample took "
          f"{api['sampler_ms']:.1f} ms)")
    for name, p in (("API", api), ("reference", ref)):
        print(f"lock waits > 10 ms, {name}: {json.dumps(p['kinds'])}")
    classes = sorted(set(api["cpu"]) | set(ref["cpu"]))
    na = sum(len(x) for s in api["sessions"] for x in s.lat.values())
    nr = sum(len(x) for s in ref["sessions"] for x in s.lat.values())
    c.table("CPU by part of the run during each phase's rounds (s; ms per transaction; /proc utime + stime)",
            ["part", "API s", "API ms/txn", "reference s", "reference ms/txn"],
            [(k, api["cpu"].get(k, 0.0), 1000 * api["cpu"].get(k, 0.0) / max(na, 1), ref["cpu"].get(k, 0.0),
              1000 * ref["cpu"].get(k, 0.0) / max(nr, 1)) for k in classes])
