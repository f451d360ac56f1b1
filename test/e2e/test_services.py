#!/usr/bin/python3
"""End-to-end: the worker drives DPUService create / update / delete through
dpfsim over TLS with a bearer token (issue 4)."""
import sys
import time

from extsvc_testkit.harness import Env, helm_data, lit, run_tests, wait_until

REV = "nico/extension-service-revision"

ENV = None


def env():
    return ENV


def counts_of(key):
    c = env().sim.counts()["management"]
    return c.get(key, 0)


def test_create_reaches_ready_with_the_rendered_object():
    e = env()
    sid = e.create("create-ready", helm_data(values={"replicas": 1}))
    st = e.wait_state(sid, "READY")
    assert st[2] == "1", st  # applied_revision
    live = e.sim.dpuservice(st[3])
    assert live is not None
    assert live["metadata"]["labels"]["nico/extension-service-id"] == sid
    want = e.pg.one(f"SELECT extsvc.render_dpuservice({lit(sid)}::uuid)::text")
    import json
    want = json.loads(want)
    assert live["spec"]["helmChart"] == want["spec"]["helmChart"], live["spec"]
    assert live["spec"]["serviceDaemonSet"]["nodeSelector"] == want["spec"]["serviceDaemonSet"]["nodeSelector"]
    assert ("-", "CREATING", "api", "create") in e.history(sid)
    assert ("CREATING", "READY", "worker", "dpuservice_created") in e.history(sid)


def test_intent_reaches_the_api_quickly_after_commit():
    e = env()
    t0 = time.time()
    sid = e.create("fast-wake")
    e.wait_state(sid, "READY", timeout=10)
    # wake-at-commit: far below the 10 s fallback scan
    assert time.time() - t0 < 5, time.time() - t0


def last_patch(name):
    """The last PATCH of the DPUService, with the resourceVersion precondition
    (issue 10: a patch decided from a read names that read) checked and
    taken out, so callers compare the spec change alone."""
    import json
    for r in reversed(e_requests()):
        if r.get("method") == "PATCH" and r.get("path", "").endswith("/dpuservices/" + name):
            body = json.loads(r["body"])
            md = body.get("metadata", {})
            assert isinstance(md.pop("resourceVersion", None), str), body
            if not md:
                body.pop("metadata", None)
            return dict(r, body=json.dumps(body))
    return None


def e_requests():
    return env().sim.requests(500)["requests"] if isinstance(env().sim.requests(500), dict) else env().sim.requests(500)


def test_update_sends_the_minimal_patch_and_promotes_the_revision():
    import json
    e = env()
    sid = e.create("update-patch", helm_data(values={"a": 1, "b": {"c": 2}}))
    name = e.wait_state(sid, "READY")[3]
    state, rev = e.update(sid, helm_data(version="1.2.4", values={"a": 1, "b": {"d": 3}}))
    assert state == "UPDATING" and rev == "2"
    st = e.wait_state(sid, "READY")
    assert st[1] == "2" and st[2] == "2", st
    patch = json.loads(last_patch(name)["body"])
    # the revision annotation rides along: it is how pods prove their revision
    assert patch == {"spec": {"helmChart": {"source": {"version": "1.2.4"},
                                            "values": {"b": {"c": None, "d": 3}}},
                              "serviceDaemonSet": {"annotations": {REV: "2"}}}}, patch
    live = e.sim.dpuservice(name)
    assert live["spec"]["helmChart"]["values"] == {"a": 1, "b": {"d": 3}}
    assert ("UPDATING", "READY", "worker", "revision_applied") in e.history(sid)


def test_values_present_to_absent_and_empty_object():
    import json
    e = env()
    sid = e.create("values-absent", helm_data(values={"a": 1}))
    name = e.wait_state(sid, "READY")[3]
    e.update(sid, helm_data())  # values absent
    e.wait_state(sid, "READY")
    assert json.loads(last_patch(name)["body"]) == {"spec": {"helmChart": {"values": None},
                                                             "serviceDaemonSet": {"annotations": {REV: "2"}}}}
    assert "values" not in e.sim.dpuservice(name)["spec"]["helmChart"]
    e.update(sid, helm_data(values={}))
    e.wait_state(sid, "READY")
    assert json.loads(last_patch(name)["body"]) == {"spec": {"helmChart": {"values": {}},
                                                             "serviceDaemonSet": {"annotations": {REV: "3"}}}}
    assert e.sim.dpuservice(name)["spec"]["helmChart"]["values"] == {}


def test_update_supersedes_a_pending_update():
    e = env()
    sid = e.create("supersede")
    name = e.wait_state(sid, "READY")[3]
    # Hold the first PATCH for a while so the second update lands mid-flight.
    e.sim.fault(verb="PATCH", path_regex=f".*/dpuservices/{name}$", action="latency",
                latency_ms=1500, count=1)
    e.update(sid, helm_data(version="2.0.0"))
    time.sleep(0.5)
    e.update(sid, helm_data(version="3.0.0"))
    st = e.wait_state(sid, "READY", timeout=30)
    assert st[1] == "3" and st[2] == "3", st
    assert e.sim.dpuservice(name)["spec"]["helmChart"]["source"]["version"] == "3.0.0"
    assert ("UPDATING", "UPDATING", "api", "superseded") in e.history(sid)
    e.sim.clear_faults()


def test_delete_waits_for_the_finalizer():
    e = env()
    sid = e.create("delete-finalizer")
    name = e.wait_state(sid, "READY")[3]
    wait_until(lambda: "dpu.nvidia.com/dpuservice" in (e.sim.dpuservice(name) or {}).get("metadata", {}).get("finalizers", []),
               what="DPF finalizer")
    assert e.delete(sid) == "DELETING"
    seen_terminating = wait_until(lambda: (e.sim.dpuservice(name) or {}).get("metadata", {}).get("deletionTimestamp"),
                                  what="deletionTimestamp")
    assert seen_terminating
    assert e.state(sid)[0] == "DELETING"  # not DELETED while the finalizer is there
    e.wait_state(sid, "DELETED", timeout=30)
    assert e.sim.dpuservice(name) is None
    assert ("DELETING", "DELETED", "worker", "dpuservice_deleted") in e.history(sid)


def test_delete_during_in_flight_create_wins():
    e = env()
    e.sim.fault(verb="POST", path_regex=".*/dpuservices$", action="latency", latency_ms=1500, count=1)
    sid = e.create("delete-in-flight")
    name = e.state(sid)[3]
    time.sleep(0.5)  # the POST is in flight now
    assert e.delete(sid) == "DELETING"
    e.wait_state(sid, "DELETED", timeout=30)
    assert e.sim.dpuservice(name) is None
    hist = e.history(sid)
    assert ("CREATING", "DELETING", "api", "delete") in hist
    assert not any(h[1] == "READY" for h in hist), hist
    e.sim.clear_faults()


def test_unowned_object_with_the_generated_name_is_left_untouched():
    e = env()
    e.pg.sql("ALTER SYSTEM SET extsvc.enabled = off")
    e.pg.reload()
    time.sleep(0.3)
    try:
        sid = e.create("unowned")
        name = e.state(sid)[3]
        foreign = {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
                   "metadata": {"name": name, "namespace": "dpf-operator-system",
                                "labels": {"nico/extension-service-id": "someone-else"}},
                   "spec": {"deployInCluster": False, "security": {"privileged": False},
                            "helmChart": {"source": {"repoURL": "https://other.example.com",
                                                     "chart": "theirs", "version": "9.9.9"}}}}
        code, body = e.sim.kube("POST", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices", foreign)
        assert code == 201, body
    finally:
        e.pg.sql("ALTER SYSTEM RESET extsvc.enabled")
        e.pg.reload()
    st = e.wait_state(sid, "FAILED")
    assert "extension-service-id" in st[4] and "someone-else" not in st[4], st[4]
    live = e.sim.dpuservice(name)
    assert live["spec"]["helmChart"]["source"]["chart"] == "theirs"
    # deleting the FAILED service never deletes the foreign object
    e.delete(sid)
    e.wait_state(sid, "FAILED")
    assert e.sim.dpuservice(name) is not None


def test_invalid_object_is_failed_with_the_api_message():
    e = env()
    e.sim.fault(verb="POST", path_regex=".*/dpuservices$", action="status", status=422, count=1)
    sid = e.create("invalid-422")
    st = e.wait_state(sid, "FAILED")
    assert "422" in st[4], st[4]
    assert ("CREATING", "FAILED", "worker", "permanent_error") in e.history(sid)
    e.sim.clear_faults()


def test_forbidden_and_non_object_answers_are_retried_not_failed():
    """SPEC 2.5: a 403 (RBAC not granted yet) and a 2xx that is not the
    expected object retry with backoff and show the API's message."""
    e = env()
    e.sim.fault(verb="POST", path_regex=".*/dpuservices$", action="status", status=403, count=2)
    e.sim.fault(verb="POST", path_regex=".*/dpuservices$", action="status", status=200, count=1)
    sid = e.create("forbidden-then-ok")
    seen = set()

    def ready():
        st = e.state(sid)
        seen.add(st[4] or "")
        return st if st[0] == "READY" else False
    wait_until(ready, timeout=30, interval=0.02, what="READY after 403 and a Status 200")
    assert not any(r[1] == "FAILED" for r in e.history(sid)), e.history(sid)
    assert any("403" in m for m in seen), seen
    assert len([x for x in e.sim.dpuservices() if x["metadata"]["labels"].get("nico/extension-service-id") == sid]) == 1
    e.sim.clear_faults()


def test_transient_faults_are_retried_until_converged():
    e = env()
    for rule in (dict(action="status", status=503, count=2),
                 dict(action="status", status=429, retry_after=1, count=1),
                 dict(action="reset", count=1),
                 dict(action="hang", count=1)):
        e.sim.fault(verb="POST", path_regex=".*/dpuservices$", **rule)
    t0 = time.time()
    sid = e.create("transient")
    e.wait_state(sid, "READY", timeout=60)
    # Retry-After: 1 s was honoured
    assert time.time() - t0 >= 1.0
    assert len(e.sim.dpuservices()) >= 1
    e.sim.clear_faults()


def test_kubectl_style_delete_by_hand_is_repaired_at_resync():
    e = env()
    sid = e.create("drift")
    name = e.wait_state(sid, "READY")[3]
    uid = e.sim.dpuservice(name)["metadata"]["uid"]
    # remove the finalizer too, as an impatient operator would
    e.sim.kube("PATCH", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices/{name}",
               {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
    code, _ = e.sim.kube("DELETE", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices/{name}")
    assert code in (200, 202), code
    # with the watch the deletion wakes the service at once and the object may be back before a
    # look could see it gone: a new uid is the repair (the resync is the repair without the watch)
    e.pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: (e.sim.dpuservice(name) or {}).get("metadata", {}).get("uid") not in (None, uid), timeout=30,
               what="object re-created")
    wait_until(lambda: ("READY", "READY", "worker", "drift_recreated") in e.history(sid), what="history")


def test_spec_drift_is_patched_back_and_steady_state_writes_nothing():
    e = env()
    sid = e.create("drift-spec", helm_data(values={"x": 1}))
    name = e.wait_state(sid, "READY")[3]
    e.sim.kube("PATCH", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices/{name}",
               {"spec": {"helmChart": {"values": {"x": 2}}}}, content_type="application/merge-patch+json")
    e.pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: e.sim.dpuservice(name)["spec"]["helmChart"]["values"] == {"x": 1}, what="patched back")
    wait_until(lambda: ("READY", "READY", "worker", "drift_patched") in e.history(sid), what="history")
    # a resync with nothing to repair makes no write
    time.sleep(0.5)
    before = e.sim.counts()["management"]
    e.pg.sql("SELECT extsvc.request_resync()")
    time.sleep(1.5)
    after = e.sim.counts()["management"]
    # (the site Lease's renewals, every extsvc.lease_retry_period, are not the resync's)
    writes = sum(after.get(k, 0) - before.get(k, 0) for k in after
                 if k.split()[0] in ("POST", "PATCH", "PUT", "DELETE") and k.split()[1] != "leases")
    assert writes == 0, (before, after)


def test_worker_sigkill_mid_reconcile_converges_without_duplicates():
    e = env()
    e.sim.fault(verb="POST", path_regex=".*/dpuservices$", action="latency", latency_ms=2000, count=1)
    sid = e.create("sigkill")
    name = e.state(sid)[3]
    wait_until(lambda: e.pg.one(f"SELECT lease_owner FROM extsvc.reconciliation_queue WHERE service_id = {lit(sid)}::uuid"),
               what="lease taken")
    time.sleep(0.3)
    killed = e.pg.kill_workers()
    # the postmaster restarts the cluster after a crashed child; wait for it
    e.pg.wait_crash_restart(killed)
    e.wait_state(sid, "READY", timeout=60)
    assert sum(1 for o in e.sim.dpuservices() if o["metadata"]["name"] == name) == 1
    e.sim.clear_faults()


def test_postgres_restart_converges():
    e = env()
    e.sim.fault(verb="DELETE", path_regex=".*/dpuservices/.*", action="latency", latency_ms=1000, count=1)
    sid = e.create("pg-restart")
    name = e.wait_state(sid, "READY")[3]
    e.delete(sid)
    time.sleep(0.3)
    e.pg.restart()
    e.wait_state(sid, "DELETED", timeout=60)
    assert e.sim.dpuservice(name) is None
    e.sim.clear_faults()


def test_token_rotation():
    e = env()
    e.sim.write_token("e2e-token-2-rotated")
    sid = e.create("rotated-token")
    e.wait_state(sid, "READY", timeout=30)


def main():
    global ENV
    ENV = Env(dpus=4, workers=2)
    ok = False
    try:
        ok = run_tests([
            test_create_reaches_ready_with_the_rendered_object,
            test_intent_reaches_the_api_quickly_after_commit,
            test_update_sends_the_minimal_patch_and_promotes_the_revision,
            test_values_present_to_absent_and_empty_object,
            test_update_supersedes_a_pending_update,
            test_delete_waits_for_the_finalizer,
            test_delete_during_in_flight_create_wins,
            test_unowned_object_with_the_generated_name_is_left_untouched,
            test_invalid_object_is_failed_with_the_api_message,
            test_forbidden_and_non_object_answers_are_retried_not_failed,
            test_transient_faults_are_retried_until_converged,
            test_kubectl_style_delete_by_hand_is_repaired_at_resync,
            test_spec_drift_is_patched_back_and_steady_state_writes_nothing,
            test_worker_sigkill_mid_reconcile_converges_without_duplicates,
            test_postgres_restart_converges,
            test_token_rotation,
        ], "# e2e: DPUService lifecycle through the worker")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
