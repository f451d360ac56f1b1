#!/usr/bin/env bash
# Runs every benchmark and prints its tables.
#   bench/run.sh                 the issue's sizes (~8 min on 2 cores, plus ~6 min for claim_query at 1M
#                                queue rows; fleet scaled down, see docs/performance.md)
#   BENCH_QUICK=1 bench/run.sh   small sizes (~3 min, plus ~1 min for claim_query)
#   PYTHONPATH=python /usr/bin/python3 bench/worker_latency.py   one benchmark by hand, from the repository root
# Env: BUILD_DIR (default ./build; the harness takes DPFSIM from it; `make bench-tools` builds it), sizes as documented in
# each bench/*.py and docs/performance.md. Needs the extension installed (sudo make install),
# psql/initdb/pg_ctl of PostgreSQL 15, python3 and, for the reference, kubectl.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
source "$ROOT/scripts/lib/common.sh"  # PYTHONPATH for extsvc_testkit
export BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
export PYTHONUNBUFFERED=1
[ -x "${DPFSIM:-$BUILD_DIR/sim/dpfsim}" ] || { echo "missing ${DPFSIM:-$BUILD_DIR/sim/dpfsim}: build it first (make bench-tools)" >&2; exit 1; }

echo "# nico_extsvc benchmarks ($( [ -n "${BENCH_QUICK:-}" ] && [ "${BENCH_QUICK}" != 0 ] && echo quick || echo full ) sizes)"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(nproc) CPUs  $(uname -sr)  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(postgres --version 2>/dev/null || "$(pg_config --bindir)/postgres" --version)  $(kubectl version --client 2>/dev/null | head -1)"
rc=0
for b in worker_latency worker_throughput ops_calls placement claim_query; do
  t0=$(date +%s)
  echo
  echo "## $b"
  "$PY" "$HERE/$b.py" || { echo "!! $b failed"; rc=1; }
  echo "## $b: $(( $(date +%s) - t0 ))s"
done
if [ -x "$HERE/sim_throughput.sh" ] || [ -f "$HERE/sim_throughput.sh" ]; then
  echo
  echo "## sim_throughput"
  if [ -n "${BENCH_QUICK:-}" ] && [ "${BENCH_QUICK}" != 0 ]; then export SECONDS_PER_RUN="${SECONDS_PER_RUN:-2}"; fi
  bash "$HERE/sim_throughput.sh" "$BUILD_DIR" || { echo "!! sim_throughput failed"; rc=1; }
fi
exit $rc
