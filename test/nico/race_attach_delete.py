#!/usr/bin/python3
"""Two-session test of the attach/delete race (issue #14 P0-4).

Two psql sessions driven step by step (test/nico/psql_sessions.py), pg_locks
watched from a third connection to know when a session is blocked.

Permutations (DPF_HELM_CHART and KUBERNETES_POD services):
  attach-first : A begins, attaches the service; B begins, deletes it -> B
                 must wait for A; A commits; B's delete is refused (55000,
                 the instance is named); B commits; the service stays READY
                 and attached.
  delete-first : B begins, deletes the service; A begins, attaches it -> A
                 must wait for B; B commits; A's attach is refused (55000
                 DELETING, or P0002 for a deleted Pod version); A commits;
                 nothing is attached.
Without the FOR SHARE lock in set_instance_extension_services, attach-first
lets both commit and leaves a DELETING service attached.

Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_race. Exit status 0 when every check passed.
"""
import sys
import uuid

from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id
from psql_sessions import Session as _Session, psql as _psql, waiting_for_lock

DB = "extsvc_race"
CHART = ('{"repoURL":"oci://registry.example.com/charts","chartName":"svc",'
         '"chartVersion":"1.0.0","security":{"privileged":false}}')
failures = 0


def psql(sql, db=DB):
    return _psql(sql, db)


def Session(name):
    return _Session(name, DB)


def check(cond, what):
    global failures
    print(("ok     " if cond else "FAILED ") + what)
    if not cond:
        failures += 1


def setup(kind):
    """A READY service of the given type and an instance to attach it to."""
    sid, inst = str(uuid.uuid4()), str(uuid.uuid4())
    host, dpu = host_machine_id(uuid.uuid4()), dpu_machine_id(uuid.uuid4())
    if kind == "DPF_HELM_CHART":
        psql(f"""
          SELECT extsvc.create_service('tenant-a', 'svc-{sid[:8]}', 'DPF_HELM_CHART', '{CHART}',
                                       dpu_target => 'PRIMARY', service_id => '{sid}');
          UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker',
                 state_reason = 'dpuservice_created', applied_revision = desired_revision
           WHERE service_id = '{sid}';
          SELECT extsvc.register_dpu('{dpu}', '{host}', 'dpu-{dpu[7:15]}', 'node-{dpu[7:15]}', true);
          SELECT extsvc.upsert_instance('{inst}', 'tenant-a', '{host}', ARRAY['{dpu}']::text[], true);""")
    else:
        psql(f"""
          SELECT extsvc.create_service('tenant-a', 'pod-{sid[:8]}', 'KUBERNETES_POD', 'kind: Pod',
                                       service_id => '{sid}');
          SELECT extsvc.upsert_instance('{inst}', 'tenant-a', '{host}', NULL, false);""")
    version = psql(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
    cfg = f"""'[{{"service_id": "{sid}", "version": "{version}"}}]'"""
    return sid, inst, cfg


def attach_first(kind):
    sid, inst, cfg = setup(kind)
    a, b = Session("a"), Session("b")
    a.run("BEGIN;")
    r = a.run(f"SELECT extsvc.set_instance_extension_services('{inst}', {cfg});")
    check(r == "2", f"{kind} attach-first: session A attached (config_version 2): {r!r}")
    b.run("BEGIN;")
    b.send(f"SELECT lifecycle_state FROM extsvc.delete_service('{sid}');")
    check(waiting_for_lock(b.pid), f"{kind} attach-first: session B's delete waits for A's attach")
    a.run("COMMIT;")
    r = b.wait()
    check("55000" in r, f"{kind} attach-first: B's delete is refused with 55000: {r!r}")
    b.run("COMMIT;")  # a refused delete rolls back; a wrongly accepted one commits
    state = psql(f"SELECT lifecycle_state FROM extsvc.service_records WHERE service_id = '{sid}'")
    attached = psql(f"SELECT count(*) FROM extsvc.instance_extension_services "
                    f"WHERE service_id = '{sid}' AND removed_at IS NULL")
    check(state == "READY" and attached == "1",
          f"{kind} attach-first: service stays READY and attached (state {state}, entries {attached})")
    a.close(), b.close()


def delete_first(kind):
    sid, inst, cfg = setup(kind)
    a, b = Session("a"), Session("b")
    b.run("BEGIN;")
    r = b.run(f"SELECT lifecycle_state FROM extsvc.delete_service('{sid}');")
    check(r in ("DELETING", "DELETED"), f"{kind} delete-first: session B deleted: {r!r}")
    a.run("BEGIN;")
    a.send(f"SELECT extsvc.set_instance_extension_services('{inst}', {cfg});")
    check(waiting_for_lock(a.pid), f"{kind} delete-first: session A's attach waits for B's delete")
    b.run("COMMIT;")
    r = a.wait()
    expected = "55000" if kind == "DPF_HELM_CHART" else "P0002"  # a deleted Pod version is gone
    check(expected in r, f"{kind} delete-first: A's attach is refused with {expected}: {r!r}")
    a.run("COMMIT;")  # a refused attach rolls back; a wrongly accepted one commits
    attached = psql(f"SELECT count(*) FROM extsvc.instance_extension_services WHERE service_id = '{sid}'")
    check(attached == "0", f"{kind} delete-first: nothing attached ({attached} entries)")
    a.close(), b.close()


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    try:
        psql(f"ALTER DATABASE {DB} SET extsvc.enforce_chart_allowlist = off", db="postgres")
        psql("CREATE EXTENSION nico_extsvc")
        for kind in ("DPF_HELM_CHART", "KUBERNETES_POD"):
            attach_first(kind)
            delete_first(kind)
    finally:
        psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    print(f"race_attach_delete: {'FAILED' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
