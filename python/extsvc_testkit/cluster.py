"""Throw-away PostgreSQL clusters for the tests: one way to make them.

initdb runs once per test command into a template data directory
(EXTSVC_PG_TEMPLATE; scripts/lib/pgcluster.sh and this module make it when
it is not there yet and export it, so every later cluster of the command,
shell or Python, copies it); each cluster is a copy of the template (cp -a
takes a fraction of initdb's time) with its own port, socket directory,
settings and system identifier (as initdb would give it: the product tells
servers apart by it, so two copies must not look like one system). Clusters are owned by an unprivileged user (postgres when run as
root: PostgreSQL refuses root).

  template()                  the template's data directory (made if needed)
  new_system_identifier(data) gives a stopped copy a system identifier of its own
  Cluster(workdir, settings)  a copy of it, configured (not started)
  .start() .stop() .restart() .reload() .append_conf({...}) .tail_log()
  .conn(dbname, user)         a persistent db.Conn to it (kept per database and role)
"""
import atexit
import os
import pwd
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time

from . import db

PGBIN = os.environ.get("PGBIN") or subprocess.run(["pg_config", "--bindir"], capture_output=True,
                                                  text=True).stdout.strip() or "/usr/lib/postgresql/15/bin"
PG_USER = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
INITDB_ARGS = ["-U", PG_USER, "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
# Settings of every throw-away cluster. fsync off is safe here (the OS
# survives a server crash); synchronous_commit stays on: crash tests must not
# lose commits.
BASE_SETTINGS = {"listen_addresses": "''", "fsync": "off", "full_page_writes": "off",
                 "log_line_prefix": "'%m [%p] %b '"}


def as_pg(cmd, **kw):
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", PG_USER, "--"] + cmd
    return subprocess.run(cmd, **kw)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def owned_dir(path):
    """Creates path (mode 755) owned by the cluster user."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)
    if os.geteuid() == 0:
        shutil.chown(path, PG_USER)
    return path


def template():
    """The template data directory of this test command: EXTSVC_PG_TEMPLATE
    when it holds one, else a new one (removed when this process ends),
    exported for the processes this one starts."""
    t = os.environ.get("EXTSVC_PG_TEMPLATE")
    if t and os.path.isfile(os.path.join(t, "PG_VERSION")):
        return t
    top = owned_dir(tempfile.mkdtemp(prefix="nico-extsvc-template."))
    t = os.path.join(top, "data")
    r = as_pg([f"{PGBIN}/initdb", "-D", t] + INITDB_ARGS, capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(top, ignore_errors=True)
        raise RuntimeError("initdb failed:\n" + r.stdout + r.stderr)
    atexit.register(shutil.rmtree, top, True)
    os.environ["EXTSVC_PG_TEMPLATE"] = t
    return t


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def _crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def new_system_identifier(data):
    """Gives the stopped data directory data a system identifier of its own,
    made as initdb makes one (seconds, microseconds, pid bits), so that a
    copy of the template is a system of its own as an initdb'd cluster is.
    The identifier is stored in two places PostgreSQL checks against each
    other at startup: pg_control (its first field, under the file's CRC-32C,
    which ends the checked part of the struct) and the long header of the
    first page of every WAL segment (xlp_sysid, after the 24-byte short
    header; page headers carry no checksum). Returns the new identifier."""
    now = time.time()
    sysid = (int(now) << 32) | (int((now % 1) * 1e6) << 12) | random.getrandbits(12)
    control = os.path.join(data, "global", "pg_control")
    with open(control, "r+b") as f:
        buf = bytearray(f.read())
        old = buf[:8]
        # the CRC field's offset: the first 4-aligned place whose 4 bytes are
        # the CRC-32C of everything before them (PostgreSQL 15: 288)
        end = next((k for k in range(16, 1024, 4)
                    if struct.unpack_from("<I", buf, k)[0] == _crc32c(bytes(buf[:k]))), None)
        if end is None:
            raise RuntimeError(f"{control}: no CRC-32C found")
        struct.pack_into("<Q", buf, 0, sysid)
        struct.pack_into("<I", buf, end, _crc32c(bytes(buf[:end])))
        f.seek(0)
        f.write(buf)
    wal = os.path.join(data, "pg_wal")
    for name in os.listdir(wal):
        if re.fullmatch(r"[0-9A-F]{24}", name):
            with open(os.path.join(wal, name), "r+b") as f:
                f.seek(24)
                if f.read(8) != bytes(old):
                    raise RuntimeError(f"{name}: its long page header names another system")
                f.seek(24)
                f.write(struct.pack("<Q", sysid))
    return sysid


class Cluster:
    """A copy of the template in workdir/data with its own port and socket
    directory (workdir), the settings given added to postgresql.conf;
    preload=True adds shared_preload_libraries = 'nico_extsvc'."""

    def __init__(self, workdir, settings=None, preload=True, port=None):
        self.dir = owned_dir(workdir)
        self.port = port or free_port()
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "server.log")
        r = as_pg(["cp", "-a", template(), self.data], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"copying the template failed: {r.stderr}")
        new_system_identifier(self.data)
        conf = {"port": str(self.port), "unix_socket_directories": f"'{self.dir}'", **BASE_SETTINGS}
        if preload:
            conf["shared_preload_libraries"] = "'nico_extsvc'"
        conf.update(settings or {})
        self.append_conf(conf)

    def append_conf(self, conf):
        text = "".join(f"{k} = {v}\n" for k, v in conf.items())
        as_pg(["tee", "-a", os.path.join(self.data, "postgresql.conf")], input=text,
              capture_output=True, text=True, check=True)

    def ctl(self, *args):
        r = as_pg([f"{PGBIN}/pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60"] + list(args),
                  capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl {args}: {r.stdout}{r.stderr}\n{self.tail_log()}")

    def start(self):
        self.ctl("start")

    def restart(self):
        self.ctl("-m", "fast", "restart")

    def reload(self):
        self.ctl("reload")

    @property
    def conns(self):
        """The kept connections to this cluster (db.Conns), made on first use
        (also for an object made without __init__)."""
        if "_conns" not in self.__dict__:
            self._conns = db.Conns(self.dir, self.port, PG_USER)
        return self._conns

    def close_conns(self):
        self.conns.close()

    def stop(self):
        self.close_conns()
        try:
            self.ctl("-m", "fast", "stop")
        except RuntimeError:
            pass

    def tail_log(self, n=60):
        try:
            with open(self.logfile) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def conn(self, dbname="postgres", user=None):
        """The kept connection to dbname as user (default: the cluster user)."""
        return self.conns.get(dbname, user)

    def env(self):
        """PGHOST, PGPORT, PGUSER, PGDATABASE for a client started against this cluster."""
        return {"PGHOST": self.dir, "PGPORT": str(self.port), "PGUSER": PG_USER, "PGDATABASE": "postgres"}


if __name__ == "__main__":
    # scripts/lib/pgcluster.sh: python3 -m extsvc_testkit.cluster new-system-identifier DATA
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "new-system-identifier":
        print(new_system_identifier(sys.argv[2]))
    else:
        sys.exit("usage: python3 -m extsvc_testkit.cluster new-system-identifier DATA")
