# Shared helpers for the scripts: paths, the unprivileged user that owns
# throw-away PostgreSQL clusters, and running commands as that user.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
# The Python test kit (python/extsvc_testkit: the e2e harness and the
# invariants) is imported by package name; every script that runs the tests,
# benchmarks or the demo gets it on the path here (once, however often sourced).
case ":${PYTHONPATH:-}:" in *":$ROOT/python:"*) ;; *) export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" ;; esac
# The interpreter of every Python script here: Debian's, which has the test
# kit's dependencies (python3-psycopg, python3-yaml, python3-matplotlib); the
# python3 first on PATH may be another one (pyenv).
PY="${EXTSVC_PYTHON:-/usr/bin/python3}"
PG_CONFIG="${PG_CONFIG:-pg_config}"
PGBIN="$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)"

# PostgreSQL refuses to run as root: as root we use the postgres account.
if [ "$(id -u)" -eq 0 ]; then
  PG_OS_USER="${PG_OS_USER:-postgres}"
  SUDO=""
else
  PG_OS_USER="$(id -un)"
  SUDO="sudo"
fi

as_pg_user() {
  if [ "$(id -un)" = "$PG_OS_USER" ]; then "$@"; else runuser -u "$PG_OS_USER" -- "$@"; fi
}

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Builds what ships (the extension's module and SQL scripts; `make`) and
# installs it into the server's directories. dpfsim and the tests are built
# by `make sim` and `make tests` where they are needed.
build_and_install() {
  log "building the extension (cmake via make) in $BUILD_DIR"
  make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" all
  log "installing the extension"
  $SUDO make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" install
}
