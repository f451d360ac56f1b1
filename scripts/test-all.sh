#!/usr/bin/env bash
# Sets everything up and runs every test suite of nico_extsvc:
#   unit (GoogleTest: core, Kubernetes client), simulator (dpfsim + kubectl
#   conformance), the unit tests again under ASan+UBSan, libFuzzer smoke runs,
#   SQL (pg_regress, pgTAP), dump/restore and upgrade, end-to-end
#   (worker + dpfsim), and high availability under Patroni.
# Usage: scripts/test-all.sh            (installs apt packages first)
#        SKIP_DEPS=1 scripts/test-all.sh (developer loop: skip apt)
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$ROOT/scripts/lib/pgcluster.sh"

passed=0; failed=0; failed_names=()
suite() {  # suite NAME COMMAND...
  local name="$1"; shift
  log "suite: $name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1)); echo "suite $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failed_names+=("$name"); echo "suite $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

trap 'pg_cluster_stop' EXIT

if [ -z "${SKIP_DEPS:-}" ]; then
  "$ROOT/scripts/install-deps.sh" || exit 1
fi
if [ -n "${CLEAN_BUILD:-${CI:-}}" ]; then rm -rf "$BUILD_DIR" "${SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"; fi
build_and_install || { echo "build failed"; echo "suites: 0 passed, 1 failed"; exit 1; }

suite format "$ROOT/scripts/check-format.sh"
suite meta "$ROOT/scripts/check-meta.sh"
# GoogleTest suites (core, client, simulator) and the kubectl conformance test
suite unit-and-sim bash -c "cd '$BUILD_DIR' && ctest --output-on-failure --timeout 300 -j 2"
# The same core and client GoogleTests under ASan+UBSan (clang, build-sanitize/),
# then every libFuzzer target briefly from its seed corpus (docs/reliability.md).
suite sanitizers "$ROOT/scripts/sanitize-tests.sh"
suite fuzz "$ROOT/scripts/fuzz.sh" smoke "${FUZZ_SMOKE_SECONDS:-5}"

# SQL suites run against a throw-away cluster with the library preloaded but
# no cluster configured, so the workers stay idle and never race the tests.
pg_cluster_start sqltest "extsvc.workers = 1" || { echo "suites: $passed passed, $((failed + 1)) failed"; exit 1; }
suite pg_regress make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" installcheck \
  PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER"
suite pgtap "$ROOT/scripts/run-pgtap.sh"
suite lifecycle-doc python3 "$ROOT/tools/lifecycle_doc.py" --check extsvc_tap
suite placement-doc python3 "$ROOT/tools/lifecycle_doc.py" --check extsvc_tap placement
# issue #13: docs/reliability.md's summary table is what the run records give (no database)
suite reliability-doc python3 "$ROOT/tools/reliability_summary.py" --check
# issue #14 P0-4: the attach/delete race, two psql sessions driven step by step
suite race-attach-delete env PGBIN="$PGBIN" python3 "$ROOT/test/nico/race_attach_delete.py"
# issue 29: a refused call of one tenant never locks another tenant's services,
# three sessions driven step by step
suite race-tenant-lock env PGBIN="$PGBIN" python3 "$ROOT/test/nico/race_tenant_lock.py"
# issue #13: API calls against the worker's DPU completion, two sessions driven
# step by step; one lock order, no 40P01 deadlock (docs/reliability.md)
suite race-dpu-completion env PGBIN="$PGBIN" python3 "$ROOT/test/nico/race_dpu_completion.py"
# issue 22: a day of NICo's handlers through a client that binds like sqlx
# (psycopg 3: Debian's python3-psycopg, for /usr/bin/python3), as an
# extsvc_api-only login role, with NICo MachineIds
suite nico-day /usr/bin/python3 "$ROOT/test/nico/nico_day.py"
# issue 22: 1,000 pairs of NICo's handler transactions at once in two sessions
# of that client; no 40P01, every pair explained by a serial order of the
# reference model (docs/reliability.md)
suite nico-concurrency /usr/bin/python3 "$ROOT/test/nico/concurrency.py" --pairs 1000 --seed "${NICO_CONC_SEED:-1}"
# issue #13: 300 seeded random call sequences against the reference model of
# the SQL contract, state compared after every call (bench/model_sql.py runs 10^4)
suite model-sql env PGBIN="$PGBIN" python3 "$ROOT/bench/model_sql.py" --ci
# issue #12: pg_dump -Fc / pg_restore keep every row of every extension table
suite dump-restore env PGBIN="$PGBIN" python3 "$ROOT/test/upgrade/dump_restore.py"
pg_cluster_stop

# SPEC 6: without shared_preload_libraries, CREATE EXTENSION and the SQL API
# work and the worker functions say the worker is not loaded.
if PG_CLUSTER_PRELOAD=0 pg_cluster_start nopreload; then
  suite pg_regress-nopreload make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" installcheck-nopreload \
    PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER"
else
  failed=$((failed + 1)); failed_names+=("pg_regress-nopreload")
fi
pg_cluster_stop

# 0.1.0 -> 0.2.0 -> 0.3.0 and 0.2.0 -> 0.3.0 (schema equal to a fresh install, data kept, the
# worker waits for ALTER EXTENSION UPDATE); its own server and dpfsim
suite upgrade env PGBIN="$PGBIN" python3 "$ROOT/test/upgrade/test_upgrade.py"
suite e2e "$ROOT/test/e2e/run.sh"
# issue #25: a two-member Patroni cluster (etcd, streaming replication) under NICo-style load:
# switchover, failover, a killed postmaster, a lingering old primary, a restored copy and a second
# site (test/ha/test_patroni.py; --long writes the docs figures). Debian's Python: patroni, psycopg.
suite patroni env HA_ONLY=switchover,failover,kill,lingering,restored,sites /usr/bin/python3 "$ROOT/test/ha/test_patroni.py"
# issue #13: 30 s of ~20 % mixed faults on both clusters, then convergence
# with the invariants (bench/soak.py runs the 5-minute, 500-service version)
suite soak-short python3 "$ROOT/bench/soak.py" --ci

for d in regress-out regress-nopreload-out; do
  if [ -s "$BUILD_DIR/$d/regression.diffs" ]; then head -n 80 "$BUILD_DIR/$d/regression.diffs"; fi
done
[ "$failed" -eq 0 ] || echo "failed suites: ${failed_names[*]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
