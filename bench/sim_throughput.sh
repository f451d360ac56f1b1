#!/usr/bin/env bash
# Measures dpfsim throughput (requests/s) for GET and PATCH over keep-alive connections.
# Usage: bench/sim_throughput.sh [BUILD_DIR]   (default: ./build; needs sim/dpfsim and sim/dpfsim_load)
# Env: THREADS (default 2), SECONDS_PER_RUN (default 5), DPUS (default 16)
set -euo pipefail
BUILD_DIR="${1:-${BUILD_DIR:-./build}}"
SIM="$BUILD_DIR/sim/dpfsim"
LOAD="$BUILD_DIR/sim/dpfsim_load"
THREADS="${THREADS:-2}"
SECS="${SECONDS_PER_RUN:-5}"
DPUS="${DPUS:-16}"
for b in "$SIM" "$LOAD"; do
  [ -x "$b" ] || { echo "missing $b (build the dpfsim and dpfsim_load targets first)" >&2; exit 1; }
done
OUT="$(mktemp)"
"$SIM" --listen 127.0.0.1:0 --dpu-listen 127.0.0.1:0 --control-listen 127.0.0.1:0 --dpus "$DPUS" --log-level warn >"$OUT" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$OUT"' EXIT
for _ in $(seq 1 100); do [ -s "$OUT" ] && break; sleep 0.05; done
MGMT="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["management"])' "$OUT")"
DPU="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["dpu"])' "$OUT")"
DEV=/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpudevices/dpu-device-0000
NODE=/api/v1/nodes/host-0000-dpu-device-0000

echo "dpfsim throughput: $(nproc) CPUs, $THREADS client threads (keep-alive), ${SECS}s per run, $DPUS DPUs"
run() {  # label args...
  local label="$1"; shift
  local res
  res="$("$LOAD" --threads "$THREADS" --seconds "$SECS" "$@")"
  python3 - "$label" "$res" <<'PY'
import json, sys
r = json.loads(sys.argv[2])
print(f"{sys.argv[1]:<44} {r['rps']:>8} req/s   p50 {r['p50_us']:>6} us   p99 {r['p99_us']:>6} us   errors {r['errors']}")
PY
}
run "GET  dpudevice (management)" --url "$MGMT" --path "$DEV"
run "GET  node (dpu)" --url "$DPU" --path "$NODE"
run "LIST dpudevices (management, $DPUS items)" --url "$MGMT" --path /apis/provisioning.dpu.nvidia.com/v1alpha1/dpudevices
run "PATCH dpudevice label (merge, real writes)" --url "$MGMT" --path "$DEV" --method PATCH \
  --content-type application/merge-patch+json --body '{"metadata":{"labels":{"bench":"v{i}"}}}'
run "PATCH node label (merge, real writes)" --url "$DPU" --path "$NODE" --method PATCH \
  --content-type application/merge-patch+json --body '{"metadata":{"labels":{"bench":"v{i}"}}}'
