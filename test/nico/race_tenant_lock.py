#!/usr/bin/python3
"""Three-session test (issue 29, item 4): a refused call of one tenant does
not block another tenant.

set_instance_extension_services locked every listed service FOR SHARE, of
any tenant, before it checked the instance's tenant, and only then waited
for the instance's row. While it waits (another call on the same instance
is in flight: NICo's own, or a slow one with a long list), the services it
locked stay locked, so tenant B's update_service of its own service waited
behind tenant A's call, which then ended in 42501: with lock_timeout 3 s it
failed with 55P03. Now the instance's tenant is read first and only the
services of that tenant are locked (in service_id order, before the DPUs'
work rows and the instance row; docs/sql-api.md, "Lock order").

Each permutation: session C holds tenant A's instance (an upsert_instance
in an open transaction); session A calls set_instance_extension_services on
that instance naming tenant B's service and waits for C; session B updates
its own service with lock_timeout 3 s: it must neither wait nor fail. Then C
commits and A's call is refused with 42501.
  foreign-service          : no tenant argument
  foreign-service-tenant   : with tenant_organization_id => tenant-a
  foreign-and-own          : tenant A's own service and tenant B's in one list
A control: A's attach of its own service still locks that service (a delete
of it in the other session waits), so the lock that keeps attach and delete
apart (race_attach_delete.py) is still taken.

Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_race_tenant. Exit status 0 when every check passed.
"""
import json
import sys
import uuid

from extsvc_testkit.machine_ids import host_machine_id
from psql_sessions import Session as _Session, psql as _psql, waiting_for_lock

DB = "extsvc_race_tenant"
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


def pod_service(tenant):
    sid = str(uuid.uuid4())
    psql(f"SELECT extsvc.create_service('{tenant}', 'pod-{sid[:8]}', 'KUBERNETES_POD', 'kind: Pod', "
         f"service_id => '{sid}')")
    version = psql(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
    return sid, version


def instance(tenant):
    inst, host = str(uuid.uuid4()), host_machine_id(uuid.uuid4())
    psql(f"SELECT extsvc.upsert_instance('{inst}', '{tenant}', '{host}', NULL, false)")
    return inst, host


def refused_call_does_not_block(name, with_tenant, with_own):
    sid_b, ver_b = pod_service("tenant-b")
    inst_a, host_a = instance("tenant-a")
    entries = [{"service_id": sid_b, "version": ver_b}]
    if with_own:
        sid_a, ver_a = pod_service("tenant-a")
        entries.insert(0, {"service_id": sid_a, "version": ver_a})
    tenant_arg = ", NULL, 'tenant-a'" if with_tenant else ""
    a, b, c = Session("a"), Session("b"), Session("c")
    c.run("BEGIN;")
    c.run(f"SELECT extsvc.upsert_instance('{inst_a}', 'tenant-a', '{host_a}', NULL, false);")
    a.run("BEGIN;")
    a.send(f"SELECT extsvc.set_instance_extension_services('{inst_a}', '{json.dumps(entries)}'{tenant_arg});")
    check(waiting_for_lock(a.pid), f"{name}: A's call waits for C, which holds tenant-a's instance")
    b.run("SET lock_timeout = '3s';")
    b.send(f"SELECT version_ctr FROM extsvc.update_service('{sid_b}', description => 'updated by b', "
           f"tenant_organization_id => 'tenant-b');")
    blocked = waiting_for_lock(b.pid, timeout=1.0)
    r = b.wait()
    check(not blocked, f"{name}: B's update_service of its own service does not wait behind A")
    check(r == "1", f"{name}: B's update_service succeeds: {r!r}")
    c.run("COMMIT;")
    r = a.wait()
    check("42501" in r, f"{name}: A's call naming tenant-b's service is refused with 42501: {r!r}")
    a.run("ROLLBACK;")
    desc = psql(f"SELECT description FROM extsvc.services WHERE service_id = '{sid_b}'")
    check(desc == "updated by b", f"{name}: B's update is committed ({desc!r})")
    a.close(), b.close(), c.close()


def own_service_still_locked():
    sid_a, ver_a = pod_service("tenant-a")
    inst_a, _ = instance("tenant-a")
    entries = json.dumps([{"service_id": sid_a, "version": ver_a}])
    a, b = Session("a"), Session("b")
    a.run("BEGIN;")
    r = a.run(f"SELECT extsvc.set_instance_extension_services('{inst_a}', '{entries}', NULL, 'tenant-a');")
    check(r == "2", f"control: A attaches its own service (config_version 2): {r!r}")
    b.run("BEGIN;")
    b.send(f"SELECT lifecycle_state FROM extsvc.delete_service('{sid_a}');")
    check(waiting_for_lock(b.pid), "control: a delete of A's service waits for A's attach (its row is locked)")
    a.run("COMMIT;")
    r = b.wait()
    check("55000" in r, f"control: the delete is then refused, the service is attached: {r!r}")
    b.run("ROLLBACK;")
    a.close(), b.close()


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    psql(f"CREATE DATABASE {DB}", db="postgres")
    try:
        psql("CREATE EXTENSION nico_extsvc")
        refused_call_does_not_block("foreign-service", with_tenant=False, with_own=False)
        refused_call_does_not_block("foreign-service-tenant", with_tenant=True, with_own=False)
        refused_call_does_not_block("foreign-and-own", with_tenant=True, with_own=True)
        own_service_still_locked()
    finally:
        psql(f"DROP DATABASE IF EXISTS {DB}", db="postgres")
    print(f"race_tenant_lock: {'FAILED' if failures else 'ok'} ({failures} failed checks)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
