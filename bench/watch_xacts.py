#!/usr/bin/python3
"""Database transactions per watched change (issue 24, part 2: one statement marks and claims
the DPU rows an event names, in one transaction per loop iteration).

One watcher (extsvc.workers = 1) and dpfsim with 4 DPUs. A change: a NICo placement key of this
site, put by hand on DPUDevice 3 (no instance wants it there); its event wakes that DPU, the
watcher's pass removes the key with one label patch, and the patch's own event changes nothing.
ROUNDS such changes, one every GAP seconds, then a quiet window of the same length. Printed:
- the transactions that wrote (transaction ids assigned: a claim that finds nothing, a read,
  an idle loop write nothing and take none), per change: the exact figure;
- the calls of the worker's SQL functions (track_functions) and the rows written per table;
- every committed transaction (pg_stat_database.xact_commit, all backends) of both windows and
  their difference per change: dominated by the idle loop's claims (the watcher goes round its
  loop several times a second on events that change nothing), so only a rough figure.
Runs against the PostgreSQL of $PGBIN (export PGBIN=$($PG_CONFIG --bindir) for a private one;
the test kit otherwise takes the first pg_config on PATH).

Env: BENCH_ROUNDS (20), BENCH_GAP_S (1.0).

Measured 2026-12-05 (2 CPUs shared, 10 changes): before issue 24 (mark_dpus_due_by_names, then
claim_ids in a transaction of its own) 3.00 writing transactions and 3 rows written per change,
one placement-registry read per loop iteration; after (mark_and_claim_dpus) 2.00 and 2, the
registry read only when DPU rows were claimed.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from extsvc_testkit.harness import Env, device, host_id, wait_until  # noqa: E402

NS = "dpf-operator-system"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))
GAP = float(os.environ.get("BENCH_GAP_S", "1.0"))


def xacts(env):
    # a fresh snapshot of the statistics, not the one cached for this transaction
    env.pg.sql("SELECT pg_stat_clear_snapshot()")
    return int(env.pg.one("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))


def next_xid(env):
    """The next transaction id to be assigned (reading it assigns none): only a transaction that
    writes takes one, and an idle loop's claims, which find nothing, write nothing."""
    return int(env.pg.one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))


def table_writes(env):
    env.pg.sql("SELECT pg_stat_clear_snapshot()")
    rows = env.pg.sql("SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables "
                      "WHERE schemaname = 'extsvc'")
    return {r[0]: int(r[1]) for r in rows}


def function_calls(env):
    env.pg.sql("SELECT pg_stat_clear_snapshot()")
    rows = env.pg.sql("SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'extsvc'")
    return {r[0]: int(r[1]) for r in rows}


def iterations(env):
    return int(env.pg.one("SELECT iterations FROM extsvc.worker_status() WHERE slot = 0"))


def settle(env):
    """No work leased or due within the next 15 s, and the statistics flushed."""
    wait_until(lambda: env.pg.one(
        "SELECT count(*) FROM (SELECT lease_token, next_due_at FROM extsvc.dpu_reconciliations UNION ALL "
        "SELECT lease_token, next_due_at FROM extsvc.dpf_extension_service_reconciliations) q "
        "WHERE q.lease_token IS NOT NULL OR q.next_due_at < now() + interval '15 s'") == "0",
        timeout=120, interval=0.5, what="no work leased or due")
    time.sleep(2)


def main():
    env = Env(dpus=4, workers=1, extra={"track_functions": "'all'"})
    try:
        for i in range(4):
            env.register_dpu(i, host_id(f"{'abcd'[i]}1"), True)
        sid = env.ready_service("xacts")
        key = env.pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")
        path = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(3)}"

        def labels():
            code, body = env.sim.kube("GET", path)
            return ((body.get("spec") or {}).get("cluster") or {}).get("nodeLabels") or {}
        wakes = lambda: int(env.pg.one("SELECT watch_wakes FROM extsvc.worker_status() WHERE slot = 0"))  # noqa: E731
        passes = lambda: env.pg.sql("SELECT claimed, completed, stale FROM extsvc.worker_status() WHERE slot = 0")[0]  # noqa: E731
        settle(env)
        # the changes
        f0 = function_calls(env)
        w0, x0, t0, n0, tw0, p0 = wakes(), xacts(env), time.time(), next_xid(env), table_writes(env), passes()
        for _ in range(ROUNDS):
            code, _ = env.sim.kube("PATCH", path, {"spec": {"cluster": {"nodeLabels": {key: "enabled"}}}},
                                   content_type="application/merge-patch+json")
            assert code == 200
            wait_until(lambda: key not in labels(), timeout=15, interval=0.05, what="the key removed")
            time.sleep(GAP)
        busy_s = time.time() - t0
        time.sleep(12)  # the watcher idles up to 10 s before its next statistics flush
        x1, w1, n1, tw1 = xacts(env), wakes(), next_xid(env), table_writes(env)
        f1 = function_calls(env)
        print("worker function calls over the changes:",
              {k: v - f0.get(k, 0) for k, v in sorted(f1.items()) if v != f0.get(k, 0) and not k.startswith("_")})
        print("the watcher's claimed, completed, stale over the changes:",
              [int(b) - int(a) for a, b in zip(p0, passes())])
        print("rows written per table over the changes:",
              {k: v - tw0.get(k, 0) for k, v in tw1.items() if v != tw0.get(k, 0)})
        # a quiet window of the same length
        settle(env)
        q0, t1, i0, m0 = xacts(env), time.time(), iterations(env), next_xid(env)
        time.sleep(busy_s + 12)
        q1, i1, m1 = xacts(env), iterations(env), next_xid(env)
        print(f"quiet: the watcher's loop went round {i1 - i0} times")
        quiet_s = time.time() - t1
        changed, quiet = x1 - x0, q1 - q0
        print(f"changes: {ROUNDS} in {busy_s + 12:.1f} s: {changed} transactions, {w1 - w0} DPU wakes")
        print(f"quiet:   {quiet_s:.1f} s: {quiet} transactions")
        print(f"per change: {(changed - quiet * (busy_s + 12) / quiet_s) / ROUNDS:.2f} transactions "
              f"(all backends, the quiet window's rate subtracted)")
        print(f"writing transactions (xids): {n1 - n0} over the changes, {m1 - m0} over the quiet window; "
              f"per change: {((n1 - n0) - (m1 - m0) * (busy_s + 12) / quiet_s) / ROUNDS:.2f}")
        return True
    finally:
        env.close()


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
