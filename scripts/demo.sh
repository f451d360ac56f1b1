#!/usr/bin/env bash
# The main job: installs dependencies, builds and installs nico_extsvc, then
# runs the whole story against the embedded cluster simulator (dpfsim):
# create, attach to two instances, per-DPU status, rolling update, rollback,
# detach, instance deletion and service deletion, with status tables at each
# step, and the metrics at the end.
#   scripts/demo.sh             (installs apt packages first)
#   SKIP_DEPS=1 scripts/demo.sh (skip apt)
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
if [ -z "${SKIP_DEPS:-}" ]; then "$ROOT/scripts/install-deps.sh"; fi
# the demo prints how long it took from here to its first status table
DEMO_T0="$(date +%s.%N)"
export DEMO_T0
# what ships (the extension) and the simulator the demo runs against; nothing else
build_and_install
log "building dpfsim (make sim)"
make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" sim
BUILD_DIR="$BUILD_DIR" exec "$PY" "$ROOT/scripts/demo.py"
