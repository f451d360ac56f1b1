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
