#!/usr/bin/env bash
# Runs the GoogleTest suites of the core (test/unit) and of the Kubernetes
# client against its local HTTP/TLS servers (test/kube) under AddressSanitizer
# (with LeakSanitizer) and UndefinedBehaviorSanitizer. They are built with
# clang in $SANITIZE_BUILD_DIR (default build-sanitize/, -DEXTSVC_FUZZ=ON,
# which implies -DEXTSVC_SANITIZE=ON), the same directory and libraries as
# the fuzz targets of scripts/fuzz.sh. Any sanitizer report fails the run.
# Extra arguments go to both test binaries (e.g. --gtest_filter=...).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/lib/sanitize-build.sh"
BUILD="$SANITIZE_BUILD"
sanitize_build extsvc_unit_tests extsvc_kube_tests || exit 1

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=0
for t in test/unit/extsvc_unit_tests test/kube/extsvc_kube_tests; do
  log="$BUILD/$(basename "$t").sanitize.log"
  if (cd "$BUILD/$(dirname "$t")" && "./$(basename "$t")" --gtest_brief=1 "$@") >"$log" 2>&1; then
    echo "$(basename "$t") under ASan+UBSan: $(grep -E '^\[  PASSED  \]' "$log" | tail -n 1)"
  else
    failed=$((failed + 1))
    echo "$(basename "$t") under ASan+UBSan: FAILED (log: $log)"
    grep -E '^\[  FAILED  \]|ERROR: (Address|Leak)Sanitizer|runtime error|SUMMARY' "$log" | head -n 20
  fi
done
[ "$failed" -eq 0 ]
