#!/usr/bin/python3
"""End-to-end: attach, detach and per-DPU status (issue 5). Placement labels
on DPUDevices, propagation to DPU-cluster Nodes, DaemonSet pods, and the
status that gates instance readiness, all through the worker and dpfsim."""
import json
import sys
import time
import uuid

from extsvc_testkit.harness import Env, helm_data, lit, run_tests, wait_until, device, node, dpu_id, host_id

ENV = None
NS = "dpf-operator-system"
HOST_A = host_id("a1")
HOST_B = host_id("b1")
HOST_C = host_id("c1")


def e():
    return ENV


def setup_fleet(env):
    # host A: DPUs 0 (primary) and 1; host B: 2 (primary) and 3; host C: 4 (primary)
    for i, host, primary in ((0, HOST_A, True), (1, HOST_A, False), (2, HOST_B, True),
                             (3, HOST_B, False), (4, HOST_C, True)):
        env.register_dpu(i, host, primary)


def label_key(sid):
    return e().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")


def status(iid):
    return {(r[0], r[1]): (r[2], r[3]) for r in e().pg.sql(
        f"SELECT service_id, dpu_device_name, placement_state, deployment_state "
        f"FROM extsvc.instance_extension_service_status('{iid}')")}


def ready(iid):
    return e().pg.one(f"SELECT extsvc.instance_extension_services_ready('{iid}')") == "t"


def wait_summary(iid, sid, state, removed=False, timeout=40):
    def check():
        s = e().summary_rows(iid).get(sid)
        return s if s and s[0] == state and s[1] == ("t" if removed else "f") and s[2] == "t" else False
    try:
        return wait_until(check, timeout, interval=0.1, what=f"{sid} {state}")
    except AssertionError:
        print("status:", status(iid))
        print(e().pg.sql("SELECT dpu_device_name, desired_labels, attempts, last_error, observation FROM extsvc.dpu_placement"))
        raise


def test_attach_labels_only_the_target_dpu_and_reaches_running():
    sid = e().ready_service("attach-active", target="ALL_ACTIVE")
    iid = e().new_instance(HOST_A, network=[1])
    assert not ready(iid) or True
    e().attach(iid, sid)
    key = label_key(sid)
    wait_summary(iid, sid, "RUNNING")
    assert ready(iid)
    assert e().sim.device_labels(1).get(key) == "enabled"
    assert key not in e().sim.device_labels(0)
    assert e().sim.node_labels(1).get(key) == "enabled" and key not in e().sim.node_labels(0)
    assert len(e().sim.pods_on(1, sid)) == 1 and not e().sim.pods_on(0, sid)
    assert all(key not in e().sim.device_labels(i) for i in (2, 3, 4))


def test_primary_and_all_targets():
    s_primary = e().ready_service("target-primary", target="PRIMARY")
    s_all = e().ready_service("target-all", target="ALL")
    iid = e().new_instance(HOST_B, network=[3])
    e().attach(iid, s_primary, s_all)
    wait_summary(iid, s_primary, "RUNNING")
    wait_summary(iid, s_all, "RUNNING")
    kp, ka = label_key(s_primary), label_key(s_all)
    assert e().sim.device_labels(2).get(kp) == "enabled" and kp not in e().sim.device_labels(3)
    assert e().sim.device_labels(2).get(ka) == "enabled" and e().sim.device_labels(3).get(ka) == "enabled"
    st = status(iid)
    assert st[(s_primary, device(2))] == ("ACTIVE", "RUNNING") and (s_primary, device(3)) not in st
    # detach both, converge, tombstones gone
    e().attach(iid)
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=40, interval=0.1, what="tombstones gone")
    assert ready(iid)
    assert all(k not in e().sim.device_labels(i) for i in (2, 3) for k in (kp, ka))


def test_detach_terminates_then_tombstone_goes_and_delete_is_allowed():
    sid = e().ready_service("detach-me", target="PRIMARY")
    iid = e().new_instance(HOST_C)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    err = e().pg.sql(f"SELECT extsvc.delete_service('{sid}')", check=False)
    assert "still has active or removing attachments" in err, err
    e().attach(iid)  # detach
    seen = set()

    def gone():
        s = e().summary_rows(iid).get(sid)
        if s:
            seen.add(s[0])
        return s is None
    wait_until(gone, timeout=40, interval=0.05, what="tombstone gone")
    assert "PENDING" not in seen and "RUNNING" not in seen, seen
    assert label_key(sid) not in e().sim.device_labels(4) and label_key(sid) not in e().sim.node_labels(4)
    assert not e().sim.pods_on(4, sid)
    assert e().delete(sid) == "DELETING"
    e().wait_state(sid, "DELETED")


def test_hand_over_keeps_the_label_until_the_last_reason_is_gone():
    """A host holds one live instance (issue 29): a hand-over is the old
    instance being deleted while the next one, live, takes the host."""
    sid = e().ready_service("hand-over", target="PRIMARY")
    old = e().new_instance(HOST_A)
    e().attach(old, sid)
    wait_summary(old, sid, "RUNNING")
    key = label_key(sid)
    new = str(uuid.uuid4())
    services = json.dumps([{"service_id": sid, "version": e().version_of(sid)}])
    # one transaction: the old instance goes, the new one takes the host and
    # attaches the same service (a second live instance would be refused)
    e().pg.sql(f"SELECT extsvc.delete_instance('{old}'); "
               f"SELECT extsvc.upsert_instance('{new}', 'tenant-a', '{HOST_A}', ARRAY[]::text[]); "
               f"SELECT extsvc.set_instance_extension_services('{new}', {lit(services)})")
    labelled = []

    def old_gone():
        labelled.append(e().sim.device_labels(0).get(key) == "enabled")
        return e().pg.one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{old}'") == "0"
    wait_until(old_gone, timeout=40, interval=0.1, what="the old instance released and gone")
    assert all(labelled), "the label left the DPU during the hand-over"
    wait_summary(new, sid, "RUNNING")
    assert e().sim.device_labels(0).get(key) == "enabled"  # the new instance still needs it
    e().attach(new)
    wait_until(lambda: sid not in e().summary_rows(new), timeout=40, what="new tombstone gone")
    assert key not in e().sim.device_labels(0) and key not in e().sim.node_labels(0)


def test_network_change_moves_the_target_set_without_leaks():
    sid = e().ready_service("net-move", target="ALL_ACTIVE")
    iid = e().new_instance(HOST_A, network=[1])
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    key = label_key(sid)
    e().pg.sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', '{HOST_A}', ARRAY['{dpu_id(0)}']::text[])")
    wait_until(lambda: status(iid).get((sid, device(1))) is None and
               status(iid).get((sid, device(0))) == ("ACTIVE", "RUNNING"), timeout=40, interval=0.1,
               what="target moved")
    assert e().sim.device_labels(0).get(key) == "enabled" and key not in e().sim.device_labels(1)
    assert key not in e().sim.node_labels(1) and not e().sim.pods_on(1, sid)
    e().attach(iid)
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=40, what="detached")


def test_update_rolls_pods_and_status_passes_through_pending():
    sid = e().ready_service("rolling", target="PRIMARY")
    iid = e().new_instance(HOST_C)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    old_rev = e().sim.pods_on(4, sid)[0]["metadata"]["annotations"]["nico/extension-service-revision"]
    # a slow pod start makes the rollout long enough to be seen
    e().sim.ctl("POST", "/delays", {"pod_ready_ms": 2000})
    e().update(sid, helm_data(values={"v": 2}))
    seen = set()

    def rolled():
        s = e().summary_rows(iid)[sid]
        seen.add(s[0])
        pods = [p for p in e().sim.pods_on(4, sid) if not p["metadata"].get("deletionTimestamp")]
        new_pod_ready = bool(pods) and pods[0]["metadata"]["annotations"]["nico/extension-service-revision"] != old_rev \
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in pods[0].get("status", {}).get("conditions", []))
        return s[0] == "RUNNING" and e().state(sid)[0] == "READY" and new_pod_ready
    try:
        wait_until(rolled, timeout=40, interval=0.05, what="rolled to the new revision")
    finally:
        e().sim.ctl("POST", "/delays", {"pod_ready_ms": 300})
    assert "PENDING" in seen, seen
    e().attach(iid)
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=40, what="detached")


def test_instance_deletion_waits_for_terminated_everywhere():
    sid = e().ready_service("inst-delete", target="ALL")
    iid = e().new_instance(HOST_B, network=[2])
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    e().pg.sql(f"SELECT extsvc.delete_instance('{iid}')")
    assert e().pg.one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{iid}'") == "1"
    wait_until(lambda: e().pg.one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{iid}'") == "0",
               timeout=40, what="instance gone")
    assert all(label_key(sid) not in e().sim.device_labels(i) for i in (2, 3))


def test_foreign_labels_untouched_and_kubectl_removal_restored():
    sid = e().ready_service("foreign", target="PRIMARY")
    iid = e().new_instance(HOST_C)
    e().sim.kube("PATCH", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(4)}",
                 {"spec": {"cluster": {"nodeLabels": {"example.com/team": "blue"}}}},
                 content_type="application/merge-patch+json")
    e().sim.kube("PATCH", f"/api/v1/nodes/{node(4)}", {"metadata": {"labels": {"example.com/rack": "r7"}}},
                 content_type="application/merge-patch+json", base=e().sim.dpu)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    key = label_key(sid)
    e().sim.kube("PATCH", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(4)}",
                 {"spec": {"cluster": {"nodeLabels": {key: None}}}}, content_type="application/merge-patch+json")
    e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: e().sim.device_labels(4).get(key) == "enabled", timeout=30, what="label restored")
    wait_summary(iid, sid, "RUNNING")
    e().attach(iid)
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=40, what="detached")
    assert e().sim.device_labels(4).get("example.com/team") == "blue"
    assert e().sim.node_labels(4).get("example.com/rack") == "r7"


def test_unreachable_dpu_cluster_is_unknown_and_blocks_detach():
    sid = e().ready_service("unreachable", target="PRIMARY")
    iid = e().new_instance(HOST_A)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    e().sim.ctl("POST", "/dpu-cluster", {"reachable": False})
    try:
        e().attach(iid)
        # Polling says UNKNOWN at once; the watch caches keep what they last saw (the label still
        # on the Node: TERMINATING, observed before the partition) until the staleness bound
        # (test_partition.py). Either way the removal is never confirmed while blind.
        wait_until(lambda: (e().summary_rows(iid).get(sid) or ("",))[0] in ("UNKNOWN", "TERMINATING"),
                   timeout=30, what="UNKNOWN or TERMINATING")
        time.sleep(2)
        assert e().summary_rows(iid)[sid][0] in ("UNKNOWN", "TERMINATING")  # never TERMINATED while blind
        assert not ready(iid)
    finally:
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": True})
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=40, what="detach completes once observable")


def test_all_dpus_service_lifecycle_including_a_dpu_registered_later():
    sid = e().create("site-wide", helm_data(), target=None, deployment_scope="ALL_DPUS")
    e().wait_state(sid, "READY")
    key = label_key(sid)
    wait_until(lambda: all(e().sim.device_labels(i).get(key) == "enabled" for i in range(5)), timeout=30,
               what="labels on every registered DPU")
    assert key not in e().sim.device_labels(5)  # not registered yet
    e().pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(5)}', '{HOST_C}', '{device(5)}', '{node(5)}', false)")
    wait_until(lambda: e().sim.device_labels(5).get(key) == "enabled", timeout=30, what="label on the new DPU")

    def site():
        return {r[0]: (r[1], r[2]) for r in e().pg.sql(
            f"SELECT dpu_device_name, deployment_state, status_message FROM extsvc.site_service_status('{sid}')")}
    # issue 12: the per-DPU status of a site-wide service is read through SQL,
    # RUNNING only where a pod of the applied revision was observed
    wait_until(lambda: (lambda st: {device(i) for i in range(6)} <= st.keys()
                        and all(v[0] == "RUNNING" for v in st.values()))(site()),
               timeout=40, what="site_service_status RUNNING on every DPU")
    # the reason a site-wide delete waits is kept and visible: with the DPU
    # cluster unreachable nothing can be observed clean, so it must wait
    e().sim.ctl("POST", "/dpu-cluster", {"reachable": False})
    try:
        e().delete(sid)
        wait_until(lambda: "waiting until every DPU" in (e().pg.one(
            f"SELECT status_message FROM extsvc.services WHERE service_id = '{sid}'"
            f" AND lifecycle_state = 'DELETING'") or ""), timeout=30, what="the delete's wait reason")
        time.sleep(2)
        assert e().pg.one(f"SELECT lifecycle_state FROM extsvc.services WHERE service_id = '{sid}'") == "DELETING"
        assert all(v[0] != "TERMINATED" for v in site().values()), site()  # never claimed while blind
    finally:
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": True})
    e().wait_state(sid, "DELETED", timeout=60)
    assert all(key not in e().sim.device_labels(i) for i in range(6))
    hist = e().history(sid)
    assert ("DELETING", "DELETED", "worker", "dpuservice_deleted") in hist


def test_a_dpu_that_is_gone_is_error_then_released_by_deregistration():
    """Issue 10: DPUDevice and Node both 404 -> the wanted row is ERROR (it
    cannot run there), never stuck; deleting the instance finishes while the
    DPU stays registered, and deregistering the DPU releases a wanted row as
    TERMINATED with that evidence, so the service can be deleted."""
    host_d = host_id("d1")
    e().pg.sql(f"SELECT extsvc.register_dpu('{dpu_id(5)}', '{host_d}', '{device(5)}', '{node(5)}', true)")
    sid = e().ready_service("dpu-gone", target="PRIMARY")
    iid = e().new_instance(host_d)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    code, body = e().sim.kube("DELETE", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(5)}")
    assert code in (200, 202), body
    wait_until(lambda: e().sim.kube("GET", f"/api/v1/nodes/{node(5)}", base=e().sim.dpu)[0] == 404,
               timeout=20, what="Node gone with its DPUDevice")
    e().pg.sql("SELECT extsvc.request_resync()")

    def gone_error():
        # the DPUDevice's 404 may be seen before the Node's ("DPUDevice … not found", ERROR as
        # well); the row says "gone" once both were observed
        rows = e().pg.sql(f"SELECT deployment_state, status_message FROM "
                          f"extsvc.instance_extension_service_status('{iid}') "
                          f"WHERE service_id = '{sid}' AND dpu_device_name = '{device(5)}'")
        return rows if rows and rows[0][0] == "ERROR" and "gone" in (rows[0][1] or "") else False
    wait_until(gone_error, timeout=30, what="ERROR for a wanted service on a DPU that is gone")
    # the DPU stays registered: deleting the instance still finishes, the
    # removed row is TERMINATED on the evidence that the DPU is gone
    e().pg.sql(f"SELECT extsvc.delete_instance('{iid}')")
    wait_until(lambda: e().pg.one(f"SELECT extsvc.instance_extension_services_terminated('{iid}')") == "t",
               timeout=30, what="instance deletion finished on a gone DPU")
    gone = e().pg.sql(f"SELECT message FROM extsvc.instance_dpu_state_history('{iid}') "
                      f"WHERE machine = 'deployment' AND to_state = 'TERMINATED'")
    assert any("are gone" in (m[0] or "") for m in gone), gone
    # a new instance wants it again (ERROR); deregistration releases it
    iid = e().new_instance(host_d)
    e().attach(iid, sid)
    wait_until(lambda: (lambda r: r if r and r[1] == "ERROR" else False)(status(iid).get((sid, device(5)))),
               timeout=30, what="ERROR again for the new instance")
    e().pg.sql(f"SELECT extsvc.deregister_dpu('{dpu_id(5)}')")
    wait_until(lambda: (sid, device(5)) not in status(iid), timeout=30,
               what="the row released as TERMINATED (DPU gone)")
    hist = e().pg.sql(f"SELECT to_state, reason FROM extsvc.instance_dpu_state_history('{iid}') "
                      f"WHERE machine = 'deployment'")
    assert ["TERMINATED", "absence_observed"] in hist or ["TERMINATED", "dpu_gone"] in hist, hist
    e().attach(iid)
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=30, what="detached")
    assert e().delete(sid) == "DELETING"
    e().wait_state(sid, "DELETED")


def test_mixed_types_and_cross_tenant_are_refused():
    sid = e().ready_service("mixed-dpf", target="PRIMARY")
    pod = e().pg.one("SELECT service_id FROM extsvc.create_service('tenant-a', 'mixed-pod', 'KUBERNETES_POD', '{\"spec\":{}}')")
    iid = e().new_instance(HOST_C)
    err = e().attach(iid, sid, pod, check=False)
    assert "cannot be mixed" in err, err
    other = e().new_instance(host_id("c2"), tenant="tenant-b")  # a host of its own
    err = e().attach(other, sid, check=False)
    assert "another tenant" in err, err
    assert e().summary_rows(iid) == {} and e().summary_rows(other) == {}


def test_worker_kill_and_restart_during_detach_converge():
    sid = e().ready_service("kill-detach", target="PRIMARY")
    iid = e().new_instance(HOST_B)
    e().attach(iid, sid)
    wait_summary(iid, sid, "RUNNING")
    e().attach(iid)
    time.sleep(0.2)
    killed = e().pg.kill_workers()
    e().pg.wait_crash_restart(killed)
    e().pg.restart()
    wait_until(lambda: e().summary_rows(iid) == {}, timeout=60, what="detach converged")
    assert label_key(sid) not in e().sim.device_labels(2)


def main():
    global ENV
    ENV = Env(dpus=6, workers=2)
    ok = False
    try:
        setup_fleet(ENV)
        ok = run_tests([
            test_attach_labels_only_the_target_dpu_and_reaches_running,
            test_primary_and_all_targets,
            test_detach_terminates_then_tombstone_goes_and_delete_is_allowed,
            test_hand_over_keeps_the_label_until_the_last_reason_is_gone,
            test_network_change_moves_the_target_set_without_leaks,
            test_update_rolls_pods_and_status_passes_through_pending,
            test_instance_deletion_waits_for_terminated_everywhere,
            test_foreign_labels_untouched_and_kubectl_removal_restored,
            test_unreachable_dpu_cluster_is_unknown_and_blocks_detach,
            test_all_dpus_service_lifecycle_including_a_dpu_registered_later,
            test_a_dpu_that_is_gone_is_error_then_released_by_deregistration,
            test_mixed_types_and_cross_tenant_are_refused,
            test_worker_kill_and_restart_during_detach_converge,
        ], "# e2e: attach, detach and per-DPU status")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
