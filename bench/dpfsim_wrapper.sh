#!/usr/bin/env bash
# Starts dpfsim with extra arguments (BENCH_SIM_ARGS, e.g. "--tick-ms 500") appended to the
# harness's fixed command line. bench/common.py points the harness here when BENCH_SIM_ARGS is set.
# shellcheck disable=SC2086
exec "$BENCH_REAL_DPFSIM" "$@" ${BENCH_SIM_ARGS:-}
