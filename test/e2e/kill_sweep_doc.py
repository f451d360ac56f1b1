"""The kill sweep's table in docs/reliability.md (WRITE_DOC=1 test_kill_sweep.py): one row per
point, the convergence figures and the run record that the reliability-doc suite checks."""
import re
import statistics

from extsvc_testkit import invariants


def write(results, total_s, final, converge_s, workers):
    done = [r for r in results if r["seconds"] is not None]
    secs = [r["seconds"] for r in done]
    stamp = invariants.run_stamp()
    record = {**stamp, "points": len(results), "fired": sum(r["fired"] for r in results),
              "passed": sum(r["ok"] for r in results), "median_s": statistics.median(secs), "max_s": max(secs),
              "limit_s": converge_s, "violations": sum(len(r["violations"]) for r in results) + len(final),
              "final_violations": len(final), "seconds": round(total_s, 1), "workers": workers,
              "failed_points": [r["name"] for r in results if not r["ok"]]}
    lines = ["| point | Kubernetes request killed | what it proves | fired | converged after the kill | "
             "invariant violations |", "|---|---|---|---|---:|---:|"]
    for r in results:
        note = f" ({r['note']})" if r["note"] else ""
        request = re.sub(r"extsvc-[a-z0-9]{20}", "extsvc-…", r["request"])
        lines.append(f"| `{r['name']}` | `{request}` | {r['proves']}{note} | {'yes' if r['fired'] else 'no'} "
                     f"| {'%.2f' % r['seconds'] if r['seconds'] is not None else '-'} s | {len(r['violations'])} |")
    lines += ["", f"{sum(r['ok'] for r in results)} of {len(results)} points passed; convergence after the kill "
              f"median {statistics.median(secs):.2f} s, max {max(secs):.2f} s (limit {converge_s:.0f} s); the "
              f"whole sweep took {total_s:.0f} s.",
              "", f"Measured {stamp['date']} on commit `{stamp['commit']}` by `WRITE_DOC=1 PYTHONPATH=python "
              f"/usr/bin/python3 test/e2e/test_kill_sweep.py` (2 workers, product defaults, dpfsim's default delays)"
              + (f"; the invariants checked once more after the last point: {len(final)} violations." if final
                 else "; the invariants checked once more after the last point hold."),
              invariants.run_record("kill-sweep", record)]
    invariants.write_doc_block("kill-sweep-results", "\n".join(lines))
