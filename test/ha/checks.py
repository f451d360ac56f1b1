"""The checks of the Patroni suite that read dpfsim's request log and the
load's record of writes.

Two kinds of evidence. By content: a
write sent to a lingering old primary carries a unique marker, a service id
or a DPU only that write can produce, so a request after a marked point that
carries it proves the write reached the cluster. By author, from the
User-Agent every worker request carries (issue 25: `nico_extsvc/<version>
(<holderIdentity>)`, with the system identifier and timeline), in the log
file of `dpfsim --request-log`: which server made which write."""
import json
import re

import kubelog

PLACEMENT_PREFIX = "nico/extsvc-"
DPUSERVICE = re.compile(r"/dpuservices(?:/([^/]+))?$")
DPUDEVICE = re.compile(r"/dpudevices/([^/]+)$")
NODE = re.compile(r"/api/v1/nodes/([^/]+)$")


class Scenario:
    """One scenario's checks and figures."""

    def __init__(self, name):
        self.name = name
        self.results = []
        self.figures = {}
        self.error = None

    def check(self, ok, what, detail=None):
        ok = bool(ok)
        print(f"    {'ok' if ok else 'FAILED':8}{what}" + ("" if ok or detail is None else f" -- {detail}"), flush=True)
        self.results.append({"what": what, "ok": ok})
        return ok

    def failed(self):
        return [r for r in self.results if not r["ok"]]

    def passed(self):
        return self.error is None and not self.failed()


def body(e):
    try:
        return json.loads(e.get("body") or "null")
    except ValueError:
        return None


def _walk(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def nulled_keys(e):
    """Placement label keys a label patch removes."""
    return {k for k, v in _walk(body(e)) if isinstance(k, str) and k.startswith(PLACEMENT_PREFIX) and v is None}


def dpuservice_of(e):
    """The DPUService a request writes (from its path, or a POST's body)."""
    m = DPUSERVICE.search(e.get("path") or "")
    if not m:
        return None
    if m.group(1):
        return m.group(1)
    b = body(e) or {}
    return ((b.get("metadata") or {}).get("name")) if isinstance(b, dict) else None


def label_target(e):
    """('device', name) or ('node', name) for a label write, else None."""
    path = e.get("path") or ""
    m = DPUDEVICE.search(path)
    if m and e.get("cluster") == "management":
        return ("device", m.group(1))
    m = NODE.search(path)
    if m and e.get("cluster") == "dpu":
        return ("node", m.group(1))
    return None


def mentions(e, text):
    return text in (e.get("path") or "") or text in (e.get("body") or "")


def stray_effects(writes, entries, since_seq, deleted_names, stray_devices, stray_nodes):
    """Requests after since_seq that only a write sent to the lingering old
    primary can have caused: a created service's id, an update's marker, the
    DELETE of a DPUService whose service the cluster's primary keeps, a label
    write on a DPU of the stray host (whose instance only those writes touch)."""
    after = [e for e in entries if e["seq"] > since_seq and e["verb"] in kubelog.WRITE_VERBS]
    found = []
    for w in writes:
        if w.outcome != "committed":
            continue
        for e in after:
            if w.kind == "create" and w.want.get("service_id") and mentions(e, w.want["service_id"]):
                found.append((w.kind, w.want.get("name"), e))
            elif w.kind == "update" and mentions(e, w.want["marker"]):
                found.append((w.kind, w.want["service_id"], e))
    for e in after:
        if e["verb"] == "DELETE" and dpuservice_of(e) in deleted_names:
            found.append(("delete", dpuservice_of(e), e))
        t = label_target(e)
        if t and (t[1] in stray_devices if t[0] == "device" else t[1] in stray_nodes):
            found.append(("attach/detach", t[1], e))
    return found


def deletes_of_live(entries, since_seq, live_names):
    """DELETEs after since_seq of DPUServices whose services are live."""
    return [e for e in entries if e["seq"] > since_seq and e["verb"] == "DELETE" and dpuservice_of(e) in live_names]


def writes_of(entries, since_seq, sysid, timeline=None, include_leases=False, until_seq=None):
    """Writes after since_seq (up to until_seq) by the server with this system identifier (and timeline)."""
    return [e for e in entries if e["seq"] > since_seq and (until_seq is None or e["seq"] <= until_seq)
            and e["verb"] in kubelog.WRITE_VERBS
            and (include_leases or not (e.get("resource") or "").startswith("leases"))
            and kubelog.from_server(e, sysid, timeline)]


def describe(found, limit=5):
    out = []
    for item in found[:limit]:
        e = item[-1]
        out.append(" ".join(str(x) for x in item[:-1]) + f": #{e['seq']} {e['method']} {e['path']}")
    return "; ".join(out) + (f" (+{len(found) - limit})" if len(found) > limit else "")


def lost_writes(conn, writes, server, until):
    """Writes the old primary acknowledged (committed before `until`) that the
    new primary does not have: a create whose service is unknown, an update
    whose marker is in no Helm revision, a delete of a service still live, and
    the last attach/detach of an instance whose active entries differ."""
    lost = []
    last_set = {}
    for w in writes:
        if w.outcome != "committed" or w.server != server or w.t1 > until:
            continue
        sid = w.want.get("service_id")
        if w.kind == "create":
            if not conn.execute("SELECT EXISTS (SELECT FROM extsvc.services WHERE service_id = %s)",
                                (sid,)).fetchone()[0]:
                lost.append(w)
        elif w.kind == "update":
            if not conn.execute("SELECT EXISTS (SELECT FROM extsvc.helm_revisions r WHERE r.service_id = %s "
                                "AND r::text LIKE %s)", (sid, "%" + w.want["marker"] + "%")).fetchone()[0]:
                lost.append(w)
        elif w.kind == "delete":
            state = conn.execute("SELECT lifecycle_state FROM extsvc.services WHERE service_id = %s",
                                 (sid,)).fetchone()
            if state and state[0] not in ("DELETING", "DELETED"):
                lost.append(w)
        elif w.kind in ("attach", "detach"):
            last_set[w.want["instance"]] = w
    for iid, w in last_set.items():
        later = [x for x in writes if x.kind in ("attach", "detach") and x.want.get("instance") == iid
                 and x.outcome in ("committed", "unknown") and x.t0 > w.t0]
        if later:
            continue  # a later write (possibly on the new primary) decides the set
        row = conn.execute("SELECT services FROM extsvc.get_instance(%s::uuid)", (iid,)).fetchone()
        have = {e["service_id"] for e in (row[0] if row and row[0] else []) if not e.get("removed_at")}
        if have != {e["service_id"] for e in w.want["services"]}:
            lost.append(w)
    return lost
