#!/usr/bin/python3
"""NICo's handler transactions from 8 sessions at once on a site-sized
database, beside the same rows written by plain statements (issue 26, part 3).

The site: DPUS DPUs (one per host, as bench/fleet.py registers them),
SERVICES DPF_HELM_CHART services (PRIMARY target, 50 tenants) and INSTANCES
instances, each attached to one service of its tenant. All of it is seeded
through the API in large set-based statements (register_dpu, create_service,
upsert_instance, set_instance_extension_services over generate_series, as
bench/fleet.py does), so the state is the API's own; the worker and dpfsim
(DPUS DPUDevices) run from the start and reconcile it. Then HISTORY rows of
history are added directly by the superuser (session_replication_role =
replica: no triggers), spread over 30 days:
- dpu_state_history (60 %): the per-DPU rows the attach wrote, copied back
  in time under the ids of past instances (md5 of the instance id and the
  copy number), so that no current row exceeds the 32 kept per row;
- service_state_history (30 %): the services' own rows copied back in time;
- purged_services / purged_service_history (10 %): purged services with four
  lifecycle rows each (CREATING, READY, DELETING, DELETED).

Measured, from SESSIONS sessions of NICo's typed client (test/nico/sqlx_pg.py,
a login role that is only a member of extsvc_api), each in a process of its
own (BENCH_NH_CLIENT=threads: threads of one process, as before 2026-12-07),
each running the handler
cycle alloc, status, create, status, update, detach, status, delete for
SECONDS seconds (test/nico/nico_handlers.py, one transaction per handler):
- alloc: AllocateInstances, a batch of 8 new instances on free hosts of one
  tenant, each with one service of that tenant (lock_placement, 8
  upsert_instance, 8 set_instance_extension_services_versioned);
- create / update: CreateDpuExtensionService / UpdateDpuExtensionService
  (new chart data: a new version and revision);
- detach: UpdateInstanceConfig to an empty configuration (get_instance,
  compare-and-swap, get_instance); delete: ReleaseInstance (delete_instance);
- status: instance_extension_services_ready, _summary and _status.
Each session works on its own seeded instances and hosts (as NICo's handlers
never work on one instance twice at once); services are shared by all.
Printed: transactions per second, p50/p99 per handler, errors by SQLSTATE,
lock waits over deadlock_timeout (10 ms, log_lock_waits: the "still waiting"
lines of the server log) and the worker's claim latency beside it: the age of
the oldest due, unleased row (extsvc_queue_oldest_due_age_seconds, by queue)
sampled every 0.25 s while the sessions run; and the CPU time (/proc utime + stime) each
part of the run used during each phase's rounds: the API's backends, the superuser's
(the reference's, the sampler's), the workers, dpfsim, autovacuum, the session clients;
and per handler the CPU of the same transactions, p50 on both sides: the session's
backend (/proc/<pid>/schedstat before and after each transaction) and the client's
thread (time.thread_time). The latency ratio is the target; the backends' CPU ratio
says what the API costs the server without the waits for a CPU that eight sessions,
their Python clients, the workers and dpfsim on two CPUs add to both sides.

The physical reference: the same cycle, the same number of transactions per
handler and session, on copies of the tables (schema nicobench_ref, LIKE
the extsvc tables with their indexes, data copied; no triggers, checks or
foreign keys) by plain INSERT/UPDATE/SELECT statements of the superuser,
one statement where the API makes one call: the instance row, the entry, the
attachment row and its two history rows (placement, deployment), the DPU's
work row made due, the config version; the service row, its version,
revision, reconciliation row and history row; the reads by index. Before
the phases a census runs one transaction of each writing handler on both
sides (instances and hosts of its own) and prints the rows each wrote per
table (pg_stat_xact_user_tables before the commit), so that "the same rows"
is checked, not assumed (a run whose census finds other rows exits 1). The
ratio API p50 / reference p50 per handler is the target (<= 3x).

Env: BENCH_NH_DPUS (25000; quick 2500), BENCH_NH_SERVICES (2500; 250),
BENCH_NH_INSTANCES (12500; 1250), BENCH_NH_HISTORY (1000000; 100000),
BENCH_NH_SESSIONS (8), BENCH_NH_SECONDS (60; 15: the API's time, in
BENCH_NH_ROUNDS rounds, 6; 5, each followed by the reference's round of as
many transactions per session and handler), BENCH_NH_SETTLE (seconds to
wait for the worker to finish the seeding's backlog first; 300; 60),
BENCH_QUICK=1. BENCH_NH_HOLD=FILE keeps the seeded site up before the phases
while FILE exists (for EXPLAIN by hand). BENCH_NH_PROFILE=1 loads pg_stat_statements (track = all) and
sets track_functions = all, and prints after the API phase where its time
went: the functions by total and self time (pg_stat_user_functions) and the
statements, nested ones included, by total time (a profile, not a measurement:
the tracking costs time too). BENCH_NH_PYPROF=PREFIX runs the first session
of each phase under cProfile with its thread's CPU time as the clock and
writes one stats file per round to PREFIX.<api|ref>.<pid>.<ns> (read them
with pstats: where the Python client's CPU goes).
  PYTHONPATH=python /usr/bin/python3 bench/nico_handlers.py
"""
import json
import multiprocessing
import os
import random
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "nico"))
import common as c  # noqa: E402  bench/common.py

import nico_db  # noqa: E402,F401
import sqlx_pg  # noqa: E402
from nico_handlers import Nico, entry  # noqa: E402
from nico_ref import REF, RefHandlers, make_ref  # noqa: E402  bench/nico_ref.py
from nico_report import ClaimSampler, census_report, cpu_add, cpu_snapshot, lock_waits, profile, report  # noqa: E402

DPUS = c.size("BENCH_NH_DPUS", 25000, 2500)
SERVICES = c.size("BENCH_NH_SERVICES", 2500, 250)
INSTANCES = c.size("BENCH_NH_INSTANCES", 12500, 1250)
HISTORY = c.size("BENCH_NH_HISTORY", 1000000, 100000)
SESSIONS = c.size("BENCH_NH_SESSIONS", 8, 8)
SECONDS = c.size("BENCH_NH_SECONDS", 60, 15)
ROUNDS = c.size("BENCH_NH_ROUNDS", 6, 5)
SETTLE = c.size("BENCH_NH_SETTLE", 300, 60)
CLIENT = os.environ.get("BENCH_NH_CLIENT", "processes")
PROFILE = os.environ.get("BENCH_NH_PROFILE") == "1"
PYPROF = os.environ.get("BENCH_NH_PYPROF")
TENANTS = 50
BATCH = 8
ROLE = "nicobench_api"
CYCLE = ["alloc", "status", "create", "status", "update", "detach", "status", "delete"]
HANDLERS = ["alloc", "create", "update", "detach", "delete", "status"]
CHART = {"repoURL": "https://charts.example.com/stable", "chartName": "nh-agent", "chartVersion": "1.0.0",
         "security": {"privileged": False}}


def mid(kind, i):
    """The NICo MachineId of DPU (kind d) or host (kind h) number i (bench/fleet.py's mid_of)."""
    return f"fm100{kind}s{i:032x}" + "0" * 20


def mid_sql(kind, expr):
    return f"('fm100{kind}s' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def iid(i):
    return uuid.UUID(f"00000000-0000-0000-0002-{i:012x}")


def iid_sql(expr):
    return f"('00000000-0000-0000-0002-' || lpad(to_hex({expr}), 12, '0'))::uuid"


def tenant(i):
    return f"tenant-{i % TENANTS}"


# --- the site ---------------------------------------------------------------------

def seed(e):
    t0 = c.now()
    e.pg.sql(f"SELECT count(extsvc.register_dpu({mid_sql('d', 'i')}, {mid_sql('h', 'i')}, "
             "format('dpu-device-%s', lpad(i::text, greatest(4, length(i::text)), '0')), "
             "format('host-%s-dpu-device-%s', lpad(i::text, greatest(4, length(i::text)), '0'), lpad(i::text, greatest(4, length(i::text)), '0')), true)) "
             f"FROM generate_series(0, {DPUS - 1}) i")
    e.pg.sql("SELECT count(extsvc.create_service('tenant-' || (i % 50), 'nh-svc-' || lpad(i::text, 5, '0'), "
             f"'DPF_HELM_CHART', {c.lit(json.dumps(CHART))}, dpu_target => 'PRIMARY')) "
             f"FROM generate_series(0, {SERVICES - 1}) i")
    # only READY services can be attached: the worker creates their DPUServices meanwhile
    c.wait_sql(e.pg, "SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY'", str(SERVICES), 600, 0.5)
    e.pg.sql(f"SELECT count(extsvc.upsert_instance({iid_sql('i')}, 'tenant-' || (i % 50), {mid_sql('h', 'i')})) "
             f"FROM generate_series(0, {INSTANCES - 1}) i")
    # instance i: service i % SERVICES, of the same tenant (both i % 50)
    e.pg.sql(f"SELECT count(extsvc.set_instance_extension_services({iid_sql('i')}, "
             "jsonb_build_array(jsonb_build_object('service_id', s.service_id::text, 'version', s.version)))) "
             f"FROM generate_series(0, {INSTANCES - 1}) i "
             "JOIN (SELECT service_id, version, substr(service_name, 8)::int AS k FROM extsvc.services) s "
             f"  ON s.k = i % {SERVICES}")
    api_s = c.now() - t0
    t0 = c.now()
    dpu_rows = int(e.pg.one("SELECT count(*) FROM extsvc.dpu_state_history"))
    svc_rows = int(e.pg.one("SELECT count(*) FROM extsvc.service_state_history"))
    dpu_copies = max(1, round(HISTORY * 0.6 / max(dpu_rows, 1)))
    svc_copies = max(1, round(HISTORY * 0.3 / max(svc_rows, 1)))
    purged = max(1, HISTORY // 40)
    e.pg.sql(f"""
      SET session_replication_role = replica;
      INSERT INTO extsvc.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version,
                                            from_state, to_state, actor, reason, message, observed_at, at)
      SELECT h.machine, md5(h.instance_id::text || g)::uuid, h.dpu_machine_id, h.service_id, h.version,
             h.from_state, h.to_state, h.actor, h.reason, h.message, h.observed_at,
             now() - make_interval(secs => 30 * 86400.0 * g / {dpu_copies + 1})
        FROM extsvc.dpu_state_history h, generate_series(1, {dpu_copies}) g
       WHERE h.id <= (SELECT max(id) FROM extsvc.dpu_state_history);
      INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision, at)
      SELECT h.service_id, h.from_state, h.to_state, h.actor, h.reason, h.message, h.revision,
             now() - make_interval(secs => 30 * 86400.0 * g / {svc_copies + 1})
        FROM extsvc.service_state_history h, generate_series(1, {svc_copies}) g
       WHERE h.id <= (SELECT max(id) FROM extsvc.service_state_history);
      INSERT INTO extsvc.purged_services (service_id, tenant_organization_id, service_name, service_type,
                                          deployment_scope, dpf_service_name, created_at, delete_requested_at,
                                          deleted_at, final_reason)
      SELECT md5('purged' || i)::uuid, 'tenant-' || (i % 50), 'nh-purged-' || i, 'DPF_HELM_CHART', 'INSTANCE_DPUS',
             'nh-purged-' || i, now() - interval '30 days' + make_interval(secs => 86400.0 * 29 * i / {purged}),
             now() - interval '30 days' + make_interval(secs => 86400.0 * 29 * i / {purged} + 3600),
             now() - interval '30 days' + make_interval(secs => 86400.0 * 29 * i / {purged} + 3660), 'deleted'
        FROM generate_series(1, {purged}) i;
      INSERT INTO extsvc.purged_service_history (id, service_id, from_state, to_state, actor, reason, revision, at)
      SELECT 1000000000000 + i * 4 + t.n, p.service_id, t.f::extsvc.lifecycle_state, t.s::extsvc.lifecycle_state,
             t.a::extsvc.state_actor, t.r, 1, p.created_at + make_interval(secs => t.n * 1200)
        FROM generate_series(1, {purged}) i
        JOIN extsvc.purged_services p ON p.service_id = md5('purged' || i)::uuid,
             (VALUES (0, NULL, 'CREATING', 'api', 'created'), (1, 'CREATING', 'READY', 'worker', 'dpuservice_created'),
                     (2, 'READY', 'DELETING', 'api', 'delete_requested'),
                     (3, 'DELETING', 'DELETED', 'worker', 'dpuservice_deleted')) t(n, f, s, a, r);
      RESET session_replication_role;""")
    e.pg.sql("ANALYZE")
    rows = e.pg.sql("SELECT (SELECT count(*) FROM extsvc.dpu_state_history), "
                    "(SELECT count(*) FROM extsvc.service_state_history), "
                    "(SELECT count(*) FROM extsvc.purged_service_history)")[0]
    return api_s, c.now() - t0, [int(x) for x in rows]


def queue_busy(e):
    return e.pg.one("SELECT coalesce(sum(value), 0)::int FROM extsvc.metrics() "
                    "WHERE metric IN ('extsvc_queue_due', 'extsvc_queue_leased')")


class ApiHandlers:
    """NICo's handlers (test/nico/nico_handlers.py) with the arguments of the cycle."""

    def __init__(self, conn):
        self.nico = Nico(conn)

    def alloc(self, ten, allocs):
        self.nico.batch_allocate(ten, [(i, host, None, None, [entry(sid, ver)]) for i, host, _, sid, ver, _ in allocs])

    def create(self, sid, name, ten):
        self.nico.create_extension_service(ten, name, "dpf_helm_chart", json.dumps(CHART), dpu_target="primary",
                                           service_id=sid)

    def update(self, sid, n, ten):
        row = self.nico.update_extension_service(sid, ten, data=json.dumps(dict(CHART, chartVersion=f"1.0.{n}")))
        return row["version"]

    def detach(self, i, ten):
        self.nico.update_instance_config(i, ten, [])

    def delete(self, i, ten):
        self.nico.release_instance(i, ten)

    def status(self, i, ten):
        self.nico.instance_status(i, ten)


# --- the sessions -------------------------------------------------------------------------

class Plan:
    """What the sessions work on: per session its own seeded instances and free hosts."""

    def __init__(self, services):
        self.services = services  # [(k, service_id, version)] of the seeded services
        self.by_tenant = {}
        # NICo attaches READY services only: the services the update handler
        # changes (one in five of each tenant's) are not in the attach pool
        self.updatable = [k for k, _, _ in services if (k // TENANTS) % 5 == 4]
        for k, sid, ver in services:
            if (k // TENANTS) % 5 != 4:
                self.by_tenant.setdefault(k % TENANTS, []).append(k)
        self.version = {k: ver for k, _, ver in services}
        self.sid = {k: sid for k, sid, _ in services}


class Session:
    def __init__(self, n, connect, kind, plan, tpl):
        self.n, self.kind, self.plan, self.quota, self.deadline = n, kind, plan, None, None
        self.turn = 0  # where in CYCLE the next round goes on
        self.conn = connect()
        self.h = ApiHandlers(self.conn) if kind == "api" else RefHandlers(self.conn, tpl)
        self.lat = {h: [] for h in HANDLERS}
        # CPU per transaction (ms): the session's backend (/proc/<pid>/schedstat, the server on
        # this machine) and this client thread (time.thread_time), beside each latency
        self.backend = int(self.conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        self.cpu = {h: [] for h in HANDLERS}
        self.client_cpu = {h: [] for h in HANDLERS}
        self.errors = {}
        self.rng = random.Random(n)
        # detach / delete / status targets, and free hosts for the allocations (the census's apart)
        self.seeded = [i for i in range(n, INSTANCES, SESSIONS) if i not in CENSUS_INSTANCES]
        self.hosts = iter(h for h in range(INSTANCES + n, DPUS, SESSIONS) if h not in CENSUS_HOSTS)
        self.new = 0
        self.own_services = [k for k in plan.updatable if k % SESSIONS == n]
        self.updates = 0

    def backend_cpu_ns(self):
        try:
            with open(f"/proc/{self.backend}/schedstat") as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def done(self, h):
        if self.quota is not None:
            return len(self.lat[h]) >= self.quota[h]
        return c.now() >= self.deadline

    def step(self, h):
        p, rng = self.plan, self.rng
        if h == "alloc":
            t = rng.randrange(TENANTS)
            allocs = []
            for _ in range(BATCH):
                host = next(self.hosts, None)
                if host is None:
                    return False
                k = rng.choice(p.by_tenant[t])
                allocs.append((uuid.uuid4(), mid("h", host), None, p.sid[k], p.version[k], mid("d", host)))
            self.h.alloc(f"tenant-{t}", allocs)
        elif h == "create":
            self.new += 1
            sid = uuid.uuid4()
            self.h.create(sid, f"nh-{self.kind}-{self.n}-{self.new}", f"tenant-{self.new % TENANTS}")
        elif h == "update":
            k = self.own_services[self.updates % len(self.own_services)]
            self.updates += 1
            if self.kind == "api":
                ver = self.h.update(p.sid[k], self.updates, tenant(k))
                p.version[k] = ver
            else:
                self.h.update(p.sid[k], self.updates + 1000)
        elif h in ("detach", "delete"):
            if not self.seeded:
                return False
            i = self.seeded.pop(self.rng.randrange(len(self.seeded)))
            getattr(self.h, h)(iid(i), tenant(i))
        else:
            i = self.rng.choice(self.seeded) if self.seeded else self.n
            self.h.status(iid(i), tenant(i))
        return True

    def run(self, deadline=None, quota=None):
        """One round: until the deadline, or until every handler has run its
        quota (a count of this session's transactions so far)."""
        self.deadline, self.quota = deadline, quota
        while True:
            if all(self.done(h) for h in HANDLERS):
                return
            h = CYCLE[self.turn % len(CYCLE)]
            self.turn += 1
            if self.quota is not None and self.done(h):
                continue
            if self.quota is None and self.done(h):
                return
            # the CPU readings (a /proc read each) stay outside the latency's clock
            b0, u0 = self.backend_cpu_ns(), time.thread_time()
            t0 = c.now()
            try:
                if not self.step(h):
                    return
                self.lat[h].append((c.now() - t0) * 1000)
                self.client_cpu[h].append((time.thread_time() - u0) * 1000)
                b1 = self.backend_cpu_ns()
                if b0 is not None and b1 is not None:
                    self.cpu[h].append((b1 - b0) / 1e6)
            except sqlx_pg.DbError as ex:
                key = f"{h} {getattr(ex, 'sqlstate', '?')}"
                self.errors[key] = self.errors.get(key, 0) + 1
                if self.errors[key] <= 2:
                    print(f"    session {self.n} {h}: {ex}", flush=True)


def _session_main(pipe, n, kind, services, tpl, host, port, user):
    """A session's own process: its Session, and the rounds the parent sends it."""
    sess = Session(n, lambda: sqlx_pg.connect(host=host, port=port, user=user, dbname="postgres"), kind,
                   Plan(services), tpl)
    while True:
        msg = pipe.recv()
        if msg[0] == "close":
            sess.conn.close()
            pipe.send(None)
            return
        if PYPROF and n == 0:
            import cProfile
            prof = cProfile.Profile(time.thread_time_ns, 1e-9)
            prof.runcall(sess.run, *msg[1:])
            prof.dump_stats(f"{PYPROF}.{kind}.{os.getpid()}.{time.monotonic_ns()}")
        else:
            sess.run(*msg[1:])
        pipe.send((sess.lat, sess.errors, sess.cpu, sess.client_cpu))


class SessionProcess:
    """A session in a process of its own (BENCH_NH_CLIENT=processes, the default). NICo runs
    its handlers on the threads of a compiled client; eight Python threads in one process
    take turns on the interpreter lock, so each session's work between two statements
    waited for the other seven: sampled, the API's backends spent 62 % of their
    transactions' time waiting for the client's next statement (issue 26, part 3)."""

    def __init__(self, n, kind, services, tpl, host, port, user):
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(target=_session_main, args=(child, n, kind, services, tpl, host, port, user),
                                daemon=True)
        self.proc.start()
        self.lat, self.errors = {h: [] for h in HANDLERS}, {}
        self.cpu, self.client_cpu = {h: [] for h in HANDLERS}, {h: [] for h in HANDLERS}

    def start(self, deadline, quota):
        self.pipe.send(("run", deadline, quota))

    def wait(self):
        self.lat, self.errors, self.cpu, self.client_cpu = self.pipe.recv()

    def close(self):
        self.pipe.send(("close",))
        self.pipe.recv()
        self.proc.join()


class SessionThread:
    """A session on a thread of this process (BENCH_NH_CLIENT=threads: the harness before
    2026-12-07, kept to compare)."""

    def __init__(self, n, kind, services, tpl, host, port, user):
        self.s = Session(n, lambda: sqlx_pg.connect(host=host, port=port, user=user, dbname="postgres"), kind,
                         Plan(services), tpl)
        self.lat, self.errors, self.t = self.s.lat, self.s.errors, None
        self.cpu, self.client_cpu = self.s.cpu, self.s.client_cpu

    def start(self, deadline, quota):
        self.t = threading.Thread(target=self.s.run, args=(deadline, quota), daemon=True)
        self.t.start()

    def wait(self):
        self.t.join()

    def close(self):
        self.s.conn.close()


# The census: one transaction of each writing handler, API and reference, on instances and hosts
# of its own, with the rows it wrote per table, read from pg_stat_xact_user_tables before its
# commit (the reference must write the rows the API writes, or the ratio flatters the API)
CENSUS_HANDLERS = ["alloc", "create", "update", "detach", "delete"]
CENSUS_INSTANCES = {INSTANCES - 1, INSTANCES - 2}
CENSUS_HOSTS = set(range(DPUS - BATCH, DPUS))


def census(kind, connect, services, tpl):
    sess = Session(0, connect, kind, Plan(services), tpl)
    sess.seeded, sess.hosts = sorted(CENSUS_INSTANCES), iter(sorted(CENSUS_HOSTS))
    sess.new, sess.updates = 10 ** 6, 10 ** 5  # names and versions no session of a phase makes
    out = {}
    schema = "extsvc" if kind == "api" else REF  # the same table names in both
    try:
        def counts():
            # the session's counts not yet flushed (earlier transactions' too): a difference
            # inside one transaction, where nothing is flushed, is that transaction's
            return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in sess.conn.execute(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables "
                "WHERE schemaname = %s", [schema]).fetchall()}
        for h in CENSUS_HANDLERS:
            with sess.conn.transaction():
                before = counts()
                sess.step(h)
                after = counts()
            out[h] = {t: d for t, v in after.items()
                      if any(d := tuple(x - y for x, y in zip(v, before.get(t, (0, 0, 0)))))}
    finally:
        sess.conn.close()
    return out


def new_phase(sessions):
    return {"sessions": sessions, "wall": 0.0, "waits": 0, "kinds": {}, "claimed": 0, "claim": {}, "cost": [],
            "cpu": {}}


def run_round(e, p, seconds=None, quota=None):
    """One round of a phase: its sessions at once, for `seconds` or until each
    has run its quota ({handler: count so far} per session); adds to p."""
    offset = os.path.getsize(e.pg.logfile)
    claimed0 = sum(int(r[2]) for r in c.worker_status(e))
    sampler = ClaimSampler(lambda: sqlx_pg.connect(host=e.pg.dir, port=e.pg.port, user=c.PG_USER, dbname="postgres"))
    deadline = c.now() + seconds if seconds is not None else None
    sampler.start()
    cpu0 = cpu_snapshot(ROLE, e.sim.proc.pid)
    t0 = c.now()
    for n, s in enumerate(p["sessions"]):
        s.start(deadline, quota and quota[n])
    for s in p["sessions"]:
        s.wait()
    p["wall"] += c.now() - t0
    cpu_add(p["cpu"], cpu0, cpu_snapshot(ROLE, e.sim.proc.pid))
    sampler.stop.set()
    sampler.join()
    time.sleep(0.2)
    waits, kinds = lock_waits(e, offset)
    p["waits"] += waits
    for k, v in kinds.items():
        p["kinds"][k] = p["kinds"].get(k, 0) + v
    p["claimed"] += sum(int(r[2]) for r in c.worker_status(e)) - claimed0
    for q, v in sampler.ages.items():
        p["claim"].setdefault(q, []).extend(v)
    p["cost"].extend(sampler.cost)
    sampler.conn.close()


def phases(e, services, tpl):
    """The API and the reference in alternate rounds (ROUNDS of SECONDS /
    ROUNDS each for the API; the reference then runs, per session and
    handler, as many transactions as the API ran so far). This machine's
    speed drifts by tens of per cent from one minute to the next (other
    people's work on the host): with the two phases one after the other the
    ratio of one code measured 4.7x to 6.7x in four runs; in alternate
    rounds both sides see the same drift."""
    kind = SessionProcess if CLIENT == "processes" else SessionThread
    api = new_phase([kind(n, "api", services, tpl, e.pg.dir, e.pg.port, ROLE) for n in range(SESSIONS)])
    ref = new_phase([kind(n, "ref", services, tpl, e.pg.dir, e.pg.port, c.PG_USER) for n in range(SESSIONS)])
    for _ in range(ROUNDS):
        run_round(e, api, seconds=SECONDS / ROUNDS)
        run_round(e, ref, quota=[{h: len(s.lat[h]) for h in HANDLERS} for s in api["sessions"]])
    for p in (api, ref):
        for s in p["sessions"]:
            s.close()
        p["sampler_ms"] = c.median(p["cost"])
    return api, ref


def main():
    t_start = c.now()
    print(f"# nico_handlers: {DPUS} DPUs, {SERVICES} services, {INSTANCES} instances, {HISTORY} history rows, "
          f"{SESSIONS} sessions x {SECONDS} s; {c.machine_line()}", flush=True)
    t0 = c.now()
    extra = {"log_lock_waits": "on", "deadlock_timeout": "'10ms'", "max_connections": "60"}
    if PROFILE:
        extra.update({"shared_preload_libraries": "'nico_extsvc,pg_stat_statements'",
                      "pg_stat_statements.track": "all", "track_functions": "all"})
    e = c.env(dpus=DPUS, workers=2, extra=extra)
    print(f"  cluster and dpfsim ({DPUS} DPUDevices) up in {c.now() - t0:.1f} s", flush=True)
    ok = False
    try:
        e.sim.ctl("POST", "/delays", c.FAST_DELAYS)
        api_s, hist_s, hist = seed(e)
        print(f"  seeded through the API in {api_s:.1f} s; history ({hist[0]} dpu_state_history, {hist[1]} "
              f"service_state_history, {hist[2]} purged_service_history) added directly in {hist_s:.1f} s", flush=True)
        t0 = c.now()
        busy = queue_busy(e)
        while busy and c.now() - t0 < SETTLE:
            time.sleep(2)
            busy = queue_busy(e)
        print(f"  worker backlog: {busy} rows due or leased after {c.now() - t0:.0f} s of settling "
              f"(BENCH_NH_SETTLE {SETTLE} s)", flush=True)
        e.pg.sql(f"DROP ROLE IF EXISTS {ROLE}; CREATE ROLE {ROLE} LOGIN IN ROLE extsvc_api")
        services = [(int(r[0]), uuid.UUID(r[1]), r[2]) for r in e.pg.sql(
            "SELECT substr(service_name, 8)::int, service_id, version FROM extsvc.services "
            "WHERE service_name LIKE 'nh-svc-%'")]
        tpl, ref_s = make_ref(e)
        print(f"  reference tables copied in {ref_s:.1f} s", flush=True)

        def nico_conn():
            return sqlx_pg.connect(host=e.pg.dir, port=e.pg.port, user=ROLE, dbname="postgres")

        def su_conn():
            return sqlx_pg.connect(host=e.pg.dir, port=e.pg.port, user=c.PG_USER, dbname="postgres")

        # before the profile's reset: the census is not part of the API phase
        same = census_report(census("api", nico_conn, services, tpl), census("ref", su_conn, services, tpl),
                             CENSUS_HANDLERS)
        hold(e)
        if PROFILE:
            e.pg.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; "
                     "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset()")
        api, ref = phases(e, services, tpl)
        if PROFILE:
            profile(e)
        report(api, ref, HANDLERS, SESSIONS)
        ok = True
    finally:
        e.close(keep=not ok)
        print(f"nico_handlers: {c.now() - t_start:.1f}s wall", flush=True)
    if ok and not all(same.values()):
        # the ratios compare different work: the run is not a measurement of the target
        print("nico_handlers: FAILED the census: the reference does not write the rows the API writes")
        return False
    return ok


def hold(e):
    """BENCH_NH_HOLD=FILE: the seeded site stays up, before the phases, while FILE exists (to
    EXPLAIN or time a call by hand); the connection line is printed."""
    path = os.environ.get("BENCH_NH_HOLD")
    if not path:
        return
    open(path, "w").close()
    print(f"  holding while {path} exists: psql -h {e.pg.dir} -p {e.pg.port} -U {c.PG_USER} postgres "
          f"(NICo's role: {ROLE})", flush=True)
    while os.path.exists(path):
        time.sleep(1)




if __name__ == "__main__":
    sys.exit(0 if main() else 1)
