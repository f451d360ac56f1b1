#!/usr/bin/python3
"""End-to-end (issue 24, part 4.3): a worker notices a SIGTERM and its postmaster's death within
a second, also in the middle of a burst its client throttles. The workers stop at WaitLatch on
WL_EXIT_ON_PM_DEATH, but a batch of DPU label patches at a low extsvc.kube_qps spends seconds in
the client's token bucket and in transfers: the token bucket waits on the latch through the call's
budget (kube::Budget, WL_POSTMASTER_DEATH), and the budget's stop() (before a call, after each wait,
during transfers) asks PostmasterIsAlive() too, so an orphaned worker sends nothing more. A slow
request is a transfer on a curl multi waited for on the latch, postmaster death and its sockets:
SIGTERM ends it within a second too."""
import os
import signal
import time

from extsvc_testkit.harness import Env, helm_data, host_id, run_tests, wait_until

ENV = None
DPUS = 10


def entry_time(r):
    """dpfsim's arrival time of a logged request, in seconds since the epoch."""
    t = r["time"]
    if isinstance(t, (int, float)):
        return float(t)
    import calendar
    whole, _, frac = t.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (float("0." + frac) if frac else 0.0)


def device_patches(since=0.0):
    reqs = ENV.sim.requests(2000)["requests"]
    return [r for r in reqs if r["method"] == "PATCH" and r.get("resource") == "dpudevices"
            and entry_time(r) >= since]


def running(pid):
    """The process exists and has not exited (an orphan's zombie waits for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def quiet(seconds):
    """No DPUDevice patch arrived in the last `seconds` (a burst is over)."""
    return not device_patches(since=time.time() - seconds)


def test_sigterm_stops_a_throttled_burst_within_a_second():
    for i in range(DPUS):
        ENV.register_dpu(i, host_id(f"pm{i}"), True)
    t0 = time.time()
    # a site-wide service: one label patch per DPUDevice, 2 a second (kube_qps 2, burst 1)
    sid = ENV.create("term-site-wide", helm_data(), target=None, deployment_scope="ALL_DPUS")
    wait_until(lambda: device_patches(t0), timeout=60, interval=0.02,
               what="the first DPUDevice patch")
    (worker,) = ENV.pg.worker_pids()
    t_term = time.time()
    os.kill(worker, signal.SIGTERM)
    gone = wait_until(lambda: not running(worker), timeout=15, interval=0.02,
                      what="the worker gone")
    took = time.time() - t_term
    # the postmaster starts it again after 5 s (bgw_restart_time); look before that
    time.sleep(max(0.0, t_term + 3.0 - time.time()))
    late = device_patches(since=t_term + 1.0)
    print(f"    {len(device_patches(t0))} DPUDevice patches before the restart; the worker was gone "
          f"{took:.2f} s after SIGTERM; patches 1-3 s after it: {len(late)}")
    assert gone and not late, [(r["path"], entry_time(r) - t_term) for r in late]
    assert len(device_patches(t0)) < DPUS, "the burst ended before SIGTERM: nothing was tested"
    assert took < 1.0, f"the worker outlived SIGTERM by {took:.2f} s"
    # the restarted worker finishes the burst; the next test starts on a quiet cluster
    wait_until(lambda: len(device_patches(t0)) >= DPUS and quiet(2.0), timeout=60, interval=0.2,
               what="the restarted worker's burst over")
    del sid


def fault_hits(fid):
    for f in ENV.sim.ctl("GET", "/faults")["faults"]:
        if f["id"] == fid:
            return f["hits"]
    return 0


def test_sigterm_ends_a_slow_request_within_a_second():
    # the POST of the DPUService is answered 2.8 s after it arrived (the harness's http_timeout
    # is 3 s): a worker that waited for it would outlive SIGTERM by more than 2 s
    fid = ENV.sim.fault(verb="POST", path_regex="/dpuservices", action="latency",
                        latency_ms=2800, count=1)["id"]
    sid = ENV.create("term-slow-post", helm_data())
    wait_until(lambda: fault_hits(fid) == 1, timeout=30, interval=0.02, what="the POST in flight")
    (worker,) = ENV.pg.worker_pids()
    time.sleep(0.2)
    t_term = time.time()
    os.kill(worker, signal.SIGTERM)
    gone = wait_until(lambda: not running(worker), timeout=15, interval=0.02,
                      what="the worker gone")
    took = time.time() - t_term
    print(f"    the worker was gone {took:.2f} s after SIGTERM, its POST in flight")
    assert gone
    assert took < 1.0, f"the worker outlived SIGTERM by {took:.2f} s (its request in flight)"
    ENV.sim.clear_faults()
    # the restarted worker sends the POST again; the next test starts on a quiet cluster
    ENV.wait_state(sid, "READY", timeout=60)
    wait_until(lambda: quiet(2.0), timeout=30, interval=0.2, what="a quiet cluster")


def test_a_dead_postmaster_stops_a_throttled_burst_within_a_second():
    t0 = time.time()
    # another site-wide service: one label patch per DPUDevice, 2 a second (kube_qps 2, burst 1)
    sid = ENV.create("pm-site-wide", helm_data(), target=None, deployment_scope="ALL_DPUS")
    wait_until(lambda: device_patches(t0), timeout=60, interval=0.02,
               what="the first DPUDevice patch")
    pid = int(open(os.path.join(ENV.pg.data, "postmaster.pid")).readline())
    workers = ENV.pg.worker_pids()
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    gone = wait_until(lambda: not any(running(w) for w in workers), timeout=15,
                      interval=0.02, what="the orphaned workers gone")
    took = time.time() - t_kill
    time.sleep(1.0)
    patches = device_patches(t0)
    late = [r for r in patches if entry_time(r) > t_kill + 1.0]
    print(f"    {len(patches)} DPUDevice patches in all; the workers were gone {took:.2f} s after the "
          f"postmaster's SIGKILL; patches later than 1 s after it: {len(late)}")
    assert gone and not late, [(r["path"], entry_time(r) - t_kill) for r in late]
    assert len(patches) < DPUS, "the burst ended before the kill: nothing was tested"
    assert took < 1.0, f"the workers outlived their postmaster by {took:.2f} s"
    del sid


def main():
    global ENV
    ENV = Env(dpus=DPUS, workers=1, extra={"extsvc.kube_qps": "2", "extsvc.kube_burst": "1"})
    ok = False
    try:
        # the postmaster's death last: nothing runs after it
        ok = run_tests([test_sigterm_stops_a_throttled_burst_within_a_second,
                        test_sigterm_ends_a_slow_request_within_a_second,
                        test_a_dead_postmaster_stops_a_throttled_burst_within_a_second],
                       "# e2e: SIGTERM and postmaster death during a throttled burst")
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
