#!/usr/bin/python3
"""pg_dump / pg_restore keep every row of nico_extsvc (issue #12, suite
dump-restore).

Fills a database through the public SQL API (services of both types and
scopes, versions and Helm revisions, a rollback, DPUs, instances,
attachments with tombstones and REMOVING rows, an instance deletion, a
purged service, the chart allow-list, leases held by a worker of the "old
server"), runs pg_dump -Fc and a plain pg_restore (no flags, no PGOPTIONS;
issue 27) into an empty database of the same server, and psql of a
pg_dump --data-only into a fresh install, and compares every row of every
table and every sequence of the extension with the original, as text,
ordered by primary key. Then shows the
API works on the restored database (an update, a new service, an attach) and
that the restored leases of the old server's worker can be freed.

The restored database is not extsvc.database of the server, so no worker
touches either database (and the test clusters have no Kubernetes cluster
configured anyway). Connection: psql's PG* variables, a superuser. Creates
and drops the databases extsvc_dump_src, extsvc_dump_dst and extsvc_dump_data.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import os
import tempfile
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id  # noqa: E402
from pgq import Conn, chart, finish, q, unified  # noqa: E402

SRC, DST, DATA = "extsvc_dump_src", "extsvc_dump_dst", "extsvc_dump_data"
T1, T2 = "tenant-dump-a", "tenant-dump-b"
OLD_WORKER = "nico_extsvc worker 0"   # the slot name of the old server's worker
SEED = {"extsvc.lifecycle_transitions", "extsvc.placement_transitions"}
IDENTITY = "extsvc.database_identity"  # issue 25: compared on its own (identity_checks)
# issue 25: what the orphan guard holds back is decided anew by each resync of the server that
# runs the database; a restored copy must not inherit another server's confirmations
NOT_DUMPED = {"extsvc.pending_orphans"}


def attach(inst, sid):
    """set_instance_extension_services with the service's current version."""
    return (f"SELECT extsvc.set_instance_extension_services('{inst}', (SELECT jsonb_build_array(jsonb_build_object("
            f"'service_id', service_id, 'version', version)) FROM extsvc.services WHERE service_id = '{sid}'));")


def fill(c):
    """One psql session (each statement its own transaction)."""
    # NICo MachineIds (SPEC 7)
    host_a, host_b = host_machine_id(uuid.uuid4()), host_machine_id(uuid.uuid4())
    dpus = [dpu_machine_id(uuid.uuid4()) for _ in range(3)]
    inst = [uuid.uuid4() for _ in range(3)]
    pod, dpf, site, failed, gone = (uuid.uuid4() for _ in range(5))
    sql = ["CREATE EXTENSION nico_extsvc;",
           "SELECT extsvc.allow_chart('oci://registry.example.com/charts');",
           "SELECT extsvc.allow_chart('https://charts.example.com/stable', 'other');"]
    for n, d in enumerate(dpus):
        sql.append(f"SELECT extsvc.register_dpu('{d}', '{host_a}', 'dump-dpu-{n}', 'dump-node-{n}', "
                   f"{str(n == 0).lower()});")
    sql += [
        f"SELECT extsvc.register_dpu('{dpu_machine_id(uuid.uuid4())}', '{host_machine_id(uuid.uuid4())}', "
        "'dump-dpu-spare', 'dump-node-spare');",
        f"SELECT extsvc.upsert_instance('{inst[1]}', {q(T1)}, '{host_a}', ARRAY['{dpus[0]}']::text[]);",
        f"SELECT extsvc.upsert_instance('{inst[2]}', {q(T2)}, '{host_b}', NULL, false);",
        # KUBERNETES_POD: created, a new version, attached and detached (tombstone)
        f"SELECT extsvc.create_service({q(T2)}, 'dump-pod', 'KUBERNETES_POD', 'kind: Pod', "
        f"service_id => '{pod}', has_credential => true);",
        f"SELECT extsvc.update_service('{pod}', 'kind: Pod' || chr(10) || 'spec: {{}}');",
        attach(inst[2], pod),
        f"SELECT extsvc.set_instance_extension_services('{inst[2]}', '[]');",
        # DPF_HELM_CHART: created, made READY as the worker would, attached to
        # two instances and detached from one (tombstone, REMOVING rows),
        # updated twice (revisions 2, 3) and rolled back to 1 (revision 4)
        f"SELECT extsvc.create_service({q(T1)}, 'dump-dpf', 'DPF_HELM_CHART', {chart()}, "
        f"dpu_target => 'ALL_ACTIVE', service_id => '{dpf}');",
        f"UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', "
        f"state_reason = 'dpuservice_created', applied_revision = desired_revision WHERE service_id = '{dpf}';",
        attach(inst[1], dpf),
        f"SELECT extsvc.set_instance_extension_services('{inst[1]}', '[]');",
        # a host holds one live instance (issue 29): inst[1] goes (deleting,
        # its REMOVING rows wait) and inst[0] takes the host (a hand-over)
        f"SELECT extsvc.delete_instance('{inst[1]}');",
        f"SELECT extsvc.upsert_instance('{inst[0]}', {q(T1)}, '{host_a}', ARRAY['{dpus[1]}', '{dpus[2]}']::text[]);",
        attach(inst[0], dpf),
        f"SELECT extsvc.update_service('{dpf}', {chart(chartVersion='1.2.4')});",
        f"SELECT extsvc.update_service('{dpf}', {chart(chartVersion='1.2.5', values={'a': 1})});",
        f"SELECT extsvc.rollback_service('{dpf}', 1);",
        # a site-wide service (admin) and a DPF service left FAILED
        f"SELECT extsvc.create_service({q(T1)}, 'dump-site', 'DPF_HELM_CHART', {chart(chartName='site')}, "
        f"deployment_scope => 'ALL_DPUS', service_id => '{site}');",
        f"SELECT extsvc.create_service({q(T1)}, 'dump-failed', 'DPF_HELM_CHART', {chart(chartName='bad')}, "
        f"dpu_target => 'PRIMARY', service_id => '{failed}');",
        f"UPDATE extsvc.service_records SET lifecycle_state = 'FAILED', state_actor = 'worker', "
        f"state_reason = 'permanent_error', status_message = 'the API said 422' WHERE service_id = '{failed}';",
        # a deleted and purged Pod service (the audit tables)
        f"SELECT extsvc.create_service({q(T2)}, 'dump-gone', 'KUBERNETES_POD', 'kind: Pod', service_id => '{gone}');",
        f"SELECT extsvc.delete_service('{gone}');",
        "SELECT count(*) FROM extsvc.purge_deleted(interval '0 seconds');",
        # leases of the old server's worker (inst[1] is being deleted, above)
        f"SELECT count(*) FROM extsvc.claim('service', {q(OLD_WORKER)}, 2, 600);",
        f"SELECT count(*) FROM extsvc.claim('dpu', {q(OLD_WORKER)}, 2, 600);",
    ]
    c.script(SRC, "\n".join(sql))
    return {"dpf": str(dpf), "pod": str(pod), "inst": [str(i) for i in inst], "dpus": dpus}


def compare(c, target):
    src_rel, dst_rel = c.member_relations(SRC), c.member_relations(target)
    c.check(src_rel == dst_rel, f"the restored database has the same {len(src_rel)} tables and sequences")
    config = {r[0] for r in c.sql(SRC, "SELECT unnest(extconfig)::regclass::text FROM pg_extension "
                                       "WHERE extname = 'nico_extsvc'")}
    tables = c.member_relations(SRC, "r")
    seqs = sorted(set(c.member_relations(SRC, "S")) | set(c.identity_sequences(SRC)))
    total = 0
    src, dst = c.all_rows(SRC, tables), c.all_rows(target, tables)
    for t in tables:
        a, b = src[t], dst[t]
        total += len(a)
        if t == IDENTITY:
            identity_checks(c, a, b, target)
            continue
        note = (" (seed rows of the install script, not dumped)" if t in SEED
                else " (operational state, not dumped)" if t in NOT_DUMPED
                else "" if t in config else " (NOT registered for pg_dump)")
        if not c.check(a == b, f"{t}: {len(a)} rows, restored {len(b)}{note}"):
            print(unified(a, b, f"{SRC}:{t}", f"{target}:{t}", limit=20))
    for sq in seqs:
        a, b = c.sequence_state(SRC, sq), c.sequence_state(target, sq)
        c.check(a == b, f"sequence {sq}: {a} restored as {b}")
    c.check(total > 0, f"{total} rows compared")
    missing = sorted(set(tables) - SEED - NOT_DUMPED - config)
    c.check(not missing, f"every table but the seed tables is registered with pg_extension_config_dump {missing or ''}")
    c.check(not (SEED & config), "the seed tables are not registered")


def identity_checks(c, src_rows, dst_rows, target):
    """Issue 25: the restored copy carries the original's recorded identity next to the one
    its own CREATE EXTENSION recorded, so its worker would pause (a restore must not write for
    the original's site unannounced), until an admin confirms it."""
    own = c.sql(target, "SELECT c.system_identifier::text, d.oid::text FROM pg_control_system() c, pg_database d "
                        "WHERE d.datname = current_database()")[0]
    kept = [r for r in dst_rows if r in src_rows]
    extra = [r for r in dst_rows if r not in src_rows]
    c.check(len(src_rows) == 1 and kept == src_rows and len(extra) == 1,
            f"{IDENTITY}: the original's row restored ({len(kept)} of {len(src_rows)}), "
            f"plus the restore's own install row ({len(extra)})")
    c.check(c.one(SRC, "SELECT matches FROM extsvc.database_identity_status()") == "t",
            "the original database matches its recorded identity")
    status = c.sql(target, "SELECT matches, current_identity, recorded FROM extsvc.database_identity_status()")[0]
    c.check(status[0] == "f" and f"oid {own[1]}" in status[1],
            f"the restored copy does not match (its worker writes nothing): recorded {status[2]}")
    c.sql(target, "SELECT extsvc.confirm_database_identity()")
    c.check(c.one(target, "SELECT matches FROM extsvc.database_identity_status()") == "t"
            and c.one(target, f"SELECT count(*) FROM {IDENTITY}") == "1",
            "after extsvc.confirm_database_identity() it matches, with its own identity only")


def api_after_restore(c, ids):
    db = DST
    dpf = ids["dpf"]
    before = c.sql(db, f"SELECT desired_revision, version_ctr FROM extsvc.services WHERE service_id = '{dpf}'")[0]
    after = c.sql(db, f"SELECT desired_revision, version_ctr, lifecycle_state FROM "
                      f"extsvc.update_service('{dpf}', {chart(chartVersion='2.0.0')})")[0]
    c.check(int(after[0]) == int(before[0]) + 1 and int(after[1]) == int(before[1]) + 1,
            f"update of a restored service: revision {before[0]} -> {after[0]}, {after[2]}")
    revs = c.sql(db, f"SELECT revision, rollback_of FROM extsvc.service_revisions('{dpf}') ORDER BY revision")
    c.check([r[0] for r in revs] == ["1", "2", "3", "4", "5"] and revs[3][1] == "1",
            f"service_revisions on the restored service: {[r[0] for r in revs]}, rollback_of kept")
    # a new service writes history rows: ids continue after the restored ones
    new = c.one(db, f"SELECT service_id FROM extsvc.create_service({q(T2)}, 'after-restore', 'KUBERNETES_POD', "
                    f"'kind: Pod')")
    newest = c.one(db, f"SELECT max(id) FROM extsvc.service_state_history WHERE service_id = '{new}'")
    older = c.one(db, f"SELECT max(id) FROM extsvc.service_state_history WHERE service_id <> '{new}'")
    c.check(int(newest) > int(older), f"new history id {newest} follows the restored ones (max {older})")
    cv = c.one(db, attach(ids['inst'][2], new).rstrip(";"))
    inst = c.sql(db, f"SELECT config_version, jsonb_array_length(services) FROM "
                     f"extsvc.get_instance('{ids['inst'][2]}')")[0]
    c.check(inst[0] == cv and int(inst[1]) >= 1, f"attach on the restored database: config_version {cv}")
    st = c.sql(db, f"SELECT count(*) FROM extsvc.instance_extension_service_status('{ids['inst'][0]}')")
    c.check(int(st[0][0]) == 2, "per-DPU status of a restored instance: its two network DPUs")
    leased = c.one(db, f"SELECT count(*) FROM extsvc.reconciliation_queue WHERE lease_owner = {q(OLD_WORKER)}")
    freed = c.one(db, f"SELECT extsvc.release_leases({q(OLD_WORKER)})")
    c.check(int(leased) > 0 and int(freed) >= int(leased),
            f"{leased} restored service lease(s) of the old server's worker, freed by release_leases: {freed}")


def main():
    c = Conn()
    for db in (SRC, DST, DATA):
        c.sql("postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    for db in (SRC, DST, DATA):
        c.sql("postgres", f"CREATE DATABASE {db}")
    try:
        ids = fill(c)
        with tempfile.TemporaryDirectory() as tmp:
            dump = os.path.join(tmp, "extsvc.dump")
            c.run("pg_dump", "-Fc", "-f", dump, SRC)
            # issue 27: the plain commands, no flags, no PGOPTIONS (a failed statement makes
            # pg_restore exit 1, which fails the suite): the rows are history already, and
            # the triggers take what a restore loads (COPY) as it is
            c.run("pg_restore", "-d", DST, dump)
            # and the rows alone, into a fresh install of the same version
            data = os.path.join(tmp, "extsvc-data.sql")
            c.run("pg_dump", "--data-only", "-f", data, SRC)
            c.sql(DATA, "CREATE EXTENSION nico_extsvc")
            c.run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DATA, "-f", data)
        print("-- pg_restore of pg_dump -Fc into an empty database")
        compare(c, DST)
        print("-- psql of pg_dump --data-only into a fresh install")
        compare(c, DATA)
        if c.failures:
            print("       (the API is not tried on a restored database that lacks rows)")
        else:
            api_after_restore(c, ids)
    finally:
        if not os.environ.get("KEEP_DBS"):
            for db in (SRC, DST, DATA):
                c.sql("postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", check=False)
    finish(c, "dump-restore")


if __name__ == "__main__":
    main()
