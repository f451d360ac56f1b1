#!/usr/bin/python3
"""nico_extsvc 0.1.0 -> 0.2.0 -> current and 0.2.0 -> current (suite upgrade).

One throw-away server with today's library preloaded and a worker configured
against dpfsim (extsvc_testkit.harness Env), extsvc.database = extsvc_upg.

1. 0.1.0 with today's library: CREATE EXTENSION nico_extsvc VERSION '0.1.0'
   works, the 0.1.0 API fills a database (services of both types, an update,
   DPUs, instances, attachments, a detach, a played worker write), the
   0.1.0 signatures of the C functions answer as 0.1.0 did.
2. ALTER EXTENSION nico_extsvc UPDATE (through 0.2.0 to the current version,
   CURRENT below, read from the control file): the schema equals a fresh
   install's (pg_dump -s, and pg_dump -s --binary-upgrade, which is what
   shows the extension's own objects; a unified diff when not), so do the
   seed tables and the pg_dump registrations; every row and column 0.1.0 had
   is intact; the current API works on the upgraded rows. The same again
   from a database filled at 0.2.0.
3. The worker: with the SQL at 0.1.0 it waits and logs once, naming both
   versions and the command; no Kubernetes call is made; after ALTER
   EXTENSION UPDATE it resumes by itself and creates the DPUService.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import json
import os
import re
import subprocess
import time
import uuid

import pgq  # noqa: E402  (test/upgrade/pgq.py, beside this file)
from extsvc_testkit import harness  # noqa: E402
from extsvc_testkit.harness import PG_USER, Env, wait_until  # noqa: E402
from pgq import Conn, chart, q, unified  # noqa: E402

pgq.PGBIN = pgq.PGBIN or harness.PGBIN

WORKER_DB, OLD, OLD2, FRESH = "extsvc_upg", "extsvc_upg_data", "extsvc_upg_data_020", "extsvc_upg_fresh"
NAMES = "extsvc_upg_names"
CURRENT = re.search(r"^default_version\s*=\s*'([^']+)'",
                    open(os.path.join(harness.ROOT, "nico_extsvc.control")).read(), re.M).group(1)
T1, T2 = "tenant-upg-a", "tenant-upg-b"
SEED = ("extsvc.lifecycle_transitions", "extsvc.placement_transitions")
KEYS = {  # key columns printed per table (everything is compared anyway)
    "extsvc.service_records": ["service_id", "lifecycle_state", "version_ctr", "desired_revision",
                               "applied_revision"],
}


def attach(inst, sid, *more):
    """set_instance_extension_services with the service's current version."""
    extra = "".join(f", {m}" for m in more)
    return (f"SELECT extsvc.set_instance_extension_services('{inst}', (SELECT jsonb_build_array(jsonb_build_object("
            f"'service_id', service_id, 'version', version)) FROM extsvc.services WHERE service_id = '{sid}'){extra});")


def fill_010(c, db):
    """Through the 0.1.0 API, in one psql session."""
    host_a, host_b = uuid.uuid4(), uuid.uuid4()
    dpus = [uuid.uuid4() for _ in range(3)]
    inst = [uuid.uuid4() for _ in range(3)]
    pod, dpf, creating = (uuid.uuid4() for _ in range(3))
    sql = ["SELECT extsvc.allow_chart('oci://registry.example.com/charts');"]
    for n, d in enumerate(dpus):
        sql.append(f"SELECT extsvc.register_dpu('{d}', '{host_a}', 'upg-dpu-{n}', 'upg-node-{n}', {str(n == 0).lower()});")
    sql += [
        f"SELECT extsvc.upsert_instance('{inst[0]}', {q(T1)}, '{host_a}', ARRAY['{dpus[1]}', '{dpus[2]}']::uuid[]);",
        f"SELECT extsvc.upsert_instance('{inst[1]}', {q(T1)}, '{host_a}', ARRAY['{dpus[0]}']::uuid[]);",
        f"SELECT extsvc.upsert_instance('{inst[2]}', {q(T2)}, '{host_b}', NULL, false);",
        f"SELECT extsvc.create_service({q(T2)}, 'upg-pod', 'KUBERNETES_POD', 'kind: Pod', service_id => '{pod}');",
        f"SELECT extsvc.update_service('{pod}', 'kind: Pod' || chr(10) || 'spec: {{}}');",
        attach(inst[2], pod),
        f"SELECT extsvc.set_instance_extension_services('{inst[2]}', '[]');",          # detach: tombstone
        f"SELECT extsvc.create_service({q(T1)}, 'upg-dpf', 'DPF_HELM_CHART', {chart()}, dpu_target => 'ALL_ACTIVE', "
        f"service_id => '{dpf}');",
        # the worker's write, played
        f"UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', "
        f"state_reason = 'dpuservice_created', applied_revision = desired_revision WHERE service_id = '{dpf}';",
        attach(inst[0], dpf),
        attach(inst[1], dpf),
        f"SELECT extsvc.set_instance_extension_services('{inst[1]}', '[]');",          # REMOVING rows
        f"SELECT extsvc.update_service('{dpf}', {chart(chartVersion='1.2.4')});",      # UPDATING, revision 2
        f"SELECT extsvc.create_service({q(T1)}, 'upg-creating', 'DPF_HELM_CHART', {chart(chartName='other')}, "
        f"dpu_target => 'PRIMARY', service_id => '{creating}');",
        # 0.3.0 keeps one live instance per host (issue 29): the second one
        # of host_a is being deleted, its REMOVING rows wait (a hand-over)
        f"SELECT extsvc.delete_instance('{inst[1]}');",
    ]
    c.script(db, "\n".join(sql))
    return {"pod": str(pod), "dpf": str(dpf), "creating": str(creating), "inst": [str(i) for i in inst],
            "dpus": dpus}


def check_010_surface(c, db, ids):
    """The 0.1.0 SQL declarations of C functions against today's library."""
    doc = json.loads(c.one(db, f"SELECT extsvc.render_dpuservice('{ids['dpf']}')::text"))
    ds = doc["spec"]["serviceDaemonSet"]
    c.check("annotations" not in ds and "labels" not in ds and "nodeSelector" in ds
            and doc["spec"]["helmChart"]["source"]["version"] == "1.2.4",
            "0.1.0 render_dpuservice (4-argument C entry) renders as 0.1.0 did: no pod label or revision annotation")
    c.check(c.one(db, "SELECT extsvc.dpf_service_name('00000000-0000-0000-0000-000000000001', 'V1-T1')")
            .startswith("extsvc-"), "0.1.0 dpf_service_name works")


def snapshot(c, db):
    """Every row of every table as of 0.1.0 with 0.1.0's columns (the seed
    tables are compared with a fresh install instead)."""
    tables = [t for t in c.member_relations(db, "r") if t not in SEED]
    cols = {}
    for t, col in c.sql(db, f"SELECT attrelid::regclass::text, attname FROM pg_attribute WHERE attrelid = ANY "
                            f"(ARRAY[{','.join(q(t) for t in tables)}]::regclass[]) AND attnum > 0 "
                            f"AND NOT attisdropped ORDER BY attrelid, attnum"):
        cols.setdefault(t, []).append(col)
    rows = c.all_rows(db, tables, cols)
    return {t: (cols[t], rows[t]) for t in tables}


def normalize(text):
    """Takes out what differs between any two databases, however made: the
    random key of pg_dump's \\restrict lines, what --binary-upgrade pins for
    pg_upgrade (OIDs, transaction ids, attribute LSNs), and the positions of
    the sequences registered for pg_dump (data, compared as data)."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\\(un)?restrict \S+$", r"\\\1restrict KEY", line)
        line = re.sub(r"'\d+'::pg_catalog\.oid\b", "'OID'::pg_catalog.oid", line)
        if "binary_upgrade_create_empty_extension" in line:
            line = re.sub(r"'\{[\d,]*\}'", "'{OIDS}'", line)
        line = re.sub(r"'\{[0-9A-F/,]*\}'::pg_catalog\.pg_lsn\[\]", "'{LSNS}'::pg_catalog.pg_lsn[]", line)
        line = re.sub(r"relfrozenxid = '\d+', relminmxid = '\d+'", "relfrozenxid = 'XID', relminmxid = 'MXID'", line)
        line = re.sub(r"^WHERE oid = '\d+';$", "WHERE oid = 'OID';", line)
        # data, not schema: the registered sequences' positions (checked as data)
        line = re.sub(r"^(SELECT pg_catalog\.setval\('[^']+', )\d+, (true|false)\);$", r"\1N, B);", line)
        out.append(line)
    return out


def schema_checks(c, old=OLD, from_version="0.1.0"):
    for flags, what in ((["-s"], "pg_dump -s"),
                        (["-s", "--binary-upgrade"], "pg_dump -s --binary-upgrade (the extension's objects)")):
        a = normalize(c.run("pg_dump", *flags, old))
        b = normalize(c.run("pg_dump", *flags, FRESH))
        if not c.check(a == b, f"{what}: upgraded {from_version} equals a fresh {CURRENT} install ({len(a)} lines)"):
            print(unified(b, a, f"fresh {CURRENT} ({FRESH})", f"{from_version} + UPDATE ({old})"))
    reg = ("SELECT c::regclass::text, coalesce(w, '') FROM pg_extension, unnest(extconfig, extcondition) u(c, w) "
           "WHERE extname = 'nico_extsvc' ORDER BY 1")
    a, b = c.sql(old, reg), c.sql(FRESH, reg)
    c.check(a == b and len(a) > 0, f"the same {len(b)} tables and sequences registered for pg_dump")
    for t in SEED:
        a, b = c.rows(old, t), c.rows(FRESH, t)
        if not c.check(a == b, f"seed table {t}: {len(a)} rows, fresh {len(b)}"):
            print(unified(b, a, "fresh", "upgraded", limit=30))


def data_checks(c, before, ids, old=OLD, from_version="0.1.0"):
    now = c.all_rows(old, list(before), {t: cols for t, (cols, _) in before.items()})
    for t, (cols, rows) in before.items():
        after = now[t]
        if not c.check(after == rows, f"{t}: {len(rows)} rows, all {len(cols)} {from_version} columns intact"):
            print(unified(rows, after, from_version, CURRENT, limit=20))
    states = c.sql(old, "SELECT service_name, lifecycle_state, version_ctr, desired_revision, applied_revision "
                        "FROM extsvc.services ORDER BY service_name")
    c.check(states == [["upg-creating", "CREATING", "1", "1", None], ["upg-dpf", "UPDATING", "2", "2", "1"],
                       ["upg-pod", "READY", "2", None, None]], f"services' states and revisions: {states}")
    bad = c.one(old, "SELECT count(*) FROM extsvc.instances "
                     "WHERE config_version_text IS NULL OR config_version_text NOT LIKE 'V' || config_version || '-T%'")
    c.check(bad == "0", "every upgraded instance has config_version_text V<config_version>-T<micros>")


def api_checks(c, ids):
    db, dpf, inst = OLD, ids["dpf"], ids["inst"]
    gi = c.sql(db, f"SELECT config_version, config_version_text, dpf_managed, jsonb_array_length(services) "
                   f"FROM extsvc.get_instance('{inst[0]}')")[0]
    c.check(gi[0] == "2" and gi[1].startswith("V2-T") and gi[3] == "1", f"{CURRENT} get_instance on an upgraded instance: {gi}")
    revs = c.sql(db, f"SELECT revision, is_desired, is_applied FROM extsvc.service_revisions('{dpf}') ORDER BY revision")
    c.check(revs == [["1", "f", "t"], ["2", "t", "f"]], f"{CURRENT} service_revisions: {revs}")
    up = c.sql(db, f"SELECT lifecycle_state, desired_revision, version_ctr FROM "
                   f"extsvc.update_service('{dpf}', {chart(chartVersion='1.3.0')}, tenant_organization_id => {q(T1)})")
    c.check(up == [["UPDATING", "3", "3"]], f"{CURRENT} update_service (new tenant argument): {up}")
    rb = c.sql(db, f"SELECT desired_revision FROM extsvc.rollback_service('{dpf}', 1)")
    c.check(rb == [["4"]], f"{CURRENT} rollback_service to revision 1: revision {rb}")
    doc = json.loads(c.one(db, f"SELECT extsvc.render_dpuservice('{dpf}')::text"))
    ann = doc["spec"]["serviceDaemonSet"].get("annotations", {})
    c.check(ann.get("nico/extension-service-revision") == "4",
            f"{CURRENT} render_dpuservice carries the revision annotation")
    st = c.sql(db, f"SELECT count(*) FROM extsvc.instance_extension_service_status('{inst[0]}', {q(T1)})")
    c.check(st == [["2"]], f"{CURRENT} instance_extension_service_status on upgraded attachments: 2 DPUs")
    err = c.sql(db, f"SELECT * FROM extsvc.get_instance('{uuid.uuid4()}')", check=False)
    c.check(isinstance(err, str) and err.startswith("P0002"), f"{CURRENT} get_instance of an unknown instance: P0002")
    new = c.one(db, f"SELECT service_id FROM extsvc.create_service({q(T2)}, 'upg-pod-2', 'KUBERNETES_POD', 'kind: Pod')")
    cv = c.one(db, attach(inst[2], new, "NULL", q(T2)).rstrip(";"))
    c.check(cv == "4", f"{CURRENT} attach on an upgraded instance: config_version {cv}")
    machine_id_checks(c, db, ids)


def machine_id_checks(c, db, ids):
    """Issue 22: machine ids are text now; the 0.1.0/0.2.0 uuids are kept as
    their text and stay usable; new ones must be NICo MachineIds."""
    types = c.sql(db, "SELECT attrelid::regclass::text || '.' || attname, format_type(atttypid, atttypmod) "
                      "FROM pg_attribute WHERE attrelid::regclass::text IN ('extsvc.dpus', 'extsvc.instances', "
                      "'extsvc.dpf_extension_service_attachments', 'extsvc.dpu_reconciliations', "
                      "'extsvc.site_service_dpu_status', 'extsvc.dpu_state_history', "
                      "'extsvc.finished_instance_deletions') "
                      "AND attname IN ('machine_id', 'host_machine_id', 'dpu_machine_id', 'network_dpus') ORDER BY 1")
    c.check(all(t in ("text", "text[]") for _, t in types) and len(types) == 9,
            f"every machine-id column is text: {', '.join(n + ' ' + t for n, t in types)}")
    dpus = [str(d) for d in ids["dpus"]]
    kept = c.sql(db, "SELECT machine_id FROM extsvc.dpus ORDER BY dpu_device_name")
    c.check([r[0] for r in kept] == dpus, "the DPUs' uuids are kept as their text form")
    net = c.one(db, f"SELECT network_dpus::text FROM extsvc.instances WHERE instance_id = '{ids['inst'][0]}'")
    c.check(net == "{" + ",".join(sorted(dpus[1:3])) + "}" or net == "{" + ",".join(dpus[1:3]) + "}",
            f"network_dpus kept as text: {net}")
    feed = c.sql(db, f"SELECT count(*) FROM extsvc.dpu_agent_extension_services('{dpus[0].upper()}')", check=False)
    c.check(feed == [["0"]], f"a kept uuid id is still accepted (any case) by the agent feed: {feed}")
    host = c.one(db, "SELECT host_machine_id FROM extsvc.dpus LIMIT 1")
    new = "fm100dsupg" + "0" * 49
    c.sql(db, f"SELECT extsvc.register_dpu('{new}', '{host}', 'upg-dpu-new', 'upg-node-new')")
    c.check(c.one(db, f"SELECT host_machine_id FROM extsvc.dpus WHERE machine_id = '{new}'") == host,
            "a NICo MachineId DPU registers on a host kept from before")
    err = c.sql(db, f"SELECT extsvc.register_dpu('{uuid.uuid4()}', '{host}', 'upg-dpu-x', 'upg-node-x')", check=False)
    c.check(isinstance(err, str) and err.startswith("22023"), f"a new uuid DPU id is refused: {str(err)[:60]}")
    c.sql(db, f"SELECT extsvc.deregister_dpu('{dpus[2]}')")
    c.check(c.one(db, f"SELECT deregistered_at IS NOT NULL FROM extsvc.dpus WHERE machine_id = '{dpus[2]}'") == "t",
            "a DPU kept from before can be deregistered by its id")


def name_checks(c):
    """Issue 29, item 7: 0.2.0 stored names as given; 0.3.0 stores them in NFC
    without invisible characters. The upgrade brings live names to that form,
    and stops, naming them, where two live names of one tenant would become
    equal; renamed with the 0.2.0 API, the upgrade goes through."""
    c.recreate(NAMES)
    c.sql(NAMES, "CREATE EXTENSION nico_extsvc VERSION '0.2.0'")
    ids = {k: str(uuid.uuid4()) for k in ("nfc", "nfd", "zw", "plain", "nbsp", "nfd_only", "other", "gone")}
    names = {"nfc": "'caf' || chr(233)", "nfd": "'cafe' || chr(769)", "zw": "'agent' || chr(8203)",
             "plain": "'AGENT'", "nbsp": "'solo' || chr(160) || 'name'", "nfd_only": "'man' || chr(771) || 'ana'",
             "other": "'cafe' || chr(769)", "gone": "'agent'"}
    for k, expr in names.items():
        tenant = T2 if k == "other" else T1
        c.sql(NAMES, f"SELECT extsvc.create_service({q(tenant)}, {expr}, 'KUBERNETES_POD', 'kind: Pod', "
                     f"service_id => '{ids[k]}')" if k != "gone" else
              f"SELECT extsvc.create_service({q(tenant)}, {expr} || ' old', 'KUBERNETES_POD', 'kind: Pod', "
              f"service_id => '{ids[k]}')")
    # two live instances of two tenants on one host (0.2.0 allowed it)
    host, inst_a, inst_b = (str(uuid.uuid4()) for _ in range(3))
    c.sql(NAMES, f"SELECT extsvc.upsert_instance('{inst_a}', {q(T1)}, '{host}', NULL, false);"
                 f"SELECT extsvc.upsert_instance('{inst_b}', {q(T2)}, '{host}', NULL, false)")
    # a DELETED service keeps its name (history)
    c.sql(NAMES, f"SELECT extsvc.delete_service('{ids['gone']}');"
                 f"UPDATE extsvc.service_records SET service_name = 'agent' || chr(8203) WHERE service_id = '{ids['gone']}'")
    c.check(c.one(NAMES, "SELECT count(*) FROM extsvc.services WHERE lifecycle_state <> 'DELETED'") == "7",
            "0.2.0 accepted look-alike names in one tenant (cafe in two spellings, agent with a zero-width space)")
    before = c.sql(NAMES, "SELECT service_id, service_name FROM extsvc.service_records ORDER BY service_id")
    args = [tool_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", *c.args, "-d", NAMES, "-c", "ALTER EXTENSION nico_extsvc UPDATE"]
    r = subprocess.run(args, capture_output=True, text=True)
    c.check(r.returncode != 0 and "service names that differ only by Unicode normalization or invisible characters" in r.stderr
            and sorted([ids["nfc"], ids["nfd"]])[0] in r.stderr and ids["zw"] in r.stderr and ids["plain"] in r.stderr
            and ids["other"] not in r.stderr and "extsvc.update_service" in r.stderr,
            "the upgrade stops at look-alike live names of one tenant and names both groups: "
            + " | ".join(ln.strip() for ln in r.stderr.splitlines() if ln.startswith(("ERROR", "DETAIL"))))
    c.check(c.one(NAMES, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == "0.2.0"
            and c.sql(NAMES, "SELECT service_id, service_name FROM extsvc.service_records ORDER BY service_id") == before,
            "... and changes nothing (still 0.2.0, names as they were)")
    c.sql(NAMES, f"SELECT extsvc.update_service('{ids['nfd']}', service_name => 'cafe two');"
                 f"SELECT extsvc.update_service('{ids['plain']}', service_name => 'agent two')")
    r = subprocess.run(args, capture_output=True, text=True)
    c.check(r.returncode != 0 and "hosts with more than one live instance" in r.stderr and host in r.stderr
            and inst_a in r.stderr and inst_b in r.stderr and "extsvc.delete_instance" in r.stderr,
            "after renaming one of each pair with the 0.2.0 API, the upgrade stops at the host with two live "
            "instances (issue 29, item 8) and names them: "
            + " | ".join(ln.strip() for ln in r.stderr.splitlines() if ln.startswith(("ERROR", "DETAIL"))))
    c.check(c.one(NAMES, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == "0.2.0",
            "... and changes nothing")
    c.sql(NAMES, f"SELECT extsvc.delete_instance('{inst_b}')")
    c.sql(NAMES, "ALTER EXTENSION nico_extsvc UPDATE")
    c.check(c.one(NAMES, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == CURRENT,
            f"after deleting one of the two instances with the 0.2.0 API the upgrade to {CURRENT} goes through")
    err = c.sql(NAMES, f"SELECT extsvc.upsert_instance('{uuid.uuid4()}', {q(T2)}, '{host}', NULL, false)", check=False)
    c.check(isinstance(err, str) and err.startswith("23505"),
            f"{CURRENT}: a second live instance on the host is refused: {err}")
    got = dict(c.sql(NAMES, "SELECT service_id, service_name = CASE service_id "
                            f"WHEN '{ids['nfc']}' THEN 'caf' || chr(233) WHEN '{ids['zw']}' THEN 'agent' "
                            f"WHEN '{ids['nbsp']}' THEN 'solo name' WHEN '{ids['nfd_only']}' THEN 'ma' || chr(241) || 'ana' "
                            f"WHEN '{ids['other']}' THEN 'caf' || chr(233) WHEN '{ids['gone']}' THEN 'agent' || chr(8203) "
                            "ELSE service_name END FROM extsvc.service_records"))
    c.check(set(got.values()) == {"t"},
            "live names are stored in NFC without invisible characters (zero-width space dropped, no-break space a "
            f"blank), another tenant's too; a DELETED service keeps its name: {got}")
    err = c.sql(NAMES, f"SELECT extsvc.create_service({q(T1)}, 'CAFE' || chr(769), 'KUBERNETES_POD', 'kind: Pod')", check=False)
    c.check(isinstance(err, str) and err.startswith("23505"), f"{CURRENT}: another spelling of an upgraded name is taken: {err}")
    err = c.sql(NAMES, f"SELECT extsvc.create_service({q(T1)}, 'x' || chr(8203), 'KUBERNETES_POD', 'kind: Pod')", check=False)
    c.check(isinstance(err, str) and err.startswith("22023"), f"{CURRENT}: a zero-width space is refused: {err}")


def tool_psql():
    return pgq.tool("psql")


def worker_checks(c, env, dpf_name, sid):
    log = env.pg.logfile

    def lines(pattern):
        with open(log, errors="replace") as f:
            return [ln for ln in f if re.search(pattern, ln)]

    waiting = (r'extension nico_extsvc in database "extsvc_upg" is version 0\.1\.0 but the library is version '
               + re.escape(CURRENT) + '; waiting')
    wait_until(lambda: lines(waiting), timeout=30, what="the worker's LOG line about the versions")
    hint = lines(r'HINT:\s+Run ALTER EXTENSION nico_extsvc UPDATE in database "extsvc_upg"')
    c.check(bool(hint), "the worker logs the versions and the command: " + lines(waiting)[0].split("LOG:")[-1].strip())
    time.sleep(6)  # a few more passes of the worker's 5 s wait
    c.check(len(lines(waiting)) == 1, f"... once ({len(lines(waiting))} line(s) after 6 s more)")
    rows = c.sql(WORKER_DB, "SELECT * FROM extsvc.worker_status()")
    c.check(len(rows) == 1 and len(rows[0]) == 9 and int(rows[0][2]) > 1,
            f"0.1.0 worker_status() (9 columns) with today's library: the waiting worker's slot, "
            f"{rows[0][2] if rows else '?'} iterations")
    c.check(c.one(WORKER_DB, f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{sid}'") == "CREATING"
            and env.sim.dpuservice(dpf_name) is None,
            "while the SQL is 0.1.0 the worker does nothing: service CREATING, no DPUService in the cluster")
    noise = lines(r"nico_extsvc: (claim failed|releasing old leases failed)|function extsvc\.\S+ does not exist")
    c.check(not noise, f"no failed worker SQL calls in the log ({len(noise)})")
    c.sql(WORKER_DB, "ALTER EXTENSION nico_extsvc UPDATE")
    t0 = time.time()
    wait_until(lambda: c.one(WORKER_DB, f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{sid}'")
               == "READY", timeout=30, what="READY after the update")
    obj = env.sim.dpuservice(dpf_name)
    ann = ((obj or {}).get("spec", {}).get("serviceDaemonSet", {}).get("annotations", {}))
    c.check(obj is not None and ann.get("nico/extension-service-revision") == "1",
            f"after ALTER EXTENSION UPDATE the worker resumed by itself: READY in {time.time() - t0:.1f} s, "
            f"DPUService {dpf_name} created with the {CURRENT} rendering")
    c.check(bool(lines(r"extension nico_extsvc is version " + re.escape(CURRENT) + " now; resuming")),
            "and logged that it resumed")


ADOPT_DB, ADOPT_SITE = "extsvc_upg_adopt", "upg-site"
DS_PATH = "/apis/apps/v1/namespaces/dpf-operator-system/daemonsets"
PODS_PATH = "/api/v1/namespaces/dpf-operator-system/pods"


def workload(sim, sid, name):
    """(DaemonSet generation, its pods' uids) of a service in dpfsim's DPU cluster."""
    _, dss = sim.kube("GET", DS_PATH, base=sim.dpu)
    gens = [d["metadata"].get("generation") for d in dss["items"] if name in d["metadata"]["name"]]
    _, pods = sim.kube("GET", f"{PODS_PATH}?labelSelector=nico%2Fextension-service-id%3D{sid}", base=sim.dpu)
    return gens, sorted(p["metadata"]["uid"] for p in pods["items"])


def adoption_checks(c0, env):
    """Issue 25: a DPUService made by a 0.2.0 worker (no nico/site label) is adopted at the
    0.2.0 -> 0.3.0 upgrade by one metadata merge patch: no spec change, no re-create, the
    DaemonSet and its pods untouched; the registry backfill lets the site remove its own key."""
    site = Env(dpus=2, workers=1, sim=env.sim, site_id=ADOPT_SITE,
               extra={"extsvc.database": f"'{ADOPT_DB}'"})
    c = Conn(host=site.pg.dir, port=site.pg.port, user=PG_USER)
    try:
        c.recreate(ADOPT_DB)
        c.sql(ADOPT_DB, "CREATE EXTENSION nico_extsvc VERSION '0.2.0'")
        c.sql(ADOPT_DB, "SELECT extsvc.allow_chart('oci://registry.example.com/charts')")
        host, dpu, inst = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        c.sql(ADOPT_DB, f"SELECT extsvc.register_dpu('{dpu}', '{host}', '{harness.device(1)}', '{harness.node(1)}', true)")
        c.sql(ADOPT_DB, f"SELECT extsvc.upsert_instance('{inst}', {q(T1)}, '{host}')")
        sid, name, key = c.sql(ADOPT_DB, f"SELECT service_id, dpf_service_name, placement_label_key FROM "
                                         f"extsvc.create_service({q(T1)}, 'upg-adopt', 'DPF_HELM_CHART', {chart()}, "
                                         f"dpu_target => 'PRIMARY')")[0]
        # the 0.2.0 worker's writes, played: the DPUService as 0.2.0 rendered it (the 0.2.0 SQL
        # declaration of the C renderer), READY, attached, the DPU labelled
        obj = json.loads(c.one(ADOPT_DB, f"SELECT extsvc.render_dpuservice('{sid}')::text"))
        c.check("nico/site" not in obj["metadata"]["labels"], "0.2.0 render_dpuservice: no nico/site label")
        code, created = env.sim.kube("POST", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices", obj)
        c.check(code == 201, f"the 0.2.0-era DPUService {name} created ({code})")
        c.sql(ADOPT_DB, f"UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', "
                        f"state_reason = 'dpuservice_created', applied_revision = desired_revision WHERE service_id = '{sid}'")
        c.sql(ADOPT_DB, attach(inst, sid).rstrip(";"))
        code, _ = env.sim.kube("PATCH", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/"
                               f"dpudevices/{harness.device(1)}", {"spec": {"cluster": {"nodeLabels": {key: "enabled"}}}},
                               content_type="application/merge-patch+json")
        c.check(code == 200, "the DPU labelled as the 0.2.0 worker did")
        before = wait_until(lambda: (lambda w: w if w[0] and w[1] else None)(workload(env.sim, sid, name)),
                            timeout=30, what="the 0.2.0 service's DaemonSet and pod")
        svc_gen = env.sim.dpuservice(name)["metadata"]["generation"]
        # the 0.3.0 library waits for ALTER EXTENSION UPDATE and writes nothing meanwhile
        time.sleep(3)
        c.check("nico/site" not in env.sim.dpuservice(name)["metadata"]["labels"],
                "before the update the waiting worker wrote nothing")
        env.sim.ctl("DELETE", "/requests")
        c.sql(ADOPT_DB, "ALTER EXTENSION nico_extsvc UPDATE")
        c.check(c.one(ADOPT_DB, f"SELECT count(*) FROM extsvc.placement_keys WHERE label_key = '{key}'") == "1",
                "the upgrade registered the key the 0.2.0 worker wrote (registry backfill)")
        t0 = time.time()
        wait_until(lambda: env.sim.dpuservice(name)["metadata"]["labels"].get("nico/site") == ADOPT_SITE,
                   timeout=60, what="the site label on the 0.2.0-era DPUService")
        took = time.time() - t0
        after_obj = env.sim.dpuservice(name)
        c.check(after_obj["metadata"]["uid"] == created["metadata"]["uid"]
                and after_obj["metadata"]["generation"] == svc_gen,
                f"adopted {took:.1f} s after the update: same uid, generation {svc_gen} unchanged (no spec change)")
        writes = [r for r in env.sim.requests(500)["requests"]
                  if r["method"] in ("PATCH", "PUT", "POST", "DELETE") and "/dpuservices" in r["path"]]
        bodies = [json.loads(r["body"]) for r in writes]
        c.check(len(writes) == 1 and writes[0]["method"] == "PATCH" and set(bodies[0]) == {"metadata"}
                and bodies[0]["metadata"].get("labels") == {"nico/site": ADOPT_SITE}
                and "resourceVersion" in bodies[0]["metadata"],
                f"one metadata merge patch with the read's resourceVersion, nothing else: {bodies}")
        c.check(bool(writes) and all(r["user_agent"].startswith("nico_extsvc/") for r in writes),
                f"sent by the worker (User-Agent {writes[0]['user_agent'] if writes else None})")
        # the label is in the API before the pass's completion commits: wait for the history
        def adopted():
            return c.sql(ADOPT_DB, f"SELECT reason FROM extsvc.service_history WHERE service_id = '{sid}' "
                                   f"AND reason = 'site_label_adopted'")
        try:
            ev = wait_until(adopted, timeout=10, what="the adoption in the history")
        except AssertionError:
            ev = adopted()
        c.check(len(ev) == 1, "the history records the adoption (site_label_adopted)")
        time.sleep(3)
        after = workload(env.sim, sid, name)
        c.check(after == before, f"DaemonSet generation {before[0]} and pods {before[1]} unchanged: no restart")
        # the backfilled registry lets the upgraded site remove its own key
        c.sql(ADOPT_DB, f"SELECT extsvc.set_instance_extension_services('{inst}', '[]')")
        wait_until(lambda: key not in ((env.sim.kube("GET", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/"
                                                     f"dpf-operator-system/dpudevices/{harness.device(1)}")[1]
                                        .get("spec", {}).get("cluster", {}).get("nodeLabels")) or {}),
                   timeout=30, what="the key removed at the detach")
        c.check(True, f"the detach removed {key} from the DPU: the upgraded site cleans up its own keys")
    finally:
        c0.failures += c.failures
        site.close(keep=c.failures > 0 and bool(os.environ.get("KEEP_E2E")))


def main():
    env = Env(dpus=2, workers=1, extra={"extsvc.database": f"'{WORKER_DB}'"})
    c = Conn(host=env.pg.dir, port=env.pg.port, user=PG_USER)
    ok = False
    try:
        # the worker's database first: 0.1.0 and one DPF service waiting for it
        c.recreate(WORKER_DB)
        c.sql(WORKER_DB, "CREATE EXTENSION nico_extsvc VERSION '0.1.0'")
        c.sql(WORKER_DB, "SELECT extsvc.allow_chart('oci://registry.example.com/charts')")
        sid, dpf_name = c.sql(WORKER_DB, f"SELECT service_id, dpf_service_name FROM extsvc.create_service("
                                         f"{q(T1)}, 'upg-worker', 'DPF_HELM_CHART', {chart()}, dpu_target => 'PRIMARY')")[0]

        print("-- 0.1.0 with today's library")
        c.recreate(OLD)
        c.sql(OLD, "CREATE EXTENSION nico_extsvc VERSION '0.1.0'")
        c.check(c.one(OLD, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == "0.1.0",
                "CREATE EXTENSION nico_extsvc VERSION '0.1.0' with today's library")
        ids = fill_010(c, OLD)
        check_010_surface(c, OLD, ids)
        before = snapshot(c, OLD)
        for t in sorted(before):
            if t in KEYS:
                print(f"       {t}: " + "; ".join(map(str, c.rows(OLD, t, KEYS[t]))))

        print("-- ALTER EXTENSION nico_extsvc UPDATE")
        t0 = time.time()
        c.sql(OLD, "ALTER EXTENSION nico_extsvc UPDATE")
        c.check(c.one(OLD, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == CURRENT,
                f"updated to {CURRENT} in {time.time() - t0:.2f} s")
        c.recreate(FRESH)
        c.sql(FRESH, "CREATE EXTENSION nico_extsvc")
        schema_checks(c)
        data_checks(c, before, ids)
        api_checks(c, ids)

        print(f"-- 0.2.0 -> {CURRENT}")
        c.recreate(OLD2)
        c.sql(OLD2, "CREATE EXTENSION nico_extsvc VERSION '0.2.0'")
        ids2 = fill_010(c, OLD2)
        before2 = snapshot(c, OLD2)
        t0 = time.time()
        c.sql(OLD2, "ALTER EXTENSION nico_extsvc UPDATE")
        c.check(c.one(OLD2, "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'") == CURRENT,
                f"0.2.0 updated to {CURRENT} in {time.time() - t0:.2f} s")
        schema_checks(c, OLD2, "0.2.0")
        data_checks(c, before2, ids2, OLD2, "0.2.0")

        print(f"-- 0.2.0 -> {CURRENT}: service names (issue 29)")
        name_checks(c)

        print("-- the worker across the update")
        worker_checks(c, env, dpf_name, sid)

        print(f"-- 0.2.0 -> {CURRENT} with the worker: a 0.2.0-era DPUService adopted by the site label")
        adoption_checks(c, env)
        ok = c.failures == 0
    except Exception as e:  # noqa: BLE001 - report and fail
        c.failures += 1
        print(f"FAILED {type(e).__name__}: {e}")
        print(env.pg.tail_log(30))
    finally:
        env.close(keep=not ok and bool(os.environ.get("KEEP_E2E")))
    print(f"upgrade: {'all checks passed' if ok else str(c.failures) + ' check(s) FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
