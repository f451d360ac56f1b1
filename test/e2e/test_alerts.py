#!/usr/bin/env python3
"""End-to-end: a firing test for each alert rule of docs/metrics.md that test_ops.py does not make
fire (issue 28, part 2).

Each test brings about the real condition against dpfsim (a worker gone, restarted, stopped; 5xx,
429 and 410 from the API; a failed resync; a tenant's spec refused; a lost row lease; orphans held
and deleted; foreign objects; a refused label patch; the Lease released and taken again),
scrapes the real server's extsvc.metrics_prometheus() and feeds the series to `promtool test rules`
with the rules file cut from docs/metrics.md (extsvc_testkit.alerts): the scrapes one minute apart,
the last one held for the rule's `for`. While held, an age that grew between the last two scrapes
keeps growing with the clock and, for the counter rules (rates=True), a counter keeps growing at
the rate measured between the last two scrapes in real time: the failure goes on as it was seen.
A healthy scrape of the same server fires none of these rules.

Not brought about: the condition of ExtsvcSiteHasTwoWriters, two servers of one site that both
believe they hold its Lease, which the lease protocol exists to prevent. The test scrapes two real
servers of one site as one job and checks that it (and ExtsvcSiteHasNoWriter) stays silent; it
then fires only on a job that mixes two sites, each server holding its own site's Lease: that
shows the expression sums the holders across a job's servers, not that the state can happen.
"""
import json
import os
import re
import signal
import sys
import time
import uuid

from extsvc_testkit import alerts
from extsvc_testkit.harness import (NAMESPACE, Env, Postgres, device, dpu_id, helm_data, host_id, run_tests,
                                    wait_until)

ENV = None
HOST = host_id("a1")
HOST2 = host_id("a2")
DPUSVC = f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NAMESPACE}/dpuservices"
HERE = os.path.dirname(os.path.abspath(__file__))

# the rules this file makes fire (test_ops.py makes the others fire)
RULES = ["ExtsvcDpusErrorOrUnknown", "ExtsvcForeignObjects", "ExtsvcKubeServerErrors", "ExtsvcKubeThrottled",
         "ExtsvcLeaseFenced", "ExtsvcLeaseFlapping", "ExtsvcNoResyncYet", "ExtsvcOrphansDeleted",
         "ExtsvcOrphansPending", "ExtsvcResyncStale", "ExtsvcServicesFailed", "ExtsvcWatchRelisting",
         "ExtsvcWorkerDown", "ExtsvcWorkerRestarting", "ExtsvcWorkerStuck"]


def e():
    return ENV


def dpu(i):
    return dpu_id(i, "a")


def scrape(pg=None, instance="pg"):
    return alerts.scrape(pg or e().pg, instance=instance)


def fires(alert, scrapes, hold=0, want=True, **kw):
    return alerts.assert_fires(alert, scrapes, e().workdir, hold_minutes=hold, fires=want, **kw)


def scrapes_apart(n, seconds):
    out = [scrape()]
    for _ in range(n - 1):
        time.sleep(seconds)
        out.append(scrape())
    return out


def set_conf(**kv):
    e().pg.set_conf(**kv)


def worker_pid():
    return wait_until(lambda: e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0 AND pid IS NOT NULL"),
                      30, interval=0.2, what="worker 0 running")


def lease_held():
    return e().pg.metric("extsvc_lease_held") == 1


# --- the file covers what test_ops.py does not --------------------------------------------------

def test_every_rule_has_a_test_that_makes_it_fire():
    """Every rule of docs/metrics.md is made to fire by test_ops.py or by this file, except the one
    the module docstring names."""
    said = set()
    for name in ("test_ops.py", "test_alerts.py"):
        with open(os.path.join(HERE, name)) as f:
            text = f.read()
        # assert_fires("X", ...) / fires("X", ...) without want=False / fires=False on that call
        for m in re.finditer(r'(?:assert_fires|fires)\("(\w+)",([^\n]*)', text):
            if "fires=False" not in m.group(2) and "want=False" not in m.group(2):
                said.add(m.group(1))
    missing = [r for r in alerts.rule_names() if r not in said and r != "ExtsvcSiteHasTwoWriters"]
    assert not missing, f"rules with no test that makes them fire: {missing}"
    assert len(alerts.rule_names()) >= 30


# --- a healthy site ------------------------------------------------------------------------------

def test_a_healthy_site_fires_none_of_them():
    wait_until(lambda: e().pg.one("SELECT state FROM extsvc.worker_status() WHERE slot = 0") == "working", 30,
               what="working")
    e().wait_watching()
    sid = e().create("alerts-ok", helm_data())
    e().wait_state(sid, "READY")
    e().pg.resync("ok")
    wait_until(lambda: e().pg.metric("extsvc_foreign_objects") is not None, 10, what="the resync's census")
    sc = scrapes_apart(3, 1.0)
    # the site stays as scraped (its ages are reset by its loops, so they are not extrapolated);
    # the counters go on at the rate seen
    for rule in RULES + ["ExtsvcSiteHasTwoWriters"]:
        fires(rule, sc, hold=65, want=False, growing=False, rates=True)


# --- workers -------------------------------------------------------------------------------------

def test_worker_down_without_the_library_preloaded():
    """A server whose shared_preload_libraries lacks nico_extsvc: worker_up is one unlabelled 0
    for as long as it runs."""
    pg = Postgres(e().workdir, {"shared_preload_libraries": "''"}, name="nopreload")
    try:
        s1 = scrape(pg, instance="nopreload")
        time.sleep(1)
        s2 = scrape(pg, instance="nopreload")
        assert s2['extsvc_worker_up{instance="nopreload",job="extsvc"}'] == 0, s2
        fires("ExtsvcWorkerDown", [s1, s2], hold=3)
        # and not before its `for` (2m) has passed
        fires("ExtsvcWorkerDown", [s1, s2], hold=0, want=False)
    finally:
        pg.stop()


def test_a_worker_that_keeps_restarting():
    """Four times pg_terminate_backend of the worker: each time the slot is empty for 5 s, then
    the postmaster starts it again and extsvc_worker_restarts_total grows. A slot empty for 5 s
    does not page (ExtsvcWorkerDown's `for`); four restarts within 15 minutes do."""
    sc = [scrape()]
    for _ in range(4):
        pid = worker_pid()
        e().pg.sql(f"SELECT pg_terminate_backend({pid})")
        wait_until(lambda: e().pg.metric("extsvc_worker_up", worker="0") == 0, 10, interval=0.1, what="slot empty")
        down = scrape()
        wait_until(lambda: (p := e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0")) and p != str(pid),
                   30, interval=0.2, what="worker restarted")
        sc.append(scrape())
    restarts = [s['extsvc_worker_restarts_total{instance="pg",job="extsvc",worker="0"}'] for s in sc]
    assert restarts == [restarts[0] + k for k in range(5)], restarts
    fires("ExtsvcWorkerRestarting", sc)
    fires("ExtsvcWorkerRestarting", sc[:3], want=False)  # two restarts are not a crash loop
    fires("ExtsvcWorkerDown", sc[:-1] + [down], want=False)


def test_a_worker_that_no_longer_loops():
    """SIGSTOP: the process is there (worker_up 1) but its last iteration ages past the idle
    wake-up (10 s) and on."""
    pid = int(worker_pid())
    os.kill(pid, signal.SIGSTOP)
    try:
        s1 = scrape()
        time.sleep(12)
        s2 = scrape()
    finally:
        os.kill(pid, signal.SIGCONT)
    key = 'extsvc_worker_last_iteration_age_seconds{instance="pg",job="extsvc",worker="0"}'
    assert s2[key] >= 11 and s2[key] - s1[key] >= 11, (s1[key], s2[key])
    assert s2['extsvc_worker_up{instance="pg",job="extsvc",worker="0"}'] == 1
    fires("ExtsvcWorkerStuck", [s1, s2], hold=11)
    fires("ExtsvcWorkerStuck", [s1, s2], hold=4, want=False)  # not at 4 min
    # it loops again once continued
    wait_until(lambda: (e().pg.metric("extsvc_worker_last_iteration_age_seconds", worker="0") or 99) < 11, 20,
               interval=0.2, what="the worker loops again")


# --- what the API answers ------------------------------------------------------------------------

def test_a_spec_the_api_refuses_fails_the_service():
    """422 on the create: FAILED for a tenant reason (permanent_error)."""
    e().sim.fault(verb="POST", path_regex="dpuservices", status=422, count=1,
                  message="spec.helmChart.values: Invalid value")
    try:
        sid = e().create("alerts-422", helm_data(version="4.2.2"))
        e().wait_state(sid, "FAILED")
    finally:
        e().sim.clear_faults()
    assert e().pg.metric("extsvc_services_failed", reason="tenant") == 1
    sc = scrapes_apart(2, 1.0)
    fires("ExtsvcServicesFailed", sc, hold=6)
    fires("ExtsvcServicesFailedPlatform", sc, hold=6, want=False)  # the tenant's, not the platform's
    e().delete(sid)
    e().wait_state(sid, "DELETED")


def test_5xx_and_429_from_the_management_cluster():
    """A create answered 503, then 429, retried (retry_cap 2 s): the rate of each code as measured
    between two scrapes goes on for the rules' `for`."""
    e().sim.fault(verb="POST", path_regex="dpuservices", status=503)
    try:
        sid = e().create("alerts-5xx", helm_data(version="5.0.3"))
        wait_until(lambda: (e().pg.metric("extsvc_kube_requests_total", cluster="management", code="503") or 0) >= 2, 20,
                   interval=0.2, what="503s")
        sc = scrapes_apart(2, 6.0)
        fires("ExtsvcKubeServerErrors", sc, hold=16, rates=True)
        fires("ExtsvcKubeThrottled", sc, hold=16, rates=True, want=False)
        e().sim.clear_faults()
        e().sim.fault(verb="POST", path_regex="dpuservices", status=429, retry_after=1)
        wait_until(lambda: (e().pg.metric("extsvc_kube_requests_total", cluster="management", code="429") or 0) >= 2, 20,
                   interval=0.2, what="429s")
        sc = scrapes_apart(2, 6.0)
        n = [sum(v for k, v in s.items() if k.startswith("extsvc_kube_requests_total{") and 'code="429"' in k)
             for s in sc]
        rate = (n[1] - n[0]) / (sc[1].t - sc[0].t)
        assert rate > 0.1, (n, rate)  # the rule's threshold, in real time
        fires("ExtsvcKubeThrottled", sc, hold=16, rates=True)
        fires("ExtsvcKubeServerErrors", sc, hold=16, rates=True, want=False)
    finally:
        e().sim.clear_faults()
    e().wait_state(sid, "READY", timeout=30)
    e().delete(sid)


def test_watches_answered_410_over_and_over():
    """Every WATCH of dpuservices answered 410 Gone: the informer lists again and again."""
    def expired():
        return e().pg.metric("extsvc_watch_expired_total", cluster="management", resource="dpuservices") or 0
    before = expired()
    s1 = scrape()
    e().sim.fault(cluster="management", verb="WATCH", path_regex="dpuservices", status=410, count=10)
    try:
        e().sim.cut_watches("management")
        wait_until(lambda: expired() >= before + 8, 30, interval=0.2, what="8 more 410s")
    finally:
        e().sim.clear_faults()
    s2 = scrape()
    fires("ExtsvcWatchRelisting", [s1, s2])
    e().wait_watching()


def test_a_row_lease_lost_during_a_pass_fences_it():
    """As test_fencing.py: in polling mode a slow first GET of a DPU pass leaves less of the row
    lease than the next call's budget; the pass stops (extsvc_lease_fenced_total)."""
    set_conf(watch="off")
    try:
        time.sleep(1)
        e().sim.fault(verb="GET", path_regex=f"/dpudevices/{device(1)}", action="latency", latency_ms=1500,
                      count=1)
        before = e().pg.metric("extsvc_lease_fenced_total") or 0
        s1 = scrape()
        e().pg.sql(f"UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = '{dpu(1)}'")
        e().pg.sql("SELECT extsvc.reconcile_now()")
        wait_until(lambda: (e().pg.metric("extsvc_lease_fenced_total") or 0) > before, 20, interval=0.2,
                   what="the pass fenced")
        s2 = scrape()
    finally:
        e().sim.clear_faults()
        set_conf(watch=None)
    fires("ExtsvcLeaseFenced", [s1, s2])
    fires("ExtsvcLeaseFenced", [s1, s1], want=False)
    e().wait_watching()


# --- the resync's findings -----------------------------------------------------------------------

def test_orphans_held_then_deleted():
    """A service's rows deleted by hand (a DBA's mistake) leave its DPUService an orphan. With
    extsvc.orphan_cleanup_max = 0 the guard holds its deletion (pending) until
    confirm_orphan_cleanup(); then the resync deletes it."""
    sid = e().create("alerts-orphan", helm_data(version="6.0.0"))
    e().wait_state(sid, "READY")
    name = e().state(sid)[3]
    set_conf(orphan_cleanup_max="0")
    try:
        time.sleep(0.5)
        e().pg.sql(f"DELETE FROM extsvc.service_records WHERE service_id = '{sid}'")
        e().pg.resync("ok")
        wait_until(lambda: e().pg.metric("extsvc_pending_orphans", kind="dpuservice") == 1, 20, interval=0.2,
                   what="the orphan held")
        assert e().sim.dpuservice(name), "deleted past the guard"
        sc = scrapes_apart(2, 1.0)
        fires("ExtsvcOrphansPending", sc, hold=11)
        fires("ExtsvcOrphansDeleted", sc, want=False)
        assert e().pg.one("SELECT extsvc.confirm_orphan_cleanup()") == "1"
        wait_until(lambda: e().sim.dpuservice(name) is None, 30, interval=0.2, what="the orphan deleted")
        wait_until(lambda: (e().pg.metric("extsvc_orphans_deleted_total") or 0) >= 1, 10, what="counted")
        sc.append(scrape())
        fires("ExtsvcOrphansDeleted", sc)
    finally:
        set_conf(orphan_cleanup_max=None)


def test_objects_of_no_site_on_the_cluster():
    """A DPUService another site wrote is expected (reason other_site, silent); one without the
    site label is not (no_site_label) and fires."""
    tmpl_sid = e().create("alerts-template", helm_data(version="7.0.0"))
    e().wait_state(tmpl_sid, "READY")
    tmpl_name = e().state(tmpl_sid)[3]
    template = e().sim.dpuservice(tmpl_name)
    made = []

    def stray(site):
        sid = str(uuid.uuid4())
        name = f"alerts-stray-{sid[:8]}"
        body = json.loads(json.dumps(template).replace(tmpl_sid, sid))
        md = body["metadata"]
        labels = dict(md.get("labels") or {})
        labels.pop("nico/site", None)
        if site:
            labels["nico/site"] = site
        body["metadata"] = {"name": name, "namespace": NAMESPACE, "labels": labels,
                            "annotations": dict(md.get("annotations") or {})}
        body.pop("status", None)
        code, out = e().sim.kube("POST", DPUSVC, body)
        assert code == 201, (code, out)
        made.append(name)
    try:
        stray("alerts-other-site")
        e().pg.resync("ok")
        assert e().pg.metric("extsvc_foreign_objects", kind="dpuservice", reason="other_site") >= 1
        sc = scrapes_apart(2, 1.0)
        fires("ExtsvcForeignObjects", sc, hold=61, want=False)
        stray(None)
        e().pg.resync("ok")
        assert e().pg.metric("extsvc_foreign_objects", kind="dpuservice", reason="no_site_label") >= 1
        sc = scrapes_apart(2, 1.0)
        fires("ExtsvcForeignObjects", sc, hold=61)
        fires("ExtsvcForeignObjects", sc, hold=30, want=False)  # not before its hour
    finally:
        for name in made:
            e().sim.kube("DELETE", f"{DPUSVC}/{name}")
    e().delete(tmpl_sid)


def test_a_refused_label_patch_leaves_a_dpu_in_error():
    """A service attached to an instance whose DPU's label patch the API refuses (422): a
    non-transient failure, the DPU's row is ERROR (docs/placement.md) until a person looks."""
    sid = e().create("alerts-dpu", helm_data(version="8.0.0"))
    e().wait_state(sid, "READY")
    iid = e().new_instance(HOST, tag="a")
    e().sim.fault(cluster="management", verb="PATCH", path_regex="dpudevices|/dpus/", status=422,
                  message="spec.cluster.nodeLabels: Invalid value")
    try:
        e().attach(iid, sid)
        wait_until(lambda: (e().pg.metric("extsvc_dpu_states", state="ERROR") or 0) >= 1, 40, interval=0.3,
                   what="a DPU in ERROR")
        sc = scrapes_apart(2, 1.0)
        fires("ExtsvcDpusErrorOrUnknown", sc, hold=16)
        fires("ExtsvcDpusErrorOrUnknown", sc, hold=10, want=False)  # not before its 15 min
    finally:
        e().sim.clear_faults()
    e().attach(iid)
    e().free_host(HOST)
    e().delete(sid)


# --- the site Lease ------------------------------------------------------------------------------

def test_the_lease_taken_again_and_again():
    """extsvc.enabled off and on four times: the server gives the Lease up and acquires it again
    each time (extsvc_lease_acquired_total)."""
    wait_until(lease_held, 30, interval=0.2, what="the Lease held")
    sc = [scrape()]
    for _ in range(4):
        set_conf(enabled="off")
        wait_until(lambda: not lease_held(), 30, interval=0.2, what="the Lease given up")
        set_conf(enabled=None)
        wait_until(lease_held, 30, interval=0.2, what="the Lease acquired")
        sc.append(scrape())
    acq = [s['extsvc_lease_acquired_total{instance="pg",job="extsvc"}'] for s in sc]
    assert acq == [acq[0] + k for k in range(5)], acq
    fires("ExtsvcLeaseFlapping", sc)
    fires("ExtsvcLeaseFlapping", sc[:3], want=False)


def test_two_servers_of_one_site_have_one_writer():
    """A second server of the same site on the same management cluster waits for the Lease: the
    two scraped as one job hold it once, and neither ExtsvcSiteHasTwoWriters nor
    ExtsvcSiteHasNoWriter fires. (A real two-writer state is not brought about: see the module
    docstring.)"""
    s = e().sim
    b = Postgres(e().workdir, {
        "extsvc.workers": "1", "extsvc.site_id": f"'{e().site_id}'",
        "extsvc.kube_server": f"'{s.management}'", "extsvc.kube_ca_file": f"'{s.ca_file}'",
        "extsvc.kube_token_file": f"'{s.token_file}'", "extsvc.orphan_cleanup_max": "0"}, name="pg-b")
    try:
        wait_until(lambda: b.one("SELECT state FROM extsvc.worker_status() WHERE slot = 0") == "waiting_for_lease",
                   40, interval=0.3, what="the second server waits for the Lease")
        sc = []
        for _ in range(2):
            sc.append(alerts.merge(scrape(), scrape(b, instance="pg-b")))
            time.sleep(1)
        held = [v for k, v in sc[-1].items() if k.startswith("extsvc_lease_held{")]
        assert sorted(held) == [0, 1], held
        fires("ExtsvcSiteHasTwoWriters", sc, want=False)
        fires("ExtsvcSiteHasNoWriter", sc, hold=5, want=False)
    finally:
        b.stop()
    # The rule's expression, not its condition: a server of a site of its own holds that site's
    # Lease; two servers that each hold a Lease, scraped as one job (a job that mixes two sites),
    # sum to 2. This shows the rule counts holders across the servers of a job; it is not two
    # writers of one site.
    c = Postgres(e().workdir, {
        "extsvc.workers": "1", "extsvc.site_id": "'alerts-other-site'",
        "extsvc.kube_server": f"'{s.management}'", "extsvc.kube_ca_file": f"'{s.ca_file}'",
        "extsvc.kube_token_file": f"'{s.token_file}'"}, name="pg-c")
    try:
        wait_until(lambda: c.one("SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_lease_held'") == "1",
                   40, interval=0.3, what="the other site's server holds its Lease")
        assert lease_held()
        fires("ExtsvcSiteHasTwoWriters", [alerts.merge(scrape(), scrape(c, instance="pg-c"))])
    finally:
        c.stop()


# --- resync failing, then never done -------------------------------------------------------------

def test_resyncs_that_fail_then_none_since_a_crash_restart():
    """Every LIST of DPUServices answered 500: the resyncs fail and the age of the last good one
    grows (ExtsvcResyncStale). Then a crash restart (SIGKILL of the worker) reinitialises shared
    memory: the workers are up and no resync has ever succeeded (ExtsvcNoResyncYet)."""
    e().pg.resync("ok")
    e().sim.fault(cluster="management", verb="LIST", path_regex="dpuservices", status=500)
    try:
        e().pg.resync("failed")
        s1 = scrape()
        time.sleep(1.5)
        e().pg.resync("failed")
        s2 = scrape()
        key = 'extsvc_last_resync_age_seconds{instance="pg",job="extsvc"}'
        assert s2[key] > s1[key] >= 0, (s1.get(key), s2.get(key))
        fires("ExtsvcResyncStale", [s1, s2], hold=21)
        fires("ExtsvcResyncStale", [s1, s2], hold=12, want=False)
        killed = int(worker_pid())
        os.kill(killed, signal.SIGKILL)
        # the crash restart first: a session may still read the old shared memory's counters
        # before the postmaster has noticed the kill (CI, 2026-12-08)
        e().pg.wait_crash_restart([killed])
        failed = ("SELECT count(*) FROM extsvc.metrics() WHERE metric = 'extsvc_resyncs_total' "
                  "AND labels->>'result' = 'failed' AND value > 0")
        # check=False: a session of its own, an error as text while the server restarts
        wait_until(lambda: isinstance(r := e().pg.sql(failed, check=False), list) and r[0][0] == "1",
                   60, interval=0.5, what="server back and a failed resync")
        sc = []
        for _ in range(2):
            sc.append(scrape())
            time.sleep(1)
        for s in sc:
            assert not any(k.startswith("extsvc_last_resync_age_seconds{") for k in s), "a resync succeeded"
            assert s['extsvc_worker_up{instance="pg",job="extsvc",worker="0"}'] == 1
        fires("ExtsvcNoResyncYet", sc, hold=16)
        fires("ExtsvcNoResyncYet", sc, hold=10, want=False)
    finally:
        e().sim.clear_faults()
    e().pg.resync("ok")


def main():
    global ENV
    ok = False
    # extsvc.relist_interval 0: every resync re-lists its caches first, so that a LIST of
    # DPUServices answered 500 fails the resync (with the default, a resync between two re-lists
    # compares the watch caches and makes no call that could fail)
    ENV = Env(dpus=2, workers=1, extra={
        "extsvc.lease_time": "'5s'", "extsvc.http_timeout": "'2s'", "extsvc.connect_timeout": "'500ms'",
        "extsvc.lease_margin": "'2s'", "extsvc.relist_interval": "0"})
    try:
        ENV.register_dpu(0, HOST, True, tag="a")
        ENV.register_dpu(1, HOST2, True, tag="a")
        ok = run_tests([
            test_every_rule_has_a_test_that_makes_it_fire,
            test_a_healthy_site_fires_none_of_them,
            test_worker_down_without_the_library_preloaded,
            test_a_worker_that_keeps_restarting,
            test_a_worker_that_no_longer_loops,
            test_a_spec_the_api_refuses_fails_the_service,
            test_5xx_and_429_from_the_management_cluster,
            test_watches_answered_410_over_and_over,
            test_a_row_lease_lost_during_a_pass_fences_it,
            test_orphans_held_then_deleted,
            test_objects_of_no_site_on_the_cluster,
            test_a_refused_label_patch_leaves_a_dpu_in_error,
            test_the_lease_taken_again_and_again,
            test_two_servers_of_one_site_have_one_writer,
            test_resyncs_that_fail_then_none_since_a_crash_restart,
        ], "# e2e: every alert rule fires on its failure (issue 28)")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
