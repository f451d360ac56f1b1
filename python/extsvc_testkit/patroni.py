"""A throw-away Patroni cluster for tests: one etcd member and N PostgreSQL
servers managed by Patroni (Debian's `patroni` 3.0, `etcd-server` 3.4 with the
v2 API that `python3-etcd` speaks), all on loopback, free ports, one temporary
directory. Patroni runs as the unprivileged PostgreSQL user on Debian's
/usr/bin/python3 (its shebang); this module itself is standard library only.

  etcd = Etcd(workdir)
  cluster = Cluster(workdir, etcd, scope="ha", parameters={...}, bin_dir=PGBIN)
  cluster.start(2)                      # first member bootstraps, the rest stream from it
  cluster.leader().pg.sql("SELECT 1")   # a harness.Postgres view of a member
  cluster.patronictl("switchover", "--candidate", "pg1", "--force")
  cluster.stop(); etcd.stop()

Only processes started here are ever signalled, by pid: Patroni (the Popen
child), and the postmasters Patroni started (postmaster.pid of each member's
data directory), which Patroni detaches so that they outlive it.
"""
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from . import harness

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"


def _http(url, method="GET", timeout=2.0):
    """(status, parsed JSON or None); status 0 when nothing answers."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read(), e.code
    except (OSError, urllib.error.URLError):
        return 0, None
    try:
        return code, json.loads(raw or b"null")
    except ValueError:
        return code, None


def _pg_dir(path):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)
    if os.geteuid() == 0:
        shutil.chown(path, harness.PG_USER)
    return path


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has exited: /proc says Z
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Etcd:
    """One etcd member with the v2 API on, on loopback."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "etcd")
        os.makedirs(self.dir, exist_ok=True)
        self.port, peer = harness.free_port(), harness.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "e1", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"e1=http://127.0.0.1:{peer}", "--enable-v2=true"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        harness.wait_until(lambda: self.proc.poll() is not None or _http(self.url + "/health")[0] == 200,
                           timeout=30, what="etcd healthy")
        if self.proc.poll() is not None:
            raise RuntimeError("etcd exited; see " + self.log.name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def member_config(scope, name, *, etcd_host, api_port, pg_port, data_dir, socket_dir, bin_dir, log_dir,
                  pgpass, parameters, ttl=10, loop_wait=2, retry_timeout=4, primary_start_timeout=0,
                  host="127.0.0.1", watchdog="off", hba=None, authentication=None):
    """One member's Patroni configuration (a dict; Patroni reads it as YAML,
    and JSON is YAML). `parameters` go into bootstrap.dcs, i.e. the cluster-wide
    dynamic configuration that every member applies (the extension's settings
    must be the same on every member, as for shared_preload_libraries).
    Without hba/authentication: trust on loopback, every role `postgres`
    (a throw-away test cluster)."""
    trust = hba is None
    return {
        "scope": scope,
        "name": name,
        "restapi": {"listen": f"{host}:{api_port}", "connect_address": f"{host}:{api_port}"},
        "etcd": {"host": etcd_host},
        "bootstrap": {
            "dcs": {
                "ttl": ttl, "loop_wait": loop_wait, "retry_timeout": retry_timeout,
                "maximum_lag_on_failover": 1048576,
                # 0: a crashed primary is failed over at once instead of restarted in place
                "primary_start_timeout": primary_start_timeout,
                "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": dict(parameters)},
            },
            "initdb": ([{"auth": "trust"}] if trust else [{"auth-host": "scram-sha-256"}, {"auth-local": "peer"}])
            + [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
        },
        "postgresql": {
            "listen": f"{host}:{pg_port}",
            "connect_address": f"{host}:{pg_port}",
            "data_dir": data_dir,
            "bin_dir": bin_dir,
            "pgpass": pgpass,
            "authentication": authentication or {"replication": {"username": "postgres"},
                                                 "superuser": {"username": "postgres"},
                                                 "rewind": {"username": "postgres"}},
            "parameters": {"unix_socket_directories": socket_dir, "logging_collector": "on",
                           "log_directory": log_dir, "log_filename": "postgresql.log",
                           "log_line_prefix": "%m [%p] %b "},
            "pg_hba": hba or ["local all all trust", f"host all all {host}/32 trust",
                              f"host replication all {host}/32 trust"],
        },
        "watchdog": {"mode": watchdog},
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


class Member:
    """One Patroni-managed PostgreSQL server."""

    def __init__(self, cluster, name):
        self.cluster, self.name = cluster, name
        self.dir = _pg_dir(os.path.join(cluster.workdir, name))
        self.data = os.path.join(self.dir, "data")
        self.pg_port, self.api_port = harness.free_port(), harness.free_port()
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.config_file = os.path.join(self.dir, "patroni.yml")
        self.config = member_config(
            cluster.scope, name, etcd_host=f"127.0.0.1:{cluster.etcd.port}", api_port=self.api_port,
            pg_port=self.pg_port, data_dir=self.data, socket_dir=self.dir, bin_dir=cluster.bin_dir,
            log_dir=self.dir, pgpass=os.path.join(self.dir, "pgpass"), parameters=cluster.parameters,
            **cluster.timing)
        with open(self.config_file, "w") as f:
            json.dump(self.config, f, indent=1)
        os.chmod(self.config_file, 0o644)
        self.proc = None
        self.log = None
        # a harness.Postgres view: sql()/one() over this member's socket directory
        self.pg = object.__new__(harness.Postgres)
        self.pg.dir, self.pg.port, self.pg.data = self.dir, self.pg_port, self.data
        self.pg.logfile = os.path.join(self.dir, "postgresql.log")

    def start(self):
        self.log = open(os.path.join(self.dir, "patroni.log"), "a")
        env = {"PATH": f"{self.cluster.bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.dir,
               "PYTHONDONTWRITEBYTECODE": "1"}
        kw = {}
        if os.geteuid() == 0:
            kw = {"user": harness.PG_USER, "group": harness.PG_USER, "extra_groups": []}
        self.proc = subprocess.Popen([PATRONI, self.config_file], cwd=self.dir, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True, **kw)

    def status(self):
        """Patroni's own view (GET /patroni): role, state, timeline, ...; {} when down."""
        code, body = _http(self.api + "/patroni", timeout=1.0)
        return body if code in (200, 503) and isinstance(body, dict) else {}

    def is_leader(self):
        """What a load balancer's health check asks: GET /primary answers 200
        only on the member that holds the leader key and runs as primary."""
        return _http(self.api + "/primary", timeout=1.0)[0] == 200

    def patroni_alive(self):
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def kill_patroni(self):
        """SIGKILL of Patroni alone: its PostgreSQL (detached) keeps running."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def kill_postmaster(self):
        pid = self.postmaster_pid()
        if pid:
            os.kill(pid, signal.SIGKILL)
        return pid

    def in_recovery(self):
        """True/False, or None when the server does not answer."""
        r = self.pg.sql("SELECT pg_is_in_recovery()", check=False)
        return {"t": True, "f": False}.get(r[0][0]) if isinstance(r, list) and r else None

    def timeline(self):
        """The timeline the server writes on now (a primary's WAL file name)."""
        r = self.pg.sql("SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE "
                        "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END", check=False)
        return int(r[0][0], 16) if isinstance(r, list) and r and r[0][0] else None

    def system_identifier(self):
        return self.pg.one("SELECT system_identifier FROM pg_control_system()")

    def tail_log(self, n=40):
        out = []
        for path in (os.path.join(self.dir, "patroni.log"), self.pg.logfile):
            try:
                with open(path, errors="replace") as f:
                    out.append(f"--- {path}\n" + "".join(f.readlines()[-n:]))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self, timeout=40):
        """Patroni stops its PostgreSQL on SIGTERM; a postmaster left running
        (Patroni dead, or not answering) is stopped by its pid."""
        if self.patroni_alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        pid = self.postmaster_pid()
        if pid:
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown; children follow the postmaster
            deadline = time.time() + 15
            while _pid_alive(pid) and time.time() < deadline:
                time.sleep(0.1)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.log:
            self.log.close()
            self.log = None


class Cluster:
    """A Patroni cluster of named members (pg0, pg1, ...) over one etcd."""

    def __init__(self, workdir, etcd, *, scope="extsvc-ha", parameters=None, bin_dir=None, timing=None):
        self.workdir, self.etcd, self.scope = workdir, etcd, scope
        self.parameters = dict(parameters or {})
        self.bin_dir = bin_dir or harness.PGBIN
        self.timing = dict(timing or {})
        self.members = []

    def add(self):
        m = Member(self, f"pg{len(self.members)}")
        self.members.append(m)
        return m

    def start(self, n=2, timeout=120):
        """The first member bootstraps (initdb) and leads; the others are
        created from it by pg_basebackup and stream."""
        first = self.add()
        first.start()
        self.wait_leader(timeout=timeout, what="the first member leading")
        for _ in range(n - 1):
            self.add().start()
        self.wait_streaming(timeout=timeout)
        return self

    def by_name(self, name):
        return next(m for m in self.members if m.name == name)

    def leader(self):
        """The member a load balancer would route writes to, or None."""
        for m in self.members:
            if m.patroni_alive() and m.is_leader():
                return m
        return None

    def wait_leader(self, timeout=60, what="a leader", exclude=()):
        def check():
            m = self.leader()
            return m if m is not None and m not in exclude and m.in_recovery() is False else None
        try:
            return harness.wait_until(check, timeout=timeout, interval=0.1, what=what)
        except AssertionError:
            print(self.describe())
            raise

    def wait_streaming(self, timeout=60):
        """Every member whose Patroni runs is up: one leader, the others
        replicas streaming from it (Patroni's view, and pg_stat_replication)."""
        def check():
            lead = self.leader()
            if lead is None:
                return False
            others = [m for m in self.members if m is not lead and m.patroni_alive()]
            if not all(m.status().get("role") == "replica" and m.status().get("state") == "running"
                       for m in others):
                return False
            streaming = lead.pg.one("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
            return int(streaming or 0) >= len(others)
        try:
            harness.wait_until(check, timeout=timeout, interval=0.2, what="replicas streaming")
        except AssertionError:
            print(self.describe())
            raise

    def patronictl(self, *args, timeout=60):
        r = subprocess.run([PATRONICTL, "-c", self.members[0].config_file, *args], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"patronictl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r.stdout

    def describe(self):
        lines = []
        for m in self.members:
            s = m.status()
            lines.append(f"{m.name}: patroni {'up' if m.patroni_alive() else 'down'}, role {s.get('role')}, "
                         f"state {s.get('state')}, timeline {s.get('timeline')}, postmaster {m.postmaster_pid()}")
        return "\n".join(lines)

    def stop(self):
        # replicas first, so that the leader's shutdown does not wait for them
        lead = self.leader()
        for m in [m for m in self.members if m is not lead] + ([lead] if lead else []):
            m.stop()
