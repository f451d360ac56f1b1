#!/usr/bin/python3
"""End-to-end: DPF's three-hop label path and Nodes that stop reporting
(issue 23), through the worker (watch caches on) and dpfsim's realistic
defaults. DPUDevice -> DPU object (DPUSet controller) -> Node (DPU
controller): a detach while the key is on the DPU object but not yet on the
Node never shows TERMINATED, nor loses the tombstone, while the key or a pod
remains; a RUNNING service on a Node that stops reporting becomes UNKNOWN
within the Node's grace period plus one observation, never TERMINATED."""
import sys
import time

from extsvc_testkit.harness import Env, host_id, run_tests, wait_until, device, node

ENV = None
NS = "dpf-operator-system"
HOST = host_id("a1")


def e():
    return ENV


def label_key(sid):
    return e().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")


def row(iid, sid):
    """(deployment_state, status_message) of the service's row on DPU 0, or None once gone."""
    r = e().pg.sql(f"SELECT deployment_state, status_message FROM extsvc.instance_extension_service_status('{iid}') "
                   f"WHERE service_id = '{sid}' AND dpu_device_name = '{device(0)}'")
    return (r[0][0], r[0][1]) if r else None


def held(key, sid):
    """What the clusters hold on DPU 0: the key on DPUDevice, DPU object, Node; the pods."""
    _, dev = e().sim.kube("GET", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(0)}")
    _, dpu = e().sim.kube("GET", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpus/{node(0)}")
    _, nd = e().sim.kube("GET", f"/api/v1/nodes/{node(0)}", base=e().sim.dpu)
    _, pods = e().sim.kube("GET", f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName%3D{node(0)}"
                           f"&labelSelector=nico%2Fextension-service-id%3D{sid}", base=e().sim.dpu)
    return {"device": key in ((dev.get("spec", {}).get("cluster") or {}).get("nodeLabels") or {}),
            "dpu": key in ((dpu.get("spec", {}).get("cluster") or {}).get("nodeLabels") or {}),
            "node": key in (nd["metadata"].get("labels") or {}),
            "pods": len(pods["items"])}


def test_a_detach_in_flight_keeps_its_tombstone_until_the_key_and_the_pod_are_gone():
    sid = e().ready_service("in-flight")
    key = label_key(sid)
    iid = e().new_instance(HOST, wait=False)  # the previous test's instance is deleted, not waited for
    # hop 1 (DPUDevice -> DPU) and hop 2 (DPU -> Node) take 1.5 s each
    e().sim.ctl("POST", "/delays", {"label_propagation_ms": 3000})
    e().attach(iid, sid)
    wait_until(lambda: held(key, sid)["dpu"], timeout=20, what="the key on the DPU object")
    assert not held(key, sid)["node"]
    # hold hop 1 (a ClusterMetadataConflict on another DPUDevice stops the DPUSet) so the DPU
    # object keeps the key after the detach for as long as the test looks
    set_conflict("b")
    try:
        detach_while_hop_1_is_held(iid, sid, key)
    finally:
        set_conflict(None)  # a failure here must not leave the next test a stopped DPUSet


def set_conflict(zone):
    """DPUDevice 1's zone label: "b" conflicts with the DPUSet's zone "a", None removes it."""
    e().sim.kube("PATCH", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(1)}",
                 {"spec": {"cluster": {"nodeLabels": {"zone": zone}}}}, "application/merge-patch+json")


def detach_while_hop_1_is_held(iid, sid, key):
    """The detach of test_a, run while DPUDevice 1's conflict stops the DPUSet."""
    e().sim.ctl("POST", "/dpuset", {"nodeLabels": {"zone": "a"}})
    e().attach(iid)  # detach
    wait_until(lambda: not held(key, sid)["device"], timeout=20, what="the DPUDevice label removed")
    seen = []

    def watch(until):
        def check():
            r = row(iid, sid)
            h = held(key, sid)
            seen.append((r, h))
            assert r is not None, f"tombstone gone while {h} remains; seen {seen[-5:]}"
            assert r[0] != "TERMINATED", f"TERMINATED while {h}: {r[1]}"
            return until(r, h)
        return check
    # the stale key reaches the Node, a pod starts there: still TERMINATING, tombstone kept
    wait_until(watch(lambda r, h: h["node"] and h["pods"] > 0 and r[0] == "TERMINATING"),
               timeout=30, interval=0.1, what="the stale key and a pod on the Node, row TERMINATING")
    # after the Node hop DPF walks the DPU object back to Ready (as real DPF does), and the row
    # names the label on the Node once the worker has observed it there; under CPU load that walk
    # can outlast one look, so wait for it (bounded), with the same checks on every look
    wait_until(watch(lambda r, h: r[0] == "TERMINATING" and "label still on the Node" in (r[1] or "")),
               timeout=30, interval=0.1, what="the row TERMINATING, its message naming the label on the Node")
    # the conflict resolved: the key leaves hop by hop, the pod goes, then the tombstone
    set_conflict(None)

    def gone():
        r = row(iid, sid)
        h = held(key, sid)
        if r is None:
            assert not any((h["device"], h["dpu"], h["node"], h["pods"])), f"tombstone gone while {h} remains"
            return True
        return False
    wait_until(gone, timeout=40, interval=0.1, what="tombstone gone once everything is")
    states = {s[0][0] for s in seen if s[0]}
    assert "TERMINATING" in states, states


def test_running_on_a_node_that_stops_reporting_turns_unknown_and_a_detach_waits():
    sid = e().ready_service("silent-node")
    iid = e().new_instance(HOST, wait=False)  # the previous test's instance is deleted, not waited for
    grace_s = 2.0
    e().sim.ctl("POST", "/delays", {"node_grace_ms": int(grace_s * 1000)})
    e().attach(iid, sid)
    wait_until(lambda: (row(iid, sid) or ("",))[0] == "RUNNING", timeout=30, what="RUNNING")
    t0 = time.time()
    e().sim.ctl("POST", f"/nodes/{node(0)}/not-ready", {})
    wait_until(lambda: row(iid, sid)[0] == "UNKNOWN", timeout=20, interval=0.05, what="UNKNOWN")
    took = time.time() - t0
    state, msg = row(iid, sid)
    assert "Ready=Unknown" in msg and "Kubelet stopped posting node status." in msg, msg
    # the grace period plus one observation (an event wakes the row), far below the staleness bound
    assert grace_s <= took < grace_s + 5, took
    # detach while the Node is silent: the pod's deletion hangs, the row never reads TERMINATED
    e().attach(iid)
    t1 = time.time()
    while time.time() - t1 < 3:
        r = row(iid, sid)
        assert r is not None and r[0] != "TERMINATED", r
        time.sleep(0.1)
    e().sim.ctl("POST", f"/nodes/{node(0)}/ready", {})
    wait_until(lambda: row(iid, sid) is None, timeout=30, what="tombstone gone once the Node is back")
    print(f"    UNKNOWN {took:.2f} s after the Node stopped reporting (grace {grace_s} s)")


def main():
    global ENV
    ENV = Env(dpus=2, workers=2)
    ok = False
    try:
        ENV.register_dpu(0, HOST, True)
        ok = run_tests([
            test_a_detach_in_flight_keeps_its_tombstone_until_the_key_and_the_pod_are_gone,
            test_running_on_a_node_that_stops_reporting_turns_unknown_and_a_detach_waits,
        ], "# e2e: DPF's label path and Nodes that stop reporting")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
