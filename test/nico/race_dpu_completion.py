#!/usr/bin/python3
"""psql sessions driven step by step (test/nico/psql_sessions.py) against the
deadlock between API calls and the worker's DPU completion (issue 13;
docs/reliability.md, "Lock order of placement changes").

Session W plays the worker with the worker's own entry points: it claims the
DPU's row (extsvc.claim('dpu', ...), committed as the worker does), begins the
completing transaction and runs its first statement, the row lock that
extsvc.complete takes first (SELECT ... FROM extsvc.dpu_reconciliations ...
FOR UPDATE): the completion has started. Session A then begins and makes the
API call, which must wait for W. W then runs extsvc.complete('dpu', ...) with a
crafted outcome (the wire schema of docs/worker.md: what a faithful pass
reports, wanted items RUNNING, the others TERMINATED) in the same transaction:
the rest of the completion, which writes the DPU's attachment rows, cleans up
the instances with REMOVING rows there (locking them) and, for an ALL_DPUS
service seen on the DPU for the first time, inserts its status row (a foreign
key check, KEY SHARE on the service and DPU rows).

Before the fix the API call held the instance, service or DPU row and its
attachment rows while it waited for the DPU's work row (the attachment
trigger's _touch_dpu), and the completion then waited for those rows:
40P01 deadlock detected, usually for the API call. Scenarios, one per call:
  attach, detach, delete_instance  (seen in test/e2e/test_model_worker.py runs)
  delete_service of an ALL_DPUS service (seen)
  update_service of an ALL_DPUS service, register_dpu (a new primary),
  deregister_dpu, upsert_instance (new network DPUs)  (the same order, not seen)
After the fix both sessions commit: the API call waits at its first lock (the
DPU work rows, taken before the instance or DPU row) or never waits for what
the completion needs; the final rows are checked. Two more scenarios check
the order among the calls that the fix relies on (attach_during_update,
update_during_placement); each deadlocked with an earlier version of it.
service_pass: worker against worker, the service pass of another worker
recording an ALL_DPUS update applied while W completes (40P01 while
_complete_service locked the service FOR UPDATE).

Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_race_dpu. Exit status 0 when every check passed. With
WRITE_DOC=1 and PYTHONPATH=python (every scenario run) the figures and the run's record
(<!-- race-dpu-run {json} -->) go into docs/reliability.md.
"""
import json
import os
import sys
import time
import uuid

from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id

from psql_sessions import Session, psql as _psql, waiting_for_lock

DB = "extsvc_race_dpu"
CHART = {"repoURL": "oci://registry.example.com/charts", "chartName": "svc",
         "chartVersion": "1.0.0", "security": {"privileged": False}}
failures = 0
checks = 0
deadlocks = 0  # answers carrying 40P01, of any session


def psql(sql):
    return _psql(sql, DB)


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def check(cond, what):
    global failures, checks
    checks += 1
    print(("ok     " if cond else "FAILED ") + what)
    if not cond:
        failures += 1


def first_lines(text, n=4):
    return " | ".join(ln.strip() for ln in text.splitlines()[:n] if ln.strip())


# --- the world: services, DPUs, instances, and the worker's passes ---------

def new_service(name, target="PRIMARY", scope=None, chart_version="1.0.0"):
    """A DPF service made READY through the worker's service queue."""
    sid = str(uuid.uuid4())
    data = json.dumps(dict(CHART, chartVersion=chart_version))
    scope_arg = f", deployment_scope => {lit(scope)}" if scope else ""
    target_arg = f", dpu_target => {lit(target)}" if target else ""
    psql(f"SELECT extsvc.create_service('tenant-a', {lit(name + '-' + sid[:8])}, 'DPF_HELM_CHART', {lit(data)}"
         f"{target_arg}{scope_arg}, service_id => '{sid}')")
    r = psql(f"""
      WITH l AS (UPDATE extsvc.dpf_extension_service_reconciliations
                    SET lease_owner = 'race', lease_token = gen_random_uuid(),
                        lease_expires_at = now() + interval '1 minute'
                  WHERE service_id = '{sid}' RETURNING state_version, lease_token)
      SELECT extsvc.complete('service', '{sid}', l.state_version, l.lease_token,
               jsonb_build_object('outcome', 'transition', 'new_state', 'READY',
                                  'reason', 'dpuservice_created', 'applied_revision', 1))
        FROM l""")
    assert r == "applied", r
    return sid


def version(sid):
    return psql(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")


def entries(*sids):
    return lit(json.dumps([{"service_id": s, "version": version(s)} for s in sids]))


def register(dpu, host, primary):
    psql(f"SELECT extsvc.register_dpu('{dpu}', '{host}', 'dpu-{dpu[7:15]}', 'node-{dpu[7:15]}', {str(primary).lower()})")


def results_of(work):
    """The results a faithful pass reports for a claimed work object: wanted
    items RUNNING, the others TERMINATED (label and pods gone)."""
    out = []
    for it in work["items"]:
        state = "RUNNING" if it["wanted"] else "TERMINATED"
        out.append({"kind": it["kind"], "instance_id": it["instance_id"], "service_id": it["service_id"],
                    "version": it["version"], "state": state, "message": "observed by race_dpu_completion.py"})
    return out


def claim():
    rows = psql("SELECT json_agg(json_build_object('id', id, 'sv', state_version, 'token', lease_token, "
                "'work', work)) FROM extsvc.claim('dpu', 'race-settle', 100)")
    return json.loads(rows) if rows else []


def complete_sql(c, results):
    outcome = json.dumps({"outcome": "observed", "results": results})
    return f"SELECT extsvc.complete('dpu', '{c['id']}', {c['sv']}, '{c['token']}', {lit(outcome)});"


def settle():
    """Runs faithful DPU passes until no DPU is due: every wanted row RUNNING,
    every removal observed and cleaned up."""
    for _ in range(10):
        claimed = claim()
        if not claimed:
            return
        for c in claimed:
            psql(complete_sql(c, results_of(c["work"])))
    raise RuntimeError("DPU passes did not settle")


def lock_waits(pid):
    """What backend pid waits for: its ungranted lock and the tuple locks it
    holds while waiting (they name the relation of a row lock wait)."""
    return psql(f"SELECT string_agg(format('%s %s%s%s', l.mode, l.locktype, "
                f"coalesce(' on ' || l.relation::regclass::text, ''), "
                f"CASE WHEN l.granted THEN '' ELSE ' (not granted)' END), ', ') "
                f"FROM pg_locks l WHERE l.pid = {pid} AND (NOT l.granted OR l.locktype = 'tuple')")


def due_again(dpu):
    """The DPU is observed again (as at a resync), nothing else changed."""
    psql(f"UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = '{dpu}'")


def due_dpus():
    return psql("SELECT string_agg(dpu_machine_id::text, ',' ORDER BY dpu_machine_id) FROM extsvc.dpu_reconciliations "
                "WHERE next_due_at IS NOT NULL")


# --- one interleaving --------------------------------------------------------

def race(name, w, who, first_sql, rest_sql, api_sql):
    """Session w (described as who) runs first_sql, its first lock, in an
    open transaction; A begins and sends api_sql, which must wait; w runs
    rest_sql and must not wait for A. Returns (w's answer to rest_sql, A's
    answer); both end with COMMIT (a rollback after an error)."""
    a = Session("a", DB, "verbose")
    try:
        w.run("BEGIN;")
        w.run(first_sql)
        a.run("BEGIN;")
        a.send(api_sql)
        check(waiting_for_lock(a.pid), f"{name}: A's call waits for {who}")
        w.send(rest_sql)
        # whatever the call holds by now is nothing w needs
        w_waited = waiting_for_lock(w.pid, timeout=0.5)
        check(not w_waited, f"{name}: {who} does not wait for A"
              + (f" (it waits: {lock_waits(w.pid)})" if w_waited else ""))
        rw = w.wait()
        w.run("COMMIT;")
        ra = a.wait()
        a.run("COMMIT;")
        global deadlocks
        for whose, r in ((who, rw), ("A's call", ra)):
            deadlocks += "40P01" in r
            check("40P01" not in r, f"{name}: {whose} is not refused with 40P01 deadlock detected"
                  + (f": {first_lines(r, 6)}" if "40P01" in r else ""))
        check("ERROR" not in ra, f"{name}: A's call succeeds: {first_lines(ra)!r}")
        return rw, ra
    finally:
        a.close()


def interleave(name, dpu, api_sql):
    """W claims the DPU's row and starts completing (the first statement of
    extsvc.complete: from there on the completion holds the DPU's work row);
    A makes the API call; W finishes the completion with a faithful outcome."""
    w = Session("w", DB, "verbose")
    try:
        claimed = json.loads(w.run("SELECT json_agg(json_build_object('id', id, 'sv', state_version, "
                                   "'token', lease_token, 'work', work)) FROM extsvc.claim('dpu', 'race-worker', 8);")
                             or "[]")
        check([c["id"] for c in claimed] == [dpu], f"{name}: W claimed the DPU's row, and only it")
        c = claimed[0]
        rw, _ = race(name, w, "W's completion", f"SELECT lease_token, state_version FROM extsvc.dpu_reconciliations "
                              f"WHERE dpu_machine_id = '{dpu}' FOR UPDATE;",
                     complete_sql(c, results_of(c["work"])), api_sql)
        check(rw == "applied", f"{name}: W's completion answers applied: {first_lines(rw)!r}")
    finally:
        w.close()


class World:
    """A host with DPU x (primary), two READY services and an instance on it."""

    def __init__(self, target="PRIMARY"):
        self.host, self.x, self.y = host_machine_id(uuid.uuid4()), dpu_machine_id(uuid.uuid4()), dpu_machine_id(uuid.uuid4())
        self.inst = str(uuid.uuid4())
        register(self.x, self.host, True)
        self.s1 = new_service("s1", target)
        self.s2 = new_service("s2", target)
        psql(f"SELECT extsvc.upsert_instance('{self.inst}', 'tenant-a', '{self.host}', ARRAY['{self.x}']::text[], true)")
        settle()

    def set(self, *sids):
        return psql(f"SELECT extsvc.set_instance_extension_services('{self.inst}', {entries(*sids)})")

    def row(self, dpu, sid):
        """placement/deployment of the instance's row, '' when absent."""
        return psql(f"SELECT placement_state || '/' || deployment_state FROM extsvc.dpf_extension_service_attachments "
                    f"WHERE instance_id = '{self.inst}' AND dpu_machine_id = '{dpu}' AND service_id = '{sid}'")

    def entry(self, sid):
        """'active', 'removed' or '' for the instance's entry of sid."""
        return psql(f"SELECT CASE WHEN removed_at IS NULL THEN 'active' ELSE 'removed' END "
                    f"FROM extsvc.instance_extension_services WHERE instance_id = '{self.inst}' AND service_id = '{sid}'")

    def with_pending_detach(self):
        """s1 attached and RUNNING; s2 detached, its row REMOVING and not yet
        observed (the DPU due): the worker's next pass on x reports s2
        TERMINATED and cleans up this instance."""
        self.set(self.s1, self.s2)
        settle()
        self.set(self.s1)
        check(self.row(self.x, self.s2) == "REMOVING/UNKNOWN" and due_dpus() == self.x,
              "setup: a detach pending on x, x due")


# --- scenarios -----------------------------------------------------------------

def attach():
    """test_model_worker seed 135: an attach while the worker reports the
    instance's earlier detach done."""
    wd = World()
    wd.set(wd.s2)
    settle()
    wd.set()  # detach s2: REMOVING on x
    interleave("attach", wd.x, f"SELECT extsvc.set_instance_extension_services('{wd.inst}', {entries(wd.s1)});")
    check(wd.row(wd.x, wd.s2) == "" and wd.entry(wd.s2) == "",
          "attach: the detach observed by W is cleaned up (row and tombstone gone)")
    check(wd.row(wd.x, wd.s1) == "ACTIVE/PENDING" and wd.entry(wd.s1) == "active",
          f"attach: the attached service is ACTIVE/PENDING on x ({wd.row(wd.x, wd.s1)!r})")
    check(due_dpus() == wd.x, "attach: x is due again for the attach")


def detach():
    """test_model_worker seed 124: a detach of everything while the worker
    reports an earlier detach done."""
    wd = World()
    wd.with_pending_detach()
    interleave("detach", wd.x, f"SELECT extsvc.set_instance_extension_services('{wd.inst}', '[]');")
    check(wd.row(wd.x, wd.s2) == "" and wd.entry(wd.s2) == "", "detach: the earlier detach is cleaned up")
    check(wd.row(wd.x, wd.s1) == "REMOVING/UNKNOWN" and wd.entry(wd.s1) == "removed",
          f"detach: the detached service is REMOVING on x, a tombstone ({wd.row(wd.x, wd.s1)!r})")
    check(due_dpus() == wd.x, "detach: x is due again for the detach")


def delete_instance():
    wd = World()
    wd.with_pending_detach()
    interleave("delete_instance", wd.x, f"SELECT extsvc.delete_instance('{wd.inst}');")
    check(wd.row(wd.x, wd.s2) == "" and wd.entry(wd.s2) == "", "delete_instance: the earlier detach is cleaned up")
    deleting = psql(f"SELECT delete_requested_at IS NOT NULL FROM extsvc.instances WHERE instance_id = '{wd.inst}'")
    check(deleting == "t" and wd.row(wd.x, wd.s1) == "REMOVING/UNKNOWN",
          f"delete_instance: the instance is being deleted, its row REMOVING ({wd.row(wd.x, wd.s1)!r})")


def site_world():
    """A host with DPU x and a READY ALL_DPUS service that no pass has
    observed on x yet (x due)."""
    host, x = host_machine_id(uuid.uuid4()), dpu_machine_id(uuid.uuid4())
    register(x, host, True)
    settle()
    sa = new_service("site", target=None, scope="ALL_DPUS")
    check(due_dpus() == x, "setup: the ALL_DPUS service is READY, x due, never observed there")
    return x, sa


def site_row(sa, x):
    return psql(f"SELECT deployment_state FROM extsvc.site_service_dpu_status "
                f"WHERE service_id = '{sa}' AND dpu_machine_id = '{x}'")


def delete_service():
    """test_model_worker seed 130: deleting an ALL_DPUS service while the
    worker records its first observation on a DPU."""
    x, sa = site_world()
    interleave("delete_service", x, f"SELECT lifecycle_state FROM extsvc.delete_service('{sa}');")
    state = psql(f"SELECT lifecycle_state FROM extsvc.service_records WHERE service_id = '{sa}'")
    check(state == "DELETING" and site_row(sa, x) == "RUNNING",
          f"delete_service: the service is DELETING, W's observation kept ({state}, {site_row(sa, x)!r})")
    check(due_dpus() == x, "delete_service: x is due again for the delete")


def update_site_service():
    x, sa = site_world()
    data = json.dumps(dict(CHART, chartVersion="1.0.1"))
    interleave("update_service", x, f"SELECT lifecycle_state FROM extsvc.update_service('{sa}', {lit(data)});")
    state = psql(f"SELECT lifecycle_state FROM extsvc.service_records WHERE service_id = '{sa}'")
    check(state == "UPDATING" and site_row(sa, x) == "RUNNING",
          f"update_service: the service is UPDATING, W's observation kept ({state}, {site_row(sa, x)!r})")


def service_pass():
    """Worker against worker (extsvc.workers is 2): the service pass of
    another worker records an ALL_DPUS service's update applied (UPDATING ->
    READY, extsvc.complete('service', ...)) while W completes the first pass
    that sees the service on a DPU (its status row's foreign key check takes
    KEY SHARE on the service row). The service pass's lifecycle change locks
    the work row of every DPU, so it waits for W; it holds the service row
    FOR NO KEY UPDATE, which KEY SHARE does not wait for. With FOR UPDATE
    there (before 24db856) this ended in 40P01."""
    x, sa = site_world()
    data = json.dumps(dict(CHART, chartVersion="1.0.1"))
    psql(f"SELECT lifecycle_state FROM extsvc.update_service('{sa}', {lit(data)})")
    interleave("service pass", x,
               "WITH l AS (UPDATE extsvc.dpf_extension_service_reconciliations SET lease_owner = 'race-svc', "
               "lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' "
               f"WHERE service_id = '{sa}' RETURNING state_version, lease_token) "
               f"SELECT extsvc.complete('service', '{sa}', l.state_version, l.lease_token, "
               "jsonb_build_object('outcome', 'transition', 'new_state', 'READY', "
               "'reason', 'revision_applied', 'applied_revision', 2)) FROM l;")
    state = psql(f"SELECT lifecycle_state || '/' || applied_revision FROM extsvc.service_records "
                 f"WHERE service_id = '{sa}'")
    # W's RUNNING committed first; the service pass, which waited for it, then
    # reset it to PENDING for the newly applied revision (SPEC 2.8)
    check(state == "READY/2" and site_row(sa, x) == "PENDING",
          f"service pass: the service is READY at revision 2, W's RUNNING row reset to PENDING for it "
          f"({state}, {site_row(sa, x)!r})")
    check(due_dpus() == x, "service pass: x is due again for the new revision")


def register_primary():
    """A second DPU of the host becomes its primary while the worker reports
    the attached service RUNNING on the old primary."""
    wd = World()
    wd.set(wd.s1)
    settle()
    due_again(wd.x)
    interleave("register_dpu", wd.x,
               f"SELECT extsvc.register_dpu('{wd.y}', '{wd.host}', 'dpu-{wd.y[7:15]}', 'node-{wd.y[7:15]}', true);")
    check(wd.row(wd.x, wd.s1) == "REMOVING/UNKNOWN" and wd.row(wd.y, wd.s1) == "ACTIVE/PENDING",
          f"register_dpu: the service moves to the new primary ({wd.row(wd.x, wd.s1)!r}, {wd.row(wd.y, wd.s1)!r})")


def deregister():
    wd = World()
    wd.set(wd.s1)
    settle()
    due_again(wd.x)
    interleave("deregister_dpu", wd.x, f"SELECT extsvc.deregister_dpu('{wd.x}');")
    check(wd.row(wd.x, wd.s1) == "REMOVING/UNKNOWN",
          f"deregister_dpu: the DPU's row goes REMOVING ({wd.row(wd.x, wd.s1)!r})")


def upsert_network():
    """An ALL_ACTIVE service follows the instance's network DPUs from x to y."""
    wd = World(target="ALL_ACTIVE")
    register(wd.y, wd.host, False)
    wd.set(wd.s1)
    settle()
    due_again(wd.x)
    interleave("upsert_instance", wd.x,
               f"SELECT extsvc.upsert_instance('{wd.inst}', 'tenant-a', '{wd.host}', ARRAY['{wd.y}']::text[]);")
    check(wd.row(wd.x, wd.s1) == "REMOVING/UNKNOWN" and wd.row(wd.y, wd.s1) == "ACTIVE/PENDING",
          f"upsert_instance: the service follows the network DPUs ({wd.row(wd.x, wd.s1)!r}, {wd.row(wd.y, wd.s1)!r})")


def attach_during_update():
    """Not the worker: the order of the fix between two calls. U updates a
    service attached on x (its lifecycle trigger locks x's work row while U
    holds the service row) while A attaches another service to the same
    instance, keeping the first (FOR SHARE on both services). A locks the
    services before the DPU work rows, so it waits for U holding nothing U
    needs; with the work rows first this was a new deadlock."""
    wd = World()
    wd.set(wd.s1)
    settle()
    u = Session("u", DB, "verbose")
    try:
        data = json.dumps(dict(CHART, chartVersion="1.0.1"))
        ru, _ = race("update_service against attach", u, "U's update_service",
                     # the first lock of update_service
                     f"SELECT 1 FROM extsvc.service_records WHERE service_id = '{wd.s1}' FOR NO KEY UPDATE;",
                     f"SELECT lifecycle_state FROM extsvc.update_service('{wd.s1}', {lit(data)});",
                     f"SELECT extsvc.set_instance_extension_services('{wd.inst}', {entries(wd.s1, wd.s2)});")
        check(ru == "UPDATING", f"update_service against attach: the update went through ({first_lines(ru)!r})")
    finally:
        u.close()
    check(wd.row(wd.x, wd.s1) == "ACTIVE/RUNNING" and wd.row(wd.x, wd.s2) == "ACTIVE/PENDING",
          f"update_service against attach: both attached ({wd.row(wd.x, wd.s1)!r}, {wd.row(wd.x, wd.s2)!r})")


def update_during_placement():
    """Not the worker's own order, the order of the work rows among
    themselves: U updates an ALL_DPUS service (its lifecycle trigger locks the
    work row of every DPU) while A registers an instance on a host of two DPUs
    (locking their work rows in dpu_machine_id order) and W completes a pass
    on the larger one. The trigger once took the DPUs in the order of the
    dpus table (here the larger one first): U then held the larger, A the
    smaller, and each waited for the other once W committed."""
    host = host_machine_id(uuid.uuid4())
    small, big = sorted(dpu_machine_id(uuid.uuid4()) for _ in range(2))
    register(big, host, True)  # first in the table
    register(small, host, False)
    sa = new_service("site", target=None, scope="ALL_DPUS")
    settle()
    due_again(big)
    w, u, a = Session("w", DB, "verbose"), Session("u", DB, "verbose"), Session("a", DB, "verbose")
    name = "update_service, placement call and DPU pass"
    try:
        c = json.loads(w.run("SELECT json_agg(json_build_object('id', id, 'sv', state_version, "
                             "'token', lease_token, 'work', work)) FROM extsvc.claim('dpu', 'race-worker', 8);"))[0]
        check(c["id"] == big, f"{name}: W claimed the larger DPU's row")
        w.run("BEGIN;")
        w.run(f"SELECT 1 FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = '{big}' FOR UPDATE;")
        data = json.dumps(dict(CHART, chartVersion="1.0.1"))
        u.run("BEGIN;")
        u.send(f"SELECT lifecycle_state FROM extsvc.update_service('{sa}', {lit(data)});")
        check(waiting_for_lock(u.pid), f"{name}: U's update waits for W")
        a.run("BEGIN;")
        a.send(f"SELECT extsvc.upsert_instance('{uuid.uuid4()}', 'tenant-a', '{host}', ARRAY['{small}']::text[]);")
        check(waiting_for_lock(a.pid), f"{name}: A's call waits")
        w.send(complete_sql(c, results_of(c["work"])))
        rw = w.wait()
        w.run("COMMIT;")
        ru = u.wait()
        u.run("COMMIT;")
        ra = a.wait()
        a.run("COMMIT;")
        global deadlocks
        for who, r in (("W's completion", rw), ("U's update", ru), ("A's call", ra)):
            deadlocks += "40P01" in r
            check("ERROR" not in r, f"{name}: {who} succeeds: {first_lines(r, 6)!r}")
        check(ru == "UPDATING", f"{name}: the service is UPDATING")
    finally:
        w.close(), u.close(), a.close()


def two_passes():
    """Worker against worker, two DPUs of one host (test/nico/concurrency.py
    seed 1, pair 598: two passes on different DPUs, 40P01). Instance I, being
    deleted, has REMOVING rows of s1 on x and y; J, the host's new instance,
    has s1 ACTIVE on both, so I's rows are released to another reason and any
    cleanup of I deletes both. W2's pass on y writes I's row on y, then
    pauses at J's row on y (a row lock of session C: a pass is one statement,
    this is how a test stops it between two writes). W1's pass on x then
    cleans up I, which deletes I's row on y too. Before the fix W1 held I
    (_cleanup_instance's FOR UPDATE) and waited for W2's row on y, and W2,
    once C let go, waited for I: 40P01. Now a pass locks the instances it may
    clean up before it writes a row, so W1 waits for W2 holding nothing W2
    needs."""
    wd = World(target="ALL_ACTIVE")
    register(wd.y, wd.host, False)
    psql(f"SELECT extsvc.upsert_instance('{wd.inst}', 'tenant-a', '{wd.host}', ARRAY['{wd.x}', '{wd.y}']::text[])")
    wd.set(wd.s1)
    settle()
    check(wd.row(wd.x, wd.s1) == "ACTIVE/RUNNING" and wd.row(wd.y, wd.s1) == "ACTIVE/RUNNING",
          "setup: s1 RUNNING on x and y")
    psql(f"SELECT extsvc.delete_instance('{wd.inst}')")
    j = str(uuid.uuid4())
    psql(f"SELECT extsvc.upsert_instance('{j}', 'tenant-a', '{wd.host}', ARRAY['{wd.x}', '{wd.y}']::text[])")
    psql(f"SELECT extsvc.set_instance_extension_services('{j}', {entries(wd.s1)})")
    released = psql(f"SELECT count(*) FROM extsvc.dpf_extension_service_attachments a WHERE a.instance_id = '{wd.inst}' "
                    "AND a.placement_state = 'REMOVING' AND EXISTS (SELECT FROM extsvc.dpu_desired_labels w "
                    "WHERE w.dpu_machine_id = a.dpu_machine_id AND w.service_id = a.service_id)")
    check(released == "2", f"setup: I's rows on x and y are REMOVING and released to J ({released})")

    def lease(s, dpu):
        return json.loads(s.run(
            "WITH l AS (UPDATE extsvc.dpu_reconciliations SET lease_owner = 'race', lease_token = gen_random_uuid(), "
            f"lease_expires_at = now() + interval '1 minute' WHERE dpu_machine_id = '{dpu}' "
            "RETURNING dpu_machine_id, state_version, lease_token) "
            "SELECT json_build_object('id', dpu_machine_id, 'sv', state_version, 'token', lease_token) FROM l;"))

    def item(inst, dpu, state):
        return {"kind": "attachment", "instance_id": inst, "service_id": wd.s1, "version": version(wd.s1),
                "state": state, "message": "observed by race_dpu_completion.py"}
    w1, w2, c = Session("w1", DB, "verbose"), Session("w2", DB, "verbose"), Session("c", DB, "verbose")
    name = "two passes"
    try:
        cx, cy = lease(w1, wd.x), lease(w2, wd.y)
        c.run("BEGIN;")
        c.run(f"SELECT 1 FROM extsvc.dpf_extension_service_attachments WHERE instance_id = '{j}' "
              f"AND dpu_machine_id = '{wd.y}' FOR UPDATE;")
        w2.run("BEGIN;")
        w2.send(complete_sql(cy, [item(wd.inst, wd.y, "TERMINATED"), item(j, wd.y, "RUNNING")]))
        check(waiting_for_lock(w2.pid), f"{name}: W2's pass on y waits for C at J's row")
        w1.run("BEGIN;")
        w1.send(complete_sql(cx, [item(wd.inst, wd.x, "TERMINATED"), item(j, wd.x, "RUNNING")]))
        check(waiting_for_lock(w1.pid), f"{name}: W1's pass on x waits for W2")
        c.run("COMMIT;")
        r2 = w2.wait()
        w2.run("COMMIT;")
        r1 = w1.wait()
        w1.run("COMMIT;")
        global deadlocks
        for who, r in (("W1's pass", r1), ("W2's pass", r2)):
            deadlocks += "40P01" in r
            check(r == "applied", f"{name}: {who} answers applied: {first_lines(r, 6)!r}")
    finally:
        w1.close(), w2.close(), c.close()
    gone = psql(f"SELECT count(*) FROM extsvc.dpf_extension_service_attachments WHERE instance_id = '{wd.inst}'")
    check(gone == "0", f"{name}: I's released rows are cleaned up ({gone} left)")
    check(wd.row(wd.x, wd.s1) == "" and psql(
        f"SELECT string_agg(placement_state || '/' || deployment_state, ',' ORDER BY dpu_machine_id) "
        f"FROM extsvc.dpf_extension_service_attachments WHERE instance_id = '{j}'") == "ACTIVE/RUNNING,ACTIVE/RUNNING",
        f"{name}: J's rows are RUNNING on x and y")


SCENARIOS = [attach, detach, delete_instance, delete_service, update_site_service, register_primary, deregister,
             upsert_network, attach_during_update, update_during_placement, service_pass,
             two_passes]


def write_doc(ran, seconds):
    """The figures and the run's record, in the race-dpu-results block."""
    from extsvc_testkit.invariants import run_record, run_stamp, write_doc_block
    rec = {**run_stamp(), "scenarios": len(ran), "names": ran, "checks": checks, "failed_checks": failures,
           "deadlocks": deadlocks, "seconds": round(seconds, 1)}
    pg = _psql("SHOW server_version", "postgres")
    write_doc_block("race-dpu-results", "\n".join([
        "| scenarios | checks | failed checks | answers refused with 40P01 | time |", "|---:|---:|---:|---:|---:|",
        f"| {len(ran)} | {checks} | {failures} | {deadlocks} | {seconds:.0f} s |", "",
        f"Scenarios: {', '.join(ran)}. Measured {rec['date']} on commit `{rec['commit']}` (PostgreSQL {pg}) by "
        "`WRITE_DOC=1 PYTHONPATH=python PGBIN=… /usr/bin/python3 test/nico/race_dpu_completion.py` in a cluster of "
        "scripts/lib/pgcluster.sh.",
        run_record("race-dpu", rec)]))


def main():
    only = set(sys.argv[1:])
    ran = []
    t0 = time.time()
    try:
        for scenario in SCENARIOS:
            if only and scenario.__name__ not in only:
                continue
            print(f"# {scenario.__name__}")
            # a database of its own: no row of another scenario is due or observed
            _psql(f"DROP DATABASE IF EXISTS {DB}", "postgres")
            _psql(f"CREATE DATABASE {DB}", "postgres")
            _psql(f"ALTER DATABASE {DB} SET extsvc.enforce_chart_allowlist = off", "postgres")
            psql("CREATE EXTENSION nico_extsvc")
            scenario()
            ran.append(scenario.__name__)
    finally:
        _psql(f"DROP DATABASE IF EXISTS {DB}", "postgres")
    if os.environ.get("WRITE_DOC") and not only:
        write_doc(ran, time.time() - t0)
    print(f"race_dpu_completion: {'FAILED' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
