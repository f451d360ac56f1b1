#!/usr/bin/python3
"""End-to-end against dpfsim's realistic defaults (issue 9): Helm-named
workloads found by label, revisions proven per pod under an Argo CD refresh
lag, one DPU's crash loop isolated to that DPU, terminations never claimed
early, DPF-written spec keys and `paused` left alone, and DPF releases whose
CRDs lack fields refused loudly instead of pruned silently.

Runs once per dpfsim release profile (issue 23): E2E_DPF_VERSION (or argv[1])
names it, default v26.10; test/e2e/run.sh runs every profile of the line below.
On v26.10 every scenario runs as on real DPF; on v25.7 and v24.10 (below the
minimum release, v26.8) the same scenarios must show the service FAILED naming
the missing field and v26.8, refuse what cannot be held, converge deletes, and
send DPF no write at all."""
# dpf-profiles: v26.10 v25.7 v24.10
import sys
import time

from extsvc_testkit.harness import Env, helm_data, run_tests, wait_until, device, node

from fidelity_kit import (HOST, NS, OLD_MISSING, PROFILE, detach_all, dpu_id, e, management_writes, per_dpu,
                          ready_pod_of, ready_service, setup_fleet, wait_dpu)
from fidelity_old_releases import OLD_TESTS
import fidelity_kit


# --------------------------------------------------------------------------- tests

def test_helm_named_workload_reaches_running_by_label():
    sid = ready_service("helm-named")
    iid = e().new_instance(HOST, tag="e", network=[1])
    e().attach(iid, sid)
    wait_dpu(iid, sid, device(1), "RUNNING")
    name = e().state(sid)[3]
    pods = e().sim.pods_on(1, sid)
    assert pods and ready_pod_of(pods, 1), pods
    owners = {r["name"] for p in pods for r in p["metadata"].get("ownerReferences", [])
              if r.get("kind") == "DaemonSet"}
    # The chart names the DaemonSet (<release>-<chart>), never the product.
    assert owners == {f"{name}-demo-agent"}, owners
    assert not e().sim.pods_on(0, sid)
    detach_all(iid)


def test_update_under_argo_lag_is_never_running_before_a_new_pod():
    sid = ready_service("argo-lag")
    iid = e().new_instance(HOST, tag="e", network=[1, 2])
    e().attach(iid, sid)
    wait_dpu(iid, sid, device(1), "RUNNING")
    wait_dpu(iid, sid, device(2), "RUNNING")
    e().sim.ctl("POST", "/delays", {"argo_refresh_ms": 2000, "pod_ready_ms": 1500})
    try:
        e().update(sid, helm_data(values={"v": 2}))
        violations, samples, seen = [], 0, set()
        deadline = time.time() + 45
        done = False
        while time.time() < deadline and not done:
            rows = per_dpu(iid, sid)
            samples += 1
            done = True
            for i in (1, 2):
                state, msg, applied = rows[device(i)]
                seen.add(state)
                if applied == 2 and state == "RUNNING" and not ready_pod_of(e().sim.pods_on(i, sid), 2):
                    violations.append((device(i), msg))
                done = done and applied == 2 and state == "RUNNING"
            time.sleep(0.1)
        assert not violations, violations
        assert done, per_dpu(iid, sid)
        assert "PENDING" in seen, seen
        print(f"    {samples} samples, never RUNNING without a Ready pod of revision 2")
    finally:
        e().sim.ctl("POST", "/delays", {"argo_refresh_ms": 300, "pod_ready_ms": 300})
    detach_all(iid)


def test_one_crash_looping_dpu_leaves_the_others_running():
    sid = ready_service("crashloop")
    iid = e().new_instance(HOST, tag="e", network=[1, 2, 3])
    e().sim.ctl("POST", "/pod-faults", {"node": node(2), "reason": "CrashLoopBackOff"})
    try:
        e().attach(iid, sid)
        wait_dpu(iid, sid, device(1), "RUNNING")
        wait_dpu(iid, sid, device(3), "RUNNING")
        state, msg, _ = wait_until(
            lambda: (lambda r: r if "CrashLoopBackOff" in r[1] else False)(per_dpu(iid, sid)[device(2)]),
            timeout=30, interval=0.1, what="CrashLoopBackOff on DPU 2")
        assert state == "PENDING", (state, msg)
        agg = e().pg.one(f"SELECT aggregate_state FROM extsvc.instance_extension_services_summary('{iid}') "
                         f"WHERE service_id = '{sid}'")
        assert agg == "PENDING"
        assert e().pg.one(f"SELECT extsvc.instance_extension_services_ready('{iid}')") == "f"
    finally:
        e().sim.ctl("DELETE", "/pod-faults")
    wait_dpu(iid, sid, device(2), "RUNNING", timeout=60)
    assert per_dpu(iid, sid)[device(1)][0] == "RUNNING"
    detach_all(iid)


def test_admission_denial_is_named_in_the_pending_message():
    """A chart that needs privileged pods, deployed with privileged: false:
    DPF's ValidatingAdmissionPolicy dpf-deny-privileged-pods rejects the
    DaemonSet at Argo CD's sync, so no DaemonSet, no pod and no FailedCreate
    event exist. DPF's own word is only "Sync: OutOfSync, Health: Missing";
    the DPU stays PENDING and its message carries the sync operation's
    message read from the Application, naming the policy (issue 23, part 3).
    A 403 on the Application read leaves it PENDING with a message that says
    so and names the RBAC; the policy in Audit mode admits it: RUNNING."""
    policy = "dpf-deny-privileged-pods"
    fault = None
    e().sim.ctl("POST", "/charts", {"chart": "priv-agent", "needs_privileged": True})
    try:
        sid = e().create("denied", helm_data(values={"v": 1}, chartName="priv-agent"), target="ALL_ACTIVE")
        e().wait_state(sid, "READY")
        iid = e().new_instance(HOST, tag="e", network=[3])
        e().attach(iid, sid)
        state, msg, _ = wait_until(
            lambda: (lambda r: r if r and policy in r[1] else False)(per_dpu(iid, sid).get(device(3))),
            timeout=30, interval=0.1, what="the policy named by the sync failure in the message")
        assert state == "PENDING" and not e().sim.pods_on(3, sid), (state, msg)
        assert "Sync: OutOfSync, Health: Missing" in msg, msg
        assert "sync failed: one or more objects failed to apply" in msg, msg
        assert "Privileged containers are not allowed" in msg, msg
        assert "FailedCreate" not in msg, msg
        print(f"    {msg[msg.index('sync failed'):][:220]}")
        # it stays so: the denial is not a lag that a later observation turns into RUNNING
        states = set()
        deadline = time.time() + 2
        while time.time() < deadline:
            states.add(per_dpu(iid, sid)[device(3)][0])
            time.sleep(0.1)
        assert states == {"PENDING"}, states

        # no RBAC on applications.argoproj.io: still PENDING, and the message says why
        fault = e().sim.fault(verb="LIST", path_regex="/applications", status=403)["id"]
        dpu = dpu_id(3)
        assert e().pg.one(f"SELECT extsvc.reconcile_dpu('{dpu}')") == "1"
        state, msg, _ = wait_until(
            lambda: (lambda r: r if r and "could not be read" in r[1] else False)(per_dpu(iid, sid).get(device(3))),
            timeout=30, interval=0.1, what="the unreadable sync message explained")
        assert state == "PENDING", (state, msg)
        assert "Sync: OutOfSync, Health: Missing" in msg, msg
        assert "grant get and list on applications.argoproj.io in namespace " + NS in msg, msg
        assert policy not in msg, msg
        print(f"    {msg[msg.index('the Argo CD sync'):][:220]}")
        e().sim.ctl("DELETE", f"/faults/{fault}")
        fault = None

        # DPFOperatorConfig privilegedPodEnforcement=false binds the policy in Audit mode: the
        # next sync retry applies the DaemonSet and the pod runs
        e().sim.ctl("POST", "/dpf-config", {"privileged_pod_enforcement": False})
        state, msg, _ = wait_dpu(iid, sid, device(3), "RUNNING", timeout=40)
        assert ready_pod_of(e().sim.pods_on(3, sid), 1), msg
    finally:
        if fault is not None:
            e().sim.ctl("DELETE", f"/faults/{fault}")
        e().sim.ctl("POST", "/dpf-config", {"privileged_pod_enforcement": True})
        e().sim.ctl("DELETE", "/charts")
    detach_all(iid)


def test_unschedulable_pod_is_named_and_never_running():
    """A chart whose pod requests an extended resource the Node lacks: the
    DaemonSet's pod is created unbound and stays Pending (PodScheduled=False,
    Unschedulable, no spec.nodeName), its Node named only by its node
    affinity. The DPU is PENDING with the scheduler's reason, never RUNNING;
    once the Node advertises the resource the pod is bound and runs; a detach
    is TERMINATED only when no pod of the service is left for the Node."""
    e().sim.ctl("POST", "/charts", {"chart": "sf-agent", "requests": {"nvidia.com/bf_sf": "1"}})
    termination_ms = e().sim.ctl("GET", "/delays")["pod_termination_ms"]
    try:
        sid = e().create("unsched", helm_data(values={"v": 1}, chartName="sf-agent"), target="ALL_ACTIVE")
        e().wait_state(sid, "READY")
        iid = e().new_instance(HOST, tag="e", network=[2])
        e().attach(iid, sid)
        state, msg, _ = wait_until(
            lambda: (lambda r: r if r and "Unschedulable" in r[1] else False)(per_dpu(iid, sid).get(device(2))),
            timeout=30, interval=0.1, what="the scheduler's reason in the message")
        assert state == "PENDING", (state, msg)
        assert "Insufficient nvidia.com/bf_sf" in msg, msg
        assert not e().sim.pods_on(2, sid), "unbound: no pod has spec.nodeName"
        print(f"    {msg[:200]}")
        # detach while the pod is still unbound: TERMINATED only once it is gone
        e().sim.ctl("POST", "/delays", {"pod_termination_ms": 1500})
        e().attach(iid)
        seen_terminated_with_pod = False
        deadline = time.time() + 30
        while time.time() < deadline:
            rows = per_dpu(iid, sid)
            code, body = e().sim.kube("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector="
                                      f"nico%2Fextension-service-id%3D{sid}", base=e().sim.dpu)
            assert code == 200, body
            if not rows:
                break
            if rows.get(device(2), ("",))[0] == "TERMINATED" and body["items"]:
                seen_terminated_with_pod = True
            time.sleep(0.05)
        assert not seen_terminated_with_pod, "TERMINATED while a pod of the service was left"
        e().attach(iid, sid)
        wait_until(lambda: (lambda r: r if r and "Unschedulable" in r[1] else False)(per_dpu(iid, sid).get(device(2))),
                   timeout=30, interval=0.1, what="unschedulable again")
        code, body = e().sim.kube("PATCH", f"/api/v1/nodes/{node(2)}/status",
                                  {"status": {"capacity": {"nvidia.com/bf_sf": "4"},
                                              "allocatable": {"nvidia.com/bf_sf": "4"}}},
                                  base=e().sim.dpu, content_type="application/merge-patch+json")
        assert code == 200, body
        wait_dpu(iid, sid, device(2), "RUNNING", timeout=40)
    finally:
        e().sim.ctl("POST", "/delays", {"pod_termination_ms": termination_ms})
        e().sim.ctl("DELETE", "/charts")
    detach_all(iid)


def test_detach_with_slow_termination_is_never_terminated_early():
    sid = ready_service("slow-stop")
    iid = e().new_instance(HOST, tag="e", network=[1])
    e().attach(iid, sid)
    wait_dpu(iid, sid, device(1), "RUNNING")
    e().sim.ctl("POST", "/delays", {"pod_termination_ms": 3000})
    try:
        e().attach(iid)
        violations, samples, terminating = [], 0, False
        deadline = time.time() + 60
        while time.time() < deadline:
            rows = per_dpu(iid, sid)
            samples += 1
            if not rows:
                if e().sim.pods_on(1, sid):
                    violations.append("tombstone released while a pod remains")
                break
            state = rows[device(1)][0]
            terminating = terminating or state == "TERMINATING"
            if state == "TERMINATED" and e().sim.pods_on(1, sid):
                violations.append(rows[device(1)])
            time.sleep(0.1)
        assert not violations, violations
        assert terminating, "the 3 s termination was never reported TERMINATING"
        assert not per_dpu(iid, sid)
        print(f"    {samples} samples, TERMINATED only once no pod remained")
    finally:
        e().sim.ctl("POST", "/delays", {"pod_termination_ms": 300})


def test_dpf_written_label_causes_no_writes_over_three_resyncs():
    sid = ready_service("dpf-label", target="PRIMARY")
    name = e().state(sid)[3]

    def dpf_key_present():
        svc = e().sim.dpuservice(name)
        return svc and "svc.dpu.nvidia.com/service" in svc["spec"]["serviceDaemonSet"].get("labels", {})
    wait_until(dpf_key_present, timeout=20, what="DPF writing its label into the spec")
    before = management_writes("dpuservices")
    for _ in range(3):
        n = int(e().pg.one("SELECT (sum(iterations))::bigint FROM extsvc.worker_status()"))
        e().pg.sql("SELECT extsvc.request_resync()")
        wait_until(lambda: int(e().pg.one("SELECT (sum(iterations))::bigint FROM extsvc.worker_status()")) > n + 2,
                   timeout=20, what="a resync pass")
        time.sleep(0.5)
    assert management_writes("dpuservices") == before, e().sim.counts()
    assert dpf_key_present()
    assert e().state(sid)[0] == "READY"


def test_paused_is_shown_not_fought_and_blocks_delete_visibly():
    sid = ready_service("paused", target="PRIMARY")
    name = e().state(sid)[3]
    path = f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpuservices/{name}"
    code, body = e().sim.kube("PATCH", path, {"spec": {"paused": True}}, content_type="application/merge-patch+json")
    assert code == 200, body
    e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: "paused" in (e().pg.one(f"SELECT coalesce(dpf_message, '') FROM extsvc.services "
                                               f"WHERE service_id = '{sid}'") or ""),
               timeout=20, what="paused visible in dpf_message")
    assert e().sim.dpuservice(name)["spec"].get("paused") is True  # not fought
    st = e().state(sid)
    assert st[0] == "READY" and "spec.paused is true" in (st[4] or ""), st  # status_message says so
    assert e().delete(sid) == "DELETING"
    wait_until(lambda: "paused" in (e().state(sid)[4] or ""), timeout=20, what="delete waiting on paused")
    time.sleep(1.0)
    assert e().state(sid)[0] == "DELETING"
    code, body = e().sim.kube("PATCH", path, {"spec": {"paused": False}}, content_type="application/merge-patch+json")
    assert code == 200, body
    e().wait_state(sid, "DELETED", timeout=60)


def test_dpf_ready_condition_reaches_sql():
    sid = ready_service("dpf-ready", target="PRIMARY")
    iid = e().new_instance(HOST, tag="e", network=[])
    e().attach(iid, sid)
    wait_dpu(iid, sid, device(0), "RUNNING")
    e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: e().pg.one(f"SELECT dpf_ready FROM extsvc.services WHERE service_id = '{sid}'") == "t",
               timeout=20, what="dpf_ready true")
    detach_all(iid)


def test_dpf_failure_reaches_sql_and_running_is_never_claimed():
    # Argo cannot pull the chart: DPF's Ready turns False on the DPUService;
    # that reaches SQL (dpf_ready, dpf_message) and no DPU is called RUNNING
    e().sim.ctl("POST", "/chart-faults", {"chart": "broken-agent", "kind": "pull"})
    try:
        sid = ready_service("dpf-broken", target="PRIMARY", chartName="broken-agent")
        iid = e().new_instance(HOST, tag="e", network=[])
        e().attach(iid, sid)
        e().pg.sql("SELECT extsvc.request_resync()")
        row = wait_until(lambda: (lambda r: r if r and r[0] == "f" else False)(e().pg.sql(
            f"SELECT dpf_ready, dpf_reason, coalesce(dpf_message, '') FROM extsvc.services "
            f"WHERE service_id = '{sid}'")[0]), timeout=30, what="dpf_ready false in SQL")
        assert "ApplicationsReady" in row[2] or "not ready" in row[2], row
        time.sleep(2.0)
        st = per_dpu(iid, sid).get(device(0))
        assert st is not None and st[0] != "RUNNING", st
    finally:
        e().sim.ctl("DELETE", "/chart-faults")
    wait_dpu(iid, sid, device(0), "RUNNING", timeout=60)
    e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: e().pg.one(f"SELECT dpf_ready FROM extsvc.services WHERE service_id = '{sid}'") == "t",
               timeout=30, what="dpf_ready true once the chart pulls")
    detach_all(iid)


def test_every_dpuservice_write_asks_for_strict_field_validation():
    # without fieldValidation=Strict an API server drops fields its CRD lacks
    # and answers 200: every POST and PATCH of a DPUService must ask for Strict
    sid = ready_service("strict-writes", target="PRIMARY")
    e().update(sid, helm_data(version="1.2.4", values={"v": 2}))
    e().wait_state(sid, "READY", timeout=30)
    name = e().state(sid)[3]
    # the worker's writes of this service (other tests patch DPUServices as an operator would)
    writes = [r for r in e().sim.requests(2000)["requests"]
              if r.get("cluster") == "management" and r.get("method") in ("POST", "PATCH", "PUT")
              and r.get("resource") == "dpuservices"
              and (r.get("path", "").endswith("/" + name) or name in r.get("body", ""))]
    assert any(r["method"] == "POST" for r in writes) and any(r["method"] == "PATCH" for r in writes), writes
    lax = [r for r in writes if "fieldValidation=Strict" not in r.get("query", "")]
    assert not lax, lax


def test_missing_namespace_fails_naming_the_setting():
    """The site Lease lives in extsvc.namespace (issue 25): with a namespace that does not exist
    no Lease can be created, so nothing is written at all, and worker_status() (and the log)
    names the setting; before the Lease, the first create answered 404 and FAILED the service."""
    env = Env(dpus=1, workers=1, extra={"extsvc.namespace": "'no-such-ns'"})
    try:
        sid = env.create("no-ns", helm_data())
        st = wait_until(lambda: (lambda r: r if r and r[0][0] == "lease" and "extsvc.namespace" in (r[0][1] or "")
                                 else None)(env.pg.sql("SELECT paused_reason, paused_detail FROM extsvc.worker_status()")),
                        timeout=30, what="worker_status naming extsvc.namespace")
        assert "no-such-ns" in st[0][1], st
        assert env.state(sid)[0] == "CREATING", env.state(sid)
        writes = [r for r in env.sim.requests(500)["requests"]
                  if r["method"] != "GET" and "/dpuservices" in r["path"]]
        assert not writes, writes
    finally:
        env.close()


V26_TESTS = [
    test_helm_named_workload_reaches_running_by_label,
    test_update_under_argo_lag_is_never_running_before_a_new_pod,
    test_one_crash_looping_dpu_leaves_the_others_running,
    test_admission_denial_is_named_in_the_pending_message,
    test_unschedulable_pod_is_named_and_never_running,
    test_detach_with_slow_termination_is_never_terminated_early,
    test_dpf_written_label_causes_no_writes_over_three_resyncs,
    test_paused_is_shown_not_fought_and_blocks_delete_visibly,
    test_dpf_ready_condition_reaches_sql,
    test_dpf_failure_reaches_sql_and_running_is_never_claimed,
    test_every_dpuservice_write_asks_for_strict_field_validation,
    # this one starts its own dpfsim and PostgreSQL
    test_missing_namespace_fails_naming_the_setting,
]

def main():
    if PROFILE == "v26.10":
        fidelity_kit.ENV = Env(dpus=4, workers=2)
        tests = V26_TESTS
    elif PROFILE in OLD_MISSING:
        fidelity_kit.ENV = Env(dpus=4, workers=2, sim_args=["--dpf-version", PROFILE], request_log=True)
        e().sim.ctl("POST", "/delays", {"all_ms": 0})  # nothing here is about lag
        tests = OLD_TESTS
    else:
        print(f"unknown DPF profile {PROFILE!r}: v26.10, v25.7 or v24.10")
        return False
    ok = False
    try:
        setup_fleet(e())
        ok = run_tests(tests, f"# e2e: real-DPF fidelity on DPF {PROFILE} "
                              f"(Helm names, per-pod revisions, skew, DPF-owned keys, minimum release)")
    finally:
        e().close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
