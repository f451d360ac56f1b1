"""The tables of test_site.py in docs/reliability.md (WRITE_DOC=1): two sites on one cluster, a
half-restored database, a restored copy; each with the run record the reliability-doc suite checks."""
from extsvc_testkit import invariants


def write(results):
    stamp = invariants.run_stamp()
    lines = []
    if "two-sites" in results:
        r = results["two-sites"]
        invariants.write_doc_block("site-two-sites-results", "\n".join([
            "| sites on one dpfsim | services each | resyncs each | writes site-a / site-b | writes to the other site's objects |",
            "|---|---:|---:|---|---:|",
            f"| 2 (`site-a`, `site-b`) | {r['services_per_site']} | {r['resyncs_per_site']} | "
            f"{r['writes_a']} / {r['writes_b']} | {r['cross_writes']} |",
            "", f"Measured {stamp['date']} on `{stamp['commit']}` by `WRITE_DOC=1 PYTHONPATH=python /usr/bin/python3 "
            "test/e2e/test_site.py`.", invariants.run_record("site-two-sites", {**stamp, **r})]))
    if "half-restored" in results:
        r = results["half-restored"]
        invariants.write_doc_block("site-half-restored-results", "\n".join([
            "| this site's objects in the cluster | deletes | label patches | pods restarted after pointing back |",
            "|---|---:|---:|---:|",
            f"| {r['dpuservices']} DPUServices, keys on {r['dpus']} DPUs | {r['deletes']} | {r['label_patches']} | "
            f"{r['restarted_pods']} of {r['pods']} |",
            "", f"Measured {stamp['date']} on `{stamp['commit']}` by `WRITE_DOC=1 PYTHONPATH=python /usr/bin/python3 "
            "test/e2e/test_site.py`.", invariants.run_record("site-half-restored", {**stamp, **r})]))
    if "restored-copy" in results:
        r = results["restored-copy"]
        invariants.write_doc_block("site-restored-copy-results", "\n".join([
            "| copy writes while the primary held the Lease | window | takeover after the primary died | Lease duration |",
            "|---:|---:|---:|---:|",
            f"| {r['copy_writes']} | {r['window_s']:.0f} s | {r['takeover_s']:.1f} s | {r['lease_duration_s']} s |",
            "", f"Measured {stamp['date']} on `{stamp['commit']}` by `WRITE_DOC=1 PYTHONPATH=python /usr/bin/python3 "
            "test/e2e/test_site.py`.", invariants.run_record("site-restored-copy", {**stamp, **r})]))
    return lines
