#!/usr/bin/env python3
"""How long ALTER EXTENSION nico_extsvc UPDATE takes from 0.2.0 to the current
version on a site-sized database, and which locks it holds (issue 27: the
changelog's upgrade notes).

Builds a 0.2.0 database through the 0.2.0 API (DPUS DPUs on DPUS/2 hosts,
DPUS/2 instances of two DPUs each, DPUS/10 DPF_HELM_CHART services, every
instance attached to one of them), then adds history rows (per-DPU and
service state history, by INSERT ... SELECT as the superuser) until the
extension's tables hold ROWS rows in all. Then, in one transaction, as an
operator runs it: ALTER EXTENSION nico_extsvc UPDATE, timed by the server
(clock_timestamp() around it), the relation locks the transaction holds at its
end (by mode), then COMMIT. Prints the row counts per table, the time, the
tables it took ACCESS EXCLUSIVE on and the sizes before and after.

No worker runs (extsvc.database is not this database) and no dpfsim is needed.
Sizes: ROWS (default 1,000,000), DPUS (default 25,000); BENCH_QUICK=1 runs
100,000 rows on 2,000 DPUs.
Usage: /usr/bin/python3 bench/upgrade_time.py   (BUILD_DIR, PG_CONFIG as for
the test command; the library and SQL scripts installed with make install)
"""
import sys

sys.dont_write_bytecode = True
import os
import shutil
import subprocess
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from extsvc_testkit import harness  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
ROWS = int(os.environ.get("ROWS", 100_000 if QUICK else 1_000_000))
DPUS = int(os.environ.get("DPUS", 2_000 if QUICK else 25_000))
DB = "extsvc_upgrade_bench"

FILL = """
DO $fill$
DECLARE
  n int := {dpus};
  chart text := '{{"repoURL":"https://charts.example.com/stable","chartName":"agent-%s","chartVersion":"1.0.0","security":{{"privileged":false}}}}';
  svc uuid[];
  s record;
BEGIN
  PERFORM set_config('extsvc.enforce_chart_allowlist', 'off', true);
  FOR i IN 0 .. n - 1 LOOP
    PERFORM extsvc.register_dpu(md5('dpu' || i)::uuid, md5('host' || (i / 2))::uuid,
                                'dpu-device-' || i, 'dpu-node-' || i, i % 2 = 0);
  END LOOP;
  FOR i IN 0 .. n / 10 - 1 LOOP
    SELECT service_id INTO s FROM extsvc.create_service('tenant-' || (i % 50), 'svc-' || i, 'DPF_HELM_CHART',
      format(chart, i), dpu_target => 'ALL');
    svc := svc || s.service_id;
  END LOOP;
  -- as the worker leaves them: READY
  UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker',
    state_reason = 'dpuservice_created', applied_revision = desired_revision;
  FOR i IN 0 .. n / 2 - 1 LOOP
    PERFORM extsvc.upsert_instance(md5('inst' || i)::uuid, 'tenant-' || (i % 50), md5('host' || i)::uuid,
                                   ARRAY[md5('dpu' || (2 * i))::uuid, md5('dpu' || (2 * i + 1))::uuid]);
    PERFORM extsvc.set_instance_extension_services(md5('inst' || i)::uuid,
      (SELECT jsonb_build_array(jsonb_build_object('service_id', service_id, 'version', version))
         FROM extsvc.services WHERE service_id = svc[1 + i % array_length(svc, 1)]));
  END LOOP;
END
$fill$;
"""


def q(pg, query):
    """Runs statements in the bench database; rows as lists of strings."""
    r = subprocess.run([f"{harness.PGBIN}/psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                        "-h", pg.dir, "-p", str(pg.port), "-U", harness.PG_USER, "-d", DB, "-c", query],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"SQL failed: {query[:200]}\n{r.stderr}")
    return [line.split("\t") for line in r.stdout.splitlines() if line]


def total_rows(pg):
    q(pg, "ANALYZE")
    rows = q(pg, """
      SELECT c.oid::regclass::text, c.reltuples::bigint, pg_total_relation_size(c.oid)
        FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
       WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'nico_extsvc')
         AND d.classid = 'pg_class'::regclass AND c.relkind = 'r' ORDER BY 1""")
    return {t: (max(int(n), 0), int(b)) for t, n, b in rows}


def main():
    work = tempfile.mkdtemp(prefix="extsvc-upgrade-bench-")
    os.chmod(work, 0o755)  # the server runs as an unprivileged user
    pg = harness.Postgres(work, {"extsvc.workers": "1", "maintenance_work_mem": "'256MB'",
                                 "max_wal_size": "'4GB'"}, extension=False)
    try:
        pg.sql(f"CREATE DATABASE {DB}")
        t0 = time.monotonic()
        q(pg, "CREATE EXTENSION nico_extsvc VERSION '0.2.0'")
        q(pg, FILL.format(dpus=DPUS))
        fill_api = time.monotonic() - t0
        # history until the tables hold ROWS rows in all
        have = sum(n for n, _ in total_rows(pg).values())
        missing = max(ROWS - have, 0)
        q(pg, f"""
          SET session_replication_role = replica;
          INSERT INTO extsvc.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version,
                                                from_state, to_state, actor, reason, message, observed_at, at)
          SELECT h.machine, h.instance_id, h.dpu_machine_id, h.service_id, h.version, h.from_state, h.to_state,
                 h.actor, h.reason, h.message, h.observed_at, h.at - make_interval(secs => g)
            FROM (SELECT * FROM extsvc.dpu_state_history ORDER BY id LIMIT 1000) h,
                 generate_series(1, greatest(ceil({missing} * 3 / 4 / 1000.0)::int, 1)) g;
          INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision, at)
          SELECT h.service_id, h.from_state, h.to_state, h.actor, h.reason, h.message, h.revision,
                 h.at - make_interval(secs => g)
            FROM (SELECT * FROM extsvc.service_state_history ORDER BY id LIMIT 1000) h,
                 generate_series(1, greatest(ceil({missing} / 4 / 1000.0)::int, 1)) g;""")
        q(pg, "CHECKPOINT")
        before = total_rows(pg)
        fill_all = time.monotonic() - t0
        print(f"upgrade_time: 0.2.0 database of {DPUS:,} DPUs, {DPUS // 2:,} instances, {DPUS // 10:,} services; "
              f"filled in {fill_all:.0f} s ({fill_api:.0f} s through the 0.2.0 API)")
        print(f"  machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"  {'table':48} {'rows':>10} {'MiB':>8}")
        for t, (n, b) in sorted(before.items(), key=lambda kv: -kv[1][0]):
            if n:
                print(f"  {t:48} {n:>10,} {b / 2**20:>8.1f}")
        total = sum(n for n, _ in before.values())
        print(f"  {'all':48} {total:>10,} {sum(b for _, b in before.values()) / 2**20:>8.1f}")
        current = q(pg, "SELECT default_version FROM pg_available_extensions WHERE name = 'nico_extsvc'")[0][0]
        out = q(pg, """
          BEGIN;
          CREATE TEMP TABLE t (at timestamptz);
          INSERT INTO t VALUES (clock_timestamp());
          ALTER EXTENSION nico_extsvc UPDATE;
          SELECT extract(epoch FROM clock_timestamp() - at) FROM t;
          SELECT mode, count(*), string_agg(relation::regclass::text, ' ' ORDER BY relation::regclass::text)
            FILTER (WHERE mode = 'AccessExclusiveLock' AND c.relkind = 'r' AND c.relnamespace = 'extsvc'::regnamespace)
            FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
           WHERE pid = pg_backend_pid() AND locktype = 'relation' GROUP BY mode ORDER BY mode;
          COMMIT;""")
        secs = float(out[0][0])
        after = total_rows(pg)
        print(f"  ALTER EXTENSION nico_extsvc UPDATE (0.2.0 -> {current}): {secs:.1f} s in one transaction, "
              f"{total / max(secs, 1e-9):,.0f} rows/s")
        for mode, count, rels in out[1:]:
            print(f"    holds {count} relation lock(s) {mode}" + (f"; tables among them: {rels}" if rels else ""))
        grew = sum(b for _, b in after.values()) - sum(b for _, b in before.values())
        print(f"  size after: {sum(b for _, b in after.values()) / 2**20:.1f} MiB ({grew / 2**20:+.1f} MiB: "
              "rewritten tables before VACUUM)")
        kept = all(after.get(t, (0, 0))[0] >= n * 0.99 for t, (n, _) in before.items())
        print("  every table kept its rows (reltuples after ANALYZE)" if kept else "  ROWS WERE LOST")
        return 0 if kept else 1
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
