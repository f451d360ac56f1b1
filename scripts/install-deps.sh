#!/usr/bin/env bash
# Installs every Debian package nico_extsvc needs to build, test and run its
# demo (Debian bookworm). Runs apt-get update first, as root or through sudo.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang-format
  ccache  # scripts/test-all.sh: the PGXN archive's build (suite dist) reuses the checkout's objects
  git  # make dist (git archive)
  postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
  nlohmann-json3-dev libspdlog-dev libcurl4-openssl-dev libyaml-cpp-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
  curl python3 python3-yaml procps  # python3-yaml: test/e2e/test_metrics.py reads the postgres_exporter queries file
  python3-psycopg  # the test kit's SQL connections (python/extsvc_testkit/db.py), for /usr/bin/python3
  clang libclang-rt-14-dev  # fuzz targets and sanitizer builds (scripts/fuzz.sh, sanitize-tests.sh)
  python3-matplotlib  # bench/plot_fleet.py draws the fleet curves into docs/
  patroni etcd-server python3-etcd  # test/ha: Patroni + etcd (v2 API)
  python3-psycopg  # test/nico/: NICo's client binding like sqlx (psycopg 3), run with /usr/bin/python3
  python3-kubernetes  # sim/tests/test_typed_client.py reads every kind dpfsim serves with the official client
  debhelper postgresql-server-dev-all lintian  # scripts/check-deb.sh: dpkg-buildpackage (pg_buildext) and lintian of the Debian packages
  prometheus  # promtool: test/e2e/test_ops.py checks the alert rules of docs/metrics.md fire (promtool test rules, offline)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install packages" >&2; exit 1; }
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
echo "==> apt-get update"
$SUDO apt-get update -qq
echo "==> apt-get install ${#PACKAGES[@]} packages"
$SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
# kubectl is not a Debian package; the machines provide it. The kubectl
# conformance test is skipped (and says so) where it is missing.
command -v kubectl >/dev/null || echo "install-deps: note: kubectl not found; kubectl conformance tests will be skipped"
echo "==> dependencies ready"
