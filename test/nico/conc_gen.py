"""The fixtures and the generator of test/nico/concurrency.py: a NICo handler transaction drawn
from the model's state (mostly calls that should work, invalid ones mixed in)."""
import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "model"))

from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id  # noqa: E402
from reference_model import TARGETS, VARIANTS  # noqa: E402

TENANTS = ["t-a", "t-b"]
HOSTS = [host_machine_id(f"conc-host-{n}") for n in range(3)]      # H0, H1 DPF; H2 without DPF
DPUS = {h: [dpu_machine_id(f"conc-dpu-{n}-{k}") for k in range(2)] for n, h in enumerate(HOSTS[:2])}
NAMES = ["svc-a", "SVC-A", "svc-b", "svc-c", "svc-d"]
DPF_INSTANCES = [str(uuid.UUID(int=0xc1 << 120 | n)) for n in range(6)]
KP_INSTANCES = [str(uuid.UUID(int=0xc2 << 120 | n)) for n in range(4)]
HOST_OF = {i: HOSTS[n % 2] for n, i in enumerate(DPF_INSTANCES)} | {i: HOSTS[2] for i in KP_INSTANCES}


class Gen:
    def __init__(self, rng, m, session, prefer=()):
        self.rng, self.m, self.session = rng, m, session
        self.prefer = set(prefer)   # ids the partner's transaction touches: chosen more often

    def pick(self, candidates):
        """One of candidates, often one the partner touches (so that they meet)."""
        candidates = list(candidates)
        hot = [c for c in candidates if c in self.prefer]
        if hot and self.rng.random() < 0.6:
            return self.rng.choice(hot)
        return self.rng.choice(candidates)

    def live_instances(self):
        # NICo works instances that are not being deleted; now and then one that is
        live = [i for i, x in sorted(self.m.instances.items()) if not x["deleting"]]
        return live if live and self.rng.random() < 0.9 else sorted(self.m.instances)

    def fresh_sid(self):
        # each session mints its own ids, as NICo does (a uuid per create)
        return str(uuid.UUID(int=(0xa1 if self.session == "a" else 0xb1) << 120 | self.rng.getrandbits(64)))

    def tenant_arg(self, owner):
        return owner if self.rng.random() < 0.85 else None

    def live_dpf(self, tenant=None, state=None):
        return [s for s, x in self.m.services.items() if x["state"] not in ("DELETING", "DELETED")
                and (tenant is None or x["tenant"] == tenant) and (state is None or x["state"] == state)]

    def live_kp(self, tenant=None):
        return [s for s, x in self.m.kp.items() if x["state"] != "DELETED" and (tenant is None or x["tenant"] == tenant)]

    def kp_version(self, sid):
        live = [x["v"] for x in self.m.kp[sid]["versions"].values() if not x["deleted"] and x["v"]]
        return self.rng.choice(live) if live else None

    def entries_for(self, iid, tenant):
        """0-2 entries NICo would request for the instance: its host's kind of service."""
        if HOST_OF[iid] == HOSTS[2]:
            pool = [(s, self.kp_version(s)) for s in self.live_kp(tenant)]
        else:
            pool = [(s, self.m.services[s]["version"]) for s in self.live_dpf(tenant, "READY")]
        pool = [p for p in pool if p[1]]
        return self.rng.sample(pool, min(len(pool), self.rng.choice([0, 1, 1, 2])))

    def ctr(self, current):
        x = self.rng.random()
        return None if x < 0.4 else (current if x < 0.9 else current - 1)

    def txn(self):
        r, m = self.rng, self.m
        kinds = {"create_dpf": 5 if len(m.services) < 3 else 2, "create_kp": 4 if len(m.kp) < 3 else 1,
                 "ready": 6 if self.live_dpf(state="CREATING") + self.live_dpf(state="UPDATING") else 0,
                 "update_dpf": 4 if self.live_dpf() else 0, "rotate_kp": 4 if self.live_kp() else 0,
                 "delete_service": 2 if m.services or m.kp else 0, "delete_kp_version": 2 if self.live_kp() else 0,
                 "w_deleted": 4 if any(x["state"] == "DELETING" for x in m.services.values()) else 0,
                 "allocate": 8, "attach": 7 if m.instances else 0, "detach": 5 if m.instances else 0,
                 "network": 2 if m.instances else 0, "delete_instance": 2 if m.instances else 0,
                 "agent_terminated": 3 if any(e["removed"] for e in m.kp_entries.values()) else 0,
                 "w_pass": 8 if m.rows else 0}
        kind = r.choices(list(kinds), list(kinds.values()))[0]
        return kind, getattr(self, "t_" + kind)()

    def t_create_dpf(self):
        return [{"op": "create", "args": {"sid": self.fresh_sid(), "tenant": self.rng.choices(TENANTS, [5, 1])[0],
                                          "name": self.rng.choice(NAMES), "target": self.rng.choice(TARGETS),
                                          "data": self.rng.randrange(len(VARIANTS)), "cred": False, "all_dpus": False}}]

    def t_create_kp(self):
        return [{"op": "create_kp", "args": {"sid": self.fresh_sid(), "tenant": self.rng.choices(TENANTS, [5, 1])[0],
                                             "name": self.rng.choice(NAMES), "data": "kind: Pod",
                                             "cred": self.rng.random() < 0.5}}]

    def t_ready(self):
        sid = self.pick(self.live_dpf(state="CREATING") + self.live_dpf(state="UPDATING"))
        reason = "revision_applied" if self.m.services[sid]["state"] == "UPDATING" else "dpuservice_created"
        return [{"op": "w_ready", "args": {"sid": sid, "state": "READY", "reason": reason}, "worker": True}]

    def t_w_deleted(self):
        sid = self.pick([s for s, x in self.m.services.items() if x["state"] == "DELETING"])
        return [{"op": "w_deleted", "args": {"sid": sid, "state": "DELETED", "reason": "dpuservice_deleted"},
                 "worker": True}]

    def t_update_dpf(self):
        sid = self.pick(self.live_dpf())
        s = self.m.services[sid]
        return [{"op": "update", "args": {"sid": sid, "tenant": self.tenant_arg(s["tenant"]), "ctr": self.ctr(s["ctr"]),
                                          "cred": False, "name": None, "data": self.rng.randrange(len(VARIANTS))}}]

    def t_rotate_kp(self):
        sid = self.pick(self.live_kp())
        s = self.m.kp[sid]
        return [{"op": "rotate_kp", "args": {"sid": sid, "tenant": self.tenant_arg(s["tenant"]),
                                             "ctr": self.ctr(s["ctr"]), "data": "kind: Pod"}}]

    def t_delete_service(self):
        sid = self.pick(sorted(self.m.services) + sorted(self.m.kp))
        owner = (self.m.services.get(sid) or self.m.kp.get(sid))["tenant"]
        return [{"op": "delete", "args": {"sid": sid, "tenant": self.tenant_arg(owner), "version": None}}]

    def t_delete_kp_version(self):
        sid = self.pick(self.live_kp())
        v = self.kp_version(sid)
        return [{"op": "delete_kp", "args": {"sid": sid, "tenant": self.m.kp[sid]["tenant"], "versions": [v]}}] if v else []

    def t_allocate(self):
        """AllocateInstances: 1-3 instances, upsert each, then set each one's services."""
        r = self.rng
        first = self.pick(DPF_INSTANCES + KP_INSTANCES)
        iids = [first] + r.sample([i for i in DPF_INSTANCES + KP_INSTANCES if i != first], r.randint(0, 2))
        old = self.m.instances.get(first)
        tenant = old["tenant"] if old else r.choices(TENANTS, [6, 1])[0]     # one tenant's request
        ops, sets = [], []
        for iid in iids:
            host = HOST_OF[iid]
            net = (sorted(r.sample(DPUS[host], r.randint(1, 2))) if host in DPUS else []) if r.random() < 0.8 else None
            ops.append({"op": "upsert_instance", "args": {"iid": iid, "tenant": tenant, "host": host, "net": net,
                                                         "dpf": host in DPUS}})
            sets.append({"op": "set_services", "args": {"iid": iid, "tenant": tenant, "cv": None,
                                                        "entries": self.entries_for(iid, tenant)}})
        # NICo's allocation locks its machines first: the placement locks, first
        lock = {"op": "lock_placement", "args": {"hosts": sorted({HOST_OF[i] for i in iids}), "iids": iids,
                                                 "sids": sorted({e[0] for op in sets for e in op["args"]["entries"]}),
                                                 "tenant": tenant}}
        return [lock] + ops + sets

    def current(self, iid):
        e = [(s, self.m.services[s]["version"]) for (i, s), x in self.m.entries.items() if i == iid and not x["removed"]]
        return e + [(s, v) for (i, s, v), x in self.m.kp_entries.items() if i == iid and not x["removed"]]

    def config_update(self, iid, entries):
        """UpdateInstanceConfig: read, compare-and-swap on what was read, read back."""
        t = self.m.instances[iid]["tenant"]
        return [{"op": "read_instance", "args": {"iid": iid, "tenant": t}},
                {"op": "set_services", "args": {"iid": iid, "tenant": t, "cv": "read", "entries": entries}},
                {"op": "read_instance", "args": {"iid": iid, "tenant": t}}]

    def t_attach(self):
        iid = self.pick(self.live_instances())
        cur = self.current(iid)
        new = [e for e in self.entries_for(iid, self.m.instances[iid]["tenant"]) if e[0] not in {c[0] for c in cur}]
        return self.config_update(iid, cur + new[:1])

    def t_detach(self):
        iid = self.pick(self.live_instances())
        cur = self.current(iid)
        return self.config_update(iid, self.rng.sample(cur, max(0, len(cur) - 1)))

    def t_network(self):
        iid = self.pick([i for i in self.live_instances() if HOST_OF[i] in DPUS] or [None])
        if iid is None:
            return []
        host = HOST_OF[iid]
        return [{"op": "upsert_instance", "args": {"iid": iid, "tenant": self.m.instances[iid]["tenant"], "host": host,
                                                   "net": sorted(self.rng.sample(DPUS[host], self.rng.randint(1, 2))),
                                                   "dpf": None}}]

    def t_delete_instance(self):
        iid = self.pick(self.live_instances())
        return [{"op": "delete_instance", "args": {"iid": iid, "tenant": self.m.instances[iid]["tenant"]}}]

    def t_agent_terminated(self):
        k = self.rng.choice([k for k, e in sorted(self.m.kp_entries.items()) if e["removed"] and (k[0] in self.prefer or self.rng.random() < 0.5)] or [k for k, e in sorted(self.m.kp_entries.items()) if e["removed"]])
        return [{"op": "remove_terminated", "args": {"iid": k[0], "tenant": self.m.instances[k[0]]["tenant"],
                                                     "entries": [(k[1], k[2])]}}]

    def t_w_pass(self):
        return [{"op": "w_pass", "args": {"dpu": self.pick(sorted({k[1] for k in self.m.rows}))}, "worker": True}]
