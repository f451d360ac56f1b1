#!/usr/bin/env bash
# Runs the pgTAP suites (regress/pgtap/*.sql) with pg_prove against the
# server in $PGHOST/$PGPORT, in a fresh database with the extensions.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
db=extsvc_tap
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION nico_extsvc"
cd "$ROOT"
pg_prove -d "$db" --ext .sql --timer regress/pgtap/
