#!/usr/bin/python3
"""Kubernetes requests per service operation (issue 26, part 2: one call per operation).

Two workers with extsvc.watch on (the product's default) against dpfsim. BENCH_OPS services
are created, then updated (new chart values), then their DPUServices are edited by hand (a
drift, repaired by the worker), then deleted; each phase waits until every service reached its
state and nothing is due. dpfsim's request log (GET /requests) is cleared before each phase and
read after it; the workers' requests on dpuservices (User-Agent nico_extsvc/..., not the
watch's LIST/WATCH, not the bench's own edits) are counted by verb and divided by the number of
operations. A 409 Conflict (a write refused because the cache's resourceVersion or uid was
stale) and the requests that follow it are printed apart.

Env: BENCH_ONECALL_OPS (20).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

NS = "dpf-operator-system"
OPS = c.size("BENCH_ONECALL_OPS", 20, 20)
VERBS = ("GET", "POST", "PATCH", "DELETE")


def drain(e):
    """No service row leased or due within the next 30 s (the delete's safety net is 60 s)."""
    c.wait_until(lambda: e.pg.one(
        "SELECT count(*) FROM extsvc.dpf_extension_service_reconciliations "
        "WHERE lease_token IS NOT NULL OR next_due_at < now() + interval '30 s'") == "0",
        timeout=120, interval=0.2, what="no service work leased or due")


def worker_requests(e):
    out = []
    for r in e.sim.requests(limit=2000)["requests"]:
        if r.get("cluster") != "management" or r.get("resource") != "dpuservices":
            continue
        if not str(r.get("user_agent", "")).startswith("nico_extsvc/"):
            continue
        if r.get("verb") in ("LIST", "WATCH"):
            continue
        out.append(r)
    return out


def phase(e, name, act, done):
    drain(e)
    e.sim.ctl("DELETE", "/requests")
    t0 = c.now()
    act()
    c.wait_until(done, timeout=180, interval=0.2, what=name)
    drain(e)
    elapsed = c.now() - t0
    reqs = worker_requests(e)
    by_verb = {v: sum(1 for r in reqs if r["verb"] == v) for v in VERBS}
    conflicts = sum(1 for r in reqs if r.get("status") == 409)
    return [name, OPS, len(reqs), len(reqs) / OPS] + [by_verb[v] for v in VERBS] + [conflicts, elapsed]


def states(e, ids, want):
    rows = e.pg.sql("SELECT lifecycle_state, count(*) FROM extsvc.services WHERE service_id = ANY ("
                    + c.lit("{" + ",".join(ids) + "}") + "::uuid[]) GROUP BY 1")
    return dict((r[0], int(r[1])) for r in rows).get(want, 0) == len(ids)


def main():
    e = c.env(dpus=4, workers=2)
    try:
        e.wait_watching()
        ids = []
        rows = []

        def create():
            for i in range(OPS):
                ids.append(e.create(f"ops-{i}", c.helm_data(values={"v": 1})))

        rows.append(phase(e, "create", create, lambda: states(e, ids, "READY")))

        def update():
            for sid in ids:
                e.update(sid, c.helm_data(values={"v": 2}))

        rows.append(phase(e, "update", update, lambda: states(e, ids, "READY") and e.pg.one(
            "SELECT count(*) FROM extsvc.services WHERE applied_revision = 2 AND service_id = ANY ("
            + c.lit("{" + ",".join(ids) + "}") + "::uuid[])") == str(len(ids))))

        names = [e.state(sid)[3] for sid in ids]

        def drift():
            for n in names:
                code, _ = e.sim.kube("PATCH", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices/{n}",
                                     {"spec": {"helmChart": {"values": {"v": 99}}}},
                                     content_type="application/merge-patch+json")
                assert code == 200, code

        def repaired():
            for n in names:
                obj = e.sim.dpuservice(n)
                if obj is None or obj["spec"]["helmChart"].get("values", {}).get("v") != 2:
                    return False
            return True

        rows.append(phase(e, "drift repair", drift, repaired))
        rows.append(phase(e, "delete", lambda: [e.delete(sid) for sid in ids],
                          lambda: states(e, ids, "DELETED")))
        c.table(f"Kubernetes requests per service operation (watch on, 2 workers, {OPS} operations each)",
                ["operation", "ops", "requests", "per op", "GET", "POST", "PATCH", "DELETE",
                 "409 (stale cache)", "phase s"], rows)
        print(json.dumps({"ops": OPS, "rows": rows}))
    finally:
        e.close()


if __name__ == "__main__":
    main()
