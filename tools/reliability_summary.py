#!/usr/bin/python3
"""Writes the summary table of docs/reliability.md (issue 13: "one table:
test, size, result, figure -- every row measured by the scripts, not typed
in") from the machine-readable records the suites embed in their result
blocks, <!-- SUITE-run {json} --> (scripts/fuzz.sh long,
scripts/sanitize-tests.sh, test/e2e/test_kill_sweep.py,
test/e2e/test_failover.py, test/soak/soak.py, test/model/model_sql.py,
test/e2e/test_model_worker.py, test/nico/race_dpu_completion.py,
test/nico/concurrency.py, test/e2e/test_site.py, test/ha/test_patroni.py). Only the
records are read, never the human tables, and the verdicts are computed here
from the raw figures against the targets of issue 13, not taken from the
runs.

  python3 tools/reliability_summary.py           # rewrite the table
  python3 tools/reliability_summary.py --check   # exit 1 when the table differs from the records
  python3 tools/reliability_summary.py --print   # print the table

The table lives between <!-- reliability-summary:begin --> and
<!-- reliability-summary:end -->. No database needed."""
import argparse
import json
import os
import re
import sys

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "reliability.md")
BEGIN = "<!-- reliability-summary:begin (written by tools/reliability_summary.py from the run records below) -->"
END = "<!-- reliability-summary:end -->"
RECORD = re.compile(r"<!-- ([a-z-]+)-run (\{.*?\}) -->")

# The targets of issue 13.
FUZZ_GOAL = 10_000_000
KILL_LIMIT_S = 10.0
SOAK_LIMIT_S = 60.0
SOAK_RATIO = 3.0


def records(doc):
    """suite -> list of records, in document order."""
    out = {}
    for suite, text in RECORD.findall(doc):
        out.setdefault(suite, []).append(json.loads(text))
    return out


def n(x):
    return f"{x:,}"


def measured(runs):
    """Dates and commits of the runs a row is drawn from (older records carry no commit)."""
    dates = sorted({r["date"] for r in runs})
    commits = [r["commit"] for r in runs if r.get("commit")]
    text = dates[0] if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}"
    if commits:
        uniq = list(dict.fromkeys(commits))
        text += ", " + ", ".join(f"`{c}`" for c in uniq[-3:]) + (" …" if len(uniq) > 3 else "")
    return text


def verdict(problems):
    return "**ok**" if not problems else "**FAILED**: " + "; ".join(problems)


def row_fuzz(runs):
    r = runs[-1]
    t = r["targets"]
    # a finding is the fuzzer doing its job: the run says how many, the
    # findings table below says what each was and how it was fixed
    short = [] if r["executions"] >= FUZZ_GOAL else ["below 10^7 executions"]
    if r["findings"]:
        result = (f"**{r['findings']} finding{'s' if r['findings'] != 1 else ''}**, see Findings"
                  + "".join("; " + p for p in short))
    else:
        result = verdict(short) + ("" if short else ": 0 findings")
    cov = [v["cov"] / v["edges"] * 100 for v in t.values() if v.get("cov") and v.get("edges")]
    execs = [v["executions"] for v in t.values()]
    return ("Fuzzing (libFuzzer, ASan+UBSan)",
            f"{len(t)} targets, {r['seconds']} s of `scripts/fuzz.sh long {r['budget_s']}`",
            result,
            f"{n(r['executions'])} executions (goal 10^7); per target {n(min(execs))} to {n(max(execs))}, "
            f"coverage {min(cov):.0f} to {max(cov):.0f} % of the instrumented edges",
            measured([r]))


def row_sanitize(runs):
    r = runs[-1]
    b = r["binaries"]
    tests = sum(v["tests"] for v in b.values())
    failed = sum(v["failed"] for v in b.values())
    problems = []
    if failed:
        problems.append(f"{failed} binar{'ies' if failed != 1 else 'y'} failed")
    if r["reports"]:
        problems.append(f"{r['reports']} sanitizer reports")
    return ("Sanitizers (ASan+LSan+UBSan)",
            " + ".join(f"`{k}` ({n(v['tests'])} tests)" for k, v in sorted(b.items())),
            verdict(problems) + ("" if problems else ": 0 reports"),
            f"{n(tests)} tests passed under the sanitizers in {sum(v['seconds'] for v in b.values()):.0f} s",
            measured([r]))


def row_kill(runs):
    r = runs[-1]
    problems = []
    if r["passed"] < r["points"]:
        problems.append(f"{r['points'] - r['passed']} of {r['points']} points failed")
    if r["fired"] < r["points"]:
        problems.append(f"{r['points'] - r['fired']} points did not fire")
    if r["violations"]:
        problems.append(f"{r['violations']} invariant violations")
    if r["max_s"] is None or r["max_s"] > KILL_LIMIT_S:
        problems.append(f"slowest point {r['max_s']} s, over {KILL_LIMIT_S:.0f} s")
    return ("Kill-point sweep",
            f"{r['points']} points (SIGKILL before/after each write), {r['workers']} workers, product defaults",
            verdict(problems) + ("" if problems else f": {r['passed']} of {r['points']} passed, 0 violations"),
            f"converged after the kill: median {r['median_s']:.2f} s, max {r['max_s']:.2f} s "
            f"(limit {KILL_LIMIT_S:.0f} s)",
            measured([r]))


def row_failover(runs):
    r = runs[-1]
    problems = []
    if r["standby_calls"]:
        problems.append(f"the standby made {r['standby_calls']} calls in recovery")
    if r["intents_on_standby"] < r["intents"]:
        problems.append(f"{r['intents'] - r['intents_on_standby']} acknowledged intents lost")
    if r["converge_s"] is None:
        problems.append(f"not converged within {r['limit_s']:.0f} s")
    if r["violations"]:
        problems.append(f"{r['violations']} invariant violations")
    return ("Standby promotion",
            f"primary stopped `-m immediate` with {r['creates']} creates ({r['in_flight']} in flight), "
            f"1 update, 2 attaches, 1 detach",
            verdict(problems) + ("" if problems else ": invariants hold, 0 calls from the standby"),
            (f"converged {r['converge_s']:.1f} s after `pg_ctl promote`" if r["converge_s"] is not None
             else "not converged")
            + f"; {r['intents_on_standby']} of {r['intents']} intents on the standby",
            measured([r]))


def row_soak(runs):
    full = [r for r in runs if not r.get("ci")]
    r = (full or runs)[-1]
    problems = []
    if r["converge_s"] is None or r["converge_s"] > SOAK_LIMIT_S:
        problems.append(f"not converged within {SOAK_LIMIT_S:.0f} s after the faults stopped")
    if r["clean_converge_s"] is None:
        problems.append("the fault-free run did not converge")
    if r["violations"]:
        problems.append(f"{r['violations']} invariant violations")
    if r["ratio"] > SOAK_RATIO:
        problems.append(f"requests {r['ratio']:.2f}x a fault-free run (limit {SOAK_RATIO:.0f}x)")
    conv = (f"not converged within {SOAK_LIMIT_S:.0f} s" if r["converge_s"] is None
            else f"converged {r['converge_s']:.1f} s")
    return ("Fault soak" + (" (CI size)" if r.get("ci") else ""),
            f"{n(r['services'])} services, {n(r['dpus'])} DPUs, {r['seconds']} s of {r['fault_rate'] * 100:.1f} % "
            f"faults on both clusters, {n(r['ops'])} operations",
            verdict(problems) + ("" if problems else ": invariants hold"),
            f"{conv} after the faults stopped (limit {SOAK_LIMIT_S:.0f} s); requests "
            f"{n(r['requests_faulty'])} with faults / {n(r['requests_clean'])} without = {r['ratio']:.2f}x "
            f"(limit {SOAK_RATIO:.0f}x); {n(r['faulted'])} requests answered with a fault",
            measured([r]))


def row_model_sql(runs):
    seqs = sum(r["sequences"] for r in runs)
    calls = sum(r["calls"] for r in runs)
    failed = sum(r["failed"] for r in runs)
    secs = sum(r["seconds"] for r in runs)
    every = sum(r["sequences"] for r in runs if r["every_op"])
    lo, hi = min(r["seeds"][0] for r in runs), max(r["seeds"][1] for r in runs)
    # runs may overlap by a seed or more: say how many distinct sequences ran
    distinct = len(set().union(*(range(r["seeds"][0], r["seeds"][1] + 1) for r in runs)))
    seeds = f"seeds {lo}..{hi}" if distinct == seqs else f"{n(distinct)} distinct seeds {lo}..{hi}"
    return ("Model-based SQL (reference model)",
            f"{n(seqs)} sequences, {n(calls)} calls ({seeds}, {len(runs)} runs)",
            verdict([f"{failed} sequences mismatched"] if failed else []) + ("" if failed else ": 0 mismatches"),
            f"{calls / secs:.0f} calls/s; whole state compared after every call in {n(every)} sequences, "
            f"after every sequence in the others",
            measured(runs))


def row_model_worker(runs):
    last = runs[-1]
    seqs = sum(r["sequences"] for r in runs)
    calls = sum(r["calls"] for r in runs)
    points = sum(r["points"] for r in runs)
    violations = sum(r["violations"] for r in runs)
    earlier_failed = sum(r["failed"] for r in runs[:-1])
    problems = []
    if last["failed"]:
        problems.append(f"{last['failed']} of {last['sequences']} sequences failed in the latest run")
    if violations:
        problems.append(f"{violations} violations")
    return ("Model-based with the worker and dpfsim",
            f"{n(seqs)} sequences, {n(calls)} calls, {n(points)} quiescent points ({len(runs)} runs)",
            verdict(problems) + ("" if problems else ": 0 violations"),
            f"latest run (seeds {last['seeds'][0]}..{last['seeds'][1]}): {last['sequences']} sequences, "
            f"{n(last['calls'])} calls, {last['points']} quiescent points, {last['failed']} failed"
            + (f"; earlier runs: {earlier_failed} failed sequences (see below)" if earlier_failed else ""),
            measured(runs))


def row_race(runs):
    r = runs[-1]
    problems = []
    if r["failed_checks"]:
        problems.append(f"{r['failed_checks']} of {r['checks']} checks failed")
    if r["deadlocks"]:
        problems.append(f"{r['deadlocks']} sessions refused with 40P01")
    return ("Deadlock race: API calls vs the DPU completion",
            f"{r['scenarios']} scenarios, two psql sessions driven step by step",
            verdict(problems) + ("" if problems else ": no 40P01, every session committed"),
            f"{r['checks']} checks, {r['failed_checks']} failed, in {r['seconds']:.0f} s",
            measured([r]))


def _latest(runs):
    """The newest record of the long form (the docs figures), else the newest."""
    return ([r for r in runs if r.get("long")] or runs)[-1]


def _s(x):
    return "-" if x is None else f"{x:.2f} s"


def _signed(x):
    return "-" if x is None else f"{x:+.2f} s"


def _failed_checks(e):
    return [f"{e.get('kind', '')} {c}".strip() for c in e.get("failed_checks", [])]


def _ha_size(r, what):
    return (f"2 Patroni members + etcd, {r['dpus']} DPUs, NICo load {r['rate']:g} calls/s around {r['live']} "
            f"services; {what}")


def row_patroni_failover(runs):
    r = _latest(runs)
    eps = r["episodes"]
    problems = []
    for e in eps:
        problems += _failed_checks(e)
        if e.get("lease_s") is None:
            problems.append(f"{e['kind']}: the new primary took no Lease")
        if e.get("converge_s") is None:
            problems.append(f"{e['kind']}: not converged")
        if e.get("old_writes_after_takeover"):
            problems.append(f"{e['kind']}: {e['old_writes_after_takeover']} writes of the old primary after the takeover")
    kinds = list(dict.fromkeys(e["kind"] for e in eps))
    names = {"switchover": "`patronictl switchover`", "failover": "`patronictl failover`",
             "kill": "SIGKILL of the leader's postmaster"}
    parts = []
    for k in kinds:
        ks = [e for e in eps if e["kind"] == k]

        def worst(key):
            xs = [e.get(key) for e in ks]
            return None if any(x is None for x in xs) else max(xs)
        parts.append(f"{k} (×{len(ks)}): promoted {_s(worst('promote_s'))}, Lease {_s(worst('lease_s'))} after the "
                     f"promotion, converged {_s(worst('converge_s'))} after the load stopped, "
                     f"{sum(e.get('lost') or 0 for e in ks)} acknowledged writes lost")
    return ("Patroni switchover and failover",
            _ha_size(r, ", ".join(f"{names.get(k, k)} ×{sum(1 for e in eps if e['kind'] == k)}" for k in kinds)),
            verdict(problems) + ("" if problems else ": Lease taken by every new primary, invariants hold"),
            "; ".join(parts) + " (worst of each)",
            measured([r]))


def row_patroni_lingering(runs):
    r = _latest(runs)
    problems = _failed_checks(r)
    if r.get("lease_s") is None or r["lease_s"] > r["retry_period_s"]:
        problems.append(f"Lease not taken within one retry period ({r['retry_period_s']:g} s)")
    # A deposed holder learns of the takeover only by reading the Lease: what a lease can promise (issue
    # 25, docs/reliability.md) is no write of the old primary after that read, none of the new primary
    # while the old one still writes, nothing of NICo's writes to the old primary after that read, and
    # convergence. Records before the suite checked that (no stray_effects_late) are judged as before.
    late = r.get("stray_effects_late", r.get("stray_effects"))
    if "stray_effects_late" not in r and (r.get("old_writes_after_takeover") is None
                                          or r["old_writes_after_takeover"]):
        problems.append(f"old primary's writes after the takeover: {r.get('old_writes_after_takeover')}")
    if r.get("overlap_writes_new"):
        problems.append(f"the new primary's writes while the old one still wrote: {r['overlap_writes_new']}")
    if late:
        problems.append(f"{late} requests carried writes sent to the old primary after it read the Lease again")
    if r.get("converge_s") is None:
        problems.append("not converged")
    return ("Lingering old primary (Patroni killed, no watchdog)",
            _ha_size(r, f"{r.get('stray_writes', 0)} NICo writes committed on the old primary"),
            verdict(problems) + ("" if problems else ": 0 writes of the old primary after its next Lease "
                                 "request, 0 of the new one while it wrote"),
            f"promoted {_s(r.get('promote_s'))} after Patroni's SIGKILL; Lease taken {_s(r.get('lease_s'))} after "
            f"the promotion (limit {r['retry_period_s']:g} s); old primary's writes after the takeover "
            f"{r.get('old_writes_after_takeover')} (its last write {_signed(r.get('old_last_write_s'))}, its next "
            f"Lease request {_signed(r.get('old_next_lease_request_s'))} relative to the takeover; the new "
            f"primary's writes meanwhile {r.get('overlap_writes_new')}); "
            f"requests carrying its NICo writes {r.get('stray_effects')} (after it read the Lease again "
            f"{late}; the new primary's own label writes on the stray DPUs {r.get('stray_repairs', '-')}); "
            f"converged {_s(r.get('converge_s'))} after the load stopped",
            measured([r]))


def row_patroni_restored(runs):
    r = _latest(runs)
    problems = _failed_checks(r)
    if r.get("copy_writes") is None or r["copy_writes"]:
        problems.append(f"the copy's writes: {r.get('copy_writes')}")
    if r.get("deleted_of_primary"):
        problems.append(f"{r['deleted_of_primary']} DELETEs of the primary's live DPUServices")
    if r.get("recreated"):
        problems.append(f"{r['recreated']} writes of DPUServices the primary had deleted")
    return ("Restored copy beside its primary",
            _ha_size(r, f"`pg_dump`/`pg_restore` into a third server, same site and clusters, "
                        f"{r['window_s']:g} s beside the primary"),
            verdict(problems) + ("" if problems else ": 0 writes by the copy"),
            f"writes by the copy {r.get('copy_writes')}; DELETEs of the primary's live DPUServices "
            f"{r.get('deleted_of_primary')}; {r.get('primary_writes')} NICo writes on the primary meanwhile",
            measured([r]))


def row_patroni_sites(runs):
    r = _latest(runs)
    problems = _failed_checks(r)
    if r.get("cross_writes") is None or r["cross_writes"]:
        problems.append(f"writes to the other site's DPUServices: {r.get('cross_writes')}")
    if r.get("deleted_live"):
        problems.append(f"{r['deleted_live']} DELETEs of live DPUServices")
    if r.get("pinned_keys_removed"):
        problems.append(f"{r['pinned_keys_removed']} patches removed a pinned placement label")
    return ("Two sites on one DPF",
            _ha_size(r, "a second site (own server, own `extsvc.site_id`) sharing one DPU, both resyncing"),
            verdict(problems) + ("" if problems else ": neither site touched the other's objects or labels"),
            f"writes to the other site's DPUServices {r.get('cross_writes')}; DELETEs of live DPUServices "
            f"{r.get('deleted_live')}; patches removing the other site's label {r.get('pinned_keys_removed')}",
            measured([r]))


def row_conc(runs):
    r = runs[-1]
    problems = []
    if r["failed"]:
        problems.append(f"{r['failed']} pair(s) no serial order explains")
    if r["deadlocks"]:
        problems.append(f"{r['deadlocks']} transactions refused with 40P01")
    return ("Concurrency: NICo's handler transactions in pairs",
            f"{n(r['pairs'])} pairs (seed {r['seed']}), two sessions of the typed client, checked against the "
            "reference model",
            verdict(problems) + ("" if problems else ": no 40P01, every pair a serial order"),
            f"{n(r['overlapped'])} pairs overlapped, {n(r['lock_waits'])} with a lock wait; "
            f"{n(r['committed'])} transactions committed, {n(r['refused'])} refused as a serial order refuses "
            f"them; {r['seconds']:.0f} s",
            measured([r]))


def row_two_sites(runs):
    r = runs[-1]
    problems = [f"{r['cross_writes']} writes to the other site's objects"] if r["cross_writes"] else []
    return ("Two sites on one management cluster",
            f"2 sites, {r['services_per_site']} services and {r['resyncs_per_site']} resyncs each, one dpfsim",
            verdict(problems) + ("" if problems else ": neither touched the other's objects or labels"),
            f"writes site-a {r['writes_a']}, site-b {r['writes_b']}; {r['cross_writes']} to the other site",
            measured([r]))


def row_half_restored(runs):
    r = runs[-1]
    problems = []
    if r["deletes"]:
        problems.append(f"{r['deletes']} DPUServices deleted")
    if r["label_patches"]:
        problems.append(f"{r['label_patches']} label patches")
    if r["restarted_pods"]:
        problems.append(f"{r['restarted_pods']} pods restarted")
    return ("Half-restored database (0 services) on the site's cluster",
            f"{r['dpuservices']} DPUServices of the site, its keys on {r['dpus']} DPUs, 2 resyncs",
            verdict(problems) + ("" if problems else ": deleted nothing, stripped nothing"),
            f"deletes {r['deletes']}, label patches {r['label_patches']}; pointed back: "
            f"{r['restarted_pods']} of {r['pods']} pods restarted",
            measured([r]))


def row_restored_copy(runs):
    r = runs[-1]
    problems = [f"{r['copy_writes']} writes by the copy"] if r["copy_writes"] else []
    return ("Restored copy, same site id, while the primary holds the Lease",
            f"`pg_dump`/`pg_restore` into a third server, identity confirmed, {r['window_s']:.0f} s window",
            verdict(problems) + ("" if problems else ": 0 writes"),
            f"{r['copy_writes']} writes by the copy (paused on its identity first)",
            measured([r]))


def row_takeover(runs):
    r = runs[-1]
    d = r["lease_duration_s"]
    # client-go's bound: the candidate counts from the last change it saw (up to one retry period
    # before the holder died) and retries every period (jittered by up to 20 %)
    problems = []
    if r["takeover_s"] < d - 2.5:
        problems.append(f"taken over after {r['takeover_s']:.1f} s, before the Lease could expire")
    if r["takeover_s"] > d + 5:
        problems.append(f"taken over after {r['takeover_s']:.1f} s, over duration + 5 s")
    return ("Takeover of an expired Lease",
            f"holder stopped `-m immediate` (no release), lease_duration {d} s, retry 2 s",
            verdict(problems) + ("" if problems else f": within [{d} - 2.5, {d} + 5] s"),
            f"the copy took the Lease {r['takeover_s']:.1f} s after the holder died",
            measured([r]))


# One row per suite, in this order: (the record's suite name, its row).
ROWS = [("fuzz", row_fuzz), ("sanitize", row_sanitize), ("kill-sweep", row_kill), ("failover", row_failover),
        ("soak", row_soak), ("model", row_model_sql), ("model-worker", row_model_worker),
        ("race-dpu", row_race), ("nico-conc", row_conc), ("site-two-sites", row_two_sites),
        ("site-half-restored", row_half_restored), ("site-restored-copy", row_restored_copy),
        ("site-restored-copy", row_takeover), ("patroni-failover", row_patroni_failover),
        ("patroni-lingering", row_patroni_lingering), ("patroni-restored", row_patroni_restored),
        ("patroni-sites", row_patroni_sites)]
NAMES = {"fuzz": "Fuzzing", "sanitize": "Sanitizers", "kill-sweep": "Kill-point sweep",
         "failover": "Standby promotion", "soak": "Fault soak", "model": "Model-based SQL",
         "model-worker": "Model-based with the worker", "race-dpu": "Deadlock race",
         "nico-conc": "Concurrency: NICo's handler transactions",
         "site-two-sites": "Two sites on one management cluster",
         "site-half-restored": "Half-restored database", "site-restored-copy": "Restored copy / Lease takeover",
         "patroni-failover": "Patroni switchover and failover", "patroni-lingering": "Lingering old primary",
         "patroni-restored": "Restored copy beside its primary", "patroni-sites": "Two sites on one DPF"}


def table(doc):
    recs = records(doc)
    lines = ["| test | size | result | figure | measured |", "|---|---|---|---|---|"]
    for suite, fn in ROWS:
        if suite in recs:
            lines.append("| " + " | ".join(fn(recs[suite])) + " |")
        else:
            lines.append(f"| {NAMES[suite]} | - | **not measured**: no `{suite}-run` record | - | - |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the table differs from the records")
    ap.add_argument("--print", action="store_true", help="print the table, change nothing")
    ap.add_argument("--doc", default=DOC)
    args = ap.parse_args()
    with open(args.doc) as f:
        doc = f.read()
    pat = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.S)
    m = pat.search(doc)
    if not m:
        print(f"no reliability-summary block in {args.doc}", file=sys.stderr)
        return 2
    want = table(doc)
    if args.print:
        print(want)
        return 0
    if args.check:
        if m.group(1).rstrip("\n") != want:
            print("docs/reliability.md: the summary table differs from the run records; "
                  "run python3 tools/reliability_summary.py\n--- in the doc\n" + m.group(1)
                  + "--- from the records\n" + want, file=sys.stderr)
            return 1
        print(f"reliability summary: {len(ROWS)} rows match the run records")
        return 0
    new = doc[:m.start(1)] + want + "\n" + doc[m.end(1):]
    if new != doc:
        with open(args.doc, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
