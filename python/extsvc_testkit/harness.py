"""End-to-end harness: a real PostgreSQL cluster with the nico_extsvc worker
talking TLS + bearer token to a real dpfsim process. SQL goes through one
kept psycopg 3 connection (extsvc_testkit.db); the cluster is a copy of the
test command's template data directory (extsvc_testkit.cluster).
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import uuid

from . import db
from .cluster import PG_USER, PGBIN, Cluster, as_pg, free_port  # noqa: F401  (names the suites import from here)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
DPFSIM = os.environ.get("DPFSIM", os.path.join(BUILD_DIR, "sim", "dpfsim"))
NAMESPACE = "dpf-operator-system"
# dpfsim's delays "reduced to 0-50 ms" for fleet runs (POST /delays): the
# benchmarks and the soak.
FAST_DELAYS = {"label_propagation_ms": 50, "node_provisioning_ms": 0, "dpuservice_sync_ms": 20,
               "pod_ready_ms": 50, "pod_termination_ms": 20, "dpuservice_ready_ms": 20, "finalizer_ms": 20}


def wait_until(fn, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def dpu_id(i, tag="d"):
    """The NICo MachineId of DPU i (SPEC 7): fm100 + d (DPU) + s (serial) +
    52 base32 characters; tag (one of 0-9 a-v) keeps the DPUs of different
    tests apart."""
    return f"fm100ds{tag}{i:031d}" + "0" * 20


def host_id(tag):
    """The NICo MachineId of a host: fm100 + h (host) + s + 52 base32
    characters, tag (0-9 a-v, at most 32) readable in them."""
    return "fm100hs" + tag.rjust(32, "0") + "0" * 20


# device/node: the names dpfsim --dpus N seeds for DPU i (sim/src/seeding.cpp)
def device(i):
    return f"dpu-device-{i:04d}"


def node(i):
    return f"host-{i:04d}-dpu-device-{i:04d}"


class Sim:
    """A dpfsim process with TLS and a bearer token."""

    def __init__(self, workdir, dpus=4, tls=True, args=(), request_log=False):
        self.dir = os.path.join(workdir, "sim")
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.token_file = os.path.join(self.dir, "token")
        self.write_token("e2e-token-1")
        cmd = [DPFSIM, "--listen", "127.0.0.1:0", "--dpu-listen", "127.0.0.1:0",
               "--control-listen", "127.0.0.1:0", "--dpus", str(dpus), "--seed", "7"]
        # every request as a JSON line (dpfsim --request-log): who wrote what, over any window
        self.request_log = os.path.join(self.dir, "requests.jsonl") if request_log else None
        if self.request_log:
            cmd += ["--request-log", self.request_log]
        extra = list(args)
        args = cmd
        if tls:
            args += ["--tls-dir", self.dir, "--token-file", self.token_file]
        args += extra
        self.log = open(os.path.join(self.dir, "dpfsim.log"), "w")
        # a session of its own, as a daemon has: Linux's autogroups then weigh it as its own task
        # group, not as one share with this client's threads (an API server runs on other CPUs
        # than NICo's handlers); it is still stopped by pid only
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("dpfsim did not start; see " + self.log.name)
        info = json.loads(line)
        self.management = info["management"]
        self.dpu = info["dpu"]
        self.control = info["control"]
        self.ca_file = info.get("ca_file", "")
        if self.ca_file:
            os.chmod(self.ca_file, 0o644)
        self.ssl = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None

    def write_token(self, token):
        tmp = self.token_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(token + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.token_file)
        self.token = token

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()

    # --- control API ---
    def ctl(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.control + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return json.loads(raw) if raw else None

    def fault(self, **rule):
        rule.setdefault("cluster", "management")
        return self.ctl("POST", "/faults", rule)

    def clear_faults(self):
        self.ctl("DELETE", "/faults")

    def kill_point(self, **spec):
        """Arms a kill point (docs/dpfsim.md, "Kill points"): on the nth request
        matching verb/path_regex/cluster, dpfsim SIGKILLs spec["pids"] before
        the request is applied or after (when="after"). Returns its id."""
        return self.ctl("POST", "/kill-points", spec)["id"]

    def kill_points(self):
        return self.ctl("GET", "/kill-points")["kill_points"]

    def clear_kill_points(self):
        self.ctl("DELETE", "/kill-points")

    def counts(self):
        return self.ctl("GET", "/counts")

    def work_requests(self):
        """Every request counted so far except the site Leases' reads and writes (issue 25: each
        server's lease process makes one GET and one PUT every extsvc.lease_retry_period, whatever
        the workers do)."""
        cnt = self.counts()
        leases = sum(v for cl in ("management", "dpu") for k, v in (cnt.get(cl) or {}).items()
                     if k.endswith(" leases"))
        return cnt["total"] - leases

    def watch_config(self, **knobs):
        """The watch window and timing knobs (docs/dpfsim.md, "Watch"): with no argument the
        current ones, else sets the given ones (window_events, window_ms, bookmark_ms,
        continue_ttl_ms) and returns the result. POST /reset restores them."""
        if knobs:
            return self.ctl("POST", "/watch-config", knobs)
        return self.ctl("GET", "/watch-config")

    def cut_watches(self, cluster=None, mode="drop"):
        """Ends every open watch stream (of one cluster, "management" or "dpu", when given)
        mid-stream: "drop" breaks the connection, "end" ends the response cleanly. Returns how
        many streams were cut."""
        body = {"mode": mode}
        if cluster:
            body["cluster"] = cluster
        return self.ctl("POST", "/watch-cut", body)["cut"]

    def watches(self):
        """Open watch streams and the watch counters (events and bookmarks sent, 410s, cuts)."""
        return self.ctl("GET", "/watches")

    def requests(self, limit=200):
        return self.ctl("GET", f"/requests?limit={limit}")

    def logged_requests(self):
        """Every request so far, from the --request-log file (request_log=True)."""
        with open(self.request_log) as f:
            return [json.loads(line) for line in f if line.strip()]

    # --- Kubernetes API (as an operator's client would) ---
    def kube(self, method, path, body=None, content_type="application/json", base=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request((base or self.management) + path, data=data, method=method,
                                     headers={"Content-Type": content_type,
                                              "Authorization": "Bearer " + self.token})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ssl) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def dpuservice(self, name):
        code, body = self.kube("GET", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NAMESPACE}/dpuservices/{name}")
        return body if code == 200 else None

    def dpuservices(self):
        code, body = self.kube("GET", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NAMESPACE}/dpuservices")
        assert code == 200, body
        return body["items"]

    def device_labels(self, i):
        """spec.cluster.nodeLabels of seeded DPUDevice i (management cluster)."""
        code, body = self.kube("GET", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NAMESPACE}"
                                      f"/dpudevices/{device(i)}")
        assert code == 200, body
        return (body.get("spec", {}).get("cluster", {}) or {}).get("nodeLabels", {}) or {}

    def node_labels(self, i):
        """The labels of seeded DPU i's Node (DPU cluster)."""
        code, body = self.kube("GET", f"/api/v1/nodes/{node(i)}", base=self.dpu)
        assert code == 200, body
        return body["metadata"].get("labels", {})

    def pods_on(self, i, sid):
        """The service's pods on DPU i, found as the product finds them: by the
        service label the rendered DPUService puts on them, never by name."""
        code, body = self.kube("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName%3D{node(i)}"
                                      f"&labelSelector=nico%2Fextension-service-id%3D{sid}", base=self.dpu)
        assert code == 200, body
        return body["items"]


class Postgres(Cluster):
    """A throw-away cluster owned by an unprivileged user, nico_extsvc preloaded
    (a copy of the test command's template: extsvc_testkit.cluster), with the
    extension created and the example chart repositories allowed;
    extension=False leaves the extension uncreated (a server to restore into)."""

    def __init__(self, workdir, settings, extension=True, name="pg"):
        conf = {"max_connections": "60"}
        conf.update(settings)
        super().__init__(os.path.join(workdir, name), conf)
        self.start()
        if not extension:
            return
        self.sql("CREATE EXTENSION nico_extsvc")
        self.sql("SELECT extsvc.allow_chart('https://charts.example.com')")
        self.sql("SELECT extsvc.allow_chart('oci://registry.example.com')")

    def sql(self, query, *, check=True):
        """Runs one statement (or several, in one implicit transaction) on the
        kept connection to database postgres; returns rows as lists of
        strings (NULL -> None). With check=False an error returns its text
        as psql printed it, instead of raising, and the statement runs in a
        session of its own, as every statement did with a psql process: the
        callers that expect errors are the probes of a server that may be
        restarting ("server back", "worker up"), and an answer from a kept
        backend the postmaster is about to end would say the server is back
        before its crash restart has even begun."""
        if check:
            return self.conn().sql(query)
        c = db.Conn(self.dir, self.port, PG_USER, "postgres")
        try:
            return c.sql(query, check=False)
        finally:
            c.close()

    def one(self, query):
        rows = self.sql(query)
        return rows[0][0] if rows and rows[0] else None

    def set_conf(self, **kv):
        """ALTER SYSTEM SET extsvc.<k> = v for each (None: RESET), then pg_reload_conf()."""
        for k, v in kv.items():
            if v is None:
                self.sql(f"ALTER SYSTEM RESET extsvc.{k}")
            else:
                self.sql(f"ALTER SYSTEM SET extsvc.{k} = '{v}'")
        self.sql("SELECT pg_reload_conf()")

    def metric(self, name, **labels):
        """The sum of the samples of extsvc.metrics() family NAME whose labels include LABELS
        (None: no such sample, which a test must tell apart from 0)."""
        total = None
        for lab, value in self.sql(f"SELECT labels::text, value FROM extsvc.metrics() WHERE metric = {lit(name)}"):
            if all(json.loads(lab).get(k) == v for k, v in labels.items()):
                total = (total or 0.0) + float(value)
        return total

    def resync(self, result=None, timeout=30):
        """extsvc.request_resync(), then waits until extsvc_resyncs_total moved (for that result
        label when given: "ok" waits for a resync that succeeded)."""
        labels = {"result": result} if result else {}
        before = self.metric("extsvc_resyncs_total", **labels) or 0
        self.sql("SELECT extsvc.request_resync()")
        wait_until(lambda: (self.metric("extsvc_resyncs_total", **labels) or 0) > before, timeout, interval=0.2,
                   what=f"a resync ({result or 'any result'})")

    def worker_pids(self):
        return [int(r[0]) for r in self.sql(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'nico_extsvc worker' ORDER BY pid")]

    def kill_workers(self):
        """SIGKILL to every worker; returns their pids. The postmaster answers the first
        kill by ending every other server process, so a later worker may be gone before its
        own kill reaches it (CI18: ProcessLookupError): that one is ended all the same."""
        killed = self.worker_pids()
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return killed

    def wait_crash_restart(self, killed, timeout=60):
        """After a worker was killed: waits until the postmaster's crash restart is over, that
        is until a session of its own sees workers and none of the killed ones. An answer to
        SELECT 1 is not enough: a new session may get one before the postmaster has even
        noticed the kill, and the next statement then dies with the restart."""
        killed = set(killed)

        def restarted():
            rows = self.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'nico_extsvc worker'",
                            check=False)
            return isinstance(rows, list) and len(rows) > 0 and not ({int(r[0]) for r in rows} & killed)
        wait_until(restarted, timeout=timeout, what="the crash restart (new workers)")


SITE_ID = "e2e-site"  # extsvc.site_id of an Env unless told otherwise (issue 25)


class Env:
    """dpfsim + PostgreSQL wired together; the worker talks TLS with a token.

    site_id: the server's extsvc.site_id (None: unset, the worker writes nothing). sim: an
    existing Sim to share (two sites, or a copy of a database, on one management cluster); it is
    then not stopped by close()."""

    def __init__(self, dpus=4, workers=2, extra=None, sim_args=(), sim=None, site_id=SITE_ID,
                 request_log=False):
        self.workdir = tempfile.mkdtemp(prefix="nico-extsvc-e2e.")
        os.chmod(self.workdir, 0o755)
        self.own_sim = sim is None
        self.sim = sim if sim is not None else Sim(self.workdir, dpus=dpus, args=sim_args,
                                                   request_log=request_log)
        self.site_id = site_id
        settings = {
            "extsvc.workers": str(workers),
            "extsvc.kube_server": f"'{self.sim.management}'",
            "extsvc.kube_ca_file": f"'{self.sim.ca_file}'",
            "extsvc.kube_token_file": f"'{self.sim.token_file}'",
            "extsvc.dpu_kube_server": f"'{self.sim.dpu}'",
            "extsvc.dpu_kube_ca_file": f"'{self.sim.ca_file}'",
            "extsvc.dpu_kube_token_file": f"'{self.sim.token_file}'",
            "extsvc.retry_base": "'100ms'", "extsvc.retry_cap": "'2s'",
            "extsvc.lease_time": "'10s'", "extsvc.resync_interval": "'300s'",
            "extsvc.http_timeout": "'3s'", "extsvc.log_level": "'debug'",
        }
        if site_id is not None:
            settings["extsvc.site_id"] = f"'{site_id}'"
        settings.update(extra or {})
        try:
            self.pg = Postgres(self.workdir, settings)
        except Exception:
            if self.own_sim:
                self.sim.stop()
            raise

    def holder_identity(self, timeout=30):
        """This server's holderIdentity (issue 25), once its lease process has started: every
        request of its workers carries it in the User-Agent."""
        return wait_until(lambda: self.pg.one("SELECT coalesce(max(lease_holder) FILTER (WHERE lease_held), '') "
                                              "FROM extsvc.worker_status()") or None,
                          timeout, what="this server to hold the site Lease")

    def wait_watching(self, timeout=30):
        """Until every informer of the watcher has listed and has its stream open
        (extsvc.watch_status()): a test that counts on the watch caches' events,
        not on a resync, starts from there."""
        wait_until(lambda: self.pg.one("SELECT count(*) > 0 AND bool_and(synced AND current) "
                                       "FROM extsvc.watch_status()") == "t",
                   timeout, interval=0.1, what="every informer listed and watching")

    def site_lease(self, site_id=None):
        """The site's Lease object in dpfsim, or None."""
        code, body = self.sim.kube("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/"
                                          f"nico-extsvc-{site_id or self.site_id}")
        return body if code == 200 else None

    def write_kubeconfig(self):
        """A kubeconfig for the management cluster (the sim's CA and token
        file), as an operator's kubectl would use; returns its path."""
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "dpf",
            "clusters": [{"name": "dpf", "cluster": {"server": self.sim.management,
                                                     "certificate-authority": self.sim.ca_file}}],
            "users": [{"name": "operator", "user": {"tokenFile": self.sim.token_file}}],
            "contexts": [{"name": "dpf", "context": {"cluster": "dpf", "user": "operator",
                                                      "namespace": NAMESPACE}}],
        }
        path = os.path.join(self.workdir, "kubeconfig")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def close(self, keep=False):
        self.pg.stop()
        if self.own_sim:
            self.sim.stop()
        if keep or os.environ.get("KEEP_E2E"):
            print(f"    kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- helpers over the SQL API ---
    def create(self, name, data=None, tenant="tenant-a", target="PRIMARY", service_id=None, **kw):
        data = data if data is not None else helm_data()
        args = [f"tenant_organization_id => {lit(tenant)}", f"service_name => {lit(name)}",
                "service_type => 'DPF_HELM_CHART'", f"data => {lit(json.dumps(data))}"]
        if target:
            args.append(f"dpu_target => {lit(target)}")
        if service_id:
            args.append(f"service_id => {lit(service_id)}::uuid")
        for k, v in kw.items():
            args.append(f"{k} => {lit(v)}")
        return self.pg.one(f"SELECT service_id FROM extsvc.create_service({', '.join(args)})")

    def update(self, sid, data):
        return self.pg.sql(f"SELECT lifecycle_state, desired_revision FROM extsvc.update_service("
                           f"{lit(sid)}::uuid, data => {lit(json.dumps(data))})")[0]

    def delete(self, sid):
        return self.pg.one(f"SELECT lifecycle_state FROM extsvc.delete_service({lit(sid)}::uuid)")

    def state(self, sid):
        return self.pg.sql(f"SELECT lifecycle_state, desired_revision, applied_revision, dpf_service_name, "
                           f"status_message FROM extsvc.services WHERE service_id = {lit(sid)}::uuid")[0]

    def wait_state(self, sid, want, timeout=30):
        def check():
            s = self.state(sid)
            return s if s[0] == want else False
        try:
            return wait_until(check, timeout, what=f"{sid} {want}")
        except AssertionError:
            print(self.pg.tail_log(40))
            print(self.pg.sql(f"SELECT * FROM extsvc.reconciliation_queue WHERE service_id = {lit(sid)}::uuid"))
            raise
        except db.SqlError:
            print(self.pg.tail_log(40))  # the server went away: its last words
            raise

    def version_of(self, sid):
        return self.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = {lit(sid)}::uuid")

    def ready_service(self, name, target="PRIMARY", data=None, **kw):
        """A service created and waited for until READY (values {"v": 1} unless data is given)."""
        sid = self.create(name, data if data is not None else helm_data(values={"v": 1}), target=target, **kw)
        self.wait_state(sid, "READY")
        return sid

    def register_dpu(self, i, host, primary, tag="d"):
        """Registers seeded DPU i (dpu_id(i, tag), its device and node) on host."""
        self.pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(i, tag)}', '{host}', '{device(i)}', '{node(i)}', "
                    f"{str(bool(primary)).lower()})")

    def new_instance(self, host, network=(), tenant="tenant-a", tag="d", free=True, wait=True):
        """A new instance on host with the DPUs numbered in network as its network
        DPUs. A host holds one live instance (issue 29): with free, an earlier
        test's instances of host are deleted first and, with wait, waited for
        (free_host); without wait the new one takes the host at once."""
        if free:
            self.free_host(host, wait=wait)
        iid = str(uuid.uuid4())
        arr = "ARRAY[" + ",".join(f"'{dpu_id(i, tag)}'" for i in network) + "]::text[]"
        self.pg.sql(f"SELECT extsvc.upsert_instance('{iid}', {lit(tenant)}, '{host}', {arr})")
        return iid

    def attach(self, iid, *sids, check=True):
        """set_instance_extension_services(iid) with exactly these services at
        their current versions (none: detach everything)."""
        services = json.dumps([{"service_id": s, "version": self.version_of(s)} for s in sids])
        return self.pg.sql(f"SELECT extsvc.set_instance_extension_services('{iid}', {lit(services)})", check=check)

    def summary_rows(self, iid):
        """{service_id: (aggregate_state, removed, configs_synced)} of the instance."""
        return {r[0]: (r[1], r[2], r[3]) for r in self.pg.sql(
            f"SELECT service_id, aggregate_state, removed, configs_synced "
            f"FROM extsvc.instance_extension_services_summary('{iid}')")}

    def free_host(self, host, wait=True, timeout=60):
        """A host holds at most one live instance (issue 29): deletes the live
        instances of host (a new one may then take it at once, a hand-over) and,
        with wait, waits until every instance of the host is gone (their
        removals observed), so that tests do not overlap."""
        for (iid,) in self.pg.sql(f"SELECT instance_id FROM extsvc.instances WHERE host_machine_id = {lit(host)} "
                                  f"AND delete_requested_at IS NULL"):
            self.pg.sql(f"SELECT extsvc.delete_instance({lit(iid)}::uuid)")
        if wait:
            wait_until(lambda: self.pg.one(f"SELECT count(*) FROM extsvc.instances "
                                           f"WHERE host_machine_id = {lit(host)}") == "0",
                       timeout, interval=0.1, what=f"the instances of host {host} gone")

    def history(self, sid):
        return [(r[0], r[1], r[2], r[3]) for r in self.pg.sql(
            f"SELECT coalesce(from_state, '-'), to_state, actor, reason FROM extsvc.service_history "
            f"WHERE service_id = {lit(sid)}::uuid ORDER BY id")]


def lit(v):
    if v is None:
        return "NULL"
    return "'" + str(v).replace("'", "''") + "'"


def helm_data(version="1.2.3", values="__absent__", privileged=False, **extra):
    d = {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent",
         "chartVersion": version, "security": {"privileged": privileged}}
    if values != "__absent__":
        d["values"] = values
    d.update(extra)
    return d


def run_tests(tests, header):
    """Runs test functions; prints one line each and the closing summary."""
    only = os.environ.get("E2E_ONLY")
    passed = failed = 0
    print(header)
    for t in tests:
        if only and only not in t.__name__:
            continue
        t0 = time.time()
        try:
            t()
            passed += 1
            print(f"ok   {t.__name__} ({time.time() - t0:.1f}s)", flush=True)
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {t.__name__} ({time.time() - t0:.1f}s)", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return failed == 0
