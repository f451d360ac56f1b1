#!/usr/bin/python3
"""Model-based tests of the SQL contract (issue 13).

Random, seeded sequences of SQL API calls on DPF_HELM_CHART services and
their placement (create, update, rollback, retry, delete; register and
deregister DPU; upsert and delete instance; attach and detach through
set_instance_extension_services), mixed with invalid calls (unknown ids,
stale version counters, bad targets, bad data, foreign tenants, name
conflicts), run against a server with the extension and no worker doing
anything. Where a worker would answer, the script plays it through the
worker's own entry point (extsvc.complete for the service and the dpu
queue, with a lease it stamps itself), so the
states are those the API and the worker functions write, checked by their
transition tables.

Next to the calls runs a small reference model of the contract, written from
SPEC 2.4-2.10 and docs/sql-api.md / docs/lifecycle.md / docs/placement.md
(not from the SQL): what each call returns, or which SQLSTATE and constraint
name it raises; the lifecycle state, version_ctr, desired/applied revision of
every service; the Helm revisions (data, rollback_of, applied, superseded);
DPUs, instances (config_version, network DPUs, dpf_managed, deletion; a host
holds one live instance, issue 29: a second is refused with 23505, and the
placement-focused sequences hand a host over by deleting its instance), the
configured entries with tombstones, the attachment rows (placement,
deployment state, observed config_version), the per-entry summary
(aggregate state, configs_synced), the readiness gate, and the histories:
each service's lifecycle transitions and events (from, to, actor, reason) and
each attachment row's placement and deployment changes (actor, reason by
cause) — reference_model.py; the calls come from model_gen.py. After every call
the answer is compared with the model; after every sequence (and with
--check-every-op after every call) the whole observable state is.

Each call is its own transaction, as NICo makes them; between sequences the
extension's tables are emptied (triggers off) in one statement. (A sequence
in one rolled-back transaction would give every call the same now(), and the
contract depends on transactions: set_instance_extension_services refuses an
unresolvable target only for entries attached by that very call, and
rollback_of marks the revision created by the rollback's transaction.) Sequence k of
a run has seed S + k; a mismatch prints that seed, the operation trace and
the command that replays it (--seed N --sequences 1).

  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --own-cluster                # 10^4 sequences of 20 calls
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --ci                         # 300, state checked after every call (the suite)
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --seed 123 --sequences 1 -v  # replay one sequence, verbose
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --own-cluster --write-doc    # record the figures in docs/reliability.md

Connection: libpq's PG* variables (a superuser), or --own-cluster for a
throw-away cluster on a private port and socket directory (a copy of the test
command's template, extsvc_testkit.cluster). SQL goes through kept
connections of the test kit (extsvc_testkit.db). Creates and drops the
database extsvc_model and the role extsvc_model_api. Closing line:
`model_sql: N passed, N failed` (sequences); exit status 1 on any mismatch."""
import argparse
import collections
import copy
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from extsvc_testkit import cluster, db
from model_gen import gen
from reference_model import BAD_DATA, VARIANTS, Model, Refused

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DB = "extsvc_model"
API_ROLE = "extsvc_model_api"
PGBIN = os.environ.get("PGBIN", "")
CONNS = db.Conns()  # libpq's PG* variables (set by OwnCluster when it makes the server)


def tool(name):
    return os.path.join(PGBIN, name) if PGBIN else name


# ---------------------------------------------------------------------------
# The real side: one psql session; every call goes through model.try, which
# turns an answer or an error (SQLSTATE, constraint name) into one JSON line.

SETUP_SQL = r"""
CREATE EXTENSION nico_extsvc;
SELECT extsvc.allow_chart('oci://registry.example.com/charts');
CREATE SCHEMA model;
GRANT USAGE ON SCHEMA model TO PUBLIC;
CREATE FUNCTION model.try(q text, r text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  v text; st text; con text; msg text;
BEGIN
  IF r IS NOT NULL THEN
    PERFORM set_config('role', r, true);     -- the call runs as that role (SET LOCAL ROLE)
  END IF;
  BEGIN
    EXECUTE q INTO v;
    RETURN json_build_object('ok', true, 'v', v)::text;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, con = CONSTRAINT_NAME, msg = MESSAGE_TEXT;
    RETURN json_build_object('ok', false, 'state', st, 'constraint', nullif(con, ''), 'msg', msg)::text;
  END;
END
$f$;
GRANT EXECUTE ON FUNCTION model.try(text, text) TO PUBLIC;
-- The worker's service outcome, through its own entry point with a lease
-- stamped here (as extsvc.claim would).
CREATE FUNCTION model.w_transition(p_sid uuid, p_state text, p_reason text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  sv bigint; tok uuid := gen_random_uuid(); rev integer;
BEGIN
  SELECT desired_revision INTO rev FROM extsvc.service_records WHERE service_id = p_sid;
  UPDATE extsvc.dpf_extension_service_reconciliations
     SET lease_owner = 'model', lease_token = tok, lease_expires_at = now() + interval '1 minute'
   WHERE service_id = p_sid RETURNING state_version INTO sv;
  IF sv IS NULL THEN
    RAISE EXCEPTION 'no reconciliation row for %', p_sid USING ERRCODE = 'XX001';
  END IF;
  RETURN extsvc.complete('service', p_sid::text, sv, tok,
                         jsonb_strip_nulls(jsonb_build_object('outcome', 'transition', 'new_state', p_state,
                           'reason', p_reason, 'message', 'played by test/model/model_sql.py',
                           'applied_revision', CASE WHEN p_state = 'READY' THEN rev END)));
END
$f$;
-- One DPU pass of the worker, through extsvc.complete('dpu', ...).
CREATE FUNCTION model.w_observe(p_dpu text, p_results jsonb) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  sv bigint; tok uuid := gen_random_uuid();
BEGIN
  UPDATE extsvc.dpu_reconciliations
     SET lease_owner = 'model', lease_token = tok, lease_expires_at = now() + interval '1 minute'
   WHERE dpu_machine_id = p_dpu RETURNING state_version INTO sv;
  IF sv IS NULL THEN
    RAISE EXCEPTION 'no DPU reconciliation row for %', p_dpu USING ERRCODE = 'XX001';
  END IF;
  RETURN extsvc.complete('dpu', p_dpu, sv, tok, jsonb_build_object('outcome', 'observed', 'results', p_results));
END
$f$;
"""

SNAPSHOT_SQL = r"""
SELECT json_build_object(
  'services', (SELECT coalesce(json_object_agg(service_id, json_build_array(tenant_organization_id, service_name,
                 dpu_target, lifecycle_state, version, version_ctr, desired_revision, applied_revision,
                 deleted_at IS NOT NULL, (SELECT r.delete_requested_at IS NOT NULL FROM extsvc.service_records r
                                           WHERE r.service_id = v.service_id))), '{}') FROM extsvc.services v),
  'revisions', (SELECT coalesce(json_object_agg(service_id || '/' || revision, json_build_array(data::text,
                 rollback_of, applied_at IS NOT NULL, superseded_at IS NOT NULL)), '{}') FROM extsvc.helm_revisions),
  'versions', (SELECT coalesce(json_object_agg(service_id, json_build_array(version, deleted_at IS NOT NULL)), '{}')
                 FROM extsvc.service_versions),
  'history', (SELECT coalesce(json_object_agg(service_id, h), '{}') FROM (
                 SELECT service_id, json_agg(json_build_array(from_state, to_state, actor, reason) ORDER BY id) AS h
                   FROM extsvc.service_state_history GROUP BY service_id) x),
  'dpu_history', (SELECT coalesce(json_object_agg(k, h), '{}') FROM (
                 SELECT service_id || '/' || dpu_machine_id || '/' || instance_id AS k,
                        json_agg(json_build_array(machine, from_state, to_state, actor, reason) ORDER BY id) AS h
                   FROM extsvc.dpu_state_history GROUP BY 1) x),
  'dpus', (SELECT coalesce(json_object_agg(machine_id, json_build_array(host_machine_id, dpu_device_name,
                 dpu_node_name, is_primary, deregistered_at IS NOT NULL)), '{}') FROM extsvc.dpus),
  'instances', (SELECT coalesce(json_object_agg(instance_id, json_build_array(tenant_organization_id,
                 host_machine_id, network_dpus, dpf_managed, config_version, delete_requested_at IS NOT NULL)), '{}')
                 FROM extsvc.instances),
  'entries', (SELECT coalesce(json_object_agg(instance_id || '/' || service_id, json_build_array(version,
                 removed_at IS NOT NULL)), '{}') FROM extsvc.instance_extension_services),
  'attachments', (SELECT coalesce(json_object_agg(instance_id || '/' || dpu_machine_id || '/' || service_id,
                 json_build_array(version, placement_state, deployment_state, observed_config_version)), '{}')
                 FROM extsvc.dpf_extension_service_attachments),
  'summary', (SELECT coalesce(json_object_agg(i.instance_id || '/' || x.service_id, json_build_array(
                 x.aggregate_state, x.removed, x.dpus, x.configs_synced)), '{}')
                 FROM extsvc.instances i CROSS JOIN LATERAL extsvc.instance_extension_services_summary(i.instance_id) x),
  'ready', (SELECT coalesce(json_object_agg(instance_id, extsvc.instance_extension_services_ready(instance_id)), '{}')
                 FROM extsvc.instances))::text
"""


class Session:
    """One kept connection (each statement its own transaction); answers
    are the text psql -A -t printed (fields joined by '|', rows by newlines,
    an error as psql's text of it)."""

    def __init__(self):
        self.c = CONNS.get(DB)

    def run(self, sql):
        try:
            rows = self.c.rows(sql)
        except db.SqlError as e:
            return e.psql_text()
        return "\n".join("|".join("" if v is None else v for v in r) for r in rows)

    def close(self):
        self.c.close()


def lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def data_text(d):
    return VARIANTS[d] if isinstance(d, int) else BAD_DATA[d][0]


def entry_json(e):
    if e[0] == "bad_shape":
        return {"service_id": e[1], "version": e[2], "extra": 1}
    if e[0] == "bad_uuid":
        return {"service_id": "not-a-uuid", "version": e[2]}
    if e[0] == "bad_version":
        return {"service_id": e[1], "version": 1}
    return {"service_id": e[1], "version": e[2]}


def render(op):
    """(SQL of the call, role it runs as: the API role, or None for the worker's superuser)."""
    k, a = op["op"], op["args"]
    svc = "SELECT row_to_json(x)::text FROM extsvc.{} x"
    if k == "create":
        return svc.format(
            f"create_service({lit(a['tenant'])}, {lit(a['name'])}, 'DPF_HELM_CHART', {lit(data_text(a['data']))}, "
            f"NULL, {lit(a['target'])}, {lit('ALL_DPUS' if a['all_dpus'] else None)}, {lit(a['sid'])}::uuid, "
            f"{lit(a['cred'])})"), API_ROLE
    if k == "update":
        return svc.format(
            f"update_service({lit(a['sid'])}::uuid, "
            f"{lit(None if a['data'] is None else data_text(a['data']))}, {lit(a['name'])}, NULL, "
            f"{lit(a['ctr'])}::integer, {lit(True if a['cred'] else None)}::boolean, NULL, {lit(a['tenant'])})"), API_ROLE
    if k == "rollback":
        return svc.format(f"rollback_service({lit(a['sid'])}::uuid, {a['rev']}, {lit(a['ctr'])}::integer, "
                          f"{lit(a['tenant'])})"), API_ROLE
    if k == "delete":
        return svc.format(f"delete_service({lit(a['sid'])}::uuid, {lit(a['version'])}, {lit(a['tenant'])})"), API_ROLE
    if k == "retry":
        return svc.format(f"retry_service({lit(a['sid'])}::uuid, {lit(a['tenant'])})"), API_ROLE
    if k in ("w_ready", "w_fail", "w_deleted"):
        return f"SELECT model.w_transition({lit(a['sid'])}, {lit(a['state'])}, {lit(a['reason'])})", None
    if k == "register_dpu":
        return (f"SELECT extsvc.register_dpu({lit(a['dpu'])}, {lit(a['host'])}, {lit(a['dev'])}, {lit(a['node'])}, "
                f"{lit(a['primary'])}::boolean)::text"), API_ROLE
    if k == "deregister_dpu":
        return f"SELECT extsvc.deregister_dpu({lit(a['dpu'])})::text", API_ROLE
    if k == "upsert_instance":
        net = "NULL" if a["net"] is None else "ARRAY[" + ", ".join(lit(n) for n in a["net"]) + "]"
        return (f"SELECT extsvc.upsert_instance({lit(a['iid'])}, {lit(a['tenant'])}, {lit(a['host'])}, "
                f"{net}::text[], {lit(a['dpf'])}::boolean)::text"), API_ROLE
    if k == "set_services":
        return (f"SELECT extsvc.set_instance_extension_services({lit(a['iid'])}, "
                f"{lit(json.dumps([entry_json(e) for e in a['entries']]))}::jsonb, {lit(a['cv'])}::integer, "
                f"{lit(a['tenant'])})::text"), API_ROLE
    if k == "delete_instance":
        return f"SELECT extsvc.delete_instance({lit(a['iid'])}, {lit(a['tenant'])})::text", API_ROLE
    if k == "w_observe":
        res = [{"kind": "attachment", "instance_id": i, "service_id": s, "version": v, "state": st,
                "message": "played by test/model/model_sql.py"} for (i, s, st), v in zip(a["results"], a["versions"])]
        return f"SELECT model.w_observe({lit(a['dpu'])}, {lit(json.dumps(res))}::jsonb)", None
    raise ValueError(k)


# ---------------------------------------------------------------------------

def apply_model(m, op):
    """Expected answer of op: ("ok", value) or ("error", sqlstate, constraint); m is changed only on success."""
    trial = copy.deepcopy(m)
    trial.actor = "api"
    try:
        value = getattr(trial, op["op"])(op["args"])
    except Refused as r:
        return ("error", r.state, r.constraint), m
    return ("ok", value), trial


def real_answer(raw):
    j = json.loads(raw)
    if not j["ok"]:
        return ("error", j["state"], j["constraint"]), j.get("msg")
    v = j["v"]
    return ("ok", json.loads(v) if v and v.startswith("{") else v), None


def compare_answer(op, want, got, m):
    """None when the real answer is the model's; otherwise a description."""
    if want[0] != got[0] or (want[0] == "error" and want[1:] != got[1:]):
        return f"expected {want}, got {got}"
    if want[0] == "error":
        return None
    if op["op"] in ("create", "update", "rollback", "delete", "retry"):
        row = got[1]
        real = {"state": row["lifecycle_state"], "ctr": row["version_ctr"], "desired": row["desired_revision"],
                "applied": row["applied_revision"], "name": row["service_name"], "target": row["dpu_target"]}
        if real != want[1]:
            return f"expected row {want[1]}, got {real}"
        s = m.services[op["args"]["sid"]]
        if s["version"] is None:                          # learnt at create: V1-T<micros>, stable
            if not re.fullmatch(r"V1-T[0-9]+", row["version"] or ""):
                return f"version {row['version']!r} is not V1-T<micros>"
            s["version"] = row["version"]
        elif row["version"] != s["version"]:
            return f"version changed from {s['version']} to {row['version']}"
        return None
    if op["op"] == "set_services":
        return None if str(want[1]) == got[1] else f"expected config_version {want[1]}, got {got[1]}"
    if op["op"] in ("register_dpu", "deregister_dpu", "upsert_instance", "delete_instance"):
        return None if got[1] in (None, "") else f"expected no value, got {got[1]!r}"
    return None if got[1] == want[1] else f"expected {want[1]!r}, got {got[1]!r}"


def diff_states(want, got):
    out = []
    for part in want:
        w, g = want[part], got.get(part, {})
        for key in sorted(set(w) | set(g)):
            if w.get(key) != g.get(key):
                out.append(f"{part}[{key}]: model {w.get(key)}, database {g.get(key)}")
    return out


def describe(op):
    a = dict(op["args"])
    if op["op"] == "w_observe":
        a.pop("versions", None)
    if "data" in a and isinstance(a["data"], int):
        a["data"] = f"variant{a['data']}"
    return f"{op['op']}({', '.join(f'{k}={v!r}' for k, v in a.items())})"


def run_sequence(sess, seed, length, norm, check_every_op, verbose):
    """Returns (calls run, mismatch lines with the trace (empty: passed), what it exercised)."""
    rng = random.Random(seed)
    m = Model()
    m.focus = rng.random() < 0.5
    sess.run("SELECT model.reset()")
    trace = []
    for n in range(length):
        op = gen(rng, m)
        want, m2 = apply_model(m, op)
        sql, role = render(op)
        raw = sess.run(f"SELECT model.try({lit(sql)}, {lit(role)})")
        try:
            got, msg = real_answer(raw)
        except (ValueError, KeyError):
            got, msg = ("unreadable", raw), None
        line = f"  {n + 1:2d}. {describe(op)} -> {got[:3] if got[0] == 'error' else 'ok'}" + (
            f" ({msg})" if msg else "")
        trace.append(line)
        if verbose:
            print(line)
        bad = compare_answer(op, want, got, m2) if got[0] != "unreadable" else f"unreadable answer {raw!r}"
        if bad:
            return n + 1, trace + [f"  MISMATCH at call {n + 1}: {bad}"], m.events
        m = m2
        if check_every_op or n == length - 1:
            real = json.loads(sess.run(SNAPSHOT_SQL))
            d = diff_states(m.snapshot(norm), real)
            if d:
                return n + 1, trace + [f"  MISMATCH of the state after call {n + 1}:"] + ["    " + x for x in d], m.events
    return length, [], m.events


# ---------------------------------------------------------------------------
# Servers

class OwnCluster:
    """A throw-away cluster (extsvc_testkit.cluster): private port and socket
    directory, the library preloaded, no Kubernetes cluster configured (the
    worker stays idle; it does not watch extsvc_model anyway)."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="nico-extsvc-model.")
        os.chmod(self.top, 0o755)
        self.pg = cluster.Cluster(os.path.join(self.top, "pg"), {
            "extsvc.workers": "1", "synchronous_commit": "off"})
        self.pg.start()
        os.environ.update(self.pg.env())

    def stop(self):
        try:
            CONNS.close()
            self.pg.stop()
        finally:
            shutil.rmtree(self.top, ignore_errors=True)


def psql(db, sql):  # noqa: F811 - the parameter keeps the old helper's name
    """One statement on the kept connection to db; raises on error; the rows
    as psql -A -t printed them."""
    rows = CONNS.sql(sql, db)
    return "\n".join("|".join("" if v is None else v for v in r) for r in rows).strip()


def setup_db():
    psql("postgres", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql("postgres", f"DROP ROLE IF EXISTS {API_ROLE}")
    psql("postgres", f"CREATE DATABASE {DB}")
    r = subprocess.run([tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB], input=SETUP_SQL,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("setup failed:\n" + r.stderr)
    psql("postgres", f"CREATE ROLE {API_ROLE} NOLOGIN IN ROLE extsvc_api")   # extsvc_api: made by the extension
    # model.reset(): every table of the extension with user data emptied,
    # triggers and foreign keys off (session_replication_role), in one call
    tables = psql(DB, """
        SELECT string_agg(format('%I.%I', n.nspname, c.relname), ' ' ORDER BY c.relname)
          FROM pg_depend d JOIN pg_class c ON c.oid = d.objid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
           AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'nico_extsvc')
           AND d.deptype = 'e' AND c.relkind = 'r'
           AND c.relname NOT IN ('lifecycle_transitions', 'placement_transitions', 'chart_allowlist')""").split()
    body = " ".join(f"DELETE FROM {t};" for t in tables)
    psql(DB, "CREATE FUNCTION model.reset() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN "
             "PERFORM set_config('session_replication_role', 'replica', true); " + body +
         " PERFORM set_config('session_replication_role', 'origin', true); END $f$")
    # the normalized form of each valid variant, as the database stores it
    return [psql(DB, f"SELECT extsvc.validate_dpf_helm_chart_data({lit(v)})::text") for v in VARIANTS]


def teardown_db():
    psql("postgres", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql("postgres", f"DROP ROLE IF EXISTS {API_ROLE}")


def write_doc(run):
    """Records a run in the model-results block of docs/reliability.md: the
    runs are kept as JSON comments in the block (a run of the same seeds
    replaces its own), and the table is drawn from all of them, so a long
    run made in parts (lock released between them) is recorded whole."""
    path = os.path.join(ROOT, "docs", "reliability.md")
    with open(path) as f:
        doc = f.read()
    pat = re.compile(r"(<!-- model-results:begin[^>]*-->\n)(.*?)(<!-- model-results:end -->)", re.S)
    mm = pat.search(doc)
    if not mm:
        raise RuntimeError(f"no model-results block in {path}")
    runs = [json.loads(x) for x in re.findall(r"<!-- model-run (.*?) -->", mm.group(2))]
    runs = [r for r in runs if r["seeds"] != run["seeds"]] + [run]
    runs.sort(key=lambda r: r["seeds"][0])
    lines = ["| seeds | sequences | calls | state compared | mismatches | time | sequences/s | calls/s |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['seeds'][0]}..{r['seeds'][1]} | {r['sequences']:,} | {r['calls']:,} | "
                     f"{'after every call' if r['every_op'] else 'after every sequence'}"
                     f"{', histories included' if r.get('histories') else ' (histories not compared yet)'} | {r['failed']} | "
                     f"{r['seconds']:.0f} s | {r['sequences'] / r['seconds']:.1f} | {r['calls'] / r['seconds']:.0f} |")
    if len(runs) > 1:
        seq, calls, secs = (sum(r[k] for r in runs) for k in ("sequences", "calls", "seconds"))
        lines.append(f"| **all** | **{seq:,}** | **{calls:,}** | | **{sum(r['failed'] for r in runs)}** | "
                     f"{secs:.0f} s | {seq / secs:.1f} | {calls / secs:.0f} |")
    cov = collections.Counter()
    for r in runs:
        cov.update(r["coverage"])
    lines += ["", "Sequences that exercised each path (of "
              f"{sum(r['sequences'] for r in runs):,}): " + "; ".join(f"{k} {v:,}" for k, v in sorted(cov.items())) + ".",
              "", "Measured " + ", ".join(sorted({r["date"] for r in runs})) + " by `PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py "
              "--own-cluster --seed S --sequences N --write-doc` (`--check-every-op` where the table says so), "
              "one line per run."]
    lines += [f"<!-- model-run {json.dumps(r, sort_keys=True)} -->" for r in runs]
    doc = doc[:mm.start()] + mm.group(1) + "\n".join(lines) + "\n" + mm.group(3) + doc[mm.end():]
    with open(path, "w") as f:
        f.write(doc)
    # the summary table at the top is drawn from these records
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reliability_summary.py")], check=True)


def commit_stamp():
    """The commit a run measured ("+local" when src/, sql/ or sim/ differ
    from it); extsvc_testkit.invariants.run_stamp does the same."""
    def git(*args):
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + (
        "+local" if git("status", "--porcelain", "--", "src", "sql", "sim") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=10000)
    ap.add_argument("--length", type=int, default=20, help="calls per sequence")
    ap.add_argument("--seed", type=int, default=1, help="sequence k has seed SEED + k")
    ap.add_argument("--ci", action="store_true", help="300 sequences (the test suite)")
    ap.add_argument("--check-every-op", action="store_true", help="compare the whole state after every call")
    ap.add_argument("--own-cluster", action="store_true", help="start a throw-away cluster (else psql's PG* variables)")
    ap.add_argument("--max-failures", type=int, default=20, help="stop after this many failed sequences")
    ap.add_argument("--write-doc", action="store_true", help="record the figures in docs/reliability.md")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every call")
    args = ap.parse_args()
    if args.ci:
        args.sequences = 300
        args.check_every_op = True

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the own cluster is stopped on the way out
    cluster = OwnCluster() if args.own_cluster else None
    passed = failed = ops = 0
    coverage = collections.Counter()
    t0 = time.time()
    try:
        norm = setup_db()
        sess = Session()
        for k in range(args.sequences):
            seed = args.seed + k
            n, bad, events = run_sequence(sess, seed, args.length, norm, args.check_every_op, args.verbose)
            ops += n
            coverage.update(events)
            if bad:
                failed += 1
                print(f"sequence {k} seed {seed}: FAILED")
                print("\n".join(bad))
                print(f"  replay: PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --seed {seed} --sequences 1 --length {args.length}"
                      f"{' --check-every-op' if args.check_every_op else ''} -v")
                if failed >= args.max_failures:
                    print(f"stopping after {failed} failed sequences")
                    break
            else:
                passed += 1
                print(f"sequence {k} seed {seed}: ok ({n} calls)")
        sess.close()
        teardown_db()
    finally:
        if cluster:
            cluster.stop()
    dt = time.time() - t0
    total = passed + failed
    print(f"{total} sequences, {ops} calls in {dt:.1f} s: {total / dt:.1f} sequences/s, {ops / dt:.0f} calls/s"
          f" (seeds {args.seed}..{args.seed + total - 1}, length {args.length}"
          f"{', state compared after every call' if args.check_every_op else ''})")
    print("sequences that exercised: " + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items())))
    if args.write_doc:
        write_doc({"seeds": [args.seed, args.seed + total - 1], "sequences": total, "calls": ops, "length": args.length,
                   "every_op": args.check_every_op, "histories": True, "failed": failed, "seconds": round(dt, 1),
                   "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit_stamp(),
                   "coverage": dict(coverage)})
    print(f"model_sql: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
