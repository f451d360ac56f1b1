#!/usr/bin/python3
"""nico_extsvc on a real high-availability stack (issue 25, part 4): a
two-member Patroni cluster (one etcd member; two PostgreSQL 15 servers with
the extension preloaded, streaming replication) against dpfsim, with
continuous NICo-style load through the SQL API as a login role holding only
extsvc_api, and these faults:

  switchover   patronictl switchover
  failover     patronictl failover
  kill         SIGKILL of the leader's postmaster (Patroni fails over at once)
  lingering    SIGKILL of the leader's Patroni (no watchdog): its PostgreSQL
               keeps running and accepting writes; Patroni promotes the
               replica after the leader key's TTL, and two primaries exist
  restored     pg_dump/pg_restore of the primary into a third, plain server
               with the same extsvc.site_id and cluster settings
  sites        a second site (another extsvc.site_id, its own server) on the
               same clusters, sharing one DPU with the first

After each fault the new primary's workers must hold the site's Lease and
converge (python/extsvc_testkit/invariants.py: 0 orphaned or missing
DPUServices, 0 leaked or missing labels, no lost intent); the lingering old
primary must make no Kubernetes write after the new one took the Lease, and
the writes NICo sent to it must never reach the cluster; the restored copy
must write nothing; neither site may touch the other's objects or labels.

  /usr/bin/python3 test/ha/test_patroni.py               # the CI form (the test command's suite `patroni`)
  /usr/bin/python3 test/ha/test_patroni.py --long        # larger, each failover three times (docs figures)
  ... --write-doc      also writes the figures into docs/reliability.md
  ... --write-example  writes docs/examples/patroni.yml from the suite's member configuration
  HA_ONLY=lingering,sites  runs only those scenarios (after the common setup)

Needs Debian's patroni, etcd-server, python3-etcd and python3-psycopg; run
with /usr/bin/python3 and PYTHONPATH=python (scripts/lib/common.sh sets it).
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True
import psycopg  # noqa: E402

import checks  # noqa: E402
import docs  # noqa: E402
import kubelog  # noqa: E402
import stack  # noqa: E402
from checks import Scenario  # noqa: E402
from extsvc_testkit import harness  # noqa: E402

CONVERGE_LIMIT_S = 60.0
CI = {"hosts": 5, "live": 16, "rate": 4.0, "pre_s": 2.0, "post_s": 4.0, "window_s": 8.0,
      "failovers": ["switchover", "failover", "kill"]}
LONG = {"hosts": 20, "live": 80, "rate": 8.0, "pre_s": 5.0, "post_s": 15.0, "window_s": 25.0,
        "failovers": ["switchover", "failover", "kill"] * 3}


def log_time(line):
    """Seconds since the epoch of a PostgreSQL log line ('%m' in UTC)."""
    import calendar
    try:
        day, clock = line.split()[:2]
        whole, _, frac = clock.partition(".")
        t = calendar.timegm(time.strptime(f"{day} {whole}", "%Y-%m-%d %H:%M:%S"))
        return t + (float("0." + frac) if frac else 0.0)
    except (ValueError, IndexError):
        return None


def promotion_time(member, after):
    """When the member's PostgreSQL left recovery: its log's "selected new timeline ID"."""
    try:
        with open(member.pg.logfile, errors="replace") as f:
            lines = [ln for ln in f if "selected new timeline ID" in ln]
    except OSError:
        return None
    times = [t for t in (log_time(ln) for ln in lines) if t and t >= after - 1.0]
    return times[-1] if times else None


def _sec(x):
    return "-" if x is None else f"{x:+.3f} s"


def su(member_or_pg):
    """A superuser connection (the checks read tables NICo's role cannot)."""
    pg = getattr(member_or_pg, "pg", member_or_pg)
    return psycopg.connect(host=pg.dir, port=pg.port, user=harness.PG_USER, dbname="postgres", autocommit=True)


def wait_converged(st, pg, limit=CONVERGE_LIMIT_S, **kw):
    """Seconds until the invariants hold (None if not within limit) and the last violations."""
    t0 = time.time()
    last = []
    while time.time() - t0 < limit:
        last = st.violations(pg, **kw)
        if not last:
            return time.time() - t0, []
        time.sleep(0.3)
    return None, last


def site_labels(st, pg, site):
    """Live services whose DPUService lacks the site's nico/site label."""
    names = {r[0] for r in pg.sql("SELECT dpf_service_name FROM extsvc.services WHERE lifecycle_state = 'READY' "
                                  "AND service_type = 'DPF_HELM_CHART'")}
    return sorted(o["metadata"]["name"] for o in st.sim.dpuservices()
                  if o["metadata"]["name"] in names
                  and (o["metadata"].get("labels") or {}).get("nico/site") != site)


def wait_lease(st, sysid, timeline, since_seq, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        e = kubelog.lease_write_by(st.reqlog.entries(), sysid, timeline, since_seq)
        if e:
            return e
        time.sleep(0.2)
    return None


def failover_episode(st, kind, sc, cfg, main):
    """One fault of the Patroni cluster under load, its checks and figures."""
    cl = st.cluster
    old = cl.leader()
    cand = next(m for m in cl.members if m is not old and m.patroni_alive())
    sysid, old_tl = old.system_identifier(), old.timeline()
    print(f"  {kind}: leader {old.name} (timeline {old_tl}), candidate {cand.name}", flush=True)
    m0 = st.reqlog.mark(f"{kind} start")
    time.sleep(cfg["pre_s"])
    t_fault = time.time()
    if kind == "switchover":
        cl.patronictl("switchover", "--leader", old.name, "--candidate", cand.name, "--force")
    elif kind == "failover":
        cl.patronictl("failover", "--candidate", cand.name, "--force")
    elif kind == "kill":
        old.kill_postmaster()
    elif kind == "lingering":
        old.kill_patroni()
    new = cl.wait_leader(timeout=90, exclude=(old,), what=f"a new leader after the {kind}")
    t_seen = time.time()
    t_prom = promotion_time(new, t_fault) or t_seen
    new_tl = new.timeline()
    sc.figures.update(kind=kind, promote_s=round(t_prom - t_fault, 2), timeline=[old_tl, new_tl])
    print(f"    {new.name} promoted {t_prom - t_fault:.1f} s after the fault, timeline {new_tl}", flush=True)
    m1 = st.reqlog.mark(f"{kind} promoted")

    stray = None
    if kind == "lingering":
        two = old.in_recovery() is False and new.in_recovery() is False
        sc.check(two, f"two primaries: {old.name} (Patroni dead) still accepts writes beside {new.name}")
        stray = st.stream("stray", st.route_fixed(old.name, st.conninfo(old)), [st.stray_instance],
                          prefix="stray-", rate=cfg["rate"], live_target=3, seed=99)

    lease = wait_lease(st, sysid, new_tl, m0, timeout=max(10.0, 3 * stack.RETRY_PERIOD_S))
    lease_s = None
    if lease:
        lease_s = kubelog.entry_time(lease) - t_prom
    sc.figures["lease_s"] = None if lease_s is None else round(lease_s, 3)
    sc.check(lease is not None, f"{new.name}'s workers took the Lease (timeline {new_tl})",
             detail="no successful Lease write with its holder identity in dpfsim's log")
    if kind == "lingering":
        sc.check(lease_s is not None and lease_s <= stack.RETRY_PERIOD_S,
                 f"... within one retry period ({stack.RETRY_PERIOD_S:.0f} s) of the promotion",
                 detail=f"{lease_s}")

    time.sleep(cfg["post_s"] if kind != "lingering" else max(cfg["post_s"], stack.RENEW_DEADLINE_S + 2))
    main.pause()
    if stray:
        stray.pause()
    t_pause = time.time()
    took, bad = wait_converged(st, new.pg)
    sc.figures["converge_s"] = None if took is None else round(took, 2)
    sc.check(took is not None, f"{new.name} converged (invariants) {took and round(took, 1)} s after the load stopped",
             detail=harness.json.dumps(bad[:6]))
    missing = site_labels(st, new.pg, stack.SITE_A)
    sc.check(not missing, f"every live DPUService carries nico/site={stack.SITE_A}",
             detail=f"{len(missing)} without: {missing[:3]}")
    h = kubelog.parse_holder(kubelog.holder(st.sim, stack.SITE_A))
    sc.check((h.get("sysid"), h.get("timeline")) == (sysid, new_tl),
             f"the Lease names {new.name}: system {sysid}, timeline {new_tl}",
             detail=f"holder {kubelog.holder(st.sim, stack.SITE_A)!r}")

    entries = st.reqlog.entries()
    after = checks.writes_of(entries, lease["seq"] if lease else m1, sysid, old_tl)
    # the control: the log does name the old primary's writes (its Lease renewals at least) before
    before = checks.writes_of(entries, m0, sysid, old_tl, include_leases=True, until_seq=lease and lease["seq"])
    sc.figures["old_writes_after_takeover"] = len(after) if lease and before else None
    seen_seq = None
    if lease:
        # the old primary's last Kubernetes write (not its Lease) and its first Lease request after the
        # takeover (the renewal that finds it deposed), by dpfsim's clock, relative to the takeover:
        # negative = before it
        t_take = kubelog.entry_time(lease)
        mine = checks.writes_of(entries, m0, sysid, old_tl)
        if mine:
            sc.figures["old_last_write_s"] = round(max(kubelog.entry_time(e) for e in mine) - t_take, 3)
        seen = [e for e in entries if e["seq"] > lease["seq"] and (e.get("resource") or "").startswith("leases")
                and kubelog.from_server(e, sysid, old_tl)]
        if seen:
            seen_seq = seen[0]["seq"]
            sc.figures["old_next_lease_request_s"] = round(kubelog.entry_time(seen[0]) - t_take, 3)
        # issue 25 part 2: the deposed holder stops at its next renewal (its Lease request after the
        # takeover), never later than the renew deadline: no write of its after that request
        late = [e for e in after if not seen or e["seq"] > seen[0]["seq"]]
        bound = seen and kubelog.entry_time(seen[0]) - t_take <= stack.RENEW_DEADLINE_S
        sc.check(not after or (bound and not late),
                 f"{old.name} stopped writing at its next Lease request after the takeover "
                 f"({_sec(sc.figures.get('old_next_lease_request_s'))}; renew deadline {stack.RENEW_DEADLINE_S:.0f} s)",
                 detail=checks.describe([("old", e) for e in late]) if seen else "no Lease request of it after the "
                 "takeover in the log")
        # one writer at a time: nothing of the new primary's while the old one still wrote
        overlap = [e for e in checks.writes_of(entries, lease["seq"], sysid, new_tl)
                   if after and e["seq"] < after[-1]["seq"]]
        sc.figures["overlap_writes_new"] = len(overlap)
        sc.check(not overlap, f"{new.name} wrote nothing while {old.name} still wrote (one writer at a time)",
                 detail=f"{len(overlap)} writes of {new.name} between the takeover and {old.name}'s last write "
                 f"{_sec(sc.figures.get('old_last_write_s'))} after it: "
                 + checks.describe([("new", e) for e in overlap]))
    # A deposed holder learns of the takeover only by reading the Lease (Kubernetes has no fencing
    # token a DPUService write could carry), so its writes between the takeover and that read are
    # possible in every lease design: bounded above (its next Lease request, within the renew
    # deadline), kept apart from the new holder's (one writer at a time), repaired by the new
    # holder's takeover resync (converged, above). Where there is no such window (the old primary
    # stopped or demoted first) it must have written nothing after the takeover.
    sc.check(lease is not None and bool(before), f"the log names {old.name}'s writes (timeline {old_tl}): "
             f"{len(before)} before the takeover", detail="no takeover to count from" if not lease
             else "no write in the log names the old primary")
    if kind != "lingering":
        sc.check(not after, f"{old.name} (timeline {old_tl}) made no Kubernetes write after the takeover",
                 detail=checks.describe([("old", e) for e in after]))
    else:
        print(f"    {old.name} made {len(after)} Kubernetes writes after the takeover, the last "
              f"{_sec(sc.figures.get('old_last_write_s'))} after it, before its next Lease request")

    with su(new) as conn:
        lost = checks.lost_writes(conn, main.writes, old.name, t_prom)
    during = [w for w in main.writes if w.t0 >= t_fault - cfg["pre_s"] and w.t1 and w.t1 <= t_pause]
    first_new = min((w.t1 for w in main.writes if w.server == new.name and w.outcome == "committed"
                     and w.t0 >= t_fault), default=None)
    sc.figures.update(
        writes=sum(1 for w in during if w.outcome == "committed"),
        refused_or_unknown=sum(1 for w in during if w.outcome != "committed"),
        lost=len(lost), outage_s=None if first_new is None else round(first_new - t_fault, 2))
    if kind in ("switchover", "failover"):
        sc.check(not lost, "no write the old primary acknowledged is missing on the new one (clean demotion)",
                 detail=", ".join(f"{w.kind} {w.want}" for w in lost[:3]))
    else:
        print(f"    {len(lost)} acknowledged writes missing on the new primary (asynchronous replication)")

    if stray:
        stray_checks(st, sc, stray, new, old, m1, seen_seq)


def stray_checks(st, sc, stray, new, old, since_seq, seen_seq):
    stray.stop()
    committed = [w for w in stray.writes if w.outcome == "committed"]
    sc.figures["stray_writes"] = len(committed)
    sc.check(len(committed) > 0, f"NICo's writes to the old primary {old.name} committed there ({len(committed)}: "
             f"{stray.summary()})")
    with su(new) as conn:
        names = {}
        for w in committed:
            if w.kind == "delete":
                row = conn.execute("SELECT dpf_service_name, lifecycle_state FROM extsvc.services "
                                   "WHERE service_id = %s", (w.want["service_id"],)).fetchone()
                if row and row[1] not in ("DELETING", "DELETED"):
                    names[row[0]] = w
    devices = {harness.device(d) for d in st.layout.stray_dpus}
    nodes = {harness.node(d) for d in st.layout.stray_dpus}
    found = checks.stray_effects(committed, st.reqlog.entries(), since_seq, set(names), devices, nodes)
    sc.figures["stray_effects"] = len(found)
    # those sent before the old primary read the Lease again may reach the cluster (above); none
    # after that, and the new primary's convergence (checked above) undid the earlier ones
    late = [f for f in found if f[-1]["seq"] > seen_seq] if seen_seq else found
    print(f"    {len(found)} of them reached the cluster before {old.name} read the Lease again; "
          "repaired by the new primary's takeover resync")
    sc.check(not late, f"none of them reached the cluster after {old.name} read the Lease again (dpfsim's "
             "request log: no id, marker, DELETE or label write of theirs)", detail=checks.describe(late))
    old.stop()  # the lingering server, by its postmaster's pid


def scenario_restored(st, cfg, main):
    sc = Scenario("restored")
    lead = st.cluster.leader()
    # start from a converged primary: what an earlier fault left behind (e.g. an orphan a deposed
    # primary created, which waits for the next resync) is not this scenario's
    main.pause()
    lead.pg.sql("SELECT extsvc.request_resync()")
    took, bad = wait_converged(st, lead.pg)
    sc.check(took is not None, f"before the restore: {lead.name} converged after a resync",
             detail=harness.json.dumps(bad[:6]))
    main.resume()
    dump = os.path.join(st.dumps, "primary.dump")
    r = harness.as_pg([f"{harness.PGBIN}/pg_dump", "-Fc", "-h", lead.pg.dir, "-p", str(lead.pg_port), "-d", "postgres",
                       "-f", dump], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("pg_dump: " + r.stderr)
    copy = st.plain_server("copy", stack.SITE_A, extension=False)
    with su(lead) as conn:
        deleted_before = {r[0] for r in conn.execute(
            "SELECT dpf_service_name FROM extsvc.services WHERE lifecycle_state IN ('DELETING', 'DELETED')")}
    m0 = st.reqlog.mark("restore")
    t0 = time.time()
    # as docs/operator-guide.md ("Backup and restore") says: triggers off for the restoring session
    r = harness.as_pg(["env", "PGOPTIONS=-c session_replication_role=replica", f"{harness.PGBIN}/pg_restore",
                       "--exit-on-error", "-h", copy.dir, "-p", str(copy.port), "-d", "postgres", dump],
                      capture_output=True, text=True)
    sc.check(r.returncode == 0, "pg_restore of the primary's dump into a plain server", detail=r.stderr[-400:])
    copy.sql("SELECT extsvc.request_resync()", check=False)
    copy_sysid = copy.one("SELECT system_identifier FROM pg_control_system()")
    print(f"  restored copy: system {copy_sysid}, {copy.one('SELECT count(*) FROM extsvc.services')} services; "
          f"primary {lead.name} keeps its load", flush=True)
    time.sleep(cfg["window_s"])
    main.pause()
    window = time.time() - t0
    took, bad = wait_converged(st, lead.pg)
    sc.check(took is not None, "the primary's invariants hold with the copy running", detail=harness.json.dumps(bad[:6]))
    entries = st.reqlog.entries()
    with su(lead) as conn:
        live = {r[0] for r in conn.execute("SELECT dpf_service_name FROM extsvc.services "
                                           "WHERE lifecycle_state IN ('READY', 'CREATING', 'UPDATING')")}
    dels = checks.deletes_of_live(entries, m0, live)
    again = [e for e in entries if e["seq"] > m0 and e["verb"] in ("POST", "PATCH", "PUT")
             and checks.dpuservice_of(e) in deleted_before]
    sc.figures.update(window_s=round(window, 1), deleted_of_primary=len(dels), recreated=len(again),
                      primary_writes=sum(1 for w in main.writes if w.outcome == "committed" and w.t0 >= t0))
    sc.check(not dels, "nothing of the primary's was deleted (no DELETE of a live service's DPUService)",
             detail=checks.describe([("delete", e) for e in dels]))
    sc.check(not again, "no DPUService the primary had deleted before the dump was written again",
             detail=checks.describe([("write", e) for e in again]))
    mine = checks.writes_of(entries, m0, copy_sysid, include_leases=True)
    # the control: the same log names the primary's writes (its Lease renewals at least)
    control = checks.writes_of(entries, m0, lead.system_identifier(), include_leases=True)
    sc.figures["copy_writes"] = len(mine) if control else None
    sc.check(control and not mine, f"the copy made no Kubernetes write (User-Agent in dpfsim's log; "
             f"{len(control)} writes of the primary named meanwhile)",
             detail=checks.describe([("copy", e) for e in mine]) if control
             else "no write in the log names the primary: the log cannot tell who wrote")
    h = kubelog.parse_holder(kubelog.holder(st.sim, stack.SITE_A))
    sc.check(h.get("sysid") == lead.system_identifier(), "the Lease stayed with the primary",
             detail=f"holder {kubelog.holder(st.sim, stack.SITE_A)!r}")
    copy.stop()
    main.resume()
    return sc


def scenario_sites(st, cfg, main):
    sc = Scenario("sites")
    lead = st.cluster.leader()
    siteb = st.plain_server("siteb", stack.SITE_B)
    stack.make_nico_role(siteb)
    nico = stack.Nico(f"host={siteb.dir} port={siteb.port}")
    m0 = st.reqlog.mark("site b")
    try:
        inst_b = stack.register(nico, st.layout.b_dpus, "b")
        pin_b = stack.create_ready(nico, siteb, ["b-pin-0"])
        stack.attach(nico, inst_b[2], pin_b)  # on DPU 0, where site A's pinned service is placed too
    finally:
        nico.close()
    load_b = st.stream("site-b", st.route_fixed("siteb", f"host={siteb.dir} port={siteb.port}"),
                       [inst_b[0], inst_b[1]], prefix="b-load-", rate=cfg["rate"] / 2, live_target=cfg["live"] // 2,
                       seed=7)
    time.sleep(cfg["window_s"] / 2)
    lead.pg.sql("SELECT extsvc.request_resync()")
    siteb.sql("SELECT extsvc.request_resync()")
    time.sleep(cfg["window_s"] / 2)
    main.pause()
    load_b.pause()
    took_a, bad_a = wait_converged(st, lead.pg, site=stack.SITE_A, others=[siteb])
    took_b, bad_b = wait_converged(st, siteb, site=stack.SITE_B, others=[lead.pg])
    sc.check(took_a is not None, "site A converged beside site B (invariants of its own objects)",
             detail=harness.json.dumps(bad_a[:6]))
    sc.check(took_b is not None, "site B converged beside site A", detail=harness.json.dumps(bad_b[:6]))
    entries = st.reqlog.entries()
    live_a = {r[0] for r in lead.pg.sql("SELECT dpf_service_name FROM extsvc.services WHERE lifecycle_state "
                                        "IN ('READY', 'CREATING', 'UPDATING')")}
    live_b = {r[0] for r in siteb.sql("SELECT dpf_service_name FROM extsvc.services WHERE lifecycle_state "
                                      "IN ('READY', 'CREATING', 'UPDATING')")}
    pins = {lead.pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{st.pinned[0]}'"),
            siteb.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{pin_b[0]}'")}
    dels = checks.deletes_of_live(entries, m0, live_a | live_b)
    stripped = [e for e in entries if e["seq"] > m0 and e["verb"] == "PATCH" and checks.label_target(e)
                and checks.nulled_keys(e) & pins]
    sc.figures.update(deleted_live=len(dels), pinned_keys_removed=len(stripped),
                      writes_b=sum(1 for w in load_b.writes if w.outcome == "committed"))
    sc.check(not dels, "no live DPUService of either site was deleted",
             detail=checks.describe([("delete", e) for e in dels]))
    sc.check(not stripped, "the shared DPU kept both sites' pinned placement labels (no patch removed one)",
             detail=checks.describe([("patch", e) for e in stripped]))
    sys_a, sys_b = lead.system_identifier(), siteb.one("SELECT system_identifier FROM pg_control_system()")
    cross = [e for e in checks.writes_of(entries, m0, sys_b) if checks.dpuservice_of(e) in live_a]
    cross += [e for e in checks.writes_of(entries, m0, sys_a) if checks.dpuservice_of(e) in live_b]
    # the control: the log names both sites' writes (their Lease renewals at least)
    named = all(checks.writes_of(entries, m0, x, include_leases=True) for x in (sys_a, sys_b))
    sc.figures["cross_writes"] = len(cross) if named else None
    sc.check(named and not cross, "no worker wrote a DPUService of the other site (User-Agent)",
             detail=checks.describe([("cross", e) for e in cross]) if named
             else "the log does not name both sites' writes: it cannot tell who wrote")
    load_b.stop()
    siteb.stop()
    main.resume()
    return sc


def run(cfg, only):
    st = stack.Stack(cfg["hosts"])
    scenarios = []
    ok = False
    t_all = time.time()
    try:
        st.start()
        print(f"  stack up: etcd, {len(st.cluster.members)} Patroni members in {st.startup_s:.1f} s; "
              f"dpfsim {st.layout.total} DPUs, request log {st.sim.request_log}", flush=True)
        main = st.stream("main", st.route_leader, [st.instances[h] for h in range(1, cfg["hosts"])],
                         prefix="load-", rate=cfg["rate"], live_target=cfg["live"], seed=1)
        time.sleep(cfg["live"] / cfg["rate"])
        for kind in cfg["failovers"] + ["lingering"]:
            if only and kind not in only:
                continue
            sc = Scenario(kind)
            scenarios.append(sc)
            t0 = time.time()
            try:
                st.cluster.wait_streaming(timeout=150)
                main.resume()
                failover_episode(st, kind, sc, cfg, main)
            except Exception as e:  # noqa: BLE001 - report, go on with the next scenario
                sc.error = repr(e)
                import traceback
                traceback.print_exc()
                print(st.cluster.describe())
            sc.figures["seconds"] = round(time.time() - t0, 1)
            print(f"    figures: {sc.figures}")
            print(f"{'ok  ' if sc.passed() else 'FAIL'} {kind} ({sc.figures['seconds']} s)", flush=True)
        main.resume()
        for name, fn in (("restored", scenario_restored), ("sites", scenario_sites)):
            if only and name not in only:
                continue
            t0 = time.time()
            try:
                sc = fn(st, cfg, main)
            except Exception as e:  # noqa: BLE001
                import traceback
                traceback.print_exc()
                sc = Scenario(name)
                sc.error = repr(e)
            scenarios.append(sc)
            sc.figures["seconds"] = round(time.time() - t0, 1)
            print(f"    figures: {sc.figures}")
            print(f"{'ok  ' if sc.passed() else 'FAIL'} {name} ({sc.figures['seconds']} s)", flush=True)
        main.stop()
        print(f"  NICo load on site A: {main.summary()}; connection failures {len(main.errors)}")
        ok = all(sc.passed() for sc in scenarios)
    finally:
        if not ok and st.cluster:
            print(st.cluster.describe())
        st.stop(keep=not ok)
    seconds = time.time() - t_all
    return ok, scenarios, seconds, st


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true", help="the larger form for the docs figures")
    ap.add_argument("--write-doc", action="store_true", help="write the figures into docs/reliability.md")
    ap.add_argument("--write-example", action="store_true", help="write docs/examples/patroni.yml and exit")
    args = ap.parse_args()
    if args.write_example:
        docs.write_example()
        return 0
    cfg = LONG if args.long or os.environ.get("HA_LONG") == "1" else CI
    only = set(filter(None, os.environ.get("HA_ONLY", "").split(",")))
    print(f"# ha: Patroni failover, lingering primary, restored copy, two sites ({'long' if cfg is LONG else 'CI'} form)")
    example_ok = docs.example_is_current()
    print(f"{'ok  ' if example_ok else 'FAIL'} docs/examples/patroni.yml is the suite's member configuration "
          f"(python3 test/ha/test_patroni.py --write-example)")
    ok, scenarios, seconds, st = run(cfg, only)
    passed = sum(1 for sc in scenarios if sc.passed()) + example_ok
    failed = len(scenarios) + 1 - passed
    print(f"suite time {seconds:.0f} s")
    if args.write_doc:
        docs.write_results(scenarios, cfg, cfg is LONG, seconds, st)
    print(f"{passed} passed, {failed} failed")
    return 0 if ok and example_ok else 1


if __name__ == "__main__":
    sys.exit(main())
