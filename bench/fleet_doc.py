#!/usr/bin/python3
"""bench/fleet.py's output into docs/: the RUNNING curves (bench/plot_fleet.py) and its three
sections of docs/performance.md, each between its own markers."""
import json
import os
import re

import common as c  # bench/common.py

DOC = os.path.join(c.ROOT, "docs", "performance.md")
PLOT = os.path.join(c.ROOT, "docs", "fleet-convergence.png")
BUILD = os.environ.get("BUILD_DIR", os.path.join(c.ROOT, "build"))


def plot(fleets, dst=PLOT):
    """Draws the RUNNING curves with Debian's python3-matplotlib (bench/plot_fleet.py), which the
    Python running this benchmark may not see."""
    src = os.path.join(BUILD, "fleet-progress.json")
    os.makedirs(BUILD, exist_ok=True)
    with open(src, "w") as f:
        json.dump([{k: fl.get(k) for k in ("dpus", "instances", "progress")} for fl in fleets], f)
    r = c.subprocess.run(["/usr/bin/python3", os.path.join(c.ROOT, "bench", "plot_fleet.py"), src, dst],
                         capture_output=True, text=True)
    if r.returncode != 0:
        print(f"(no plot: {r.stderr.strip()[-300:]})")
        return False
    return True


def write_block(begin, end, body, title):
    with open(DOC) as f:
        doc = f.read()
    block = begin + "\n" + body + end
    if begin in doc:
        doc = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc = doc.rstrip() + f"\n\n## {title}\n\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(doc)


def write_doc(lines, podmem_lines, site_lines=()):
    if site_lines:
        write_block("<!-- site-scale-bench:begin (written by bench/fleet.py, part site) -->",
                    "<!-- site-scale-bench:end -->",
                    "\n".join(site_lines).strip() + "\n\n![RUNNING over time](site-scale-convergence.png)\n",
                    "Site scale: 25,000 DPUs (issue 26, part 1)")
    if lines:
        write_block("<!-- fleet-bench:begin (written by bench/fleet.py) -->", "<!-- fleet-bench:end -->",
                    "\n".join(lines).strip() + "\n\n![RUNNING over time](fleet-convergence.png)\n",
                    "Scale with the watch caches (issue 11)")
    if podmem_lines:
        write_block("<!-- pod-memory-bench:begin (written by bench/fleet.py) -->", "<!-- pod-memory-bench:end -->",
                    "\n".join(podmem_lines).strip() + "\n", "DPF's system DaemonSet pods in the watcher's cache")


WRITES = ("POST", "PUT", "PATCH", "DELETE")


def per_dpu(reqs, dpus):
    return sum(reqs.values()) / dpus if dpus else 0.0


def fleet_section(F, md, out, rate_limit_s):
    """The fleet table (part fleet, and part site at its sizes) and its lines of detail."""
    head = ["measure"] + [f"{f['dpus']} DPUs / {f['services']} services / {f['instances']} instances" for f in F]

    def row(name, fn):
        vals = []
        for f in F:
            try:
                vals.append(fn(f))
            except (KeyError, TypeError, ZeroDivisionError):
                vals.append(None)
        return tuple([name] + vals)
    md("Fleet (sim delays 0-50 ms)", head, [
        row("register + first observation of every DPU (s)", lambda f: f["register_s"]),
        row("services created -> READY (s)", lambda f: f["services_s"]),
        row("attach, one transaction (s)", lambda f: f["attach_txn_s"]),
        row("**attach commit -> all attachments RUNNING (s)**", lambda f: f["all_running_s"]),
        row("pure rate-limit time of the label patches, one client at 50/s, burst 100 (s)",
            lambda f: rate_limit_s(f["instances"])),
        row("**all RUNNING / pure rate-limit time**",
            lambda f: f"{f['all_running_s'] / rate_limit_s(f['instances']):.2f}"),
        row("first RUNNING seen (s after the commit)",
            lambda f: next(t for t, n in f["progress"] if n > 0)),
        row("attach: API calls per attached DPU",
            lambda f: f"{sum(f['attach_requests'].values()) / f['instances']:.3f}"),
        row("attach: worker CPU (s)", lambda f: f["attach_cpu"]["workers"]),
        row("attach: dpfsim CPU (s)", lambda f: f["attach_cpu"]["dpfsim"]),
        row("steady resync (no re-list due): request -> every DPU derived again (s)", lambda f: f["resync_s"]),
        row("**steady resync: API calls per DPU**",
            lambda f: f"{per_dpu(f['resync_requests'], f['dpus']):.4f}"),
        row("steady resync: writes", lambda f: sum(v for k, v in f["resync_requests"].items()
                                                   if k.split()[1] in WRITES)),
        row("steady resync: worker CPU (s)", lambda f: f["resync_cpu"]["workers"]),
        row("steady resync: dpfsim CPU (s)", lambda f: f["resync_cpu"]["dpfsim"]),
        row("**steady resync: worker CPU per DPU (ms)**",
            lambda f: f"{1e3 * f['resync_cpu']['workers'] / f['dpus']:.3f}"),
        row("resync with the safety-net re-list (every extsvc.relist_interval, default 1 h): request -> "
            "every DPU derived again (s)", lambda f: f["safety_s"]),
        row("**resync with the safety-net re-list: API calls per DPU / writes**",
            lambda f: f"{per_dpu(f['safety_requests'], f['dpus']):.4f} / "
                      f"{sum(v for k, v in f['safety_requests'].items() if k.split()[1] in WRITES)}"),
        row("**API calls per DPU per resync, averaged over an hour of 5-minute resyncs**",
            lambda f: f"{(11 * per_dpu(f['resync_requests'], f['dpus']) + per_dpu(f['safety_requests'], f['dpus'])) / 12:.4f}"),
        row("resync with the safety-net re-list: worker / dpfsim CPU (s)",
            lambda f: f"{f['safety_cpu']['workers']:.1f} / {f['safety_cpu']['dpfsim']:.1f}"),
        row("re-list after a 410 on every informer: cut -> all listed and watching (s)",
            lambda f: f["relist_s"]),
        row("**re-list after a 410: writes / DPU passes / rows woken**",
            lambda f: f"{sum(v for k, v in f['relist_requests'].items() if k.split()[1] in WRITES)} / "
                      f"{f['relist_dpu_passes']} / {f['relist_woken']}"),
        row("re-list after a 410: API calls per DPU", lambda f: f"{per_dpu(f['relist_requests'], f['dpus']):.4f}"),
        row("re-list after a 410: worker / dpfsim CPU (s)",
            lambda f: f"{f['relist_cpu']['workers']:.1f} / {f['relist_cpu']['dpfsim']:.1f}"),
        row("**worker 0 (watcher) private memory, RssAnon (MiB)**", lambda f: f["rss"][0][0]),
        row("of which the watcher's PostgreSQL memory contexts (MiB)", lambda f: f["pg_contexts"]),
    row("worker 1 private memory, RssAnon (MiB)", lambda f: f["rss"][1][0]),
        row("worker 0 (watcher) RssAnon after the safety-net re-list (MiB)", lambda f: f["rss_safety"][0][0]),
        row("worker 0 / 1 peak VmHWM (MiB)", lambda f: f"{f['rss'][0][1]:.0f} / {f['rss'][1][1]:.0f}"),
        row("dpfsim VmRSS (MiB)", lambda f: f["sim_mem"][0]),
    ])
    for f in F:
        prog = f.get("progress") or []
        step = max(1, len(prog) // 12)
        out(f"\n{f['dpus']} DPUs, attachments RUNNING over time (s, count): "
            f"{prog[::step] + ([prog[-1]] if prog and prog[-1] not in prog[::step] else [])}")
        if f.get("failed"):
            out(f"\n{f['dpus']} DPUs DID NOT FINISH: {f['failed']}")
        out(f"\n{f['dpus']} DPUs, attach requests by verb: {f.get('attach_requests')}; steady resync: "
            f"{f.get('resync_requests')}; with the safety-net re-list: {f.get('safety_requests')}; informers (resource, objects, lists, events): {f.get('watch')}; "
            f"re-list after a 410: requests {f.get('relist_requests')}, lists per informer {f.get('relist_lists')}")
