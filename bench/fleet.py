#!/usr/bin/python3
"""Scale with the watch caches (issue 11), side by side in one run.

1. latency: attach -> instance ready for one PRIMARY DPU, REPEATS cycles, next to
   dpfsim's own delay for the same thing (a raw label patch of an unregistered DPU
   until its pod is Running and Ready, polled every 5 ms): the event-driven path
   should add little to what the simulated DPF itself takes.
2. fleet, at each size of FLEET_SIZES (DPUs/services/instances; default
   2000/200/1000 and 10000/1000/5000): register, create, attach every instance in
   one transaction; RUNNING over time (drawn into docs/fleet-convergence.png),
   attach commit -> all RUNNING, API calls of the attach; then one steady resync
   (request_resync: the drift check against the caches, every DPU derived again;
   no re-list, as the caches listed less than extsvc.relist_interval ago) and one
   with the safety-net re-list (extsvc.relist_interval 0): their API calls per DPU;
   worker and dpfsim CPU seconds of each phase; each worker's private memory
   (RssAnon) and peak.
3. services: SERVICES_BIG creates in batches of 1000 per transaction, each
   batch to READY at the client rate limit (extsvc.kube_qps 50 per worker, 2
   workers); each worker's RssAnon after each batch.
4. client overhead: bench/tools/client_overhead (the product's kube::Client
   against a raw libcurl loop of the same merge patches over TLS).
5. podmem (issue 23, part 2): the watcher's pod informer keeps every DaemonSet pod
   of the DPU cluster, not only ours. The fleet of 2. again at each size with
   K system DaemonSets seeded into the DPU cluster (one pod on every Node each,
   modelled on what DPF and kubeadm run on every DPU Node: SYSTEM_DAEMONSETS
   below); the watcher's RssAnon and its informers' object counts with 0 and K
   system pods per Node, and the bytes per cached pod (the slope). The run with
   0 is the fleet part's when that ran in the same invocation.

6. site (issue 26, part 1; only when named in BENCH_PARTS): the fleet of 2. at the sizes of a
   100,000-GPU factory and below (BENCH_SITE_SIZES, default 2000/200/1000, 10000/1000/5000 and
   25000/2500/12500), each also with a full re-list after a 410 on every informer (writes, DPU
   passes, rows woken); its own section of docs/performance.md and docs/site-scale-convergence.png.

Env: BENCH_QUICK=1 (small sizes), BENCH_FLEET_SIZES ("2000/200/1000,10000/1000/5000"),
BENCH_REPEATS (20), BENCH_SERVICES_BIG (10000), BENCH_FLEET_BUDGET_S (600),
BENCH_PARTS ("latency,fleet,services,overhead,podmem"), BENCH_SYSTEM_DS (6: system
DaemonSets per Node for the podmem part, at most len(SYSTEM_DAEMONSETS)),
BENCH_WRITE_DOC=1 (write the results into docs/performance.md between the issue-11
markers and draw the plot; the podmem table between its own markers).
"""
import json
import os
import sys
import time
import uuid

import common as c  # bench/common.py
from fleet_doc import fleet_section, plot, write_doc  # noqa: E402
from fleet_relist import relist_after_410  # noqa: E402

QUICK = c.QUICK
SIZES = [tuple(int(x) for x in s.split("/")) for s in os.environ.get(
    "BENCH_FLEET_SIZES", "200/20/100,1000/100/500" if QUICK else "2000/200/1000,10000/1000/5000").split(",")]
REPEATS = c.size("BENCH_REPEATS", 20, 5)
SERVICES_BIG = c.size("BENCH_SERVICES_BIG", 10000, 2000)
BUDGET = c.size("BENCH_FLEET_BUDGET_S", 600, 120)
PARTS = os.environ.get("BENCH_PARTS", "latency,fleet,services,overhead,podmem").split(",")
# part site (issue 26, part 1; not in the default parts): the fleet at the site's sizes, up to a
# 100,000-GPU factory's 25,000 DPUs, with its own section of docs/performance.md and its own plot
SITE_SIZES = [tuple(int(x) for x in s.split("/")) for s in os.environ.get(
    "BENCH_SITE_SIZES", "500/50/250,1000/100/500" if QUICK else "2000/200/1000,10000/1000/5000,25000/2500/12500").split(",")]
SITE_PLOT = os.path.join(c.ROOT, "docs", "site-scale-convergence.png")
SYSTEM_DS = int(os.environ.get("BENCH_SYSTEM_DS", "6"))
WRITE_DOC = os.environ.get("BENCH_WRITE_DOC", "") not in ("", "0")
BUILD = os.environ.get("BUILD_DIR", os.path.join(c.ROOT, "build"))
NS = "dpf-operator-system"
DATA = {"repoURL": "https://charts.example.com/stable", "chartName": "demo-agent", "chartVersion": "1.0.0",
        "security": {"privileged": False}}


# What a DPF DPU Node runs besides tenant services: one pod each of these DaemonSets. The per-node
# components of DPF's DPU cluster (NVIDIA/doca-platform docs/public/developer-guides/architecture/
# component-description.md, "On each node in the DPU cluster": Multus, the SR-IOV device plugin,
# NVIPAM's node agent, the ServiceInterface/ServiceChain controllers and the SFC CNI, which DPF's
# dpu-networking chart ships as ovs-cni), the primary CNI DPF installs (flannel) and kubeadm's
# kube-proxy: 7; the first BENCH_SYSTEM_DS of them are seeded. DPF applies its own through Argo
# Applications of its own (annotation tracking), never one of ours.
SYSTEM_DAEMONSETS = [
    ("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.31.0"),
    ("dpf-operator-system", "kube-flannel-ds", "ghcr.io/flannel-io/flannel:v0.25.6"),
    ("dpf-operator-system", "kube-multus-ds", "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.1.0-thick"),
    ("dpf-operator-system", "kube-sriov-device-plugin", "ghcr.io/k8snetworkplumbingwg/sriov-network-device-plugin:v3.7.0"),
    ("dpf-operator-system", "nv-ipam-node", "ghcr.io/mellanox/nvidia-k8s-ipam:v0.3.5"),
    ("dpf-operator-system", "servicechainset-controller-node", "nvcr.io/nvidia/doca/dpf-system:v26.10.0"),
    ("dpf-operator-system", "ovs-cni-marker", "ghcr.io/k8snetworkplumbingwg/ovs-cni-plugin:v0.34.2"),
]


def system_daemonset(ns, name, image):
    """A DaemonSet as DPF's Argo Application renders it: every Linux Node, every taint tolerated,
    host network, the tracking-id of DPF's own Application."""
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": f"dpf-system-{name}"}
    return {"cluster": "dpu", "object": {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels,
                     "annotations": {"argocd.argoproj.io/tracking-id":
                                     f"dpf-system-{name}:apps/DaemonSet:{ns}/{name}"}},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                 "template": {
                     "metadata": {"labels": labels},
                     "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical",
                              "nodeSelector": {"kubernetes.io/os": "linux"},
                              "tolerations": [{"operator": "Exists"}],
                              "containers": [{"name": name, "image": image,
                                              "resources": {"requests": {"cpu": "10m", "memory": "50Mi"}},
                                              "securityContext": {"privileged": True}}]}}}}}


def seed_system_daemonsets(e, k, dpus):
    """Seeds the first k SYSTEM_DAEMONSETS and waits until each has a Ready pod on every Node."""
    if k > len(SYSTEM_DAEMONSETS):
        raise ValueError(f"BENCH_SYSTEM_DS {k} > {len(SYSTEM_DAEMONSETS)}")
    chosen = SYSTEM_DAEMONSETS[:k]
    e.sim.ctl("POST", "/seed", {"objects": [system_daemonset(*d) for d in chosen]})

    def ready():
        for ns, name, _ in chosen:
            code, ds = e.sim.kube("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}", base=e.sim.dpu)
            st = (ds or {}).get("status", {}) if code == 200 else {}
            if st.get("numberReady") != dpus or st.get("desiredNumberScheduled") != dpus:
                return False
        return True
    c.wait_until(ready, BUDGET, 1.0, f"{k} system DaemonSets Ready on {dpus} Nodes")
    return k * dpus


def uuid_of(prefix, expr):
    return f"('00000000-0000-0000-{prefix}-' || lpad(to_hex({expr}), 12, '0'))::uuid"


def mid_of(kind, expr):
    """The NICo MachineId (SPEC 7) of DPU (kind d) or host (kind h) number expr, as an SQL expression."""
    return f"('fm100{kind}s' || lpad(to_hex({expr}), 32, '0') || repeat('0', 20))"


def register(e, n, first=0):
    e.pg.sql(f"SELECT count(extsvc.register_dpu({mid_of('d', 'i')}, {mid_of('h', 'i')}, "
             f"format('dpu-device-%s', {c.seeded_number('i')}), "
             f"format('host-%s-dpu-device-%s', {c.seeded_number('i')}, {c.seeded_number('i')}), true)) "
             f"FROM generate_series({first}, {first + n - 1}) i")


def requests(e):
    """The workers' requests by cluster, verb and resource; the site Lease's reads and renewals
    (issue 25: the lease process, one GET and one PUT every extsvc.lease_retry_period whatever
    the fleet does) are left out."""
    cnt = e.sim.counts()
    return {f"{cl[:4]} {k}": v for cl in ("management", "dpu") for k, v in cnt[cl].items()
            if not k.endswith(" leases")}


def rss(e):
    """RssAnon (private) and VmHWM per worker slot, MiB."""
    out = {}
    for slot, pid in e.pg.sql("SELECT slot, pid FROM extsvc.worker_status() WHERE pid IS NOT NULL ORDER BY slot"):
        m = c.proc_mem(int(pid)) or {}
        out[int(slot)] = (m.get("RssAnon"), m.get("VmHWM"))
    return out


def dpu_idle(e):
    # converged: nothing due or leased, and no DPU waiting for its next change (attempts > 0)
    return e.pg.one("SELECT count(*) FROM extsvc.dpu_reconciliations WHERE lease_token IS NOT NULL "
                    "OR next_due_at <= now() OR (next_due_at IS NOT NULL AND attempts > 0)") == "0"


# --- 1. latency ----------------------------------------------------------------

def pod_ready_on(e, node):
    code, body = e.sim.kube("GET", f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName%3D{node}"
                            "&labelSelector=nico%2Fextension-service-id", base=e.sim.dpu)
    if code != 200:
        return False
    for p in body.get("items", []):
        if p["metadata"].get("deletionTimestamp"):
            continue
        conds = {x["type"]: x["status"] for x in p.get("status", {}).get("conditions", [])}
        if p.get("status", {}).get("phase") == "Running" and conds.get("Ready") == "True":
            return True
    return False


def pods_gone(e, node):
    code, body = e.sim.kube("GET", f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName%3D{node}"
                            "&labelSelector=nico%2Fextension-service-id", base=e.sim.dpu)
    return code == 200 and not body.get("items")


def latency():
    e = c.env(dpus=2, workers=2)
    s = None
    try:
        host = "fm100hs" + "0" * 52
        e.pg.sql(f"SELECT extsvc.register_dpu('fm100ds{'0' * 52}', '{host}', "
                 "'dpu-device-0000', 'host-0000-dpu-device-0000', true)")
        sid = e.create("lat", DATA, tenant="tenant-a", target="PRIMARY")
        e.wait_state(sid, "READY")
        version = e.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
        key = e.pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")
        iid = str(uuid.uuid4())
        e.pg.sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{host}')")
        delays = e.sim.ctl("GET", "/delays")
        s = c.Session(e.pg)
        attach = json.dumps([{"service_id": sid, "version": version}])
        product, raw = [], []
        dev1 = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/dpu-device-0001"
        node1 = "host-0001-dpu-device-0001"
        for _ in range(REPEATS):
            # the product: attach commit -> instance ready
            s.run(f"SELECT extsvc.set_instance_extension_services('{iid}', {c.lit(attach)})")
            t1 = c.now()
            t2 = c.wait_sql(s, f"SELECT extsvc.instance_extension_services_ready('{iid}')", "t", 60, 0.005)
            product.append((t2 - t1) * 1000)
            s.run(f"SELECT extsvc.set_instance_extension_services('{iid}', '[]')")
            c.wait_sql(s, f"SELECT count(*) FROM extsvc.instance_extension_services WHERE instance_id = '{iid}'",
                       "0", 60, 0.01)
            # dpfsim alone: the same label patch on an unregistered DPU -> its pod Running and Ready
            code, _ = e.sim.kube("PATCH", dev1, {"spec": {"cluster": {"nodeLabels": {key: "enabled"}}}},
                                 content_type="application/merge-patch+json")
            assert code == 200
            t1 = c.now()
            while not pod_ready_on(e, node1):
                if c.now() - t1 > 60:
                    raise TimeoutError("raw pod never Ready")
                time.sleep(0.005)
            raw.append((c.now() - t1) * 1000)
            e.sim.kube("PATCH", dev1, {"spec": {"cluster": {"nodeLabels": {key: None}}}},
                       content_type="application/merge-patch+json")
            c.wait_until(lambda: pods_gone(e, node1), 60, 0.02, "raw pod gone")
        return {"delays": delays, "product": product, "raw": raw}
    finally:
        if s:
            s.close()
        e.close()


# --- 2. fleet --------------------------------------------------------------------

def fleet(dpus, services, instances, system_ds=0):
    out = {"dpus": dpus, "services": services, "instances": instances, "system_ds": system_ds}
    t = c.now()
    e = c.env(dpus=dpus, workers=2)
    out["env_s"] = c.now() - t
    try:
        e.sim.ctl("POST", "/delays", c.FAST_DELAYS)
        if system_ds:
            t0 = c.now()
            out["system_pods"] = seed_system_daemonsets(e, system_ds, dpus)
            out["system_seed_s"] = c.now() - t0
            print(f"    {dpus}: {out['system_pods']} system pods Ready in {out['system_seed_s']:.1f}s", flush=True)
        cpu = c.CpuMeter(e)
        t0 = c.now()
        register(e, dpus)
        c.wait_until(lambda: dpu_idle(e), BUDGET, 0.5, "registration pass")
        out["register_s"] = c.now() - t0
        out["register_cpu"] = cpu.read()
        c.settle(e, 1.0)
        out["rss_register"] = rss(e)
        print(f"    {dpus}: registered and observed in {out['register_s']:.1f}s", flush=True)
        t0 = c.now()
        e.pg.sql("SELECT count(extsvc.create_service('tenant-fleet', 'fleet-' || lpad(i::text, 5, '0'), "
                 f"'DPF_HELM_CHART', {c.lit(json.dumps(DATA))}, dpu_target => 'PRIMARY')) "
                 f"FROM generate_series(0, {services - 1}) i")
        c.wait_sql(e.pg, "SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY'", str(services),
                   BUDGET, 0.5)
        out["services_s"] = c.now() - t0
        e.pg.sql(f"SELECT count(extsvc.upsert_instance({uuid_of('0002', 'i')}, 'tenant-fleet', "
                 f"{mid_of('h', 'i')})) FROM generate_series(0, {instances - 1}) i")
        c.wait_until(lambda: dpu_idle(e), 120, 0.5, "idle before the attach")
        c.settle(e, 1.0)
        e.sim.ctl("POST", "/counts/reset")
        cpu.start()
        t0 = c.now()
        e.pg.sql("SELECT count(extsvc.set_instance_extension_services(" + uuid_of("0002", "i") + ", "
                 "jsonb_build_array(jsonb_build_object('service_id', s.service_id::text, 'version', s.version)))) "
                 f"FROM generate_series(0, {instances - 1}) i "
                 "JOIN (SELECT service_id, version, (row_number() OVER (ORDER BY service_name) - 1)::int AS k "
                 f"      FROM extsvc.services) s ON s.k = i % {services}")
        t1 = c.now()
        out["attach_txn_s"] = t1 - t0
        running_q = ("SELECT count(*) FROM extsvc.dpf_extension_service_attachments "
                     "WHERE placement_state = 'ACTIVE' AND deployment_state = 'RUNNING'")
        progress, n = [], 0
        while c.now() - t1 < BUDGET:
            n = int(e.pg.one(running_q))
            progress.append((round(c.now() - t1, 2), n))
            if n >= instances:
                break
            time.sleep(0.25)
        out["progress"] = progress
        out["running"] = n
        out["all_running_s"] = progress[-1][0] if n >= instances else None
        try:
            c.wait_until(lambda: dpu_idle(e), 120, 0.5, "DPU queue idle")
        except AssertionError:
            pass
        c.settle(e, 1.0)
        out["attach_cpu"] = cpu.read()
        out["attach_requests"] = requests(e)
        out["rss_attach"] = rss(e)
        # one steady resync: drift check against the caches, every DPU derived again (no re-list:
        # the caches listed less than extsvc.relist_interval ago)
        out.update(resync(e, dpus, cpu, "resync"))
        out["rss"] = rss(e)
        watcher = e.pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0")
        out["pg_contexts"] = c.pg_contexts_mib(e, watcher) if watcher else None
        # the same with the safety net: every informer re-lists first (extsvc.relist_interval 0)
        e.pg.set_conf(relist_interval="0")
        try:
            c.settle(e, 1.0)
            out.update(resync(e, dpus, cpu, "safety"))
        finally:
            e.pg.set_conf(relist_interval=None)
        out["rss_safety"] = rss(e)
        out["sim_mem"] = c.sim_mem(e)
        out["watch"] = e.pg.sql("SELECT resource, objects, lists, events FROM extsvc.watch_status()")
        out.update(relist_after_410(e, BUDGET, dpu_idle, requests))
        return out
    except (TimeoutError, AssertionError) as ex:
        out["failed"] = str(ex)
        print(f"    fleet {dpus} stopped: {ex}", flush=True)
        return out
    finally:
        e.close()


def resync(e, dpus, cpu, key):
    """extsvc.request_resync(), until every DPU was derived again: its time, CPU and requests."""
    out = {}
    e.sim.ctl("POST", "/counts/reset")
    cpu.start()
    t_db = e.pg.one("SELECT now()")
    t0 = c.now()
    e.pg.sql("SELECT extsvc.request_resync()")
    c.wait_sql(e.pg, f"SELECT count(*) FROM extsvc.dpu_reconciliations WHERE last_observed_at >= '{t_db}' "
                     "AND lease_token IS NULL AND (next_due_at IS NULL OR next_due_at > now())", str(dpus),
               BUDGET, 0.25)
    out[f"{key}_s"] = c.now() - t0
    c.settle(e, 1.0)
    out[f"{key}_cpu"] = cpu.read()
    out[f"{key}_requests"] = requests(e)
    return out


def rate_limit_s(patches, qps=50, burst=100):
    """The pure rate-limit time of `patches` label patches through one client (the watcher works
    the DPU queue alone): the burst at once, the rest at qps."""
    return max(0, patches - burst) / qps


# --- 3. 10,000 services ------------------------------------------------------------

def services_big():
    out = {"batches": []}
    e = c.env(dpus=0, workers=2)
    try:
        cpu = c.CpuMeter(e)
        t_all = c.now()
        batch = 1000
        for k in range(0, SERVICES_BIG, batch):
            n = min(batch, SERVICES_BIG - k)
            t0 = c.now()
            e.pg.sql("SELECT count(extsvc.create_service('tenant-big', 'big-' || lpad(i::text, 6, '0'), "
                     f"'DPF_HELM_CHART', {c.lit(json.dumps(DATA))}, dpu_target => 'PRIMARY')) "
                     f"FROM generate_series({k}, {k + n - 1}) i")
            c.wait_sql(e.pg, "SELECT count(*) FROM extsvc.services WHERE lifecycle_state = 'READY'", str(k + n),
                       BUDGET, 0.5)
            took = c.now() - t0
            out["batches"].append({"ready": k + n, "seconds": took, "rate": n / took, "rss": rss(e)})
            print(f"    {k + n} READY; batch {n / took:.0f}/s; RssAnon "
                  f"{ {s: r[0] for s, r in out['batches'][-1]['rss'].items()} }", flush=True)
        out["total_s"] = c.now() - t_all
        out["cpu"] = cpu.read()
        out["watch"] = e.pg.sql("SELECT resource, objects, events FROM extsvc.watch_status()")
        return out
    finally:
        e.close()


# --- 4. client overhead -------------------------------------------------------------

def overhead():
    e = c.env(dpus=1, workers=1, extra={"extsvc.enabled": "off"})
    try:
        tool = os.path.join(BUILD, "bench", "client_overhead")
        path = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/dpu-device-0000"
        r = c.subprocess.run([tool, "--url", e.sim.management, "--ca", e.sim.ca_file, "--token-file",
                              e.sim.token_file, "--path", path, "--n", str(1000 if QUICK else 4000)],
                             capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"client_overhead failed: {r.stdout}{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        e.close()


# --- 5. system DaemonSet pods in the watcher's cache ----------------------------------

def informer(f, resource):
    for r in f.get("watch") or []:
        if r[0] == resource:
            return int(r[1])
    return None


def podmem(fleets):
    """Per size: the fleet with 0 system pods per Node (the fleet part's run when it ran) and with
    SYSTEM_DS; the slope of the watcher's RssAnon over the pods its informer holds."""
    rows = []
    for dpus, services, instances in SIZES:
        base = next((f for f in fleets if f["dpus"] == dpus and not f.get("system_ds") and "rss" in f), None)
        if base is None:
            base = fleet(dpus, services, instances)
        rows.append(base)
        if SYSTEM_DS:
            rows.append(fleet(dpus, services, instances, SYSTEM_DS))
    return rows


def slope(f0, f1, key):
    """Bytes of watcher RssAnon per pod more in its informer, from runs f0 and f1 (key: the rss
    snapshot)."""
    try:
        d_mib = f1[key][0][0] - f0[key][0][0]
        d_pods = informer(f1, "pods") - informer(f0, "pods")
        return d_mib * 1048576 / d_pods if d_pods else None
    except (KeyError, TypeError):
        return None


# --- report --------------------------------------------------------------------------

def report(res):
    lines = []

    def out(s=""):
        print(s, flush=True)
        lines.append(s)

    def md(title, header, rows):
        out(f"\n#### {title}\n")
        out("| " + " | ".join(header) + " |")
        out("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            out("| " + " | ".join(c.fmt(x) if not isinstance(x, str) else x for x in r) + " |")

    out(f"Run of `bench/fleet.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{c.machine_line()}; 2 workers, product defaults (extsvc.watch on, kube_qps 50, burst 100), "
        "resync requested explicitly (the safety-net re-list: extsvc.relist_interval 0 for one resync).")
    if "latency" in res:
        L = res["latency"]
        diff = c.median(L["product"]) - c.median(L["raw"])
        md(f"Attach -> RUNNING for one DPU, {len(L['product'])} cycles (ms)",
           ["measure", "median", "p99", "min", "max"],
           [("attach commit -> instance ready (the product)", c.median(L["product"]), c.pct(L["product"], 99),
             min(L["product"]), max(L["product"])),
            ("label patch -> pod Running and Ready (dpfsim alone)", c.median(L["raw"]), c.pct(L["raw"], 99),
             min(L["raw"]), max(L["raw"])),
            ("difference of the medians", diff, None, None, None)])
        out(f"\ndpfsim delays: {L['delays']}")
    if "fleet" in res:
        fleet_section(res["fleet"], md, out, rate_limit_s)
    if "services" in res:
        S = res["services"]
        md(f"{SERVICES_BIG} services created -> READY in batches of 1000 (client rate limit: 50/s per worker, "
           "2 workers)", ["READY", "batch rate (services/s)", "worker 0 RssAnon (MiB)", "worker 1 RssAnon (MiB)"],
           [(b["ready"], b["rate"], b["rss"].get(0, (None,))[0], b["rss"].get(1, (None,))[0])
            for b in S["batches"]])
        out(f"\ntotal {S.get('total_s', 0):.0f} s, CPU {S.get('cpu')}; informers: {S.get('watch')}")
    if "podmem" in res:
        P = res["podmem"]
        names = ", ".join(n for _, n, _ in SYSTEM_DAEMONSETS[:SYSTEM_DS])
        rows = []
        for f in P:
            rows.append((f"{f['dpus']}", f"{f.get('system_ds', 0)}", informer(f, "pods"), informer(f, "daemonsets"),
                         (f.get("rss_register") or {}).get(0, (None,))[0],
                         (f.get("rss") or {}).get(0, (None,))[0], (f.get("rss") or {}).get(0, (None, None))[1],
                         (f.get("rss") or {}).get(1, (None,))[0],
                         (f.get("sim_mem") or (None,))[0], "yes" if f.get("all_running_s") is not None else "NO"))
        md(f"Watcher memory with DPF's system DaemonSets (issue 23, part 2): 0 or {SYSTEM_DS} system pods per Node "
           f"({names})",
           ["DPUs", "system pods per Node", "pods in the informer", "DaemonSets kept", "watcher RssAnon after "
            "registration (MiB)", "**watcher RssAnon after the steady resync (MiB)**", "watcher VmHWM (MiB)",
            "worker 1 RssAnon (MiB)", "dpfsim VmRSS (MiB)", "all RUNNING"], rows)
        srows = []
        for dpus, _, _ in SIZES:
            pair = [f for f in P if f["dpus"] == dpus]
            f0 = next((f for f in pair if not f.get("system_ds")), None)
            f1 = next((f for f in pair if f.get("system_ds")), None)
            if f0 and f1:
                srows.append((f"{dpus}", slope(f0, f1, "rss_register"), slope(f0, f1, "rss")))
        if srows:
            md("Watcher RssAnon per cached pod (bytes; difference of the two runs of a size over the difference "
               "of the pods its informer holds)", ["DPUs", "after registration", "**after the steady resync**"],
               srows)
        for f in P:
            if f.get("failed"):
                out(f"\n{f['dpus']} DPUs with {f.get('system_ds', 0)} system pods per Node DID NOT FINISH: "
                    f"{f['failed']}")
            if f.get("system_ds"):
                out(f"\n{f['dpus']} DPUs, {f['system_ds']} system pods per Node: seeded and Ready in "
                    f"{c.fmt(f.get('system_seed_s'))} s; informers (resource, objects, lists, events): {f.get('watch')}")
    if "overhead" in res:
        O = res["overhead"]
        md(f"Kubernetes client per call against a raw libcurl loop ({O['calls_each']} merge patches each, TLS, "
           "keep-alive, one thread) (us)", ["path", "median", "p99"],
           [("raw libcurl loop", O["raw_p50_us"], O["raw_p99_us"]),
            ("kube::Client::merge_patch", O["client_p50_us"], O["client_p99_us"]),
            ("**ratio of the medians**", O["ratio_p50"], None)])
    return lines


def main():
    print(f"# fleet: {c.machine_line()}; parts {PARTS}; sizes {SITE_SIZES if PARTS == ['site'] else SIZES}",
          flush=True)
    res = {}
    if "latency" in PARTS:
        res["latency"] = latency()
    if "fleet" in PARTS:
        res["fleet"] = [fleet(*s) for s in SIZES]
    if "services" in PARTS:
        res["services"] = services_big()
    if "overhead" in PARTS:
        res["overhead"] = overhead()
    if "podmem" in PARTS:
        res["podmem"] = podmem(res.get("fleet", []))
    if "site" in PARTS:
        res["site"] = [fleet(*s) for s in SITE_SIZES]
    # the fleet-bench section (parts 1-4) and the podmem section are written apart, so that one
    # part run alone leaves the other's figures in place
    main_res = {k: v for k, v in res.items() if k not in ("podmem", "site")}
    lines = report(main_res) if main_res else []
    podmem_lines = report({"podmem": res["podmem"]}) if "podmem" in res else []
    site_lines = report({"fleet": res["site"]}) if "site" in res else []
    c.json_lines(os.environ.get("BENCH_JSON"), {"bench": "fleet", **{k: v for k, v in res.items()}})
    if WRITE_DOC:
        if "fleet" in res:
            plot(res["fleet"])
        if "site" in res:
            plot(res["site"], SITE_PLOT)
        write_doc(lines, podmem_lines, site_lines)
    return all(f.get("all_running_s") is not None
               for f in res.get("fleet", []) + res.get("podmem", []) + res.get("site", []))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
