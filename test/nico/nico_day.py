#!/usr/bin/python3
"""A day of NICo's handlers against the SQL API (issue #14, client-side test).

Plays NICo's database layer as a login role that is only a member of
extsvc_api (so every call proves the grants suffice), over one kept connection per role (extsvc_testkit.db):
create, find by ids, list versions, update with credential rotation, attach
to a batch of instances, readiness, detach, instance deletion until
terminated, delete. No worker runs: where DPF would answer, a superuser
session plays the worker's writes and says so. Every answer is checked.

Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_nico_day and the role extsvc_nico_day. Exit status 0 when
every check passed.
"""
import json
import sys
import uuid

from extsvc_testkit import db as extsvc_db

DB = "extsvc_nico_day"
ROLE = "extsvc_nico_day"
CONNS = extsvc_db.Conns()  # libpq's PG* variables; one kept connection per database and role
TENANT = "tenant-day"
CHART = json.dumps({"repoURL": "oci://registry.example.com/charts", "chartName": "telemetry",
                    "chartVersion": "1.2.3", "security": {"privileged": False}})
failures = 0


def run(sql, db=DB, user=None):
    """Runs sql on the kept connection to db as user (default: the superuser
    of the PG* variables); returns (rows as lists of fields, error
    'SQLSTATE constraint' or None)."""
    try:
        rows = CONNS.sql(sql, db, user)
    except extsvc_db.SqlError as e:
        return None, f"{e.sqlstate or '?'} {e.constraint or '-'}"
    return [["" if v is None else v for v in r] for r in rows], None


def nico(sql):
    """A call as NICo (extsvc_api only); raises on error."""
    rows, err = run(sql, user=ROLE)
    if err:
        raise RuntimeError(f"NICo call failed ({err}): {sql}")
    return rows


def nico_err(sql):
    rows, err = run(sql, user=ROLE)
    return err or "ok"


def admin(sql, db=DB):
    rows, err = run(sql, db=db)
    if err:
        raise RuntimeError(f"superuser call failed ({err}): {sql}")
    return rows


def check(cond, what):
    global failures
    print(("ok     " if cond else "FAILED ") + what)
    if not cond:
        failures += 1


def q(s):
    return "'" + s.replace("'", "''") + "'"


def day():
    host_dpf = str(uuid.uuid4())
    host_pods = [str(uuid.uuid4()) for _ in range(3)]  # a machine holds one instance (issue 29)
    dpus = [str(uuid.uuid4()) for _ in range(2)]

    # machine ingestion: the DPF host's DPUs; instances of a batch
    for n, d in enumerate(dpus):
        nico(f"SELECT extsvc.register_dpu('{d}', '{host_dpf}', 'day-dpu-{n}', 'day-node-{n}', {str(n == 0).lower()})")
    nico(f"SELECT extsvc.register_dpu('{dpus[0]}', '{host_dpf}', 'day-dpu-0', 'day-node-0')")
    check(admin(f"SELECT is_primary FROM extsvc.dpus WHERE machine_id = '{dpus[0]}'") == [["t"]],
          "re-registering a DPU without is_primary keeps it primary")
    batch = [str(uuid.uuid4()) for _ in range(3)]
    for i, h in zip(batch, host_pods):
        nico(f"SELECT extsvc.upsert_instance('{i}', '{TENANT}', '{h}', NULL, false)")
    check(nico_err(f"SELECT extsvc.upsert_instance('{uuid.uuid4()}', 'tenant-other', '{host_pods[0]}', NULL, false)")
          == "23505 instances_one_live_per_host",
          "a second live instance on a machine (another tenant's) is refused: 23505 instances_one_live_per_host")
    dpf_inst = str(uuid.uuid4())
    nico(f"SELECT extsvc.upsert_instance('{dpf_inst}', '{TENANT}', '{host_dpf}', ARRAY['{dpus[1]}']::uuid[])")
    check(nico_err(f"SELECT extsvc.upsert_instance('{dpf_inst}', '{TENANT}', '{host_dpf}', ARRAY['{uuid.uuid4()}']::uuid[])")
          .startswith("22023"), "an unknown network DPU is refused (22023)")

    # CreateDpuExtensionService
    pod = nico(f"SELECT service_id, lifecycle_state, version_ctr FROM extsvc.create_service({q(TENANT)}, 'day-pod', "
               f"'KUBERNETES_POD', 'kind: Pod', has_credential => true)")[0]
    check(pod[1:] == ["READY", "1"], f"create KUBERNETES_POD: READY, version_ctr 1 ({pod})")
    dpf = nico(f"SELECT service_id, lifecycle_state FROM extsvc.create_service({q(TENANT)}, 'day-dpf', "
               f"'DPF_HELM_CHART', {q(CHART)}, dpu_target => 'ALL_ACTIVE')")[0]
    check(dpf[1] == "CREATING", "create DPF_HELM_CHART: CREATING (no Kubernetes call yet)")
    pod_id, dpf_id = pod[0], dpf[0]
    check(nico_err(f"SELECT extsvc.create_service({q(TENANT)}, 'DAY-POD', 'KUBERNETES_POD', 'x')")
          == "23505 service_records_tenant_name_key", "a duplicate name: 23505 with its constraint")

    # FindDpuExtensionServicesByIds
    snap = nico(f"SELECT service_name, lifecycle_state, cardinality(active_versions), latest_has_credential "
                f"FROM extsvc.service_snapshots(ARRAY['{dpf_id}', '{uuid.uuid4()}', '{pod_id}']::uuid[], {q(TENANT)})")
    check(snap == [["day-dpf", "CREATING", "1", "f"], ["day-pod", "READY", "1", "t"]],
          f"find by ids: order kept, unknown id left out ({snap})")

    # UpdateDpuExtensionService with a rotated credential, then list versions
    upd = nico(f"SELECT version_ctr FROM extsvc.update_service('{pod_id}', 'kind: Pod', has_credential => true, "
               f"tenant_organization_id => {q(TENANT)})")
    check(upd == [["2"]], "credential rotation with the same data: a new version, number = version_ctr 2 (Vault key)")
    vers = nico(f"SELECT version_number, has_credential FROM extsvc.service_versions('{pod_id}', "
                f"tenant_organization_id => {q(TENANT)})")
    check(vers == [["2", "t"], ["1", "t"]], f"versions newest first ({vers})")
    check(nico_err(f"SELECT extsvc.update_service('{pod_id}', 'kind: X', if_version_ctr_match => 1)")
          == "55000 version_ctr_match", "a stale version_ctr: 55000 version_ctr_match")

    # attach the Pod service to a batch of instances
    version = nico(f"SELECT version FROM extsvc.services WHERE service_id = '{pod_id}'")[0][0]
    entry = json.dumps([{"service_id": pod_id, "version": version}])
    for i in batch:
        cv = nico(f"SELECT extsvc.set_instance_extension_services('{i}', {q(entry)}, 1, {q(TENANT)})")
        check(cv == [["2"]], f"attach to {i[:8]}: config_version 2")
    inst = nico(f"SELECT config_version, config_version_text, services->0->>'version' "
                f"FROM extsvc.get_instance('{batch[0]}', {q(TENANT)})")[0]
    check(inst[0] == "2" and inst[1].startswith("V2-T") and inst[2] == version,
          f"get_instance: config_version and its V<n>-T<micros> string ({inst[:2]})")
    users = nico(f"SELECT count(*) FROM extsvc.service_instances('{pod_id}', tenant_organization_id => {q(TENANT)})")
    check(users == [["3"]], "FindInstancesByDpuExtensionService: the batch")
    feed = [nico(f"SELECT count(*) FROM extsvc.host_agent_extension_services('{h}')")[0][0] for h in host_pods]
    check(feed == ["1", "1", "1"], "the agent feed of each Pod host (no DPUs registered there): its instance's entry")
    check(nico(f"SELECT extsvc.instance_extension_services_ready('{batch[0]}', {q(TENANT)})") == [["t"]],
          "readiness: no DPF service on the instance, ready")

    # DPF service: the worker would create the DPUService (played here)
    admin(f"UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', "
          f"state_reason = 'dpuservice_created', applied_revision = desired_revision WHERE service_id = '{dpf_id}'")
    dver = nico(f"SELECT version FROM extsvc.services WHERE service_id = '{dpf_id}'")[0][0]
    dentry = json.dumps([{"service_id": dpf_id, "version": dver}])
    nico(f"SELECT extsvc.set_instance_extension_services('{dpf_inst}', {q(dentry)}, NULL, {q(TENANT)})")
    check(nico(f"SELECT extsvc.instance_extension_services_ready('{dpf_inst}', {q(TENANT)})") == [["f"]],
          "readiness: false until the DPU is observed RUNNING")
    # the worker observes the pod of the current revision running (played)
    admin(f"SET nico_extsvc.actor = 'worker'; "
          f"UPDATE extsvc.dpf_extension_service_attachments a SET deployment_state = 'RUNNING', "
          f"observed_at = now(), status_message = 'pod Ready at the applied revision (played)', "
          f"observed_config_version = (SELECT config_version FROM extsvc.instances i "
          f"WHERE i.instance_id = a.instance_id) WHERE instance_id = '{dpf_inst}'")
    check(nico(f"SELECT extsvc.instance_extension_services_ready('{dpf_inst}', {q(TENANT)})") == [["t"]],
          "readiness: true once every DPU is observed RUNNING for this config_version")
    pair = nico(f"SELECT config_version, config_version_text FROM extsvc.set_instance_extension_services_versioned("
                f"'{dpf_inst}', {q(dentry)}, NULL, {q(TENANT)})")
    now_ = nico(f"SELECT config_version, config_version_text FROM extsvc.get_instance('{dpf_inst}', {q(TENANT)})")
    check(pair == now_ and len(pair) == 1, f"the versioned call returns get_instance's pair ({pair})")
    check(nico_err(f"SELECT extsvc.delete_service('{dpf_id}', NULL, {q(TENANT)})") == "55000 service_in_use",
          "delete of an attached DPF service: 55000 service_in_use")

    # detach the Pod service: tombstones until NICo confirms termination
    for i in batch:
        nico(f"SELECT extsvc.set_instance_extension_services('{i}', '[]', NULL, {q(TENANT)})")
    tomb = nico(f"SELECT count(*) FILTER (WHERE removed_at IS NOT NULL) FROM extsvc.service_instances('{pod_id}')")
    check(tomb == [["3"]], "detach: three tombstones with removed_at")
    check(nico_err(f"SELECT extsvc.delete_service('{pod_id}')") == "55000 service_in_use",
          "delete while tombstones are unconfirmed: 55000 service_in_use")
    for i in batch[:2]:
        check(nico(f"SELECT extsvc.remove_terminated_services('{i}', {q(entry)}, {q(TENANT)})") == [["1"]],
              f"the agent reported {i[:8]} terminated: tombstone removed")

    # instance deletion until terminated
    nico(f"SELECT extsvc.delete_instance('{batch[2]}', {q(TENANT)})")
    check(nico(f"SELECT delete_requested_at IS NOT NULL FROM extsvc.get_instance('{batch[2]}', {q(TENANT)})")
          == [["t"]], "get_instance of a deleting instance: delete_requested_at set")
    check(nico(f"SELECT extsvc.instance_extension_services_terminated('{batch[2]}', 'tenant-other')") == [["t"]],
          "the deletion probe with another tenant answers like an unknown id: true (issue 29)")
    check(nico(f"SELECT extsvc.instance_extension_services_terminated('{batch[2]}')") == [["f"]],
          "a deleting instance with a Pod tombstone is not terminated")
    nico(f"SELECT extsvc.remove_terminated_services('{batch[2]}', {q(entry)}, {q(TENANT)})")
    check(nico(f"SELECT extsvc.instance_extension_services_terminated('{batch[2]}')") == [["t"]],
          "terminated once NICo confirmed the last entry")
    check(nico_err(f"SELECT * FROM extsvc.get_instance('{batch[2]}')").startswith("P0002"),
          "the deleted instance is gone (P0002)")

    # DeleteDpuExtensionService: the Pod service, with Vault cleanup info
    gone = nico(f"SELECT version_number, had_credential FROM extsvc.delete_service_versions('{pod_id}', "
                f"ARRAY[(SELECT version FROM extsvc.services WHERE service_id = '{pod_id}')], {q(TENANT)})")
    check(gone == [["2", "t"]], f"delete the latest version: credential to clean up ({gone})")
    left = nico(f"SELECT version FROM extsvc.services WHERE service_id = '{pod_id}'")[0][0]
    gone = nico(f"SELECT version_number, had_credential FROM extsvc.delete_service_versions('{pod_id}', "
                f"ARRAY[{q(left)}], {q(TENANT)})")
    check(gone == [["1", "t"]], "delete the last version")
    check(nico(f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{pod_id}'") == [["DELETED"]],
          "the Pod service is DELETED")
    # and the DPF service after detaching (its removal is observed by the worker: played)
    nico(f"SELECT extsvc.set_instance_extension_services('{dpf_inst}', '[]', NULL, {q(TENANT)})")
    admin(f"SET nico_extsvc.actor = 'worker'; "  # what the worker records (superuser session)
          f"UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'TERMINATED' "
          f"WHERE instance_id = '{dpf_inst}'")
    admin(f"SELECT extsvc._cleanup_instance('{dpf_inst}')")
    check(nico(f"SELECT lifecycle_state FROM extsvc.delete_service('{dpf_id}', NULL, {q(TENANT)})") == [["DELETING"]],
          "delete the DPF service: DELETING (the worker deletes the DPUService)")
    check(nico_err(f"SELECT * FROM extsvc.service_versions('{dpf_id}', tenant_organization_id => 'tenant-other')")
          .startswith("42501"), "another tenant cannot read it (42501)")


def main():
    admin(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    admin(f"DROP ROLE IF EXISTS {ROLE}", db="postgres")
    admin(f"CREATE DATABASE {DB}", db="postgres")
    try:
        admin(f"ALTER DATABASE {DB} SET extsvc.enforce_chart_allowlist = off", db="postgres")
        admin("CREATE EXTENSION nico_extsvc")
        admin(f"CREATE ROLE {ROLE} LOGIN IN ROLE extsvc_api")
        day()
    finally:
        admin(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
        admin(f"DROP ROLE IF EXISTS {ROLE}", db="postgres")
    print(f"nico_day: {'FAILED' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
