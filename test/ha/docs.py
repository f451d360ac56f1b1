"""What the Patroni suite writes into the docs: the example member
configuration (docs/examples/patroni.yml, the suite's own member_config with
a deployment's values) and its results block in docs/reliability.md, with
the machine-readable records tools/reliability_summary.py reads."""
import os

import yaml

from extsvc_testkit import invariants
from extsvc_testkit.patroni import member_config

import stack

EXAMPLE = os.path.join(invariants.ROOT, "docs", "examples", "patroni.yml")
HEADER = """\
# Patroni member configuration for nico_extsvc (docs/operator-guide.md, "High availability").
# Written by `python3 test/ha/test_patroni.py --write-example` from the member configuration the
# Patroni suite runs (python/extsvc_testkit/patroni.py, member_config), with a deployment's values
# in place of the suite's loopback ports and temporary directories; the suite fails when this file
# and the generator disagree. One file per member: only `name`, `restapi` and `postgresql.listen` /
# `connect_address` differ between members.
#
# - The extension's settings live in bootstrap.dcs.postgresql.parameters, Patroni's cluster-wide
#   configuration, so that every member (and every future primary) runs with the same
#   shared_preload_libraries and extsvc.* settings. Change them later with `patronictl edit-config`.
# - extsvc.site_id names this NICo site. Two sites (two databases) must never share one: the Lease
#   nico-extsvc-<site_id> and the nico/site label are what keep their writers apart.
# - The Lease settings are the product's defaults; a promoted replica (same system identifier,
#   higher timeline) takes the Lease at once, the old primary stops writing at its next renewal.
# - watchdog mode `required`: Patroni refuses to lead without /dev/watchdog (softdog will do), and a
#   member whose Patroni hangs or dies is reset before its leader key expires. Without one, a
#   primary whose Patroni died keeps running and accepting writes (the suite's "lingering old
#   primary", which runs with `mode: off`); the Lease keeps its worker from writing to the
#   clusters, but the writes NICo sends to it are lost.
# - Synchronous replication (synchronous_mode: true) keeps the last acknowledged writes across a
#   crash failover; without it NICo must re-issue what it did not see acknowledged.
# - `etcd` is Patroni's etcd v2 client (python3-etcd; etcd 3.4 needs --enable-v2=true), which the
#   suite runs; Patroni's `etcd3` section takes the same hosts.
"""


def example_config():
    params = {
        "shared_preload_libraries": "nico_extsvc",
        "extsvc.site_id": "site-a",
        "extsvc.database": "nico",
        "extsvc.kube_server": "https://dpf-mgmt.example.internal:6443",
        "extsvc.kube_ca_file": "/etc/nico-extsvc/dpf-ca.crt",
        "extsvc.kube_token_file": "/etc/nico-extsvc/dpf-token",
        "extsvc.dpu_kube_server": "https://dpu-cluster.example.internal:6443",
        "extsvc.dpu_kube_ca_file": "/etc/nico-extsvc/dpu-ca.crt",
        "extsvc.dpu_kube_token_file": "/etc/nico-extsvc/dpu-token",
        **stack.LEASE,
    }
    cfg = member_config(
        "nico-extsvc", "pg1", etcd_host="etcd1.example.internal:2379", api_port=8008, pg_port=5432,
        data_dir="/var/lib/postgresql/15/nico-extsvc", socket_dir="/var/run/postgresql",
        bin_dir="/usr/lib/postgresql/15/bin", log_dir="/var/log/postgresql", pgpass="/var/lib/postgresql/.pgpass",
        parameters=params, ttl=30, loop_wait=10, retry_timeout=10, primary_start_timeout=300, host="10.0.0.11",
        watchdog="required",
        hba=["local all all peer", "host all all 10.0.0.0/24 scram-sha-256",
             "host replication replicator 10.0.0.0/24 scram-sha-256"],
        authentication={"superuser": {"username": "postgres", "password": "CHANGE-ME"},
                        "replication": {"username": "replicator", "password": "CHANGE-ME"},
                        "rewind": {"username": "rewind_user", "password": "CHANGE-ME"}})
    cfg["etcd"] = {"hosts": ["etcd1.example.internal:2379", "etcd2.example.internal:2379",
                             "etcd3.example.internal:2379"]}
    return cfg


def example_text():
    return HEADER + yaml.safe_dump(example_config(), sort_keys=False, default_flow_style=False, width=100)


def write_example():
    os.makedirs(os.path.dirname(EXAMPLE), exist_ok=True)
    with open(EXAMPLE, "w") as f:
        f.write(example_text())
    print(f"wrote {EXAMPLE}")


def example_is_current():
    try:
        with open(EXAMPLE) as f:
            return f.read() == example_text()
    except OSError:
        return False


# --- results ---
def _fmt(x, unit=" s"):
    return "-" if x is None else f"{x:.2f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def _episode(sc):
    f = dict(sc.figures)
    f["passed"] = sc.passed()
    f["failed_checks"] = [r["what"] for r in sc.failed()] + ([sc.error] if sc.error else [])
    return f


def write_results(scenarios, cfg, long, seconds, st):
    stamp = invariants.run_stamp()
    size = {"dpus": st.layout.total, "hosts": st.layout.hosts, "long": long, "seconds": round(seconds, 1),
            "rate": cfg["rate"], "live": cfg["live"]}
    by = {sc.name: sc for sc in scenarios}
    fails = [_episode(sc) for sc in scenarios if sc.name in ("switchover", "failover", "kill")]
    lines = ["| fault | promoted after the fault | Lease taken after the promotion | converged after the load "
             "stopped | writes (refused or unknown) | acknowledged writes lost | old primary's writes after the "
             "takeover | its last write after the takeover | its next Lease request after the takeover | new primary's "
             "writes meanwhile | checks |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for e in fails + ([_episode(by["lingering"])] if "lingering" in by else []):
        lines.append(f"| {e.get('kind')} | {_fmt(e.get('promote_s'))} | {_fmt(e.get('lease_s'))} | "
                     f"{_fmt(e.get('converge_s'))} | {e.get('writes', '-')} ({e.get('refused_or_unknown', '-')}) | "
                     f"{e.get('lost', '-')} | {_fmt(e.get('old_writes_after_takeover'), '')} | "
                     f"{_fmt(e.get('old_last_write_s'))} | {_fmt(e.get('old_next_lease_request_s'))} | "
                     f"{_fmt(e.get('overlap_writes_new'), '')} | "
                     + ("pass" if e["passed"] else "FAILED: " + "; ".join(e["failed_checks"])) + " |")
    records = []
    if fails:
        records.append(invariants.run_record("patroni-failover", {**stamp, **size, "episodes": fails}))
    if "lingering" in by:
        records.append(invariants.run_record("patroni-lingering", {**stamp, **size, **_episode(by["lingering"]),
                                                                   "retry_period_s": stack.RETRY_PERIOD_S}))
    for name in ("restored", "sites"):
        if name in by:
            e = _episode(by[name])
            lines.append("")
            lines.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(e.items())
                                                 if k not in ("failed_checks", "passed")) + " -- "
                         + ("pass" if e["passed"] else "FAILED: " + "; ".join(e["failed_checks"])))
            records.append(invariants.run_record(f"patroni-{name}", {**stamp, **size, **e}))
    cmd = "/usr/bin/python3 test/ha/test_patroni.py" + (" --long" if long else "") + " --write-doc"
    text = "\n".join(lines + ["", f"Measured {stamp['date']} on commit `{stamp['commit']}` by `{cmd}` "
                              f"({seconds:.0f} s; load average {os.getloadavg()[0]:.1f} at the end)."] + records)
    invariants.write_doc_block("patroni-results", text)
