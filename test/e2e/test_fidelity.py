#!/usr/bin/python3
"""End-to-end against dpfsim's realistic defaults (issue 9): Helm-named
workloads found by label, revisions proven per pod under an Argo CD refresh
lag, one DPU's crash loop isolated to that DPU, terminations never claimed
early, DPF-written spec keys and `paused` left alone, and DPF releases whose
CRDs lack fields refused loudly instead of pruned silently."""
import sys
import time

from extsvc_testkit.harness import Env, helm_data, run_tests, wait_until, device, node, dpu_id as harness_dpu_id, host_id

ENV = None
NS = "dpf-operator-system"
HOST = host_id("f1")
REV = "nico/extension-service-revision"


def dpu_id(i):
    return harness_dpu_id(i, "e")


def e():
    return ENV


def setup_fleet(env):
    for i in range(4):  # one host with four DPUs; DPU 0 is the primary
        env.register_dpu(i, HOST, i == 0, tag="e")


def per_dpu(iid, sid):
    """device -> (deployment_state, status_message, applied_revision)."""
    return {r[0]: (r[1], r[2], int(r[3])) for r in e().pg.sql(
        f"SELECT st.dpu_device_name, st.deployment_state, coalesce(st.status_message, ''), s.applied_revision "
        f"FROM extsvc.instance_extension_service_status('{iid}') st "
        f"JOIN extsvc.services s USING (service_id) WHERE st.service_id = '{sid}'")}


def ready_pod_of(pods, revision):
    return any(p["metadata"].get("annotations", {}).get(REV) == str(revision)
               and not p["metadata"].get("deletionTimestamp")
               and p.get("status", {}).get("phase") == "Running"
               and any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in p.get("status", {}).get("conditions", []))
               for p in pods)


def ready_service(name, target="ALL_ACTIVE", **data_kw):
    return e().ready_service(name, target, data=helm_data(values={"v": 1}, **data_kw))


def wait_dpu(iid, sid, dev, state, timeout=40):
    def check():
        row = per_dpu(iid, sid).get(dev)
        return row if row and row[0] == state else False
    return wait_until(check, timeout, interval=0.1, what=f"{dev} {state}")


def detach_all(iid):
    e().attach(iid)
    wait_until(lambda: not e().pg.sql(f"SELECT 1 FROM extsvc.instance_extension_services_summary('{iid}')"),
               timeout=60, interval=0.1, what="detached")


def management_writes(resource):
    c = e().sim.counts().get("management", {})
    return sum(v for k, v in c.items() if k.split(" ")[0] in ("PATCH", "PUT", "POST", "DELETE")
               and k.endswith(resource))


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


def test_old_dpf_release_fails_naming_the_field_never_ready():
    # v24.10 (no DPUDevice CRD, no spec.security) and v25.7 (DPUDevice without spec.cluster, no
    # spec.security): the worker reads the served CRDs at its start (issue 23, part 5), shows the
    # level in worker_status() and the gauge, sends no create, and FAILED names the field and v26.8
    expect = {"v24.10": "DPUService.spec.security, DPUDevice (resource)",
              "v25.7": "DPUService.spec.security, DPUDevice.spec.cluster"}
    for release in ("v24.10", "v25.7"):
        env = Env(dpus=1, workers=1, sim_args=["--dpf-version", release])
        try:
            level = wait_until(lambda: (lambda r: r if r and r[0][0] else None)(
                env.pg.sql("SELECT dpf_api_level, dpf_api_missing FROM extsvc.worker_status()")),
                timeout=30, what=f"the DPF API level detected on {release}")
            assert level[0] == ["below v26.8", expect[release]], level
            assert env.pg.one("SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_dpf_api_level' "
                              "AND labels->>'level' = 'below v26.8'") == "1", release
            states = set()
            sid = env.create("old-dpf", helm_data())

            def failed():
                s = env.state(sid)
                states.add(s[0])
                return s if s[0] == "FAILED" else False
            s = wait_until(failed, timeout=30, interval=0.05, what=f"FAILED on {release}")
            assert "READY" not in states, states
            assert "lacks DPUService.spec.security" in (s[4] or ""), s
            assert "needs DPF v26.8 or later" in (s[4] or ""), s
            assert env.pg.one(f"SELECT count(*) FROM extsvc.service_history WHERE service_id = '{sid}' "
                              f"AND reason = 'unknown_fields'") == "1"
            # no create was attempted against a release that cannot hold the service
            posts = [r for r in env.sim.requests(2000)["requests"]
                     if r.get("method") == "POST" and "/dpuservices" in r.get("path", "")]
            assert not posts, posts
        finally:
            env.close()


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


def main():
    global ENV
    ENV = Env(dpus=4, workers=2)
    ok = False
    try:
        setup_fleet(ENV)
        ok = run_tests([
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
            # these two start their own dpfsim and PostgreSQL
            test_old_dpf_release_fails_naming_the_field_never_ready,
            test_missing_namespace_fails_naming_the_setting,
        ], "# e2e: real-DPF fidelity (Helm names, per-pod revisions, skew, DPF-owned keys)")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
