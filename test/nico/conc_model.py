"""The reference model of the concurrency test (issue 22, part 5).

test/model/reference_model.py's Model (of model_sql.py) knows the contract of DPF services and their
placement (written from SPEC 2.4-2.10 and the docs, not from the SQL). NICo's
handlers also work KUBERNETES_POD services: this subclass adds them (create,
credential rotation, deletion of versions and of the service, attachments
that stay as tombstones until NICo confirms their termination, no attachment
rows), the transaction scope of "attached by this call" (an entry attached
earlier in the same transaction is new too: the SQL compares attached_at with
now()), and a faithful worker pass (w_pass: every row of a DPU observed as a
correct pass would report it). snapshot() and SNAPSHOT_SQL give the
observable state of both kinds; a transaction is applied atomically by
apply_txn.
"""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))

from reference_model import Model, Refused  # noqa: E402


class NicoModel(Model):
    def __init__(self):
        super().__init__()
        self.kp = {}             # KUBERNETES_POD services: sid -> {tenant, name, state, ctr, data, versions, history}
        self.kp_entries = {}     # (iid, sid, version) -> {"removed": bool}
        self.txn_new = set()     # entries attached by the transaction in progress

    # --- KUBERNETES_POD services ----------------------------------------------------

    def name_taken(self, tenant, name, except_sid):
        dpf = super().name_taken(tenant, name, except_sid)
        return dpf or any(s["tenant"] == tenant and s["name"].lower() == name.lower() and s["state"] != "DELETED"
                          and sid != except_sid for sid, s in getattr(self, "kp", {}).items())

    def create_kp(self, a):
        if a["sid"] in self.kp or a["sid"] in self.services:
            raise Refused("23505", "service_records_pkey")
        if self.name_taken(a["tenant"], a["name"], None):
            raise Refused("23505", "service_records_tenant_name_key")
        self.kp[a["sid"]] = {"tenant": a["tenant"], "name": a["name"], "state": "READY", "ctr": 1,
                             "versions": {1: {"v": None, "cred": a["cred"], "data": a["data"], "deleted": False}},
                             "history": [[None, "READY", "api", "create"]]}
        return ("READY", 1)

    def kp_gate(self, sid, tenant):
        s = self.kp.get(sid)
        if tenant is not None and (s is None or s["tenant"] != tenant):
            raise Refused("42501")
        if s is None:
            raise Refused("P0002")
        return s

    def rotate_kp(self, a):
        """update_service with data and has_credential => true: always a new version."""
        s = self.kp_gate(a["sid"], a["tenant"])
        if s["state"] == "DELETED":
            raise Refused("55000", "service_lifecycle_state")
        if a["ctr"] is not None and a["ctr"] != s["ctr"]:
            raise Refused("55000", "version_ctr_match")
        s["ctr"] += 1
        s["versions"][s["ctr"]] = {"v": None, "cred": True, "data": a["data"], "deleted": False}
        s["history"].append(["READY", "READY", "api", "new_version"])
        return ("READY", s["ctr"])

    def kp_in_use(self, sid, version=None):
        return any(k[1] == sid and (version is None or k[2] == version) for k in self.kp_entries)

    def delete_kp(self, a):
        """delete_service (all versions) or delete_service_versions (some)."""
        s = self.kp_gate(a["sid"], a["tenant"])
        live = {n: x for n, x in s["versions"].items() if not x["deleted"]}
        if a["versions"] is None:
            if s["state"] == "DELETED":
                return ("DELETED", [])                    # idempotent
            if self.kp_in_use(a["sid"]):
                raise Refused("55000", "service_in_use")
            gone = sorted(live)
        else:
            names = {x["v"]: n for n, x in live.items()}
            if any(v not in names for v in a["versions"]):
                raise Refused("P0002")
            gone = sorted({names[v] for v in a["versions"]})
            for n in gone:                                # one version at a time, all or none
                if self.kp_in_use(a["sid"], s["versions"][n]["v"]):
                    raise Refused("55000", "service_in_use")
        # one version at a time, in the order of their strings (delete_service_versions),
        # the last one making the service DELETED
        for n in sorted(gone, key=lambda n: s["versions"][n]["v"] or ""):
            s["versions"][n]["deleted"] = True
            if all(x["deleted"] for x in s["versions"].values()):
                s["history"].append(["READY", "DELETED", "api", "delete"])
                s["state"] = "DELETED"
            elif a["versions"] is not None:
                s["history"].append(["READY", "READY", "api", "version_deleted"])
        removed = [(n, s["versions"][n]["cred"]) for n in gone]
        # delete_service answers the row (its state) and removed_versions;
        # delete_service_versions the removed versions alone
        return (s["state"], removed) if a["versions"] is None else removed

    def remove_terminated(self, a):
        self.inst_gate(a["iid"], a["tenant"])
        for sid, version in a["entries"]:
            e = self.kp_entries.get((a["iid"], sid, version))
            if e is None or not e["removed"]:
                raise Refused("55000", "entry_not_removed")
        n = 0
        for sid, version in a["entries"]:
            if self.kp_entries.pop((a["iid"], sid, version), None) is not None:
                n += 1
        self.cleanup(a["iid"])
        return n

    # --- configurations of both kinds --------------------------------------------------

    def set_services(self, a):
        inst = self.inst_gate(a["iid"], a["tenant"])
        if inst["deleting"]:
            raise Refused("55000", "instance_deleting")
        if a["cv"] is not None and a["cv"] != inst["cv"]:
            raise Refused("55000", "config_version_match")
        want, kinds, seen = [], set(), []
        for sid, version in a["entries"]:
            if sid in seen:
                raise Refused("22023")                    # a service appears twice
            seen.append(sid)
            s = self.services.get(sid) or self.kp.get(sid)
            if a["tenant"] is not None and (s is None or s["tenant"] != a["tenant"]):
                raise Refused("42501")
            if s is None:
                raise Refused("P0002")
            if s["tenant"] != inst["tenant"]:
                raise Refused("42501")                    # cross-tenant attach
            if sid in self.kp:
                if not any(x["v"] == version and not x["deleted"] for x in s["versions"].values()):
                    raise Refused("P0002")
                kinds.add("KP")
            else:
                if version != s["version"] or s["versions_deleted"]:
                    raise Refused("P0002")
                if not inst["dpf"]:
                    raise Refused("22023")                # DPF services need a DPF-managed host
                cur = self.entries.get((a["iid"], sid))
                if (cur is None or cur["removed"]) and s["state"] != "READY":
                    raise Refused("55000", "service_not_ready")
                kinds.add("DPF")
            want.append((sid, version))
        if len(kinds) > 1:
            raise Refused("22023")                        # one service type per instance
        changed = False
        for (i, sid), e in self.entries.items():
            if i == a["iid"] and not e["removed"] and (sid, self.services[sid]["version"]) not in want:
                e["removed"], changed = True, True
        for (i, sid, v), e in self.kp_entries.items():
            if i == a["iid"] and not e["removed"] and (sid, v) not in want:
                e["removed"], changed = True, True
        for sid, version in want:
            if sid in self.kp:
                cur = self.kp_entries.get((a["iid"], sid, version))
                if cur is None or cur["removed"]:
                    self.kp_entries[(a["iid"], sid, version)] = {"removed": False}
                    changed = True
            else:
                cur = self.entries.get((a["iid"], sid))
                if cur is None or cur["removed"]:
                    self.entries[(a["iid"], sid)] = {"removed": False, "new": True}
                    self.txn_new.add((a["iid"], sid))
                    changed = True
        for k, e in self.entries.items():
            e["new"] = k in self.txn_new                  # attached by this transaction (attached_at = now())
        if not changed:
            return inst["cv"]
        inst["cv"] += 1
        self.materialize(a["iid"], True)
        self.drop_empty_tombstones(a["iid"])
        return inst["cv"]

    def lock_placement(self, a):
        """Locks only: no answer, no change."""
        return None

    def read_instance(self, a):
        """get_instance as a handler reads it: config_version and the entries."""
        inst = self.inst_gate(a["iid"], a["tenant"])
        entries = [(sid, self.services[sid]["version"], e["removed"]) for (i, sid), e in self.entries.items() if i == a["iid"]]
        entries += [(sid, v, e["removed"]) for (i, sid, v), e in self.kp_entries.items() if i == a["iid"]]
        return (inst["cv"], sorted(entries))

    def delete_instance(self, a):
        inst = self.inst_gate(a["iid"], a["tenant"])
        if not inst["deleting"]:
            for k, e in self.kp_entries.items():
                if k[0] == a["iid"]:
                    e["removed"] = True
        return super().delete_instance(a)

    def cleanup(self, iid):
        if iid in self.instances and any(k[0] == iid for k in self.kp_entries):
            saved = self.instances[iid]["deleting"]
            self.instances[iid]["deleting"] = False       # KUBERNETES_POD entries keep the instance
            super().cleanup(iid)
            self.instances[iid]["deleting"] = saved
            return
        super().cleanup(iid)

    def delete(self, a):
        if a["sid"] in self.kp:
            return self.delete_kp({"sid": a["sid"], "tenant": a["tenant"], "versions": None})
        before = self.services.get(a["sid"], {}).get("state")
        row = super().delete(a)
        if before != "DELETING" and self.services[a["sid"]]["state"] == "DELETING":
            self.services[a["sid"]]["sv"] += 1
        return row

    # The service queue's compare-and-swap: every new intent of the API on a
    # DPF service (a create, a new revision, a delete) bumps the row's
    # state_version (_intent_changed); the worker claims a row while intent
    # is pending (CREATING, UPDATING, DELETING) and its completion is applied
    # only if the version it claimed is still current, else 'stale'.
    def claimable(self, sid):
        return self.services[sid]["state"] in ("CREATING", "UPDATING", "DELETING")

    def create(self, a):
        row = super().create(a)
        self.services[a["sid"]].setdefault("sv", 1)
        return row

    def update(self, a, rollback_of=None):
        before = self.services.get(a["sid"], {}).get("desired")
        row = super().update(a, rollback_of)
        if self.services[a["sid"]]["desired"] != before:
            self.services[a["sid"]]["sv"] += 1
        return row

    def _worker(self, a, fn):
        if a["claimed"] is None:
            return "not due"
        if a["claimed"] != self.services[a["sid"]]["sv"]:
            return "stale"
        return fn(a)

    def w_ready(self, a):
        return self._worker(a, super().w_ready)

    def w_deleted(self, a):
        return self._worker(a, super().w_deleted)

    def w_pass(self, a):
        """A faithful worker pass over one DPU: wanted rows RUNNING, the others TERMINATED."""
        self.actor = "worker"
        results = []
        for (iid, d, sid), r in sorted(self.rows.items()):
            if d == a["dpu"]:
                wanted = r["pl"] == "ACTIVE" and not self.dpus[d]["dereg"]
                results.append((iid, sid, "RUNNING" if wanted else "TERMINATED"))
        return self.w_observe({"dpu": a["dpu"], "results": results})

    # --- what both kinds show ------------------------------------------------------------

    def snapshot(self, norm):
        out = super().snapshot(norm)
        for sid, s in self.kp.items():
            latest = max((n for n, x in s["versions"].items() if not x["deleted"]), default=None)
            out["services"][sid] = [s["tenant"], s["name"], None, s["state"],
                                    s["versions"][latest]["v"] if latest else None, s["ctr"], None, None,
                                    s["state"] == "DELETED", s["state"] == "DELETED"]
            out["history"][sid] = s["history"]
        out["versions"] = {}
        for sid, s in self.services.items():
            out["versions"][f"{sid}/1"] = [s["version"], s["versions_deleted"], False]
        for sid, s in self.kp.items():
            for n, x in s["versions"].items():
                out["versions"][f"{sid}/{n}"] = [x["v"], x["deleted"], x["cred"]]
        for (iid, sid, v), e in self.kp_entries.items():
            out["entries"][f"{iid}/{sid}/{v}"] = [v, e["removed"]]
        out["entries"] = {(k if k.count("/") == 2 else f"{k}/{out['entries'][k][0]}"): e
                          for k, e in out["entries"].items()}
        for i in self.instances:
            for (ii, sid, v), e in self.kp_entries.items():
                if ii == i:
                    out["summary"][f"{i}/{sid}/{v}"] = [None, e["removed"], 0, True]
        out["summary"] = {(k if k.count("/") == 2 else f"{k}/{self.services[k.split('/')[1]]['version']}"): v
                          for k, v in out["summary"].items()}
        return out


def apply_txn(m, ops):
    """Applies a handler transaction's ops to a copy of m, atomically.
    Returns (answers, new model): answers per op ("ok", value) up to the
    first ("error", sqlstate, constraint); the model is m unchanged when an
    op was refused (the transaction rolls back)."""
    trial = copy.deepcopy(m)
    trial.txn_new = set()
    answers = []
    for op in ops:
        trial.actor = "api"
        try:
            answers.append(("ok", getattr(trial, op["op"])(op["args"])))
        except Refused as r:
            answers.append(("error", r.state, r.constraint))
            return answers, m
    trial.txn_new = set()
    return answers, trial


SNAPSHOT_SQL = r"""
SELECT json_build_object(
  'services', (SELECT coalesce(json_object_agg(service_id, json_build_array(tenant_organization_id, service_name,
                 dpu_target, lifecycle_state, version, version_ctr, desired_revision, applied_revision,
                 deleted_at IS NOT NULL, (SELECT r.delete_requested_at IS NOT NULL FROM extsvc.service_records r
                                           WHERE r.service_id = v.service_id))), '{}') FROM extsvc.services v),
  'revisions', (SELECT coalesce(json_object_agg(service_id || '/' || revision, json_build_array(data::text,
                 rollback_of, applied_at IS NOT NULL, superseded_at IS NOT NULL)), '{}') FROM extsvc.helm_revisions),
  'versions', (SELECT coalesce(json_object_agg(service_id || '/' || version_number,
                 json_build_array(version, deleted_at IS NOT NULL, has_credential)), '{}') FROM extsvc.service_versions),
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
  'entries', (SELECT coalesce(json_object_agg(instance_id || '/' || service_id || '/' || version,
                 json_build_array(version, removed_at IS NOT NULL)), '{}') FROM extsvc.instance_extension_services),
  'attachments', (SELECT coalesce(json_object_agg(instance_id || '/' || dpu_machine_id || '/' || service_id,
                 json_build_array(version, placement_state, deployment_state, observed_config_version)), '{}')
                 FROM extsvc.dpf_extension_service_attachments),
  'summary', (SELECT coalesce(json_object_agg(i.instance_id || '/' || x.service_id || '/' || x.version,
                 json_build_array(x.aggregate_state, x.removed, x.dpus, x.configs_synced)), '{}')
                 FROM extsvc.instances i CROSS JOIN LATERAL extsvc.instance_extension_services_summary(i.instance_id) x),
  'ready', (SELECT coalesce(json_object_agg(instance_id, extsvc.instance_extension_services_ready(instance_id)), '{}')
                 FROM extsvc.instances))::text
"""
