#!/usr/bin/python3
"""Benchmarks (b)-(e) of the service path.

(b) services created per second to READY: N creates in one transaction, time
    from its commit until all are READY, with 1 and with 2 workers (a new Env
    per worker count: extsvc.workers is a postmaster GUC).
(c) API calls per operation from dpfsim's counters: create, update, delete
    (averaged over OPS services) and one steady-state resync pass over N READY
    services (expected: one LIST page per 500 objects, no writes).
(d) worker memory (VmRSS, RssAnon, VmHWM of each worker) at N and at up to
    BIG services (created in batches of N per transaction), within a time budget.
(e) the reference: the same N DPUService objects (rendered by
    extsvc.render_dpuservice while extsvc.enabled = off) applied one by one with
    `kubectl apply -f`, within a time budget (extrapolated when cut short).

Env: BENCH_SERVICES (1000; quick 100), BENCH_OPS (100; quick 20),
BENCH_BIG (10000; quick 300), BENCH_BIG_BUDGET_S (150), BENCH_KUBECTL_N (=BENCH_SERVICES),
BENCH_KUBECTL_BUDGET_S (150; quick 30), BENCH_WORKER_COUNTS ("1,2"), BENCH_QUICK=1.
"""
import json
import os
import shutil
import subprocess
import sys
import time

# dpfsim's controllers re-scan every DaemonSet against every ControllerRevision and
# pod under the store lock each tick (cost grows with the square of the number of
# services); READY of a service needs only the POST, so this benchmark slows the
# tick down to keep the simulator's controllers from dominating (see docs/performance.md).
os.environ.setdefault("BENCH_SIM_ARGS", "--tick-ms 5000")
import common as c  # noqa: E402  (bench/common.py, beside this file)

N = c.size("BENCH_SERVICES", 1000, 100)
OPS = c.size("BENCH_OPS", 100, 20)
BIG = c.size("BENCH_BIG", 10000, 300)
BIG_BUDGET = c.size("BENCH_BIG_BUDGET_S", 90, 45)
KUBECTL_N = c.size("BENCH_KUBECTL_N", N, N)
KUBECTL_BUDGET = c.size("BENCH_KUBECTL_BUDGET_S", 60, 20)
WORKER_COUNTS = [int(x) for x in os.environ.get("BENCH_WORKER_COUNTS", "1,2").split(",") if x]
# One extra run with the client-side rate limit (extsvc.kube_qps 50 / kube_burst 100 per
# worker and cluster by default) raised, to show what the limit costs; "0" skips it.
RAISED_QPS = c.size("BENCH_RAISED_QPS", 1000, 1000)
JSON_OUT = os.environ.get("BENCH_JSON")

DATA = {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent", "chartVersion": "1.0.0",
        "security": {"privileged": False}}


def create_sql(prefix, lo, hi, data=DATA):
    return ("SELECT count(extsvc.create_service('tenant-bulk', '" + prefix + "' || i, 'DPF_HELM_CHART', "
            f"{c.lit(json.dumps(data))}, dpu_target => 'PRIMARY')) FROM generate_series({lo}, {hi}) i")


def count_state(e, state, like=None):
    q = f"SELECT count(*) FROM extsvc.services WHERE lifecycle_state = '{state}'"
    if like:
        q += f" AND service_name LIKE '{like}'"
    return int(e.pg.one(q))


def wait_count(e, state, want, timeout, like=None, interval=0.1):
    deadline = c.now() + timeout
    n = -1
    while c.now() < deadline:
        n = count_state(e, state, like)
        if n >= want:
            return c.now()
        time.sleep(interval)
    raise TimeoutError(f"{n} of {want} {state} after {timeout}s")


def mgmt_counts(e):
    return {k: v for k, v in e.sim.counts()["management"].items()}


def fmt_counts(counts, per=1):
    return ", ".join(f"{k} {v / per:.2f}" if per != 1 else f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def wait_resync_lists(e, timeout=30.0, quiet_s=2.0):
    """After request_resync: waits until the paged LIST of DPUServices has
    started and no further page came for quiet_s (a fixed wait is too short
    when dpfsim is slow at large sizes); returns the management counts."""
    deadline = c.now() + timeout
    last, still = -1, c.now()
    while c.now() < deadline:
        n = mgmt_counts(e).get("LIST dpuservices", 0)
        if n != last:
            last, still = n, c.now()
        elif n > 0 and c.now() - still >= quiet_s:
            break
        time.sleep(0.25)
    return mgmt_counts(e)


# --- (b) -------------------------------------------------------------------

def throughput(workers, results, keep_env=False, qps=None):
    extra = {"extsvc.kube_qps": str(qps), "extsvc.kube_burst": str(qps)} if qps else {}
    e = c.env(dpus=2, workers=workers, extra=extra)
    try:
        c.wait_until(lambda: len(e.pg.worker_pids()) == workers, 30, 0.1, f"{workers} workers running")
        c.settle(e, 0.5)
        e.sim.ctl("POST", "/counts/reset")
        t0 = c.now()
        e.pg.sql(create_sql("svc-", 1, N))
        t1 = c.now()
        cpu = c.CpuMeter(e)
        t_ready = wait_count(e, "READY", N, timeout=180)
        used = cpu.read()
        posts = mgmt_counts(e).get("POST dpuservices", 0)
        elapsed = t_ready - t1
        slots = [(int(r[0]), int(r[3])) for r in c.worker_status(e)]
        results.append((f"{workers}" + (f" (kube_qps {qps})" if qps else ""), N, t1 - t0, elapsed, N / elapsed, posts, used["workers"], used["dpfsim"],
                        " ".join(f"{s}:{n}" for s, n in slots)))
        print(f"    {workers} worker(s): {N} READY {elapsed:.2f}s after commit "
              f"({N / elapsed:.0f}/s); POSTs {posts}; completions per slot {slots}", flush=True)
        c.json_lines(JSON_OUT, {"bench": "throughput", "workers": workers, "qps": qps, "n": N, "txn_s": t1 - t0,
                                "to_ready_s": elapsed, "per_s": N / elapsed, "posts": posts})
        if keep_env:
            return e
    except Exception:
        e.close(keep=True)
        raise
    e.close()
    return None


# --- (c) -------------------------------------------------------------------

def api_calls(e):
    rows = []
    # steady-state resync over N READY services
    c.settle(e)
    e.sim.ctl("POST", "/counts/reset")
    t0 = c.now()
    e.pg.sql("SELECT extsvc.request_resync()")
    cnt = wait_resync_lists(e)
    total = sum(cnt.values())
    writes = sum(v for k, v in cnt.items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))
    rows.append((f"resync pass, {N} READY services (whole pass)", fmt_counts(cnt), total, writes))
    print(f"    resync pass of {N}: {cnt} ({c.now() - t0:.1f}s after request_resync, incl. a 2 s quiet wait)",
          flush=True)
    c.json_lines(JSON_OUT, {"bench": "resync_calls", "n": N, "counts": cnt})

    # create OPS
    e.sim.ctl("POST", "/counts/reset")
    e.pg.sql(create_sql("op-", 1, OPS))
    wait_count(e, "READY", OPS, 60, like="op-%")
    c.settle(e, 0.5)
    cnt = mgmt_counts(e)
    rows.append((f"create (per service, {OPS} services)", fmt_counts(cnt, OPS), sum(cnt.values()) / OPS,
                 sum(v for k, v in cnt.items() if not k.startswith(("GET", "LIST"))) / OPS))

    # update OPS (chart version change -> one merge patch each)
    e.sim.ctl("POST", "/counts/reset")
    new = dict(DATA, chartVersion="1.0.1")
    e.pg.sql(f"SELECT count(extsvc.update_service(service_id, data => {c.lit(json.dumps(new))})) "
             f"FROM extsvc.services WHERE service_name LIKE 'op-%'")
    deadline = c.now() + 60
    while c.now() < deadline:
        n = int(e.pg.one("SELECT count(*) FROM extsvc.services WHERE service_name LIKE 'op-%' "
                         "AND lifecycle_state = 'READY' AND applied_revision = 2"))
        if n >= OPS:
            break
        time.sleep(0.1)
    c.settle(e, 0.5)
    cnt = mgmt_counts(e)
    rows.append((f"update (per service, {OPS} services)", fmt_counts(cnt, OPS), sum(cnt.values()) / OPS,
                 sum(v for k, v in cnt.items() if not k.startswith(("GET", "LIST"))) / OPS))

    # delete OPS (DELETE, then polls until the finalizer is gone and GET answers 404)
    e.sim.ctl("POST", "/counts/reset")
    e.pg.sql("SELECT count(extsvc.delete_service(service_id)) FROM extsvc.services WHERE service_name LIKE 'op-%'")
    wait_count(e, "DELETED", OPS, 120, like="op-%")
    c.settle(e, 0.5)
    cnt = mgmt_counts(e)
    rows.append((f"delete (per service, {OPS} services)", fmt_counts(cnt, OPS), sum(cnt.values()) / OPS,
                 sum(v for k, v in cnt.items() if not k.startswith(("GET", "LIST"))) / OPS))
    c.json_lines(JSON_OUT, {"bench": "op_calls", "rows": rows})
    return rows


# --- (d) -------------------------------------------------------------------

def memory(e, rows):
    def snap(label, n):
        for pid, rss, anon, shmem, hwm in c.worker_mem(e):
            rows.append((label, n, pid, rss, anon, shmem, hwm))
        srss, shwm = c.sim_mem(e)
        rows.append((label, n, "dpfsim", srss, None, None, shwm))

    live = int(e.pg.one("SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY'"))
    snap("after create", live)
    # grow to BIG in batches of N per transaction, within the time budget
    t_start = c.now()
    cpu = c.CpuMeter(e)
    batch_times = []
    lo = N + 1
    note = ""
    while live < BIG:
        hi = min(lo + N - 1, lo + (BIG - live) - 1)
        left = BIG_BUDGET - (c.now() - t_start)
        if batch_times and max(batch_times) > left:
            note = (f"stopped at {live} services: the next batch would exceed the {BIG_BUDGET}s budget "
                    f"(slowest batch {max(batch_times):.1f}s)")
            break
        tb = c.now()
        e.pg.sql(create_sql("svc-", lo, hi))
        want = live + (hi - lo + 1)
        try:
            wait_count(e, "READY", want, timeout=max(5.0, left))
        except TimeoutError:
            live = count_state(e, "READY")
            note = (f"stopped at {live} READY services: the batch up to {want} did not finish within the "
                    f"{BIG_BUDGET}s budget")
            break
        batch_times.append(c.now() - tb)
        live = want
        lo = hi + 1
    wall = c.now() - t_start
    used = cpu.read()
    note = (note + "; " if note else "") + f"CPU during growth: workers {used['workers']:.1f}s, dpfsim {used['dpfsim']:.1f}s"
    print(f"    grew to {live} READY services in {wall:.1f}s ({len(batch_times)} batches; "
          f"per batch {', '.join(f'{b:.1f}' for b in batch_times)} s)", flush=True)
    if note:
        print("    " + note, flush=True)
    snap("after growth", live)
    # a steady-state resync at this size
    c.settle(e)
    e.sim.ctl("POST", "/counts/reset")
    e.pg.sql("SELECT extsvc.request_resync()")
    cnt = wait_resync_lists(e)
    snap("after resync", live)
    return live, wall, batch_times, note, cnt


# --- (e) -------------------------------------------------------------------

def write_kubeconfig(e):
    return e.write_kubeconfig()


def kubectl_reference():
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("    kubectl not found: reference skipped", flush=True)
        return None
    e = c.env(dpus=2, workers=1, extra={"extsvc.enabled": "off"})
    try:
        kcfg = write_kubeconfig(e)
        cache = os.path.join(e.workdir, "kube-cache")
        e.pg.sql(create_sql("kc-", 1, KUBECTL_N))
        objs = [r[0] for r in e.pg.sql("SELECT extsvc.render_dpuservice(service_id) FROM extsvc.services "
                                       "WHERE service_name LIKE 'kc-%' ORDER BY service_name")]
        assert len(objs) == KUBECTL_N, len(objs)
        d = os.path.join(e.workdir, "objs")
        os.makedirs(d)
        files = []
        for i, o in enumerate(objs):
            p = os.path.join(d, f"{i:05d}.json")
            with open(p, "w") as f:
                f.write(o)
            files.append(p)
        # dpfsim serves no OpenAPI document, so client-side validation is off
        base = ["kubectl", "--kubeconfig", kcfg, "--cache-dir", cache]
        apply = ["apply", "--validate=false", "-f"]
        # one warm-up apply of an extra object fills kubectl's discovery cache, as an operator's would be
        warm = json.loads(objs[0])
        warm["metadata"]["name"] += "-warmup"
        wp = os.path.join(e.workdir, "warmup.json")
        with open(wp, "w") as f:
            json.dump(warm, f)
        r = subprocess.run(base + apply + [wp], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            print(f"    kubectl apply failed: {r.stderr.strip()[:500]}", flush=True)
            return None
        e.sim.ctl("POST", "/counts/reset")
        t0 = c.now()
        done = 0
        per = []
        for p in files:
            ts = c.now()
            r = subprocess.run(base + apply + [p], capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"kubectl apply {p}: {r.stderr}")
            per.append(c.now() - ts)
            done += 1
            if c.now() - t0 > KUBECTL_BUDGET:
                break
        elapsed = c.now() - t0
        cnt = e.sim.counts()
        mg = cnt["management"]
        listed = len(e.sim.dpuservices())
        extrapolated = done < KUBECTL_N
        total_est = elapsed / done * KUBECTL_N
        print(f"    kubectl apply one by one: {done} objects in {elapsed:.1f}s "
              f"({done / elapsed:.1f}/s; median {c.median(per) * 1000:.0f} ms per apply)"
              + (f"; cut at the {KUBECTL_BUDGET}s budget, {KUBECTL_N} extrapolated to {total_est:.0f}s"
                 if extrapolated else ""), flush=True)
        print(f"    API requests seen by dpfsim for {done} applies: total {cnt['total']} "
              f"({cnt['total'] / done:.1f} per object); management {fmt_counts(mg)}; "
              f"{listed - 1} DPUServices exist", flush=True)
        res = {"done": done, "elapsed": elapsed, "per_s": done / elapsed, "median_ms": c.median(per) * 1000,
               "extrapolated": extrapolated, "total_est_s": total_est, "calls_per_obj": cnt["total"] / done}
        c.json_lines(JSON_OUT, dict(res, bench="kubectl", n=KUBECTL_N))
        return res
    finally:
        e.close()


def main():
    t_start = c.now()
    print(f"# worker_throughput: {N} services; ops {OPS}; growth to {BIG}; {c.machine_line()}", flush=True)
    results = []
    e = None
    ok = False
    try:
        for w in WORKER_COUNTS[:-1]:
            throughput(w, results)
        if RAISED_QPS:
            throughput(WORKER_COUNTS[-1], results, qps=RAISED_QPS)
        e = throughput(WORKER_COUNTS[-1], results, keep_env=True)
        c.table(f"(b) throughput: {N} creates in one transaction, commit -> all READY",
                ["workers", "services", "intent txn (s)", "commit->all READY (s)", "services/s", "POSTs",
                 "worker CPU (s)", "dpfsim CPU (s)", "completions per slot"], results)
        print(f"dpfsim arguments added: {c.SIM_ARGS or 'none'}")
        calls = api_calls(e)
        c.table("(c) Kubernetes API calls per operation (management cluster, from dpfsim's counters)",
                ["operation", "calls by verb and resource", "calls", "writes"], calls)
        mem_rows = []
        live, wall, batches, note, big_counts = memory(e, mem_rows)
        print(f"resync pass at {live} services: {fmt_counts(big_counts)}")
        c.table(f"(d) memory (MiB) at {N} and {live} services (workers: {WORKER_COUNTS[-1]})",
                ["when", "services", "pid", "VmRSS", "RssAnon", "RssShmem", "VmHWM"], mem_rows)
        print(f"growth {N} -> {live}: {wall:.1f}s wall in batches of {N} per transaction"
              + (f"; {note}" if note else ""))
        c.json_lines(JSON_OUT, {"bench": "memory", "rows": mem_rows, "live": live, "wall": wall,
                                "batches": batches, "note": note, "resync_counts": big_counts})
        e.close()
        e = None
        ref = kubectl_reference()
        if ref:
            rows = [(f"worker, {r[0]} worker(s), commit -> all READY", r[1], r[3], r[4], "-") for r in results]
            rows.append(("kubectl apply -f, one process per object", ref["done"], ref["elapsed"], ref["per_s"],
                         f"{ref['total_est_s']:.0f}" + (" (extrapolated)" if ref["extrapolated"] else "")))
            c.table(f"(e) {N} DPUServices: worker vs kubectl apply one by one",
                    ["path", "objects timed", "seconds", "objects/s", f"time for {KUBECTL_N} (s)"], rows)
            for r in results:
                print(f"ratio: worker ({r[0]} worker(s)) rate / kubectl rate = {r[4] / ref['per_s']:.0f}x")
        ok = True
    finally:
        if e:
            e.close(keep=not ok)
        print(f"worker_throughput: {c.now() - t_start:.1f}s wall", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
