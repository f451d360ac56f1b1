#!/usr/bin/python3
"""Draws docs/fleet-convergence.png from the fleet runs of bench/fleet.py (a JSON file: a list of
{dpus, instances, progress: [[seconds, running], ...]}). Run by bench/fleet.py with Debian's
python3 (python3-matplotlib), whichever Python runs the benchmark."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        fleets = json.load(f)
    fig, ax = plt.subplots(figsize=(7, 4))
    for fl in fleets:
        if not fl.get("progress"):
            continue
        xs = [p[0] for p in fl["progress"]]
        ys = [100.0 * p[1] / fl["instances"] for p in fl["progress"]]
        ax.plot(xs, ys, label=f"{fl['dpus']} DPUs, {fl['instances']} attached")
    ax.set_xlabel("seconds after the attach commit")
    ax.set_ylabel("attachments RUNNING (%)")
    ax.set_title("Fleet convergence with the watch caches (bench/fleet.py)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
