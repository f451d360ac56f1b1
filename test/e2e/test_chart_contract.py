#!/usr/bin/env python3
"""End-to-end: charts that break DPF's chart contract (issue 23, part 2),
through the worker (watch caches on) and dpfsim. A chart that drops
serviceDaemonSet.labels/annotations never shows RUNNING but names the
contract, and a detach is never TERMINATED (nor loses its tombstone) while a
pod of the release remains on the Node; a chart that ignores nodeSelector
runs pods on a DPU without an attachment: extsvc.stray_workloads, the gauge
extsvc_stray_pods and a history entry show them; a key of ours on a Node that
neither the DPUDevice nor the DPU object carries is removed from the Node,
while a key outside this site's registry is left alone."""
import json
import sys
import time
import uuid

from extsvc_testkit.harness import Env, helm_data, lit, run_tests, wait_until, device, node, dpu_id, host_id

ENV = None
NS = "dpf-operator-system"
HOST = host_id("c1")
HOST1 = host_id("c2")


def e():
    return ENV


def chart(name, **props):
    props["chart"] = name
    e().sim.ctl("POST", "/charts", props)


def ready_service(name, chart_name):
    sid = e().create(name, helm_data(values={"v": 1}, chartName=chart_name), target="PRIMARY")
    e().wait_state(sid, "READY")
    return sid


def version_of(sid):
    return e().pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")


def release_of(sid):
    return e().pg.one(f"SELECT dpf_service_name FROM extsvc.services WHERE service_id = '{sid}'")


def new_instance():
    # a host holds one live instance (issue 29): the previous test's instance on HOST goes first
    e().pg.sql("SELECT extsvc.delete_instance(instance_id) FROM extsvc.instances "
               f"WHERE host_machine_id = '{HOST}' AND delete_requested_at IS NULL")
    iid = str(uuid.uuid4())
    e().pg.sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{HOST}', ARRAY[]::text[])")
    return iid


def attach(iid, *sids):
    services = json.dumps([{"service_id": s, "version": version_of(s)} for s in sids])
    e().pg.sql(f"SELECT extsvc.set_instance_extension_services('{iid}', {lit(services)})")


def row(iid, sid):
    """(deployment_state, status_message) of the service's row on DPU 0, or None once gone."""
    r = e().pg.sql(f"SELECT deployment_state, status_message FROM extsvc.instance_extension_service_status('{iid}') "
                   f"WHERE service_id = '{sid}' AND dpu_device_name = '{device(0)}'")
    return (r[0][0], r[0][1]) if r else None


def release_pods(sid, i):
    """The test's own view: pods on Node i controlled by a DaemonSet whose Argo tracking-id names
    the service's Application, in any namespace, labelled or not."""
    release = release_of(sid)
    _, dss = e().sim.kube("GET", "/apis/apps/v1/daemonsets", base=e().sim.dpu)
    _, pods = e().sim.kube("GET", "/api/v1/pods", base=e().sim.dpu)
    uids = {d["metadata"]["uid"] for d in dss["items"]
            if f"-{release}:" in (d["metadata"].get("annotations") or {}).get("argocd.argoproj.io/tracking-id", "")}
    out = []
    for p in pods["items"]:
        if not any(ref.get("uid") in uids for ref in p["metadata"].get("ownerReferences") or []):
            continue
        on = p["spec"].get("nodeName") or \
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        if on == node(i):
            out.append(p)
    return out


def node_labels(i):
    _, nd = e().sim.kube("GET", f"/api/v1/nodes/{node(i)}", base=e().sim.dpu)
    return nd["metadata"].get("labels") or {}


def stray_rows():
    return e().pg.sql("SELECT service_id::text, dpu_node_name, pod, reason FROM extsvc.stray_workloads ORDER BY pod")


def metric(name, **labels):
    return e().pg.metric(name, **labels) or 0.0


def test_a_chart_that_drops_the_labels_names_the_contract_and_a_detach_waits_for_its_pods():
    chart("nolabels", ignores_labels=True, ignores_annotations=True)
    sid = ready_service("no-labels", "nolabels")
    iid = new_instance()
    attach(iid, sid)
    wait_until(lambda: ((row(iid, sid) or ("", ""))[1] or "").startswith("chart does not propagate"),
               timeout=30, what="the contract named in the row's message")
    state, msg = row(iid, sid)
    assert state == "PENDING", (state, msg)
    assert "chart does not propagate serviceDaemonSet.labels/annotations: revision cannot be proven" in msg, msg
    pods = release_pods(sid, 0)
    assert len(pods) == 1, pods
    assert "nico/extension-service-id" not in (pods[0]["metadata"].get("labels") or {}), pods[0]["metadata"]
    # never RUNNING: nothing on the pod proves a revision
    time.sleep(1)
    assert row(iid, sid)[0] == "PENDING", row(iid, sid)
    # detach while the pod takes 4 s to terminate
    e().sim.ctl("POST", "/delays", {"pod_termination_ms": 4000})
    attach(iid)
    seen = []

    def gone():
        before = len(release_pods(sid, 0))
        r = row(iid, sid)
        after = len(release_pods(sid, 0))
        seen.append((r, before, after))
        if r is None or r[0] == "TERMINATED":
            # read after the row: a pod still there was there when the worker concluded
            assert after == 0, f"{r} while a pod of the release was on the Node; {seen[-5:]}"
        return r is None
    wait_until(gone, timeout=40, interval=0.1, what="tombstone gone once the pod is")
    waited = [s for s in seen if s[0] and s[0][0] == "TERMINATING" and s[1] > 0]
    assert waited and "found through Argo's tracking" in waited[-1][0][1], seen[-5:]
    e().sim.ctl("POST", "/delays", {"pod_termination_ms": 0})


def test_a_chart_that_ignores_node_selector_shows_stray_pods():
    chart("everywhere", ignores_node_selector=True)
    # the DaemonSet runs on every Node as soon as Argo renders it: stray everywhere until attached
    sid = ready_service("everywhere", "everywhere")
    iid = new_instance()
    try:
        attach(iid, sid)
        # DPU 1 (registered, nothing attached) runs the service's pod too
        wait_until(lambda: any(r[1] == node(1) for r in stray_rows()), timeout=30,
                   what="a stray pod on DPU 1 in extsvc.stray_workloads")
        # DPU 0 is attached: its pod is no stray (once its pass after the attach ran)
        wait_until(lambda: not any(r[1] == node(0) for r in stray_rows()), timeout=30,
                   what="no stray pod on the attached DPU 0")
        rows = [r for r in stray_rows() if r[1] == node(1)]
        assert len(rows) == 1 and rows[0][0] == sid and rows[0][3] == "no_attachment", rows
        assert rows[0][2] == NS + "/" + release_pods(sid, 1)[0]["metadata"]["name"], rows
        assert metric("extsvc_stray_pods", reason="no_attachment") == 1
        hist = e().pg.sql(f"SELECT message FROM extsvc.service_history WHERE service_id = '{sid}' "
                          "AND reason = 'stray_workload'")
        assert [h for h in hist if node(1) in h[0] and rows[0][2] in h[0]], hist
        # a detach while the chart still runs its pod everywhere: never TERMINATED, the pod holds it
        attach(iid)
        t0 = time.time()
        while time.time() - t0 < 3:
            r = row(iid, sid)
            assert r is not None and r[0] != "TERMINATED", r
            time.sleep(0.2)
        assert row(iid, sid)[0] == "TERMINATING", row(iid, sid)
    finally:
        # the operator's remedy: a chart that honours nodeSelector (a new revision re-renders it);
        # the pods leave, the detach ends, the service goes, and so do the rows
        attach(iid)
        chart("everywhere")
        e().update(sid, helm_data(values={"v": 2}, chartName="everywhere"))
        e().wait_state(sid, "READY", timeout=30)
        wait_until(lambda: row(iid, sid) is None, timeout=40, what="detached from DPU 0")
        e().pg.sql(f"SELECT extsvc.delete_service('{sid}')")
    wait_until(lambda: not stray_rows(), timeout=40, what="no stray pod once the service is gone")
    assert metric("extsvc_stray_pods", reason="no_attachment") == 0


def test_a_key_of_ours_on_a_node_alone_is_removed_and_a_foreign_one_is_kept():
    e().sim.ctl("DELETE", "/charts")
    sid = ready_service("node-key", "demo-agent")
    key = e().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")
    iid = new_instance()
    attach(iid, sid)  # the key is this site's now (its registry)
    wait_until(lambda: (row(iid, sid) or ("",))[0] == "RUNNING", timeout=30, what="RUNNING on DPU 0")
    foreign = "nico/extsvc-" + "z" * 20
    # someone labels DPU 1's Node by hand: neither its DPUDevice nor its DPU object carries the key
    e().sim.kube("PATCH", f"/api/v1/nodes/{node(1)}", {"metadata": {"labels": {key: "enabled", foreign: "enabled"}}},
                 "application/merge-patch+json", base=e().sim.dpu)
    wait_until(lambda: key not in node_labels(1), timeout=30, what="our key removed from DPU 1's Node")
    assert node_labels(1).get(foreign) == "enabled", node_labels(1)
    # DPU 0 keeps its key on every hop: the worker only removes what no hop above carries
    assert node_labels(0).get(key) == "enabled", node_labels(0)
    time.sleep(1)
    assert row(iid, sid)[0] == "RUNNING", row(iid, sid)
    e().sim.kube("PATCH", f"/api/v1/nodes/{node(1)}", {"metadata": {"labels": {foreign: None}}},
                 "application/merge-patch+json", base=e().sim.dpu)
    wait_until(lambda: not any(r[1] == node(1) for r in stray_rows()), timeout=30,
               what="no stray pod left on DPU 1")


def main():
    global ENV
    ENV = Env(dpus=2, workers=2)
    ok = False
    try:
        ENV.pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(0)}', '{HOST}', '{device(0)}', '{node(0)}', true)")
        ENV.pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(1)}', '{HOST1}', '{device(1)}', '{node(1)}', true)")
        ok = run_tests([
            test_a_chart_that_drops_the_labels_names_the_contract_and_a_detach_waits_for_its_pods,
            test_a_chart_that_ignores_node_selector_shows_stray_pods,
            test_a_key_of_ours_on_a_node_alone_is_removed_and_a_foreign_one_is_kept,
        ], "# e2e: charts that break DPF's contract, stray workloads")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
