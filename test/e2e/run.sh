#!/usr/bin/env bash
# Runs every end-to-end suite (worker + dpfsim + PostgreSQL). Each prints
# "N passed, N failed"; this script sums them into the same closing line.
set -uo pipefail
cd "$(dirname "$0")"
total_p=0; total_f=0
for t in test_*.py; do
  out=$(mktemp)
  python3 "$t" 2>&1 | tee "$out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
  if [ -z "$line" ]; then total_f=$((total_f + 1)); echo "$t: no summary (crashed?)"
  else
    total_p=$((total_p + $(echo "$line" | cut -d' ' -f1)))
    total_f=$((total_f + $(echo "$line" | cut -d' ' -f3)))
  fi
  rm -f "$out"
done
echo "e2e: $total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
