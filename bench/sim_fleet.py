#!/usr/bin/python3
"""dpfsim at fleet scale (issue 11): seeding, 1000 DPUServices as the product renders them, then
a raw keep-alive loop of one merge patch per DPUDevice placing 5000 DPUs, observed through a
watch on the pods (LIST, then WATCH from the list's resourceVersion, as an informer does).

Measures, per size: seeding time and dpfsim CPU; the DPUService creates; the raw loop's
requests/s and per-request latency (the baseline the product's overhead is compared with); the
time until every placed DPU has a Running+Ready pod, seen through the watch; dpfsim's CPU for the
attach and for an idle minute afterwards; its RSS; the longest store-mutex hold of a controller
step; GET latency of a probe running during the attach.

Usage: bench/sim_fleet.py [--no-docs]
Env:   SIM_FLEET_DPUS       sizes to run, comma separated (default "2000,10000")
       SIM_FLEET_SERVICES   DPUServices (default DPUs / 10)
       SIM_FLEET_ATTACH     DPUDevices patched (default DPUs / 2)
       SIM_FLEET_IDLE_S     idle window measured after the attach (default 60)
       SIM_FLEET_DELAYS_MS  every dpfsim delay (default 50; --all-delays-ms)
       BUILD_DIR            where sim/dpfsim and sim/dpfsim_load are (default ./build)
Writes its figures into docs/performance.md between <!-- sim-fleet:begin --> and
<!-- sim-fleet:end --> unless --no-docs. Not part of the test command. Standard library only.
"""
import hashlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.abspath(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")))
DPFSIM = os.path.join(BUILD, "sim", "dpfsim")
LOAD = os.path.join(BUILD, "sim", "dpfsim_load")
NS = "dpf-operator-system"
DOC = os.path.join(ROOT, "docs", "performance.md")
BEGIN, END = "<!-- sim-fleet:begin -->", "<!-- sim-fleet:end -->"


def machine():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return os.cpu_count(), model, load


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mem_mib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024.0
    return out


class Client:
    """A keep-alive HTTP/1.1 connection (what a raw loop of requests uses)."""

    def __init__(self, base):
        u = urllib.parse.urlparse(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def call(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=data, headers={"Content-Type": ctype})
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
            except (http.client.RemoteDisconnected, ConnectionError):
                # the server closed the idle keep-alive connection: open a new one
                self.conn.close()
                if attempt == 2:
                    raise


class PodWatch(threading.Thread):
    """LIST the labelled pods, then WATCH from the list's resourceVersion; counts the pods that
    are Running and Ready (by name), re-listing on 410 and re-watching when a stream ends."""

    def __init__(self, base, selector):
        super().__init__(daemon=True)
        self.base, self.selector = base, selector
        self.ready = set()
        self.events = 0
        self.relists = 0
        self.stop = False
        self.lock = threading.Lock()

    @staticmethod
    def is_ready(pod):
        if pod.get("status", {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in pod.get("status", {}).get("conditions", []))

    def apply(self, kind, pod):
        name = pod["metadata"]["name"]
        with self.lock:
            if kind != "DELETED" and self.is_ready(pod):
                self.ready.add(name)
            else:
                self.ready.discard(name)

    def list(self):
        c = Client(self.base)
        sel = urllib.parse.quote(self.selector)
        cont, rv = "", None
        with self.lock:
            self.ready.clear()
        while True:
            q = f"/api/v1/namespaces/{NS}/pods?labelSelector={sel}&limit=500"
            if cont:
                q += "&continue=" + urllib.parse.quote(cont)
            st, body = c.call("GET", q)
            if st == 410:  # the list is restarted once, as the product's client does
                self.relists += 1
                cont = ""
                with self.lock:
                    self.ready.clear()
                continue
            for p in body["items"]:
                self.apply("ADDED", p)
            rv = rv or body["metadata"]["resourceVersion"]
            cont = body["metadata"].get("continue", "")
            if not cont:
                return rv

    def run(self):
        rv = self.list()
        u = urllib.parse.urlparse(self.base)
        while not self.stop:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
            q = (f"/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=300"
                 f"&labelSelector={urllib.parse.quote(self.selector)}&resourceVersion={rv}")
            conn.request("GET", q)
            r = conn.getresponse()
            for line in r:
                if self.stop:
                    break
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    self.relists += 1
                    rv = self.list()
                    break
                rv = obj["metadata"]["resourceVersion"]
                if ev["type"] != "BOOKMARK":
                    self.events += 1
                    self.apply(ev["type"], obj)
            conn.close()

    def count(self):
        with self.lock:
            return len(self.ready)


def dpuservice(i):
    """A DPUService as extsvc.render_dpuservice renders it (docs/data-schema.md)."""
    uuid = "%08x-0000-4000-8000-%012x" % (i, i)
    h = hashlib.sha256(uuid.encode()).hexdigest()[:10]
    name = f"extsvc-{h}"
    return h, {
        "apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"nico/extension-service-id": uuid,
                                "nico/extension-service-version": "V1-T1"}},
        "spec": {
            "deployInCluster": False,
            "helmChart": {"source": {"repoURL": "https://charts.example.com/stable", "chart": "agent",
                                     "version": "1.0.0", "releaseName": name}},
            "security": {"privileged": False},
            "serviceDaemonSet": {
                "labels": {"nico/extension-service-id": uuid},
                "annotations": {"nico/extension-service-revision": "1"},
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": f"nico/extsvc-{h}", "operator": "In", "values": ["enabled"]}]}]}}}}


def load(args):
    out = subprocess.run([LOAD] + args, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def wait(cond, timeout, interval=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(interval)
    return cond()


def run(dpus, services, attach, idle_s, delays_ms):
    res = {"dpus": dpus, "services": services, "attach": attach, "delays_ms": delays_ms}
    res["load_before"] = machine()[2]
    t0 = time.monotonic()
    proc = subprocess.Popen([DPFSIM, "--listen", "127.0.0.1:0", "--dpu-listen", "127.0.0.1:0",
                             "--control-listen", "127.0.0.1:0", "--dpus", str(dpus),
                             "--all-delays-ms", str(delays_ms), "--log-level", "warn"],
                            stdout=subprocess.PIPE, text=True)
    try:
        urls = json.loads(proc.stdout.readline())
        res["seed_ready_s"] = time.monotonic() - t0
        pid = proc.pid
        ctl, mgmt, dpu = Client(urls["control"]), Client(urls["management"]), Client(urls["dpu"])
        wait(lambda: ctl.call("GET", "/controllers")[1]["idle"], 120)
        res["seed_cpu_s"] = cpu_seconds(pid)
        res["seed_settled_s"] = time.monotonic() - t0

        # DPUServices, one POST each on one keep-alive connection.
        keys = []
        t1 = time.monotonic()
        for i in range(services):
            h, svc = dpuservice(i)
            st, body = mgmt.call("POST", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices", svc)
            assert st == 201, body
            keys.append(h)
        res["create_s"] = time.monotonic() - t1
        wait(lambda: ctl.call("GET", "/controllers")[1]["idle"], 300)
        res["services_settled_s"] = time.monotonic() - t1
        res["create_cpu_s"] = cpu_seconds(pid) - res["seed_cpu_s"]

        watcher = PodWatch(urls["dpu"], "nico/extension-service-id")
        watcher.start()
        time.sleep(0.5)
        tmp = tempfile.mkdtemp(prefix="sim-fleet-")
        reqs = os.path.join(tmp, "patches.tsv")
        with open(reqs, "w") as f:
            for i in range(attach):
                body = {"spec": {"cluster": {"nodeLabels": {f"nico/extsvc-{keys[i % services]}": "enabled"}}}}
                f.write(f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/"
                        f"dpu-device-{i:04d}\t{json.dumps(body, separators=(',', ':'))}\n")
        ctl.call("POST", "/controllers/stats/reset")
        node_path = "/api/v1/nodes/host-%04d-dpu-device-%04d" % (dpus - 1, dpus - 1)

        def probe(stop):
            # One GET of a Node every 5 ms on its own connection: what the product's reads see.
            return subprocess.Popen([LOAD, "--url", urls["dpu"], "--path", node_path, "--threads", "1",
                                     "--seconds", "600", "--interval-ms", "5", "--stop-file", stop],
                                    stdout=subprocess.PIPE, text=True)

        def probe_result(p, stop):
            open(stop, "w").close()
            return json.loads(p.communicate()[0].strip().splitlines()[-1])

        stop1, stop2 = os.path.join(tmp, "stop1"), os.path.join(tmp, "stop2")
        probe1 = probe(stop1)
        cpu0 = cpu_seconds(pid)
        t2 = time.monotonic()
        res["patch"] = load(["--url", urls["management"], "--requests-file", reqs, "--method", "PATCH",
                             "--content-type", "application/merge-patch+json", "--threads", "2"])
        res["patch_done_s"] = time.monotonic() - t2
        res["probe_patch"] = probe_result(probe1, stop1)
        probe2 = probe(stop2)
        ok = wait(lambda: watcher.count() >= attach, 600, 0.02)
        res["all_ready_s"] = time.monotonic() - t2
        res["all_ready"] = ok
        res["attach_cpu_s"] = cpu_seconds(pid) - cpu0
        res["probe_converge"] = probe_result(probe2, stop2)
        res["controllers"] = ctl.call("GET", "/controllers")[1]
        res["watch_events"] = watcher.events
        res["relists"] = watcher.relists
        res["mem_after_attach"] = mem_mib(pid)
        wait(lambda: ctl.call("GET", "/controllers")[1]["idle"], 60)
        # Idle: the pod watch stays open (an informer does); the other connections are closed,
        # since an idle keep-alive connection costs httplib's server a poll every ~11 ms.
        for c in (ctl, mgmt, dpu):
            c.conn.close()
        time.sleep(1)

        cpu1 = cpu_seconds(pid)
        time.sleep(idle_s)
        res["idle_s"] = idle_s
        res["idle_cpu_s"] = cpu_seconds(pid) - cpu1
        res["mem"] = mem_mib(pid)
        res["watches"] = ctl.call("GET", "/watches")[1]
        watcher.stop = True
        res["load_after"] = machine()[2]
        return res
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def fmt(v, d=1):
    return f"{v:,.{d}f}" if isinstance(v, float) else f"{v:,}"


def report(results, ncpu, model):
    lines = [BEGIN, "", "## dpfsim at fleet scale (`bench/sim_fleet.py`, issue 11)", "",
             f"Written by `bench/sim_fleet.py` on {time.strftime('%Y-%m-%d')}: {ncpu} CPUs ({model}), "
             "dpfsim and the load sharing them, RelWithDebInfo, plain HTTP, every dpfsim delay "
             f"{results[0]['delays_ms']} ms, default tick (20 ms). The machine's load average (1, 5, "
             "15 min) before and after each run is in the last row. The raw PATCH loop is the "
             "baseline for the product's overhead per call: the same requests, without the product.",
             "",
             "| measure | " + " | ".join(f"{r['dpus']:,} DPUs" for r in results) + " |",
             "|---|" + "---|" * len(results)]

    def row(name, f):
        lines.append(f"| {name} | " + " | ".join(f(r) for r in results) + " |")

    row("DPUServices / DPUDevices patched", lambda r: f"{r['services']:,} / {r['attach']:,}")
    row("seeding: ready line after (s)", lambda r: fmt(r["seed_ready_s"], 2))
    row("seeding + first controller pass: dpfsim CPU (s)", lambda r: fmt(r["seed_cpu_s"], 2))
    row("DPUService POSTs (one connection): s, per s",
        lambda r: f"{fmt(r['create_s'], 2)}, {fmt(r['services'] / r['create_s'], 0)}")
    row("raw PATCH loop (2 threads, keep-alive): requests/s", lambda r: fmt(r["patch"]["rps"]))
    row("raw PATCH loop: p50 / p99 / max (ms)",
        lambda r: f"{r['patch']['p50_us'] / 1000:.2f} / {r['patch']['p99_us'] / 1000:.2f} / "
                  f"{r['patch']['max_us'] / 1000:.1f}")
    row("raw PATCH loop: seconds, errors",
        lambda r: f"{fmt(r['patch']['seconds'], 2)}, {r['patch']['errors']}")
    row("**first PATCH → every placed DPU's pod Running+Ready, seen by the watch (s)**",
        lambda r: ("**" + fmt(r["all_ready_s"], 2) + "**") if r["all_ready"] else "not reached")
    row("dpfsim CPU during the attach (s)", lambda r: fmt(r["attach_cpu_s"], 2))
    row("dpfsim CPU in the idle minute afterwards (s)",
        lambda r: fmt(r["idle_cpu_s"], 2) + ("" if r["idle_s"] == 60 else f" (in {r['idle_s']} s)"))
    row("longest store-mutex hold of a controller step (ms)",
        lambda r: fmt(r["controllers"]["max_hold_us"] / 1000.0, 1))
    row("controller chunks ≥ 10 ms / all",
        lambda r: f"{r['controllers']['hold_histogram_ms']['>=10']:,} / {r['controllers']['chunks']:,}")
    row("GET Node during the raw PATCH loop: p50 / p99 / max (ms), requests",
        lambda r: f"{r['probe_patch']['p50_us'] / 1000:.2f} / {r['probe_patch']['p99_us'] / 1000:.2f} / "
                  f"{r['probe_patch']['max_us'] / 1000:.1f}, {r['probe_patch']['requests']:,}")
    row("GET Node while the controllers converge: p50 / p99 / max (ms), requests",
        lambda r: f"{r['probe_converge']['p50_us'] / 1000:.2f} / {r['probe_converge']['p99_us'] / 1000:.2f} / "
                  f"{r['probe_converge']['max_us'] / 1000:.1f}, {r['probe_converge']['requests']:,}")
    row("pod watch: events received, re-lists", lambda r: f"{r['watch_events']:,}, {r['relists']}")
    row("dpfsim RSS after the attach / VmHWM (MiB)",
        lambda r: f"{r['mem_after_attach']['VmRSS']:.0f} / {r['mem']['VmHWM']:.0f}")
    row("machine load average (1, 5, 15 min) before / after", lambda r: f"{r['load_before']} / {r['load_after']}")
    lines += ["", "Per controller during the attach (work items, busy ms):", ""]
    for r in results:
        per = ", ".join(f"{k} {v['items']:,} ({v['busy_us'] / 1000:.0f})"
                        for k, v in r["controllers"]["controllers"].items())
        lines.append(f"- {r['dpus']:,} DPUs: {per}.")
    lines += ["", END]
    return "\n".join(lines)


def write_docs(section):
    with open(DOC) as f:
        text = f.read()
    # the markers on lines of their own (the docs may mention them elsewhere)
    begin, end = "\n" + BEGIN + "\n", "\n" + END + "\n"
    if begin in text and end in text:
        a, b = text.index(begin) + 1, text.index(end) + len(end) - 1
        text = text[:a] + section + text[b:]
    else:
        marker = "## What dominates (notes)"
        i = text.index(marker) if marker in text else len(text)
        text = text[:i] + section + "\n\n" + text[i:]
    with open(DOC, "w") as f:
        f.write(text)


def main():
    for b in (DPFSIM, LOAD):
        if not os.access(b, os.X_OK):
            sys.exit(f"missing {b} (build the dpfsim and dpfsim_load targets)")
    sizes = [int(x) for x in os.environ.get("SIM_FLEET_DPUS", "2000,10000").split(",") if x]
    idle_s = int(os.environ.get("SIM_FLEET_IDLE_S", "60"))
    delays = int(os.environ.get("SIM_FLEET_DELAYS_MS", "50"))
    ncpu, model, _ = machine()
    results = []
    for n in sizes:
        services = int(os.environ.get("SIM_FLEET_SERVICES", max(1, n // 10)))
        attach = int(os.environ.get("SIM_FLEET_ATTACH", n // 2))
        print(f"== {n} DPUs, {services} DPUServices, {attach} DPUDevices patched", flush=True)
        r = run(n, services, attach, idle_s, delays)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k not in ("controllers", "watches")}, indent=1),
              flush=True)
        print("controllers:", json.dumps(r["controllers"]), flush=True)
    section = report(results, ncpu, model)
    print(section)
    if "--no-docs" not in sys.argv:
        write_docs(section)
        print(f"written to {DOC}")
    return 0 if all(r["all_ready"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
