#!/usr/bin/python3
"""The worker's queue statements at 1M rows per queue (issue 11).

Fills both queue tables (extsvc.dpf_extension_service_reconciliations and
extsvc.dpu_reconciliations) with ROWS rows each, with the rows they need to
satisfy their foreign keys (one DPF_HELM_CHART service with its version and
Helm revision per service row, one DPU per DPU row), written by direct
INSERTs as the superuser (triggers off for speed; the foreign keys are then
checked by anti-joins and the run stops if one fails). Most rows are idle
(next_due_at NULL) and 1 % back off (due 60-300 s from now). Then, for each
scenario, on each queue:

  0 due        nothing claimable
  32 due       32 rows due
  10k due      10,000 rows due (1 %)
  1% leased    10,000 rows leased by another worker (lease running), 32 due
  1% expired   10,000 rows whose lease ran out (a crashed worker's): claimable
  resync       a quarter of the rows made due at once after ANALYZE saw none
               due (as extsvc.mark_dpus_due does), autovacuum off on the
               table meanwhile: plans are made from statistics that say
               almost nothing is due
  resync (sort on)  the same with the claim function's enable_sort = off
               taken away for the run (claim and the claim statement only,
               at most 20 calls): what the setting prevents

it measures, server-side (clock_timestamp() around the call in a PL/pgSQL
procedure, one transaction per call, as the background worker runs them
through SPI):
  - extsvc.claim(queue, 'bench', 32, 60): CALLS calls. Between two calls (not
    timed) the claimed rows are completed (idle again) and 32 fresh rows are
    made due (or, in "1% expired", given an expired lease), so every call
    claims and the scenario keeps its size;
  - the claim statement alone (extsvc._claim_service / _claim_dpu, the
    statement claim runs, without its dispatch and the work objects), the
    same way; skipped for a version without them;
  - extsvc.next_due_in(), extsvc.renew_leases('bench', <32 tokens>, 60) and
    extsvc.release_leases('bench') (32 rows claimed before each, not timed);
  - the plan of exactly the statements these functions run, captured with
    auto_explain (log_analyze, log_buffers, log_nested_statements) on a call
    made after the timed ones (the cached plan): printed in full, and checked
    for a Seq Scan on a queue table (exit status 1 if there is one).

Prints the claim plans and two tables (-v: every plan); --write-doc puts the
tables, the machine and its load into docs/performance.md between
<!-- claim-query:begin --> and <!-- claim-query:end --> (added at the end
when missing).

  PYTHONPATH=python /usr/bin/python3 bench/claim_query.py            # 1M rows per queue, 200 calls each
  PYTHONPATH=python /usr/bin/python3 bench/claim_query.py --rows 100000 --calls 50
  PYTHONPATH=python /usr/bin/python3 bench/claim_query.py --write-doc

Env: BENCH_CLAIM_ROWS (1000000; BENCH_QUICK=1: 100000), BENCH_CLAIM_CALLS (200;
quick 50). About 5-6 minutes at 1M rows on 2 cores, 2-4 of them the fill. Needs the extension
installed (make install) and runs its own throw-away cluster (no worker:
extsvc.workers = 0). Python standard library only."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from extsvc_testkit import db  # noqa: E402
from extsvc_testkit.harness import PG_USER, PGBIN, Postgres  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TARGET_MS = 2.0
BATCH = 32
SCENARIOS = ["0 due", "32 due", "10k due", "1% leased", "1% expired", "resync", "resync (sort on)"]
SORT_ON = "resync (sort on)"

# Bench-only helpers in their own schema (not the extension's): ids derived
# from a row number (random-looking, as gen_random_uuid ids are), the
# scenario setup and the timed loops.
SETUP_SQL = r"""
CREATE SCHEMA bench;
CREATE FUNCTION bench.sid(i integer) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$ SELECT md5('svc' || i)::uuid $$;
-- a DPU's NICo MachineId (SPEC 7): fm100 + d + s + 52 base32 characters
CREATE FUNCTION bench.did(i integer) RETURNS text LANGUAGE sql IMMUTABLE AS
  $$ SELECT 'fm100ds' || md5('dpu' || i) || repeat('0', 20) $$;
CREATE FUNCTION bench.hid(i integer) RETURNS text LANGUAGE sql IMMUTABLE AS
  $$ SELECT 'fm100hs' || md5('host' || i) || repeat('0', 20) $$;
-- a row's id as the queue hands it out (text)
CREATE FUNCTION bench.id(p_queue text, i integer) RETURNS text LANGUAGE sql IMMUTABLE AS
  $$ SELECT CASE p_queue WHEN 'service' THEN bench.sid(i)::text ELSE bench.did(i) END $$;
CREATE UNLOGGED TABLE bench.timing (fn text, queue text, scenario text, n integer, ms double precision, rows integer);
-- fresh rows made due between calls: row numbers i % 100 = 50, in order
-- (k-th fresh row: i = 50 + 100 * (k % pool), pool = rows / 100)
CREATE UNLOGGED TABLE bench.cursor (queue text PRIMARY KEY, next_k integer NOT NULL, pool integer NOT NULL);

-- Scenario rows by row number: i % 100 = 1 back off, = 2 due (resync: i % 4
-- = 2), = 3 leased or expired, = 50 the pool of fresh rows; every other row
-- is idle.
CREATE PROCEDURE bench.setup(p_queue text, p_scenario text, p_rows integer)
LANGUAGE plpgsql AS $$
DECLARE
  q record;
  v_due integer := CASE p_scenario WHEN '32 due' THEN 32 WHEN '10k due' THEN p_rows / 100
                                   WHEN '1% leased' THEN 32 WHEN 'resync' THEN p_rows / 4
                                   WHEN 'resync (sort on)' THEN p_rows / 4 ELSE 0 END;
BEGIN
  SELECT * INTO q FROM extsvc._worker_queue(p_queue);
  -- back to idle: every row of the previous scenario (found through the index)
  EXECUTE format('UPDATE extsvc.%I SET next_due_at = NULL, lease_owner = NULL, lease_token = NULL, '
                 'lease_expires_at = NULL, attempts = 0 WHERE next_due_at IS NOT NULL', q.queue_table);
  EXECUTE format('UPDATE extsvc.%I r SET next_due_at = now() + (60 + 240 * random()) * interval ''1 second'', '
                 'attempts = 1 + (i %% 5), last_error = ''HTTP 503'', last_error_at = now() '
                 'FROM generate_series(1, $1, 100) i WHERE r.%I = bench.id($2, i)::%s', q.queue_table, q.key_column,
                 q.key_type)
    USING p_rows, p_queue;
  EXECUTE format('UPDATE extsvc.%I r SET next_due_at = now() - (k * interval ''10 milliseconds'') '
                 'FROM generate_series(0, $1 - 1) k WHERE r.%I = bench.id($2, 2 + $3 * k)::%s', q.queue_table,
                 q.key_column, q.key_type)
    USING v_due, p_queue, CASE WHEN p_scenario LIKE 'resync%%' THEN 4 ELSE 100 END;
  IF p_scenario IN ('1% leased', '1% expired') THEN
    EXECUTE format('UPDATE extsvc.%I r SET next_due_at = now() - (60 + k %% 60) * interval ''1 second'', '
                   'lease_owner = ''other-worker'', lease_token = gen_random_uuid(), '
                   'lease_expires_at = now() + CASE WHEN $3 THEN interval ''60 seconds'' '
                   'ELSE -interval ''1 second'' * (1 + k %% 50) END '
                   'FROM generate_series(0, $1 / 100 - 1) k WHERE r.%I = bench.id($2, 3 + 100 * k)::%s',
                   q.queue_table, q.key_column, q.key_type)
      USING p_rows, p_queue, p_scenario = '1% leased';
  END IF;
  INSERT INTO bench.cursor VALUES (p_queue, 0, p_rows / 100) ON CONFLICT (queue) DO UPDATE SET next_k = 0;
END $$;

-- After a claim (not timed): the claimed rows are completed (idle) and as
-- many fresh rows take their place, due now (or with an expired lease).
CREATE PROCEDURE bench.refill(p_queue text, p_scenario text, p_ids text[])
LANGUAGE plpgsql AS $$
DECLARE
  q record;
  n integer := coalesce(cardinality(p_ids), 0);
  v_k integer;
  v_pool integer;
BEGIN
  IF n = 0 OR p_scenario = '0 due' THEN
    RETURN;
  END IF;
  SELECT * INTO q FROM extsvc._worker_queue(p_queue);
  EXECUTE format('UPDATE extsvc.%I SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, '
                 'next_due_at = NULL, attempts = 0 WHERE %I = ANY ($1::%s[])', q.queue_table, q.key_column, q.key_type)
    USING p_ids;
  UPDATE bench.cursor c SET next_k = c.next_k + n WHERE c.queue = p_queue RETURNING c.next_k - n, c.pool INTO v_k, v_pool;
  EXECUTE format('UPDATE extsvc.%I r SET next_due_at = now(), '
                 'lease_owner = CASE WHEN $3 THEN ''other-worker'' END, '
                 'lease_token = CASE WHEN $3 THEN gen_random_uuid() END, '
                 'lease_expires_at = CASE WHEN $3 THEN now() - interval ''1 second'' END '
                 'FROM generate_series(0, $4 - 1) k WHERE r.%I = bench.id($2, 50 + 100 * (($1 + k) %% $5))::%s',
                 q.queue_table, q.key_column, q.key_type) USING v_k, p_queue, p_scenario = '1% expired', n, v_pool;
END $$;

CREATE PROCEDURE bench.time_calls(p_fn text, p_queue text, p_scenario text, p_calls integer)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  t1 timestamptz;
  v_ids text[];
  v_tokens uuid[];
  v_n integer;
  v_d double precision;
BEGIN
  FOR k IN 1 .. p_calls LOOP
    IF p_fn = 'claim' THEN
      t0 := clock_timestamp();
      SELECT array_agg(c.id) INTO v_ids FROM extsvc.claim(p_queue, 'bench', 32, 60) c;
      t1 := clock_timestamp();
      v_n := coalesce(cardinality(v_ids), 0);
    ELSIF p_fn = 'claim_statement' THEN
      -- the queue's lease statement alone, without claim's dispatch and the
      -- work objects (since issue 11 it is a function of its own)
      t0 := clock_timestamp();
      IF p_queue = 'service' THEN
        SELECT array_agg(c.id::text) INTO v_ids FROM extsvc._claim_service('bench', 32, 60) c;
      ELSE
        SELECT array_agg(c.id) INTO v_ids FROM extsvc._claim_dpu('bench', 32, 60) c;
      END IF;
      t1 := clock_timestamp();
      v_n := coalesce(cardinality(v_ids), 0);
    ELSIF p_fn = 'next_due_in' THEN
      t0 := clock_timestamp();
      v_d := extsvc.next_due_in();
      t1 := clock_timestamp();
      v_n := CASE WHEN v_d IS NULL THEN 0 ELSE 1 END;
    ELSE
      SELECT array_agg(c.id), array_agg(c.lease_token) INTO v_ids, v_tokens
        FROM extsvc.claim(p_queue, 'bench', 32, 60) c;
      COMMIT;
      IF p_fn = 'renew_leases' THEN
        t0 := clock_timestamp();
        SELECT count(*) INTO v_n FROM extsvc.renew_leases('bench', coalesce(v_tokens, '{}'), 60);
        t1 := clock_timestamp();
      ELSE
        t0 := clock_timestamp();
        v_n := extsvc.release_leases('bench');
        t1 := clock_timestamp();
      END IF;
    END IF;
    INSERT INTO bench.timing VALUES (p_fn, p_queue, p_scenario, k, extract(epoch FROM t1 - t0) * 1000, v_n);
    COMMIT;
    IF p_fn IN ('claim', 'claim_statement', 'renew_leases') THEN
      CALL bench.refill(p_queue, p_scenario, v_ids);
      COMMIT;
    END IF;
  END LOOP;
END $$;
"""

# The fill. Services: READY DPF_HELM_CHART services, one version and one
# applied Helm revision each. DPUs: one per host, named like NICo's.
FILL_SQL = r"""
SET session_replication_role = replica;
BEGIN;
INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type,
    deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason, attachable_version,
    desired_revision, applied_revision, dpf_service_name, placement_label_key, created_at, updated_at)
SELECT bench.sid(i), 'tenant-' || (i % 1000), 'service-' || i, 'DPF_HELM_CHART', 'INSTANCE_DPUS', 'PRIMARY',
       'READY', 'worker', 'applied', 'V1-T1700000000000000', 1, 1,
       extsvc._dpf_service_name(bench.sid(i), 'V1-T1700000000000000'),
       extsvc._placement_label_key(bench.sid(i), 'V1-T1700000000000000'), now(), now()
  FROM generate_series(1, :rows) i;
INSERT INTO extsvc.service_versions (service_id, version, version_number)
SELECT bench.sid(i), 'V1-T1700000000000000', 1 FROM generate_series(1, :rows) i;
INSERT INTO extsvc.helm_revisions (service_id, revision, data, applied_at)
SELECT bench.sid(i), 1, jsonb_build_object('repoURL', 'oci://registry.example.com/charts', 'chartName', 'telemetry',
         'chartVersion', '1.' || (i % 7) || '.0', 'security', jsonb_build_object('privileged', false),
         'values', jsonb_build_object('replicas', 1, 'image', 'registry.example.com/telemetry:1.0')), now()
  FROM generate_series(1, :rows) i;
INSERT INTO extsvc.dpf_extension_service_reconciliations (service_id, state_version, last_success_at,
    observed_generation, observed_resource_version, dpf_ready, dpf_observed_at)
SELECT bench.sid(i), 1 + i % 3, now(), 1, (100000 + i)::text, true, now() FROM generate_series(1, :rows) i;
INSERT INTO extsvc.dpus (machine_id, host_machine_id, dpu_device_name, dpu_node_name, is_primary)
SELECT bench.did(i), bench.hid(i), 'dpu-device-' || i, 'host-' || i || '-dpu', true
  FROM generate_series(1, :rows) i;
INSERT INTO extsvc.dpu_reconciliations (dpu_machine_id, state_version, last_observed_at, observation)
SELECT bench.did(i), 1, now(), jsonb_build_object('node', 'host-' || i || '-dpu', 'labels', '[]'::jsonb)
  FROM generate_series(1, :rows) i;
COMMIT;
"""

# Every foreign key of the rows written above, as anti-joins: all must be 0.
FK_CHECK_SQL = """
SELECT (SELECT count(*) FROM extsvc.dpf_extension_service_reconciliations r
         WHERE NOT EXISTS (SELECT FROM extsvc.service_records s WHERE s.service_id = r.service_id))
     + (SELECT count(*) FROM extsvc.dpu_reconciliations r
         WHERE NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = r.dpu_machine_id))
     + (SELECT count(*) FROM extsvc.service_records s
         WHERE NOT EXISTS (SELECT FROM extsvc.helm_revisions h
                            WHERE h.service_id = s.service_id AND h.revision = s.desired_revision)
            OR NOT EXISTS (SELECT FROM extsvc.service_versions v
                            WHERE v.service_id = s.service_id AND v.version = s.attachable_version))
"""


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def psql(pg, *commands):
    """Runs commands in one session of their own (each its own transaction;
    extsvc_testkit.db); returns (the rows as psql -A -t printed them, the
    NOTICEs). auto_explain's plans arrive as NOTICEs."""
    c = db.Conn(pg.dir, pg.port, PG_USER, "postgres")
    try:
        out = []
        for cmd in commands:
            try:
                rows = c.rows(cmd)
            except db.SqlError as e:
                raise RuntimeError(f"psql failed: {commands}\n{e.psql_text()[-4000:]}") from None
            out += ["|".join("" if v is None else v for v in r) for r in rows]
        return "\n".join(out) + "\n", "\n".join(c.notices)
    finally:
        c.close()


def psql_file(pg, text, variables):
    cmd = [f"{PGBIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", pg.dir, "-p", str(pg.port),
           "-U", PG_USER, "-d", "postgres", "-f", "-"]
    for k, v in variables.items():
        cmd += ["-v", f"{k}={v}"]
    r = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"psql failed:\n{r.stderr[-4000:]}")


AUTO_EXPLAIN = ["LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
                "SET auto_explain.log_buffers = on", "SET auto_explain.log_nested_statements = on",
                "SET auto_explain.log_level = notice"]


def plans(stderr):
    """The plans auto_explain printed, each as its text from 'duration:' on."""
    out = []
    for chunk in re.split(r"^NOTICE:\s+", stderr, flags=re.M):
        if chunk.startswith("duration:"):
            out.append(chunk.rstrip())
    return out


def pick(all_plans, fn, table):
    """The plan of the statement fn runs on this queue's table: for claim the
    CTE that locks and updates, for renew/release their UPDATE, for
    next_due_in its read of the table."""
    for p in all_plans:
        if fn == "claim" and "LockRows" in p and f"Update on {table} " in p:
            return p
        if fn in ("renew_leases", "release_leases") and f"Update on {table} " in p:
            return p
        if fn == "next_due_in" and "Query Text: SELECT extsvc.next_due_in()" not in p and f" on {table} " in p:
            return p
    return None


def seq_scan(plan, table):
    return plan is None or re.search(r"Seq Scan on " + re.escape(table) + r"\b", plan) is not None


def scan_of(plan, table):
    """How the plan finds the due rows: its first scan node on the queue
    table (the CTE comes first in auto_explain's text), plus a Sort if any."""
    m = re.search(r"(Seq Scan|Bitmap Heap Scan|Index Only Scan|Index Scan)( Backward)?(?: using (\S+))? on "
                  + re.escape(table) + r"\b", plan or "")
    if not m:
        return "?"
    if m.group(1) == "Bitmap Heap Scan":
        idx = re.search(r"Bitmap Index Scan on (\S+)", plan)
        text = f"Bitmap Heap Scan ({idx.group(1) if idx else '?'})"
    else:
        text = m.group(1) + (m.group(2) or "") + (f" using {m.group(3)}" if m.group(3) else "")
    return text + (" + Sort" if "Sort Key:" in plan else "")


def plan_ms(plan):
    m = re.match(r"duration: ([0-9.]+) ms", plan or "")
    return float(m.group(1)) if m else float("nan")


def plan_buffers(plan):
    """shared hit/read of the plan's top node."""
    m = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def stats(pg, fn, queue, scenario):
    rows = psql(pg, f"SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY ms), "
                    f"percentile_disc(0.99) WITHIN GROUP (ORDER BY ms), avg(rows), count(*) "
                    f"FROM bench.timing WHERE fn = '{fn}' AND queue = '{queue}' AND scenario = '{scenario}'")[0]
    med, p99, avg_rows, n = rows.strip().split("|")
    return float(med), float(p99), float(avg_rows), int(n)


QUEUES = {"service": "dpf_extension_service_reconciliations", "dpu": "dpu_reconciliations"}
# claim_statement: the queue's lease statement alone (_claim_service /
# _claim_dpu since issue 11; skipped when the installed version has none)
FUNCTIONS = ["claim", "claim_statement", "next_due_in", "renew_leases", "release_leases"]


def run_scenario(pg, queue, scenario, rows, calls, functions, verbose):
    table = QUEUES[queue]
    claim_fn = "extsvc._claim_service" if queue == "service" else "extsvc._claim_dpu"
    if scenario == SORT_ON:
        if "claim_statement" not in functions:
            return None                     # a version without claim functions: nothing to take away
        functions = ["claim", "claim_statement"]
        calls = min(calls, 20)
        psql(pg, f"ALTER FUNCTION {claim_fn} RESET enable_sort")
    if scenario.startswith("resync"):
        # statistics taken while nothing was due; then a quarter due at once
        psql(pg, f"ALTER TABLE extsvc.{table} SET (autovacuum_enabled = off)")
        psql(pg, f"CALL bench.setup('{queue}', '0 due', {rows})")
        psql(pg, f"VACUUM (ANALYZE) extsvc.{table}")
        psql(pg, f"CALL bench.setup('{queue}', '{scenario}', {rows})")
    else:
        psql(pg, f"CALL bench.setup('{queue}', '{scenario}', {rows})")
        psql(pg, f"VACUUM (ANALYZE) extsvc.{table}")
    result = {}
    for fn in functions:
        # the timed calls, then (but for claim_statement, whose statement is
        # claim's) one more call with auto_explain in the same session, whose
        # plan cache the timed calls warmed
        probe = {"claim": f"SELECT count(*) FROM extsvc.claim('{queue}', 'bench', 32, 60)",
                 "next_due_in": "SELECT extsvc.next_due_in()",
                 "renew_leases": (f"SELECT count(*) FROM extsvc.renew_leases('bench', "
                                  f"ARRAY(SELECT lease_token FROM extsvc.{table} WHERE lease_owner = 'bench'), 60)"),
                 "release_leases": "SELECT extsvc.release_leases('bench')"}.get(fn)
        pre = [f"SELECT count(*) FROM extsvc.claim('{queue}', 'bench', 32, 60)"] \
            if fn in ("renew_leases", "release_leases") else []
        timed = f"CALL bench.time_calls('{fn}', '{queue}', '{scenario}', {calls})"
        _, err = psql(pg, timed, *pre, *AUTO_EXPLAIN, probe) if probe else psql(pg, timed)
        plan = pick(plans(err), fn, table) if probe else None
        med, p99, avg_rows, n = stats(pg, fn, queue, scenario)
        result[fn] = {"median": med, "p99": p99, "rows": avg_rows, "n": n, "plan": plan,
                      "seq": probe is not None and seq_scan(plan, table)}
        if probe and (verbose or fn == "claim" or result[fn]["seq"]):
            print(f"\n-- {queue} / {scenario} / {fn}: the plan of the statement it runs (auto_explain)\n{plan}",
                  flush=True)
        # leave nothing of ours leased for the next function
        psql(pg, "SELECT extsvc.release_leases('bench')")
    if scenario.startswith("resync"):
        psql(pg, f"ALTER TABLE extsvc.{table} RESET (autovacuum_enabled)")
    if scenario == SORT_ON:
        psql(pg, f"ALTER FUNCTION {claim_fn} SET enable_sort = off")
    return result


def report(results, args, version, load_start, load_end, functions):
    """The Markdown text: what was run, two tables, the verdicts. Returns
    (text, any Seq Scan)."""
    def mp(r, fn):
        return f"{r[fn]['median']:.3f} / {r[fn]['p99']:.3f}" if fn in r else "-"

    stmt = "claim_statement" in functions
    lines = [f"{args.rows:,} rows per queue, batch {BATCH}, {args.calls} calls per figure (\"{SORT_ON}\": "
             f"{min(args.calls, 20)}); PostgreSQL {version}; "
             f"{os.cpu_count()} vCPUs ({cpu_model()}); load average {load_start} at the start and {load_end} at the "
             f"end; {time.strftime('%Y-%m-%d')}. Times in ms (median / p99), taken in the server around each call, "
             "one transaction per call.", "",
             "| queue | scenario | claim statement | claim() with the work | rows per call "
             "| how the claim statement finds the rows | its buffers |",
             "|---|---|---|---|---:|---|---:|"]
    seq, over = False, []
    for (queue, scenario), r in results.items():
        c = r["claim"]
        hit, read = plan_buffers(c["plan"])
        path = scan_of(c["plan"], QUEUES[queue])
        if c["seq"]:
            path = f"**{path}**"
        seq = seq or any(r[fn]["seq"] for fn in r)
        target = r["claim_statement"]["median"] if stmt else c["median"]
        if target > TARGET_MS and scenario != SORT_ON:   # that one shows what the product prevents
            over.append(f"{queue} / {scenario}")
        lines.append(f"| {queue} | {scenario} | {mp(r, 'claim_statement')} | {mp(r, 'claim')} | {c['rows']:.1f} "
                     f"| {path} | {hit + read} |")
    lines += ["", "| queue | scenario | next_due_in() | renew_leases(32 tokens) | release_leases() |",
              "|---|---|---|---|---|"]
    for (queue, scenario), r in results.items():
        if scenario == SORT_ON:
            continue
        lines.append(f"| {queue} | {scenario} | {mp(r, 'next_due_in')} | {mp(r, 'renew_leases')} "
                     f"| {mp(r, 'release_leases')} |")
    what = "the claim statement's median" if stmt else "claim()'s median"
    lines += ["", f"Target {TARGET_MS:g} ms ({what}; not counted: \"{SORT_ON}\", the product's setting "
              "taken away): "
              + (f"**over** in {', '.join(over)}." if over else "met in every row.")
              + " Index path: " + ("**a Seq Scan on a queue table** in at least one statement (printed above)."
                                   if seq else "every statement of claim, next_due_in, renew_leases and "
                                   "release_leases, in every row (no Seq Scan on a queue table).")]
    return "\n".join(lines), seq


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    ap.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_CLAIM_ROWS", 100000 if quick else 1000000)))
    ap.add_argument("--calls", type=int, default=int(os.environ.get("BENCH_CLAIM_CALLS", 50 if quick else 200)))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--queues", default="service,dpu")
    ap.add_argument("--write-doc", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every plan (default: the claim plans)")
    ap.add_argument("--keep", action="store_true", help="leave the filled cluster running at the end (prints how "
                    "to connect and to stop it)")
    args = ap.parse_args()
    if args.rows < 10000 or args.rows % 100:
        sys.exit("--rows: a multiple of 100, at least 10000")

    load_start = loadavg()
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="nico-extsvc-claim.")
    os.chmod(workdir, 0o755)
    pg = None
    seq = False
    try:
        pg = Postgres(workdir, {"extsvc.workers": "0", "shared_buffers": "'256MB'", "max_wal_size": "'4GB'",
                                "checkpoint_timeout": "'30min'"})
        version = psql(pg, "SHOW server_version")[0].strip()
        psql(pg, SETUP_SQL.replace("\n\n", "\n"))
        functions = [f for f in FUNCTIONS if f != "claim_statement" or psql(
            pg, "SELECT to_regprocedure('extsvc._claim_service(text, integer, integer)') IS NOT NULL")[0].strip() == "t"]
        t0 = time.monotonic()
        psql_file(pg, FILL_SQL, {"rows": args.rows})
        fk_bad = int(psql(pg, FK_CHECK_SQL)[0].strip())
        if fk_bad:
            raise RuntimeError(f"the fill broke {fk_bad} foreign keys")
        psql(pg, "VACUUM (ANALYZE)")
        fill_s = time.monotonic() - t0
        sizes = psql(pg, "SELECT string_agg(format('%s %s', c.relname, pg_size_pretty(pg_total_relation_size(c.oid))), "
                         "', ' ORDER BY c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                         "WHERE n.nspname = 'extsvc' AND c.relname IN "
                         "('dpf_extension_service_reconciliations', 'dpu_reconciliations')")[0].strip()
        print(f"filled {args.rows:,} rows per queue in {fill_s:.0f} s (foreign keys checked); {sizes}", flush=True)

        results = {}
        for queue in args.queues.split(","):
            for scenario in args.scenarios.split(","):
                r = run_scenario(pg, queue, scenario, args.rows, args.calls, functions, args.verbose)
                if r is None:
                    continue
                results[(queue, scenario)] = r
                print(f"{queue} / {scenario}: " + "; ".join(
                    f"{fn} {r[fn]['median']:.3f} ms (p99 {r[fn]['p99']:.3f})" for fn in r), flush=True)
        text, seq = report(results, args, version, load_start, loadavg(), functions)
        print("\n" + text, flush=True)
        print(f"\nclaim_query: {time.monotonic() - started:.0f} s", flush=True)
        if args.write_doc:
            write_doc(text)
    finally:
        if args.keep and pg is not None:
            print(f"kept: psql -h {pg.dir} -p {pg.port} -U {PG_USER} postgres; stop with "
                  f"runuser -u {PG_USER} -- {PGBIN}/pg_ctl -D {pg.data} stop; rm -rf {workdir}", flush=True)
        else:
            if pg is not None:
                pg.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(1 if seq else 0)


def write_doc(text):
    path = os.path.join(ROOT, "docs", "performance.md")
    with open(path) as f:
        doc = f.read()
    pat = re.compile(r"(<!-- claim-query:begin -->\n).*?(<!-- claim-query:end -->)", re.S)
    if pat.search(doc):
        doc = pat.sub(lambda m: m.group(1) + text + "\n" + m.group(2), doc)
    else:
        doc = doc.rstrip("\n") + ("\n\n## The claim query at 1M queue rows (issue 11; `bench/claim_query.py`)\n\n"
                                  "<!-- claim-query:begin -->\n" + text + "\n<!-- claim-query:end -->\n")
    with open(path, "w") as f:
        f.write(doc)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
