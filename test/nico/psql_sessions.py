"""Sessions driven step by step, for the two-session race tests.

PostgreSQL's isolation tester is not in Debian's server-dev package, so the
race tests (race_attach_delete.py, race_dpu_completion.py) drive two
connections of the test kit (extsvc_testkit.db.Session: send a statement,
read its answer later) and watch pg_locks from a third connection to know
when a session is blocked. Connection: libpq's PG* variables (a superuser).

The names are those of the psql-process version these tests were written
against; answers are the text psql -A -t printed.
"""
import time

from extsvc_testkit import db

CONNS = db.Conns()  # the server of libpq's PG* variables, one kept connection per database


def psql(sql, db):  # noqa: F811 - the parameter keeps the old helper's name
    """One statement (or several, one implicit transaction); raises on
    error; the rows as psql -A -t printed them."""
    rows = CONNS.sql(sql, db)
    return "\n".join("|".join("" if v is None else v for v in r) for r in rows).strip()


class Session(db.Session):
    """One connection fed statement by statement; errors are answers
    (verbosity "sqlstate", or "verbose" for SQLSTATE, message, detail and
    context)."""

    def __init__(self, name, db, verbosity="sqlstate"):  # noqa: F811
        super().__init__(name, dbname=db, verbosity=verbosity)


def waiting_for_lock(pid, timeout=5.0):
    """True once backend pid waits for a heavyweight lock."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if psql(f"SELECT count(*) FROM pg_locks WHERE pid = {pid} AND NOT granted", db="postgres") != "0":
            return True
        time.sleep(0.05)
    return False
