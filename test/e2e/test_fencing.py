#!/usr/bin/python3
"""End-to-end: fencing, the cluster side of the lease (issue 10).

Short leases (extsvc.lease_time = 5 s) and short call timeouts
(http_timeout 2 s + lease_margin 2 s = a 4 s call budget) make
the scenarios run in seconds. dpfsim's latency fault delays a request
before it is applied, so a request the worker gave up on (client timeout)
is still applied later, the way a slow API server does.
"""
import json
import os
import signal
import sys
import time

from extsvc_testkit.db import Session
from extsvc_testkit.harness import (host_id, PG_USER, Env, helm_data, lit, run_tests, wait_until, device, node,
                                    dpu_id as harness_dpu_id)

ENV = None
NS = "dpf-operator-system"
HOST = host_id("f1")


def e():
    return ENV


def dpu_id(i):
    return harness_dpu_id(i, "e")


def fault_hits(fid):
    for f in e().sim.ctl("GET", "/faults")["faults"]:
        if f["id"] == fid:
            return f["hits"]
    return 0


def owned_dpuservices(sid):
    return [d["metadata"]["name"] for d in e().sim.dpuservices()
            if d["metadata"].get("labels", {}).get("nico/extension-service-id") == sid]


def worker_counter(col):
    """A worker_status() counter summed over the slots; -1 when the column
    does not exist (a build before the fix, for the fails-before check)."""
    rows = e().pg.sql(f"SELECT coalesce(sum({col}), 0) FROM extsvc.worker_status()", check=False)
    return int(rows[0][0]) if isinstance(rows, list) else -1


def resync_and_wait_dpus():
    before = worker_counter("dpus_rederived")
    e().pg.sql("SELECT extsvc.request_resync()")
    if before < 0:
        time.sleep(3)
        return
    wait_until(lambda: worker_counter("dpus_rederived") > before, timeout=20, what="resync ran")


# --- (a) a slow POST applied after the service was DELETED -------------------

def test_slow_post_after_delete_leaves_no_orphan_once_a_resync_ran():
    sim = e().sim
    # the watch caches are what delete the orphan on its ADDED event: they must be current
    # first (this is the file's first test, started as soon as the server is up; a resync
    # requested before they listed meets the orphan guard of an empty database instead)
    e().wait_watching()
    # applied 3 s after it was sent; the worker gives up after 2 s
    fid = sim.fault(verb="POST", path_regex="/dpuservices", action="latency", latency_ms=3000,
                    count=1)["id"]
    # counted before the create: the late POST can land, and the watcher delete it, before
    # DELETED is seen (CI of 3b64d06 read the counter after that deletion)
    before = worker_counter("orphans_deleted")
    sid = e().create("slow-post")
    wait_until(lambda: fault_hits(fid) == 1, timeout=10, what="the POST is in flight")
    assert e().delete(sid) == "DELETING"
    e().wait_state(sid, "DELETED", timeout=20)
    # the late POST lands after DELETED: the orphan of the issue. With the watch caches its
    # ADDED event already makes the watcher delete it; polling waits for the resync.
    wait_until(lambda: owned_dpuservices(sid) or worker_counter("orphans_deleted") > before,
               timeout=10, what="the late POST applied")
    if owned_dpuservices(sid) and worker_counter("orphans_deleted") == before:
        e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: not owned_dpuservices(sid), timeout=20, what="orphan deleted")
    assert worker_counter("orphans_deleted") > before
    assert "deleted orphaned DPUService" in e().pg.tail_log(400)
    # the DELETE named the listed object by uid
    dels = [r for r in sim.requests(500)["requests"]
            if r.get("method") == "DELETE" and "/dpuservices/" in r.get("path", "")]
    assert dels and "preconditions" in (dels[-1].get("body") or ""), dels[-1:]
    sim.clear_faults()


def test_live_services_are_never_cleaned_up():
    sid = e().create("stays")
    name = e().wait_state(sid, "READY")[3]
    resync_and_wait_dpus()
    assert sim_has(name)
    assert e().state(sid)[0] == "READY"


def sim_has(name):
    return e().sim.dpuservice(name) is not None


# --- (b) a slow label PATCH applied after a detach converged -----------------

def test_slow_label_patch_after_detach_leaks_no_label_once_a_resync_ran():
    sim = e().sim
    sid = e().create("slow-patch", helm_data(values={"v": 1}))
    e().wait_state(sid, "READY")
    key = e().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")
    iid = e().new_instance(HOST)
    fid = sim.fault(verb="PATCH", path_regex="/dpudevices/", action="latency", latency_ms=3000,
                    count=1)["id"]
    e().attach(iid, sid)
    wait_until(lambda: fault_hits(fid) == 1, timeout=10, what="the label PATCH is in flight")
    e().attach(iid)  # detach

    def detached():
        rows = e().pg.sql(f"SELECT 1 FROM extsvc.instance_extension_service_status('{iid}')")
        return not rows
    wait_until(detached, timeout=30, what="detach converged")
    time.sleep(3.5)  # the slow PATCH has been applied (or refused) by now
    leaked = key in e().sim.device_labels(0)
    print(f"    label leaked by the late PATCH before the resync: {leaked}")
    resync_and_wait_dpus()
    wait_until(lambda: key not in e().sim.device_labels(0) and key not in e().sim.node_labels(0)
               and not e().sim.pods_on(0, sid), timeout=20, what="no leaked label after the resync")


# --- the lease is renewed during a long batch; no call after it ran out -------

def test_long_batch_renews_its_leases_and_never_calls_with_an_expired_one():
    sim = e().sim
    # 8 creations of 1.2 s each in one batch: 9.6 s, far beyond the 5 s lease
    sim.fault(verb="POST", path_regex="/dpuservices", action="latency", latency_ms=1200)
    renewals = worker_counter("lease_renewals")
    sids = [r[0] for r in e().pg.sql(
        "SELECT service_id FROM generate_series(1, 8) g, LATERAL extsvc.create_service("
        "tenant_organization_id => 'tenant-a', service_name => 'batch-' || g, "
        "service_type => 'DPF_HELM_CHART', dpu_target => 'PRIMARY', data => "
        + lit(json.dumps(helm_data())) + ")")]
    expired_held = set()

    def all_ready():
        for r in e().pg.sql(
                "SELECT service_id FROM extsvc.dpf_extension_service_reconciliations "
                "WHERE lease_token IS NOT NULL AND lease_expires_at < now()"):
            expired_held.add(r[0])
        return all(e().state(s)[0] == "READY" for s in sids)
    wait_until(all_ready, timeout=60, interval=0.1, what="the batch is READY")
    sim.clear_faults()
    # a held lease past its expiry is a row the worker could still call the
    # API for while another worker may own it
    assert not expired_held, expired_held
    assert worker_counter("lease_renewals") > renewals


def test_a_lease_too_short_for_the_next_call_stops_before_it():
    """The fence itself: a DPU pass whose remaining lease cannot hold the next
    call's budget sends nothing more and is recorded as a retry."""
    sim = e().sim
    # the polling mode, where a DPU pass makes several calls (with the watch caches its only call
    # is the label patch)
    e().pg.sql("ALTER SYSTEM SET extsvc.watch = off")
    e().pg.reload()
    time.sleep(1)
    # 1.5 s on the first GET of a DPU pass (within the 2 s http_timeout):
    # after it, 3.5 s of the 5 s lease are left, less than the 4 s budget
    # (2 s http_timeout + 2 s margin) of the next call
    fid = sim.fault(verb="GET", path_regex="/dpudevices/dpu-device-0001", action="latency",
                    latency_ms=1500, count=1)["id"]
    fenced = worker_counter("fenced")
    e().pg.sql(f"UPDATE extsvc.dpu_reconciliations SET next_due_at = now() "
               f"WHERE dpu_machine_id = '{dpu_id(1)}'")
    e().pg.sql("SELECT extsvc.reconcile_now()")  # wakes the worker
    wait_until(lambda: fault_hits(fid) == 1, timeout=15, what="the slow GET")
    wait_until(lambda: worker_counter("fenced") > fenced, timeout=15, what="the pass was fenced")
    # logged (the retry that follows soon succeeds and clears last_error)
    assert f"DPU {device(1)}: lease fence" in e().pg.tail_log(400)
    # nothing was sent to the DPU cluster for that DPU after the slow GET
    reqs = sim.requests(500)["requests"]
    slow = [r for r in reqs if (r.get("fault") or "").startswith("latency")]
    assert slow, reqs[-5:]
    seq_after_get = slow[-1]["seq"]
    # the retry (a new claim, a new lease) starts again with a GET of the device
    retry = [r["seq"] for r in reqs if r["seq"] > seq_after_get
             and r.get("path", "").endswith("/dpudevices/" + device(1))]
    until = retry[0] if retry else float("inf")
    later = [r for r in reqs if seq_after_get < r["seq"] < until
             and node(1) in (r.get("path", "") + r.get("query", ""))]
    assert not later, later
    sim.clear_faults()
    e().pg.sql("ALTER SYSTEM RESET extsvc.watch")
    e().pg.reload()


# --- worker transactions do not wait forever on a lock ------------------------

def test_an_idle_in_transaction_lock_does_not_stall_the_worker():
    sim = e().sim
    fid = sim.fault(verb="POST", path_regex="/dpuservices", action="latency", latency_ms=1500,
                    count=1)["id"]
    first = e().create("locked")
    wait_until(lambda: fault_hits(fid) == 1, timeout=10, what="its POST in flight")
    # an operator's session locks the row being worked on and stays idle:
    # the worker's completion of that row has to wait for the lock
    s = Session("operator", e().pg.dir, e().pg.port, PG_USER)
    try:
        s.run("BEGIN;")
        s.send("SELECT 1 FROM extsvc.dpf_extension_service_reconciliations "
               f"WHERE service_id = '{first}' FOR UPDATE;")
        time.sleep(0.5)
        # intent committed meanwhile still reaches the cluster while the lock is held
        other = e().create("not-stalled")
        e().wait_state(other, "READY", timeout=15)
    finally:
        s.wait(timeout=10)
        s.run("ROLLBACK;")
        s.close()
    e().wait_state(first, "READY", timeout=20)
    assert "lock timeout" in e().pg.tail_log(400)


# --- a worker statement that runs too long is cancelled -----------------------

def test_a_slow_worker_statement_is_cancelled_and_the_queue_goes_on():
    # a statement of the worker's that never ends (here: a trigger an operator
    # added, sleeping in the completion of one row) is cancelled after
    # extsvc.worker_statement_timeout instead of stalling every other row
    pg = e().pg
    pg.sql("CREATE FUNCTION public.slow_ready() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           "IF NEW.service_name = 'slow-statement' AND NEW.lifecycle_state = 'READY' THEN "
           "PERFORM pg_sleep(30); END IF; RETURN NEW; END $$")
    pg.sql("CREATE TRIGGER slow_ready BEFORE UPDATE ON extsvc.service_records "
           "FOR EACH ROW EXECUTE FUNCTION public.slow_ready()")
    try:
        slow = e().create("slow-statement")
        wait_until(lambda: "canceling statement due to statement timeout" in pg.tail_log(400),
                   timeout=20, what="the worker's statement cancelled")
        assert e().state(slow)[0] == "CREATING", e().state(slow)
        other = e().create("not-stalled-by-a-statement")
        e().wait_state(other, "READY", timeout=20)
    finally:
        pg.sql("DROP TRIGGER slow_ready ON extsvc.service_records")
        pg.sql("DROP FUNCTION public.slow_ready()")
    e().wait_state(slow, "READY", timeout=30)


# --- one row that can no longer be rendered does not stall the queue ---------

def test_an_unrenderable_row_is_failed_and_the_queue_goes_on():
    bad = e().create("unrenderable")
    e().wait_state(bad, "READY")
    # stored data that no longer renders (changed by hand, an old format)
    e().pg.sql(f"UPDATE extsvc.helm_revisions SET data = '{{\"bogus\": 1}}' WHERE service_id = '{bad}'")
    e().pg.sql(f"SELECT extsvc.reconcile_now('{bad}')")
    good = e().create("after-unrenderable")
    e().wait_state(good, "READY", timeout=20)
    st = e().wait_state(bad, "FAILED", timeout=20)
    assert "could not be rendered" in (st[4] or ""), st


def main_short():
    global ENV
    ENV = Env(dpus=2, workers=1, extra={
        "extsvc.lease_time": "'5s'", "extsvc.http_timeout": "'2s'",
        "extsvc.connect_timeout": "'500ms'", "extsvc.lease_margin": "'2s'",
        "extsvc.worker_lock_timeout": "'1s'", "extsvc.worker_statement_timeout": "'3s'"})
    ok = False
    try:
        for i in range(2):
            ENV.register_dpu(i, HOST, i == 0, tag="e")
        ok = run_tests([
            test_slow_post_after_delete_leaves_no_orphan_once_a_resync_ran,
            test_live_services_are_never_cleaned_up,
            test_slow_label_patch_after_detach_leaks_no_label_once_a_resync_ran,
            test_long_batch_renews_its_leases_and_never_calls_with_an_expired_one,
            test_a_lease_too_short_for_the_next_call_stops_before_it,
            test_an_idle_in_transaction_lock_does_not_stall_the_worker,
            test_a_slow_worker_statement_is_cancelled_and_the_queue_goes_on,
            test_an_unrenderable_row_is_failed_and_the_queue_goes_on,
        ], "# e2e: fencing with short leases")
    finally:
        ENV.close(keep=not ok)
    return ok


# --- recovery after a worker is killed (default lease of 60 s) ----------------

def kill_recovery(sig):
    sim = e().sim
    fid = sim.fault(verb="POST", path_regex="/dpuservices", action="hang", latency_ms=30000,
                    count=1)["id"]
    tag = "kill" + str(int(sig))
    sids = [r[0] for r in e().pg.sql(
        "SELECT service_id FROM generate_series(1, 3) g, LATERAL extsvc.create_service("
        f"tenant_organization_id => 'tenant-a', service_name => '{tag}-' || g, "
        "service_type => 'DPF_HELM_CHART', dpu_target => 'PRIMARY', data => "
        + lit(json.dumps(helm_data())) + ")")]
    wait_until(lambda: fault_hits(fid) == 1, timeout=10, what="the worker hangs in a POST")
    held = int(e().pg.one("SELECT count(*) FROM extsvc.dpf_extension_service_reconciliations "
                          "WHERE lease_token IS NOT NULL"))
    assert held == 3, held
    pid = e().pg.worker_pids()[0]
    t0 = time.time()
    os.kill(pid, sig)
    sim.clear_faults()
    def all_ready():
        try:
            return all(e().state(s)[0] == "READY" for s in sids)
        except RuntimeError:  # SIGKILL: the server is in crash recovery
            return False
    wait_until(all_ready, timeout=90, interval=0.1, what="every row reclaimed and READY")
    took = time.time() - t0
    print(f"    {signal.Signals(sig).name}: all rows READY {took:.1f} s after the kill")
    assert took < 10, took


def test_killed_worker_rows_are_reclaimed_within_10s_sigterm():
    kill_recovery(signal.SIGTERM)


def test_killed_worker_rows_are_reclaimed_within_10s_sigkill():
    kill_recovery(signal.SIGKILL)
    wait_until(lambda: e().pg.worker_pids(), timeout=20, what="worker back")


def main_default():
    global ENV
    # default lease (60 s) and call timeouts of the harness
    ENV = Env(dpus=2, workers=1, extra={"extsvc.lease_time": "'60s'"})
    ok = False
    try:
        ok = run_tests([
            test_killed_worker_rows_are_reclaimed_within_10s_sigterm,
            test_killed_worker_rows_are_reclaimed_within_10s_sigkill,
        ], "# e2e: worker-kill recovery with the default lease")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    only = os.environ.get("FENCING_PART")
    ok = True
    if only in (None, "short"):
        ok = main_short() and ok
    if only in (None, "default"):
        ok = main_default() and ok
    sys.exit(0 if ok else 1)
