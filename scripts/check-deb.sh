#!/usr/bin/env bash
# The Debian packages (issue 27, part 1): builds postgresql-15-nico-extsvc and
# nico-extsvc-dpfsim with `dpkg-buildpackage -us -uc -b` from a copy of the
# checkout's committed files (in $ROOT/build-deb, a fixed place so that a
# compiler cache finds the same paths again: debian/rules compiles the same
# commands as the checkout's `make install` and `make sim`, so after those a
# cache serves every compile; dpkg-buildpackage writes the
# packages into its parent), runs lintian (no error allowed), then installs
# them on this machine with apt-get, checks what dpkg lists, starts a
# throw-away cluster with the PACKAGED library preloaded and the PACKAGED
# /usr/bin/dpfsim, creates the extension, drives one service to READY, runs the
# packaged upgrade scripts, and purges both packages (every file they listed
# gone). Finally the extension files that were there before (a `make install`)
# are put back, and `make install` is run again when the test command's
# PG_CONFIG is the system's, so the machine is as before.
#
# It replaces the server's installed extension files while it runs: the test
# command runs it after every suite that uses the make-installed extension.
# SYSTEM_PG_LOCK=FILE: hold flock(FILE) from the install to the restore (a
# machine shared with another test run of the system tree).
# Usage: check-deb.sh [build|install]: both phases by default; `build` builds
# the packages and runs lintian only (it touches nothing outside build-deb/, so
# the test command runs it in the background beside other suites), `install`
# installs, runs and purges the packages a `build` left in build-deb/.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$ROOT/scripts/lib/pgcluster.sh"

T0=$SECONDS
t_lock=0
phase="${1:-all}"
case "$phase" in all|build|install) ;; *) echo "usage: $0 [build|install]" >&2; exit 2 ;; esac
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$ROOT/nico_extsvc.control")
pgv=$(cat "$ROOT/debian/pgversions")
SYS_PG_CONFIG=/usr/lib/postgresql/$pgv/bin/pg_config
SYS_PKGLIB=$("$SYS_PG_CONFIG" --pkglibdir)
SYS_EXT=$("$SYS_PG_CONFIG" --sharedir)/extension
PKG_EXT=postgresql-$pgv-nico-extsvc
PKG_SIM=nico-extsvc-dpfsim
# the packaged files are the system server's: its binaries run the cluster
PGBIN=/usr/lib/postgresql/$pgv/bin
export PGBIN
fail=0
bad() { echo "FAILED $*"; fail=1; }

for p in "$PKG_EXT" "$PKG_SIM"; do
  if dpkg -s "$p" >/dev/null 2>&1; then
    echo "FAILED $p is installed already (not by this run): remove it first"; exit 1
  fi
done

# --- build -------------------------------------------------------------------
work="$ROOT/build-deb"
src="$work/nico-extsvc-$version"
if [ "$phase" != install ]; then
  rm -rf "$work"
  mkdir -p "$src"
  (cd "$ROOT" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$src"
  # $ROOT holds both this build and the checkout's: the same relative paths
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
  log "dpkg-buildpackage -us -uc -b in $src${CMAKE_CXX_COMPILER_LAUNCHER:+ (compiler launcher: $CMAKE_CXX_COMPILER_LAUNCHER)}"
  t=$SECONDS
  if ! (cd "$src" && dpkg-buildpackage -us -uc -b -j"${DEB_JOBS:-2}") >"$work/build.log" 2>&1; then
    tail -n 60 "$work/build.log"; echo "FAILED dpkg-buildpackage (log: $work/build.log)"; exit 1
  fi
  t_build=$((SECONDS - t))
  changes=$(ls "$work"/nico-extsvc_"$version"_*.changes)
  echo "built in ${t_build} s: $(cd "$work" && ls ./*.deb | xargs -n1 basename | tr '\n' ' ')"

  log "lintian $(basename "$changes")"
  lint=$(lintian "$changes" 2>&1 | grep -v 'running with root privileges' || true)
  [ -n "$lint" ] && echo "$lint"
  n_err=$(grep -c '^E: ' <<<"$lint" || true)
  n_warn=$(grep -c '^W: ' <<<"$lint" || true)
  echo "lintian: $n_err errors, $n_warn warnings"
  [ "$n_err" -eq 0 ] || bad "lintian reports $n_err errors"
  echo "$t_build $fail" >"$work/built"
  if [ "$phase" = build ]; then
    echo "deb: packages built in ${t_build} s and checked by lintian; the install phase is \`$0 install\`"
    exit "$fail"
  fi
else
  # the packages a `build` phase of this checkout left
  [ -s "$work/built" ] || { echo "FAILED no packages in $work: run \`$0 build\` first"; exit 1; }
  read -r t_build fail <"$work/built"
fi
deb_ext=$(ls "$work/${PKG_EXT}_${version}"_*.deb)
deb_sim=$(ls "$work/${PKG_SIM}_${version}"_*.deb)

# --- install, use, purge (the system tree) -------------------------------------
if [ -n "${SYSTEM_PG_LOCK:-}" ]; then
  log "waiting for flock $SYSTEM_PG_LOCK"
  exec 9>"$SYSTEM_PG_LOCK"
  t=$SECONDS
  flock 9
  t_lock=$((SECONDS - t))
  echo "waited ${t_lock} s for the lock"
fi
before="$work/before.tar"
# what a `make install` (or nothing) put there before: kept to be put back
(cd / && find "${SYS_PKGLIB#/}" "${SYS_EXT#/}" -maxdepth 1 -name 'nico_extsvc*' -print0 \
  | tar --null -T - -cf "$before")
SIM_PID=""
simdir=""
cleanup() {
  set +e
  pg_cluster_stop
  [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null && wait "$SIM_PID" 2>/dev/null
  [ -n "$simdir" ] && rm -rf "$simdir"
  for p in "$PKG_EXT" "$PKG_SIM"; do
    if dpkg -s "$p" >/dev/null 2>&1; then $SUDO apt-get purge -y -qq "$p" >/dev/null; fi
  done
  restore
  rm -rf "$work"
}
restored=""
restore() {
  [ -z "$restored" ] || return 0
  restored=1
  log "putting back the extension files that were installed before"
  (cd / && $SUDO tar -xf "$before")
  local copy="$work/before-files" f n=0 diff=0
  if [ "$(cd "$("$PG_CONFIG" --pkglibdir)" && pwd -P)" = "$(cd "$SYS_PKGLIB" && pwd -P)" ]; then
    $SUDO make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" install \
      || { echo "FAILED make install (the checkout's build, PG_CONFIG=$PG_CONFIG)"; diff=1; }
  fi
  mkdir -p "$copy" && tar -xf "$before" -C "$copy"
  for f in $(tar -tf "$before"); do
    n=$((n + 1))
    cmp -s "$copy/$f" "/$f" || { echo "FAILED /$f is not what it was before"; diff=1; }
  done
  [ "$diff" -eq 0 ] && echo "the $n extension files of before are back, the same bytes"
  return "$diff"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # killed (a CI timeout): still purge and put back

log "apt-get install ./$(basename "$deb_ext") ./$(basename "$deb_sim")"
t=$SECONDS
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$deb_ext" "$deb_sim" >/dev/null
t_install=$((SECONDS - t))
echo "installed in ${t_install} s: $(dpkg-query -W -f '${Package} ${Version}, ' "$PKG_EXT" "$PKG_SIM")"

# every file the package must hold, and it on disk
expected=("$SYS_PKGLIB/nico_extsvc.so" "$SYS_EXT/nico_extsvc.control" "$SYS_EXT/nico_extsvc--$version.sql")
for f in $(cd "$ROOT" && git ls-files 'sql/nico_extsvc--*.sql'); do expected+=("$SYS_EXT/$(basename "$f")"); done
for m in "$ROOT"/sql/migrations/*--"$version".sql; do expected+=("$SYS_EXT/nico_extsvc--$(basename "$m")"); done
listed=$(dpkg -L "$PKG_EXT")
for f in "${expected[@]}"; do
  grep -qxF "$f" <<<"$listed" || bad "dpkg -L $PKG_EXT does not list $f"
  [ -f "$f" ] || bad "$f is not on disk"
done
scripts=$(grep -c "^$SYS_EXT/nico_extsvc--.*\.sql$" <<<"$listed" || true)
dpkg -L "$PKG_SIM" | grep -qxF /usr/bin/dpfsim || bad "dpkg -L $PKG_SIM does not list /usr/bin/dpfsim"
[ -x /usr/bin/dpfsim ] || bad "/usr/bin/dpfsim is not there"
echo "dpkg -L: the module, the control file and $scripts SQL scripts (${#expected[@]} files checked); /usr/bin/dpfsim"
files=$( { dpkg -L "$PKG_EXT"; dpkg -L "$PKG_SIM"; } | while read -r f; do [ -f "$f" ] && echo "$f"; done)

log "the packaged dpfsim and a cluster with the packaged library preloaded"
simdir=$(mktemp -d /tmp/nico-extsvc-debsim.XXXXXX)
chmod 755 "$simdir"
echo "deb-token" >"$simdir/token"
chmod 644 "$simdir/token"
/usr/bin/dpfsim --listen 127.0.0.1:0 --dpu-listen 127.0.0.1:0 --control-listen 127.0.0.1:0 --dpus 2 --seed 7 \
  --tls-dir "$simdir" --token-file "$simdir/token" >"$simdir/ready" 2>"$simdir/dpfsim.log" &
SIM_PID=$!
for _ in $(seq 300); do [ -s "$simdir/ready" ] && break; sleep 0.1; done
[ -s "$simdir/ready" ] || { cat "$simdir/dpfsim.log"; echo "FAILED /usr/bin/dpfsim did not start"; exit 1; }
read -r mgmt dpu ca < <("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["management"], d["dpu"], d["ca_file"])' "$simdir/ready")
chmod 644 "$ca"
pg_cluster_start deb "extsvc.workers = 1" "extsvc.site_id = 'deb-site'" \
  "extsvc.kube_server = '$mgmt'" "extsvc.kube_ca_file = '$ca'" "extsvc.kube_token_file = '$simdir/token'" \
  "extsvc.dpu_kube_server = '$dpu'" "extsvc.dpu_kube_ca_file = '$ca'" "extsvc.dpu_kube_token_file = '$simdir/token'" \
  "extsvc.retry_base = '100ms'" "extsvc.retry_cap = '2s'" "extsvc.http_timeout = '3s'"
q() { psql_q -At -c "$1"; }
[ "$(q "SHOW shared_preload_libraries")" = nico_extsvc ] || bad "the library is not preloaded"
q "CREATE EXTENSION nico_extsvc"
got=$(q "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'")
[ "$got" = "$version" ] || bad "CREATE EXTENSION made version $got, not $version"
lib=$(q "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
[ "$lib" = "$SYS_PKGLIB" ] || bad "the server's \$libdir is $lib, not the package's $SYS_PKGLIB"
q "SELECT extsvc.allow_chart('https://charts.example.com')" >/dev/null
data='{"repoURL":"https://charts.example.com/stable","chartName":"demo-agent","chartVersion":"1.2.3","security":{"privileged":false}}'
sid=$(q "SELECT service_id FROM extsvc.create_service(tenant_organization_id => 'tenant-a', service_name => 'deb-agent',
          service_type => 'DPF_HELM_CHART', data => '$data', dpu_target => 'PRIMARY')")
t=$SECONDS
state=""
for _ in $(seq 600); do
  state=$(q "SELECT lifecycle_state FROM extsvc.services WHERE service_id = '$sid'")
  [ "$state" = READY ] && break
  sleep 0.1
done
if [ "$state" = READY ]; then
  name=$(q "SELECT dpf_service_name FROM extsvc.services WHERE service_id = '$sid'")
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" -H "Authorization: Bearer deb-token" \
    "$mgmt/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices/$name")
  [ "$code" = 200 ] || bad "the packaged dpfsim answers $code for DPUService $name"
  echo "service $sid READY $((SECONDS - t)) s after create_service; DPUService $name in the packaged dpfsim (HTTP $code)"
else
  tail -n 30 "$PG_CLUSTER_DIR/server.log"; tail -n 20 "$simdir/dpfsim.log"
  bad "service $sid is $state, not READY, after 60 s"
fi

# upgrades: no earlier version was ever packaged, so no package upgrade yet;
# the upgrade scripts the package ships run from the first released version.
echo "upgrade from the previous version's package: none exists ($version is the first packaged version); skipped"
q "CREATE DATABASE upgrade"
first=$(cd "$ROOT" && git ls-files 'sql/nico_extsvc--*.sql' | sed -n 's|^sql/nico_extsvc--\([0-9.]*\)\.sql$|\1|p' | sort -V | head -n 1)
psql_q -d upgrade -c "CREATE EXTENSION nico_extsvc VERSION '$first'" -c "ALTER EXTENSION nico_extsvc UPDATE"
got=$(psql_q -At -d upgrade -c "SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc'")
[ "$got" = "$version" ] || bad "ALTER EXTENSION UPDATE from $first made $got, not $version"
echo "the packaged scripts: CREATE EXTENSION VERSION '$first', then ALTER EXTENSION UPDATE: $got"
pg_cluster_stop
kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null || true; SIM_PID=""

log "apt-get purge $PKG_EXT $PKG_SIM"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq "$PKG_EXT" "$PKG_SIM" >/dev/null
for p in "$PKG_EXT" "$PKG_SIM"; do
  ! dpkg -s "$p" >/dev/null 2>&1 || bad "$p is still known to dpkg after the purge"
done
left=0
for f in $files; do if [ -e "$f" ]; then echo "  left behind: $f"; left=$((left + 1)); fi; done
[ "$left" -eq 0 ] || bad "$left packaged files left behind after the purge"
echo "purged: none of the $(wc -w <<<"$files") packaged files is left"
restore || fail=1
echo "deb: build ${t_build} s$([ "$phase" = install ] && echo " (an earlier build phase)"), install ${t_install} s," \
  "this $([ "$phase" = install ] && echo "install phase" || echo "whole suite") $((SECONDS - T0)) s" \
  "($((SECONDS - T0 - t_lock)) s without the ${t_lock} s waited for the lock)"
[ "$fail" -eq 0 ] && echo "deb: $PKG_EXT and $PKG_SIM $version build, install, run a service to READY and purge cleanly"
exit "$fail"
