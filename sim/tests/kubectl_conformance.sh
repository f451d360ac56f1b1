#!/usr/bin/env bash
# Drives the real kubectl against dpfsim: plain --server and a generated kubeconfig (TLS CA + token file).
# Usage: kubectl_conformance.sh [path/to/dpfsim]     (default: $DPFSIM or ./build/sim/dpfsim)
# Last line of output: "N passed, N failed"; exit status non-zero on any failure.
set -u
DPFSIM="${1:-${DPFSIM:-./build/sim/dpfsim}}"
KUBECTL="${KUBECTL:-kubectl}"
WORK="$(mktemp -d /tmp/dpfsim-kubectl-XXXXXX)"
PASS=0
FAIL=0
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
export HOME="$WORK/home"
mkdir -p "$HOME"
NS=dpf-operator-system

ok() { PASS=$((PASS + 1)); echo "PASS: $1"; }
ko() { FAIL=$((FAIL + 1)); echo "FAIL: $1"; echo "---- output ----"; echo "$2" | head -20; echo "----------------"; }
# check NAME REGEX CMD...   (output of CMD, stdout+stderr, must match REGEX)
check() {
  local name="$1" re="$2"; shift 2
  local out
  out="$(timeout 30 "$@" 2>&1)"
  if echo "$out" | grep -Eq -- "$re"; then ok "$name"; else ko "$name" "$out"; fi
}
# check_not NAME REGEX CMD...   (output must NOT match REGEX)
check_not() {
  local name="$1" re="$2"; shift 2
  local out
  out="$(timeout 30 "$@" 2>&1)"
  if echo "$out" | grep -Eq -- "$re"; then ko "$name" "$out"; else ok "$name"; fi
}
# retry NAME REGEX CMD... : like check but polls for up to 10 s
retry() {
  local name="$1" re="$2"; shift 2
  local out i
  for i in $(seq 1 50); do
    out="$(timeout 30 "$@" 2>&1)"
    if echo "$out" | grep -Eq -- "$re"; then ok "$name"; return; fi
    sleep 0.2
  done
  ko "$name" "$out"
}
start_sim() {  # start_sim OUTFILE ARGS... ; sets SIM_LINE
  local out="$1"; shift
  "$DPFSIM" --listen 127.0.0.1:0 --dpu-listen 127.0.0.1:0 --control-listen 127.0.0.1:0 "$@" >"$out" 2>"$out.err" &
  PIDS+=("$!")
  for _ in $(seq 1 100); do [ -s "$out" ] && break; sleep 0.05; done
  SIM_LINE="$(head -n1 "$out")"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2],""))' "$1" "$2"; }

if [ ! -x "$DPFSIM" ]; then echo "dpfsim binary not found: $DPFSIM"; echo "0 passed, 1 failed"; exit 1; fi

# ---------------- plain HTTP with --server ----------------
start_sim "$WORK/plain.out" --dpus 3 --all-delays-ms 50
M="$(field "$SIM_LINE" management)"; D="$(field "$SIM_LINE" dpu)"
KM=("$KUBECTL" --server "$M" --cache-dir "$WORK/cache")
KD=("$KUBECTL" --server "$D" --cache-dir "$WORK/cache")

check "get dpudevices" "dpu-device-0000 +True" "${KM[@]}" -n $NS get dpudevices
check "get dpus" "host-0001-dpu-device-0001 +True +Ready" "${KM[@]}" -n $NS get dpus
check "get dpudevices -A" "$NS +dpu-device-0002" "${KM[@]}" get dpudevices -A
check "get dpudevice -o yaml" "^kind: DPUDevice" "${KM[@]}" -n $NS get dpudevice dpu-device-0000 -o yaml
check "get dpudevice -o json" "\"kind\": \"DPUDevice\"" "${KM[@]}" -n $NS get dpudevice dpu-device-0000 -o json
check "get nodes" "host-0000-dpu-device-0000 +Ready" "${KD[@]}" get nodes
check "get nodes --show-labels" "provisioning.dpu.nvidia.com/dpunode-name=host-0000" "${KD[@]}" get nodes --show-labels
check "get nodes -o wide" "INTERNAL-IP.*\$|10\.0\.0\.1" "${KD[@]}" get nodes -o wide
check "get node -o yaml" "kubeletVersion: v1.32.0" "${KD[@]}" get node host-0000-dpu-device-0000 -o yaml
check "label dpudevice" "labeled" "${KM[@]}" -n $NS label dpudevice dpu-device-0001 role=edge
check "get -l equality" "dpu-device-0001" "${KM[@]}" -n $NS get dpudevices -l role=edge
check_not "get -l set-based notin" "dpu-device-0001" "${KM[@]}" -n $NS get dpudevices -l 'role notin (edge)'
check "get -l !key" "dpu-device-0000" "${KM[@]}" -n $NS get dpudevices -l '!role'
check "label overwrite" "labeled" "${KM[@]}" -n $NS label dpudevice dpu-device-0001 role=core --overwrite
check "label remove" "unlabeled|labeled" "${KM[@]}" -n $NS label dpudevice dpu-device-0001 role-
check "annotate dpudevice" "annotated" "${KM[@]}" -n $NS annotate dpudevice dpu-device-0001 owner=team-a
check "annotation visible" "owner: team-a" "${KM[@]}" -n $NS get dpudevice dpu-device-0001 -o yaml
check "label node" "labeled" "${KD[@]}" label node host-0002-dpu-device-0002 foreign=kept
check "patch --type=merge dpudevice" "patched" "${KM[@]}" -n $NS patch dpudevice dpu-device-0002 --type=merge \
  -p '{"spec":{"cluster":{"nodeLabels":{"tenant":"t1"}}}}'
retry "label propagated to node" "host-0002-dpu-device-0002" "${KD[@]}" get nodes -l tenant=t1
check "foreign node label kept" "foreign=kept" "${KD[@]}" get node host-0002-dpu-device-0002 --show-labels
check "patch --type=json" "patched" "${KM[@]}" -n $NS patch dpudevice dpu-device-0000 --type=json \
  -p '[{"op":"add","path":"/metadata/labels/jp","value":"yes"}]'

cat >"$WORK/svc.yaml" <<YAML
apiVersion: svc.dpu.nvidia.com/v1alpha1
kind: DPUService
metadata:
  name: demo
  namespace: $NS
spec:
  helmChart:
    source:
      repoURL: oci://registry.example.com/charts
      chart: demo
      version: 1.0.0
    values:
      greeting: hello
  security:
    privileged: false
  serviceDaemonSet:
    nodeSelector:
      nodeSelectorTerms:
      - matchExpressions:
        - key: tenant
          operator: In
          values: ["t1"]
YAML
sed -e 's/^  name: demo$/  name: bogus/' -e 's/^  security:$/  bogusField: 1\n  security:/' "$WORK/svc.yaml" >"$WORK/bogus.yaml"
check "create with unknown field fails (kubectl strict validation)" 'unknown field "spec.bogusField"' \
  "${KM[@]}" create -f "$WORK/bogus.yaml"
check_not "nothing created on strict failure" "bogus" "${KM[@]}" -n $NS get dpuservices
check "create dpuservice (validated)" "created" "${KM[@]}" create -f "$WORK/svc.yaml"
check "apply dpuservice (validated)" "configured|unchanged" "${KM[@]}" apply -f "$WORK/svc.yaml"
check "openapi explain" "privileged" "${KM[@]}" explain dpuservice.spec.security
retry "dpuservice Ready" "demo +True +Success" "${KM[@]}" -n $NS get dpuservices
check "get dpuservices -A" "$NS +demo" "${KM[@]}" get dpuservices -A
retry "get applications" "dpu-cplane-tenant1-demo +Synced +(Healthy|Progressing)" "${KM[@]}" -n $NS get applications
retry "application synced" "Synced" "${KM[@]}" -n $NS get application dpu-cplane-tenant1-demo -o jsonpath='{.status.sync.status}'
retry "get pods -o wide" "dpu-cplane-tenant1-demo-[a-z0-9]{5} +1/1 +Running .*host-0002-dpu-device-0002" "${KD[@]}" -n $NS get pods -o wide
check "get daemonsets" "dpu-cplane-tenant1-demo +1 +1 +1 +1 +1" "${KD[@]}" -n $NS get daemonsets
check "get ds short name" "dpu-cplane-tenant1-demo" "${KD[@]}" -n $NS get ds
check "get controllerrevisions" "dpu-cplane-tenant1-demo-[a-z0-9]+ +daemonset.apps/dpu-cplane-tenant1-demo +1" "${KD[@]}" -n $NS get controllerrevisions
check "patch dpuservice --type=merge" "patched" "${KM[@]}" -n $NS patch dpuservice demo --type=merge \
  -p '{"spec":{"serviceDaemonSet":{"annotations":{"rev":"2"}}}}'
retry "revision rolled" "dpu-cplane-tenant1-demo-[a-z0-9]+ +daemonset.apps/dpu-cplane-tenant1-demo +2" "${KD[@]}" -n $NS get controllerrevisions
check "strategic patch rejected for CR" "UnsupportedMediaType|unsupported|not supported|415" \
  "${KM[@]}" -n $NS patch dpuservice demo --type=strategic -p '{"metadata":{"labels":{"x":"y"}}}'
check "invalid dpuservice rejected" "is invalid|Invalid value" "${KM[@]}" -n $NS patch dpuservice demo --type=merge \
  -p '{"spec":{"helmChart":{"source":{"repoURL":"ftp://nope"}}}}'
# coordination.k8s.io/v1 Lease (issue 25): kubectl finds it through discovery, prints its Holder
cat >"$WORK/lease.yaml" <<YAML
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: nico-extsvc-conformance, namespace: $NS}
spec: {holderIdentity: "1.1/nico/2026-01-05T10:00:00.000000Z/db:5432", leaseDurationSeconds: 15}
YAML
check "create lease" "created" "${KM[@]}" create -f "$WORK/lease.yaml"
check "get leases" "nico-extsvc-conformance +1\.1/nico/2026-01-05T10:00:00.000000Z/db:5432" "${KM[@]}" -n $NS get leases
check "create existing lease -> AlreadyExists" "AlreadyExists|already exists" "${KM[@]}" create -f "$WORK/lease.yaml"
check "delete lease" "deleted" "${KM[@]}" -n $NS delete lease nico-extsvc-conformance
check "get missing -> NotFound" "NotFound|not found" "${KM[@]}" -n $NS get dpuservice missing
check "delete pod" "deleted" "${KD[@]}" -n $NS delete pod -l app.kubernetes.io/instance=dpu-cplane-tenant1-demo --wait=true
retry "pod replaced" "demo-[a-z0-9]{5} +1/1 +Running" "${KD[@]}" -n $NS get pods
check "delete dpuservice (waits for finalizer)" "deleted" "${KM[@]}" -n $NS delete dpuservice demo --timeout=20s
check "dpuservice gone" "NotFound|not found" "${KM[@]}" -n $NS get dpuservice demo
retry "pods gone" "No resources found" "${KD[@]}" -n $NS get pods
check "delete node" "deleted" "${KD[@]}" delete node host-0000-dpu-device-0000 --wait=false

# ---------------- TLS + bearer token via generated kubeconfig ----------------
echo "token-one" >"$WORK/token"
start_sim "$WORK/tls.out" --dpus 2 --tls-dir "$WORK/tls" --token-file "$WORK/token" --kubeconfig-dir "$WORK/kc" --all-delays-ms 50
CA="$(field "$SIM_LINE" ca_file)"
M2="$(field "$SIM_LINE" management)"
check "ready line has ca_file" "ca.crt" echo "$CA"
check "kubeconfig get nodes (TLS+token)" "host-0001-dpu-device-0001 +Ready" \
  "$KUBECTL" --kubeconfig "$WORK/kc/dpu.kubeconfig" --cache-dir "$WORK/cache2" get nodes
check "kubeconfig get dpudevices (TLS+token)" "dpu-device-0001" \
  "$KUBECTL" --kubeconfig "$WORK/kc/management.kubeconfig" --cache-dir "$WORK/cache2" -n $NS get dpudevices
check "--server + --certificate-authority + --token" "dpu-device-0000" \
  "$KUBECTL" --server "$M2" --certificate-authority "$CA" --token token-one --cache-dir "$WORK/cache3" -n $NS get dpudevices
check "wrong token -> Unauthorized" "Unauthorized|must be logged in" \
  "$KUBECTL" --server "$M2" --certificate-authority "$CA" --token wrong --cache-dir "$WORK/cache4" -n $NS get dpudevices
check "no CA -> certificate error" "certificate|x509" \
  "$KUBECTL" --server "$M2" --token token-one --cache-dir "$WORK/cache5" -n $NS get dpudevices
echo "token-two" >"$WORK/token.new" && mv "$WORK/token.new" "$WORK/token"
check "rotated token accepted" "dpu-device-0000" \
  "$KUBECTL" --server "$M2" --certificate-authority "$CA" --token token-two --cache-dir "$WORK/cache6" -n $NS get dpudevices
check "old token rejected after rotation" "Unauthorized|must be logged in" \
  "$KUBECTL" --server "$M2" --certificate-authority "$CA" --token token-one --cache-dir "$WORK/cache7" -n $NS get dpudevices
check "kubeconfig tokenFile follows rotation" "host-0000-dpu-device-0000" \
  "$KUBECTL" --kubeconfig "$WORK/kc/dpu.kubeconfig" --cache-dir "$WORK/cache8" get nodes

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
