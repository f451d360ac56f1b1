#!/usr/bin/python3
"""Placement benchmarks (issue 5).

1. attach-to-RUNNING latency of one instance: REPEATS attach/detach cycles,
   time from the commit of set_instance_extension_services to
   instance_extension_services_ready() = true (and detach to the tombstone
   gone), with dpfsim's default controller delays and with all delays 0.
2. A fleet: DPUS DPUs (one per host, registered in one statement), SERVICES
   services (one transaction), INSTANCES instances each attached to one
   service (dpu_target PRIMARY) in one transaction; sim delays 0-50 ms. Time
   until every attachment is RUNNING (and every instance ready), then one
   steady-state pass (request_resync marks every DPU due): its time and its
   API calls, total and per DPU; worker memory.

Env: BENCH_REPEATS (20; quick 5), BENCH_DPUS (400; quick 200; the issue: 2000),
BENCH_FLEET_SERVICES (40; quick 20; the issue: 200), BENCH_INSTANCES (200; quick 100;
the issue: 1000), BENCH_FLEET_BUDGET_S (150; quick 60), BENCH_FLEET_SIM_ARGS
("--tick-ms 500"), BENCH_QUICK=1.
"""
import json
import os
import sys
import time
import uuid

import common as c  # bench/common.py, beside this file

REPEATS = c.size("BENCH_REPEATS", 20, 5)
# The fleet is 2000 DPUs, 200 services, 1000 instances
# (BENCH_DPUS=2000 BENCH_FLEET_SERVICES=200 BENCH_INSTANCES=1000); dpfsim's controllers
# cannot carry it within the time bound on 2 cores (docs/performance.md), so the
# default is the largest fifth-scale fleet that finishes.
DPUS = c.size("BENCH_DPUS", 400, 200)
SERVICES = c.size("BENCH_FLEET_SERVICES", 40, 20)
INSTANCES = c.size("BENCH_INSTANCES", 200, 100)
BUDGET = c.size("BENCH_FLEET_BUDGET_S", 150, 60)
# dpfsim's controllers hold the store lock for a whole tick and re-evaluate every
# DaemonSet against every Node; a longer pause between ticks leaves the API room.
FLEET_SIM_ARGS = os.environ.get("BENCH_FLEET_SIM_ARGS", "--tick-ms 500")
JSON_OUT = os.environ.get("BENCH_JSON")

DATA = {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent", "chartVersion": "1.0.0",
        "security": {"privileged": False}}
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def dpu_uuid(expr):
    """The NICo MachineId (SPEC 7) of DPU number expr, as an SQL expression."""
    return f"('fm100ds' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def host_uuid(expr):
    """The NICo MachineId of host number expr."""
    return f"('fm100hs' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def inst_uuid(expr):
    return f"('00000000-0000-0000-0002-' || lpad(to_hex({expr}), 12, '0'))::uuid"


def register_dpus(e, n):
    e.pg.sql(f"SELECT count(extsvc.register_dpu({dpu_uuid('i')}, {host_uuid('i')}, "
             f"format('dpu-device-%s', {c.seeded_number('i')}), "
             f"format('host-%s-dpu-device-%s', {c.seeded_number('i')}, {c.seeded_number('i')}), true)) "
             f"FROM generate_series(0, {n - 1}) i")


def all_counts(e):
    cnt = e.sim.counts()
    out = {}
    for cl in ("management", "dpu"):
        for k, v in cnt[cl].items():
            out[f"{cl[:4]} {k}"] = v
    return out


def fmt_counts(cnt, per=1.0):
    return ", ".join(f"{k} {v / per:.2f}" for k, v in sorted(cnt.items())) or "none"


def dpu_queue_idle(e):
    """True when no DPU row is due or leased (converged, nothing scheduled)."""
    return e.pg.one("SELECT count(*) FROM extsvc.dpu_reconciliations "
                    "WHERE next_due_at IS NOT NULL OR lease_token IS NOT NULL") == "0"


# --- 1. latency ----------------------------------------------------------------

def latency_runs(e, s, sid, version, iid, label):
    attach_ms, detach_ms = [], []
    attach = json.dumps([{"service_id": sid, "version": version}])
    ready_q = f"SELECT extsvc.instance_extension_services_ready('{iid}')"
    gone_q = f"SELECT count(*) FROM extsvc.instance_extension_services WHERE instance_id = '{iid}'"
    for _ in range(REPEATS):
        s.run(f"SELECT extsvc.set_instance_extension_services('{iid}', {c.lit(attach)})")
        t1 = c.now()
        t_ready = c.wait_sql(s, ready_q, "t", 60, 0.005)
        attach_ms.append((t_ready - t1) * 1000)
        s.run(f"SELECT extsvc.set_instance_extension_services('{iid}', '[]')")
        t1 = c.now()
        t_gone = c.wait_sql(s, gone_q, "0", 60, 0.005)
        detach_ms.append((t_gone - t1) * 1000)
        # the instance is ready again (nothing attached) once the tombstone is gone
        time.sleep(0.05)
    return [(f"attach -> ready ({label})", c.median(attach_ms), c.pct(attach_ms, 99), min(attach_ms), max(attach_ms)),
            (f"detach -> tombstone gone ({label})", c.median(detach_ms), c.pct(detach_ms, 99), min(detach_ms),
             max(detach_ms))]


def latency():
    e = c.env(dpus=4, workers=2)
    s = None
    try:
        host = "fm100hs" + "a1".rjust(32, "0") + "0" * 20
        e.pg.sql(f"SELECT extsvc.register_dpu('fm100ds{'d000'.rjust(32, '0')}{'0' * 20}', '{host}', "
                 f"'dpu-device-0000', 'host-0000-dpu-device-0000', true)")
        sid = e.create("lat-svc", DATA, tenant="tenant-a", target="PRIMARY")
        e.wait_state(sid, "READY")
        version = e.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
        iid = str(uuid.uuid4())
        e.pg.sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{host}')")
        s = c.Session(e.pg)
        delays = e.sim.ctl("GET", "/delays")
        rows = latency_runs(e, s, sid, version, iid, "sim default delays")
        e.sim.ctl("POST", "/delays", {"all_ms": 0})
        rows += latency_runs(e, s, sid, version, iid, "sim delays 0")
        # steady state of this one DPU with one attachment
        s.run(f"SELECT extsvc.set_instance_extension_services('{iid}', "
              f"{c.lit(json.dumps([{'service_id': sid, 'version': version}]))})")
        c.wait_sql(s, f"SELECT extsvc.instance_extension_services_ready('{iid}')", "t", 60, 0.01)
        c.wait_until(lambda: dpu_queue_idle(e), 60, 0.1, "DPU queue idle")
        c.settle(e)
        e.sim.ctl("POST", "/counts/reset")
        e.pg.sql("SELECT extsvc.request_resync()")
        time.sleep(3)
        one = all_counts(e)
        e.sim.ctl("POST", "/delays", delays)
        return rows, delays, one
    finally:
        if s:
            s.close()
        e.close()


# --- 2. fleet ------------------------------------------------------------------

def fleet():
    out = {"dpus": DPUS, "services": SERVICES, "instances": INSTANCES}
    t_env = c.now()
    e = c.env(dpus=DPUS, workers=2, sim_args=FLEET_SIM_ARGS)
    out["env_s"] = c.now() - t_env
    try:
        return fleet_steps(e, out)
    except (TimeoutError, AssertionError) as ex:
        out["failed"] = str(ex)
        print(f"    fleet stopped: {ex}", flush=True)
        out.setdefault("mem", c.worker_mem(e))
        return out
    finally:
        e.close()


def fleet_steps(e, out):
    """The fleet steps; a TimeoutError or AssertionError ends them (reported by fleet())."""
    e.sim.ctl("POST", "/delays", c.FAST_DELAYS)
    t0 = c.now()
    register_dpus(e, DPUS)
    out["register_s"] = c.now() - t0
    # the registration makes every DPU due once (nothing wanted yet)
    print(f"    registered {DPUS} DPUs in {out['register_s']:.1f}s", flush=True)
    c.wait_until(lambda: dpu_queue_idle(e), 120, 0.5, "registration pass")
    out["registration_pass_s"] = c.now() - t0
    t0 = c.now()
    e.pg.sql("SELECT count(extsvc.create_service('tenant-fleet', 'fleet-' || lpad(i::text, 5, '0'), "
             f"'DPF_HELM_CHART', {c.lit(json.dumps(DATA))}, dpu_target => 'PRIMARY')) "
             f"FROM generate_series(0, {SERVICES - 1}) i")
    c.wait_sql(e.pg, "SELECT count(*) FROM extsvc.services WHERE service_name LIKE 'fleet-%' "
                     "AND lifecycle_state = 'READY'", str(SERVICES), 120, 0.2)
    out["services_ready_s"] = c.now() - t0
    print(f"    registration pass {out['registration_pass_s']:.1f}s; {SERVICES} services READY in "
          f"{out['services_ready_s']:.1f}s", flush=True)
    t0 = c.now()
    e.pg.sql(f"SELECT count(extsvc.upsert_instance({inst_uuid('i')}, 'tenant-fleet', {host_uuid('i')})) "
             f"FROM generate_series(0, {INSTANCES - 1}) i")
    out["instances_s"] = c.now() - t0
    c.wait_until(lambda: dpu_queue_idle(e), 60, 0.5, "queue idle before attach")
    c.settle(e, 0.5)
    e.sim.ctl("POST", "/counts/reset")
    t0 = c.now()
    e.pg.sql(
        "SELECT count(extsvc.set_instance_extension_services(" + inst_uuid("i") + ", "
        "jsonb_build_array(jsonb_build_object('service_id', s.service_id::text, 'version', s.version)))) "
        f"FROM generate_series(0, {INSTANCES - 1}) i "
        "JOIN (SELECT service_id, version, (row_number() OVER (ORDER BY service_name) - 1)::int AS k "
        "      FROM extsvc.services WHERE service_name LIKE 'fleet-%') s "
        f"  ON s.k = i % {SERVICES}")
    t1 = c.now()
    out["attach_txn_s"] = t1 - t0
    running_q = ("SELECT count(*) FROM extsvc.dpf_extension_service_attachments "
                 "WHERE placement_state = 'ACTIVE' AND deployment_state = 'RUNNING'")
    progress = []
    deadline = t1 + BUDGET
    n = 0
    while c.now() < deadline:
        n = int(e.pg.one(running_q))
        progress.append((c.now() - t1, n))
        if n >= INSTANCES:
            break
        time.sleep(0.5)
    out["running"] = n
    out["all_running_s"] = (c.now() - t1) if n >= INSTANCES else None
    out["progress"] = [(round(a, 1), b) for a, b in progress[::max(1, len(progress) // 12)]]
    if n < INSTANCES:
        print(f"    only {n} of {INSTANCES} attachments RUNNING after the {BUDGET}s budget", flush=True)
        out["attach_counts"] = all_counts(e)
        out["mem"] = c.worker_mem(e)
        return out
    ready_q = "SELECT count(*) FROM extsvc.instances i WHERE extsvc.instance_extension_services_ready(i.instance_id)"
    try:
        c.wait_sql(e.pg, ready_q, str(INSTANCES), 60, 0.5)
        out["all_ready_s"] = c.now() - t1
    except TimeoutError as ex:
        out["all_ready_s"] = None
        print(f"    {ex}", flush=True)
    # convergence: nothing scheduled any more (rollout polling done)
    try:
        c.wait_until(lambda: dpu_queue_idle(e), 120, 0.5, "DPU queue idle")
        out["quiet_s"] = c.now() - t1
    except AssertionError:
        out["quiet_s"] = None
    c.settle(e)
    out["attach_counts"] = all_counts(e)
    out["mem_after_attach"] = c.worker_mem(e)
    # one steady-state pass
    e.sim.ctl("POST", "/counts/reset")
    t_db = e.pg.one("SELECT now()")
    t0 = c.now()
    e.pg.sql("SELECT extsvc.request_resync()")
    passed_q = (f"SELECT count(*) FROM extsvc.dpu_reconciliations WHERE last_observed_at >= '{t_db}' "
                f"AND next_due_at IS NULL AND lease_token IS NULL")
    try:
        c.wait_sql(e.pg, passed_q, str(DPUS), 120, 0.2)
        out["steady_pass_s"] = c.now() - t0
    except TimeoutError as ex:
        out["steady_pass_s"] = None
        print(f"    {ex}", flush=True)
    c.settle(e)
    out["steady_counts"] = all_counts(e)
    out["steady_writes"] = sum(v for k, v in out["steady_counts"].items() if k.split()[1] in WRITES)
    out["mem"] = c.worker_mem(e)
    out["sim_mem"] = c.sim_mem(e)
    out["worker_status"] = c.worker_status(e)
    return out


def main():
    t_start = c.now()
    print(f"# placement: latency x{REPEATS}; fleet {DPUS} DPUs, {SERVICES} services, {INSTANCES} instances; "
          f"{c.machine_line()}", flush=True)
    ok = False
    try:
        t0 = c.now()
        rows, delays, one = latency()
        c.table(f"attach-to-RUNNING latency, one instance, one PRIMARY DPU, {REPEATS} cycles (ms)",
                ["measure", "median", "p99", "min", "max"], rows)
        print(f"sim default delays: {delays}")
        print(f"steady-state pass, 1 registered DPU with 1 attachment: {fmt_counts(one)} "
              f"(includes the resync LIST of DPUServices)")
        print(f"latency part: {c.now() - t0:.1f}s wall", flush=True)
        c.json_lines(JSON_OUT, {"bench": "attach_latency", "rows": rows, "one_dpu_counts": one})

        t0 = c.now()
        f = fleet()
        total_attach = sum(f.get("attach_counts", {}).values())
        rows = [
            ("dpfsim + PostgreSQL start (s)", f.get("env_s")),
            (f"register {DPUS} DPUs, one statement (s)", f.get("register_s")),
            ("registration pass over all DPUs (s)", f.get("registration_pass_s")),
            (f"{SERVICES} services created -> READY (s)", f.get("services_ready_s")),
            (f"upsert {INSTANCES} instances (s)", f.get("instances_s")),
            (f"attach {INSTANCES} instances, one transaction (s)", f.get("attach_txn_s")),
            (f"attach commit -> all {INSTANCES} attachments RUNNING (s)", f.get("all_running_s")),
            ("attachments RUNNING at the end", f.get("running")),
            (f"attach commit -> all {INSTANCES} instances ready (s)", f.get("all_ready_s")),
            ("attach commit -> DPU queue idle (s)", f.get("quiet_s")),
            ("API calls, attach until idle (total)", total_attach),
            ("API calls, attach until idle (per attached DPU)", total_attach / INSTANCES if INSTANCES else None),
        ]
        if "steady_counts" in f:
            tot = sum(f["steady_counts"].values())
            rows += [("steady-state pass: request_resync -> every DPU observed (s)", f["steady_pass_s"]),
                     ("steady-state pass: API calls (total)", tot),
                     ("steady-state pass: API calls per DPU", tot / DPUS),
                     ("steady-state pass: writes", f["steady_writes"])]
        c.table(f"fleet: {DPUS} DPUs, {SERVICES} services, {INSTANCES} attached instances "
                f"(sim delays {c.FAST_DELAYS}, dpfsim {FLEET_SIM_ARGS or 'default tick'})", ["measure", "value"], rows)
        if f.get("failed"):
            print(f"FLEET DID NOT FINISH: {f['failed']}")
        print(f"RUNNING over time (s, count): {f.get('progress')}")
        print(f"attach until idle, by verb: {fmt_counts(f.get('attach_counts', {}))}")
        if "steady_counts" in f:
            print(f"steady-state pass, by verb: {fmt_counts(f['steady_counts'])}")
            print(f"steady-state pass, per DPU: {fmt_counts(f['steady_counts'], DPUS)}")
        mem = [("after attach",) + tuple(r) for r in f.get("mem_after_attach", [])] + \
              [("after steady pass",) + tuple(r) for r in f.get("mem", [])]
        c.table("fleet: worker memory (MiB)", ["when", "pid", "VmRSS", "RssAnon", "RssShmem", "VmHWM"], mem)
        if f.get("sim_mem"):
            print(f"dpfsim VmRSS {f['sim_mem'][0]:.0f} MiB, VmHWM {f['sim_mem'][1]:.0f} MiB")
        print(f"worker_status: {f.get('worker_status')}")
        print(f"fleet part: {c.now() - t0:.1f}s wall", flush=True)
        c.json_lines(JSON_OUT, dict({k: v for k, v in f.items()}, bench="fleet"))
        ok = f.get("all_running_s") is not None
    finally:
        print(f"placement: {c.now() - t_start:.1f}s wall", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
