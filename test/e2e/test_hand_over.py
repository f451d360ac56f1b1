#!/usr/bin/python3
"""End-to-end: the hand-over at commit (issue 26, part 4; docs/worker.md). A transaction that
creates services leases their rows to a worker just before it commits and passes them in shared
memory; the worker sends the POST without a claim. Checked: every committed create is handed over
(one per transaction, several in one), each DPUService is created once; a rolled-back transaction
and a rolled-back savepoint hand nothing over and leave no slot taken; with extsvc.hand_over off
the creates are claimed, as are those that find every worker busy; and a hand-over its worker never took (the worker stopped, then ended) is
worked after the restarted worker freed its previous process's leases. A create in another
database of the server is not handed over. A hand-over whose worker finds the site Lease lost
before it takes it is not sent until the Lease is back (issue 25's fence), then once. Creates
bound as NICo's sqlx binds them (test/nico/nico_db.py), two in one transaction with a read
between, by an extsvc_api login, are handed over as psql's are."""
import os
import signal
import sys
import time
import uuid

from extsvc_testkit.harness import Env, run_tests, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nico"))
import nico_db  # noqa: E402
import sqlx_pg  # noqa: E402

CHART = ('{"repoURL":"https://charts.example.com/stable","chartName":"demo-agent",'
         '"chartVersion":"1.0.0","security":{"privileged":false}}')


def create(name):
    return (f"SELECT extsvc.create_service('tenant-ho', '{name}', 'DPF_HELM_CHART', '{CHART}', "
            "dpu_target => 'ALL')")


def handed(e, worker=None):
    labels = {"worker": str(worker)} if worker is not None else {}
    return int(e.pg.metric("extsvc_worker_handed_over_total", **labels) or 0)


def ready(e, names):
    q = ", ".join(f"'{n}'" for n in names)
    return e.pg.one(f"SELECT count(*) FROM extsvc.services WHERE service_name IN ({q}) "
                    "AND lifecycle_state = 'READY'") == str(len(names))


def working(e):
    rows = e.pg.sql("SELECT state FROM extsvc.worker_status() WHERE pid IS NOT NULL")
    return len(rows) == 2 and all(r[0] == "working" for r in rows)


def test_committed_creates_are_handed_over():
    e = Env(dpus=1, workers=2)
    ok = False
    try:
        wait_until(lambda: working(e), timeout=60, what="both workers working")
        e.sim.ctl("POST", "/counts/reset")
        base = handed(e)
        e.pg.sql(create("ho-one"))
        wait_until(lambda: ready(e, ["ho-one"]), timeout=30, what="ho-one READY")
        assert handed(e) == base + 1, (base, handed(e))
        # the other worker takes them: the watcher only when no other has room
        assert handed(e, 1) >= 1, handed(e, 1)

        # three creates in one transaction: one hand-over of three rows
        e.pg.sql("BEGIN; " + "; ".join(create(f"ho-tx-{i}") for i in range(3)) + "; COMMIT")
        wait_until(lambda: ready(e, [f"ho-tx-{i}" for i in range(3)]), timeout=30, what="ho-tx-* READY")
        assert handed(e) == base + 4, (base, handed(e))

        # rolled back: nothing handed over, and no slot of the ring left taken (16 a worker)
        for i in range(40):
            e.pg.sql(f"BEGIN; {create(f'ho-rb-{i}')}; ROLLBACK")
        e.pg.sql(f"BEGIN; SAVEPOINT a; {create('ho-sp-gone')}; ROLLBACK TO SAVEPOINT a; "
                 f"{create('ho-sp-kept')}; COMMIT")
        wait_until(lambda: ready(e, ["ho-sp-kept"]), timeout=30, what="ho-sp-kept READY")
        assert e.pg.one("SELECT count(*) FROM extsvc.services WHERE service_name LIKE 'ho-rb-%' "
                        "OR service_name = 'ho-sp-gone'") == "0"
        assert handed(e) == base + 5, (base, handed(e))
        # one at a time, each when the workers wait again (a worker takes hand-overs only then)
        for i in range(3):
            e.pg.sql(create(f"ho-after-{i}"))
            wait_until(lambda: ready(e, [f"ho-after-{i}"]), timeout=30, what=f"ho-after-{i} READY")
        assert handed(e) == base + 8, (base, handed(e))
        posts = e.sim.counts()["management"].get("POST dpuservices", 0)
        failed = int(e.pg.one("SELECT coalesce(sum(http_errors), 0) FROM extsvc.worker_status()"))
        assert 8 <= posts <= 8 + failed, f"{posts} POSTs for 8 services, {failed} failed calls"

        # back to back from one session: what finds every worker busy is claimed, nothing is lost
        one_by_one = handed(e)
        for i in range(20):
            e.pg.sql(create(f"ho-burst-{i}"))
        wait_until(lambda: ready(e, [f"ho-burst-{i}" for i in range(20)]), timeout=60, what="ho-burst-* READY")
        assert len(e.sim.dpuservices()) == 28
        in_burst = handed(e) - one_by_one

        # off: the creates are claimed, as before the hand-over
        e.pg.set_conf(hand_over="off")
        wait_until(lambda: e.pg.one("SHOW extsvc.hand_over") == "off", timeout=10, what="the reload")
        before = handed(e)
        for i in range(3):
            e.pg.sql(create(f"ho-off-{i}"))
        wait_until(lambda: ready(e, [f"ho-off-{i}" for i in range(3)]), timeout=30, what="ho-off-* READY")
        assert handed(e) == before, (before, handed(e))
        print(f"    8 creates one by one handed over ({posts} POSTs), {in_burst} of 20 back to back; "
              "off: claimed")
        ok = True
    finally:
        e.close(keep=not ok)


def test_a_create_in_another_database_is_not_handed_over():
    """The workers write for extsvc.database only: a create committed in another database of the
    server, where the extension is installed too, is neither leased nor sent (it only wakes them),
    while a create in their own database still is handed over."""
    e = Env(dpus=1, workers=2)
    ok = False
    try:
        wait_until(lambda: working(e), timeout=60, what="both workers working")
        e.pg.sql("CREATE DATABASE ho_other")
        e.pg.conns.sql("CREATE EXTENSION nico_extsvc", dbname="ho_other")
        e.pg.conns.sql("SELECT extsvc.allow_chart('https://charts.example.com')", dbname="ho_other")
        e.sim.ctl("POST", "/counts/reset")
        e.pg.conns.sql(create("ho-elsewhere"), dbname="ho_other")
        owners = e.pg.conns.sql("SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations",
                                dbname="ho_other")
        assert owners == [[None]], owners
        e.pg.sql(create("ho-home"))
        wait_until(lambda: ready(e, ["ho-home"]), timeout=30, what="ho-home READY")
        assert handed(e) == 1, handed(e)
        assert e.sim.counts()["management"].get("POST dpuservices", 0) == 1
        assert len(e.sim.dpuservices()) == 1
        print("    the other database's create: not leased, not sent; the workers' own: handed over")
        ok = True
    finally:
        e.close(keep=not ok)


def test_a_hand_over_never_taken_is_worked_after_the_restart():
    e = Env(dpus=1, workers=2)
    ok = False
    stopped = []
    try:
        wait_until(lambda: working(e), timeout=60, what="both workers working")
        pids = {int(s): int(p) for s, p in e.pg.sql("SELECT slot, pid FROM extsvc.worker_status() "
                                                      "WHERE pid IS NOT NULL")}
        released = int(e.pg.one("SELECT leases_released FROM extsvc.worker_status() WHERE slot = 1"))
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        e.pg.sql(create("ho-stranded"))
        owner = e.pg.one("SELECT r.lease_owner FROM extsvc.dpf_extension_service_reconciliations r "
                         "JOIN extsvc.services s USING (service_id) WHERE s.service_name = 'ho-stranded'")
        assert owner == "nico_extsvc worker 1", owner
        # worker 1 ends before it takes the hand-over (the SIGTERM is handled before its loop goes on)
        os.kill(pids[1], signal.SIGTERM)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped.clear()
        wait_until(lambda: ready(e, ["ho-stranded"]), timeout=60, what="ho-stranded READY after the restart")
        new = e.pg.sql("SELECT pid, leases_released FROM extsvc.worker_status() WHERE slot = 1")[0]
        assert int(new[0]) != pids[1], "worker 1 did not restart"
        assert int(new[1]) > released, f"the restarted worker freed no lease ({new[1]} vs {released})"
        assert handed(e, 1) == 0, "the restarted worker took a hand-over of its previous process"
        assert len(e.sim.dpuservices()) == 1
        print(f"    worker 1 restarted (pid {pids[1]} -> {new[0]}), freed the lease, the row was claimed")
        ok = True
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        e.close(keep=not ok)


def lease_held(e):
    return e.pg.one("SELECT bool_or(lease_held) FROM extsvc.worker_status()") == "t"


def posts(e, name):
    return [r for r in e.sim.logged_requests()
            if r["method"] == "POST" and r["resource"] == "dpuservices" and r.get("name") == name]


def test_a_hand_over_is_not_sent_after_the_site_lease_is_lost():
    """The Lease is lost between a hand-over and its take: the worker takes hand-overs only while
    its server may write, so the row waits (leased, then claimable) and its POST leaves only
    after the Lease is back, once."""
    e = Env(dpus=1, workers=2, request_log=True)
    ok = False
    stopped = []
    try:
        wait_until(lambda: working(e), timeout=60, what="both workers working")
        e.holder_identity()
        pids = [int(p) for (p,) in e.pg.sql("SELECT pid FROM extsvc.worker_status() WHERE pid IS NOT NULL")]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        e.pg.sql(create("ho-fenced"))
        owner = e.pg.one("SELECT r.lease_owner FROM extsvc.dpf_extension_service_reconciliations r "
                         "JOIN extsvc.services s USING (service_id) WHERE s.service_name = 'ho-fenced'")
        assert owner == "nico_extsvc worker 1", f"not handed over: lease owner {owner}"
        # the lease process (not stopped) cannot renew: the Lease is lost after the renew deadline
        e.sim.fault(verb="*", path_regex="/leases", action="status", status=503)
        wait_until(lambda: not lease_held(e), timeout=60, what="the site Lease lost")
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped.clear()
        wait_until(lambda: e.pg.one("SELECT count(*) FROM extsvc.worker_status() WHERE pid IS NOT NULL "
                                    "AND paused_reason = 'lease'") == "2", timeout=30,
                   what="both workers paused for the Lease")
        time.sleep(3)
        assert not posts(e, e.pg.one("SELECT dpf_service_name FROM extsvc.service_records "
                                     "WHERE service_name = 'ho-fenced'")), "POST sent without the Lease"
        assert not e.sim.dpuservices(), e.sim.dpuservices()
        e.sim.clear_faults()
        wait_until(lambda: ready(e, ["ho-fenced"]), timeout=90, what="ho-fenced READY after the Lease is back")
        name = e.pg.one("SELECT dpf_service_name FROM extsvc.service_records WHERE service_name = 'ho-fenced'")
        assert len(posts(e, name)) == 1, posts(e, name)
        assert len(e.sim.dpuservices()) == 1, e.sim.dpuservices()
        print(f"    hand-over to worker 1, Lease lost: no POST for 3 s; after the Lease came back one POST "
              f"(handed over taken: {handed(e, 1)})")
        ok = True
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        e.sim.clear_faults()
        e.close(keep=not ok)


def test_creates_bound_as_nico_binds_them_are_handed_over():
    """NICo's CreateDpuExtensionService as its typed client sends it (text, uuid, Option<String>
    binds, prepared statements, autocommit off), two creates in one transaction with a read of
    the first between them, by a login with extsvc_api only: both rows handed over at the commit,
    each DPUService POSTed once."""
    e = Env(dpus=1, workers=2, request_log=True)
    ok = False
    try:
        wait_until(lambda: working(e), timeout=60, what="both workers working")
        e.pg.sql("CREATE ROLE nico_ho LOGIN IN ROLE extsvc_api")
        conn = sqlx_pg.connect(host=e.pg.dir, port=str(e.pg.port), dbname="postgres", user="nico_ho")
        base = handed(e)
        ids = [uuid.uuid4(), uuid.uuid4()]
        with conn.transaction():
            first = nico_db.create(conn, ids[0], "dpf_helm_chart", "ho-nico-0", "tenant-ho", None, CHART, "all")
            assert first["lifecycle_state"] == "CREATING", first
            assert [str(r["service_id"]) for r in nico_db.find_snapshots_by_ids(conn, [ids[0]])] == [str(ids[0])]
            nico_db.create(conn, ids[1], "dpf_helm_chart", "ho-nico-1", "tenant-ho", "second", CHART, "all")
        conn.close()
        wait_until(lambda: ready(e, ["ho-nico-0", "ho-nico-1"]), timeout=30, what="both READY")
        assert handed(e) == base + 2, (base, handed(e))
        for sid in ids:
            name = e.pg.one(f"SELECT dpf_service_name FROM extsvc.service_records WHERE service_id = '{sid}'")
            assert len(posts(e, name)) == 1, posts(e, name)
        print(f"    two creates in one sqlx-bound transaction: both handed over ({handed(e) - base})")
        ok = True
    finally:
        e.close(keep=not ok)


if __name__ == "__main__":
    sys.exit(0 if run_tests([test_committed_creates_are_handed_over,
                             test_a_create_in_another_database_is_not_handed_over,
                             test_a_hand_over_never_taken_is_worked_after_the_restart,
                             test_a_hand_over_is_not_sent_after_the_site_lease_is_lost,
                             test_creates_bound_as_nico_binds_them_are_handed_over],
                            "# e2e: the hand-over at commit") else 1)
