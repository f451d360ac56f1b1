#!/usr/bin/python3
"""End-to-end: the watcher's informers (issue 11). A watch dropped mid-stream
loses no event (it resumes from its resourceVersion); a resourceVersion older
than the API server's window answers 410 and the informer lists again; a
DPU-cluster partition keeps the last observation until the staleness bound
(extsvc.observation_max_age) turns it UNKNOWN, and recovery brings RUNNING
back; events for objects NICo does not own are ignored without waking
anything. Two groups, each with its own cluster: the second runs with a short
resync interval and staleness bound."""
import json
import os
import sys
import threading
import time

from extsvc_testkit.harness import Env, host_id, run_tests, wait_until, device, node

ENV = None
NS = "dpf-operator-system"
HOSTS = [host_id(f"{h}1") for h in ("a", "b", "c", "d")]


def e():
    return ENV


def setup_fleet(env, n):
    for i in range(n):
        env.register_dpu(i, HOSTS[i], True)


def summary(iid):
    return {sid: row[0] for sid, row in e().summary_rows(iid).items() if row[1] == "f"}


def watch_status():
    rows = e().pg.sql("SELECT resource, synced, current, objects, lists, watches, events, expired, errors "
                      "FROM extsvc.watch_status()")
    return {r[0]: {"synced": r[1] == "t", "current": r[2] == "t", "objects": int(r[3]), "lists": int(r[4]),
                   "watches": int(r[5]), "events": int(r[6]), "expired": int(r[7]), "errors": int(r[8])}
            for r in rows}


def watcher():
    return {k: int(v) for k, v in zip(
        ("completed", "claimed", "watch_wakes", "http_requests", "iterations"),
        e().pg.sql("SELECT completed, claimed, watch_wakes, http_requests, iterations FROM extsvc.worker_status() "
                   "WHERE slot = 0")[0])}


def watcher_cpu_s():
    pid = e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def all_watched():
    s = watch_status()
    return len(s) == 7 and all(v["synced"] and v["current"] for v in s.values())


# --- group 1: the product defaults for resync and staleness ------------------------------------

def test_a_watch_cut_mid_stream_loses_no_event():
    """dpfsim cuts every watch stream over and over while an attach converges: the informers
    resume from their last resourceVersion (no LIST) and the attach reaches RUNNING through
    events alone (a converging DPU is not polled; the safety-net look comes after 60 s)."""
    wait_until(all_watched, timeout=30, what="every informer listed and watching")
    sid = e().ready_service("cut")
    iid = e().new_instance(HOSTS[0])
    before = watch_status()
    stop = threading.Event()
    cuts = [0]

    def cutter():
        while not stop.is_set():
            e().sim.cut_watches()
            cuts[0] += 1
            time.sleep(0.15)
    t = threading.Thread(target=cutter)
    t.start()
    w0 = watcher()
    try:
        t0 = time.time()
        e().attach(iid, sid)
        wait_until(lambda: summary(iid).get(sid) == "RUNNING", timeout=30, what="RUNNING while cut")
        took = time.time() - t0
    finally:
        stop.set()
        t.join()
    # DPF's Node label and the pod's readiness arrived as events that woke the DPU's row
    w1 = watcher()
    assert w1["watch_wakes"] > w0["watch_wakes"], (w0, w1)
    wait_until(all_watched, timeout=30, what="watching again")
    after = watch_status()
    for r in ("dpudevices", "nodes", "pods"):
        assert after[r]["watches"] > before[r]["watches"], (r, before[r], after[r])
        assert after[r]["lists"] == before[r]["lists"], (r, "resumed by a LIST", before[r], after[r])
    print(f"    {cuts[0]} cuts; RUNNING after {took:.2f} s; watches "
          f"{ {r: after[r]['watches'] - before[r]['watches'] for r in after} }")
    e().attach(iid)
    wait_until(lambda: summary(iid) == {}, timeout=30, what="detached")


def proc_fds_and_rss(pid):
    """Open descriptors and private resident memory (RssAnon, KiB) of a process."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
    return fds, rss


def test_rebuilding_the_wait_set_leaks_neither_descriptors_nor_memory():
    """Issue 24 (4.1): the watcher's WaitEventSet (its latch, postmaster death and curl's sockets)
    is rebuilt whenever curl's sockets change, in TopMemoryContext, with an epoll descriptor of its
    own. Twenty rounds of ended and resumed streams (every informer's, at least one rebuild a round)
    leave the descriptor count where it was and the private memory within 1 MiB: with the set not
    freed before the next (FreeWaitEventSet removed) this counted 71 -> 91 descriptors."""
    wait_until(all_watched, timeout=30, what="every informer listed and watching")
    pid = int(e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0"))

    def opened():
        return sum(v["watches"] for v in watch_status().values())

    def cut(n):
        # a stream the server ends cleanly after a second is watched again at once (one that
        # ends sooner, or breaks, backs off): every round replaces each informer's socket. A
        # round waits for all seven streams to be open again before the next one's second
        # starts, so a slow machine makes the rounds longer, never fewer streams resumed.
        for _ in range(n):
            w = opened()
            time.sleep(1.1)
            e().sim.cut_watches(mode="end")
            wait_until(lambda: opened() >= w + 7 and all_watched(), timeout=30, interval=0.1,
                       what="every informer watching again")
    cut(3)  # warm up: curl's connection cache and the allocator reach their working size
    time.sleep(0.5)
    fds0, rss0 = proc_fds_and_rss(pid)
    w0 = sum(v["watches"] for v in watch_status().values())
    cut(20)
    time.sleep(0.5)
    fds1, rss1 = proc_fds_and_rss(pid)
    resumed = sum(v["watches"] for v in watch_status().values()) - w0
    assert int(e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0")) == pid, "the watcher restarted"
    assert resumed >= 100, f"only {resumed} watch streams were opened again: too few rebuilds to tell"
    assert fds1 <= fds0 + 2, f"descriptors {fds0} -> {fds1} over {resumed} resumed streams"
    assert rss1 - rss0 < 1024, f"RssAnon {rss0} -> {rss1} KiB over {resumed} resumed streams"
    print(f"    {resumed} watch streams resumed: descriptors {fds0} -> {fds1}, RssAnon {rss0} -> {rss1} KiB")


def lists_of_work():
    """LIST requests dpfsim served for the workers' informers (the lease process' own are apart)."""
    c = e().sim.counts()
    return sum(v for cl in ("management", "dpu") for k, v in (c.get(cl) or {}).items()
               if k.startswith("LIST ") and not k.endswith(" leases"))


def reload_and_wait(setting, value):
    """ALTER SYSTEM, pg_reload_conf(), then until the watcher read the new configuration. Its loop
    goes round for its latch (SIGHUP sets it), not for watch events: the iteration the signal
    starts reads the configuration, but the one seen first may have started just before the
    signal. A second pg_reload_conf() (the same settings) sets the latch again, so the iteration
    after that one starts at once, and it has read them."""
    def iterations():
        return int(e().pg.one("SELECT iterations FROM extsvc.worker_status() WHERE slot = 0"))
    t0, it0 = time.time(), iterations()
    e().pg.sql(f"ALTER SYSTEM SET {setting} = {value}" if value is not None else f"ALTER SYSTEM RESET {setting}")
    e().pg.sql("SELECT pg_reload_conf()")
    wait_until(lambda: iterations() >= it0 + 1, timeout=5, interval=0.02, what="the watcher woke for the reload")
    e().pg.sql("SELECT pg_reload_conf()")
    wait_until(lambda: iterations() >= it0 + 2, timeout=5, interval=0.02, what="the watcher read the new configuration")
    return time.time() - t0


def test_a_reload_that_changes_no_cluster_setting_keeps_the_caches():
    """Issue 24, part 4.4: a reload rebuilds the clients and caches only when what they are built
    from changed (the clusters' settings, the files they name, the watch switch): a reload for
    another setting re-lists nothing; a change of the clients' rate limit does."""
    wait_until(all_watched, timeout=30, what="every informer listed and watching")
    before = lists_of_work()
    took = [reload_and_wait("extsvc.batch_size", "7"), reload_and_wait("extsvc.log_level", "'info'")]
    time.sleep(1)
    assert lists_of_work() == before, (before, lists_of_work())
    assert all_watched()
    took.append(reload_and_wait("extsvc.kube_qps", "49"))
    wait_until(lambda: lists_of_work() >= before + 7 and all_watched(), timeout=30,
               what="the rebuilt caches listed every resource again")
    print(f"    LISTs: {before} before, {before} after two unrelated reloads, {lists_of_work()} after a "
          f"kube_qps change; each reload read by the watcher within {max(took):.2f} s")
    for name in ("extsvc.batch_size", "extsvc.log_level", "extsvc.kube_qps"):
        reload_and_wait(name, None)


def test_a_resync_re_lists_the_caches_only_once_the_relist_interval_has_passed():
    """Issue 26, part 1: the watch keeps the caches current, so a resync compares them and lists
    nothing until extsvc.relist_interval (default 1 h) has passed since they last listed; then
    every informer lists again first (the safety net), and the next resync lists nothing again."""
    wait_until(all_watched, timeout=30, what="every informer listed and watching")
    before = lists_of_work()
    e().pg.resync("ok")
    time.sleep(0.5)
    assert lists_of_work() == before, ("a resync between two re-lists listed", before, lists_of_work())
    reload_and_wait("extsvc.relist_interval", "0")
    try:
        per_resource = {k: v["lists"] for k, v in watch_status().items()}
        e().pg.resync("ok")
        # the resync waits for the re-lists, except an informer's that was backing off (it must
        # not hold a resync back): that one lists once its backoff is over
        wait_until(lambda: (lambda after: all(after[k] > n for k, n in per_resource.items() if k != "events"))(
            {k: v["lists"] for k, v in watch_status().items()}), timeout=30, interval=0.1,
            what=f"every informer listed again (lists before: {per_resource})")
        assert lists_of_work() >= before + 6, (before, lists_of_work())
    finally:
        reload_and_wait("extsvc.relist_interval", None)
    wait_until(all_watched, timeout=30, what="watching after the re-list")
    before = lists_of_work()
    e().pg.resync("ok")
    time.sleep(0.5)
    assert lists_of_work() == before, ("the re-list just done is not due again", before, lists_of_work())


def test_an_expired_resource_version_makes_the_informer_list_again():
    """With the API server's event window shrunk to a few events, a watch that resumes after a
    cut finds its resourceVersion gone: 410, a new LIST, and what happened meanwhile is seen."""
    wait_until(all_watched, timeout=30, what="watching")
    sid = e().ready_service("expired")
    iid = e().new_instance(HOSTS[1])
    before = watch_status()
    window = e().sim.watch_config()["window_events"]
    e().sim.watch_config(window_events=1)
    try:
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": False})  # the DPU streams break
        e().attach(iid, sid)  # label patched; DPF's Node label and the pod follow while blind
        time.sleep(1.5)
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": True})
        wait_until(lambda: summary(iid).get(sid) == "RUNNING", timeout=40, what="RUNNING after the re-list")
        after = watch_status()
        assert after["pods"]["expired"] + after["nodes"]["expired"] > \
            before["pods"]["expired"] + before["nodes"]["expired"], (before, after)
        assert after["pods"]["lists"] > before["pods"]["lists"], (before["pods"], after["pods"])
    finally:
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": True})
        e().sim.watch_config(window_events=window)
    e().attach(iid)
    wait_until(lambda: summary(iid) == {}, timeout=30, what="detached")


def test_events_for_objects_nico_does_not_own_wake_nothing():
    """200 pods without our label and 5 rounds of foreign label changes on every Node and
    DPUDevice: the pod events arrive (the pod informer has no label selector since a chart may
    drop our label, issue 23) but the pods, neither labelled nor a DaemonSet's, are not kept; the
    Node and DPUDevice events arrive and are dropped; not a single DPU is woken, claimed or
    completed; and the watcher's loop does not go round for them (its wait pumps the caches and
    ends only for a change to publish, a changed informer state, its latch or its timeout:
    before, every socket event cost a whole iteration, 381 for these events)."""
    wait_until(all_watched, timeout=30, what="watching")
    # the earlier tests' pods are gone (their DELETED events are not part of this test)
    wait_until(lambda: watch_status()["pods"]["objects"] == 0, timeout=30, what="no pod of ours left")
    # and their work is done: no row leased or due within the next 10 s (a removal still polled,
    # a keep_polling look or a 60 s safety-net look of an earlier attach would be counted below as
    # a pass this test caused)
    wait_until(lambda: e().pg.one(
        "SELECT count(*) FROM (SELECT lease_token, next_due_at FROM extsvc.dpu_reconciliations UNION ALL "
        "SELECT lease_token, next_due_at FROM extsvc.dpf_extension_service_reconciliations) q "
        "WHERE q.lease_token IS NOT NULL OR q.next_due_at < now() + interval '10 s'") == "0",
        timeout=90, interval=0.2, what="no work leased or due within 10 s")
    time.sleep(0.5)
    w0, s0, cpu0 = watcher(), watch_status(), watcher_cpu_s()
    for k in range(200):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"foreign-{k}", "namespace": NS, "labels": {"app": "other"}},
               "spec": {"nodeName": node(k % 4), "containers": [{"name": "c", "image": "busybox"}]}}
        code, body = e().sim.kube("POST", f"/api/v1/namespaces/{NS}/pods", pod, base=e().sim.dpu)
        assert code == 201, body
    for r in range(5):
        for i in range(4):
            code, _ = e().sim.kube("PATCH", f"/api/v1/nodes/{node(i)}",
                                   {"metadata": {"labels": {"example.com/round": str(r)}}},
                                   content_type="application/merge-patch+json", base=e().sim.dpu)
            assert code == 200
            code, _ = e().sim.kube(
                "PATCH", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(i)}",
                {"spec": {"cluster": {"nodeLabels": {"example.com/round": str(r)}}}},
                content_type="application/merge-patch+json")
            assert code == 200
    wait_until(lambda: watch_status()["nodes"]["events"] >= s0["nodes"]["events"] + 20, timeout=20,
               what="the Node events arrived")
    time.sleep(1)
    w1, s1, cpu1 = watcher(), watch_status(), watcher_cpu_s()
    ignored = sum(s1[r]["events"] - s0[r]["events"] for r in s1)
    assert s1["pods"]["objects"] == s0["pods"]["objects"], (s0["pods"], s1["pods"])  # none kept
    assert w1["watch_wakes"] == w0["watch_wakes"], (w0, w1)
    assert w1["claimed"] == w0["claimed"] and w1["completed"] == w0["completed"], (w0, w1)
    assert w1["http_requests"] == w0["http_requests"], (w0, w1)
    # a few: the loop's own timeouts (10 s at most, the next due row, the resync) while they ran
    iterations = w1["iterations"] - w0["iterations"]
    assert iterations <= 5, f"{iterations} watcher loop iterations for {ignored} foreign events"
    print(f"    {ignored} foreign events received and dropped in {iterations} watcher loop iterations; "
          f"watcher CPU {1000 * (cpu1 - cpu0):.0f} ms for them (includes its loop)")
    for k in range(200):
        e().sim.kube("DELETE", f"/api/v1/namespaces/{NS}/pods/foreign-{k}", base=e().sim.dpu)


def test_a_nico_label_added_by_hand_wakes_its_dpu_which_removes_it_only_when_ours():
    """The counterpart of the test above: a NICo label key put on DPUDevice 3 by hand is a
    change the product reads. Its event wakes that DPU by the DPUDevice's name (watch_wakes,
    the DPU work row claimed by id); the resync is 5 minutes away and no service changed, so
    nothing else could have woken it. Issue 25: the pass removes only keys this site wrote
    (its registry of placement keys): the key of one of its services goes, a key it never
    wrote stays, untouched, and is reported in the DPU's observation."""
    wait_until(all_watched, timeout=30, what="watching")
    sid = e().ready_service("by-hand")  # its key is registered; no instance wants it on DPU 3
    ours = e().pg.one(f"SELECT placement_label_key FROM extsvc.services WHERE service_id = '{sid}'")
    foreign = "nico/extsvc-byhand" + "a" * 14
    path = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{device(3)}"

    def labels():
        code, body = e().sim.kube("GET", path)
        assert code == 200, body
        return ((body.get("spec") or {}).get("cluster") or {}).get("nodeLabels") or {}
    w0 = watcher()
    code, _ = e().sim.kube("PATCH", path, {"spec": {"cluster": {"nodeLabels": {ours: "enabled", foreign: "enabled"}}}},
                           content_type="application/merge-patch+json")
    assert code == 200
    wait_until(lambda: ours not in labels(), timeout=15, what="the hand-made label of this site removed")
    w1 = watcher()
    assert w1["watch_wakes"] > w0["watch_wakes"], (w0, w1)
    assert foreign in labels(), labels()
    obs = wait_until(lambda: (lambda o: o if o and foreign in (o.get("foreign_keys") or []) else None)(
        json.loads(e().pg.one(f"SELECT observation::text FROM extsvc.dpu_reconciliations r JOIN extsvc.dpus d "
                              f"ON d.machine_id = r.dpu_machine_id WHERE d.dpu_device_name = '{device(3)}'") or "null")),
        timeout=15, what="the foreign key reported in the observation")
    time.sleep(1)
    assert foreign in labels(), "a key this site never wrote was removed"
    print(f"    ours removed, {foreign} left alone and reported ({obs['foreign_keys']}); "
          f"{w1['watch_wakes'] - w0['watch_wakes']} DPU wake(s) by the watch")
    e().sim.kube("PATCH", path, {"spec": {"cluster": {"nodeLabels": {foreign: None}}}},
                 content_type="application/merge-patch+json")


# --- group 2: a short staleness bound ----------------------------------------------------------

def test_a_partition_turns_unknown_after_the_staleness_bound_and_recovers():
    """The DPU cluster becomes unreachable: its watches break and cannot resume. The attachment
    keeps RUNNING (observed before the partition) until extsvc.observation_max_age passes, then
    reads UNKNOWN, and the resync persists it; once reachable again the informers resume or list
    and RUNNING comes back."""
    wait_until(all_watched, timeout=30, what="watching")
    sid = e().ready_service("partition")
    iid = e().new_instance(HOSTS[2])
    e().attach(iid, sid)
    wait_until(lambda: summary(iid).get(sid) == "RUNNING", timeout=30, what="RUNNING")
    bound = float(e().pg.one("SELECT extract(epoch FROM extsvc._observation_max_age())"))
    e().sim.ctl("POST", "/dpu-cluster", {"reachable": False})
    try:
        t0 = time.time()
        wait_until(lambda: not watch_status()["pods"]["current"], timeout=20, what="the pods watch broken")
        states = []
        while time.time() - t0 < bound + 10:
            states.append((round(time.time() - t0, 1), summary(iid).get(sid)))
            if states[-1][1] == "UNKNOWN":
                break
            time.sleep(0.25)
        unknown_at = states[-1][0] if states[-1][1] == "UNKNOWN" else None
        assert unknown_at is not None, states
        # never anything but RUNNING before it, and not before the bound (less the time the
        # last observation had already aged when the partition began: a resync interval)
        assert all(s == "RUNNING" for _, s in states[:-1]), states
        resync = float(e().pg.one("SELECT extract(epoch FROM current_setting('extsvc.resync_interval')::interval)"))
        assert unknown_at >= bound - resync - 1, (unknown_at, bound, states)
        # the resync persists it, with its reason, in the history
        wait_until(lambda: e().pg.one(
            f"SELECT count(*) FROM extsvc.dpf_extension_service_attachments WHERE instance_id = '{iid}' "
            "AND deployment_state = 'UNKNOWN'") == "1", timeout=20, what="UNKNOWN persisted")
        assert e().pg.one(f"SELECT reason FROM extsvc.dpu_state_history WHERE instance_id = '{iid}' "
                          "ORDER BY id DESC LIMIT 1") == "observation_stale"
        assert e().pg.one(f"SELECT extsvc.instance_extension_services_ready('{iid}')") == "f"
        print(f"    RUNNING for {unknown_at:.1f} s of a {bound:.0f} s bound, then UNKNOWN")
    finally:
        e().sim.ctl("POST", "/dpu-cluster", {"reachable": True})
    t1 = time.time()
    wait_until(lambda: summary(iid).get(sid) == "RUNNING", timeout=60, what="RUNNING after recovery")
    print(f"    RUNNING again {time.time() - t1:.1f} s after the partition ended")


def main():
    global ENV
    ok = True
    ENV = Env(dpus=4, workers=2)
    try:
        setup_fleet(ENV, 4)
        ok = run_tests([
            test_a_watch_cut_mid_stream_loses_no_event,
            test_rebuilding_the_wait_set_leaks_neither_descriptors_nor_memory,
            test_a_reload_that_changes_no_cluster_setting_keeps_the_caches,
            test_a_resync_re_lists_the_caches_only_once_the_relist_interval_has_passed,
            test_an_expired_resource_version_makes_the_informer_list_again,
            test_events_for_objects_nico_does_not_own_wake_nothing,
            test_a_nico_label_added_by_hand_wakes_its_dpu_which_removes_it_only_when_ours,
        ], "# e2e: watch (product resync and staleness defaults)") and ok
    finally:
        ENV.close(keep=not ok)
    # the staleness bound is at least twice the resync interval: 2 s resync, 5 s bound
    ENV = Env(dpus=4, workers=2, extra={"extsvc.resync_interval": "'2s'",
                                        "extsvc.observation_max_age": "'5s'"})
    ok2 = False
    try:
        setup_fleet(ENV, 4)
        ok2 = run_tests([
            test_a_partition_turns_unknown_after_the_staleness_bound_and_recovers,
        ], "# e2e: watch (2 s resync, 5 s staleness bound)")
    finally:
        ENV.close(keep=not ok2)
    return ok and ok2


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
