"""NICo-style load on the SQL API (docs/nico-integration.md): creates,
updates, attaches, detaches and deletes of DPF_HELM_CHART services, as a
login role holding only extsvc_api, each call one autocommit statement after
the reads it needs (NICo re-reads and retries; it keeps no model of its own
that could go stale across a failover).

A Stream is one client thread. Before every call it asks its route where to
connect (the Patroni member whose REST API answers GET /primary 200, as a
load balancer's health check does; or one fixed server) and reconnects when
the answer changed, as a pooler behind HAProxy with shutdown-sessions does.
Every write is recorded: which server, when it was sent and answered, and
whether it committed ("committed"), was refused ("error", with SQLSTATE), or
the connection broke under it ("unknown": it may have committed). What a
write wanted (service id, a unique marker in the Helm values, instance and
services) is kept so the checks can follow it into the cluster.

Needs python3-psycopg (Debian's /usr/bin/python3).
"""
import json
import random
import threading
import time

import psycopg

TENANT = "tenant-ha"


def helm(marker, version="1.2.3"):
    return {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent", "chartVersion": version,
            "values": {"load": marker}, "security": {"privileged": False}}


class Write:
    __slots__ = ("seq", "stream", "kind", "server", "t0", "t1", "outcome", "sqlstate", "want")

    def __init__(self, seq, stream, kind, server, want):
        self.seq, self.stream, self.kind, self.server, self.want = seq, stream, kind, server, want
        self.t0 = time.time()
        self.t1 = None
        self.outcome = None
        self.sqlstate = None

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class Stream(threading.Thread):
    """One NICo client: `route()` gives (server name, conninfo) or None.
    `prefix` names the services this stream creates and the only ones it
    touches; `instances` are the instances it attaches to."""

    def __init__(self, name, route, instances, *, prefix, rate=4.0, live_target=20, seed=1,
                 weights=None, role="nico"):
        super().__init__(name=f"load-{name}", daemon=True)
        self.stream, self.route, self.instances, self.prefix = name, route, list(instances), prefix
        self.rate, self.live_target, self.role = rate, live_target, role
        self.rng = random.Random(seed)
        self.weights = weights or {"create": 3, "update": 3, "attach": 3, "detach": 2, "delete": 2}
        self.writes = []
        self.errors = []  # (time, server, text) of connection failures, for the report
        self._halt = threading.Event()
        self._paused = threading.Event()
        self._conn = None
        self._server = None
        self._seq = 0
        self.lock = threading.Lock()

    # --- control ---
    def stop(self):
        self._halt.set()
        self.join(30)
        self._close()

    def pause(self):
        """Stops issuing calls (the one under way finishes); returns once idle."""
        self._paused.set()
        with self.lock:
            pass

    def resume(self):
        self._paused.clear()

    def committed(self, server=None, since=None, until=None):
        return [w for w in self.writes if w.outcome == "committed" and (server is None or w.server == server)
                and (since is None or w.t1 >= since) and (until is None or w.t0 <= until)]

    def last_write_time(self):
        return max((w.t1 for w in self.writes if w.t1), default=None)

    # --- connection ---
    def _close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        self._conn, self._server = None, None

    def _connect(self):
        target = self.route()
        if target is None:
            self._close()
            return False
        server, conninfo = target
        if self._conn is not None and self._server == server and not self._conn.closed:
            return True
        self._close()
        try:
            self._conn = psycopg.connect(conninfo, user=self.role, dbname="postgres", autocommit=True,
                                         connect_timeout=3, options="-c statement_timeout=15000")
            self._server = server
            return True
        except psycopg.Error as e:
            self.errors.append((time.time(), server, str(e).strip().splitlines()[0] if str(e) else repr(e)))
            self._close()
            return False

    def _read(self, sql, args=()):
        return self._conn.execute(sql, args).fetchall()

    def _write(self, kind, want, sql, args=()):
        self._seq += 1
        w = Write(self._seq, self.stream, kind, self._server, want)
        self.writes.append(w)
        try:
            rows = self._conn.execute(sql, args).fetchall()
            w.outcome = "committed"
            return rows
        except psycopg.errors.Error as e:
            broken = self._conn.closed or e.sqlstate is None or e.sqlstate.startswith(("08", "57P"))
            w.outcome = "unknown" if broken else "error"
            w.sqlstate = e.sqlstate
            if broken:
                self._close()
            return None
        finally:
            w.t1 = time.time()

    # --- the calls ---
    def _live(self, states="('READY', 'CREATING', 'UPDATING', 'FAILED')"):
        return [r[0] for r in self._read(
            f"SELECT service_id::text FROM extsvc.services WHERE tenant_organization_id = %s "
            f"AND service_type = 'DPF_HELM_CHART' AND lifecycle_state IN {states} AND service_name LIKE %s "
            f"ORDER BY service_id", (TENANT, self.prefix + "%"))]

    def op_create(self):
        marker = f"{self.stream}-c{self._seq + 1}"
        name = f"{self.prefix}{self._seq + 1}"
        target = self.rng.choice(["PRIMARY", "ALL"])
        rows = self._write("create", {"marker": marker, "name": name},
                           "SELECT service_id::text FROM extsvc.create_service(%s, %s, 'DPF_HELM_CHART', %s, "
                           "dpu_target => %s)", (TENANT, name, json.dumps(helm(marker)), target))
        if rows:
            self.writes[-1].want["service_id"] = rows[0][0]

    def op_update(self):
        live = self._live("('READY', 'CREATING', 'UPDATING', 'FAILED')")
        if not live:
            return
        sid = self.rng.choice(live)
        marker = f"{self.stream}-u{self._seq + 1}"
        version = self.rng.choice(["1.2.3", "1.2.4", "1.3.0"])
        self._write("update", {"service_id": sid, "marker": marker},
                    "SELECT desired_revision FROM extsvc.update_service(%s::uuid, %s, tenant_organization_id => %s)",
                    (sid, json.dumps(helm(marker, version)), TENANT))

    def _entries(self, iid):
        rows = self._read("SELECT services FROM extsvc.get_instance(%s::uuid, %s)", (iid, TENANT))
        if not rows or rows[0][0] is None:
            return []
        return [{"service_id": e["service_id"], "version": e["version"]} for e in rows[0][0]
                if not e.get("removed_at")]

    def op_attach(self):
        iid = self.rng.choice(self.instances)
        have = self._entries(iid)
        ready = self._read(
            "SELECT service_id::text, version FROM extsvc.services WHERE tenant_organization_id = %s "
            "AND service_type = 'DPF_HELM_CHART' AND lifecycle_state = 'READY' AND service_name LIKE %s "
            "AND deployment_scope <> 'ALL_DPUS' ORDER BY random() LIMIT 2", (TENANT, self.prefix + "%"))
        add = [{"service_id": r[0], "version": r[1]} for r in ready
               if r[0] not in {e["service_id"] for e in have}]
        if not add:
            return
        entries = (have + add)[-3:]
        self._write("attach", {"instance": iid, "services": entries},
                    "SELECT extsvc.set_instance_extension_services(%s::uuid, %s::jsonb, NULL, %s)",
                    (iid, json.dumps(entries), TENANT))

    def op_detach(self):
        iid = self.rng.choice(self.instances)
        have = self._entries(iid)
        if not have:
            return
        keep = [e for e in have if self.rng.random() < 0.5]
        self._write("detach", {"instance": iid, "services": keep},
                    "SELECT extsvc.set_instance_extension_services(%s::uuid, %s::jsonb, NULL, %s)",
                    (iid, json.dumps(keep), TENANT))

    def op_delete(self):
        free = [r[0] for r in self._read(
            "SELECT s.service_id::text FROM extsvc.services s WHERE s.tenant_organization_id = %s "
            "AND s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state IN ('READY', 'FAILED') "
            "AND s.service_name LIKE %s AND NOT EXISTS (SELECT FROM extsvc.service_instances(s.service_id, NULL, %s) i "
            "WHERE i.removed_at IS NULL) ORDER BY s.service_id", (TENANT, self.prefix + "%", TENANT))]
        if not free:
            return
        sid = self.rng.choice(free)
        self._write("delete", {"service_id": sid},
                    "SELECT lifecycle_state FROM extsvc.delete_service(%s::uuid, NULL, %s)", (sid, TENANT))

    def step(self):
        live = len(self._live())
        kinds = dict(self.weights)
        if live < self.live_target * 0.6:
            kinds["delete"] = 0
            kinds["create"] *= 3
        elif live > self.live_target * 1.4:
            kinds["create"] = 0
            kinds["delete"] *= 3
        kind = self.rng.choices(list(kinds), weights=list(kinds.values()))[0]
        getattr(self, "op_" + kind)()

    def run(self):
        period = 1.0 / self.rate
        while not self._halt.is_set():
            t0 = time.time()
            with self.lock:  # pause() waits for this call to finish; none starts after it
                if not self._paused.is_set():
                    try:
                        if self._connect():
                            self.step()
                    except Exception as e:  # noqa: BLE001 - a read broke (connection gone, server read-only): go on
                        self.errors.append((time.time(), self._server, str(e).strip().splitlines()[0]
                                            if str(e).strip() else repr(e)))
                        self._close()
            self._halt.wait(max(0.0, period - (time.time() - t0)))

    def summary(self):
        out = {}
        for w in self.writes:
            k = out.setdefault(w.kind, {"committed": 0, "error": 0, "unknown": 0})
            k[w.outcome or "unknown"] += 1
        return out
