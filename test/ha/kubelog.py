"""What dpfsim saw: its request log, and the site's Lease.

The request log is read from dpfsim's `--request-log FILE` (one JSON line per
request, with `user_agent`), merged by `seq` with what a poller of
`GET /requests` fetches (exactly the new entries, `GET /counts` says how
many), which keeps the request bodies the content checks read. Every
request has a `seq`, one total order of everything dpfsim served; `mark()`
puts a request of our own into it, so "after this point" is exact without
comparing clocks.

The Lease (issue 25): `coordination.k8s.io/v1` `nico-extsvc-<site_id>` in the
DPF namespace; its `spec.holderIdentity` names the holder's PostgreSQL system
identifier, timeline, database and worker start, and every request of a
worker carries `User-Agent: nico_extsvc/<version> (<holderIdentity>)`.
"""
import itertools
import json
import re
import threading
import time

from extsvc_testkit.harness import NAMESPACE

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE"}
_marks = itertools.count(1)


def entry_time(e):
    """Seconds since the epoch of a log entry (a number, or RFC 3339 text)."""
    t = e.get("time")
    if isinstance(t, (int, float)):
        return float(t)
    if not isinstance(t, str):
        return None
    m = re.match(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?Z?$", t)
    if not m:
        return None
    import calendar
    secs = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
    return secs + (float(m.group(7)) if m.group(7) else 0.0)


class RequestLog:
    """Every request dpfsim served, by seq. The poller of `GET /requests`
    always runs: its entries carry the request bodies the content checks
    read. With `--request-log FILE` the file is read too: it has every
    request (the poller sees the last 2000 at each poll) with microsecond
    times and the User-Agent; an entry seen both ways keeps the file's
    fields and gets the body from the poller."""

    def __init__(self, sim, path):
        self.sim, self.path = sim, path
        self._by_seq = {}
        self._offset = 0
        self._seen_total = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._poll, name="reqlog-poller", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(10)

    def _add(self, e):
        have = self._by_seq.setdefault(e["seq"], {})
        for k, v in e.items():
            have.setdefault(k, v)

    def _poll(self):
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._poll_once()
            except OSError:
                pass
            self._stop.wait(0.3)

    def _poll_once(self):
        """Fetches the entries added since the last poll (at most the 2000
        dpfsim keeps: a poll every 0.3 s never falls that far behind here)."""
        total = self.sim.counts().get("total", 0)
        want = min(2000, max(20, total - self._seen_total + 20))
        for e in self.sim.requests(limit=want)["requests"]:
            self._add(e)
        self._seen_total = total

    def _read_file(self):
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            if line.strip():
                e = json.loads(line)
                have = self._by_seq.get(e["seq"], {})
                self._by_seq[e["seq"]] = {**have, **e}  # the file's fields win, a polled body stays

    def entries(self):
        with self._lock:
            self._poll_once()
            self._read_file()
            return [self._by_seq[k] for k in sorted(self._by_seq)]

    def mark(self, what):
        """A request of our own in dpfsim's order of requests; returns its seq."""
        tag = f"ha-mark-{next(_marks)}"
        self.sim.kube("GET", f"/version?{tag}={what.replace(' ', '_')}")
        time.sleep(0.05)
        for _ in range(40):
            for e in reversed(self.entries()):
                if tag in (e.get("query") or ""):
                    return e["seq"]
            time.sleep(0.1)
        raise AssertionError(f"mark {tag} not in dpfsim's request log")

    def writes(self, since_seq=0, until_seq=None, include_leases=False):
        return [e for e in self.entries() if e["verb"] in WRITE_VERBS and e["seq"] > since_seq
                and (until_seq is None or e["seq"] <= until_seq)
                and (include_leases or not (e.get("resource") or "").startswith("leases"))]


# --- the Lease ---
def lease_name(site_id):
    return f"nico-extsvc-{site_id}"


def get_lease(sim, site_id):
    """The Lease object, or None (404, or a simulator that serves no leases)."""
    code, body = sim.kube("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease_name(site_id)}")
    return body if code == 200 and isinstance(body, dict) else None


def holder(sim, site_id):
    lease = get_lease(sim, site_id)
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


HOLDER = re.compile(r"(?:^|\()(\d+)\.(\d+)/")


def parse_holder(text):
    """{sysid, timeline} of a holder identity, "<system identifier>.<timeline>/
    <database>/<server start>/<host:port>" (src/core/lease_record.hpp), alone
    or in a User-Agent `nico_extsvc/<version> (<holder identity>)`."""
    m = HOLDER.search(text or "")
    return {"sysid": m.group(1), "timeline": int(m.group(2))} if m else {}


def from_server(entry, sysid, timeline=None):
    """Whether a request came from a worker of the server with this system
    identifier (and timeline, when given), by its User-Agent."""
    h = parse_holder(entry.get("user_agent") or "")
    return h.get("sysid") == sysid and (timeline is None or h.get("timeline") == timeline)


def lease_write_by(entries, sysid, timeline=None, since_seq=0):
    """The first successful write of the Lease by that server after since_seq."""
    for e in entries:
        if e["seq"] > since_seq and e["verb"] in WRITE_VERBS and (e.get("resource") or "").startswith("leases") \
                and 200 <= (e.get("status") or 0) < 300 and from_server(e, sysid, timeline):
            return e
    return None
