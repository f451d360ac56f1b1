#!/usr/bin/env bash
# Runs the GoogleTest suites of the core (test/unit) and of the Kubernetes
# client against its local HTTP/TLS servers (test/kube) under AddressSanitizer
# (with LeakSanitizer) and UndefinedBehaviorSanitizer. They are built with
# clang in $SANITIZE_BUILD_DIR (default build-sanitize/, -DEXTSVC_FUZZ=ON,
# which implies -DEXTSVC_SANITIZE=ON), the same directory and libraries as
# the fuzz targets of scripts/fuzz.sh. Any sanitizer report fails the run.
# Extra arguments go to both test binaries (e.g. --gtest_filter=...).
# WRITE_DOC=1 records the run (tests, result, time, reports) in
# docs/reliability.md ("Sanitizers") with its <!-- sanitize-run {json} -->
# record for tools/reliability_summary.py.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/lib/sanitize-build.sh"
BUILD="$SANITIZE_BUILD"
sanitize_build extsvc_unit_tests extsvc_kube_tests || exit 1

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=0 figures=""
for t in test/unit/extsvc_unit_tests test/kube/extsvc_kube_tests; do
  log="$BUILD/$(basename "$t").sanitize.log"
  t0=$SECONDS
  if (cd "$BUILD/$(dirname "$t")" && "./$(basename "$t")" --gtest_brief=1 "$@") >"$log" 2>&1; then
    ok=1
    echo "$(basename "$t") under ASan+UBSan: $(grep -E '^\[  PASSED  \]' "$log" | tail -n 1)"
  else
    ok=0
    failed=$((failed + 1))
    echo "$(basename "$t") under ASan+UBSan: FAILED (log: $log)"
    grep -E '^\[  FAILED  \]|ERROR: (Address|Leak)Sanitizer|runtime error|SUMMARY' "$log" | head -n 20
  fi
  tests="$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$log" | tail -n 1)"
  reports="$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log")"
  figures+="$(basename "$t") ${tests:-0} $ok $((SECONDS - t0)) $reports"$'\n'
done
if [ -n "${WRITE_DOC:-}" ] && [ "$#" -eq 0 ]; then
  PYTHONPATH="$ROOT/python" "${PY:-/usr/bin/python3}" - "$figures" "$(clang++ --version | head -n 1)" "$SANITIZE_CXX_FLAGS" <<'PY'
import sys
figures, clang, flags = sys.argv[1:]
from extsvc_testkit.invariants import run_record, run_stamp, write_doc_block
binaries = {}
for line in figures.split("\n"):
    if line.strip():
        name, tests, ok, secs, reports = line.split()
        binaries[name] = {"tests": int(tests), "failed": 1 - int(ok), "seconds": int(secs), "reports": int(reports)}
rec = {**run_stamp(), "binaries": binaries, "reports": sum(b["reports"] for b in binaries.values()),
       "clang": clang, "flags": flags}
rows = "\n".join(f"| `{k}` | {b['tests']} | {'passed' if not b['failed'] else 'FAILED'} | {b['reports']} | {b['seconds']} s |"
                 for k, b in binaries.items())
write_doc_block("sanitize-results", f"""| binary | tests | result | sanitizer reports | time |
|---|---:|---|---:|---:|
{rows}

Measured {rec['date']} on commit `{rec['commit']}` by `WRITE_DOC=1 scripts/sanitize-tests.sh` (`{clang}`, `{flags}`).
{run_record("sanitize", rec)}""")
PY
fi
[ "$failed" -eq 0 ]
