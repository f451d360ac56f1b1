#!/usr/bin/python3
"""The main job, end to end against the embedded cluster simulator: create a
DPF Helm-chart service, attach it to two instances with different DPU targets,
show per-DPU status, update with a rolling revision, roll it back, detach,
delete the instance and the services, and show the metrics and the health check; the worker makes
every Kubernetes call, while its server holds the site's Lease (the DPUServices
carry the site label nico/site)."""
import json
import os
import shutil
import subprocess
import sys
import time

from extsvc_testkit.harness import PGBIN, PG_USER, Env, helm_data, lit, host_id, dpu_id


def banner(text):
    print(f"\n\033[1m=== {text}\033[0m", flush=True)


def psql(env, query):
    """Prints a query result the way an operator sees it in psql."""
    print(f"psql> {query.strip()}")
    r = subprocess.run([f"{PGBIN}/psql", "-X", "-h", env.pg.dir, "-p", str(env.pg.port), "-U", PG_USER,
                        "-d", "postgres", "-c", query], capture_output=True, text=True)
    print((r.stdout + r.stderr).rstrip(), flush=True)


def kubectl(env, *args):
    if not shutil.which("kubectl"):
        print("(kubectl not installed; skipping: kubectl " + " ".join(args) + ")")
        return
    cfg = os.path.join(env.workdir, "kubeconfig")
    print("$ kubectl " + " ".join(args))
    r = subprocess.run(["kubectl", "--kubeconfig", cfg] + list(args), capture_output=True, text=True)
    print((r.stdout + r.stderr).rstrip(), flush=True)


STATUS = ("SELECT service_name, lifecycle_state AS state, version, desired_revision AS desired, "
          "applied_revision AS applied, dpf_service_name, status_message FROM extsvc.services ORDER BY created_at")


def watch(env, sid, until, timeout=60):
    """Prints each lifecycle change until the service reaches `until`."""
    seen = None
    t0 = time.time()
    while time.time() - t0 < timeout:
        s = env.state(sid)
        if s[0] != seen:
            print(f"  +{time.time() - t0:5.2f}s  {s[0]:<9} applied revision {s[2] or '-'}  {s[4] or ''}",
                  flush=True)
            seen = s[0]
        if s[0] == until:
            return
        time.sleep(0.05)
    raise SystemExit(f"service did not reach {until} within {timeout}s")


HOST_A = host_id("a1")
HOST_B = host_id("b1")
INSTANCE_1 = "11111111-1111-1111-1111-111111111111"
INSTANCE_2 = "22222222-2222-2222-2222-222222222222"


def dpu(i):
    return dpu_id(i)


def per_dpu(env, iid):
    psql(env, f"SELECT service_name, dpu_device_name, placement_state AS placement, deployment_state AS state, "
              f"status_message FROM extsvc.instance_extension_service_status('{iid}')")


def summary_state(env, iid, sid):
    rows = env.pg.sql(f"SELECT aggregate_state, configs_synced FROM extsvc.instance_extension_services_summary('{iid}') "
                      f"WHERE service_id = '{sid}'")
    return (rows[0][0], rows[0][1]) if rows else ("(gone)", "t")


def watch_attachment(env, iid, sid, until, timeout=60):
    seen = None
    t0 = time.time()
    while time.time() - t0 < timeout:
        s = summary_state(env, iid, sid)
        if s != seen:
            print(f"  +{time.time() - t0:5.2f}s  instance {iid[:8]}: {s[0]:<11} configs_synced={s[1]}", flush=True)
            seen = s
        if s[0] == until and s[1] == "t":
            return
        time.sleep(0.05)
    raise SystemExit(f"attachment did not reach {until} within {timeout}s")


def watch_rollout(env, iid, sid, old_messages, timeout=60):
    """Prints per-instance state changes until every DPU runs a new revision."""
    seen = None
    t0 = time.time()
    while time.time() - t0 < timeout:
        rows = env.pg.sql(f"SELECT deployment_state, status_message FROM "
                          f"extsvc.instance_extension_service_status('{iid}') WHERE service_id = '{sid}'")
        states = tuple(sorted(r[0] for r in rows))
        if states != seen:
            print(f"  +{time.time() - t0:5.2f}s  instance {iid[:8]}: per-DPU {', '.join(states)}", flush=True)
            seen = states
        if rows and all(r[0] == "RUNNING" and r[1] not in old_messages for r in rows):
            return
        time.sleep(0.05)
    raise SystemExit("the rollout did not finish")


# scripts/demo.sh passes the time it started (DEMO_T0); the test command a
# file for the figure (DEMO_FIGURE): seconds from this script's start to its
# first status table, which its summary adds to the build times.
T_SCRIPT = time.time()
T_DEMO = float(os.environ.get("DEMO_T0") or T_SCRIPT)


def first_status_table():
    took = time.time() - T_DEMO
    print(f"(first status table {took:.0f} s after {'scripts/demo.sh' if 'DEMO_T0' in os.environ else 'the demo'} "
          f"started; load average {' '.join(open('/proc/loadavg').read().split()[:3])})", flush=True)
    if os.environ.get("DEMO_FIGURE"):
        with open(os.environ["DEMO_FIGURE"], "w") as f:
            f.write(f"{round(time.time() - T_SCRIPT)}\n")


def main():
    banner("starting dpfsim (TLS + bearer token) and PostgreSQL with the nico_extsvc worker")
    env = Env(dpus=4, workers=2, site_id="demo-site")
    env.write_kubeconfig()
    ok = False
    try:
        print(f"management API {env.sim.management}, DPU cluster {env.sim.dpu}")
        psql(env, "SELECT slot, pid, iterations FROM extsvc.worker_status()")

        banner("one writer per site: extsvc.site_id = 'demo-site', and the site's Lease in DPF's namespace")
        env.holder_identity()
        psql(env, "SELECT slot, lease_held, lease_holder, lease_since, paused_reason FROM extsvc.worker_status()")
        kubectl(env, "get", "leases")
        lease = env.site_lease()
        print("the Lease's spec:", json.dumps(lease["spec"]))
        psql(env, "SELECT matches, current_identity FROM extsvc.database_identity_status()")

        banner("0. NICo registers hosts, DPUs and instances")
        for i, host, primary in ((0, HOST_A, True), (1, HOST_A, False), (2, HOST_B, True), (3, HOST_B, False)):
            env.pg.sql(f"SELECT extsvc.register_dpu('{dpu(i)}', '{host}', 'dpu-device-{i:04d}', "
                       f"'host-{i:04d}-dpu-device-{i:04d}', {primary})")
        env.pg.sql(f"SELECT extsvc.upsert_instance('{INSTANCE_1}', 'tenant-a', '{HOST_A}', ARRAY['{dpu(1)}']::text[])")
        env.pg.sql(f"SELECT extsvc.upsert_instance('{INSTANCE_2}', 'tenant-a', '{HOST_B}', ARRAY['{dpu(3)}']::text[])")
        psql(env, "SELECT dpu_device_name, dpu_node_name, host_machine_id, is_primary FROM extsvc.dpus ORDER BY 1")

        banner("1. a tenant creates a service (the chart repository is on the operator's allow-list)")
        data = helm_data(values={"logLevel": "info"},
                         serviceDaemonSet={"labels": {"app": "demo-agent"},
                                           "resources": {"cpu": "100m", "memory": "64Mi"}})
        print("data =", json.dumps(data))
        sid = env.create("demo-agent", data, target="ALL")
        print(f"create_service returned {sid} in state CREATING; the worker takes it from here:")
        watch(env, sid, "READY")
        psql(env, STATUS)
        first_status_table()
        psql(env, f"SELECT jsonb_pretty(extsvc.render_dpuservice('{sid}') -> 'spec')")
        kubectl(env, "get", "dpuservices", "-L", "nico/extension-service-id,nico/site")

        banner("2. bad input is refused with SQLSTATE, the JSON path and a hint; nothing is written")
        psql(env, "SELECT extsvc.validate_dpf_helm_chart_data("
                  "'{\"repoURL\":\"https://charts.example.com/stable\",\"chartName\":\"demo\","
                  "\"chartVersion\":\"latest\",\"security\":{\"privileged\":false}}')")
        psql(env, "SELECT extsvc.update_service('%s', data => '{\"repoURL\":\"https://charts.example.com\","
                  "\"chartName\":\"demo\",\"chartVersion\":\"1.0.0\",\"security\":{\"privileged\":false},"
                  "\"values\":{\"serviceDaemonSet\":{\"nodeSelector\":{}}}}')" % sid)

        banner("3. attach: instance 1 with the service's dpu_target ALL (both DPUs of host A)")
        version = env.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
        entry = json.dumps([{"service_id": sid, "version": version}])
        env.pg.sql(f"SELECT extsvc.set_instance_extension_services('{INSTANCE_1}', {lit(entry)})")
        watch_attachment(env, INSTANCE_1, sid, "RUNNING")
        per_dpu(env, INSTANCE_1)
        psql(env, f"SELECT extsvc.instance_extension_services_ready('{INSTANCE_1}') AS instance_1_ready")

        banner("4. a second service with dpu_target PRIMARY on instance 2 (host B's primary DPU only)")
        sid2 = env.create("demo-probe", helm_data(version="0.4.0"), target="PRIMARY")
        watch(env, sid2, "READY")
        version2 = env.pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid2}'")
        env.pg.sql(f"SELECT extsvc.set_instance_extension_services('{INSTANCE_2}', "
                   f"{lit(json.dumps([{'service_id': sid2, 'version': version2}]))})")
        watch_attachment(env, INSTANCE_2, sid2, "RUNNING")
        per_dpu(env, INSTANCE_2)
        kubectl(env, "get", "dpudevices", "-o",
                "custom-columns=DEVICE:.metadata.name,NODE_LABELS:.spec.cluster.nodeLabels")
        kubectl(env, "--server", env.sim.dpu, "get", "pods", "-A", "-o", "wide")

        banner("5. update the attached service: a new revision rolls the pods (PENDING, then RUNNING again)")
        before = {r[0] for r in env.pg.sql(f"SELECT status_message FROM "
                                           f"extsvc.instance_extension_service_status('{INSTANCE_1}')")}
        env.update(sid, helm_data(version="1.3.0", values={"logLevel": "debug"},
                                  serviceDaemonSet={"labels": {"app": "demo-agent"}}))
        watch(env, sid, "READY")
        watch_rollout(env, INSTANCE_1, sid, before)
        reqs = env.sim.requests(100)
        reqs = reqs["requests"] if isinstance(reqs, dict) else reqs
        patch = [r for r in reqs if r.get("method") == "PATCH" and "/dpuservices/" in r.get("path", "")][-1]
        print("DPUService PATCH body seen by the API server:", patch.get("body"))
        per_dpu(env, INSTANCE_1)

        banner("6. roll back: extsvc.rollback_service makes a new revision equal to revision 1; the pods roll again")
        before = {r[0] for r in env.pg.sql(f"SELECT status_message FROM "
                                           f"extsvc.instance_extension_service_status('{INSTANCE_1}')")}
        psql(env, f"SELECT lifecycle_state, desired_revision, applied_revision "
                  f"FROM extsvc.rollback_service('{sid}', 1)")
        watch(env, sid, "READY")
        watch_rollout(env, INSTANCE_1, sid, before)
        psql(env, f"SELECT revision, data::jsonb->>'chartVersion' AS chart_version, is_desired, is_applied, rollback_of "
                  f"FROM extsvc.service_revisions('{sid}')")

        banner("7. detach the service from instance 2: TERMINATING, then TERMINATED, then the tombstone goes")
        env.pg.sql(f"SELECT extsvc.set_instance_extension_services('{INSTANCE_2}', '[]')")
        watch_attachment(env, INSTANCE_2, sid2, "(gone)")
        psql(env, f"SELECT extsvc.instance_extension_services_ready('{INSTANCE_2}') AS instance_2_ready")

        banner("8. delete instance 1: every attachment goes REMOVING until its DPUs report TERMINATED")
        psql(env, f"SELECT * FROM extsvc.delete_service('{sid}')")
        env.pg.sql(f"SELECT extsvc.delete_instance('{INSTANCE_1}')")
        per_dpu(env, INSTANCE_1)
        t0 = time.time()
        while env.pg.one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{INSTANCE_1}'") != "0":
            if time.time() - t0 > 60:
                raise SystemExit("instance 1 was not deleted")
            time.sleep(0.1)
        print(f"  instance 1 gone after {time.time() - t0:.2f}s")

        banner("9. delete the services: DELETING until DPF removed its finalizer and the API answers 404")
        env.delete(sid)
        env.delete(sid2)
        watch(env, sid, "DELETED")
        watch(env, sid2, "DELETED")
        kubectl(env, "get", "dpuservices")
        psql(env, STATUS)
        psql(env, f"SELECT from_state, to_state, actor, reason, to_char(at, 'HH24:MI:SS.MS') AS at "
                  f"FROM extsvc.service_history WHERE service_id = '{sid}' ORDER BY id")
        psql(env, "SELECT * FROM extsvc.worker_status()")
        print("  the watcher's informers (worker 0 observes both clusters through LIST+WATCH caches):")
        psql(env, "SELECT resource, cluster, synced, current, objects, lists, watches, events, bookmarks "
                  "FROM extsvc.watch_status()")
        counts = env.sim.counts()
        print("API calls seen by the simulator:", json.dumps(counts))

        banner("10. metrics: extsvc.metrics_prometheus() (docs/metrics.md), a few lines of it")
        text = env.pg.one("SELECT extsvc.metrics_prometheus()")
        wanted = ("# TYPE extsvc_kube_requests_total", "extsvc_kube_requests_total{",
                  "extsvc_kube_request_duration_seconds_count", "extsvc_services{",
                  "extsvc_queue_oldest_due_age_seconds", "extsvc_worker_up", "extsvc_last_resync_age_seconds",
                  "extsvc_lease_held", "extsvc_writes_paused", "extsvc_placement_keys_registered")
        for line in text.splitlines():
            if line.startswith(wanted) and (" 0" != line[-2:] or line.startswith(("extsvc_worker_up",
                                                                                   "extsvc_writes_paused"))):
                print("  " + line)
        ours = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("extsvc_kube_requests_total{"))
        print(f"requests counted by the workers: {ours:.0f} (the simulator's total, {counts.get('total')}, "
              f"also counts the demo's own kubectl and harness calls)")

        banner("11. one health check: extsvc.health_check() (docs/runbook.md has an entry per row)")
        psql(env, "SELECT * FROM extsvc.health_check()")
        bad = env.pg.sql("SELECT \"check\", status, detail FROM extsvc.health_check() WHERE status = 'error'")
        if bad:
            raise RuntimeError(f"health_check reports errors on the demo site: {bad}")
        ok = True
    finally:
        env.close(keep=not ok)
    banner("demo finished" if ok else "demo FAILED")
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
