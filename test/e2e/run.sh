#!/usr/bin/env bash
# Runs every end-to-end suite (worker + dpfsim + PostgreSQL). Each prints
# "N passed, N failed"; this script sums them into the same closing line.
# One file by hand, from the repository root (the harness is the package
# python/extsvc_testkit):  PYTHONPATH=python /usr/bin/python3 test/e2e/test_workers.py
set -uo pipefail
source "$(dirname "$0")/../../scripts/lib/common.sh"  # PYTHONPATH for extsvc_testkit
cd "$(dirname "$0")"
total_p=0; total_f=0
for t in test_*.py; do
  out=$(mktemp)
  "$PY" "$t" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  # a file may run several groups (each with its own cluster): count them all
  lines=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out")
  if [ -z "$lines" ]; then total_f=$((total_f + 1)); echo "$t: no summary (crashed?)"
  else
    file_f=0
    while read -r p _ f _; do
      total_p=$((total_p + p)); file_f=$((file_f + f))
    done <<< "$lines"
    # a file that exits non-zero without a counted failure crashed somewhere
    if [ "$rc" -ne 0 ] && [ "$file_f" -eq 0 ]; then file_f=1; echo "$t: exit $rc"; fi
    total_f=$((total_f + file_f))
  fi
  rm -f "$out"
done
echo "e2e: $total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
