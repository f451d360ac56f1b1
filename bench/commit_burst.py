#!/usr/bin/python3
"""Benchmark: commit to first API request under a burst (issue 26, part 4).

BENCH_BURST_N creates (default 1,000; quick 200) are committed in one burst by
BENCH_BURST_SESSIONS sessions (default 8), each create its own transaction as
NICo's handler makes it, BENCH_BURSTS times (default 3; quick 2), against
dpfsim with the product's defaults (extsvc.watch on, kube_qps 50 and
kube_burst 100 per worker, 2 workers, both of which create: the watcher
claims every kind of service work, the other worker the creates).

Clocks: both ends are wall-clock times of this machine, taken where they
happen. A create's commit is PostgreSQL's commit timestamp
(track_commit_timestamp) of the transaction that wrote its CREATING history
row (never updated later); its first API request is the time dpfsim received
the POST of its DPUService, from dpfsim's --request-log (microseconds; the
POST's object name says which create it served).

Printed per burst and over all bursts:
- the burst's head: its first commit -> the first POST of the burst (how fast
  an idle worker reacts to new work);
- per create: its commit -> its POST (the queue behind the rate limit
  included: 1,000 POSTs at 50/s after a burst of 100 take 18 s, so this is
  mostly the rate limit's wait);
- per POST, its gap: its arrival minus the later of its own commit and the
  previous POST's arrival (what neither a missing commit nor the queue ahead
  explains: the rate limit's spacing, 1/kube_qps, and the worker's own work);
- first commit -> all READY against the pure rate-limit time of the POSTs;
- where the head's time went: the workers run with extsvc.log_level = debug
  and log each claim, and each hand-over at commit they took (extsvc.hand_over:
  the creating transaction leased the row, there is no claim), with when the
  wake at commit its iteration answered set the latches, when the worker's
  wait returned, when that iteration began, when the claim began and when the
  rows were claimed (Unix microseconds, the clock of the commit timestamps; a
  hand-over's claim begins and ends when the worker took it); the claim that
  served the head is the sending worker's last before the first POST, so the
  head is split into commit -> latches set (the committing backend after its
  commit record; negative when the iteration answered an earlier wake),
  latches set -> wait returned (the woken worker waiting for a CPU), wait
  returned -> iteration (the loop's own start), iteration -> claim (what the
  loop did before the service queue), the claim transaction, claimed -> POST
  sent (decoding, rendering, the rate limiter, up to the request handed to
  curl on a kept connection; the workers log when each write left) and sent
  -> POST received (the kernel and dpfsim's own wake and parsing, on the same
  CPUs as everything else here).

The workers' scheduling slice (extsvc.worker_sched_slice, default 300 us) is
what the product sets; BENCH_BURST_SLICE sets another (0 = the kernel's
default) to compare. The kernel's release is printed: the slice is a request
only Linux's EEVDF scheduler acts on, from 6.12.

dpfsim runs in a session of its own (the test kit's Sim), as a daemon does:
with Linux's autogroups a process in this client's session would share one
task group's CPU share with the client's threads (docs/performance.md,
"dpfsim in a session of its own").

Env: BENCH_BURST_N, BENCH_BURST_SESSIONS, BENCH_BURSTS, BENCH_BURST_SLICE,
BENCH_BURST_DEBUG=1 (prints why a head could not be followed back to its send and claim),
BENCH_QUICK=1.
"""
import datetime
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

N = c.size("BENCH_BURST_N", 1000, 200)
SESSIONS = c.size("BENCH_BURST_SESSIONS", 8, 8)
BURSTS = c.size("BENCH_BURSTS", 3, 2)
DATA = json.dumps(c.helm_data(values={"v": 1}))


def commit_burst(pg, tag):
    """N creates from SESSIONS sessions started together; returns the service ids."""
    sessions = [c.Session(pg) for _ in range(SESSIONS)]
    ids, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(SESSIONS)

    def run(k, s):
        mine = []
        try:
            start.wait()
            for i in range(k, N, SESSIONS):
                sid = s.one("SELECT service_id FROM extsvc.create_service("
                            f"'tenant-burst', 'b{tag}-{i}', 'DPF_HELM_CHART', {c.lit(DATA)}, "
                            "dpu_target => 'PRIMARY')")
                if sid:
                    mine.append(sid)
                else:
                    errors.append(i)
        finally:
            with lock:
                ids.extend(mine)

    threads = [threading.Thread(target=run, args=(k, s)) for k, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        s.close()
    if errors:
        raise RuntimeError(f"{len(errors)} creates refused")
    return ids


def commits_of(pg, ids):
    """service id -> (DPUService name, commit time as epoch seconds)."""
    rows = pg.sql(
        "SELECT s.service_id, s.dpf_service_name, extract(epoch FROM pg_xact_commit_timestamp(h.xmin)) "
        "FROM extsvc.service_records s JOIN extsvc.service_state_history h USING (service_id) "
        "WHERE h.to_state = 'CREATING' AND h.actor = 'api' AND s.service_id = ANY ("
        f"ARRAY[{','.join(c.lit(i) for i in ids)}]::uuid[])")
    return {r[0]: (r[1], float(r[2])) for r in rows}


def posts_of(path, names):
    """DPUService name -> the arrival time (epoch seconds) of its first POST."""
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("method") != "POST" or r.get("resource") != "dpuservices":
                continue
            name = r.get("name")
            if name in names and name not in out:
                out[name] = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
    return out


def gaps(pairs):
    """Per POST in arrival order: its arrival minus the later of its own commit and the previous
    POST's arrival: the delay that neither a missing commit nor the queue ahead explains."""
    out, prev = [], None
    for cm, p in sorted(pairs, key=lambda x: x[1]):
        out.append((p - (cm if prev is None else max(cm, prev))) * 1000)
        prev = p
    return out


CLAIM = re.compile(r"\[(\d+)\] .*service (?:claim|hand-over): (\d+) row\(s\); iteration began (\d+) us, claim began (\d+) us, "
                   r"claimed (\d+) us, last wake at commit (-?\d+) us, wait returned (\d+) us")
SENT = re.compile(r"\[(\d+)\] .*management POST \d+ sent at (\d+) us")


def claims_of(logfile, offset):
    """The service queue's claims the workers logged after offset: (claimed, began, claim began,
    rows, wake, pid), times in epoch seconds, in claimed order; and the POSTs they sent: (sent,
    pid) in order."""
    with open(logfile, errors="replace") as f:
        f.seek(offset)
        text = f.read()
    claims = sorted((int(m[5]) / 1e6, int(m[3]) / 1e6, int(m[4]) / 1e6, int(m[2]), int(m[6]) / 1e6, m[1],
                     int(m[7]) / 1e6) for m in CLAIM.finditer(text))
    sent = sorted((int(m[2]) / 1e6, m[1]) for m in SENT.finditer(text))
    return claims, sent


def head_split(logged, first_commit, first_post):
    """The head in seven steps (ms), followed back from the first POST: the last POST a worker sent
    before it arrived, that worker's last claim (or hand-over) before the send, and the wake that
    claim's iteration answered. Commit -> the latches set (the committing backend after its commit;
    negative when the iteration answered an earlier wake), -> wait returned (the woken worker
    scheduled), -> iteration, -> claim, the claim, claimed -> POST sent (handed to curl: decoding,
    rendering, the rate limiter), sent -> POST received by dpfsim (the kernel, dpfsim's own wake
    and parsing on the same CPUs). Without the send log (an older library), or when no claim of the
    sending worker is found between the first commit and the send, the claim is the first that
    ended after the first commit and the last two steps are left out (NaN, not counted)."""
    claims, sent = logged
    out = max((s for s in sent if s[0] <= first_post), default=None)
    if out is not None:
        mine = [cl for cl in claims if cl[5] == out[1] and first_commit <= cl[0] <= out[0]]
        if mine:
            claimed, began, claim_began, rows, woken, _, returned = mine[-1]
            return [(woken - first_commit) * 1000, (returned - woken) * 1000, (began - returned) * 1000,
                    (claim_began - began) * 1000, (claimed - claim_began) * 1000, (out[0] - claimed) * 1000,
                    (first_post - out[0]) * 1000, rows]
    if os.environ.get("BENCH_BURST_DEBUG"):
        print(f"  no claim before the send: first commit {first_commit:.6f}, send {out}, first POST "
              f"{first_post:.6f}, claims {[cl for cl in claims if abs(cl[0] - first_commit) < 0.05]}, "
              f"sends {[x for x in sent if abs(x[0] - first_commit) < 0.05]}, {len(sent)} sends")
    for claimed, began, claim_began, rows, woken, _, returned in claims:
        if claimed >= first_commit:
            return [(woken - first_commit) * 1000, (returned - woken) * 1000, (began - returned) * 1000,
                    (claim_began - began) * 1000, (claimed - claim_began) * 1000, float("nan"), float("nan"),
                    rows]
    return None


def stats_row(name, xs):
    if not xs:
        return [name, 0, "-", "-", "-", "-"]
    return [name, len(xs), c.fmt(c.median(xs), 2), c.fmt(c.pct(xs, 99), 2), c.fmt(min(xs), 2), c.fmt(max(xs), 2)]


def main():
    print(f"# commit_burst: {BURSTS} burst(s) of {N} creates from {SESSIONS} sessions; {c.machine_line()}",
          flush=True)
    workdir = tempfile.mkdtemp(prefix="commit-burst-")
    log = os.path.join(workdir, "requests.jsonl")
    extra = {"track_commit_timestamp": "on", "extsvc.log_level": "'debug'"}
    if os.environ.get("BENCH_BURST_SLICE"):
        extra["extsvc.worker_sched_slice"] = str(int(os.environ["BENCH_BURST_SLICE"]))
    e = c.env(dpus=2, workers=2, extra=extra, sim_args=f"--request-log {log}")
    ok = False
    try:
        e.wait_watching()
        # warm up (connections, caches), not measured
        sid = e.create("warmup", json.loads(DATA), tenant="tenant-burst")
        e.wait_state(sid, "READY")
        qps = float(e.pg.one("SHOW extsvc.kube_qps"))
        burst_tokens = int(e.pg.one("SHOW extsvc.kube_burst"))
        # with the watch on the watcher claims every kind of service work and the other workers
        # the creates (docs/worker.md): both create
        creators = 2
        print(f"  kube_qps {qps:g}, kube_burst {burst_tokens} per worker; {creators} creating worker(s); "
              f"extsvc.worker_sched_slice {e.pg.one('SHOW extsvc.worker_sched_slice')} us on Linux "
              f"{os.uname().release}; worker pids {e.pg.worker_pids()}")
        heads, lat, own, ratios, rows, splits = [], [], [], [], [], []
        for b in range(BURSTS):
            time.sleep(2)
            offset = os.path.getsize(e.pg.logfile)
            ids = commit_burst(e.pg, b)
            t_committed = time.time()
            c.wait_until(lambda: e.pg.one(
                "SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY' AND service_id = ANY ("
                f"ARRAY[{','.join(c.lit(i) for i in ids)}]::uuid[])") == str(len(ids)),
                timeout=N / 10 + 60, interval=0.1, what=f"burst {b}: all READY")
            t_ready = time.time()
            commits = commits_of(e.pg, ids)
            posts = posts_of(log, {v[0] for v in commits.values()})
            missing = [k for k, v in commits.items() if v[0] not in posts]
            if missing:
                raise RuntimeError(f"burst {b}: {len(missing)} creates without a POST in the request log")
            pairs = sorted((v[1], posts[v[0]]) for v in commits.values())
            first_commit, last_commit = pairs[0][0], pairs[-1][0]
            first_post = min(p for _, p in pairs)
            head = (first_post - first_commit) * 1000
            per = [(p - cm) * 1000 for cm, p in pairs]
            mine = gaps(pairs)
            pure = max(0.0, len(pairs) - burst_tokens * creators) / (qps * creators)
            ready_after = t_ready - first_commit
            heads.append(head)
            split = head_split(claims_of(e.pg.logfile, offset), first_commit, first_post)
            if split:
                splits.append(split)
            lat += per
            own += mine
            ratios.append(ready_after / pure if pure else float("nan"))
            rows.append([b, len(pairs), c.fmt((last_commit - first_commit) * 1000, 0), c.fmt(head, 2),
                         c.fmt(c.median(per), 1), c.fmt(c.pct(per, 99), 1), c.fmt(c.median(mine), 2),
                         c.fmt(c.pct(mine, 99), 2), c.fmt(ready_after, 1), c.fmt(pure, 1),
                         c.fmt(ratios[-1], 2)])
            print(f"  burst {b}: {len(pairs)} creates committed in {(last_commit - first_commit):.2f} s; "
                  f"client saw the last commit {(t_committed - last_commit) * 1000:.0f} ms after it", flush=True)
        c.table("Bursts (ms unless noted)",
                ["burst", "creates", "commit span", "head: 1st commit -> 1st POST", "commit -> POST p50",
                 "p99", "gap p50", "gap p99", "1st commit -> all READY s",
                 "pure rate-limit s", "ratio"], rows)
        c.table("Over all bursts (ms)", ["measure", "n", "p50", "p99", "min", "max"],
                [stats_row("head: first commit -> first POST", heads),
                 stats_row("per create: commit -> its POST", lat),
                 stats_row("per POST: gap after max(its commit, previous POST)", own)])
        print(f"heads within 2 ms: {sum(h <= 2.0 for h in heads)} of {len(heads)}; within 10 ms: "
              f"{sum(h <= 10.0 for h in heads)} of {len(heads)} (the target: p50 <= 2 ms, p99 <= 10 ms)")
        if splits:
            c.table("Where the head went, per burst (ms; from the workers' claim log)",
                    ["burst", "commit -> latches set", "-> wait returned", "-> iteration", "iteration -> claim",
                     "claim", "claimed -> POST sent", "sent -> POST received", "rows in that claim"],
                    [[b] + [c.fmt(x, 2) for x in sp[:7]] + [sp[7]] for b, sp in enumerate(splits)])
            c.table("Where the head went, over all bursts (ms)", ["step", "n", "p50", "p99", "min", "max"],
                    [stats_row(name, [sp[k] for sp in splits if sp[k] == sp[k]]) for k, name in enumerate(
                        ["commit -> latches set", "latches set -> wait returned", "wait returned -> iteration",
                         "iteration -> claim", "claim", "claimed -> POST sent", "sent -> POST received"])])
        else:
            print("no claim of the service queue found in the server log after the bursts' first commits")
        ok = True
    finally:
        e.close(keep=not ok)
        shutil.rmtree(workdir, ignore_errors=True)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
