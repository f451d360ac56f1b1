#!/usr/bin/env python3
"""One writer per site (issue 25), against one dpfsim shared by several PostgreSQL servers.

Each server runs the extension with its workers and its lease process; dpfsim's request log
(--request-log, every request with its User-Agent "nico_extsvc/<version> (<holderIdentity>)")
tells which server made each request.

- the site label, the Lease and the User-Agent of every request;
- two sites on one management cluster: neither writes to the other's objects or labels;
- a half-restored database (no live service) pointed at the site's cluster deletes nothing
  and strips no label, and pointing the site's own database back restarts no pod;
- a restored copy (pg_dump / pg_restore, same extsvc.site_id) pauses on its identity, and
  once confirmed writes nothing while the primary holds the Lease; it takes over once the
  primary stopped renewing, after the Lease duration;
- a holder that cannot renew stops writing before the Lease can expire;
- the orphan guard past extsvc.orphan_cleanup_max, and its confirmation;
- the placement key of an orphan of this site that this database never wrote (a deposed
  primary's last window) goes with the orphan; another site's or an unlabelled object's does not;
- no write without extsvc.site_id; timing settings that cannot work together are refused.

WRITE_DOC=1 writes the measured rows into docs/reliability.md (records read by
tools/reliability_summary.py)."""
import json
import os
import subprocess
import sys
import time
import uuid

from extsvc_testkit.harness import (PG_USER, PGBIN, Env, as_pg, device, dpu_id, helm_data, host_id, lit,
                                    node, run_tests, wait_until)
from extsvc_testkit import invariants

import site_doc

NS = "dpf-operator-system"
DEVICES = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"
HOSTS = [host_id(f"{h}1") for h in ("a", "b", "c", "d")]  # NICo MachineIds (issue 22)
A = None  # site-a's server, with the dpfsim all servers share
RESULTS = {}  # name -> record, for docs/reliability.md


def a():
    return A


def register(env, dpus, host):
    for i in dpus:
        env.pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(i)}', '{host}', '{device(i)}', '{node(i)}', "
                   f"{'true' if i == dpus[0] else 'false'})")


def attach(env, iid, *sids):
    entries = [{"service_id": s, "version": env.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{s}'")}
               for s in sids]
    env.pg.sql(f"SELECT extsvc.set_instance_extension_services('{iid}', {lit(json.dumps(entries))})")


def device_keys(sim, i):
    code, body = sim.kube("GET", f"{DEVICES}/{device(i)}")
    assert code == 200, body
    return {k for k in (((body.get("spec") or {}).get("cluster") or {}).get("nodeLabels") or {})
            if k.startswith("nico/extsvc-")}


def by(identity, since=0, writes_only=True):
    """The requests after seq `since` whose User-Agent names this holderIdentity."""
    return [r for r in A.sim.logged_requests()
            if r["seq"] > since and identity in (r.get("user_agent") or "")
            and (not writes_only or r["method"] in ("POST", "PUT", "PATCH", "DELETE"))]


def last_seq():
    reqs = A.sim.logged_requests()
    return reqs[-1]["seq"] if reqs else 0


def workload(sim):
    """Every DaemonSet's generation and every pod's uid in the DPU cluster."""
    _, dss = sim.kube("GET", DS_PATH, base=sim.dpu)
    _, pods = sim.kube("GET", PODS_PATH, base=sim.dpu)
    return ({d["metadata"]["name"]: d["metadata"].get("generation") for d in dss["items"]},
            sorted(p["metadata"]["uid"] for p in pods["items"]))


def resync(env):
    env.pg.resync()
    time.sleep(0.5)  # the DPU passes it made due


# --- the site label, the Lease, the User-Agent ----------------------------------------------

def test_site_label_lease_and_user_agent():
    sid = a().create("site-a-svc", helm_data(values={"v": 1}), target="PRIMARY")
    a().wait_state(sid, "READY")
    name = a().state(sid)[3]
    labels = a().sim.dpuservice(name)["metadata"]["labels"]
    assert labels.get("nico/site") == "site-a", labels
    ds = a().sim.dpuservice(name)["spec"]["serviceDaemonSet"]
    assert "nico/site" not in (ds.get("labels") or {}), "the site label must not reach the DaemonSet template"
    me = a().holder_identity()
    lease = a().site_lease()
    assert lease["spec"]["holderIdentity"] == me, (lease, me)
    assert lease["spec"]["leaseDurationSeconds"] == 15
    ann = lease["metadata"]["annotations"]
    sysid, tl = me.split("/")[0].split(".")
    assert ann["nico/system-identifier"] == sysid and ann["nico/timeline"] == tl, ann
    assert ann["nico/database"] == "postgres" and me.split("/")[2] == ann["nico/server-started"], ann
    row = a().pg.sql("SELECT lease_held, lease_holder, paused_reason FROM extsvc.worker_status()")
    assert all(r == ["t", me, None] for r in row), row
    assert a().pg.metric("extsvc_lease_held") == 1 and a().pg.metric("extsvc_writes_paused", reason="lease") == 0
    # every request of this server names it
    mine = [r for r in a().sim.logged_requests() if (r.get("user_agent") or "").startswith("nico_extsvc/")]
    version = a().pg.one("SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'")
    assert mine and all(r["user_agent"] == f"nico_extsvc/{version} ({me})" for r in mine), \
        {r["user_agent"] for r in mine}
    # the operator's view: kubectl finds the Lease through discovery
    cfg = a().write_kubeconfig()
    out = subprocess.run(["kubectl", "--kubeconfig", cfg, "-n", NS, "get", "leases"], capture_output=True, text=True)
    assert "nico-extsvc-site-a" in out.stdout and me in out.stdout, out.stdout + out.stderr
    print(f"    holder {me}; {len(mine)} requests, all with its User-Agent")


# --- two sites on one management cluster -----------------------------------------------------

def test_two_sites_on_one_cluster_never_touch_each_other():
    b = Env(dpus=0, workers=2, sim=a().sim, site_id="site-b")
    try:
        register(b, [2, 3], HOSTS[1])
        me_a, me_b = a().holder_identity(), b.holder_identity()
        assert a().site_lease("site-b")["spec"]["holderIdentity"] == me_b
        ia, ib = a().new_instance(HOSTS[0], wait=False), b.new_instance(HOSTS[1], wait=False)
        # three attached services each, and one more each to delete
        sa = [a().create(f"two-a-{k}", helm_data(values={"k": k}), target="ALL") for k in range(4)]
        sb = [b.create(f"two-b-{k}", helm_data(values={"k": k}), target="ALL") for k in range(4)]
        for s in sa:
            a().wait_state(s, "READY")
        for s in sb:
            b.wait_state(s, "READY")
        attach(a(), ia, *sa[1:])
        attach(b, ib, *sb[1:])
        invariants.wait_settled(a())
        invariants.wait_settled(b)
        names_a = {a().state(s)[3] for s in sa}
        names_b = {b.state(s)[3] for s in sb}
        keys_a = {r[0] for r in a().pg.sql("SELECT label_key FROM extsvc.placement_keys")}
        keys_b = {r[0] for r in b.pg.sql("SELECT label_key FROM extsvc.placement_keys")}
        since = last_seq()
        # each resyncs twice (orphan sweep, drift, label re-derivation over everything listed)
        for _ in range(2):
            resync(a())
            resync(b)
        # and each deletes one of its own
        a().delete(sa[0])
        b.delete(sb[0])
        wait_until(lambda: a().sim.dpuservice(a().state(sa[0])[3]) is None
                   and a().sim.dpuservice(b.state(sb[0])[3]) is None, timeout=60,
                   what="both deletes done in the cluster")
        invariants.wait_settled(a())
        invariants.wait_settled(b)
        cross = []
        for who, me, theirs, their_keys, their_dpus in (("site-a", me_a, names_b, keys_b, (2, 3)),
                                                        ("site-b", me_b, names_a, keys_a, (0, 1))):
            for r in by(me, since):
                if any(n in r["path"] for n in theirs) or any(device(i) in r["path"] for i in their_dpus):
                    cross.append((who, r["method"], r["path"]))
        assert not cross, cross
        # nothing of the other site was lost: its DPUServices and labels are what it wants
        assert {n for n in names_b if a().sim.dpuservice(n)} == names_b - {b.state(sb[0])[3]}
        assert device_keys(a().sim, 2) == {b.pg.one(f"SELECT placement_label_key FROM extsvc.services "
                                                     f"WHERE service_id = '{x}'") for x in sb[1:]}
        # each sees the other's objects as foreign
        assert a().pg.metric("extsvc_foreign_objects", kind="dpuservice", reason="other_site") >= 2
        assert b.pg.metric("extsvc_foreign_objects", kind="dpuservice", reason="other_site") >= 2
        writes_a, writes_b = len(by(me_a, since)), len(by(me_b, since))
        print(f"    4 resyncs and a delete each: site-a made {writes_a} writes, site-b {writes_b}, "
              f"0 of them to the other site's objects")
        RESULTS["two-sites"] = {"services_per_site": 4, "resyncs_per_site": 2, "writes_a": writes_a,
                                "writes_b": writes_b, "cross_writes": len(cross)}
    finally:
        b.close()


# --- a half-restored database ------------------------------------------------------------------

def test_half_restored_database_deletes_nothing_and_the_site_comes_back_without_a_restart():
    """A pg_restore that failed half-way: the DPUs and the registry of placement keys came
    back, the services did not. Pointed at the site's cluster (same site id; the site's own
    server stopped cleanly, so its Lease is free), it deletes no DPUService and strips no label:
    the database holds no live service while the cluster holds this site's objects. Then the
    site's own database is pointed back: it converges without re-creating anything (no pod
    restarts)."""
    sids = [a().create(f"half-{k}", helm_data(values={"h": k}), target="ALL") for k in range(3)]
    for s in sids:
        a().wait_state(s, "READY")
    inst = a().new_instance(HOSTS[0], wait=False)  # an earlier test's instance of the host is deleted first
    attach(a(), inst, *sids)
    invariants.wait_settled(a())
    before = workload(a().sim)
    ours = [n for n, in a().pg.sql("SELECT dpf_service_name FROM extsvc.services WHERE lifecycle_state = 'READY'")]
    keys = {r[0] for r in a().pg.sql("SELECT label_key FROM extsvc.placement_keys")}
    labelled = {i: device_keys(a().sim, i) for i in (0, 1)}
    a().pg.stop()  # fast: the lease process releases the Lease
    half = None
    try:
        wait_until(lambda: a().site_lease()["spec"]["holderIdentity"] == "", timeout=10, what="the Lease released")
        half = Env(dpus=0, workers=2, sim=a().sim, site_id="site-a")
        register(half, [0, 1], HOSTS[0])
        half.pg.sql("INSERT INTO extsvc.placement_keys (label_key, service_id) SELECT k, gen_random_uuid() FROM "
                    f"unnest(ARRAY[{','.join(lit(k) for k in keys)}]::text[]) k")
        me = half.holder_identity()
        since = last_seq()
        t0 = time.time()
        resync(half)
        resync(half)
        # the label census follows the DPUService census in the same resync
        want = {"dpuservice": len(ours), "placement_labels": 2}
        seen = []

        def census():
            seen.append({r[0]: int(r[1]) for r in half.pg.sql("SELECT kind, count(*) FROM extsvc.pending_orphans "
                                                              "GROUP BY 1")})
            return seen[-1] == want
        try:
            wait_until(census, timeout=30, what=f"pending {want}")
        except AssertionError as e:
            raise AssertionError(f"{e}; pending_orphans seen last: {seen[-1:]}") from None
        assert half.pg.metric("extsvc_pending_orphans", kind="dpuservice") == len(ours)
        writes = by(me, since)
        deletes = [r for r in writes if r["method"] == "DELETE"]
        label_patches = [r for r in writes if "/dpudevices/" in r["path"]]
        assert not deletes and not label_patches, writes
        assert all(a().sim.dpuservice(n) for n in ours), "a DPUService of the site was deleted"
        assert {i: device_keys(a().sim, i) for i in (0, 1)} == labelled, "a label of the site was removed"
        held_s = time.time() - t0
        log = open(half.pg.logfile).read()
        assert "orphan guard" in log and "confirm_orphan_cleanup" in log
    finally:
        if half is not None:
            half.close()
        wait_until(lambda: a().site_lease()["spec"]["holderIdentity"] == "", timeout=10, what="released again")
        a().pg.start()  # the site's own database, pointed back
    invariants.wait_settled(a())
    after = workload(a().sim)
    assert after == before, (before, after)
    print(f"    half-restored database: {len(ours)} DPUServices and {len(keys)} keys on 2 DPUs held back "
          f"(pending_orphans), 0 deletes, 0 label patches in {held_s:.1f} s; pointed back: "
          f"{len(before[1])} pods and {len(before[0])} DaemonSets unchanged")
    RESULTS["half-restored"] = {"dpuservices": len(ours), "dpus": 2, "deletes": len(deletes),
                                "label_patches": len(label_patches), "pods": len(before[1]),
                                "restarted_pods": len(set(before[1]) - set(after[1]))}


# --- a restored copy with the same site id -------------------------------------------------------

def dump_into(src, env, db):
    """pg_dump of src's database restored into env's database db (as docs/operator-guide.md
    says: session_replication_role = replica)."""
    dump = os.path.join(env.pg.dir, "site.dump")  # the PostgreSQL user's directory
    r = as_pg([f"{PGBIN}/pg_dump", "-h", src.pg.dir, "-p", str(src.pg.port), "-U", PG_USER, "-Fc", "-f", dump,
               "postgres"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env.pg.sql(f"CREATE DATABASE {db}")
    r = as_pg([f"{PGBIN}/pg_restore", "-h", env.pg.dir, "-p", str(env.pg.port), "-U", PG_USER, "--exit-on-error",
               "-d", db, dump], capture_output=True, text=True,
              env={**os.environ, "PGOPTIONS": "-c session_replication_role=replica"})
    assert r.returncode == 0, r.stderr


def test_restored_copy_writes_nothing_while_the_primary_holds_the_lease_then_takes_over():
    invariants.wait_settled(a())
    me_a = a().holder_identity()
    copy = Env(dpus=0, workers=2, sim=a().sim, site_id="site-a", extra={"extsvc.database": "'site_copy'"})
    stopped = False
    me_copy = None
    try:
        dump_into(a(), copy, "site_copy")

        def status():  # (worker_status reads shared memory: any database with the extension)
            rows = copy.pg.sql("SELECT paused_reason, coalesce(lease_holder, ''), paused_detail "
                               "FROM extsvc.worker_status() LIMIT 1")
            return rows[0] if rows else None
        st = wait_until(lambda: (lambda s: s if s and s[0] == "database_identity" else None)(status()), timeout=30,
                        what="the copy paused on its identity")
        assert "confirm_database_identity" in st[2], st
        since = last_seq()
        time.sleep(3)
        # its informers may list and watch (reads keep its caches warm for a confirmation); no write
        copy_writes = [r for r in a().sim.logged_requests() if r["seq"] > since and r["method"] != "GET"
                       and (r.get("user_agent") or "").startswith("nico_extsvc/") and me_a not in r["user_agent"]]
        assert not copy_writes, f"a paused copy wrote: {copy_writes[:3]}"
        # an admin confirms the copy: it then waits for the Lease, held by the primary
        copy.pg.conns.sql("SELECT extsvc.confirm_database_identity()", dbname="site_copy")
        st = wait_until(lambda: (lambda s: s if s and s[0] == "lease" and s[1] == me_a else None)(status()), timeout=30,
                        what="the copy waiting for the primary's Lease")
        since = last_seq()
        # the primary keeps working meanwhile
        sid = a().create("while-copied", helm_data(values={"c": 1}), target="ALL")
        a().wait_state(sid, "READY")
        window = 20.0
        time.sleep(window)
        copy_requests = [r for r in a().sim.logged_requests() if r["seq"] > since
                         and (r.get("user_agent") or "").startswith("nico_extsvc/") and me_a not in r["user_agent"]]
        copy_writes = [r for r in copy_requests if r["method"] != "GET" and r["resource"] != "leases"]
        assert not copy_writes, copy_writes
        assert a().site_lease()["spec"]["holderIdentity"] == me_a
        # the primary's server dies without releasing (-m immediate): the copy takes over once the
        # Lease went unrenewed for its duration, by its own clock
        t0 = time.time()
        a().pg.ctl("-m", "immediate", "stop")
        stopped = True
        holder = wait_until(lambda: (lambda h: h if h and h != me_a else None)(
            a().site_lease()["spec"]["holderIdentity"]), timeout=40, interval=0.1, what="the copy's takeover")
        took = time.time() - t0
        me_copy = holder
        assert holder.split("/")[0] != me_a.split("/")[0], "the copy's holder names another system identifier"
        print(f"    copy: paused on its identity, then 0 writes in {window:.0f} s while the primary held the Lease "
              f"({len(copy_requests)} requests, all reading or the Lease); took over {took:.1f} s after the primary died")
        RESULTS["restored-copy"] = {"window_s": window, "copy_writes": len(copy_writes), "takeover_s": round(took, 2),
                                    "lease_duration_s": 15}
    finally:
        copy.close()
        if stopped:
            a().pg.start()
    # the primary is back and takes the released Lease
    wait_until(lambda: a().site_lease()["spec"]["holderIdentity"] not in ("", me_copy), timeout=30,
               what="the primary's Lease again")
    invariants.wait_settled(a())


# --- a holder that cannot renew stops writing ---------------------------------------------------

def test_a_holder_that_cannot_renew_stops_writing_before_the_lease_can_expire():
    invariants.wait_settled(a())
    me = a().holder_identity()
    dur, deadline = 15.0, 10.0
    budget = float(a().pg.one("SELECT extract(epoch FROM current_setting('extsvc.http_timeout')::interval "
                              "+ current_setting('extsvc.lease_margin')::interval)"))
    since = last_seq()
    a().sim.fault(verb="*", path_regex="/leases", action="status", status=503)
    try:
        # writes keep coming: creates every 0.5 s
        t_end = time.time() + dur + 5
        made = []
        while time.time() < t_end:
            made.append(a().create(f"renew-{len(made)}", helm_data(values={"n": len(made)}), target="PRIMARY"))
            time.sleep(0.5)
        reqs = [r for r in a().sim.logged_requests() if r["seq"] > since and me in (r.get("user_agent") or "")]
        renewals = [r for r in reqs if r["resource"] == "leases" and r["method"] == "PUT" and r["status"] == 200]
        ok_renewals = [r for r in a().sim.logged_requests() if me in (r.get("user_agent") or "")
                       and r["resource"] == "leases" and (r["method"], r["status"]) in (("PUT", 200), ("POST", 201))]
        assert not renewals, renewals
        last_ok = ok_renewals[-1]["time"]
        from datetime import datetime
        t_last = datetime.strptime(last_ok, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
        writes = [r for r in reqs if r["method"] in ("POST", "PUT", "PATCH", "DELETE") and r["resource"] != "leases"]
        # a call starts only while its whole budget fits before the Lease could be taken (the
        # renewal's send time + lease_duration, by the server's clock earlier than its arrival
        # here); arrival follows the start by the transfer (0.5 s allowed for scheduling)
        late = [r for r in writes
                if datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() > t_last + dur - budget + 0.5]
        assert not late, late
        assert not [r for r in reqs if r["resource"] != "leases"
                    and datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() > t_last + dur
                    and r["method"] != "GET"], "a write after the Lease could have expired"
        last_write = max((datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() for r in writes),
                         default=t_last)
        st = a().pg.sql("SELECT paused_reason, paused_detail FROM extsvc.worker_status() LIMIT 1")[0]
        assert st[0] == "lease" and "503" in (st[1] or ""), st
        assert "lost: no renewal succeeded within extsvc.lease_renew_deadline" in open(a().pg.logfile).read()
        print(f"    renewals refused: last write {last_write - t_last:.1f} s after the last renewal "
              f"(writes stop at duration - budget = {dur - budget:.0f} s; renew deadline {deadline:.0f} s); "
              f"{len(writes)} writes in the window, 0 late")
    finally:
        a().sim.clear_faults()
    for s in made:
        a().wait_state(s, "READY", timeout=60)
    invariants.wait_settled(a())


# --- the orphan guard past its limit -------------------------------------------------------------

def test_orphans_past_the_limit_wait_for_a_confirmation():
    a().pg.sql("ALTER SYSTEM SET extsvc.orphan_cleanup_max = 2")
    a().pg.reload()
    try:
        sids = [a().create(f"orph-{k}", helm_data(values={"o": k}), target="PRIMARY") for k in range(4)]
        for s in sids:
            a().wait_state(s, "READY")
        names = {a().state(s)[3] for s in sids}
        last = a().state(sids[3])[3]
        # a live service no instance uses: the database is not empty, and its key is registered
        keeper = a().create("orph-keeper", helm_data(values={"o": "keeper"}), target="PRIMARY")
        a().wait_state(keeper, "READY")
        keeper_key = a().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{keeper}'")
        # a DBA's mistake: three services' rows deleted by hand
        a().pg.sql("DELETE FROM extsvc.service_records WHERE service_id IN ("
                   + ",".join(lit(s) for s in sids[:3]) + ")")
        resync(a())
        assert {n for n in names if a().sim.dpuservice(n)} == names, "deleted past the limit"
        pend = {r[0] for r in a().pg.sql("SELECT name FROM extsvc.pending_orphans WHERE kind = 'dpuservice'")}
        assert len(pend) == 3 and pend <= names, pend
        assert a().pg.metric("extsvc_pending_orphans", kind="dpuservice") == 3
        assert a().pg.one("SELECT extsvc.confirm_orphan_cleanup()") == "3"
        wait_until(lambda: not any(a().sim.dpuservice(n) for n in pend), timeout=30, what="confirmed orphans deleted")
        assert a().sim.dpuservice(last), "the live service's DPUService was deleted"
        resync(a())
        wait_until(lambda: a().pg.one("SELECT count(*) FROM extsvc.pending_orphans") == "0", timeout=30,
                   what="the pending list emptied by the next census")
        # one orphan (within the limit) goes at the next resync without a confirmation
        a().pg.sql(f"DELETE FROM extsvc.service_records WHERE service_id = '{sids[3]}'")
        resync(a())
        wait_until(lambda: a().sim.dpuservice(last) is None, timeout=30, what="one orphan deleted within the limit")
        # the same guard on label re-derivation: a key of this site that nothing names on these
        # DPUs (by hand, or a late patch) on both of them. With a limit of 0 every such removal
        # waits for a confirmation (with a limit N, the passes between two resyncs may strip N
        # DPUs, and the resync's census holds back more than N at once)
        a().pg.sql("ALTER SYSTEM SET extsvc.orphan_cleanup_max = 0")
        a().pg.reload()
        time.sleep(0.5)
        resync(a())  # its census leaves no budget
        for i in (0, 1):
            code, _ = a().sim.kube("PATCH", f"{DEVICES}/{device(i)}",
                                   {"spec": {"cluster": {"nodeLabels": {keeper_key: "enabled"}}}},
                                   content_type="application/merge-patch+json")
            assert code == 200
        resync(a())
        # the passes of both DPUs ran (the held list names them), and neither stripped the key
        held = "SELECT name FROM extsvc.pending_orphans WHERE kind = 'placement_labels'"
        wait_until(lambda: {r[0] for r in a().pg.sql(held)} == {device(0), device(1)}, timeout=30,
                   interval=0.1, what="both DPUs' removals held")
        assert all(keeper_key in device_keys(a().sim, i) for i in (0, 1)), "stripped past the limit"
        assert a().pg.one("SELECT extsvc.confirm_orphan_cleanup()") == "2"
        wait_until(lambda: not any(keeper_key in device_keys(a().sim, i) for i in (0, 1)), timeout=30,
                   what="the confirmed label removals done")
        print("    3 orphans over a limit of 2: held, listed, deleted once confirmed; 1 within it: deleted; "
              "keys nothing names on 2 DPUs with a limit of 0: held, removed once confirmed")
    finally:
        a().pg.sql("ALTER SYSTEM RESET extsvc.orphan_cleanup_max")
        a().pg.reload()


# --- a key of this site that this database never wrote --------------------------------------------

def _stray_dpuservice(template, name, tmpl_name, sid, tmpl_sid, site):
    """A copy of a DPUService of ours under another service's name and id (what a deposed
    primary's last window or another site leaves in the cluster); site None: unlabelled."""
    body = json.loads(json.dumps(template).replace(tmpl_name, name).replace(tmpl_sid, sid))
    md = body["metadata"]
    body["metadata"] = {"name": md["name"], "namespace": md["namespace"], "labels": dict(md.get("labels") or {}),
                        "annotations": dict(md.get("annotations") or {})}
    body.pop("status", None)
    if site is None:
        body["metadata"]["labels"].pop("nico/site", None)
    else:
        body["metadata"]["labels"]["nico/site"] = site
    code, out = a().sim.kube("POST", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices", body)
    assert code == 201, (code, out)


def test_a_key_of_an_orphan_of_this_site_goes_and_no_other_key_does():
    # a service of ours as the template of what a lingering old primary (deposed, same site)
    # created in its last window, and what another site and an unlabelled writer created
    tmpl = a().create("stray-template", helm_data(values={"s": 1}), target="PRIMARY")
    a().wait_state(tmpl, "READY")
    tmpl_name = a().state(tmpl)[3]
    version = a().pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{tmpl}'")
    template = a().sim.dpuservice(tmpl_name)
    stray = {}  # who -> (service id, name, key)
    for who, site in (("ours", "site-a"), ("other-site", "site-b"), ("unlabelled", None)):
        sid = str(uuid.uuid4())
        key = a().pg.one(f"SELECT extsvc.placement_label_key('{sid}', {lit(version)})")
        stray[who] = (sid, key[len("nico/"):], key)
        _stray_dpuservice(template, key[len("nico/"):], tmpl_name, sid, tmpl, site)
    # each key on a DPU of site-a, as the writer's label patch left it
    code, _ = a().sim.kube("PATCH", f"{DEVICES}/{device(0)}",
                           {"spec": {"cluster": {"nodeLabels": {k: "enabled" for _, _, k in stray.values()}}}},
                           content_type="application/merge-patch+json")
    assert code == 200
    assert {k for _, _, k in stray.values()} <= device_keys(a().sim, 0)
    me = a().holder_identity()
    since = last_seq()
    try:
        resync(a())
        ours_sid, ours_name, ours_key = stray["ours"]
        wait_until(lambda: a().sim.dpuservice(ours_name) is None, timeout=30,
                   what="the orphan of this site deleted")
        wait_until(lambda: ours_key not in device_keys(a().sim, 0), timeout=30,
                   what="its placement key removed from the DPU")
        row = a().pg.sql(f"SELECT origin, service_id FROM extsvc.placement_keys WHERE label_key = {lit(ours_key)}")
        assert row == [["orphan", ours_sid]] or row == [], row  # forgotten once on no DPU
        resync(a())
        time.sleep(1)
        # the other site's and the unlabelled object and keys are untouched
        for who in ("other-site", "unlabelled"):
            _, name, key = stray[who]
            assert a().sim.dpuservice(name), f"the {who} DPUService was deleted"
            assert key in device_keys(a().sim, 0), f"the {who} key was removed"
            assert a().pg.one(f"SELECT count(*) FROM extsvc.placement_keys WHERE label_key = {lit(key)}") == "0"
            touched = [(r["method"], r["path"]) for r in by(me, since) if name in r["path"]]
            assert not touched, (who, touched)
        # the ours key was removed by a patch of site-a that removed nothing else
        patches = [r for r in by(me, since) if r["method"] == "PATCH" and device(0) in r["path"]]
        assert patches, "no label patch of the DPU"
        print(f"    an orphan of this site: deleted, its key removed ({len(patches)} label patch(es)); "
              "another site's and an unlabelled object and keys: untouched")
    finally:
        for who in ("other-site", "unlabelled"):
            _, name, _ = stray[who]
            a().sim.kube("DELETE", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices/{name}")
        a().sim.kube("PATCH", f"{DEVICES}/{device(0)}",
                     {"spec": {"cluster": {"nodeLabels": {k: None for _, _, k in stray.values()}}}},
                     content_type="application/merge-patch+json")
        a().delete(tmpl)


# --- no site id, and timing settings that cannot work together -----------------------------------

def test_without_a_site_id_nothing_is_written_and_setting_it_starts_the_worker():
    env = Env(dpus=0, workers=1, sim=a().sim, site_id=None)
    try:
        sid = env.create("no-site", helm_data())
        st = wait_until(lambda: (lambda r: r if r and r[0][0] == "site_id" else None)(
            env.pg.sql("SELECT paused_reason, paused_detail FROM extsvc.worker_status()")), timeout=30,
            what="paused on the site id")
        assert "extsvc.site_id cannot be used: it is not set" in st[0][1], st
        time.sleep(4)  # two retry periods more: logged once, not per loop
        log = open(env.pg.logfile).read()
        assert log.count("the workers write nothing (site_id)") == 1, log.count("the workers write nothing (site_id)")
        assert env.state(sid)[0] == "CREATING"
        err = env.pg.sql("ALTER SYSTEM SET extsvc.site_id = 'Site_B'", check=False)
        assert "extsvc.site_id" in err and "lowercase" in err, err
        env.pg.sql("ALTER SYSTEM SET extsvc.site_id = 'site-z'")
        env.pg.reload()
        env.wait_state(sid, "READY", timeout=30)
        assert a().sim.dpuservice(env.state(sid)[3])["metadata"]["labels"]["nico/site"] == "site-z"
        # a change of the site id while the server runs pauses (never two sites for one database)
        env.pg.sql("ALTER SYSTEM SET extsvc.site_id = 'site-y'")
        env.pg.reload()
        wait_until(lambda: env.pg.one("SELECT paused_reason FROM extsvc.worker_status() LIMIT 1") == "site_id",
                   timeout=30, what="paused on the changed site id")
    finally:
        env.close()


def test_timing_settings_that_cannot_work_together_are_refused():
    err = a().pg.sql("ALTER SYSTEM SET extsvc.lease_duration = '4s'", check=False)
    assert "extsvc.lease_duration (4 s) must exceed extsvc.http_timeout + extsvc.lease_margin (3 s + 2 s = 5 s)" in err, err
    err = a().pg.sql("ALTER SYSTEM SET extsvc.lease_renew_deadline = '20s'", check=False)
    assert "must be below extsvc.lease_duration (15 s)" in err, err
    err = a().pg.sql("ALTER SYSTEM SET extsvc.http_timeout = '30s'", check=False)
    assert "must exceed extsvc.http_timeout + extsvc.lease_margin (30 s + 2 s = 32 s)" in err, err
    # a reload with a combination that does not work: the old one stays, and says why
    a().pg.append_conf({"extsvc.lease_retry_period": "'12s'"})
    a().pg.reload()
    try:
        st = wait_until(lambda: a().pg.one("SELECT settings_error FROM extsvc.worker_status() LIMIT 1"), timeout=30,
                        what="the refused reload reported")
        assert "extsvc.lease_retry_period (12 s) must be below extsvc.lease_renew_deadline (10 s)" in st, st
        assert "the reloaded timing settings do not work together" in open(a().pg.logfile).read()
        # still writing with the settings in force
        sid = a().create("after-bad-reload", helm_data(values={"r": 1}), target="PRIMARY")
        a().wait_state(sid, "READY")
    finally:
        a().pg.append_conf({"extsvc.lease_retry_period": "'2s'"})
        a().pg.reload()
    wait_until(lambda: a().pg.one("SELECT settings_error FROM extsvc.worker_status() LIMIT 1") is None, timeout=30,
               what="the error gone after a good reload")


def main():
    global A
    # the product's Lease timing (15 s / 10 s / 2 s); the harness' short call timeout (3 s)
    A = Env(dpus=4, workers=2, site_id="site-a", request_log=True)
    ok = False
    try:
        register(A, [0, 1], HOSTS[0])
        ok = run_tests([
            test_site_label_lease_and_user_agent,
            test_two_sites_on_one_cluster_never_touch_each_other,
            test_half_restored_database_deletes_nothing_and_the_site_comes_back_without_a_restart,
            test_restored_copy_writes_nothing_while_the_primary_holds_the_lease_then_takes_over,
            test_a_holder_that_cannot_renew_stops_writing_before_the_lease_can_expire,
            test_orphans_past_the_limit_wait_for_a_confirmation,
            test_a_key_of_an_orphan_of_this_site_goes_and_no_other_key_does,
            test_without_a_site_id_nothing_is_written_and_setting_it_starts_the_worker,
            test_timing_settings_that_cannot_work_together_are_refused,
        ], "# e2e: one writer per site (issue 25)")
        if ok and os.environ.get("WRITE_DOC"):
            site_doc.write(RESULTS)
    finally:
        A.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
