#!/usr/bin/python3
"""bench/fleet.py's re-list after a 410 (issue 26, part 1), apart so that fleet.py stays one
file per concern: every informer's stream cut and its next WATCH answered 410 Gone, nothing
changed meanwhile; what the re-list wrote, passed and woke."""
import common as c  # bench/common.py


def relist_after_410(e, budget, dpu_idle, requests):
    """Issue 26, part 1: every informer's stream cut, and its next WATCH answered 410 Gone (one
    dpfsim fault rule per resource), so each lists its whole resource again while nothing changed
    in either cluster. The re-list must write nothing and wake no row. It starts once the DPU
    queue is idle; DPU passes are counted from the database (last_observed_at), woken rows from
    the watcher's wake counter (extsvc.worker_status().watch_wakes) and the service rows'
    state_version, requests from dpfsim."""
    out = {}
    # a quiet start: nothing due or leased, so every pass below was caused by the re-list
    c.wait_until(lambda: dpu_idle(e), budget, 0.5, "DPU queue idle before the re-list")
    before = {r[0]: int(r[1]) for r in e.pg.sql("SELECT resource, lists FROM extsvc.watch_status()")}
    # DPU rows the watch made due (extsvc_watch_wakes_total), plus service rows given new intent
    woken_q = ("SELECT (SELECT coalesce(sum(watch_wakes), 0) FROM extsvc.worker_status()) + "
               "(SELECT coalesce(sum(state_version), 0) FROM extsvc.dpf_extension_service_reconciliations)")
    sv0 = int(e.pg.one(woken_q))
    t_db = e.pg.one("SELECT now()")
    e.sim.ctl("POST", "/counts/reset")
    for res in before:
        e.sim.fault(cluster="*", verb="WATCH", path_regex=f"/{res}$", status=410, count=1)
    cpu = c.CpuMeter(e)
    t0 = c.now()
    e.sim.cut_watches()

    def relisted():
        rows = {r[0]: (int(r[1]), r[2]) for r in e.pg.sql("SELECT resource, lists, current FROM extsvc.watch_status()")}
        return all(rows[k][0] > n and rows[k][1] == "t" for k, n in before.items())
    try:
        c.wait_until(relisted, budget, 0.1, "every informer listed again after its 410")
        out["relist_s"] = c.now() - t0
    finally:
        e.sim.clear_faults()
    c.settle(e, 2.0)
    out["relist_cpu"] = cpu.read()
    out["relist_requests"] = requests(e)
    out["relist_lists"] = {r[0]: int(r[1]) - before.get(r[0], 0)
                           for r in e.pg.sql("SELECT resource, lists FROM extsvc.watch_status()")}
    out["relist_dpu_passes"] = int(e.pg.one(
        f"SELECT count(*) FROM extsvc.dpu_reconciliations WHERE last_observed_at >= '{t_db}'"))
    out["relist_woken"] = int(e.pg.one(woken_q)) - sv0
    return out
