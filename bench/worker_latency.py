#!/usr/bin/python3
"""Benchmark (a): intent-to-first-API-call latency after commit, and
create-to-READY latency, for N sequential single creates (each its own
transaction).

Clocks: everything is measured with this process's monotonic clock on the
same machine. The commit time is when the persistent psql session has read
the statement's result (autocommit). The arrival of the POST at dpfsim is
observed by polling dpfsim's GET /counts (dpfsim counts a request when it
starts handling it; the request log's `time` field has only second precision,
too coarse for this), so the resolution is one poll period, printed below.

Env: BENCH_LATENCY_N (default 50; quick 10), BENCH_WORKERS (default 2),
BENCH_QUICK=1.
"""
import os
import sys
import time

import common as c  # bench/common.py, beside this file

N = c.size("BENCH_LATENCY_N", 50, 10)
WORKERS = c.size("BENCH_WORKERS", 2, 2)
DATA = '{"repoURL":"https://charts.example.com/stable","chartName":"demo-agent","chartVersion":"1.0.0","security":{"privileged":false}}'


def main():
    t_start = c.now()
    print(f"# worker_latency: {N} sequential creates, {WORKERS} workers; {c.machine_line()}", flush=True)
    e = c.env(dpus=2, workers=WORKERS)
    ok = False
    s = None
    try:
        s = c.Session(e.pg)
        # warm up: TLS connection set up, caches filled (not measured)
        sid = s.one(f"SELECT service_id FROM extsvc.create_service('tenant-lat', 'warmup', 'DPF_HELM_CHART', '{DATA}', dpu_target => 'PRIMARY')")
        c.wait_sql(s, f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{sid}'", "READY", 30, 0.01)
        ctl = c.Control(e.sim)
        to_api, to_ready, stmt, periods = [], [], [], []
        for i in range(N):
            base = ctl.count("POST dpuservices")
            w = c.CountWatcher(e.sim, "POST dpuservices", base + 1)
            w.start()
            t0 = c.now()
            sid = s.one(f"SELECT service_id FROM extsvc.create_service('tenant-lat', 'lat-{i}', "
                        f"'DPF_HELM_CHART', '{DATA}', dpu_target => 'PRIMARY')")
            t1 = c.now()  # commit as the client sees it
            q = f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{sid}'"
            t_ready = c.wait_sql(s, q, "READY", 30, 0.0005)
            w.join(30)
            if w.seen_at is None:
                raise RuntimeError(f"POST of lat-{i} not seen at dpfsim")
            stmt.append((t1 - t0) * 1000)
            to_api.append((w.seen_at - t1) * 1000)
            to_ready.append((t_ready - t1) * 1000)
            periods.extend(p * 1000 for p in w.periods)
            time.sleep(0.05)
        ctl.close()
        rows = []
        for name, xs in (("commit -> POST at dpfsim", to_api), ("commit -> READY in SQL", to_ready),
                         ("create_service statement round trip (context)", stmt)):
            rows.append((name, c.median(xs), c.pct(xs, 99), min(xs), max(xs)))
        c.table(f"(a) latency after commit, {N} sequential single creates, {WORKERS} workers (ms)",
                ["measure", "median", "p99", "min", "max"], rows)
        print(f"resolution: POST arrival observed by polling GET /counts, median poll period "
              f"{c.median(periods):.2f} ms; READY polled every ~0.5 ms over the same psql session")
        neg = sum(1 for x in to_api if x < 0)
        if neg:
            print(f"note: {neg} of {N} POSTs were seen before psql had read the commit's result "
                  f"(the worker is woken at commit, the client reads the result after it)")
        print("worker_status:", c.worker_status(e))
        c.json_lines(os.environ.get("BENCH_JSON"), {"bench": "latency", "n": N, "workers": WORKERS,
                     "to_api_median": c.median(to_api), "to_api_p99": c.pct(to_api, 99),
                     "to_ready_median": c.median(to_ready), "to_ready_p99": c.pct(to_ready, 99)})
        ok = True
    finally:
        if s:
            s.close()
        e.close(keep=not ok)
        print(f"worker_latency: {c.now() - t_start:.1f}s wall", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
