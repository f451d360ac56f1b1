#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of test/fuzz (clang,
# -fsanitize=fuzzer,address,undefined) in $SANITIZE_BUILD_DIR.
#
#   scripts/fuzz.sh smoke [SECONDS]   each target for SECONDS (default 10) from
#                                     its seed corpus, FUZZ_JOBS (default 2) at a
#                                     time; fails on any finding (CI)
#   scripts/fuzz.sh long [SECONDS]    the recorded run: SECONDS (default 900) in
#                                     total on one core, split over the targets
#                                     by weight, then writes executions, coverage
#                                     and findings into docs/reliability.md, with
#                                     the run's record (<!-- fuzz-run {json} -->)
#                                     that tools/reliability_summary.py reads
#   scripts/fuzz.sh build             only build the targets
#
# Findings (crash-*, leak-*, timeout-*, oom-* inputs) land in
# $SANITIZE_BUILD_DIR/fuzz-work/<target>/; replay one with
#   $SANITIZE_BUILD_DIR/test/fuzz/fuzz_<target> <file>
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/lib/sanitize-build.sh"
BUILD="$SANITIZE_BUILD"
WORK="$BUILD/fuzz-work"
DOC="$ROOT/docs/reliability.md"
# name:weight. The weight sets the share of the long run's time; the slow
# targets (a file write, or HTTP round trips, per input) get more.
TARGETS=(strict_json:3 helm_chart_data:3 repo_url:2 semver:1 quantity:1 merge_patch:3
         kubeconfig:3 kube_status:2 kube_list:3 watch_events:3)

build() { sanitize_build extsvc_fuzzers; }

# run_target NAME SECONDS LOGFILE: fuzzes from the tree's seeds plus the
# working corpus of earlier runs; new inputs go to the working corpus only.
run_target() {
  local name="$1" secs="$2" log="$3"
  mkdir -p "$WORK/$name/corpus"
  rm -f "$WORK/$name"/crash-* "$WORK/$name"/leak-* "$WORK/$name"/timeout-* "$WORK/$name"/oom-*
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$BUILD/test/fuzz/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 "${SEED_ARG[@]}" \
      -print_final_stats=1 -artifact_prefix="$WORK/$name/" \
      "$WORK/$name/corpus" "$ROOT/test/fuzz/corpus/$name" >"$log" 2>&1
}

findings() { find "$WORK/$1" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l; }
stat_of() { sed -n "s/^stat::$2: *//p" "$1" | tail -n 1; }

SEED_ARG=()
smoke() {
  local secs="${1:-10}" jobs="${FUZZ_JOBS:-2}" failed=0 t name pids=() names=()
  # CI: the same input sequence every run (the seed corpora, which hold every
  # earlier finding, then seed 1), so a red run is reproducible, not luck.
  # FUZZ_JOBS targets at a time (default 2, one per core of the test machine),
  # each for its full SECONDS; the results are reported in target order.
  SEED_ARG=(-seed=1)
  for t in "${TARGETS[@]}"; do
    name="${t%%:*}"
    mkdir -p "$WORK/$name"
    if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    (run_target "$name" "$secs" "$WORK/$name/smoke.log"; echo $? >"$WORK/$name/smoke.rc") &
    pids+=($!); names+=("$name")
  done
  wait
  for name in "${names[@]}"; do
    local log="$WORK/$name/smoke.log"
    if [ "$(cat "$WORK/$name/smoke.rc")" = 0 ] && [ "$(findings "$name")" -eq 0 ]; then
      echo "fuzz_$name: ok, $(stat_of "$log" number_of_executed_units) executions in ${secs} s"
    else
      failed=$((failed + 1))
      echo "fuzz_$name: FAILED (log: $log)"
      grep -E 'FUZZ CHECK|ERROR|runtime error|SUMMARY' "$log" | head -n 10
    fi
  done
  [ "$failed" -eq 0 ]
}

long() {
  local total="${1:-900}" sum=0 t name w
  for t in "${TARGETS[@]}"; do sum=$((sum + ${t##*:})); done
  local all_execs=0 all_findings=0 started load figures="$WORK/long-figures.tsv"
  started="$(date -u +%Y-%m-%dT%H:%MZ)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  : >"$figures"
  for t in "${TARGETS[@]}"; do
    name="${t%%:*}"; w="${t##*:}"
    local secs=$((total * w / sum)) log="$WORK/$name/long.log"
    echo "fuzz_$name: ${secs} s"
    local t0=$SECONDS
    run_target "$name" "$secs" "$log"
    local took=$((SECONDS - t0))
    local execs cov ft corp edges found
    execs="$(stat_of "$log" number_of_executed_units)"; execs="${execs:-0}"
    cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)"
    ft="$(grep -oE 'ft: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)"
    corp="$(grep -oE 'corp: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)"
    edges="$(sed -n 's/.*Loaded 1 modules *(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -n 1)"
    found="$(findings "$name")"
    all_execs=$((all_execs + execs)); all_findings=$((all_findings + found))
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$secs" "$took" "$execs" "${cov:-0}" "${edges:-0}" \
      "${ft:-0}" "${corp:-0}" "$found" >>"$figures"
    echo "  $execs executions, cov ${cov:-?} of ${edges:-?} edges, $found findings"
  done
  # The human table and the run's record, both from the same figures.
  PYTHONPATH="$ROOT/python" "${PY:-/usr/bin/python3}" - "$DOC" "$figures" "$total" "$started" "$load" "$(nproc)" "$(clang++ --version | head -n 1)" \
    "$(sed -n 's/^CMAKE_CXX_FLAGS_RELWITHDEBINFO:[A-Z]*=//p' "$BUILD/CMakeCache.txt")" <<'PY'
import sys
from extsvc_testkit.invariants import run_record, run_stamp, write_doc_block
doc, figures, total, started, load, cores, clang, flags = sys.argv[1:]
targets = {}
for line in open(figures):
    name, budget, took, execs, cov, edges, ft, corp, found = line.rstrip("\n").split("\t")
    targets[name] = {"budget_s": int(budget), "seconds": int(took), "executions": int(execs), "cov": int(cov),
                     "edges": int(edges), "features": int(ft), "corpus": int(corp), "findings": int(found)}
execs = sum(t["executions"] for t in targets.values())
secs = sum(t["seconds"] for t in targets.values())
found = sum(t["findings"] for t in targets.values())
rows = "".join(f"| fuzz_{k} | {t['budget_s']} | {t['seconds']} | {t['executions']} | "
               f"{t['executions'] // max(1, t['seconds'])} | {t['cov']} of {t['edges']} | {t['features']} | "
               f"{t['corpus']} | {t['findings']} |\n" for k, t in targets.items())
verdict = "the goal of 10^7 was reached" if execs >= 10**7 else "the goal of 10^7 was NOT reached in this time budget"
record = {**run_stamp(), "started": started, "budget_s": int(total), "seconds": secs, "executions": execs,
          "findings": found, "targets": targets, "clang": clang, "flags": flags, "load": load}
write_doc_block("fuzz-results", f"""Run of `scripts/fuzz.sh long {total}` started {started} on commit `{record['commit']}`: one fuzzing
process at a time on a machine with {cores} cores shared with other work (load average {load} at the start),
`{clang}` with `{flags}`, seeded from `test/fuzz/corpus/` plus the working
corpus of earlier runs. A target stops early at its first finding.

| Target | Budget s | Ran s | Executions | Exec/s | Coverage (edges hit of instrumented) | Features | Corpus | Findings |
|---|---:|---:|---:|---:|---|---:|---:|---:|
{rows}| **Total** | {total} | {secs} | **{execs}** | | | | | **{found}** |

Total: {execs} executions in {secs} s, {found} findings; {verdict}.
{run_record("fuzz", record)}""", doc)
print(f"total: {execs} executions, {found} findings; recorded in {doc}")
PY
  [ "$all_findings" -eq 0 ]
}

mode="${1:-smoke}"; shift || true
build || { echo "fuzz: build failed"; exit 1; }
case "$mode" in
  build) ;;
  smoke) smoke "$@" ;;
  long) long "$@" ;;
  *) echo "usage: $0 smoke [SECONDS] | long [SECONDS] | build" >&2; exit 2 ;;
esac
