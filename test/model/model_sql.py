#!/usr/bin/python3
"""Model-based tests of the SQL contract (issue 13).

Random, seeded sequences of SQL API calls on DPF_HELM_CHART services and
their placement (create, update, rollback, retry, delete; register and
deregister DPU; upsert and delete instance; attach and detach through
set_instance_extension_services), mixed with invalid calls (unknown ids,
stale version counters, bad targets, bad data, foreign tenants, name
conflicts), run against a server with the extension and no worker doing
anything. Where a worker would answer, the script plays it through the
worker's own entry point (extsvc.complete for the service and the dpu
queue, with a lease it stamps itself), so the
states are those the API and the worker functions write, checked by their
transition tables.

Next to the calls runs a small reference model of the contract, written from
SPEC 2.4-2.10 and docs/sql-api.md / docs/lifecycle.md / docs/placement.md
(not from the SQL): what each call returns, or which SQLSTATE and constraint
name it raises; the lifecycle state, version_ctr, desired/applied revision of
every service; the Helm revisions (data, rollback_of, applied, superseded);
DPUs, instances (config_version, network DPUs, dpf_managed, deletion; a host
holds one live instance, issue 29: a second is refused with 23505, and the
placement-focused sequences hand a host over by deleting its instance), the
configured entries with tombstones, the attachment rows (placement,
deployment state, observed config_version), the per-entry summary
(aggregate state, configs_synced), the readiness gate, and the histories:
each service's lifecycle transitions and events (from, to, actor, reason) and
each attachment row's placement and deployment changes (actor, reason by
cause). After every call
the answer is compared with the model; after every sequence (and with
--check-every-op after every call) the whole observable state is.

Each call is its own transaction, as NICo makes them; between sequences the
extension's tables are emptied (triggers off) in one statement. (A sequence
in one rolled-back transaction would give every call the same now(), and the
contract depends on transactions: set_instance_extension_services refuses an
unresolvable target only for entries attached by that very call, and
rollback_of marks the revision created by the rollback's transaction.) Sequence k of
a run has seed S + k; a mismatch prints that seed, the operation trace and
the command that replays it (--seed N --sequences 1).

  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --own-cluster                # 10^4 sequences of 20 calls
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --ci                         # 300, state checked after every call (the suite)
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --seed 123 --sequences 1 -v  # replay one sequence, verbose
  PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --own-cluster --write-doc    # record the figures in docs/reliability.md

Connection: libpq's PG* variables (a superuser), or --own-cluster for a
throw-away cluster on a private port and socket directory (a copy of the test
command's template, extsvc_testkit.cluster). SQL goes through kept
connections of the test kit (extsvc_testkit.db). Creates and drops the
database extsvc_model and the role extsvc_model_api. Closing line:
`model_sql: N passed, N failed` (sequences); exit status 1 on any mismatch."""
import argparse
import collections
import copy
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from extsvc_testkit import cluster, db

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DB = "extsvc_model"
API_ROLE = "extsvc_model_api"
PGBIN = os.environ.get("PGBIN", "")
CONNS = db.Conns()  # libpq's PG* variables (set by OwnCluster when it makes the server)


def tool(name):
    return os.path.join(PGBIN, name) if PGBIN else name


# ---------------------------------------------------------------------------
# Fixed pools: every sequence draws from the same few ids, so operations meet.

def uid(kind, n):
    return f"00000000-0000-4000-{kind:04x}-{n:012x}"


TENANTS = ["tenant-a", "tenant-b"]
def mid(kind, n):
    """A NICo MachineId (SPEC 7): fm100 + type (d DPU, h host) + source + 52 base32 characters."""
    return f"fm100{kind}s{n:032x}" + "0" * 20


HOSTS = [mid("h", n) for n in range(2)]
DPUS = [mid("d", n) for n in range(4)]
INSTANCES = [uid(3, n) for n in range(3)]
SERVICES = [uid(4, n) for n in range(4)]
NAMES = ["svc-a", "SVC-A", "svc-b", "svc-c"]        # svc-a and SVC-A are the same name (case-insensitive)
TARGETS = ["PRIMARY", "ALL_ACTIVE", "ALL"]
DEV_NAMES = [f"dev-{n}" for n in range(len(DPUS))]
NODE_NAMES = [f"node-{n}" for n in range(len(DPUS))]
BAD_NAME = "Not_A_Name"


def chart(version, values=None, repo="oci://registry.example.com/charts"):
    d = {"repoURL": repo, "chartName": "telemetry", "chartVersion": version, "security": {"privileged": False}}
    if values is not None:
        d["values"] = values
    return json.dumps(d)


# Valid Helm chart data (a service's revisions are indexes into this list) and
# invalid data with the SQLSTATE SPEC 2.9 gives it.
VARIANTS = [chart("1.0.0"), chart("1.1.0"), chart("1.1.0", {"replicas": 2})]
BAD_DATA = {
    "not_json": ('{"repoURL": ', "22P02"),
    "duplicate_key": ('{"repoURL": "oci://registry.example.com/charts", "repoURL": "oci://x.example.com/c", '
                      '"chartName": "telemetry", "chartVersion": "1.0.0", "security": {"privileged": false}}', "22P02"),
    "missing_field": ('{"repoURL": "oci://registry.example.com/charts", "chartName": "telemetry", '
                      '"security": {"privileged": false}}', "22023"),
    "reserved_path": ('{"repoURL": "oci://registry.example.com/charts", "chartName": "telemetry", '
                      '"chartVersion": "1.0.0", "security": {"privileged": false}, '
                      '"values": {"serviceDaemonSet": {"nodeSelector": {}}}}', "22023"),
    "not_allowed": (chart("1.0.0", repo="https://charts.elsewhere.example.com/x"), "22023"),
}


class Refused(Exception):
    """The model's expected refusal: SQLSTATE and constraint name (None: not set)."""

    def __init__(self, state, constraint=None):
        super().__init__(state)
        self.state, self.constraint = state, constraint


# ---------------------------------------------------------------------------
# The reference model. It knows nothing of tables: a service is a state
# machine with revisions, an instance has a configuration (entries with
# tombstones) and per-DPU attachment rows derived from its target sets.

class Model:
    def __init__(self):
        self.services = {}    # sid -> dict
        self.dpus = {}        # machine id -> {host, dev, node, primary, dereg}
        self.instances = {}   # iid -> {tenant, host, net, dpf, cv, deleting}
        self.entries = {}     # (iid, sid) -> {"removed": bool, "new": bool}
        self.rows = {}        # (iid, dpu, sid) -> {"pl": ACTIVE|REMOVING, "dep": state, "ocv": int|None}
        self.dhist = {}       # (sid, dpu, iid) -> per-DPU state changes [machine, from, to, actor, reason]
        self.actor = "api"    # who the call in progress is: api, or the worker's entry points
        self.events = set()   # what this sequence exercised (coverage figures)
        self.focus = False    # the generator's profile of this sequence

    # --- services -------------------------------------------------------------

    def row(self, sid):
        s = self.services[sid]
        return {"state": s["state"], "ctr": s["ctr"], "desired": s["desired"], "applied": s["applied"],
                "name": s["name"], "target": s["target"]}

    @staticmethod
    def move(s, to, actor, reason):
        """SPEC 2.5: every lifecycle change (and same-state event) is recorded
        with its actor and reason."""
        s["history"].append([s["state"], to, actor, reason])
        s["state"] = to

    def desired_variant(self, s):
        return s["revs"][s["desired"]]["variant"]

    def name_taken(self, tenant, name, except_sid):
        return any(s["tenant"] == tenant and s["name"].lower() == name.lower() and s["state"] != "DELETED"
                   and sid != except_sid for sid, s in self.services.items())

    def check_data(self, data):
        """SPEC 2.3 / 2.9: not JSON 22P02, invalid or not allowed 22023."""
        if isinstance(data, str):
            raise Refused(BAD_DATA[data][1])

    def create(self, a):
        # SPEC 2.10 / docs/sql-api.md: argument checks first, then the id
        # (idempotent repeat, another tenant's id, a conflict), then the name
        if a["target"] is not None and a["target"] not in TARGETS:
            raise Refused("22023")                        # unknown dpu_target
        if a["cred"]:
            raise Refused("0A000")                        # SPEC 2.6: no credentials on DPF
        if a["all_dpus"]:
            raise Refused("42501")                        # ALL_DPUS: extsvc_admin only
        if a["target"] is None:
            raise Refused("22023")                        # INSTANCE_DPUS needs a dpu_target
        self.check_data(a["data"])
        old = self.services.get(a["sid"])
        if old is not None:
            if old["tenant"] != a["tenant"]:
                raise Refused("42501")
            if (old["name"] == a["name"] and old["target"] == a["target"]
                    and old["state"] not in ("DELETING", "DELETED") and self.desired_variant(old) == a["data"]):
                return self.row(a["sid"])                 # the same create again
            raise Refused("23505", "service_records_pkey")
        if self.name_taken(a["tenant"], a["name"], None):
            raise Refused("23505", "service_records_tenant_name_key")
        self.services[a["sid"]] = {
            "tenant": a["tenant"], "name": a["name"], "target": a["target"], "state": "CREATING",
            "ctr": 1, "desired": 1, "applied": None, "version": None,    # version: V1-T<micros>, learnt
            "revs": {1: {"variant": a["data"], "rollback_of": None, "applied": False, "superseded": False}},
            "delete_requested": False, "failed_from": None, "versions_deleted": False,
            "history": [[None, "CREATING", "api", "create"]]}
        return self.row(a["sid"])

    def tenant_gate(self, sid, tenant):
        """The optional tenant argument: unknown and foreign ids alike are 42501."""
        if tenant is not None and (sid not in self.services or self.services[sid]["tenant"] != tenant):
            raise Refused("42501")
        if sid not in self.services:
            raise Refused("P0002")
        return self.services[sid]

    def update(self, a, rollback_of=None):
        s = self.tenant_gate(a["sid"], a["tenant"])
        if s["state"] in ("DELETING", "DELETED"):
            raise Refused("55000", "service_lifecycle_state")
        if a["ctr"] is not None and a["ctr"] != s["ctr"]:
            raise Refused("55000", "version_ctr_match")
        if a["cred"]:
            raise Refused("0A000")
        if a["data"] is not None:
            self.check_data(a["data"])
        if a["name"] is not None and a["name"] != s["name"]:
            if self.name_taken(s["tenant"], a["name"], a["sid"]):
                raise Refused("23505", "service_records_tenant_name_key")
            s["name"] = a["name"]                         # a rename does not touch version_ctr
        if a["data"] is not None and a["data"] != self.desired_variant(s):
            old = s["revs"][s["desired"]]
            if not old["applied"]:                        # never reached DPF: superseded, kept
                old["superseded"] = True
                self.events.add("revision superseded")
            s["desired"] += 1
            s["ctr"] += 1
            s["revs"][s["desired"]] = {"variant": a["data"], "rollback_of": rollback_of,
                                       "applied": False, "superseded": False}
            self.events.add("rollback revision" if rollback_of else "update revision")
            if s["state"] == "READY":
                self.move(s, "UPDATING", "api", "update")
            elif s["state"] == "FAILED":                  # an update of FAILED retries with the new definition
                self.events.add("update of FAILED" + (" after a failed delete" if s["delete_requested"] else ""))
                s["delete_requested"] = False             # this definition replaces the delete that failed
                self.move(s, "CREATING" if s["applied"] is None else "UPDATING", "api", "update")
            else:                                         # CREATING / UPDATING: the pending revision is superseded
                self.move(s, s["state"], "api", "superseded")
        return self.row(a["sid"])

    def rollback(self, a):
        s = self.tenant_gate(a["sid"], a["tenant"])
        if a["rev"] not in s["revs"]:
            raise Refused("P0002")
        return self.update({"sid": a["sid"], "tenant": a["tenant"], "ctr": a["ctr"], "cred": False,
                            "name": None, "data": s["revs"][a["rev"]]["variant"]}, rollback_of=a["rev"])

    def delete(self, a):
        s = self.tenant_gate(a["sid"], a["tenant"])
        if a["version"] is not None and a["version"] != s["version"]:
            raise Refused("P0002")
        if s["state"] in ("DELETING", "DELETED"):
            return self.row(a["sid"])                     # idempotent
        # SPEC 2.5: only while no active or removing attachment (or tombstone) refers to it
        if any(k[1] == a["sid"] for k in self.entries) or any(k[2] == a["sid"] for k in self.rows):
            raise Refused("55000", "service_in_use")
        self.move(s, "DELETING", "api", "delete")
        s["delete_requested"] = True
        return self.row(a["sid"])

    def retry(self, a):
        s = self.tenant_gate(a["sid"], a["tenant"])
        if s["state"] != "FAILED":
            raise Refused("55000", "service_lifecycle_state")
        # docs/sql-api.md: CREATING (never applied), UPDATING (applied before)
        # or DELETING (a failed delete): what failed is tried again
        self.events.add(f"retry after failure in {s['failed_from']}" + (" and a delete" if s["delete_requested"] else ""))
        if s["failed_from"] == "DELETING":
            self.move(s, "DELETING", "api", "retry")
        else:
            self.move(s, "CREATING" if s["applied"] is None else "UPDATING", "api", "retry")
        return self.row(a["sid"])

    # the worker's answers (lifecycle_transitions: worker rows)
    def w_ready(self, a):
        self.actor = "worker"
        s = self.services[a["sid"]]
        if s["state"] not in ("CREATING", "UPDATING"):
            raise Refused("55000", "lifecycle_transition")
        self.move(s, "READY", "worker", "revision_applied" if s["state"] == "UPDATING" else "dpuservice_created")
        s["revs"][s["desired"]]["applied"] = True
        if s["applied"] != s["desired"]:
            # SPEC 2.8: a RUNNING observed for the previous revision proves nothing now
            for k, r in self.rows.items():
                if k[2] == a["sid"] and r["dep"] == "RUNNING":
                    self.set_dep(k, r, "PENDING", "not_running_observed")
        s["applied"] = s["desired"]
        return "applied"

    def w_fail(self, a):
        self.actor = "worker"
        s = self.services[a["sid"]]
        if s["state"] not in ("CREATING", "READY", "UPDATING", "DELETING"):
            raise Refused("55000", "lifecycle_transition")
        s["failed_from"] = s["state"]
        self.move(s, "FAILED", "worker", "permanent_error")
        return "applied"

    def w_deleted(self, a):
        self.actor = "worker"
        s = self.services[a["sid"]]
        if s["state"] != "DELETING":
            raise Refused("55000", "lifecycle_transition")
        self.move(s, "DELETED", "worker", "dpuservice_deleted")
        s["versions_deleted"] = True
        return "applied"

    # --- DPUs, instances, placement ----------------------------------------------

    def rows_of(self, iid=None, dpu=None, sid=None):
        return [r for k, r in self.rows.items()
                if (iid is None or k[0] == iid) and (dpu is None or k[1] == dpu) and (sid is None or k[2] == sid)]

    def host_dpus(self, host):
        return sorted(d for d, x in self.dpus.items() if x["host"] == host and not x["dereg"])

    def resolve(self, inst, target):
        """SPEC 2.4; None when unresolvable (never an invented empty set)."""
        if target == "ALL":
            t = self.host_dpus(inst["host"])
        elif target == "PRIMARY":
            t = [d for d in self.host_dpus(inst["host"]) if self.dpus[d]["primary"]]
        else:
            if any(n not in self.dpus or self.dpus[n]["host"] != inst["host"] or self.dpus[n]["dereg"]
                   for n in inst["net"]):
                return None
            t = sorted(set(inst["net"]))
        return t or None

    def dlog(self, k, machine, frm, to, reason):
        self.dhist.setdefault((k[2], k[1], k[0]), []).append([machine, frm, to, self.actor, reason])

    def new_row(self, k, pl, reason):
        self.rows[k] = {"pl": pl, "dep": "PENDING" if pl == "ACTIVE" else "UNKNOWN", "ocv": None}
        self.dlog(k, "placement", None, pl, reason)
        self.dlog(k, "deployment", None, self.rows[k]["dep"], "attached" if pl == "ACTIVE" else "removal_requested")

    def set_dep(self, k, r, dep, reason):
        if r["dep"] != dep:
            self.dlog(k, "deployment", r["dep"], dep, reason)
            r["dep"] = dep

    def to_removing(self, k, r, reason):
        r["pl"] = "REMOVING"
        self.dlog(k, "placement", "ACTIVE", "REMOVING", reason)
        self.set_dep(k, r, "UNKNOWN", "removal_requested")    # a removal must be observed anew

    def drop_row(self, k):
        self.dlog(k, "placement", "REMOVING", None,
                  "terminated_observed" if self.rows[k]["dep"] == "TERMINATED" else "released")
        del self.rows[k]

    def materialize(self, iid, strict):
        """Attachment rows follow the configuration (SPEC 2.7): an active entry
        of a live instance has ACTIVE rows on its target set and REMOVING rows
        elsewhere; a tombstone, or any entry of an instance being deleted,
        has REMOVING rows on every registered DPU of the host."""
        inst = self.instances[iid]
        for (i, sid), e in sorted(self.entries.items()):
            if i != iid:
                continue
            if not e["removed"] and not inst["deleting"]:
                targets = self.resolve(inst, self.services[sid]["target"])
                if targets is None:
                    if strict and e["new"]:
                        raise Refused("P0002")            # a new attachment needs a resolvable target
                    self.events.add("unresolvable target kept")
                    continue                              # older entries keep their rows
                for d in targets:
                    r = self.rows.get((iid, d, sid))
                    if r is None:
                        self.new_row((iid, d, sid), "ACTIVE", "targeted")
                    elif r["pl"] == "REMOVING":
                        r["pl"] = "ACTIVE"
                        self.dlog((iid, d, sid), "placement", "REMOVING", "ACTIVE", "retargeted")
                        self.set_dep((iid, d, sid), r, "PENDING", "reattached")
                        self.events.add("REMOVING row active again")
                for (i2, d, s2), r in self.rows.items():
                    if i2 == iid and s2 == sid and r["pl"] == "ACTIVE" and d not in targets:
                        self.to_removing((i2, d, s2), r, "untargeted")
                        self.events.add("DPU left the target set")
            else:
                why = "instance_deleted" if inst["deleting"] else "detached"
                for d in self.host_dpus(inst["host"]):
                    if (iid, d, sid) not in self.rows:
                        self.new_row((iid, d, sid), "REMOVING", why)
                for (i2, d, s2), r in self.rows.items():
                    if i2 == iid and s2 == sid and r["pl"] == "ACTIVE":
                        self.to_removing((i2, d, s2), r, why)

    def label_wanted_elsewhere(self, dpu, sid):
        return any(k[1] == dpu and k[2] == sid and r["pl"] == "ACTIVE" for k, r in self.rows.items())

    def cleanup(self, iid):
        """A REMOVING row goes once observed TERMINATED or when another active
        reason holds the same label on that DPU; a tombstone goes with its
        last row; a deleted instance goes with its last entry."""
        if iid not in self.instances:
            return
        for k in [k for k, r in self.rows.items() if k[0] == iid and r["pl"] == "REMOVING"
                  and (r["dep"] == "TERMINATED" or self.label_wanted_elsewhere(k[1], k[2]))]:
            self.events.add("row terminated" if self.rows[k]["dep"] == "TERMINATED" else "row released")
            self.drop_row(k)
        self.drop_empty_tombstones(iid)
        if (self.instances[iid]["deleting"] and not self.rows_of(iid=iid)
                and not any(k[0] == iid for k in self.entries)):
            del self.instances[iid]
            self.events.add("instance deletion finished")

    def drop_empty_tombstones(self, iid):
        for k in [k for k, e in self.entries.items() if k[0] == iid and e["removed"]
                  and not self.rows_of(iid=iid, sid=k[1])]:
            self.events.add("tombstone removed")
            del self.entries[k]

    def register_dpu(self, a):
        for name in (a["dev"], a["node"]):
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):
                raise Refused("22023")
        others = {d: x for d, x in self.dpus.items() if d != a["dpu"]}
        if any(x["dev"] == a["dev"] for x in others.values()):
            raise Refused("23505", "dpus_dpu_device_name_key")
        if any(x["node"] == a["node"] for x in others.values()):
            raise Refused("23505", "dpus_dpu_node_name_key")
        old = self.dpus.get(a["dpu"])
        if old and old["host"] != a["host"]:
            self.events.add("DPU moved to another host")
        # docs/sql-api.md: an omitted is_primary is false for a new DPU, the
        # current flag for a registered one; a DPU registered to another host
        # is new there (the flag never demotes that host's primary)
        primary = a["primary"] if a["primary"] is not None else (
            old["primary"] if old and old["host"] == a["host"] else False)
        if primary:                                       # a new primary demotes the host's previous one
            for d, x in others.items():
                if x["host"] == a["host"] and x["primary"]:
                    x["primary"] = False
                    self.events.add("primary demoted")
        self.dpus[a["dpu"]] = {"host": a["host"], "dev": a["dev"], "node": a["node"], "primary": primary,
                               "dereg": False}
        for iid, inst in sorted(self.instances.items()):
            if inst["host"] in (a["host"], old["host"] if old else None):
                self.materialize(iid, False)
        return None

    def deregister_dpu(self, a):
        if a["dpu"] not in self.dpus:
            raise Refused("P0002")
        x = self.dpus[a["dpu"]]
        x["dereg"], x["primary"] = True, False
        for k, r in self.rows.items():
            if k[1] == a["dpu"] and r["pl"] == "ACTIVE":
                self.to_removing(k, r, "dpu_deregistered")   # never dropped silently
                self.events.add("attached DPU deregistered")
        for iid, inst in sorted(self.instances.items()):
            if inst["host"] == x["host"]:
                self.materialize(iid, False)
        return None

    def inst_gate(self, iid, tenant):
        if tenant is not None and (iid not in self.instances or self.instances[iid]["tenant"] != tenant):
            raise Refused("42501")
        if iid not in self.instances:
            raise Refused("P0002")
        return self.instances[iid]

    def upsert_instance(self, a):
        old = self.instances.get(a["iid"])
        if old is not None:
            if old["tenant"] != a["tenant"]:
                raise Refused("42501")                    # an instance keeps its tenant
            if old["deleting"]:
                raise Refused("55000", "instance_deleting")
        if a["net"] is not None and any(n not in self.dpus or self.dpus[n]["host"] != a["host"]
                                        or self.dpus[n]["dereg"] for n in a["net"]):
            raise Refused("22023")
        if (old is not None and old["dpf"] and a["dpf"] is False
                and (any(k[0] == a["iid"] for k in self.entries) or self.rows_of(iid=a["iid"]))):
            raise Refused("55000", "instance_dpf_attachments")
        # a host holds at most one live (not deleting) instance (issue 29)
        if any(i != a["iid"] and x["host"] == a["host"] and not x["deleting"] for i, x in self.instances.items()):
            raise Refused("23505", "instances_one_live_per_host")
        if old is None:
            self.instances[a["iid"]] = {"tenant": a["tenant"], "host": a["host"], "net": list(a["net"] or []),
                                        "dpf": True if a["dpf"] is None else a["dpf"], "cv": 1, "deleting": False}
        else:
            old["host"] = a["host"]
            if a["net"] is not None:
                old["net"] = list(a["net"])
            if a["dpf"] is not None:
                old["dpf"] = a["dpf"]
        self.materialize(a["iid"], False)
        return None

    def set_services(self, a):
        inst = self.inst_gate(a["iid"], a["tenant"])
        if inst["deleting"]:
            raise Refused("55000", "instance_deleting")
        if a["cv"] is not None and a["cv"] != inst["cv"]:
            raise Refused("55000", "config_version_match")
        seen = []
        for e in a["entries"]:
            if e[0] in ("bad_shape", "bad_uuid", "bad_version"):
                raise Refused("22023")
            sid, version = e[1], e[2]
            if sid in seen:
                raise Refused("22023")                    # a service appears twice
            seen.append(sid)
            s = self.services.get(sid)
            if a["tenant"] is not None and (s is None or s["tenant"] != a["tenant"]):
                raise Refused("42501")
            if s is None:
                raise Refused("P0002")
            if s["tenant"] != inst["tenant"]:
                raise Refused("42501")                    # cross-tenant attach
            if version != s["version"] or s["versions_deleted"]:
                raise Refused("P0002")
            if not inst["dpf"]:
                raise Refused("22023")                    # DPF services need a DPF-managed host
            cur = self.entries.get((a["iid"], sid))
            if (cur is None or cur["removed"]) and s["state"] != "READY":
                raise Refused("55000", "service_not_ready")
        changed = False
        for (i, sid), e in self.entries.items():
            e["new"] = False
            if i == a["iid"] and not e["removed"] and sid not in seen:
                e["removed"], changed = True, True        # a tombstone until its DPUs report TERMINATED
                self.events.add("detach")
        for sid in seen:
            cur = self.entries.get((a["iid"], sid))
            if cur is None or cur["removed"]:
                self.events.add("tombstone attached again" if cur else "attach")
                self.entries[(a["iid"], sid)] = {"removed": False, "new": True}
                changed = True
        if not changed:
            return inst["cv"]                             # the same configuration: no new config_version
        inst["cv"] += 1
        self.materialize(a["iid"], True)
        self.drop_empty_tombstones(a["iid"])              # nothing left to observe: gone now
        return inst["cv"]

    def delete_instance(self, a):
        inst = self.inst_gate(a["iid"], a["tenant"])
        if inst["deleting"]:
            return None                                   # idempotent
        inst["deleting"] = True
        inst["cv"] += 1
        for k, e in self.entries.items():
            if k[0] == a["iid"]:
                e["removed"] = True
        self.materialize(a["iid"], False)
        self.cleanup(a["iid"])
        return None

    def w_observe(self, a):
        """One DPU pass of the worker with the given per-row observations."""
        self.actor = "worker"
        for (iid, sid, state) in a["results"]:
            k = (iid, a["dpu"], sid)
            r = self.rows[k]
            self.set_dep(k, r, state, {"RUNNING": "running_observed", "PENDING": "not_running_observed",
                                       "TERMINATED": "absence_observed", "TERMINATING": "remnant_observed"}[state])
            r["ocv"] = self.instances[iid]["cv"]
        for iid in sorted({k[0] for k, r in self.rows.items() if k[1] == a["dpu"] and r["pl"] == "REMOVING"}):
            self.cleanup(iid)
        return "applied"

    # --- what the API shows ----------------------------------------------------------

    @staticmethod
    def aggregate(states):
        """SPEC 2.8: ERROR > UNKNOWN > PENDING > (all RUNNING) > TERMINATING > (all TERMINATED)."""
        if not states:
            return "UNKNOWN"
        for s in ("ERROR", "UNKNOWN", "PENDING"):
            if s in states:
                return s
        if all(s == "RUNNING" for s in states):
            return "RUNNING"
        if "TERMINATING" in states:
            return "TERMINATING"
        if all(s == "TERMINATED" for s in states):
            return "TERMINATED"
        return "UNKNOWN"

    def summary(self, iid):
        inst = self.instances[iid]
        out = {}
        for (i, sid), e in self.entries.items():
            if i != iid:
                continue
            rows = self.rows_of(iid=iid, sid=sid)
            if e["removed"] and not rows:
                agg = "TERMINATED"
            else:
                agg = self.aggregate([r["dep"] for r in rows if e["removed"] or r["pl"] == "ACTIVE"])
            synced = all(r["ocv"] == inst["cv"] for r in rows) and not (not e["removed"] and not rows)
            if not e["removed"] and not rows:
                self.events.add("active entry without rows")
            out[sid] = [agg, e["removed"], len(rows), synced]
        return out

    def ready(self, iid):
        if self.entries and any(k[0] == iid for k in self.entries) and all(
                synced and (agg == "TERMINATED" if removed else agg == "RUNNING")
                for agg, removed, _, synced in self.summary(iid).values()):
            self.events.add("instance ready with entries")
        return all(synced and (agg == "TERMINATED" if removed else agg == "RUNNING")
                   for agg, removed, _, synced in self.summary(iid).values())

    def snapshot(self, norm):
        svcs, revs = {}, {}
        for sid, s in self.services.items():
            svcs[sid] = [s["tenant"], s["name"], s["target"], s["state"], s["version"], s["ctr"], s["desired"],
                         s["applied"], s["state"] == "DELETED", s["delete_requested"]]
            for n, r in s["revs"].items():
                revs[f"{sid}/{n}"] = [norm[r["variant"]], r["rollback_of"], r["applied"], r["superseded"]]
        versions = {sid: [s["version"], s["versions_deleted"]] for sid, s in self.services.items()}
        history = {sid: s["history"] for sid, s in self.services.items()}
        # extsvc.dpu_state_history keeps the newest 32 changes of each row
        dhist = {f"{k[0]}/{k[1]}/{k[2]}": v[-32:] for k, v in self.dhist.items()}
        return {
            "services": svcs, "revisions": revs, "versions": versions, "history": history, "dpu_history": dhist,
            "dpus": {d: [x["host"], x["dev"], x["node"], x["primary"], x["dereg"]] for d, x in self.dpus.items()},
            "instances": {i: [x["tenant"], x["host"], x["net"], x["dpf"], x["cv"], x["deleting"]]
                          for i, x in self.instances.items()},
            "entries": {f"{k[0]}/{k[1]}": [self.services[k[1]]["version"], e["removed"]]
                        for k, e in self.entries.items()},
            "attachments": {f"{k[0]}/{k[1]}/{k[2]}": [self.services[k[2]]["version"], r["pl"], r["dep"], r["ocv"]]
                            for k, r in self.rows.items()},
            "summary": {f"{i}/{sid}": v for i in self.instances for sid, v in self.summary(i).items()},
            "ready": {i: self.ready(i) for i in self.instances},
        }


# ---------------------------------------------------------------------------
# The real side: one psql session; every call goes through model.try, which
# turns an answer or an error (SQLSTATE, constraint name) into one JSON line.

SETUP_SQL = r"""
CREATE EXTENSION nico_extsvc;
SELECT extsvc.allow_chart('oci://registry.example.com/charts');
CREATE SCHEMA model;
GRANT USAGE ON SCHEMA model TO PUBLIC;
CREATE FUNCTION model.try(q text, r text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  v text; st text; con text; msg text;
BEGIN
  IF r IS NOT NULL THEN
    PERFORM set_config('role', r, true);     -- the call runs as that role (SET LOCAL ROLE)
  END IF;
  BEGIN
    EXECUTE q INTO v;
    RETURN json_build_object('ok', true, 'v', v)::text;
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, con = CONSTRAINT_NAME, msg = MESSAGE_TEXT;
    RETURN json_build_object('ok', false, 'state', st, 'constraint', nullif(con, ''), 'msg', msg)::text;
  END;
END
$f$;
GRANT EXECUTE ON FUNCTION model.try(text, text) TO PUBLIC;
-- The worker's service outcome, through its own entry point with a lease
-- stamped here (as extsvc.claim would).
CREATE FUNCTION model.w_transition(p_sid uuid, p_state text, p_reason text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  sv bigint; tok uuid := gen_random_uuid(); rev integer;
BEGIN
  SELECT desired_revision INTO rev FROM extsvc.service_records WHERE service_id = p_sid;
  UPDATE extsvc.dpf_extension_service_reconciliations
     SET lease_owner = 'model', lease_token = tok, lease_expires_at = now() + interval '1 minute'
   WHERE service_id = p_sid RETURNING state_version INTO sv;
  IF sv IS NULL THEN
    RAISE EXCEPTION 'no reconciliation row for %', p_sid USING ERRCODE = 'XX001';
  END IF;
  RETURN extsvc.complete('service', p_sid::text, sv, tok,
                         jsonb_strip_nulls(jsonb_build_object('outcome', 'transition', 'new_state', p_state,
                           'reason', p_reason, 'message', 'played by test/model/model_sql.py',
                           'applied_revision', CASE WHEN p_state = 'READY' THEN rev END)));
END
$f$;
-- One DPU pass of the worker, through extsvc.complete('dpu', ...).
CREATE FUNCTION model.w_observe(p_dpu text, p_results jsonb) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  sv bigint; tok uuid := gen_random_uuid();
BEGIN
  UPDATE extsvc.dpu_reconciliations
     SET lease_owner = 'model', lease_token = tok, lease_expires_at = now() + interval '1 minute'
   WHERE dpu_machine_id = p_dpu RETURNING state_version INTO sv;
  IF sv IS NULL THEN
    RAISE EXCEPTION 'no DPU reconciliation row for %', p_dpu USING ERRCODE = 'XX001';
  END IF;
  RETURN extsvc.complete('dpu', p_dpu, sv, tok, jsonb_build_object('outcome', 'observed', 'results', p_results));
END
$f$;
"""

SNAPSHOT_SQL = r"""
SELECT json_build_object(
  'services', (SELECT coalesce(json_object_agg(service_id, json_build_array(tenant_organization_id, service_name,
                 dpu_target, lifecycle_state, version, version_ctr, desired_revision, applied_revision,
                 deleted_at IS NOT NULL, (SELECT r.delete_requested_at IS NOT NULL FROM extsvc.service_records r
                                           WHERE r.service_id = v.service_id))), '{}') FROM extsvc.services v),
  'revisions', (SELECT coalesce(json_object_agg(service_id || '/' || revision, json_build_array(data::text,
                 rollback_of, applied_at IS NOT NULL, superseded_at IS NOT NULL)), '{}') FROM extsvc.helm_revisions),
  'versions', (SELECT coalesce(json_object_agg(service_id, json_build_array(version, deleted_at IS NOT NULL)), '{}')
                 FROM extsvc.service_versions),
  'history', (SELECT coalesce(json_object_agg(service_id, h), '{}') FROM (
                 SELECT service_id, json_agg(json_build_array(from_state, to_state, actor, reason) ORDER BY id) AS h
                   FROM extsvc.service_state_history GROUP BY service_id) x),
  'dpu_history', (SELECT coalesce(json_object_agg(k, h), '{}') FROM (
                 SELECT service_id || '/' || dpu_machine_id || '/' || instance_id AS k,
                        json_agg(json_build_array(machine, from_state, to_state, actor, reason) ORDER BY id) AS h
                   FROM extsvc.dpu_state_history GROUP BY 1) x),
  'dpus', (SELECT coalesce(json_object_agg(machine_id, json_build_array(host_machine_id, dpu_device_name,
                 dpu_node_name, is_primary, deregistered_at IS NOT NULL)), '{}') FROM extsvc.dpus),
  'instances', (SELECT coalesce(json_object_agg(instance_id, json_build_array(tenant_organization_id,
                 host_machine_id, network_dpus, dpf_managed, config_version, delete_requested_at IS NOT NULL)), '{}')
                 FROM extsvc.instances),
  'entries', (SELECT coalesce(json_object_agg(instance_id || '/' || service_id, json_build_array(version,
                 removed_at IS NOT NULL)), '{}') FROM extsvc.instance_extension_services),
  'attachments', (SELECT coalesce(json_object_agg(instance_id || '/' || dpu_machine_id || '/' || service_id,
                 json_build_array(version, placement_state, deployment_state, observed_config_version)), '{}')
                 FROM extsvc.dpf_extension_service_attachments),
  'summary', (SELECT coalesce(json_object_agg(i.instance_id || '/' || x.service_id, json_build_array(
                 x.aggregate_state, x.removed, x.dpus, x.configs_synced)), '{}')
                 FROM extsvc.instances i CROSS JOIN LATERAL extsvc.instance_extension_services_summary(i.instance_id) x),
  'ready', (SELECT coalesce(json_object_agg(instance_id, extsvc.instance_extension_services_ready(instance_id)), '{}')
                 FROM extsvc.instances))::text
"""


class Session:
    """One kept connection (each statement its own transaction); answers
    are the text psql -A -t printed (fields joined by '|', rows by newlines,
    an error as psql's text of it)."""

    def __init__(self):
        self.c = CONNS.get(DB)

    def run(self, sql):
        try:
            rows = self.c.rows(sql)
        except db.SqlError as e:
            return e.psql_text()
        return "\n".join("|".join("" if v is None else v for v in r) for r in rows)

    def close(self):
        self.c.close()


def lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def data_text(d):
    return VARIANTS[d] if isinstance(d, int) else BAD_DATA[d][0]


def entry_json(e):
    if e[0] == "bad_shape":
        return {"service_id": e[1], "version": e[2], "extra": 1}
    if e[0] == "bad_uuid":
        return {"service_id": "not-a-uuid", "version": e[2]}
    if e[0] == "bad_version":
        return {"service_id": e[1], "version": 1}
    return {"service_id": e[1], "version": e[2]}


def render(op):
    """(SQL of the call, role it runs as: the API role, or None for the worker's superuser)."""
    k, a = op["op"], op["args"]
    svc = "SELECT row_to_json(x)::text FROM extsvc.{} x"
    if k == "create":
        return svc.format(
            f"create_service({lit(a['tenant'])}, {lit(a['name'])}, 'DPF_HELM_CHART', {lit(data_text(a['data']))}, "
            f"NULL, {lit(a['target'])}, {lit('ALL_DPUS' if a['all_dpus'] else None)}, {lit(a['sid'])}::uuid, "
            f"{lit(a['cred'])})"), API_ROLE
    if k == "update":
        return svc.format(
            f"update_service({lit(a['sid'])}::uuid, "
            f"{lit(None if a['data'] is None else data_text(a['data']))}, {lit(a['name'])}, NULL, "
            f"{lit(a['ctr'])}::integer, {lit(True if a['cred'] else None)}::boolean, NULL, {lit(a['tenant'])})"), API_ROLE
    if k == "rollback":
        return svc.format(f"rollback_service({lit(a['sid'])}::uuid, {a['rev']}, {lit(a['ctr'])}::integer, "
                          f"{lit(a['tenant'])})"), API_ROLE
    if k == "delete":
        return svc.format(f"delete_service({lit(a['sid'])}::uuid, {lit(a['version'])}, {lit(a['tenant'])})"), API_ROLE
    if k == "retry":
        return svc.format(f"retry_service({lit(a['sid'])}::uuid, {lit(a['tenant'])})"), API_ROLE
    if k in ("w_ready", "w_fail", "w_deleted"):
        return f"SELECT model.w_transition({lit(a['sid'])}, {lit(a['state'])}, {lit(a['reason'])})", None
    if k == "register_dpu":
        return (f"SELECT extsvc.register_dpu({lit(a['dpu'])}, {lit(a['host'])}, {lit(a['dev'])}, {lit(a['node'])}, "
                f"{lit(a['primary'])}::boolean)::text"), API_ROLE
    if k == "deregister_dpu":
        return f"SELECT extsvc.deregister_dpu({lit(a['dpu'])})::text", API_ROLE
    if k == "upsert_instance":
        net = "NULL" if a["net"] is None else "ARRAY[" + ", ".join(lit(n) for n in a["net"]) + "]"
        return (f"SELECT extsvc.upsert_instance({lit(a['iid'])}, {lit(a['tenant'])}, {lit(a['host'])}, "
                f"{net}::text[], {lit(a['dpf'])}::boolean)::text"), API_ROLE
    if k == "set_services":
        return (f"SELECT extsvc.set_instance_extension_services({lit(a['iid'])}, "
                f"{lit(json.dumps([entry_json(e) for e in a['entries']]))}::jsonb, {lit(a['cv'])}::integer, "
                f"{lit(a['tenant'])})::text"), API_ROLE
    if k == "delete_instance":
        return f"SELECT extsvc.delete_instance({lit(a['iid'])}, {lit(a['tenant'])})::text", API_ROLE
    if k == "w_observe":
        res = [{"kind": "attachment", "instance_id": i, "service_id": s, "version": v, "state": st,
                "message": "played by test/model/model_sql.py"} for (i, s, st), v in zip(a["results"], a["versions"])]
        return f"SELECT model.w_observe({lit(a['dpu'])}, {lit(json.dumps(res))}::jsonb)", None
    raise ValueError(k)


# ---------------------------------------------------------------------------
# The generator: mostly calls that should work in the current state, with
# invalid ones mixed in.

def build_step(rng, m):
    """In a placement-focused sequence: the next call towards an attached,
    observed service, or None when there is one (then calls are random)."""
    live = [d for d, x in m.dpus.items() if not x["dereg"] and x["host"] == HOSTS[0]]
    if len(live) < 2:
        n = rng.choice([k for k, d in enumerate(DPUS) if d not in live])
        return {"op": "register_dpu", "args": {"dpu": DPUS[n], "host": HOSTS[0], "dev": DEV_NAMES[n],
                                               "node": NODE_NAMES[n], "primary": not live}}
    # a host holds one live instance (issue 29): the host's instance, and now
    # and then a hand-over (it is deleted while attached, the next one takes
    # the host and attaches the same services)
    insts = [i for i, x in m.instances.items() if not x["deleting"] and x["dpf"] and x["host"] == HOSTS[0]]
    if not insts and not any(not x["deleting"] and x["host"] == HOSTS[0] for x in m.instances.values()):
        iid = rng.choice([i for i in INSTANCES if i not in m.instances] or INSTANCES)
        return {"op": "upsert_instance", "args": {"iid": iid, "tenant": TENANTS[0], "host": HOSTS[0],
                                                  "net": rng.sample(live, rng.randint(1, len(live))), "dpf": True}}
    if not insts:
        return None
    if (rng.random() < 0.15 and any(k[0] == insts[0] and not e["removed"] for k, e in m.entries.items())
            and not any(x["deleting"] for x in m.instances.values())):
        return {"op": "delete_instance", "args": {"iid": insts[0], "tenant": None}}
    svcs = [x for x, s in m.services.items() if s["tenant"] == TENANTS[0] and s["state"] != "DELETED"]
    if not svcs:
        free = [x for x in SERVICES if x not in m.services]
        if not free:
            return None
        used = {s["name"].lower() for s in m.services.values() if s["state"] != "DELETED"}
        name = next((n for n in NAMES if n.lower() not in used), None)
        if name is None:
            return None
        return {"op": "create", "args": {"sid": rng.choice(free), "tenant": TENANTS[0], "name": name,
                                         "target": rng.choice(TARGETS), "data": rng.randrange(len(VARIANTS)),
                                         "cred": False, "all_dpus": False}}
    pending = [x for x in svcs if m.services[x]["state"] in ("CREATING", "UPDATING")]
    if not any(m.services[x]["state"] == "READY" for x in svcs) and pending:
        sid = rng.choice(pending)
        st = m.services[sid]["state"]
        return {"op": "w_ready", "args": {"sid": sid, "state": "READY",
                                          "reason": "revision_applied" if st == "UPDATING" else "dpuservice_created"}}
    ready = [x for x in svcs if m.services[x]["state"] == "READY"]
    if ready and not any(not e["removed"] for e in m.entries.values()):
        iid = rng.choice(insts)
        sids = rng.sample(ready, rng.randint(1, min(2, len(ready))))
        return {"op": "set_services", "args": {"iid": iid, "entries": [("ok", x, m.services[x]["version"]) for x in sids],
                                               "cv": None, "tenant": None}}
    return None


def gen(rng, m):
    if m.focus and rng.random() < 0.5:
        op = build_step(rng, m)
        if op is not None:
            return op
    svcs = sorted(m.services)
    states = [s["state"] for s in m.services.values()]
    live_dpus = [d for d, x in m.dpus.items() if not x["dereg"]]
    # weights follow the state, so that 20 calls reach attachments and their
    # removal: what is missing is built first, what exists is used
    # half of the sequences focus on placement: one tenant, mostly one host,
    # more attaches, DPU passes and DPU changes
    focus = m.focus
    weights = {
        "create": 14 if len(svcs) < 2 else 6, "update": 7, "rollback": 4, "delete": 4 if len(svcs) > 1 else 1,
        "retry": 6 if "FAILED" in states else 1,
        "w_ready": 14 if ("CREATING" in states or "UPDATING" in states) else 2,
        "w_fail": 5 if ("DELETING" in states or "UPDATING" in states) else 2,
        "w_deleted": 6 if "DELETING" in states else 1,
        "register_dpu": 16 if len(live_dpus) < 2 else 5, "deregister_dpu": 2,
        "upsert_instance": 14 if not m.instances else 5,
        "set_services": 20 if ("READY" in states and m.instances) else (3 if m.instances else 1),
        "delete_instance": 2,
        "w_observe": 14 if m.rows else 0}
    if focus:
        weights.update({"set_services": weights["set_services"] + 6, "w_observe": 22 if m.rows else 0,
                        "deregister_dpu": 5 if m.rows else 2, "delete_instance": 3, "rollback": 2, "retry": 1})
    kind = rng.choices(list(weights), list(weights.values()))[0]

    def some_sid():
        return rng.choice(svcs) if svcs and rng.random() < 0.9 else rng.choice(SERVICES)

    def tenant_arg(owner):
        x = rng.random()
        if x < 0.75:
            return None
        if x < 0.93 and owner is not None:
            return owner
        return rng.choice(TENANTS)

    def ctr_arg(s):
        x = rng.random()
        if x < 0.6 or s is None:
            return None
        return s["ctr"] if x < 0.85 else s["ctr"] + rng.choice([-1, 1])

    if kind == "create":
        sid = rng.choice(SERVICES)
        old = m.services.get(sid)
        if old is not None and rng.random() < 0.3:        # repeat a create of the same id
            a = {"sid": sid, "tenant": old["tenant"], "name": old["name"], "target": old["target"],
                 "data": m.desired_variant(old), "cred": False, "all_dpus": False}
        else:
            a = {"sid": sid, "tenant": rng.choices(TENANTS, [30, 1] if focus else [4, 1])[0], "name": rng.choice(NAMES),
                 "target": rng.choices(TARGETS + [None, "BOGUS"], [4, 4, 6, 1, 1])[0],
                 "data": rng.choices([0, 1, 2, "bad"], [6, 2, 2, 1])[0],
                 "cred": rng.random() < 0.03, "all_dpus": rng.random() < 0.03}
        if a["data"] == "bad":
            a["data"] = rng.choice(sorted(BAD_DATA))
        return {"op": kind, "args": a}
    if kind in ("update", "rollback", "delete", "retry"):
        failed = [x for x in svcs if m.services[x]["state"] == "FAILED"]
        sid = rng.choice(failed) if failed and rng.random() < 0.4 else some_sid()
        s = m.services.get(sid)
        a = {"sid": sid, "tenant": tenant_arg(s["tenant"] if s else None)}
        if kind == "update":
            a.update({"ctr": ctr_arg(s), "cred": rng.random() < 0.03,
                      "data": rng.choices([0, 1, 2, None, "bad"], [4, 4, 4, 2, 1])[0],
                      "name": rng.choice(NAMES) if rng.random() < 0.2 else None})
            if a["data"] == "bad":
                a["data"] = rng.choice(sorted(BAD_DATA))
        elif kind == "rollback":
            top = max(s["revs"]) if s else 1
            a.update({"ctr": ctr_arg(s), "rev": rng.randint(1, top + (1 if rng.random() < 0.1 else 0))})
        elif kind == "delete":
            x = rng.random()
            a["version"] = None if x < 0.7 or s is None else (s["version"] if x < 0.9 else "V1-T1")
        return {"op": kind, "args": a}
    if kind in ("w_ready", "w_fail", "w_deleted"):
        if not svcs:
            return gen(rng, m)
        # mostly the answer the worker would give in that state; sometimes one
        # the transition table must refuse
        if kind == "w_ready":
            cand = [x for x in svcs if m.services[x]["state"] in ("CREATING", "UPDATING")]
        elif kind == "w_deleted":
            cand = [x for x in svcs if m.services[x]["state"] == "DELETING"]
        else:
            cand = [x for x in svcs if m.services[x]["state"] != "FAILED"]
        if not cand or rng.random() < 0.1:
            cand = svcs
        sid = rng.choice(cand)
        st = m.services[sid]["state"]
        if (kind, st) in (("w_ready", "READY"), ("w_fail", "FAILED"), ("w_deleted", "DELETED")):
            return gen(rng, m)                            # same state: not a transition
        state, reason = {"w_ready": ("READY", "revision_applied" if st == "UPDATING" else "dpuservice_created"),
                         "w_fail": ("FAILED", "permanent_error"),
                         "w_deleted": ("DELETED", "dpuservice_deleted")}[kind]
        return {"op": kind, "args": {"sid": sid, "state": state, "reason": reason}}
    if kind == "register_dpu":
        n = rng.randrange(len(DPUS))
        old = m.dpus.get(DPUS[n])
        host = old["host"] if old and rng.random() < 0.8 else rng.choices(HOSTS, [12, 1] if focus else [3, 1])[0]

        def name(own, pool):
            x = rng.random()
            return own if x < 0.88 else (rng.choice(pool) if x < 0.97 else BAD_NAME)
        return {"op": kind, "args": {"dpu": DPUS[n], "host": host, "dev": name(DEV_NAMES[n], DEV_NAMES),
                                     "node": name(NODE_NAMES[n], NODE_NAMES),
                                     "primary": rng.choices([None, True, False],
                                                            [5, 3, 2] if any(x["host"] == host and x["primary"] and not x["dereg"] for x in m.dpus.values())
                                                            else [2, 6, 1])[0]}}
    if kind == "deregister_dpu":
        reg = sorted(m.dpus)
        return {"op": kind, "args": {"dpu": rng.choice(reg) if reg and rng.random() < 0.9 else rng.choice(DPUS)}}
    if kind == "upsert_instance":
        iid = rng.choice(INSTANCES)
        old = m.instances.get(iid)
        tenant = old["tenant"] if old and rng.random() < 0.9 else rng.choices(TENANTS, [30, 1] if focus else [4, 1])[0]
        host = old["host"] if old and rng.random() < 0.85 else rng.choices(HOSTS, [12, 1] if focus else [3, 1])[0]
        # a host holds one live instance (issue 29): a new instance mostly
        # goes to a free host; the others exercise the refusal
        free = [h for h in HOSTS if not any(not x["deleting"] and x["host"] == h for x in m.instances.values())]
        if old is None and free and rng.random() < 0.8:
            host = rng.choice(free)
        x = rng.random()
        if x < 0.3:
            net = None
        elif x < 0.85:
            own = m.host_dpus(host)
            net = rng.sample(own, rng.randint(min(1, len(own)), len(own))) if own else []
        else:
            net = rng.sample(DPUS, rng.randint(1, 2))
        return {"op": kind, "args": {"iid": iid, "tenant": tenant, "host": host, "net": net,
                                     "dpf": rng.choices([None, True, False], [6, 3, 1])[0]}}
    if kind == "set_services":
        insts = sorted(m.instances)
        iid = rng.choice(insts) if insts and rng.random() < 0.93 else rng.choice(INSTANCES)
        inst = m.instances.get(iid)
        # mostly this tenant's services, with their exact version
        own = [x for x in svcs if inst and m.services[x]["tenant"] == inst["tenant"]] or svcs or SERVICES
        entries = []
        for sid in rng.sample(own, min(len(own), rng.choices([0, 1, 2], [2, 5, 3])[0])):
            s = m.services.get(sid)
            version = s["version"] if s and rng.random() < 0.95 else "V1-T1"
            x = rng.random()
            kind_e = "ok" if x < 0.96 else rng.choice(["bad_shape", "bad_uuid", "bad_version"])
            entries.append((kind_e, sid, version))
        if entries and rng.random() < 0.03:
            entries.append(entries[0])                    # a duplicate
        x = rng.random()
        cv = None if x < 0.7 or inst is None else (inst["cv"] if x < 0.9 else inst["cv"] - 1)
        return {"op": kind, "args": {"iid": iid, "entries": entries, "cv": cv,
                                     "tenant": tenant_arg(inst["tenant"] if inst else None)}}
    if kind == "delete_instance":
        insts = sorted(m.instances)
        iid = rng.choice(insts) if insts and rng.random() < 0.9 else rng.choice(INSTANCES)
        inst = m.instances.get(iid)
        return {"op": kind, "args": {"iid": iid, "tenant": tenant_arg(inst["tenant"] if inst else None)}}
    if kind == "w_observe":
        busy = sorted({k[1] for k in m.rows})
        if not busy:
            return gen(rng, m)
        dpu = rng.choice(busy)
        results, versions = [], []
        for (iid, d, sid), r in sorted(m.rows.items()):
            if d != dpu:
                continue
            wanted = r["pl"] == "ACTIVE" and not m.dpus[d]["dereg"]
            # evidence the worker could have: wanted rows RUNNING or not yet;
            # unwanted ones gone or still terminating
            state = (rng.choices(["RUNNING", "PENDING"], [3, 1]) if wanted
                     else rng.choices(["TERMINATED", "TERMINATING"], [3, 1]))[0]
            results.append((iid, sid, state))
            versions.append(m.services[sid]["version"])
        return {"op": kind, "args": {"dpu": dpu, "results": results, "versions": versions}}
    raise ValueError(kind)


# ---------------------------------------------------------------------------

def apply_model(m, op):
    """Expected answer of op: ("ok", value) or ("error", sqlstate, constraint); m is changed only on success."""
    trial = copy.deepcopy(m)
    trial.actor = "api"
    try:
        value = getattr(trial, op["op"])(op["args"])
    except Refused as r:
        return ("error", r.state, r.constraint), m
    return ("ok", value), trial


def real_answer(raw):
    j = json.loads(raw)
    if not j["ok"]:
        return ("error", j["state"], j["constraint"]), j.get("msg")
    v = j["v"]
    return ("ok", json.loads(v) if v and v.startswith("{") else v), None


def compare_answer(op, want, got, m):
    """None when the real answer is the model's; otherwise a description."""
    if want[0] != got[0] or (want[0] == "error" and want[1:] != got[1:]):
        return f"expected {want}, got {got}"
    if want[0] == "error":
        return None
    if op["op"] in ("create", "update", "rollback", "delete", "retry"):
        row = got[1]
        real = {"state": row["lifecycle_state"], "ctr": row["version_ctr"], "desired": row["desired_revision"],
                "applied": row["applied_revision"], "name": row["service_name"], "target": row["dpu_target"]}
        if real != want[1]:
            return f"expected row {want[1]}, got {real}"
        s = m.services[op["args"]["sid"]]
        if s["version"] is None:                          # learnt at create: V1-T<micros>, stable
            if not re.fullmatch(r"V1-T[0-9]+", row["version"] or ""):
                return f"version {row['version']!r} is not V1-T<micros>"
            s["version"] = row["version"]
        elif row["version"] != s["version"]:
            return f"version changed from {s['version']} to {row['version']}"
        return None
    if op["op"] == "set_services":
        return None if str(want[1]) == got[1] else f"expected config_version {want[1]}, got {got[1]}"
    if op["op"] in ("register_dpu", "deregister_dpu", "upsert_instance", "delete_instance"):
        return None if got[1] in (None, "") else f"expected no value, got {got[1]!r}"
    return None if got[1] == want[1] else f"expected {want[1]!r}, got {got[1]!r}"


def diff_states(want, got):
    out = []
    for part in want:
        w, g = want[part], got.get(part, {})
        for key in sorted(set(w) | set(g)):
            if w.get(key) != g.get(key):
                out.append(f"{part}[{key}]: model {w.get(key)}, database {g.get(key)}")
    return out


def describe(op):
    a = dict(op["args"])
    if op["op"] == "w_observe":
        a.pop("versions", None)
    if "data" in a and isinstance(a["data"], int):
        a["data"] = f"variant{a['data']}"
    return f"{op['op']}({', '.join(f'{k}={v!r}' for k, v in a.items())})"


def run_sequence(sess, seed, length, norm, check_every_op, verbose):
    """Returns (calls run, mismatch lines with the trace (empty: passed), what it exercised)."""
    rng = random.Random(seed)
    m = Model()
    m.focus = rng.random() < 0.5
    sess.run("SELECT model.reset()")
    trace = []
    for n in range(length):
        op = gen(rng, m)
        want, m2 = apply_model(m, op)
        sql, role = render(op)
        raw = sess.run(f"SELECT model.try({lit(sql)}, {lit(role)})")
        try:
            got, msg = real_answer(raw)
        except (ValueError, KeyError):
            got, msg = ("unreadable", raw), None
        line = f"  {n + 1:2d}. {describe(op)} -> {got[:3] if got[0] == 'error' else 'ok'}" + (
            f" ({msg})" if msg else "")
        trace.append(line)
        if verbose:
            print(line)
        bad = compare_answer(op, want, got, m2) if got[0] != "unreadable" else f"unreadable answer {raw!r}"
        if bad:
            return n + 1, trace + [f"  MISMATCH at call {n + 1}: {bad}"], m.events
        m = m2
        if check_every_op or n == length - 1:
            real = json.loads(sess.run(SNAPSHOT_SQL))
            d = diff_states(m.snapshot(norm), real)
            if d:
                return n + 1, trace + [f"  MISMATCH of the state after call {n + 1}:"] + ["    " + x for x in d], m.events
    return length, [], m.events


# ---------------------------------------------------------------------------
# Servers

class OwnCluster:
    """A throw-away cluster (extsvc_testkit.cluster): private port and socket
    directory, the library preloaded, no Kubernetes cluster configured (the
    worker stays idle; it does not watch extsvc_model anyway)."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="nico-extsvc-model.")
        os.chmod(self.top, 0o755)
        self.pg = cluster.Cluster(os.path.join(self.top, "pg"), {
            "extsvc.workers": "1", "synchronous_commit": "off"})
        self.pg.start()
        os.environ.update(self.pg.env())

    def stop(self):
        try:
            CONNS.close()
            self.pg.stop()
        finally:
            shutil.rmtree(self.top, ignore_errors=True)


def psql(db, sql):  # noqa: F811 - the parameter keeps the old helper's name
    """One statement on the kept connection to db; raises on error; the rows
    as psql -A -t printed them."""
    rows = CONNS.sql(sql, db)
    return "\n".join("|".join("" if v is None else v for v in r) for r in rows).strip()


def setup_db():
    psql("postgres", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql("postgres", f"DROP ROLE IF EXISTS {API_ROLE}")
    psql("postgres", f"CREATE DATABASE {DB}")
    r = subprocess.run([tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", DB], input=SETUP_SQL,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("setup failed:\n" + r.stderr)
    psql("postgres", f"CREATE ROLE {API_ROLE} NOLOGIN IN ROLE extsvc_api")   # extsvc_api: made by the extension
    # model.reset(): every table of the extension with user data emptied,
    # triggers and foreign keys off (session_replication_role), in one call
    tables = psql(DB, """
        SELECT string_agg(format('%I.%I', n.nspname, c.relname), ' ' ORDER BY c.relname)
          FROM pg_depend d JOIN pg_class c ON c.oid = d.objid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
           AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'nico_extsvc')
           AND d.deptype = 'e' AND c.relkind = 'r'
           AND c.relname NOT IN ('lifecycle_transitions', 'placement_transitions', 'chart_allowlist')""").split()
    body = " ".join(f"DELETE FROM {t};" for t in tables)
    psql(DB, "CREATE FUNCTION model.reset() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN "
             "PERFORM set_config('session_replication_role', 'replica', true); " + body +
         " PERFORM set_config('session_replication_role', 'origin', true); END $f$")
    # the normalized form of each valid variant, as the database stores it
    return [psql(DB, f"SELECT extsvc.validate_dpf_helm_chart_data({lit(v)})::text") for v in VARIANTS]


def teardown_db():
    psql("postgres", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql("postgres", f"DROP ROLE IF EXISTS {API_ROLE}")


def write_doc(run):
    """Records a run in the model-results block of docs/reliability.md: the
    runs are kept as JSON comments in the block (a run of the same seeds
    replaces its own), and the table is drawn from all of them, so a long
    run made in parts (lock released between them) is recorded whole."""
    path = os.path.join(ROOT, "docs", "reliability.md")
    with open(path) as f:
        doc = f.read()
    pat = re.compile(r"(<!-- model-results:begin[^>]*-->\n)(.*?)(<!-- model-results:end -->)", re.S)
    mm = pat.search(doc)
    if not mm:
        raise RuntimeError(f"no model-results block in {path}")
    runs = [json.loads(x) for x in re.findall(r"<!-- model-run (.*?) -->", mm.group(2))]
    runs = [r for r in runs if r["seeds"] != run["seeds"]] + [run]
    runs.sort(key=lambda r: r["seeds"][0])
    lines = ["| seeds | sequences | calls | state compared | mismatches | time | sequences/s | calls/s |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['seeds'][0]}..{r['seeds'][1]} | {r['sequences']:,} | {r['calls']:,} | "
                     f"{'after every call' if r['every_op'] else 'after every sequence'}"
                     f"{', histories included' if r.get('histories') else ' (histories not compared yet)'} | {r['failed']} | "
                     f"{r['seconds']:.0f} s | {r['sequences'] / r['seconds']:.1f} | {r['calls'] / r['seconds']:.0f} |")
    if len(runs) > 1:
        seq, calls, secs = (sum(r[k] for r in runs) for k in ("sequences", "calls", "seconds"))
        lines.append(f"| **all** | **{seq:,}** | **{calls:,}** | | **{sum(r['failed'] for r in runs)}** | "
                     f"{secs:.0f} s | {seq / secs:.1f} | {calls / secs:.0f} |")
    cov = collections.Counter()
    for r in runs:
        cov.update(r["coverage"])
    lines += ["", "Sequences that exercised each path (of "
              f"{sum(r['sequences'] for r in runs):,}): " + "; ".join(f"{k} {v:,}" for k, v in sorted(cov.items())) + ".",
              "", "Measured " + ", ".join(sorted({r["date"] for r in runs})) + " by `PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py "
              "--own-cluster --seed S --sequences N --write-doc` (`--check-every-op` where the table says so), "
              "one line per run."]
    lines += [f"<!-- model-run {json.dumps(r, sort_keys=True)} -->" for r in runs]
    doc = doc[:mm.start()] + mm.group(1) + "\n".join(lines) + "\n" + mm.group(3) + doc[mm.end():]
    with open(path, "w") as f:
        f.write(doc)
    # the summary table at the top is drawn from these records
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reliability_summary.py")], check=True)


def commit_stamp():
    """The commit a run measured ("+local" when src/, sql/ or sim/ differ
    from it); extsvc_testkit.invariants.run_stamp does the same."""
    def git(*args):
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + (
        "+local" if git("status", "--porcelain", "--", "src", "sql", "sim") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=10000)
    ap.add_argument("--length", type=int, default=20, help="calls per sequence")
    ap.add_argument("--seed", type=int, default=1, help="sequence k has seed SEED + k")
    ap.add_argument("--ci", action="store_true", help="300 sequences (the test suite)")
    ap.add_argument("--check-every-op", action="store_true", help="compare the whole state after every call")
    ap.add_argument("--own-cluster", action="store_true", help="start a throw-away cluster (else psql's PG* variables)")
    ap.add_argument("--max-failures", type=int, default=20, help="stop after this many failed sequences")
    ap.add_argument("--write-doc", action="store_true", help="record the figures in docs/reliability.md")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every call")
    args = ap.parse_args()
    if args.ci:
        args.sequences = 300
        args.check_every_op = True

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the own cluster is stopped on the way out
    cluster = OwnCluster() if args.own_cluster else None
    passed = failed = ops = 0
    coverage = collections.Counter()
    t0 = time.time()
    try:
        norm = setup_db()
        sess = Session()
        for k in range(args.sequences):
            seed = args.seed + k
            n, bad, events = run_sequence(sess, seed, args.length, norm, args.check_every_op, args.verbose)
            ops += n
            coverage.update(events)
            if bad:
                failed += 1
                print(f"sequence {k} seed {seed}: FAILED")
                print("\n".join(bad))
                print(f"  replay: PYTHONPATH=python /usr/bin/python3 test/model/model_sql.py --seed {seed} --sequences 1 --length {args.length}"
                      f"{' --check-every-op' if args.check_every_op else ''} -v")
                if failed >= args.max_failures:
                    print(f"stopping after {failed} failed sequences")
                    break
            else:
                passed += 1
                print(f"sequence {k} seed {seed}: ok ({n} calls)")
        sess.close()
        teardown_db()
    finally:
        if cluster:
            cluster.stop()
    dt = time.time() - t0
    total = passed + failed
    print(f"{total} sequences, {ops} calls in {dt:.1f} s: {total / dt:.1f} sequences/s, {ops / dt:.0f} calls/s"
          f" (seeds {args.seed}..{args.seed + total - 1}, length {args.length}"
          f"{', state compared after every call' if args.check_every_op else ''})")
    print("sequences that exercised: " + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items())))
    if args.write_doc:
        write_doc({"seeds": [args.seed, args.seed + total - 1], "sequences": total, "calls": ops, "length": args.length,
                   "every_op": args.check_every_op, "histories": True, "failed": failed, "seconds": round(dt, 1),
                   "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit_stamp(),
                   "coverage": dict(coverage)})
    print(f"model_sql: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
