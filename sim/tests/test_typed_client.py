#!/usr/bin/python3
"""Every kind dpfsim serves, read as a real client reads it (issue 23, part 6):
the official Kubernetes Python client (Debian python3-kubernetes) lists, gets
and watches each one, typed where the client has a type (Node, Pod, Namespace,
Event, DaemonSet, ControllerRevision) and as custom objects otherwise
(DPUService, DPUDevice, DPU, Application). A typed client deserializes every
field the API marks required and refuses an object without one (a Node
without status.nodeInfo.bootID, a container status without imageID, ...).

    /usr/bin/python3 sim/tests/test_typed_client.py path/to/dpfsim
Prints one line per check and "N passed, N failed"."""
import json
import subprocess
import sys
import time
import urllib.request

import kubernetes
from kubernetes import client, watch

NS = "dpf-operator-system"
passed = failed = 0


def check(name, fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f"ok   {name}")
    except Exception as e:  # a failed check is reported, the others still run
        failed += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def ctl(base, method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def api_client(url):
    cfg = client.Configuration()
    cfg.host = url
    return client.ApiClient(cfg)


def main():
    sim = subprocess.Popen([sys.argv[1], "--listen", "127.0.0.1:0", "--dpu-listen", "127.0.0.1:0",
                            "--control-listen", "127.0.0.1:0", "--dpus", "3", "--log-level", "warn"],
                           stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(sim.stdout.readline())
        run(ready)
    finally:
        sim.terminate()
        sim.wait(10)
    print(f"{passed} passed, {failed} failed")
    return failed == 0


def run(ready):
    c = ready["control"]
    ctl(c, "POST", "/delays", {"all_ms": 0})
    mgmt, dpu = api_client(ready["management"]), api_client(ready["dpu"])
    co = client.CustomObjectsApi(mgmt)
    # something of every kind: a DPUService placed on two DPUs (Application, DaemonSet,
    # ControllerRevision, pods), a crash-looping pod, and an unschedulable pod (an Event)
    for i in (0, 1):
        co.patch_namespaced_custom_object(
            "provisioning.dpu.nvidia.com", "v1alpha1", NS, "dpudevices", f"dpu-device-000{i}",
            {"spec": {"cluster": {"nodeLabels": {"tenant": "t1"}}}})
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "tenant", "operator": "In", "values": ["t1"]}]}]}
    # a chart that requests an extended resource no Node has: its pod stays Pending,
    # unbound, with the scheduler's FailedScheduling Event. Defined before the DPUService
    # that uses it: with no delays dpfsim may render that service's pods at once, and a
    # chart defined after them left its pod schedulable and no Event (CI of bf3cf1e)
    ctl(c, "POST", "/charts", {"chart": "needs-sf", "requests": {"nvidia.com/bf_sf": "1"}})
    for name, chart in (("svc-a", "demo"), ("svc-p", "needs-sf")):
        co.create_namespaced_custom_object("svc.dpu.nvidia.com", "v1alpha1", NS, "dpuservices", {
            "apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"helmChart": {"source": {"repoURL": "https://charts.example.com", "chart": chart,
                                              "version": "1.0.0"}},
                     "serviceDaemonSet": {"nodeSelector": sel},
                     "security": {"privileged": False}}})
    ctl(c, "POST", "/pod-faults", {"node": "host-0001-dpu-device-0001", "reason": "CrashLoopBackOff"})
    core_d, apps_d = client.CoreV1Api(dpu), client.AppsV1Api(dpu)
    deadline = time.time() + 20
    while time.time() < deadline:
        pods = core_d.list_namespaced_pod(NS).items
        if len(pods) >= 2 and any(p.status.container_statuses for p in pods) and \
                core_d.list_namespaced_event(NS).items:
            break
        time.sleep(0.1)

    typed = [
        ("management namespaces", lambda: client.CoreV1Api(mgmt).list_namespace,
         lambda n: client.CoreV1Api(mgmt).read_namespace(n), None),
        ("nodes", lambda: core_d.list_node, lambda n: core_d.read_node(n), None),
        ("dpu namespaces", lambda: core_d.list_namespace, lambda n: core_d.read_namespace(n), None),
        ("pods", lambda: core_d.list_pod_for_all_namespaces,
         lambda n: core_d.read_namespaced_pod(n, NS), NS),
        ("events", lambda: core_d.list_event_for_all_namespaces,
         lambda n: core_d.read_namespaced_event(n, NS), NS),
        ("daemonsets", lambda: apps_d.list_daemon_set_for_all_namespaces,
         lambda n: apps_d.read_namespaced_daemon_set(n, NS), NS),
        ("controllerrevisions", lambda: apps_d.list_controller_revision_for_all_namespaces,
         lambda n: apps_d.read_namespaced_controller_revision(n, NS), NS),
    ]
    for name, lister, getter, _ in typed:
        def typed_check(lister=lister, getter=getter, name=name):
            items = lister()().items
            assert items, f"no {name} to read"
            for it in items:  # deserialized with every required field present
                got = getter(it.metadata.name)
                assert got.metadata.uid == it.metadata.uid
            # a watch from the list's start: ADDED for each, typed
            w = watch.Watch()
            seen = 0
            for ev in w.stream(lister(), timeout_seconds=1, resource_version="0"):
                assert ev["type"] in ("ADDED", "MODIFIED", "BOOKMARK"), ev["type"]
                assert type(ev["object"]).__name__.startswith("V1") or type(ev["object"]).__name__.startswith("Core"), type(ev["object"])
                seen += 1
                if seen >= len(items):
                    w.stop()
            assert seen >= len(items), (seen, len(items))
        check(f"typed list/get/watch {name}", typed_check)

    # the fields a kubelet, a controller or the API server fills in, as typed attributes
    def node_fields():
        n = core_d.list_node().items[0]
        info = n.status.node_info
        for f in ("boot_id", "machine_id", "system_uuid", "kernel_version", "os_image",
                  "container_runtime_version", "kubelet_version", "kube_proxy_version",
                  "operating_system", "architecture"):
            assert getattr(info, f), f
        assert {c.type for c in n.status.conditions} >= {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
        assert all(c.last_heartbeat_time for c in n.status.conditions)
        assert n.status.addresses and n.status.capacity["cpu"] and n.status.allocatable["pods"]
        assert n.status.daemon_endpoints.kubelet_endpoint.port == 10250
    check("Node: nodeInfo, conditions with heartbeats, addresses, capacity", node_fields)

    def pod_fields():
        pods = [p for p in core_d.list_namespaced_pod(NS).items if p.status.phase == "Running"]
        assert pods, "no running pod"
        for p in pods:
            assert p.status.host_ip and p.status.pod_ip and p.status.start_time, p.status
            assert {c.type for c in p.status.conditions} >= {"PodScheduled", "Initialized", "Ready", "ContainersReady"}
            for cs in p.status.container_statuses:
                assert cs.image and cs.image_id and cs.container_id, cs
            assert p.metadata.owner_references[0].kind == "DaemonSet"
    check("Pod: conditions, containerStatuses with imageID/containerID, hostIP, podIP, startTime", pod_fields)

    def ds_fields():
        ds = [d for d in apps_d.list_namespaced_daemon_set(NS).items if d.status]
        assert ds
        for d in ds:
            s = d.status
            for f in ("current_number_scheduled", "desired_number_scheduled", "number_misscheduled", "number_ready"):
                assert getattr(s, f) is not None, f
            assert s.observed_generation == d.metadata.generation
    check("DaemonSet: status counters", ds_fields)

    def event_fields():
        evs = core_d.list_namespaced_event(NS).items
        assert evs, "no event"
        for ev in evs:
            assert ev.source.component and ev.reporting_component, ev
            assert ev.first_timestamp and ev.last_timestamp and ev.count
    check("Event: source, reportingComponent, timestamps", event_fields)

    for plural, group, namespaced in (("dpuservices", "svc.dpu.nvidia.com", True),
                                      ("dpudevices", "provisioning.dpu.nvidia.com", True),
                                      ("dpus", "provisioning.dpu.nvidia.com", True),
                                      ("applications", "argoproj.io", True)):
        def custom(plural=plural, group=group):
            items = co.list_namespaced_custom_object(group, "v1alpha1", NS, plural)["items"]
            assert items, f"no {plural}"
            for it in items:
                got = co.get_namespaced_custom_object(group, "v1alpha1", NS, plural, it["metadata"]["name"])
                assert got["metadata"]["uid"] == it["metadata"]["uid"]
            w = watch.Watch()
            seen = 0
            for ev in w.stream(co.list_namespaced_custom_object, group, "v1alpha1", NS, plural,
                               timeout_seconds=1, resource_version="0"):
                assert ev["object"]["metadata"]["name"]
                seen += 1
                if seen >= len(items):
                    w.stop()
            assert seen >= len(items), (seen, len(items))
        check(f"custom list/get/watch {plural}", custom)


if __name__ == "__main__":
    print(f"# dpfsim through the official Kubernetes Python client {kubernetes.__version__}")
    sys.exit(0 if main() else 1)
