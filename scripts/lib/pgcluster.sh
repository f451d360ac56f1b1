# A throw-away PostgreSQL cluster on a private port and socket directory,
# owned by an unprivileged user, with nico_extsvc preloaded (unless
# PG_CLUSTER_PRELOAD=0: then the library is loaded only by CREATE EXTENSION).
# shellcheck shell=bash
# Usage: pg_cluster_start NAME [extra postgresql.conf lines...]; then $PGHOST,
# $PGPORT, $PGUSER, $PGDATABASE are exported; pg_cluster_stop removes it.
#
# One way to make a cluster (python/extsvc_testkit/cluster.py is the same in
# Python): initdb runs once per test command into a template data directory,
# $EXTSVC_PG_TEMPLATE, exported for every later cluster of the command (shell
# or Python); each cluster is a copy of it (cp -a is far faster than initdb)
# with a system identifier of its own.

pg_free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# pg_template: makes the template unless $EXTSVC_PG_TEMPLATE holds one; the
# caller that made it removes it with pg_template_remove.
pg_template() {
  if [ -n "${EXTSVC_PG_TEMPLATE:-}" ] && [ -f "$EXTSVC_PG_TEMPLATE/PG_VERSION" ]; then return 0; fi
  PG_TEMPLATE_TOP="$(mktemp -d /tmp/nico-extsvc-template.XXXXXX)"
  chmod 755 "$PG_TEMPLATE_TOP"
  [ "$(id -u)" -eq 0 ] && chown "$PG_OS_USER" "$PG_TEMPLATE_TOP"
  as_pg_user "$PGBIN/initdb" -D "$PG_TEMPLATE_TOP/data" -U "$PG_OS_USER" -A trust -E UTF8 --locale=C.UTF-8 \
    --no-sync >"$PG_TEMPLATE_TOP/initdb.log" 2>&1 || { cat "$PG_TEMPLATE_TOP/initdb.log"; return 1; }
  export EXTSVC_PG_TEMPLATE="$PG_TEMPLATE_TOP/data" PG_TEMPLATE_TOP
}

pg_template_remove() {
  if [ -n "${PG_TEMPLATE_TOP:-}" ] && [ -d "$PG_TEMPLATE_TOP" ]; then rm -rf "$PG_TEMPLATE_TOP"; fi
}

pg_cluster_start() {
  local name="$1"; shift
  pg_template || return 1
  PG_CLUSTER_DIR="$(mktemp -d "/tmp/nico-extsvc-${name}.XXXXXX")"
  chmod 755 "$PG_CLUSTER_DIR"
  [ "$(id -u)" -eq 0 ] && chown "$PG_OS_USER" "$PG_CLUSTER_DIR"
  PGPORT="$(pg_free_port)"
  export PG_CLUSTER_DIR PGPORT
  export PGHOST="$PG_CLUSTER_DIR" PGUSER="$PG_OS_USER" PGDATABASE=postgres
  as_pg_user cp -a "$EXTSVC_PG_TEMPLATE" "$PG_CLUSTER_DIR/data" || return 1
  # a system identifier of its own, as initdb gives (the product tells servers apart by it)
  "$PY" -m extsvc_testkit.cluster new-system-identifier "$PG_CLUSTER_DIR/data" >/dev/null || return 1
  {
    echo "port = $PGPORT"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$PG_CLUSTER_DIR'"
    [ "${PG_CLUSTER_PRELOAD:-1}" = 0 ] || echo "shared_preload_libraries = 'nico_extsvc'"
    echo "fsync = off"
    echo "full_page_writes = off"
    echo "max_connections = 50"
    echo "log_line_prefix = '%m [%p] %b '"
    for line in "$@"; do echo "$line"; done
  } | as_pg_user tee -a "$PG_CLUSTER_DIR/data/postgresql.conf" >/dev/null
  as_pg_user "$PGBIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" -l "$PG_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null \
    || { cat "$PG_CLUSTER_DIR/server.log"; return 1; }
}

pg_cluster_conf() {  # appends lines to postgresql.conf and reloads
  local line
  for line in "$@"; do echo "$line"; done | as_pg_user tee -a "$PG_CLUSTER_DIR/data/postgresql.conf" >/dev/null
  as_pg_user "$PGBIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" reload >/dev/null
}

pg_cluster_restart() {
  as_pg_user "$PGBIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" -l "$PG_CLUSTER_DIR/server.log" -w -t 60 -m fast restart >/dev/null
}

pg_cluster_stop() {
  [ -n "${PG_CLUSTER_DIR:-}" ] && [ -d "$PG_CLUSTER_DIR" ] || return 0
  as_pg_user "$PGBIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" -w -t 60 -m fast stop >/dev/null 2>&1 || true
  if [ -n "${KEEP_CLUSTER:-}" ]; then
    echo "kept cluster in $PG_CLUSTER_DIR"
  else
    rm -rf "$PG_CLUSTER_DIR"
  fi
}

psql_q() { "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -q "$@"; }
