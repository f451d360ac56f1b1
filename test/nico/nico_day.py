#!/usr/bin/python3
"""A day of NICo's handlers through a client that binds like sqlx (issue 22, part 6).

NICo's database layer is Rust + sqlx: typed, server-side binds (a String is
text, an i64 int8, a Uuid uuid, Json<T> jsonb, a Vec an array, None a typed
NULL) and typed decoding (version_ctr an i32, description a String, a
MachineId or ConfigVersion column a String that must parse). This plays
NICo's day through test/nico/sqlx_pg.py (psycopg 3 bound that way),
nico_db.py (NICo's database operations) and nico_handlers.py (one
transaction per handler), logged in as a role that is only a member of
extsvc_api, with NICo-format MachineIds: machine ingestion, create / update /
rotate / delete KUBERNETES_POD and DPF services, batch allocation with
NICo's serialized entries (attachment ids, a per-attachment target), reads
in batches, the agent feeds, detach, release until the deletion finished,
the Vault keys of deleted versions, and the cut-over import of NICo's own
rows as an extsvc_admin operator. Where DPF would answer, a superuser plays
the worker through its entry points (extsvc.claim / extsvc.complete) and
says so. Every answer is checked.

Run with Debian's interpreter (python3-psycopg): /usr/bin/python3
test/nico/nico_day.py; connection: libpq's PG* variables (a superuser).
Creates and drops the database extsvc_nico_day and the roles
extsvc_nico_day and extsvc_nico_day_op. Exit status 0 when every check passed.
"""
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg  # noqa: E402

import sqlx_pg  # noqa: E402
from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id  # noqa: E402
from nico_handlers import Admin, Nico, entry, vault_key  # noqa: E402
from sqlx_pg import DbError  # noqa: E402

DB = "extsvc_nico_day"
ROLE = "extsvc_nico_day"
OPERATOR = "extsvc_nico_day_op"
TENANT = "tenant-day"
CHART = json.dumps({"repoURL": "oci://registry.example.com/charts", "chartName": "telemetry",
                    "chartVersion": "1.2.3", "security": {"privileged": False}})
failures = 0


def check(cond, what):
    global failures
    print(("ok     " if cond else "FAILED ") + what)
    if not cond:
        failures += 1


def error_of(fn, *args, **kw):
    """'SQLSTATE constraint' of a refused handler call, or 'ok'."""
    try:
        fn(*args, **kw)
        return "ok"
    except DbError as e:
        return e.code()


class Worker:
    """The worker's database side, played by a superuser through its entry
    points: DPF's answers are what a faithful pass would report."""

    def __init__(self, conn):
        self.conn = conn

    def service_ready(self, sid):
        """The pass over service sid, as the worker claims it: with the queue's claim, which may
        lease other due services too; their leases are given back (release_leases, as a
        restarted worker does) so that the day's later claims find them."""
        with self.conn.transaction():
            rows = self.conn.execute("SELECT id, state_version, lease_token FROM extsvc.claim('service', 'day', 100)"
                                     ).fetchall()
        c = next((r for r in rows if r[0] == str(sid)), None)
        if c is None:
            return f"not claimed ({len(rows)} other rows)"
        outcome = {"outcome": "transition", "new_state": "READY", "reason": "dpuservice_created", "applied_revision": 1}
        done = self.conn.execute("SELECT extsvc.complete('service', %s, %s, %s, %s::jsonb)",
                                 [c[0], c[1], c[2], json.dumps(outcome)]).fetchone()[0]
        self.conn.execute("SELECT extsvc.release_leases('day')")
        return done

    def observe(self, wanted="RUNNING", unwanted="TERMINATED"):
        """One pass over every due DPU: wanted items as `wanted`, the others `unwanted`."""
        rows = self.conn.execute("SELECT id, state_version, lease_token, work FROM extsvc.claim('dpu', 'day', 100)").fetchall()
        for dpu, sv, token, work in rows:
            results = [{"kind": it["kind"], "instance_id": it["instance_id"], "service_id": it["service_id"],
                        "version": it["version"], "state": wanted if it["wanted"] else unwanted,
                        "message": "played by nico_day.py"} for it in work["items"]]
            self.conn.execute("SELECT extsvc.complete('dpu', %s, %s, %s, %s::jsonb)",
                              [dpu, sv, token, json.dumps({"outcome": "observed", "results": results})])
        return len(rows)


def binds_are_typed(conn):
    """The client really binds types: an int8 does not fit an integer
    parameter and a text does not fit a uuid one (what a psql literal hides)."""
    check(error_of(sqlx_pg.query, conn, "SELECT extsvc.dpf_service_name(%s, %s)",
                   [("String", str(uuid.uuid4())), ("String", "V1-T1")]).startswith("42883"),
          "a String bound for a uuid parameter: 42883 (binds are typed, not literals)")
    check(error_of(sqlx_pg.query, conn, "SELECT extsvc._config_version(%s)", [("i64", 1)]).startswith("42883"),
          "an i64 bound for an integer parameter: 42883")


def day(nico, admin, worker, su):
    binds_are_typed(su)
    host_dpf = host_machine_id("day-dpf-host")
    # a machine holds one live instance (issue 29): a host per Pod instance
    host_pods = [host_machine_id(f"day-pod-host-{n}") for n in range(3)]
    host_legacy = host_machine_id("day-legacy-host")
    dpus = [dpu_machine_id(f"day-dpu-{n}") for n in range(2)]

    # machine ingestion: the DPF host's DPUs, by their MachineIds
    nico.ingest_host(host_dpf, [(dpus[0], "day-dpu-0", "day-node-0", True), (dpus[1], "day-dpu-1", "day-node-1", False)])
    nico.ingest_host(host_dpf, [(dpus[0], "day-dpu-0", "day-node-0", None)])
    check(su.execute("SELECT is_primary FROM extsvc.dpus WHERE machine_id = %s", [dpus[0]]).fetchone()[0],
          "re-registering a DPU without is_primary (Option<bool> None) keeps it primary")
    try:
        nico.ingest_host(host_dpf, [(str(uuid.uuid4()), "day-dpu-x", "day-node-x", False)])
        check(False, "a uuid as a DPU id is refused")
    except (TypeError, ValueError):
        check(True, "a uuid is no MachineId: NICo's client cannot even bind it")
    bad = error_of(sqlx_pg.query, nico.conn, "SELECT extsvc.register_dpu(%s, %s, 'day-dpu-x', 'day-node-x')",
                   [("String", str(uuid.uuid4())), ("MachineId", host_dpf)])
    check(bad == "22023 -", f"a uuid sent as a String: 22023 ({bad})")

    # CreateDpuExtensionService: NICo's own spellings
    pod = nico.create_extension_service(TENANT, "day-pod", "kubernetes_pod", "kind: Pod", has_credential=True)
    check((pod["lifecycle_state"], pod["version_ctr"], pod["description"]) == ("READY", 1, ""),
          f"create kubernetes_pod: READY, version_ctr 1 (i32), description '' (String) ({pod['version']})")
    dpf = nico.create_extension_service(TENANT, "day-dpf", "dpf_helm_chart", CHART, description="telemetry",
                                        dpu_target="all_active")
    check((dpf["lifecycle_state"], dpf["dpu_target"]) == ("CREATING", "ALL_ACTIVE"),
          "create dpf_helm_chart with all_active: CREATING, stored as ALL_ACTIVE")
    pod_id, dpf_id = pod["service_id"], dpf["service_id"]
    check(error_of(nico.create_extension_service, TENANT, "DAY-POD", "kubernetes_pod", "x")
          == "23505 service_records_tenant_name_key", "a duplicate name: 23505 with its constraint")

    # FindDpuExtensionServicesByIds (Vec<Uuid>)
    snap = nico.find_extension_services_by_ids([dpf_id, uuid.uuid4(), pod_id], TENANT)
    check([(s["service_name"], s["lifecycle_state"], len(s["active_versions"])) for s in snap]
          == [("day-dpf", "CREATING", 1), ("day-pod", "READY", 1)], "find by ids: order kept, unknown id left out")

    # UpdateDpuExtensionService: a rotated credential; a stale counter (i64)
    upd = nico.update_extension_service(pod_id, TENANT, data="kind: Pod", credential=True, if_version_ctr_match=1)
    check(upd["version_ctr"] == 2 and vault_key(pod_id, upd["version"]) == (str(pod_id), 2),
          "credential rotation: a new version, number = version_ctr 2 (the Vault key)")
    check(error_of(nico.update_extension_service, pod_id, TENANT, data="kind: X", if_version_ctr_match=1)
          == "55000 version_ctr_match", "a stale version_ctr: 55000 version_ctr_match")
    vers = nico.get_versions_info(pod_id, TENANT)
    check([(v["version_number"], v["has_credential"]) for v in vers] == [(2, True), (1, True)], "versions newest first")

    # AllocateInstances: a batch in one transaction, NICo's serialized entries
    batch = [uuid.uuid4() for _ in range(3)]
    out = nico.batch_allocate(TENANT, [(i, h, None, False, [entry(pod_id, upd["version"])])
                                       for i, h in zip(batch, host_pods)])
    check([o["config_version"] for o in out] == [2, 2, 2] and all(o["config_version_text"].startswith("V2-T") for o in out),
          "a batch of three instances with the service: config_version 2 and its V2-T string each")
    other = uuid.uuid4()
    check(error_of(nico.batch_allocate, "tenant-other", [(other, host_pods[0], None, False, [])])
          == "23505 instances_one_live_per_host",
          "a second live instance on a machine (another tenant's batch): 23505 instances_one_live_per_host")
    refused = [uuid.uuid4(), uuid.uuid4()]
    check(error_of(nico.batch_allocate, TENANT, [(refused[0], host_legacy, None, False, []),
                                                 (refused[1], host_pods[1], None, False, [])])
          == "23505 instances_one_live_per_host"
          and nico.find_instances_by_ids([other], "tenant-other") == ([], [])
          and nico.find_instances_by_ids(refused, TENANT) == ([], []),
          "a batch with one occupied machine is refused whole (nothing of it stays)")
    insts, summ = nico.find_instances_by_ids(batch + [uuid.uuid4()], TENANT)
    check([i["instance_id"] for i in insts] == batch and len(summ) == 3
          and [i["host_machine_id"] for i in insts] == host_pods,
          "FindInstancesByIds: one call for the batch (get_instances, summaries), hosts as MachineIds")
    check(insts[0]["services"][0]["id"] is not None, "every new entry got an attachment id")
    feed = [f for h in host_pods for f in nico.host_network_config(h)]
    check([f["instance_id"] for f in feed] == batch and {f["version"] for f in feed} == {upd["version"]}
          and {f["config_version_text"] for f in feed} == {o["config_version_text"] for o in out},
          "the agent feed of each Pod host (no DPUs registered there): its instance's entry, the version "
          "strings and config versions NICo stored")
    users = nico.find_instances_by_extension_service(pod_id, TENANT)
    check(len(users) == 3, "FindInstancesByDpuExtensionService: the batch")

    # DPF: the worker creates the DPUService (played), then a DPF instance
    # whose entry brings NICo's attachment id and its own target (primary)
    check(worker.service_ready(dpf_id) == "applied", "worker: the DPUService exists, the service is READY (played)")
    dver = nico.find_extension_services_by_ids([dpf_id])[0]["version"]
    dinst, att = uuid.uuid4(), uuid.uuid4()
    check(error_of(nico.batch_allocate, TENANT, [(dinst, host_dpf, [dpu_machine_id("day-dpu-unknown")], None, [])])
          == "22023 -", "an unknown network DPU is refused (22023)")
    out = nico.batch_allocate(TENANT, [(dinst, host_dpf, dpus, None, [entry(dpf_id, dver, att, "primary")])])
    ready, summary, status = nico.instance_status(dinst, TENANT)
    check([s["dpu_machine_id"] for s in status] == [dpus[0]], "the per-attachment target primary: only the primary DPU")
    check(not ready, "readiness: false until the DPU is observed RUNNING")
    worker.observe()
    ready, summary, status = nico.instance_status(dinst, TENANT)
    check(ready and summary[0]["aggregate_state"] == "RUNNING", "readiness: true once observed RUNNING (played)")
    before, cv, after = nico.update_instance_config(dinst, TENANT, [entry(dpf_id, dver, att, "primary")])
    check(cv["config_version"] == before["config_version"] and after["services"][0]["id"] == str(att),
          "the same configuration again: no new config version, the attachment id kept")
    check(error_of(nico.update_instance_config, dinst, TENANT, [], if_version_match=before["config_version"] - 1)
          == "55000 config_version_match", "a stale config version (i64): 55000 config_version_match")
    check(error_of(nico.delete_extension_service, dpf_id, TENANT) == "55000 service_in_use",
          "delete of an attached DPF service: 55000 service_in_use")

    # detach the Pod service: tombstones until NICo confirms termination
    for i in batch:
        nico.update_instance_config(i, TENANT, [])
    check(all(u["removed_at"] is not None for u in nico.find_instances_by_extension_service(pod_id, TENANT)),
          "detach: three tombstones with removed_at")
    check(error_of(nico.delete_extension_service, pod_id, TENANT) == "55000 service_in_use",
          "delete while tombstones are unconfirmed: 55000 service_in_use")
    for i in batch[:2]:
        check(nico.agent_reported_terminated(i, TENANT, [entry(pod_id, upd["version"])]) == 1,
              f"the agent reported {str(i)[:8]} terminated: tombstone removed")

    # ReleaseInstance until the deletion finished
    nico.release_instance(batch[2], TENANT)
    check(not nico.instance_deletion_finished(batch[2], TENANT), "a released instance with a Pod tombstone: not finished")
    check(error_of(nico.instance_deletion_finished, batch[2], "tenant-other") == "P0002 -"
          and error_of(nico.instance_deletion_finished, uuid.uuid4(), "tenant-other") == "P0002 -",
          "the deletion probe with another tenant: P0002, the answer of an unknown id (issues 22 and 29)")
    successor = uuid.uuid4()
    nico.batch_allocate(TENANT, [(successor, host_pods[2], None, False, [])])
    check([i["host_machine_id"] for i in nico.find_instances_by_ids([successor], TENANT)[0]] == [host_pods[2]],
          "the released instance no longer holds its machine: a new instance takes it (a hand-over)")
    nico.agent_reported_terminated(batch[2], TENANT, [entry(pod_id, upd["version"])])
    check(nico.instance_deletion_finished(batch[2], TENANT), "finished once NICo confirmed the last entry")
    check(error_of(nico.instance_deletion_finished, uuid.uuid4()) == "P0002 -", "an instance never seen: P0002, not true")
    check(error_of(nico.instance_deletion_finished, batch[2], "tenant-other") == "P0002 -",
          "another tenant's finished deletion: P0002 like an unknown id")

    # DeleteDpuExtensionService: the Vault keys of what was deleted
    _, removed, keys = nico.delete_extension_service(pod_id, TENANT, versions=[upd["version"]])
    check(keys == [(str(pod_id), 2)], f"delete the latest version: its Vault key to clean ({keys})")
    row, removed, keys = nico.delete_extension_service(pod_id, TENANT)
    check(row["lifecycle_state"] == "DELETED" and keys == [(str(pod_id), 1)],
          f"delete the whole service: DELETED, the removed versions' Vault keys ({keys})")
    nico.update_instance_config(dinst, TENANT, [])
    worker.observe()
    row, removed, keys = nico.delete_extension_service(dpf_id, TENANT)
    check(row["lifecycle_state"] == "DELETING" and [r["version"] for r in removed] == [dver] and keys == [],
          "delete the DPF service after its removal was observed: DELETING, its version removed, no key")
    check(error_of(nico.get_versions_info, dpf_id, "tenant-other") == "42501 -", "another tenant cannot read it (42501)")

    # cut-over: an operator imports NICo's rows (extsvc_admin)
    sid, iid = uuid.uuid4(), uuid.uuid4()
    nico_services = [{"id": str(sid), "type": "kubernetes_pod", "name": "legacy", "description": "",
                      "tenant_organization_id": TENANT, "version_ctr": 2, "created": "2026-08-01T10:00:00Z",
                      "updated": "2026-08-02T10:00:00Z", "deleted": None,
                      "versions": [{"version": "V1-T1785578400000000", "data": "kind: Legacy", "has_credential": True,
                                    "created": "2026-08-01T10:00:00Z", "deleted": None, "observability": None},
                                   {"version": "V2-T1785664800000000", "data": "kind: Legacy2", "has_credential": False,
                                    "created": "2026-08-02T10:00:00Z", "deleted": None, "observability": None}]}]
    nico_instances = [{"id": str(iid), "machine_id": host_legacy, "tenant_org": TENANT, "deleted": None,
                       "extension_services_config_version": "V5-T1785664800000001",
                       "extension_services_config": {"service_configs": [
                           {"service_id": str(sid), "version": "V2-T1785664800000000", "removed": None},
                           {"service_id": str(sid), "version": "V1-T1785578400000000",
                            "removed": "2026-08-02T10:00:00.123456789Z"}]}}]
    check(error_of(sqlx_pg.query, nico.conn, "SELECT extsvc.import_nico_services(%s)", [("Json", [])]) == "42501 -",
          "extsvc_api may not import (42501)")
    s_out, i_out = admin.import_site(nico_services, nico_instances)
    check([o["action"] for o in s_out + i_out] == ["imported", "imported"], "the operator imports NICo's rows")
    s_out, i_out = admin.import_site(nico_services, nico_instances)
    check([o["action"] for o in s_out + i_out] == ["unchanged", "unchanged"], "a second import changes nothing")
    feed = {f["version"]: f for f in nico.host_network_config(host_legacy) if f["instance_id"] == iid}
    check(set(feed) == {"V1-T1785578400000000", "V2-T1785664800000000"}
          and {f["config_version_text"] for f in feed.values()} == {"V5-T1785664800000001"}
          and feed["V1-T1785578400000000"]["removed_at"] is not None,
          "the agent feed returns the strings NICo's agents already echo, the tombstone removed")
    upd = nico.update_extension_service(sid, TENANT, data="kind: Legacy3", credential=True, if_version_ctr_match=2)
    check(upd["version_ctr"] == 3 and upd["version"].startswith("V3-T") and vault_key(sid, upd["version"])[1] == 3,
          "an update continues NICo's numbering: V3-T..., Vault key 3")
    before, cv, after = nico.update_instance_config(iid, TENANT, [entry(sid, upd["version"])], if_version_match=5)
    check(cv["config_version"] == 6 and cv["config_version_text"].startswith("V6-T"),
          "the instance's config CAS continues from its imported V5: V6")


def main():
    su0 = psycopg.connect(dbname="postgres", autocommit=True)
    su0.execute(f"DROP DATABASE IF EXISTS {DB}")
    su0.execute(f"DROP ROLE IF EXISTS {ROLE}")
    su0.execute(f"DROP ROLE IF EXISTS {OPERATOR}")
    su0.execute(f"CREATE DATABASE {DB}")
    conns = []
    try:
        su0.execute(f"ALTER DATABASE {DB} SET extsvc.enforce_chart_allowlist = off")
        su = psycopg.connect(dbname=DB, autocommit=True)
        conns.append(su)
        su.execute("CREATE EXTENSION nico_extsvc")
        su.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE extsvc_api")
        su.execute(f"CREATE ROLE {OPERATOR} LOGIN IN ROLE extsvc_admin")
        su_typed = sqlx_pg.connect(dbname=DB)
        nconn = sqlx_pg.connect(dbname=DB, user=ROLE)
        oconn = sqlx_pg.connect(dbname=DB, user=OPERATOR)
        conns += [su_typed, nconn, oconn]
        roles = nconn.execute("SELECT array_agg(b.rolname::text ORDER BY 1) FROM pg_auth_members m "
                              "JOIN pg_roles b ON b.oid = m.roleid JOIN pg_roles r ON r.oid = m.member "
                              "WHERE r.rolname = current_user").fetchone()[0]
        check(roles == ["extsvc_api"], f"NICo's login role is a member of extsvc_api only ({roles})")
        day(Nico(nconn), Admin(oconn), Worker(su), su_typed)
    finally:
        for c in conns:
            c.close()
        su0.execute(f"DROP DATABASE IF EXISTS {DB}")
        su0.execute(f"DROP ROLE IF EXISTS {ROLE}")
        su0.execute(f"DROP ROLE IF EXISTS {OPERATOR}")
        su0.close()
    print(f"nico_day: {'FAILED' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
