#!/usr/bin/python3
"""Fault soak (issue 13): a fleet under a steady stream of operations while
both clusters answer ~20 % of requests with mixed faults (503, 429 with
Retry-After, connection resets, calls slower than the lease); then the faults
stop and the fleet must converge within 60 s with the reliability invariants
(python/extsvc_testkit/invariants.py). The same seeded operation stream runs
twice, without and with faults, and the Kubernetes requests the workers made
until convergence are compared (target: with faults <= 3x without).

  PYTHONPATH=python /usr/bin/python3 test/soak/soak.py                       # 500 services, 200 DPUs, 5 minutes
  PYTHONPATH=python /usr/bin/python3 test/soak/soak.py --ci                  # 60 services, 20 DPUs, 30 s (the test command)
  PYTHONPATH=python /usr/bin/python3 test/soak/soak.py --seed 7 --write-doc  # record the figures in docs/reliability.md
From the repository root; PYTHONPATH=python finds extsvc_testkit (scripts/test-all.sh sets it itself).

Exit status 0 only when both runs converged in time with the invariants and
the request ratio is within the target."""
import argparse
import json
import random
import sys
import time

from extsvc_testkit import db, invariants
from extsvc_testkit.harness import FAST_DELAYS, PG_USER, Env, lit, wait_until

# Short leases and call timeouts (as the e2e harness), so "slower than the
# lease" happens within a soak; retries capped low enough to converge.
SOAK_GUCS = {"extsvc.lease_time": "'10s'", "extsvc.http_timeout": "'3s'", "extsvc.lease_margin": "'2s'",
             "extsvc.retry_base": "'200ms'", "extsvc.retry_cap": "'5s'", "extsvc.resync_interval": "'20s'",
             "extsvc.log_level": "'info'"}
# Each rule is tried in order with its own probability; together ~20 % of
# requests on both clusters fail somehow.
FAULTS = [({"action": "status", "status": 503}, 0.07),
          ({"action": "status", "status": 429, "retry_after": 1}, 0.06),
          ({"action": "reset"}, 0.05),
          ({"action": "latency", "latency_ms": 12000}, 0.03)]
FAULT_RATE = 1.0
for _, _p in FAULTS:
    FAULT_RATE *= 1.0 - _p
FAULT_RATE = 1.0 - FAULT_RATE


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def dpu_uuid(expr):
    """The NICo MachineId (SPEC 7) of DPU number expr, as an SQL expression."""
    return f"('fm100ds' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def host_uuid(expr):
    """The NICo MachineId of host number expr."""
    return f"('fm100hs' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def data(version="1.0.0", v=0):
    return {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent", "chartVersion": version,
            "values": {"v": v}, "security": {"privileged": False}}


def sql_quiet(pg):
    """Nothing left to do as far as the database knows (no Kubernetes calls)."""
    return pg.one(
        "SELECT (SELECT count(*) FROM extsvc.services WHERE service_type = 'DPF_HELM_CHART' AND "
        "(lifecycle_state NOT IN ('READY', 'DELETED', 'FAILED') OR applied_revision IS DISTINCT FROM desired_revision "
        "AND lifecycle_state = 'READY')) + "
        "(SELECT count(*) FROM extsvc.dpf_extension_service_attachments a JOIN extsvc.dpus d "
        "ON d.machine_id = a.dpu_machine_id WHERE d.deregistered_at IS NULL "
        "AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))") == "0"


def backlog(pg):
    return int(pg.one(
        "SELECT (SELECT count(*) FROM extsvc.services WHERE service_type = 'DPF_HELM_CHART' AND "
        "lifecycle_state IN ('CREATING', 'UPDATING', 'DELETING')) + "
        "(SELECT count(*) FROM extsvc.dpf_extension_service_attachments a "
        "WHERE NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))"))


def QuietSession(pg):  # noqa: N802 (the test kit's class, bound to the harness user)
    return db.QuietSession(pg, PG_USER)


class Stream:
    """The seeded operation stream: the same choices for the same seed."""

    def __init__(self, seed, hosts, stable, updatable):
        self.rng = random.Random(seed)
        self.hosts, self.stable, self.updatable = hosts, stable, updatable
        self.deletable = []       # services created by the stream
        self.attached = {}        # instance -> service
        self.live = {}            # host -> its live instance (a host holds one, issue 29)
        self.n = 0
        self.results = {}

    def step(self, s):
        self.n += 1
        r = self.rng.random()
        if r < 0.20:
            name = f"soak-new-{self.n}"
            sid = s.one("SELECT service_id FROM extsvc.create_service('tenant-a', " + lit(name)
                        + ", 'DPF_HELM_CHART', " + lit(json.dumps(data(v=self.n))) + ", dpu_target => 'PRIMARY')")
            kind = "create"
            if sid:
                self.deletable.append(sid)
        elif r < 0.40:
            sid = self.rng.choice(self.updatable)
            kind = "update"
            sid = s.one(f"SELECT service_id FROM extsvc.update_service('{sid}', data => "
                        + lit(json.dumps(data(version=f"1.0.{self.n % 50}", v=self.n))) + ")")
        elif r < 0.65:
            sid = self.rng.choice(self.stable)
            iid = f"00000000-0000-0000-0002-{self.n:012x}"
            host = self.rng.choice(self.hosts)
            if host in self.live:
                # the host's instance goes first and the new one takes the host
                # (a hand-over, as a machine is reallocated)
                old = self.live.pop(host)
                s.run(f"SELECT extsvc.delete_instance('{old}')")
                self.attached.pop(old, None)
            s.run(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{host}', ARRAY[]::text[])")
            self.live[host] = iid
            v = s.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
            sid = s.one(f"SELECT extsvc.set_instance_extension_services('{iid}', "
                        + lit(json.dumps([{"service_id": sid, "version": v}])) + ")")
            kind = "attach"
            if sid:
                self.attached[iid] = sid
        elif r < 0.80 and self.attached:
            iid = self.rng.choice(sorted(self.attached))
            kind = "detach"
            sid = s.one(f"SELECT extsvc.set_instance_extension_services('{iid}', '[]')")
            self.attached.pop(iid, None)
        elif r < 0.90 and self.attached:
            iid = self.rng.choice(sorted(self.attached))
            kind = "delete_instance"
            sid = s.one(f"SELECT extsvc.delete_instance('{iid}')")
            self.attached.pop(iid, None)
            self.live = {h: i for h, i in self.live.items() if i != iid}
        elif self.deletable:
            sid = self.deletable.pop(self.rng.randrange(len(self.deletable)))
            kind = "delete_service"
            sid = s.one(f"SELECT lifecycle_state FROM extsvc.delete_service('{sid}')")
        else:
            kind = "idle"
            sid = "idle"
        ok = sid is not None
        self.results.setdefault(kind, [0, 0])[0 if ok else 1] += 1


def run(args, faults):
    e = Env(dpus=args.dpus, workers=2, extra=SOAK_GUCS)
    out = {"faults": faults}
    try:
        e.sim.ctl("POST", "/delays", FAST_DELAYS)
        hosts = [r[0] for r in e.pg.sql(
            f"SELECT {host_uuid('i')} FROM generate_series(0, {args.dpus - 1}) i")]
        e.pg.sql(f"SELECT count(extsvc.register_dpu({dpu_uuid('i')}, {host_uuid('i')}, "
                 f"format('dpu-device-%s', lpad(i::text, greatest(4, length(i::text)), '0')), "
                 f"format('host-%s-dpu-device-%s', lpad(i::text, greatest(4, length(i::text)), '0'), lpad(i::text, greatest(4, length(i::text)), '0')), true)) "
                 f"FROM generate_series(0, {args.dpus - 1}) i")
        n_stable, n_upd = args.services // 2, args.services - args.services // 2
        ids = {}
        for pool, n in (("stable", n_stable), ("upd", n_upd)):
            ids[pool] = [r[0] for r in e.pg.sql(
                "SELECT (extsvc.create_service('tenant-a', 'soak-" + pool + "-' || g, 'DPF_HELM_CHART', "
                + lit(json.dumps(data())) + ", dpu_target => 'PRIMARY')).service_id FROM generate_series(1, "
                + str(n) + ") g")]
        t0 = time.time()
        wait_until(lambda: e.pg.one("SELECT count(*) FROM extsvc.services WHERE lifecycle_state <> 'READY'") == "0",
                     timeout=600, interval=1.0, what="the fleet READY before the soak")
        out["setup_s"] = time.time() - t0
        s = QuietSession(e.pg)
        stream = Stream(args.seed, hosts, ids["stable"], ids["upd"])
        rules = []
        if faults:
            for cluster in ("management", "dpu"):
                for spec, p in FAULTS:
                    rules.append(e.sim.fault(cluster=cluster, verb="*", path_regex=".*", probability=p,
                                             **spec)["id"])
        # the workers' requests: the site Lease's renewals (the same every second with or without
        # faults) are not counted (harness Sim.work_requests)
        base = e.sim.work_requests()
        t_start = time.time()
        samples = []
        next_op = t_start
        while time.time() - t_start < args.seconds:
            if time.time() >= next_op:
                stream.step(s)
                next_op += 1.0 / args.ops_per_s
            if not samples or time.time() - samples[-1][0] - t_start >= 2.0:
                samples.append((time.time() - t_start, backlog(e.pg)))
            time.sleep(0.01)
        out["faulted"] = sum(r.get("hits", 0) for r in e.sim.ctl("GET", "/faults")["faults"])
        out["during"] = e.sim.work_requests() - base
        e.sim.clear_faults()
        t_stop = time.time()
        out["ops"] = stream.n
        out["op_results"] = stream.results
        # Converged: the database quiet, then the invariants on the clusters.
        # The checker's own GETs are not the workers' calls: they are
        # subtracted from the request count.
        checker_calls = 0
        converged_at = None
        last = []
        while time.time() - t_stop < args.converge_timeout:
            samples.append((time.time() - t_start, backlog(e.pg)))
            if sql_quiet(e.pg):
                before = e.sim.work_requests()
                last = invariants.violations(e)
                checker_calls += e.sim.work_requests() - before
                if not last:
                    converged_at = time.time()
                    break
            time.sleep(1.0)
        out["requests"] = e.sim.work_requests() - base - checker_calls
        out["converge_s"] = None if converged_at is None else converged_at - t_stop
        out["violations"] = last
        out["samples"] = samples
        s.close()
    finally:
        e.close()
    return out


def write_doc(args, clean, faulty, ratio):
    """The human table and the run's record (<!-- soak-run {json} -->, read by
    tools/reliability_summary.py), written whatever the outcome."""
    stamp = invariants.run_stamp()
    record = {**stamp, "seed": args.seed, "services": args.services, "dpus": args.dpus, "seconds": args.seconds,
              "ops_per_s": args.ops_per_s, "fault_rate": round(FAULT_RATE, 4), "ci": args.ci,
              "ops": faulty["ops"], "op_results": faulty["op_results"], "faulted": faulty["faulted"],
              "requests_during": faulty["during"],
              "converge_s": None if faulty["converge_s"] is None else round(faulty["converge_s"], 1),
              "clean_converge_s": None if clean["converge_s"] is None else round(clean["converge_s"], 1),
              "requests_clean": clean["requests"], "requests_faulty": faulty["requests"], "ratio": round(ratio, 2),
              "violations": len(faulty["violations"]) if faulty["converge_s"] is None else 0,
              "clean_violations": len(clean["violations"]) if clean["converge_s"] is None else 0,
              "setup_s": round(faulty.get("setup_s", 0), 1)}
    inv = ("hold" if faulty["converge_s"] is not None
           else f"{len(faulty['violations'])} violations at {args.converge_timeout:.0f} s")
    conv = f"{fmt(faulty['converge_s'])} s" if faulty["converge_s"] is not None else "not converged"
    conv_clean = f"{fmt(clean['converge_s'])} s" if clean["converge_s"] is not None else "not converged"
    invariants.write_doc_block("soak-results", "\n".join([
        "| size | duration | ops | fault rate | requests faulted | converged after faults stop | fault-free run "
        "converged | requests without / with faults | ratio | invariants |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {args.services} services, {args.dpus} DPUs | {args.seconds} s | {faulty['ops']} | {FAULT_RATE:.1%} "
        f"| {faulty['faulted']} of {faulty['during']} | {conv} | {conv_clean} | {clean['requests']} / "
        f"{faulty['requests']} | {ratio:.2f} | {inv} |",
        "", "Operations with faults (succeeded, refused): " + ", ".join(
            f"{k} {v[0]}/{v[1]}" for k, v in sorted(faulty["op_results"].items())) + ".",
        "", f"Seed {args.seed}; measured {stamp['date']} on commit `{stamp['commit']}`, {invariants.machine_line()}, by "
        f"`PYTHONPATH=python /usr/bin/python3 test/soak/soak.py --seed {args.seed} --write-doc`" + (" --ci" if args.ci else "")
        + ".",
        invariants.run_record("soak", record)]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ci", action="store_true", help="short version: 60 services, 20 DPUs, 30 s")
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--dpus", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--ops-per-s", type=float, default=2.0)
    ap.add_argument("--converge-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--write-doc", action="store_true", help="record the figures in docs/reliability.md")
    args = ap.parse_args()
    if args.ci:
        args.services, args.dpus, args.seconds = 60, 20, 30
    print(f"soak: seed {args.seed}, {args.services} services, {args.dpus} DPUs, {args.seconds} s at "
          f"{args.ops_per_s} ops/s, fault rate {FAULT_RATE:.1%} on both clusters; {invariants.machine_line()}", flush=True)
    clean = run(args, faults=False)
    print(f"  without faults: {clean['ops']} ops, converged {fmt(clean['converge_s'])} s after the stream, "
          f"{clean['requests']} requests", flush=True)
    faulty = run(args, faults=True)
    print(f"  with faults:    {faulty['ops']} ops, converged {fmt(faulty['converge_s'])} s after the faults "
          f"stopped, {faulty['requests']} requests ({faulty['faulted']} of the {faulty['during']} requests "
          f"during the stream answered with a fault)", flush=True)
    ratio = faulty["requests"] / max(1, clean["requests"])
    ok = True
    for name, r in (("without faults", clean), ("with faults", faulty)):
        if r["converge_s"] is None or r["converge_s"] > 60:
            ok = False
            print(f"  {name}: NOT converged within {args.converge_timeout:.0f} s:\n"
                  + invariants.describe(r["violations"]))
    if ratio > 3.0:
        ok = False
    print(f"  requests with faults / without: {ratio:.2f} (target <= 3)")
    print("  op results (ok, refused) with faults: " + json.dumps(faulty["op_results"], sort_keys=True))
    print(f"soak: {'ok' if ok else 'FAILED'}")
    if args.write_doc:
        write_doc(args, clean, faulty, ratio)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
