"""The fidelity suite on DPF releases below the minimum (v25.7, v24.10; test_fidelity.py runs
OLD_TESTS there)."""
import time

from extsvc_testkit.harness import device, helm_data, wait_until
from fidelity_kit import HOST, OLD_MISSING, PROFILE, detach_all, e, per_dpu, ready_service, wait_dpu

# On v25.7 and v24.10 (E2E_DPF_VERSION), the same scenarios against one Env started with
# --dpf-version: the worker reads the served CRDs at its start (issue 23, part 5), so a service is
# FAILED naming the missing field and v26.8, what cannot be held is refused, and deletes converge;
# no write of ours reaches DPF (checked over the whole run, from dpfsim's request log, last).

def our_writes():
    """Every write of the product to either cluster so far (the site Lease aside, which the
    lease process renews whatever DPF serves)."""
    return [r for r in e().sim.logged_requests()
            if r.get("method") not in ("GET", "HEAD") and r.get("resource") != "leases"]


def old_failed_service(name, target="PRIMARY", **kw):
    """A service created on the old release: FAILED (never READY) naming the field and v26.8."""
    states = set()
    sid = e().create(name, helm_data(values={"v": 1}), target=target, **kw)

    def failed():
        s = e().state(sid)
        states.add(s[0])
        return s if s[0] == "FAILED" else False
    s = wait_until(failed, timeout=30, interval=0.05, what=f"FAILED on {PROFILE}")
    assert "READY" not in states, states
    msg = s[4] or ""
    assert "lacks DPUService.spec.security" in msg and "needs DPF v26.8 or later" in msg, s
    return sid, msg


def test_old_release_level_is_shown_by_every_worker_and_the_gauge():
    rows = wait_until(lambda: (lambda r: r if r and all(x[0] for x in r) else None)(
        e().pg.sql("SELECT dpf_api_level, dpf_api_missing FROM extsvc.worker_status()")),
        timeout=30, what=f"the DPF API level detected on {PROFILE}")
    assert rows == [["below v26.8", OLD_MISSING[PROFILE]]] * len(rows) and len(rows) == 2, rows
    assert e().pg.one("SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_dpf_api_level' "
                      "AND labels->>'level' = 'below v26.8'") == "1"
    assert e().pg.one("SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_dpf_api_level' "
                      "AND labels->>'level' = 'v26.8+'") == "0"
    st, detail = e().pg.sql("SELECT status, detail FROM extsvc.health_check() WHERE \"check\" = 'dpf_api'")[0]
    assert st == "error" and OLD_MISSING[PROFILE] in detail and "v26.8" in detail, (st, detail)


def test_old_release_create_fails_naming_the_field_never_ready():
    sid, msg = old_failed_service("old-create")
    assert e().pg.one(f"SELECT count(*) FROM extsvc.service_history WHERE service_id = '{sid}' "
                      f"AND reason = 'unknown_fields'") == "1"
    assert e().state(sid)[2] is None, "nothing was applied"
    print(f"    {msg[:200]}")


def test_old_release_attach_is_refused_and_places_nothing():
    sid, _ = old_failed_service("old-attach", target="ALL_ACTIVE")
    iid = e().new_instance(HOST, tag="e", network=[1, 2])
    err = e().attach(iid, sid, check=False)
    text = str(err)
    assert "55000" in text or "only READY services can be attached" in text, err
    assert "FAILED" in text, err
    assert not e().pg.sql(f"SELECT 1 FROM extsvc.instance_extension_services_summary('{iid}')")
    assert not e().pg.sql(f"SELECT 1 FROM extsvc.instance_extension_service_status('{iid}')")
    assert not e().pg.sql("SELECT 1 FROM extsvc.dpu_desired_labels")
    for i in (1, 2):
        assert not e().sim.pods_on(i, sid)
        assert not [k for k in e().sim.node_labels(i) if k.startswith("nico/extsvc")], e().sim.node_labels(i)


def test_old_release_all_dpus_service_places_nothing():
    sid, _ = old_failed_service("old-all-dpus", target=None, deployment_scope="ALL_DPUS")
    time.sleep(1.0)  # a DPU pass had its chance
    assert not e().pg.sql(f"SELECT 1 FROM extsvc.dpu_desired_labels WHERE service_id = '{sid}'")
    assert e().state(sid)[0] == "FAILED"
    for i in range(4):
        assert not e().sim.pods_on(i, sid)
        assert not [k for k in e().sim.node_labels(i) if k.startswith("nico/extsvc")]


def test_old_release_update_and_retry_fail_again_naming_the_field():
    """An update (and an operator's retry_service) of a FAILED service is taken (CREATING: nothing
    was ever applied) and fails again with the same message: no create is sent for either."""
    sid, first = old_failed_service("old-update")
    for how in ("update", "retry"):
        if how == "update":
            e().update(sid, helm_data(values={"v": 2}))
        else:
            e().pg.sql(f"SELECT extsvc.retry_service('{sid}'::uuid)")
        s = wait_until(lambda: (lambda s: s if s[0] == "FAILED" and e().history(sid)[-1][3] == "unknown_fields"
                                and e().history(sid)[-2][3] == how else False)(e().state(sid)),
                       timeout=30, interval=0.05, what=f"FAILED again after the {how}")
        assert s[4] == first and s[1] == "2", s
    hist = e().history(sid)
    assert [(h[1], h[3]) for h in hist] == [
        ("CREATING", "create"), ("FAILED", "unknown_fields"), ("CREATING", "update"),
        ("FAILED", "unknown_fields"), ("CREATING", "retry"), ("FAILED", "unknown_fields")], hist


def test_old_release_instance_delete_converges():
    iid = e().new_instance(HOST, tag="e", network=[1, 2, 3])
    e().pg.sql(f"SELECT extsvc.delete_instance('{iid}'::uuid)")
    wait_until(lambda: e().pg.one(f"SELECT count(*) FROM extsvc.instances WHERE instance_id = '{iid}'") == "0",
               timeout=30, interval=0.1, what="the instance gone")


def test_old_release_service_delete_converges_with_history():
    sid, _ = old_failed_service("old-delete")
    assert e().delete(sid) == "DELETING"
    e().wait_state(sid, "DELETED", timeout=30)
    hist = e().history(sid)
    assert [h[1] for h in hist][-3:] == ["FAILED", "DELETING", "DELETED"], hist


def test_old_release_no_write_of_ours_reached_dpf():
    """Over the whole run (every scenario above): no DPUService POST/PATCH/DELETE, no DPUDevice or
    Node label patch; reads only, and the site Lease."""
    reqs = e().sim.logged_requests()
    assert any(r.get("resource") == "dpuservices" for r in reqs), "the worker never even read DPUServices"
    writes = our_writes()
    assert not writes, writes[:10]
    print(f"    {len(reqs)} requests logged, none a write to DPF")


def restart_workers_until(level):
    """The worker reads the served API at its start: ends both workers (the postmaster starts them
    again) and waits until each shows level."""
    for pid in e().pg.worker_pids():
        e().pg.sql(f"SELECT pg_terminate_backend({pid})")
    wait_until(lambda: (lambda r: r if len(r) == 2 and all(x[0] == level for x in r) else None)(
        e().pg.sql("SELECT dpf_api_level FROM extsvc.worker_status()")), timeout=60, interval=0.2,
        what=f"both workers detecting {level}")


def test_old_release_under_placed_services_shows_why_and_sends_nothing():
    """DPF downgraded under a running site (POST /profile, dpfsim's in-place downgrade): services
    were placed on v26.10, then the workers find the old release. A wanted DPU row is ERROR naming
    the field and v26.8; a detach cannot remove the key (the release has no DPUDevice.spec.cluster
    to patch), so it stays TERMINATING saying why, never TERMINATED while the key and the pod
    remain, and nothing is written; back on v26.10 the detach converges."""
    e().sim.ctl("POST", "/profile", {"dpf_version": "v26.10"})
    try:
        if PROFILE == "v24.10":  # v24.10 seeded no DPUDevice: v26.10 has them
            e().sim.ctl("POST", "/seed", {"dpus": 4})
        restart_workers_until("v26.8+")
        sid = ready_service("placed")
        iid = e().new_instance(HOST, tag="e", network=[1, 2])
        e().attach(iid, sid)
        wait_dpu(iid, sid, device(1), "RUNNING")
        wait_dpu(iid, sid, device(2), "RUNNING")
        e().sim.ctl("POST", "/profile", {"dpf_version": PROFILE})
        restart_workers_until("below v26.8")
        mark = len(e().sim.logged_requests())
        e().pg.sql("SELECT extsvc.request_resync()")
        for i in (1, 2):
            state, msg, _ = wait_until(lambda: (lambda r: r if r and r[0] == "ERROR" else False)(
                per_dpu(iid, sid).get(device(i))), timeout=30, interval=0.1, what=f"DPU {i} ERROR")
            assert OLD_MISSING[PROFILE].split(", ")[1] in msg and "v26.8 or later" in msg, msg
        e().attach(iid)
        deadline, seen = time.time() + 4, set()
        while time.time() < deadline:
            for dev, (state, msg, _) in per_dpu(iid, sid).items():
                seen.add(state)
                assert state != "TERMINATED", (dev, msg)
            time.sleep(0.1)
        state, msg, _ = per_dpu(iid, sid)[device(1)]
        assert state == "TERMINATING" and "the key is not removed" in msg and "v26.8 or later" in msg, (state, msg)
        assert e().sim.pods_on(1, sid), "the pod is still there"
        print(f"    {msg[:240]}")
        writes = [r for r in e().sim.logged_requests()[mark:]
                  if r.get("method") not in ("GET", "HEAD") and r.get("resource") != "leases"]
        assert not writes, writes[:10]
    finally:
        e().sim.ctl("POST", "/profile", {"dpf_version": "v26.10"})
        restart_workers_until("v26.8+")
    detach_all(iid)
    assert not e().sim.pods_on(1, sid) and not e().sim.pods_on(2, sid)
    assert e().pg.one(f"SELECT count(*) FROM extsvc.service_history WHERE service_id = '{sid}'") != "0"


OLD_TESTS = [
    test_old_release_level_is_shown_by_every_worker_and_the_gauge,
    test_old_release_create_fails_naming_the_field_never_ready,
    test_old_release_attach_is_refused_and_places_nothing,
    test_old_release_all_dpus_service_places_nothing,
    test_old_release_update_and_retry_fail_again_naming_the_field,
    test_old_release_instance_delete_converges,
    test_old_release_service_delete_converges_with_history,
    test_old_release_no_write_of_ours_reached_dpf,  # it judges the whole run so far
    # last: it runs DPF v26.10 first, then downgrades it under placed services
    test_old_release_under_placed_services_shows_why_and_sends_nothing,
]
