"""SQL from the test kit: one persistent connection per server, database and
role, on psycopg 3 (Debian's python3-psycopg, installed for /usr/bin/python3;
every script that imports the kit runs that interpreter).

  Conn(host, port, user, dbname)   autocommit connection; .sql() gives rows
                                   as lists of strings (NULL -> None), exactly
                                   what psql -A -t printed, so helpers that
                                   used a psql process per statement keep
                                   their answers
  Conns(host, port, user)          the kept connections to one server, one
                                   per database and role
  Session(...)                     a connection driven step by step (send a
                                   statement, wait for its answer later) for
                                   the two-session race tests; answers are
                                   text as a psql session printed them
  SqlError                         an error with its fields (sqlstate, detail,
                                   constraint, ...) and psql's text of it

A statement that changes the session for the statements after it (SET
outside a transaction, ALTER DATABASE/ROLE ... SET, session advisory locks,
temporary tables, LISTEN, PREPARE) ends the connection after it: the next
statement starts a new session, as it did with a psql process per statement.
A connection that the server ended (restart, pg_terminate_backend) is
noticed while it is idle and replaced before the next statement; an error
inside an explicit transaction rolls it back, as psql's exit did.
"""
import os
import re
import select
import threading

import psycopg
from psycopg import pq
from psycopg.adapt import AdaptersMap
from psycopg.types.string import TextLoader

# Every value as the server's text, as psql prints it: a loader map that
# turns every type (unknown oids too) into str.
_TEXT_ADAPTERS = AdaptersMap(psycopg.adapters)
for _t in psycopg.postgres.types:
    _TEXT_ADAPTERS.register_loader(_t.oid, TextLoader)
    if _t.array_oid:
        _TEXT_ADAPTERS.register_loader(_t.array_oid, TextLoader)

_SESSION_CHANGE = re.compile(
    r"(?:^|;)\s*(?:SET\s+(?!LOCAL\b|TRANSACTION\b)|RESET\b|DISCARD\b|LISTEN\b|PREPARE\b|"
    r"CREATE\s+(?:GLOBAL\s+|LOCAL\s+)?TEMP|ALTER\s+(?:DATABASE|ROLE|USER)\b[^;]*\bSET\b)"
    r"|pg_advisory_lock|set_config\s*\([^)]*,\s*false\s*\)",
    re.I)


class SqlError(RuntimeError):
    """An error the server sent (or a connection that failed)."""

    def __init__(self, query, err, db=None):
        d = getattr(err, "diag", None)
        self.query = query
        self.db = db
        self.sqlstate = getattr(err, "sqlstate", None) or (d.sqlstate if d else None)
        self.severity = (d.severity if d else None) or "ERROR"
        self.message = (d.message_primary if d else None) or str(err).strip()
        self.detail = d.message_detail if d else None
        self.hint = d.message_hint if d else None
        self.context = d.context if d else None
        self.schema = d.schema_name if d else None
        self.table = d.table_name if d else None
        self.column = d.column_name if d else None
        self.datatype = d.datatype_name if d else None
        self.constraint = d.constraint_name if d else None
        self.location = (f"{d.source_function}, {d.source_file}:{d.source_line}"
                         if d and d.source_function else None)
        super().__init__(f"SQL failed{' in ' + db if db else ''}: {query}\n{self.psql_text()}")

    def psql_text(self, verbosity="default"):
        """The error as psql prints it with VERBOSITY default, verbose or sqlstate."""
        if verbosity == "sqlstate" and self.sqlstate:
            return f"{self.severity}:  {self.sqlstate}"
        state = f"{self.sqlstate}: " if verbosity == "verbose" and self.sqlstate else ""
        lines = [f"{self.severity}:  {state}{self.message}"]
        fields = [("DETAIL", self.detail), ("HINT", self.hint), ("CONTEXT", self.context)]
        if verbosity == "verbose":
            fields += [("SCHEMA NAME", self.schema), ("TABLE NAME", self.table),
                       ("COLUMN NAME", self.column), ("DATATYPE NAME", self.datatype),
                       ("CONSTRAINT NAME", self.constraint), ("LOCATION", self.location)]
        lines += [f"{k}:  {v}" for k, v in fields if v]
        return "\n".join(lines)


def connect_args(host=None, port=None, user=None, dbname=None):
    """Connection keywords; what is not given comes from PGHOST, PGPORT, PGUSER
    (libpq's defaults, as psql took them)."""
    kw = {"dbname": dbname or os.environ.get("PGDATABASE") or "postgres"}
    if host:
        kw["host"] = host
    if port:
        kw["port"] = str(port)
    if user:
        kw["user"] = user
    return kw


class Conn:
    """One autocommit connection, opened on first use and kept."""

    def __init__(self, host=None, port=None, user=None, dbname=None, options=None):
        self.kw = connect_args(host, port, user, dbname)
        if options is not None:  # "" too: it overrides PGOPTIONS
            self.kw["options"] = options
        self.dbname = self.kw["dbname"]
        self._c = None
        self.notices = []

    def _connection(self):
        c = self._c
        if c is not None and not c.closed and not c.broken and not _ended_while_idle(c):
            return c
        self.close()
        c = psycopg.connect(**self.kw, autocommit=True, context=_TEXT_ADAPTERS)
        c.add_notice_handler(lambda d: self.notices.append(f"{d.severity}:  {d.message_primary}"))
        self._c = c
        return c

    def close(self):
        if self._c is not None:
            try:
                self._c.close()
            except Exception:  # noqa: BLE001 - a dead connection closes anyway
                pass
            self._c = None

    def sql(self, query, params=None, *, check=True):
        """Runs query (several statements allowed without params: one
        implicit transaction, as psql -c); returns the rows of every result
        as lists of strings (NULL -> None). An error raises SqlError, or with
        check=False returns it (a string: psql's text of it)."""
        try:
            return self.rows(query, params)
        except SqlError as e:
            if check:
                raise
            return e.psql_text()

    def rows(self, query, params=None):
        try:
            c = self._connection()
        except psycopg.Error as e:  # the server is down or refuses: as psql's "could not connect"
            raise SqlError(query, e, self.dbname) from None
        out = []
        try:
            with c.cursor() as cur:
                cur.execute(query, params, prepare=False)
                while True:
                    if cur.pgresult is not None and cur.pgresult.status == pq.ExecStatus.TUPLES_OK:
                        out.extend(list(r) for r in cur.fetchall())
                    if not cur.nextset():
                        break
        except psycopg.Error as e:
            self._after_error(c)
            raise SqlError(query, e, self.dbname) from None
        self._after_statement(c, query)
        return out

    def one(self, query, params=None):
        rows = self.rows(query, params)
        return rows[0][0] if rows and rows[0] else None

    def exec(self, query, params=None):
        """Runs query for its effect; returns nothing."""
        self.rows(query, params)

    def _after_error(self, c):
        if c.broken or c.closed:
            self.close()
        elif c.info.transaction_status != pq.TransactionStatus.IDLE:
            # psql ended its session here, which rolled the transaction back
            try:
                c.execute("ROLLBACK")
            except psycopg.Error:
                self.close()

    def _after_statement(self, c, query):
        if c.info.transaction_status != pq.TransactionStatus.IDLE:
            # a BEGIN without its COMMIT: psql's exit rolled it back
            c.execute("ROLLBACK")
        if _SESSION_CHANGE.search(query):
            self.close()

    def pid(self):
        return int(self.one("SELECT pg_backend_pid()"))


# After these, a kept connection to another database would not behave as a
# new session would: ALTER DATABASE/ROLE ... SET applies to sessions started
# later, DROP DATABASE/ROLE waits for (or refuses) connected ones.
_SERVER_DDL = re.compile(r"^\s*(?:ALTER|DROP)\s+(?:DATABASE|ROLE|USER)\b", re.I)


class Conns:
    """The kept connections to one server (host, port; None: libpq's PG*
    variables), one per database and role, made on first use."""

    def __init__(self, host=None, port=None, user=None):
        self.host, self.port, self.user = host, port, user
        self._kept = {}

    def get(self, dbname=None, user=None):
        key = (dbname or os.environ.get("PGDATABASE") or "postgres", user or self.user)
        if key not in self._kept:
            self._kept[key] = Conn(self.host, self.port, key[1], key[0])
        return self._kept[key]

    def sql(self, query, dbname=None, user=None, *, check=True):
        """Conn.sql on the connection to dbname as user. ALTER or DROP of a
        database or role ends every kept connection first and after."""
        ddl = _SERVER_DDL.match(query)
        if ddl:
            self.close()
        out = self.get(dbname, user).sql(query, check=check)
        if ddl:
            self.close()
        return out

    def one(self, query, dbname=None, user=None):
        rows = self.sql(query, dbname, user)
        return rows[0][0] if rows and rows[0] else None

    def close(self):
        for c in self._kept.values():
            c.close()


def _ended_while_idle(c):
    """True when the server may have ended an idle connection (restart,
    pg_terminate_backend): anything to read while no statement runs. The
    server says little else to an idle session (no LISTEN here), so the
    connection is replaced rather than parsed."""
    try:
        r, _, _ = select.select([c.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


class QuietSession:
    """One kept connection to the database `postgres` of a harness server (its
    socket dir and port) for load generators: rows as psql -A -t printed them
    (NULL as ''); a refused statement answers no rows (a soak or a benchmark
    sends many that the API refuses), a lost connection raises."""

    def __init__(self, pg, user):
        self.c = Conn(pg.dir, pg.port, user, "postgres")
        self.run("SELECT 1")

    def run(self, query):
        try:
            return [["" if v is None else v for v in r] for r in self.c.rows(query)]
        except SqlError as e:
            if e.sqlstate is None:  # no server answer (no connection): not a refusal
                raise
            return []

    def one(self, query):
        rows = self.run(query)
        return rows[0][0] if rows and rows[0] else None

    def close(self):
        self.c.close()


class Session:
    """A connection fed one statement at a time, for tests that interleave
    two sessions: send() starts a statement and returns at once, wait()
    gives its answer. Answers are text as psql -A -t printed them: rows
    with fields joined by '|', one per line; an error as psql's text
    (verbosity "sqlstate", "default" or "verbose"). Transactions are the
    statements' own (BEGIN; ... COMMIT;), as in psql."""

    def __init__(self, name, host=None, port=None, user=None, dbname=None, verbosity="sqlstate"):
        self.name = name
        self.verbosity = verbosity
        self.c = psycopg.connect(**connect_args(host, port, user, dbname), autocommit=True,
                                 context=_TEXT_ADAPTERS)
        self._thread = None
        self._answer = None
        self.pid = int(self.run("SELECT pg_backend_pid();"))

    def _execute(self, query):
        out = []
        try:
            with self.c.cursor() as cur:
                cur.execute(query, prepare=False)
                while True:
                    if cur.pgresult is not None and cur.pgresult.status == pq.ExecStatus.TUPLES_OK:
                        out += ["|".join("" if v is None else v for v in r) for r in cur.fetchall()]
                    if not cur.nextset():
                        break
        except psycopg.Error as e:
            out.append(SqlError(query, e).psql_text(self.verbosity))
        return "\n".join(out).strip()

    def send(self, sql):
        """Starts a statement without waiting for its result."""
        if self._thread is not None:
            raise RuntimeError(f"session {self.name}: the last statement was not waited for")

        def run():
            self._answer = self._execute(sql)
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def wait(self, timeout=None):
        """The answer of the last statement sent."""
        t, self._thread = self._thread, None
        t.join(timeout)
        if t.is_alive():
            raise RuntimeError(f"session {self.name}: no answer within {timeout} s")
        return self._answer

    def run(self, sql):
        self.send(sql)
        return self.wait()

    def close(self):
        self.c.close()
