"""psql sessions driven step by step, for the two-session race tests.

PostgreSQL's isolation tester is not in Debian's server-dev package, so the
race tests (race_attach_delete.py, race_dpu_completion.py) drive psql
processes through stdin/stdout pipes and watch pg_locks from another
connection to know when a session is blocked. Connection: psql's PG*
variables (a superuser); PGBIN names the directory of psql.
"""
import os
import subprocess
import time

PSQL = os.path.join(os.environ["PGBIN"], "psql") if os.environ.get("PGBIN") else "psql"


def psql(sql, db):
    """One statement (or several) in its own psql process; raises on error."""
    r = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"psql failed: {sql}\n{r.stderr}")
    return r.stdout.strip()


class Session:
    """One psql process fed line by line; errors are shown on stdout
    (verbosity as given: "sqlstate", or "verbose" for SQLSTATE, message,
    detail and context)."""

    def __init__(self, name, db, verbosity="sqlstate"):
        self.name = name
        self.n = 0
        self.p = subprocess.Popen(
            [PSQL, "-X", "-q", "-A", "-t", "-d", db, "-v", f"VERBOSITY={verbosity}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1)
        self.pid = int(self.run("SELECT pg_backend_pid();"))

    def send(self, sql):
        """Sends a statement without waiting for its result."""
        self.n += 1
        self.marker = f"__done_{self.name}_{self.n}__"
        self.p.stdin.write(sql + "\n\\echo " + self.marker + "\n")
        self.p.stdin.flush()

    def wait(self):
        """Reads the result of the last statement sent."""
        out = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"session {self.name} ended: {''.join(out)}")
            if line.strip() == self.marker:
                return "\n".join(out).strip()
            out.append(line.rstrip("\n"))

    def run(self, sql):
        self.send(sql)
        return self.wait()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def waiting_for_lock(pid, timeout=5.0):
    """True once backend pid waits for a heavyweight lock."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if psql(f"SELECT count(*) FROM pg_locks WHERE pid = {pid} AND NOT granted", db="postgres") != "0":
            return True
        time.sleep(0.05)
    return False
