#!/usr/bin/env bash
# Runs every end-to-end suite (worker + dpfsim + PostgreSQL). Each prints
# "N passed, N failed"; this script sums them into the same closing line and
# says how long each file took. Every file makes its own clusters (copies of
# the test command's template, extsvc_testkit.cluster) and its own dpfsim on
# free ports, so files may run side by side: E2E_JOBS at a time (default 1:
# one after another, output live; the test command sets 4). The files mostly
# wait (one at a time they kept 5 % of the two CPUs busy): E2E_JOBS=4 takes
# 210-230 s instead of about 740 s (docs/performance.md, "Build and test
# time"); a look at a state the worker reaches later on a busy machine waits
# for it (wait_until), never a fixed sleep. Side by side, the longest run first
# (test/e2e/durations: the seconds each took in a measured run; a run not
# listed there counts as the longest), each file's output printed whole, in
# file order, when all are done.
# One file by hand, from the repository root (the harness is the package
# python/extsvc_testkit):  PYTHONPATH=python /usr/bin/python3 test/e2e/test_workers.py
# Usage: run.sh [FILE...] (default: every test_*.py here). A file with a line
# "# dpf-profiles: vA vB ..." runs once per dpfsim release profile, with
# E2E_DPF_VERSION set to the profile; its runs are named FILE@PROFILE (one may
# be named so on the command line: run.sh test_fidelity.py@v25.7).
set -uo pipefail
source "$(dirname "$0")/../../scripts/lib/common.sh"  # PYTHONPATH for extsvc_testkit, $PY
cd "$(dirname "$0")"
jobs="${E2E_JOBS:-1}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run_one() {  # run_one RUN: FILE or FILE@PROFILE, run with E2E_DPF_VERSION=PROFILE
  local file="${1%@*}" profile=""
  [ "$file" != "$1" ] && profile="${1#*@}"
  E2E_DPF_VERSION="$profile" "$PY" "$file"
}

run_file() {  # run_file RUN: its output, exit status and seconds into $out
  local t0=$SECONDS rc=0
  run_one "$1" >"$out/$1.log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - t0))" >"$out/$1.rc"
}

[ "$#" -gt 0 ] || set -- test_*.py
files=()
for t in "$@"; do
  t="${t##*/}"
  if [ "${t%@*}" != "$t" ]; then files+=("$t"); continue; fi
  [ -f "$t" ] || { echo "run.sh: no such e2e file: $t" >&2; exit 2; }
  profiles=$(sed -n 's/^# dpf-profiles: *//p' "$t" | head -1)
  if [ -z "$profiles" ]; then files+=("$t"); continue; fi
  for p in $profiles; do files+=("$t@$p"); done
done
if [ "$jobs" -le 1 ]; then
  for t in "${files[@]}"; do
    t0=$SECONDS
    run_one "$t" 2>&1 | tee "$out/$t.log"
    echo "${PIPESTATUS[0]} $((SECONDS - t0))" >"$out/$t.rc"
  done
else
  # the longest first, so that no long file starts last and runs alone
  order=()
  while read -r _ t; do order+=("$t"); done < <(
    for t in "${files[@]}"; do
      secs=$(awk -v r="$t" '$1 == r { print $2 }' durations 2>/dev/null)
      echo "${secs:-999999} $t"
    done | sort -k1,1nr -k2,2)
  running=()
  for t in "${order[@]}"; do
    while [ "${#running[@]}" -ge "$jobs" ]; do
      wait -n 2>/dev/null || true
      alive=()
      for p in "${running[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
      running=("${alive[@]}")
    done
    run_file "$t" &
    running+=($!)
  done
  wait
  for t in "${files[@]}"; do cat "$out/$t.log"; done
fi

total_p=0; total_f=0
for t in "${files[@]}"; do
  read -r rc secs <"$out/$t.rc"
  # a file may run several groups (each with its own cluster): count them all
  lines=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/$t.log")
  file_p=0; file_f=0
  if [ -z "$lines" ]; then file_f=1; total_f=$((total_f + 1)); echo "$t: no summary (crashed?)"
  else
    while read -r p _ f _; do
      total_p=$((total_p + p)); file_p=$((file_p + p)); file_f=$((file_f + f))
    done <<< "$lines"
    # a file that exits non-zero without a counted failure crashed somewhere
    if [ "$rc" -ne 0 ] && [ "$file_f" -eq 0 ]; then file_f=1; echo "$t: exit $rc"; fi
    total_f=$((total_f + file_f))
  fi
  echo "e2e time: $t ${secs} s ($file_p passed, $file_f failed)"
done
echo "e2e: $total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
