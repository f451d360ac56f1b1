"""The stack of the Patroni suite: dpfsim (TLS, token), one etcd member, a
Patroni cluster of two PostgreSQL servers with nico_extsvc preloaded for
site A, NICo's login role, DPUs, instances and seed services; plain servers
(a restored copy, site B) beside it. Everything on loopback, free ports, one
temporary directory."""
import os
import shutil
import tempfile
import time
import types
import uuid

import psycopg

from extsvc_testkit import harness, invariants
from extsvc_testkit.patroni import Cluster, Etcd

import kubelog
import load

SITE_A, SITE_B = "site-a", "site-b"
# issue 25's Lease settings, at the product's (controller-runtime's) defaults
LEASE = {"extsvc.lease_duration": "15s", "extsvc.lease_renew_deadline": "10s", "extsvc.lease_retry_period": "2s"}
RETRY_PERIOD_S, RENEW_DEADLINE_S = 2.0, 10.0
NICO = "nico"  # the login role NICo connects as: a member of extsvc_api only


def extension_settings(sim, site_id):
    """The extension's settings of one site (values unquoted, as Patroni takes them)."""
    return {
        "extsvc.site_id": site_id,
        "extsvc.workers": "2",
        "extsvc.kube_server": sim.management, "extsvc.kube_ca_file": sim.ca_file,
        "extsvc.kube_token_file": sim.token_file,
        "extsvc.dpu_kube_server": sim.dpu, "extsvc.dpu_kube_ca_file": sim.ca_file,
        "extsvc.dpu_kube_token_file": sim.token_file,
        # the test kit's short retries; row leases as the product ships them
        "extsvc.retry_base": "100ms", "extsvc.retry_cap": "2s", "extsvc.lease_time": "60s",
        "extsvc.http_timeout": "3s", "extsvc.log_level": "debug",
        **LEASE,
    }


def quoted(settings):
    return {k: "'" + v.replace("'", "''") + "'" for k, v in settings.items()}


def host_id(i, tag="a"):
    """Host i's NICo MachineId (a host kind: register_dpu refuses a DPU id for a host)."""
    return harness.host_id(f"{tag}{i}")


class Layout:
    """Which seeded dpfsim DPU goes where. Site A: `hosts` hosts of two DPUs
    each (the even one primary), one instance each; host 0's instance is
    pinned (a fixed attachment, never touched by the load: its primary DPU
    is shared with site B); then a stray host whose instance only the writes
    sent to a lingering old primary touch. Site B: two hosts of two DPUs, and
    a third host whose only DPU is site A's DPU 0 (registered in both sites)."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.a_dpus = {h: [2 * h, 2 * h + 1] for h in range(hosts)}
        self.stray_host = hosts
        self.stray_dpus = [2 * hosts, 2 * hosts + 1]
        first_b = 2 * hosts + 2
        self.b_dpus = {0: [first_b, first_b + 1], 1: [first_b + 2, first_b + 3], 2: [0]}
        self.total = first_b + 4


class Nico:
    """NICo's connection for setup calls (the same role as the load)."""

    def __init__(self, conninfo):
        self.conn = psycopg.connect(conninfo, user=NICO, dbname="postgres", autocommit=True, connect_timeout=5)

    def q(self, sql, args=()):
        return self.conn.execute(sql, args).fetchall()

    def close(self):
        self.conn.close()


def make_nico_role(pg):
    pg.sql(f"CREATE ROLE {NICO} LOGIN IN ROLE extsvc_api")


def register(nico, hosts, tag):
    """register_dpu for each host's DPUs (first one primary), one instance per host."""
    instances = {}
    for h, dpus in hosts.items():
        for k, d in enumerate(dpus):
            nico.q("SELECT extsvc.register_dpu(%s, %s, %s, %s, %s)",
                   (harness.dpu_id(d, "d" if tag == "a" else "e"), host_id(h, tag), harness.device(d),
                    harness.node(d), k == 0))
        iid = str(uuid.uuid4())
        nico.q("SELECT extsvc.upsert_instance(%s, %s, %s, NULL)", (iid, load.TENANT, host_id(h, tag)))
        instances[h] = iid
    return instances


def create_ready(nico, pg, names, target="PRIMARY", timeout=60):
    """Services created as NICo would, waited READY (their DPUServices exist)."""
    ids = []
    for n in names:
        ids.append(nico.q("SELECT service_id::text FROM extsvc.create_service(%s, %s, 'DPF_HELM_CHART', %s, "
                          "dpu_target => %s)", (load.TENANT, n, load.json.dumps(load.helm("seed-" + n)), target))[0][0])
    harness.wait_until(lambda: pg.one("SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY' AND "
                                      "service_id = ANY(ARRAY[" + ",".join(harness.lit(i) for i in ids)
                                      + "]::uuid[])") == str(len(ids)), timeout=timeout, what=f"{names} READY")
    return ids


def attach(nico, iid, sids):
    entries = [{"service_id": s, "version": nico.q("SELECT version FROM extsvc.services WHERE service_id = %s",
                                                  (s,))[0][0]} for s in sids]
    nico.q("SELECT extsvc.set_instance_extension_services(%s::uuid, %s::jsonb, NULL, %s)",
           (iid, load.json.dumps(entries), load.TENANT))


class Stack:
    def __init__(self, hosts):
        self.workdir = tempfile.mkdtemp(prefix="nico-extsvc-ha.")
        os.chmod(self.workdir, 0o755)
        self.layout = Layout(hosts)
        self.sim = self.etcd = self.cluster = self.reqlog = None
        self.plain = []  # plain servers started beside the cluster (copy, site B)
        self.streams = []
        # pg_dump writes here as the PostgreSQL user
        self.dumps = os.path.join(self.workdir, "dumps")
        os.makedirs(self.dumps)
        if os.geteuid() == 0:
            shutil.chown(self.dumps, harness.PG_USER)

    def start(self):
        self.sim = harness.Sim(self.workdir, dpus=self.layout.total, request_log=True)
        self.reqlog = kubelog.RequestLog(self.sim, self.sim.request_log)
        self.etcd = Etcd(self.workdir)
        params = {"shared_preload_libraries": "nico_extsvc", "log_timezone": "UTC", "max_connections": "60",
                  "fsync": "off", **extension_settings(self.sim, SITE_A)}
        self.cluster = Cluster(self.workdir, self.etcd, scope="nico-extsvc-ha", parameters=params)
        t0 = time.time()
        self.cluster.start(2)
        self.startup_s = time.time() - t0
        lead = self.cluster.leader()
        lead.pg.sql("CREATE EXTENSION nico_extsvc")
        lead.pg.sql("SELECT extsvc.allow_chart('https://charts.example.com')")
        make_nico_role(lead.pg)
        nico = Nico(self.conninfo(lead))
        try:
            self.instances = register(nico, {h: d for h, d in self.layout.a_dpus.items()}, "a")
            self.stray_instance = register(nico, {self.layout.stray_host: self.layout.stray_dpus}, "a")[
                self.layout.stray_host]
            self.pinned = create_ready(nico, lead.pg, ["pin-0"])
            attach(nico, self.instances[0], self.pinned)
            self.stray_seed = create_ready(nico, lead.pg, ["stray-seed-0", "stray-seed-1", "stray-seed-2"],
                                           target="ALL")
            attach(nico, self.stray_instance, self.stray_seed[:1])
        finally:
            nico.close()
        return self

    # --- routes for the load ---
    @staticmethod
    def conninfo(member):
        return f"host=127.0.0.1 port={member.pg_port}"

    def route_leader(self):
        """Where a load balancer sends writes: the member whose Patroni says it is the primary."""
        m = self.cluster.leader()
        return (m.name, self.conninfo(m)) if m else None

    @staticmethod
    def route_fixed(name, conninfo):
        return lambda: (name, conninfo)

    def stream(self, name, route, instances, prefix, **kw):
        s = load.Stream(name, route, instances, prefix=prefix, **kw)
        self.streams.append(s)
        s.start()
        return s

    # --- invariants ---
    def view(self, pg):
        """What invariants.violations reads; site A unless a check says otherwise (site=)."""
        return types.SimpleNamespace(pg=pg, sim=self.sim, site_id=SITE_A)

    def violations(self, pg, **kw):
        try:
            return invariants.violations(self.view(pg), **kw)
        except RuntimeError as e:  # the server went away under the check
            return [f"check failed: {str(e).splitlines()[0]}"]

    def plain_server(self, name, site_id, extension=True):
        pg = harness.Postgres(self.workdir, quoted(extension_settings(self.sim, site_id)) | {
            "log_timezone": "'UTC'"}, extension=extension, name=name)
        self.plain.append(pg)
        return pg

    def stop(self, keep=False):
        """Stops everything started here, each part whatever the others did."""
        parts = [s.stop for s in self.streams] + [p.stop for p in self.plain]
        parts += [x.stop for x in (self.reqlog, self.cluster, self.etcd, self.sim) if x is not None]
        for stop in parts:
            try:
                stop()
            except Exception as e:  # noqa: BLE001 - go on stopping the rest
                print(f"    cleanup: {stop.__qualname__}: {e!r}")
        if keep or os.environ.get("KEEP_E2E"):
            print(f"    kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
