"""Helpers shared by test/upgrade's suites: SQL (the test kit's kept
connections, extsvc_testkit.db), table snapshots and pg_dump, against the
server named by libpq's PG* variables or by explicit host/port arguments."""
import difflib
import json
import os
import subprocess
import sys

from extsvc_testkit import db as extsvc_db

PGBIN = os.environ.get("PGBIN", "")
CHART = {"repoURL": "oci://registry.example.com/charts", "chartName": "telemetry",
         "chartVersion": "1.2.3", "security": {"privileged": False}}


def tool(name):
    return os.path.join(PGBIN, name) if PGBIN else name


class Conn:
    """A server address (None: psql's PG* variables) and a check counter."""

    def __init__(self, host=None, port=None, user=None):
        self.conns = extsvc_db.Conns(host, port, user)
        self.args = []
        if host:
            self.args += ["-h", host]
        if port:
            self.args += ["-p", str(port)]
        if user:
            self.args += ["-U", user]
        self.failures = 0

    def sql(self, db, query, check=True):
        """Runs query in db; rows as lists of strings (NULL -> None). With
        check=False an error returns its 'SQLSTATE: message' text instead."""
        try:
            return self.conns.sql(query, db)
        except extsvc_db.SqlError as e:
            if check:
                raise RuntimeError(f"SQL failed in {db}: {query}\n{e.psql_text()}") from None
            return f"{e.sqlstate}: {e.message}" if e.sqlstate else e.message

    def one(self, db, query):
        rows = self.sql(db, query)
        return rows[0][0] if rows and rows[0] else None

    def run(self, *cmd, env=None):
        r = subprocess.run([tool(cmd[0]), *self.args, *cmd[1:]], capture_output=True, text=True,
                           env=None if env is None else {**os.environ, **env})
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return r.stdout

    def check(self, cond, what):
        print(("ok     " if cond else "FAILED ") + what, flush=True)
        if not cond:
            self.failures += 1
        return cond

    def recreate(self, db):
        self.sql("postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        self.sql("postgres", f"CREATE DATABASE {db}")

    # --- the extension's tables ------------------------------------------------

    def member_relations(self, db, kinds="rS"):
        """Tables (r) and sequences (S) of the extension, by name."""
        return [r[0] for r in self.sql(db, f"""
            SELECT format('%I.%I', n.nspname, c.relname)
              FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
               AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'nico_extsvc')
               AND d.deptype = 'e' AND c.relkind = ANY (string_to_array('{",".join(kinds)}', ','))
             ORDER BY 1""")]

    def identity_sequences(self, db):
        return [r[0] for r in self.sql(db, """
            SELECT pg_get_serial_sequence(format('%I.%I', n.nspname, c.relname), a.attname)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE n.nspname = 'extsvc' AND a.attidentity <> '' ORDER BY 1""")]

    def script(self, db, text):
        """Runs a multi-statement script in one psql process (each statement
        its own transaction, as a file given to psql); stops at the first
        error."""
        r = subprocess.run([tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", *self.args, "-d", db],
                           input=text, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"script failed in {db}:\n{r.stderr}")
        return r.stdout

    def all_rows(self, db, tables, columns=None):
        """{table: every row as text ordered by primary key (all columns when
        there is none)} in one query; columns: {table: [column, ...]} to take
        only those, as a row value."""
        keys = {}
        for t, col in self.sql(db, f"""
            SELECT i.indrelid::regclass::text, a.attname FROM pg_index i
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
             WHERE i.indrelid = ANY (ARRAY[{",".join(q(t) for t in tables)}]::regclass[]) AND i.indisprimary
             ORDER BY 1, array_position(i.indkey::int2[], a.attnum)"""):
            keys.setdefault(t, []).append(col)
        parts = []
        for t in tables:
            order = ", ".join(f"t.{k}" for k in keys.get(t, [])) or "t::text"
            cols = (columns or {}).get(t)
            value = "t::text" if cols is None else f"({', '.join('t.' + c for c in cols)})::text"
            parts.append(f"SELECT {q(t)} AS tbl, row_number() OVER (ORDER BY {order}) AS n, {value} AS v "
                         f"FROM {t} t")
        out = {t: [] for t in tables}
        for t, _, v in self.sql(db, " UNION ALL ".join(parts) + " ORDER BY 1, 2"):
            out[t].append(v)
        return out

    def rows(self, db, table, columns=None):
        """Every row of table as text, ordered by the primary key (all
        columns when there is none); columns: only these, as a row value."""
        pk = self.sql(db, f"""
            SELECT a.attname FROM pg_index i
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
             WHERE i.indrelid = '{table}'::regclass AND i.indisprimary
             ORDER BY array_position(i.indkey::int2[], a.attnum)""")
        order = ", ".join(f"t.{r[0]}" for r in pk) or "t::text"
        value = "t::text" if columns is None else f"({', '.join('t.' + c for c in columns)})::text"
        return [r[0] for r in self.sql(db, f"SELECT {value} FROM {table} t ORDER BY {order}")]

    def sequence_state(self, db, seq):
        return self.sql(db, f"SELECT last_value, is_called FROM {seq}")[0]


def unified(a, b, name_a, name_b, limit=200):
    lines = list(difflib.unified_diff(a, b, name_a, name_b, lineterm="", n=2))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def q(s):
    return "'" + str(s).replace("'", "''") + "'"


def chart(**over):
    d = dict(CHART)
    d.update(over)
    return q(json.dumps(d))


def finish(conn, name):
    print(f"{name}: {'FAILED, ' + str(conn.failures) + ' check(s)' if conn.failures else 'all checks passed'}")
    sys.exit(1 if conn.failures else 0)
