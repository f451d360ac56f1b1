"""The call generator of test/model/model_sql.py: mostly calls that should work in the model's
current state, with invalid ones mixed in; placement-focused sequences walk towards an attached,
observed service."""
from reference_model import (BAD_DATA, BAD_NAME, DEV_NAMES, DPUS, HOSTS, INSTANCES, NAMES, NODE_NAMES,
                             SERVICES, TARGETS, TENANTS, VARIANTS)


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
