#!/usr/bin/python3
"""Kill-point sweep (issue 13): the worker is SIGKILLed exactly before or
after each Kubernetes write of both reconcilers (create, adopt, update,
delete, drift repair, orphan cleanup; DPUDevice label patches of attach,
detach, instance delete and site-wide services), and after the completing
transaction of a first item where a batch goes on with a second one.

dpfsim does the killing (control API /kill-points, docs/dpfsim.md): on the
nth request matching verb and path it SIGKILLs the worker pids it was given
and drops the connection, before the request is applied ("before") or after
it was applied but before the answer is sent ("after": the worker never
learns the outcome and never runs its completing transaction). A backend
killed by a signal makes the postmaster restart the server (crash restart,
shared memory reset) and the workers. After each point everything must
converge within 10 s of the kill with the product's DEFAULT settings, and the
invariants of python/extsvc_testkit/invariants.py (plus the spec check) must
hold. docs/reliability.md, "Kill-point sweep", lists what each point proves.

One server and one dpfsim for every point; each point starts from the
converged state the previous one left. WRITE_DOC=1 writes the measured
table into docs/reliability.md. KILL_ONLY=substring runs matching points."""
import json
import os
import re
import statistics
import sys
import time
import uuid

from extsvc_testkit.harness import Env, helm_data, lit, wait_until, dpu_id, host_id
from extsvc_testkit import invariants

import kill_sweep_doc

NS = "dpf-operator-system"
DPUSERVICES = f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices"
DEVICES = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices"
WORKERS = 2  # the product's default extsvc.workers
CONVERGE_S = 10.0
GIVE_UP_S = 40.0  # a point that misses 10 s is still waited for, so the next starts clean

# The harness shortens retries, the lease, the call timeout and raises the log
# level for its other suites; this sweep puts every one of them back to the
# product's default (src/pg/gucs.cpp): convergence is measured as shipped.
PRODUCT_DEFAULTS = {
    "extsvc.retry_base": "'500ms'", "extsvc.retry_cap": "'300s'", "extsvc.lease_time": "'60s'",
    "extsvc.resync_interval": "'300s'", "extsvc.http_timeout": "'10s'", "extsvc.log_level": "'info'",
    "extsvc.workers": str(WORKERS),
}

HOST = {h: host_id(f"{h.lower()}1") for h in "ABCD"}
# host A: DPUs 0 (primary) and 1; host B: 2 (primary) and 3; host C: 4; host D: 5
FLEET = ((0, "A", True), (1, "A", False), (2, "B", True), (3, "B", False), (4, "C", True), (5, "D", True))
HOST_DEVICES = {"A": "dpu-device-000[01]", "B": "dpu-device-000[23]", "C": "dpu-device-0004",
                "D": "dpu-device-0005"}

ENV = None
S = {}  # state handed from point to point (service ids, instance ids)
RESULTS = []


def pg():
    return ENV.pg


def sim():
    return ENV.sim


def worker_pids():
    try:
        return [int(r[0]) for r in pg().sql("SELECT pid FROM extsvc.worker_status() WHERE pid <> 0 ORDER BY slot")]
    except RuntimeError:  # in crash recovery
        return []


# What psql says when the crash restart cut its session after the statement
# was sent: the statement may well have committed (the kill it provokes can
# come within milliseconds of the commit, before psql reads the answer).
CUT = ("server closed the connection unexpectedly", "terminating connection because of crash")


def tsql(query):
    """A trigger's statement, tolerant of the cut above (the point's checks
    tell whether it committed); every other failure raises."""
    out = pg().sql(query, check=False)
    if isinstance(out, str):
        if any(m in out for m in CUT):
            return None
        raise RuntimeError(f"SQL failed: {query}\n{out}")
    return out


def t_create(name, data, target="PRIMARY", scope=None, sid=None):
    sid = sid or str(uuid.uuid4())
    args = [f"tenant_organization_id => 'tenant-a'", f"service_name => {lit(name)}",
            "service_type => 'DPF_HELM_CHART'", f"data => {lit(json.dumps(data))}", f"service_id => '{sid}'::uuid"]
    if target:
        args.append(f"dpu_target => {lit(target)}")
    if scope:
        args.append(f"deployment_scope => {lit(scope)}")
    tsql(f"SELECT 1 FROM extsvc.create_service({', '.join(args)})")
    return sid


def t_update(sid, data):
    tsql(f"SELECT 1 FROM extsvc.update_service('{sid}'::uuid, data => {lit(json.dumps(data))})")


def t_delete(sid):
    tsql(f"SELECT 1 FROM extsvc.delete_service('{sid}'::uuid)")


def dpf_name(sid):
    return pg().one(f"SELECT dpf_service_name FROM extsvc.services WHERE service_id = '{sid}'")


def state(sid):
    return tuple(pg().sql(f"SELECT lifecycle_state, desired_revision, applied_revision FROM extsvc.services "
                          f"WHERE service_id = '{sid}'")[0])


def history(sid):
    return [tuple(r) for r in pg().sql(
        f"SELECT coalesce(from_state, '-'), to_state, actor, reason, coalesce(message, '') "
        f"FROM extsvc.service_state_history WHERE service_id = '{sid}' ORDER BY id")]


def new_instance(host):
    ENV.free_host(HOST[host])  # one live instance per host (issue 29): an earlier point's goes first
    iid = str(uuid.uuid4())
    pg().sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{HOST[host]}', ARRAY[]::text[])")
    return iid


def attach(iid, *sids):
    services = json.dumps([{"service_id": s, "version": ENV.version_of(s)} for s in sids])
    tsql(f"SELECT 1 FROM extsvc.set_instance_extension_services('{iid}', {lit(services)})")


def summary(iid):
    return {sid: row[0] for sid, row in ENV.summary_rows(iid).items()}


def wait_running(iid, *sids):
    wait_until(lambda: all(summary(iid).get(s) == "RUNNING" for s in sids), timeout=30, interval=0.1,
               what=f"{iid} RUNNING")


def site_status(sid):
    return {r[0]: r[1] for r in pg().sql(
        f"SELECT dpu_device_name, deployment_state FROM extsvc.site_service_status('{sid}')")}


def render_uncommitted(sid, name, data):
    """The DPUService the worker would send for a service that is never
    committed: created and rendered in a transaction that is rolled back."""
    rows = pg().sql(
        "BEGIN; "
        f"SELECT service_id FROM extsvc.create_service(tenant_organization_id => 'tenant-a', "
        f"service_name => {lit(name)}, service_type => 'DPF_HELM_CHART', dpu_target => 'PRIMARY', "
        f"data => {lit(json.dumps(data))}, service_id => {lit(sid)}::uuid); "
        f"SELECT extsvc.render_dpuservice({lit(sid)}::uuid); ROLLBACK")
    return next(json.loads(r[0]) for r in rows if r and r[0] and r[0].startswith("{"))


def kube_ok(method, path, body=None, ct="application/json"):
    code, out = sim().kube(method, path, body, content_type=ct)
    assert 200 <= code < 300, (method, path, code, out)
    return out


# --- one point -----------------------------------------------------------------

def sweep_point(name, proves, spec, trigger, expect=lambda: [], ordering=False, prepare=lambda: None):
    """Arms the kill point, triggers the operation, waits for the kill and for
    convergence; records the result. spec: verb, path_regex, when, nth,
    cluster (management by default). expect: point-specific checks, a list of
    problems (empty when met). ordering: nth >= 2 of a batch; the result notes
    whether the nth-1 matching request came over the same connection (the same
    worker, so its item was completed before this one started). prepare runs
    before the point is armed (requests of the test itself must not count)."""
    only = os.environ.get("KILL_ONLY")
    if only and only not in name:
        # not swept: the operation still runs (the next points start from its result)
        prepare()
        trigger()
        wait_until(lambda: not invariants.violations(ENV), timeout=GIVE_UP_S,
                   interval=0.2, what=f"{name} without a kill")
        return
    t_start = time.time()
    res = {"name": name, "proves": proves, "fired": False, "seconds": None, "violations": [], "ok": False,
           "request": "", "note": ""}
    RESULTS.append(res)
    try:
        prepare()
        sim().clear_kill_points()
        pids = wait_until(lambda: (lambda p: p if len(p) == WORKERS else False)(worker_pids()), timeout=20,
                          what="both workers running")
        kp_spec = {"cluster": "management", "nth": 1, **spec, "name": name, "pids": pids}
        sim().kill_point(**kp_spec)
        trigger()
        kp = wait_until(lambda: (lambda k: k if k and k[0]["fired"] else False)(sim().kill_points()),
                        timeout=20, interval=0.02, what=f"kill point {name} fired")[0]
        res["fired"] = True
        method, path = kp["fired_request"].split(" ", 1)
        res["request"] = method + " " + path.split(f"/namespaces/{NS}/", 1)[-1]
        # A pid dpfsim could not kill because it was gone already ("No such process") was taken
        # down by the postmaster's crash restart after the first SIGKILL: dead all the same.
        gone = [p for p in pids if any(f"kill({p}): No such process" in err for err in kp.get("errors", []))]
        if sorted(kp["killed"] + gone) != sorted(pids):
            res["violations"].append(f"killed {kp['killed']} of {pids}: {kp.get('errors')}")
        if ordering:
            res["note"] = same_connection(kp, spec)
        t_kill = kp["fired_at"]
        last = []
        while True:
            try:
                now_pids = worker_pids()
                if len(now_pids) != WORKERS or set(now_pids) & set(pids):
                    last = [f"workers not restarted yet (pids {now_pids})"]
                else:
                    last = expect() or invariants.violations(ENV)
            except (RuntimeError, AssertionError, OSError) as e:  # crash recovery, connection refused
                last = [f"not answering: {str(e).strip().splitlines()[-1][:160]}"]
            if not last:
                break
            if time.time() - t_kill > GIVE_UP_S:
                break
            time.sleep(0.1)
        took = time.time() - t_kill
        res["seconds"] = round(took, 2)
        res["violations"] += last
        res["ok"] = not res["violations"] and took <= CONVERGE_S
    except Exception as e:  # noqa: BLE001 - report the point and go on
        res["violations"].append(f"{type(e).__name__}: {e}")
        if not res["fired"]:
            try:
                print(json.dumps(sim().requests(12)["requests"], indent=None)[:3000])
                print(pg().tail_log(20))
            except Exception:  # noqa: BLE001
                pass
    finally:
        try:
            sim().clear_kill_points()
        except OSError:
            pass
    secs = f"{res['seconds']:5.2f} s" if res["seconds"] is not None else "    - "
    print(f"{'ok  ' if res['ok'] else 'FAIL'} {name:44s} fired={str(res['fired']):5s} converged {secs}  "
          f"violations={len(res['violations'])}  {res['request']}"
          f"{'  [' + res['note'] + ']' if res['note'] else ''}  ({time.time() - t_start:.1f}s)", flush=True)
    if res["violations"]:
        print("     " + invariants.describe(res["violations"]).replace("\n", "\n     "), flush=True)
        if res["seconds"] and res["seconds"] > CONVERGE_S:
            print(pg().tail_log(30))


def same_connection(kp, spec):
    rx = re.compile(spec.get("path_regex") or ".*")
    verb = spec.get("verb", "*")
    reqs = sim().requests(2000)["requests"]
    earlier = [r for r in reqs if r["seq"] < kp["fired_seq"] and r["cluster"] == spec.get("cluster", "management")
               and (verb == "*" or r["verb"] == verb) and rx.search(r["path"])]
    if not earlier:
        return "no earlier matching request in the log"
    prev = earlier[-1]
    if prev["remote_port"] == kp["remote_port"]:
        return "checked: the first item's write came from the same worker"
    return "the first item's write came over another connection (the other worker?)"


# --- the points ----------------------------------------------------------------

def create_points():
    for when in ("before", "after"):
        def trigger(when=when):
            S[f"svc-{when}"] = t_create(f"kp-svc-{when}", helm_data(values={"v": 1}))

        def expect(when=when):
            sid = S[f"svc-{when}"]
            st = state(sid)
            if st != ("READY", "1", "1"):
                return [f"service {st}"]
            reason = "dpuservice_created" if when == "before" else "dpuservice_adopted"
            if ("CREATING", "READY", "worker", reason) not in [h[:4] for h in history(sid)]:
                return [f"no CREATING -> READY ({reason}) in {history(sid)}"]
            return []
        sweep_point(f"create.post.{when}",
                    {"before": "create: the POST is never applied; the restarted worker creates the DPUService",
                     "after": "create: the POST applied but unanswered; the restarted worker meets 409 "
                              "AlreadyExists and adopts its own object (history: dpuservice_adopted)"}[when],
                    {"verb": "POST", "path_regex": r"/dpuservices$", "when": when}, trigger, expect)

    for when in ("before", "after"):
        def trigger(when=when):
            sids = S[f"pair-{when}"] = [str(uuid.uuid4()), str(uuid.uuid4())]
            tsql("SELECT 1 FROM unnest(ARRAY['" + "', '".join(sids) + "']::uuid[]) WITH ORDINALITY u(id, g), "
                 "LATERAL extsvc.create_service("
                 f"tenant_organization_id => 'tenant-a', service_name => 'kp-pair-{when}-' || g, "
                 "service_type => 'DPF_HELM_CHART', dpu_target => 'ALL', data => "
                 + lit(json.dumps(helm_data(values={"v": 1}))) + ", service_id => u.id)")

        def expect(when=when):
            sts = [state(s) for s in S[f"pair-{when}"]]
            return [] if all(st == ("READY", "1", "1") for st in sts) else [f"services {sts}"]
        sweep_point(f"create.post#2.{when}",
                    "two creates in one batch: the first one's completing transaction is committed, the "
                    "worker dies at the second POST",
                    {"verb": "POST", "path_regex": r"/dpuservices$", "when": when, "nth": 2}, trigger, expect,
                    ordering=True)

    for when in ("before", "after"):
        v1, v2 = helm_data(values={"v": 1}), helm_data(values={"v": 2})

        def trigger(when=when):
            # the worker's POST of revision 1 hangs (the client gives up on it);
            # meanwhile it lands anyway (posted here, as the API server would
            # apply it late) and the service moves on to revision 2
            fid = sim().fault(verb="POST", path_regex=r"/dpuservices$", action="hang", latency_ms=30000,
                              count=1)["id"]
            sid = S[f"adopt-{when}"] = t_create(f"kp-adopt-{when}", v1)
            wait_until(lambda: any(f["id"] == fid and f["hits"] == 1 for f in sim().ctl("GET", "/faults")["faults"]),
                       timeout=10, interval=0.02, what="the worker hangs in its POST")
            S[f"adopt-{when}-name"] = dpf_name(sid)
            kube_ok("POST", DPUSERVICES, json.loads(pg().one(f"SELECT extsvc.render_dpuservice('{sid}')")))
            t_update(sid, v2)
            sim().clear_faults()  # the hanging POST is dropped: the worker retries at revision 2

        def expect(when=when):
            sid = S[f"adopt-{when}"]
            st = state(sid)
            if st != ("READY", "2", "2"):
                return [f"service {st}"]
            if ("CREATING", "READY", "worker", "dpuservice_adopted") not in [h[:4] for h in history(sid)]:
                return [f"not adopted: {history(sid)}"]
            return []
        sweep_point(f"create.adopt_patch.{when}",
                    "create meets an object of ours at an older revision (its own earlier POST, given up on, "
                    "applied late): the second write of the pass, the adoption's merge patch, is killed",
                    {"verb": "PATCH", "path_regex": r"/dpuservices/extsvc-[a-z0-9]+$", "when": when}, trigger, expect)


def update_points():
    for when in ("before", "after"):
        sid = S[f"svc-{when}"]
        name = dpf_name(sid)

        def trigger(sid=sid):
            t_update(sid, helm_data(values={"v": 2}))

        def expect(sid=sid, when=when):
            st = state(sid)
            if st != ("READY", "2", "2"):
                return [f"service {st}"]
            msgs = [h[4] for h in history(sid) if h[:4] == ("UPDATING", "READY", "worker", "revision_applied")]
            if when == "after" and not any("no change needed" in m for m in msgs):
                return [f"the restarted worker should have found the patch applied: {msgs}"]
            return []
        sweep_point(f"update.patch.{when}",
                    {"before": "update: the merge patch of the new revision is never applied; the restarted "
                               "worker patches",
                     "after": "update: the patch applied but unanswered; the restarted worker finds nothing to "
                              "patch and records the revision (\"no change needed\")"}[when],
                    {"verb": "PATCH", "path_regex": f"/dpuservices/{name}$", "when": when}, trigger, expect)


    for when in ("before", "after"):
        sids = S[f"pair-{when}"]
        names = [dpf_name(x) for x in sids]

        def trigger(sids=sids):
            tsql("; ".join(f"SELECT 1 FROM extsvc.update_service('{x}'::uuid, data => "
                           f"{lit(json.dumps(helm_data(values={'v': 2})))})" for x in sids))

        def expect(sids=sids):
            sts = [state(x) for x in sids]
            return [] if all(st == ("READY", "2", "2") for st in sts) else [f"services {sts}"]
        sweep_point(f"update.patch#2.{when}",
                    "two updates in one batch: the first one's completing transaction is committed, the "
                    "worker dies at the second merge patch",
                    {"verb": "PATCH", "path_regex": f"/dpuservices/({'|'.join(names)})$", "when": when, "nth": 2},
                    trigger, expect, ordering=True)


def delete_points():
    for when in ("before", "after"):
        sid = S[f"svc-{when}"]
        name = dpf_name(sid)

        def trigger(sid=sid):
            t_delete(sid)

        def expect(sid=sid):
            st = state(sid)
            return [] if st[0] == "DELETED" else [f"service {st}"]
        sweep_point(f"delete.delete.{when}",
                    {"before": "delete: the DELETE (uid precondition) is never applied",
                     "after": "delete: the DELETE applied, the object terminating, the worker never told"}[when],
                    {"verb": "DELETE", "path_regex": f"/dpuservices/{name}$", "when": when}, trigger, expect)

    # With the watch caches a delete is one request: the DELETE pass is recorded and the end comes
    # from the watch, with no read to kill in between. Two deletes in one batch put the first
    # service in exactly that window (its pass committed, its object terminating) when the worker
    # dies at the second DELETE.
    pair = {}

    def prepare():
        if not pair:
            pair["sids"] = [ENV.ready_service(f"kp-delpair-{i}", target="PRIMARY") for i in (1, 2)]

    def trigger():
        tsql("; ".join(f"SELECT extsvc.delete_service('{x}'::uuid)" for x in pair["sids"]))

    def expect():
        sts = [state(x) for x in pair["sids"]]
        return [] if all(st[0] == "DELETED" for st in sts) else [f"services {sts}"]
    sweep_point("delete.delete#2.before",
                "two deletes in one batch: the first one's DELETE pass is committed (its end still to come "
                "from the watch), the worker dies at the second DELETE",
                {"verb": "DELETE", "path_regex": r"/dpuservices/extsvc-[a-z0-9]+$", "when": "before", "nth": 2},
                trigger, expect, ordering=True, prepare=prepare)


def drift_points():
    # The watcher sees a hand edit, a hand delete or an orphan at once (its watch event wakes the
    # service or the cleanup): the hand action itself is the trigger, and the repair's write is
    # killed. (The resync re-checks the same from its re-list, as the safety net.)
    for when, sid in (("before", S["pair-before"][1]), ("after", S["pair-after"][0])):
        name = dpf_name(sid)
        sweep_point(f"drift.recreate_post.{when}",
                    {"before": "drift: a READY service's DPUService was deleted by hand; the watcher's re-create "
                               "POST is never applied; repaired after the restart",
                     "after": "drift: the re-create POST applied but unanswered; the restarted worker finds "
                              "nothing to do"}[when],
                    {"verb": "POST", "path_regex": r"/dpuservices$", "when": when},
                    lambda name=name: kube_ok("DELETE", f"{DPUSERVICES}/{name}"))

    for when, sid in (("before", S["pair-after"][1]), ("after", S["adopt-before"])):
        name = dpf_name(sid)
        sweep_point(f"drift.patch.{when}",
                    "drift: the spec was edited by hand; the patch back is killed (the spec check proves the "
                    "applied spec is restored)",
                    # nth 2: the first matching request is the hand edit itself
                    {"verb": "PATCH", "path_regex": f"/dpuservices/{name}$", "when": when, "nth": 2},
                    lambda name=name: kube_ok("PATCH", f"{DPUSERVICES}/{name}",
                                              {"spec": {"helmChart": {"values": {"v": 999}}}},
                                              "application/merge-patch+json"))


def orphan_points():
    for when in ("before", "after"):
        obj = render_uncommitted(str(uuid.uuid4()), f"kp-orphan-{when}", helm_data(values={"v": 1}))
        name = obj["metadata"]["name"]

        def expect(name=name):
            return [] if sim().dpuservice(name) is None else [f"orphan {name} still there"]
        sweep_point(f"orphan.delete.{when}",
                    "orphan cleanup: the DELETE of a DPUService of ours that belongs to no service is killed",
                    {"verb": "DELETE", "path_regex": f"/dpuservices/{name}$", "when": when},
                    lambda obj=obj: kube_ok("POST", DPUSERVICES, obj), expect)


def dpu_points():
    S["prim"] = ENV.ready_service("kp-primary", target="PRIMARY")
    S["all"] = S["pair-before"][1]  # target ALL, READY
    single = {"before": "C", "after": "D"}
    double = {"before": "A", "after": "B"}

    for when, host in single.items():
        iid = S[f"inst-{when}"] = new_instance(host)
        sweep_point(f"attach.dpudevice_patch.{when}",
                    "attach: the label patch of the DPUDevice (resourceVersion precondition) is killed",
                    {"verb": "PATCH", "path_regex": f"/dpudevices/{HOST_DEVICES[host]}$", "when": when},
                    lambda iid=iid: attach(iid, S["prim"]),
                    lambda iid=iid: [] if summary(iid).get(S["prim"]) == "RUNNING" else [f"{summary(iid)}"])
    for when, host in double.items():
        iid = S[f"inst2-{when}"] = new_instance(host)
        sweep_point(f"attach.dpudevice_patch#2.{when}",
                    "attach to two DPUs in one batch: the first DPU's completing transaction committed, the "
                    "second DPU's label patch killed",
                    {"verb": "PATCH", "path_regex": f"/dpudevices/{HOST_DEVICES[host]}$", "when": when, "nth": 2},
                    lambda iid=iid: attach(iid, S["all"]),
                    lambda iid=iid: [] if summary(iid).get(S["all"]) == "RUNNING" else [f"{summary(iid)}"],
                    ordering=True)
    for when, host in single.items():
        iid = S[f"inst-{when}"]
        sweep_point(f"detach.dpudevice_patch.{when}",
                    "detach: the patch that removes the label is killed; the tombstone must still go",
                    {"verb": "PATCH", "path_regex": f"/dpudevices/{HOST_DEVICES[host]}$", "when": when},
                    lambda iid=iid: attach(iid), lambda iid=iid: [] if not summary(iid) else [f"{summary(iid)}"])
    for when, host in double.items():
        iid = S[f"inst2-{when}"]
        sweep_point(f"detach.dpudevice_patch#2.{when}",
                    "detach from two DPUs in one batch: killed at the second DPU's label patch",
                    {"verb": "PATCH", "path_regex": f"/dpudevices/{HOST_DEVICES[host]}$", "when": when, "nth": 2},
                    lambda iid=iid: attach(iid), lambda iid=iid: [] if not summary(iid) else [f"{summary(iid)}"],
                    ordering=True)

    def instance_gone(iid):
        n = pg().one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{iid}'")
        return [] if n == "0" else [f"instance {iid} still there: {summary(iid)}"]
    for nth, hosts, sid in ((1, single, S["prim"]), (2, double, S["all"])):
        for when, host in hosts.items():
            iid = new_instance(host)
            attach(iid, sid)
            wait_running(iid, sid)
            sweep_point(f"instance_delete.dpudevice_patch{'#2' if nth == 2 else ''}.{when}",
                        "instance delete: the label removal patch is killed"
                        + (" at the second DPU of the batch" if nth == 2 else "")
                        + "; the instance row must still go",
                        {"verb": "PATCH", "path_regex": f"/dpudevices/{HOST_DEVICES[host]}$", "when": when,
                         "nth": nth},
                        lambda iid=iid: tsql(f"SELECT 1 FROM extsvc.delete_instance('{iid}')"),
                        lambda iid=iid: instance_gone(iid), ordering=nth == 2)


def site_points():
    def site_running(sid):
        st = site_status(sid)
        want = {f"dpu-device-{i:04d}" for i, _, _ in FLEET}
        return [] if set(st) >= want and all(v == "RUNNING" for v in st.values()) else [f"site status {st}"]

    def trigger_create():
        S["site1"] = t_create("kp-site-1", helm_data(values={"v": 1}), target=None, scope="ALL_DPUS")
    sweep_point("site_create.dpudevice_patch.before",
                "site-wide service: after the create's completing transaction, the first DPU's label patch "
                "is killed; every DPU must reach RUNNING",
                {"verb": "PATCH", "path_regex": r"/dpudevices/", "when": "before"}, trigger_create,
                lambda: site_running(S["site1"]))

    def deleted(sid):
        return [] if state(sid)[0] == "DELETED" else [f"service {state(sid)}"]
    sweep_point("site_delete.dpudevice_patch.after",
                "site-wide delete: the first label removal applied, unanswered",
                {"verb": "PATCH", "path_regex": r"/dpudevices/", "when": "after"},
                lambda: t_delete(S["site1"]), lambda: deleted(S["site1"]))

    site2 = t_create("kp-site-2", helm_data(values={"v": 1}), target=None, scope="ALL_DPUS")
    wait_until(lambda: not site_running(site2), timeout=30, interval=0.1, what="site-wide service RUNNING")
    name = dpf_name(site2)
    sweep_point("site_delete.delete.before",
                "site-wide delete: every DPU observed clean, the DPUService DELETE is killed",
                {"verb": "DELETE", "path_regex": f"/dpuservices/{name}$", "when": "before"},
                lambda: t_delete(site2), lambda: deleted(site2))


def main():
    global ENV
    t0 = time.time()
    print("# e2e: kill-point sweep (SIGKILL before/after every write, product defaults)")
    ENV = Env(dpus=6, workers=WORKERS, extra=PRODUCT_DEFAULTS)
    ok = False
    try:
        for i, host, primary in FLEET:
            pg().sql(f"SELECT extsvc.register_dpu('{dpu_id(i)}', '{HOST[host]}', 'dpu-device-{i:04d}', "
                     f"'host-{i:04d}-dpu-device-{i:04d}', {'true' if primary else 'false'})")
        # the checker can fail: a leaked label is a violation
        path = "/api/v1/nodes/host-0004-dpu-device-0004"
        leak = lambda v: sim().kube("PATCH", path, {"metadata": {"labels": {"nico/extsvc-leaked": v}}},  # noqa: E731
                                    content_type="application/merge-patch+json", base=sim().dpu)
        assert leak("x")[0] == 200
        assert any("nico/extsvc-leaked" in v for v in invariants.violations(ENV))
        assert leak(None)[0] == 200
        for group in (create_points, update_points, delete_points, drift_points, orphan_points, dpu_points,
                      site_points):
            try:
                group()
            except Exception as e:  # noqa: BLE001 - a broken setup fails the file, not silently
                RESULTS.append({"name": group.__name__, "proves": "setup", "fired": False, "seconds": None,
                                "violations": [f"{type(e).__name__}: {e}"], "ok": False, "request": "", "note": ""})
                print(f"FAIL setup of {group.__name__}: {type(e).__name__}: {e}", flush=True)
                import traceback
                traceback.print_exc()
        final = invariants.violations(ENV)
        if final:
            print("FAIL final invariants:\n" + invariants.describe(final))
        passed = sum(r["ok"] for r in RESULTS)
        failed = len(RESULTS) - passed + (1 if final else 0)
        secs = [r["seconds"] for r in RESULTS if r["seconds"] is not None]
        total = time.time() - t0
        if secs:
            print(f"# {len(RESULTS)} points, convergence after the kill: median {statistics.median(secs):.2f} s, "
                  f"max {max(secs):.2f} s; sweep {total:.0f} s")
        if os.environ.get("WRITE_DOC") and not os.environ.get("KILL_ONLY") and secs:
            kill_sweep_doc.write(RESULTS, total, final, CONVERGE_S, WORKERS)
        print(f"{passed} passed, {failed} failed")
        ok = failed == 0
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
