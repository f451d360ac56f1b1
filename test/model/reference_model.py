"""The reference model of the SQL contract for test/model/model_sql.py (issue 13): the
fixtures every sequence draws from and what each call should answer and change, written from
SPEC 2.4-2.10 and docs/sql-api.md, docs/lifecycle.md and docs/placement.md, not from the SQL."""
import json
import re

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
