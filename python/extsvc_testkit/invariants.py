"""The invariants the reliability suites check at a quiescent point (issue 13;
docs/reliability.md): what the database says is wanted is exactly what the
clusters hold. Each check returns a list of violations; empty means it holds."""
import json
import os

NS = "dpf-operator-system"
OWNER_LABEL = "nico/extension-service-id"
SITE_LABEL = "nico/site"
ENV_SITE = object()  # violations(site=): the Env's own site id
REVISION_ANNOTATION = "nico/extension-service-revision"
PLACEMENT_PREFIX = "nico/extsvc-"


def _intent_done(pg):
    """No lost intent: every DPF service finished what was asked of it."""
    return [f"service {r[0]} ({r[1]}) is {r[2]}, desired revision {r[3]}, applied {r[4]}"
            for r in pg.sql("SELECT service_id, service_name, lifecycle_state, desired_revision, "
                            "applied_revision FROM extsvc.services WHERE service_type = 'DPF_HELM_CHART' "
                            "AND (lifecycle_state NOT IN ('READY', 'DELETED', 'FAILED') "
                            "OR (lifecycle_state = 'READY' AND applied_revision IS DISTINCT FROM desired_revision))")]


DPF_KEY_PREFIX = "svc.dpu.nvidia.com/"


def _owned(spec):
    """The parts of a DPUService spec NICo owns (SPEC 2.2; core::render_dpuservice):
    spec.helmChart, spec.serviceDaemonSet without the svc.dpu.nvidia.com/*
    label keys DPF writes there, spec.deployInCluster, spec.security."""
    spec = spec or {}
    out = {k: spec.get(k) for k in ("helmChart", "deployInCluster", "security")}
    ds = json.loads(json.dumps(spec.get("serviceDaemonSet") or {}))
    if isinstance(ds.get("labels"), dict):
        ds["labels"] = {k: v for k, v in ds["labels"].items() if not k.startswith(DPF_KEY_PREFIX)}
    out["serviceDaemonSet"] = ds
    return out


def _field_diffs(live, want, path="spec"):
    """Paths where two owned specs differ (absent and null are the same)."""
    if isinstance(live, dict) and isinstance(want, dict):
        out = []
        for k in sorted(set(live) | set(want)):
            out += _field_diffs(live.get(k), want.get(k), f"{path}.{k}")
        return out
    return [] if live == want else [path]


def _dpuservices(pg, sim, site=None):
    """Every live service has exactly its DPUService with the applied spec;
    no DPUService of ours without a live service. With a site, "ours" is
    what carries this site's nico/site label, and every live service's
    DPUService must carry it (another site's objects are its own business).
    The applied spec is what extsvc.render_dpuservice renders (the desired
    revision: compared only when desired = applied; otherwise _intent_done
    reports the service), and
    the owned fields must match twice over: the product's own verdict
    (extsvc.dpuservice_mutable_patch(live, rendered) is {}) and a plain
    comparison of the owned subtrees, which also covers the fields the
    product treats as identity (deployInCluster, releaseName, nodeSelector)."""
    bad = []
    live = {r[0]: (r[1], r[2], r[3]) for r in pg.sql(
        "SELECT dpf_service_name, service_id, applied_revision, desired_revision FROM extsvc.services "
        "WHERE service_type = 'DPF_HELM_CHART' AND lifecycle_state = 'READY'")}
    ours = {}
    for obj in sim.dpuservices():
        meta = obj.get("metadata", {})
        # another site's objects are checked below (a live service's must carry our label; an
        # orphan of another site is not ours)
        if OWNER_LABEL in (meta.get("labels") or {}):
            ours[meta["name"]] = obj
    compare = {}
    for name, (sid, rev, desired) in live.items():
        obj = ours.get(name)
        if obj is None:
            bad.append(f"live service {sid}: no DPUService {name}")
            continue
        if site is not None and (obj["metadata"]["labels"] or {}).get(SITE_LABEL) != site:
            bad.append(f"DPUService {name}: site label {obj['metadata']['labels'].get(SITE_LABEL)!r} != {site!r}")
        got = ((obj.get("spec", {}).get("serviceDaemonSet") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
        if got != str(rev):
            bad.append(f"DPUService {name}: revision annotation {got!r}, applied revision {rev}")
        if obj["metadata"]["labels"].get(OWNER_LABEL) != sid:
            bad.append(f"DPUService {name}: owner label {obj['metadata']['labels'].get(OWNER_LABEL)} != {sid}")
        if rev is not None and rev == desired:
            compare[sid] = (name, obj)
    if compare:
        # one statement for all: the rendering and the product's patch
        arg = json.dumps([{"sid": sid, "live": obj} for sid, (_, obj) in compare.items()])
        rows = pg.sql("SELECT x->>'sid', extsvc.render_dpuservice((x->>'sid')::uuid)::text, "
                      "extsvc.dpuservice_mutable_patch(x->'live', extsvc.render_dpuservice((x->>'sid')::uuid))::text "
                      f"FROM jsonb_array_elements({_lit(arg)}::jsonb) x")
        for sid, rendered, patch in rows:
            name, obj = compare[sid]
            if json.loads(patch) != {}:
                bad.append(f"DPUService {name}: spec differs from the applied revision, patch {patch}")
            diffs = _field_diffs(_owned(obj.get("spec")), _owned(json.loads(rendered).get("spec")))
            if diffs:
                bad.append(f"DPUService {name}: owned fields differ from the applied revision: {', '.join(diffs)}")
    for name in sorted(set(ours) - set(live)):
        if site is not None and (ours[name]["metadata"]["labels"] or {}).get(SITE_LABEL) != site:
            continue
        if not ours[name].get("metadata", {}).get("deletionTimestamp"):
            bad.append(f"DPUService {name} of ours belongs to no live service")
    return bad


def _lit(v):
    return "'" + str(v).replace("'", "''") + "'"


_DESIRED = ("SELECT d.dpu_device_name, d.dpu_node_name, w.label_key FROM extsvc.dpus d "
            "LEFT JOIN extsvc.dpu_desired_labels w ON w.dpu_machine_id = d.machine_id "
            "WHERE d.deregistered_at IS NULL AND d.dpu_device_name IS NOT NULL")


def _labels(pg, sim, others=()):
    """Every registered DPU's nico/extsvc-* labels (DPUDevice and Node) equal
    the desired set; on a DPU that the databases in `others` (other sites on
    the same clusters) also place on, the union of theirs and ours."""
    bad = []
    want = {}
    for dev, node, key in pg.sql(_DESIRED):
        want.setdefault((dev, node), set())
        if key:
            want[(dev, node)].add(key)
    for other in others:
        for dev, node, key in other.sql(_DESIRED):
            if (dev, node) in want and key:
                want[(dev, node)].add(key)
    for (dev, node), keys in sorted(want.items()):
        code, body = sim.kube("GET", f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NS}/dpudevices/{dev}")
        if code == 200:
            got = {k for k in (((body.get("spec") or {}).get("cluster") or {}).get("nodeLabels") or {})
                   if k.startswith(PLACEMENT_PREFIX)}
            if got != keys:
                bad.append(f"DPUDevice {dev}: labels {sorted(got)} != desired {sorted(keys)}")
        code, body = sim.kube("GET", f"/api/v1/nodes/{node}", base=sim.dpu)
        if code == 200:
            got = {k for k in (body["metadata"].get("labels") or {}) if k.startswith(PLACEMENT_PREFIX)}
            if got != keys:
                bad.append(f"Node {node}: labels {sorted(got)} != desired {sorted(keys)}")
    return bad


def _history(pg):
    """Every recorded change is one the transition tables allow."""
    bad = [f"service {r[0]}: {r[1]} -> {r[2]} by {r[3]} ({r[4]}) is not in lifecycle_transitions"
           for r in pg.sql(
               "SELECT h.service_id, h.from_state, h.to_state, h.actor, h.reason FROM extsvc.service_state_history h "
               "WHERE h.from_state IS DISTINCT FROM h.to_state AND NOT EXISTS (SELECT FROM extsvc.lifecycle_transitions t "
               "WHERE t.from_state IS NOT DISTINCT FROM h.from_state AND t.to_state = h.to_state "
               "AND t.actor = h.actor AND t.reason = h.reason)")]
    bad += [f"DPU state {r[0]}: {r[1]} -> {r[2]} by {r[3]} ({r[4]}) is not in placement_transitions"
            for r in pg.sql(
                "SELECT h.machine, h.from_state, h.to_state, h.actor, h.reason FROM extsvc.dpu_state_history h "
                "WHERE NOT EXISTS (SELECT FROM extsvc.placement_transitions t WHERE t.machine = h.machine "
                "AND t.from_state IS NOT DISTINCT FROM h.from_state AND t.to_state IS NOT DISTINCT FROM h.to_state "
                "AND t.actor = h.actor AND t.reason = h.reason)")]
    return bad


def _attachments(pg):
    """Per-DPU states settled: active rows RUNNING, nothing left REMOVING."""
    return [f"attachment {r[0]} / {r[1]} on {r[2]}: {r[3]} {r[4]}" for r in pg.sql(
        "SELECT a.instance_id, a.service_id, a.dpu_machine_id, a.placement_state, a.deployment_state "
        "FROM extsvc.dpf_extension_service_attachments a JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id "
        "WHERE d.deregistered_at IS NULL AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING')")]


def violations(env, attachments_settled=True, site=ENV_SITE, others=()):
    """Everything above for one database (env.pg) and the clusters (env.sim).
    site: only DPUServices labelled nico/site=site are this database's
    (default: the Env's own extsvc.site_id; None: every owner-labelled one);
    others: the databases of other sites placing on the same DPUs."""
    if site is ENV_SITE:
        site = getattr(env, "site_id", None)
    bad = (_intent_done(env.pg) + _dpuservices(env.pg, env.sim, site) + _labels(env.pg, env.sim, others)
           + _history(env.pg))
    if attachments_settled:
        bad += _attachments(env.pg)
    return bad


def wait_settled(env, timeout=60, **kw):
    """Waits until violations(env, **kw) is empty; prints the last ones when it never is."""
    from .harness import wait_until  # the harness imports this module
    last = []

    def ok():
        nonlocal last
        last = violations(env, **kw)
        return not last
    try:
        wait_until(ok, timeout=timeout, interval=0.2, what="the invariants to hold")
    except AssertionError:
        print(describe(last))
        raise


def describe(bad, limit=12):
    return json.dumps(bad[:limit], indent=1) + (f"\n... and {len(bad) - limit} more" if len(bad) > limit else "")


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "reliability.md")


def run_stamp():
    """When and on what a run was measured, for its record: the UTC date and
    time, and the commit checked out ("+local" when src/, sql/ or sim/, the
    product and the simulator, differ from it)."""
    import subprocess
    import time

    def git(*args):
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--", "src", "sql", "sim"):
        commit += "+local"
    return {"date": time.strftime("%Y-%m-%d", time.gmtime()), "time": time.strftime("%H:%MZ", time.gmtime()),
            "commit": commit}


def machine_line():
    """The machine a figure was measured on: CPUs, model and load average."""
    import os
    try:
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
    except OSError:
        load = ["?"]
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), load average {' '.join(load)}"


def run_record(suite, run):
    """The machine-readable record of a run, kept in its block as an HTML
    comment: <!-- SUITE-run {json} -->. tools/reliability_summary.py reads
    these records (never the human tables) to write the summary table."""
    text = json.dumps(run, sort_keys=True)
    assert "-->" not in text
    return f"<!-- {suite}-run {text} -->"


def refresh_summary(path=None):
    """Rewrites the summary table of docs/reliability.md from the records
    (tools/reliability_summary.py), so it never lags the blocks."""
    import subprocess
    import sys
    cmd = [sys.executable, os.path.join(ROOT, "tools", "reliability_summary.py")]
    if path:
        cmd += ["--doc", path]
    subprocess.run(cmd, check=True)


def write_doc_block(name, text, path=None):
    """Replaces the block between <!-- NAME:begin ... --> and <!-- NAME:end -->
    of docs/reliability.md with text (the figures a run measured, and the
    run's record), then refreshes the summary table."""
    import re
    path = path or DOC
    with open(path) as f:
        doc = f.read()
    pat = re.compile(r"(<!-- " + re.escape(name) + r":begin[^>]*-->\n).*?(<!-- " + re.escape(name) + r":end -->)",
                     re.S)
    if not pat.search(doc):
        raise RuntimeError(f"no {name} block in {path}")
    doc = pat.sub(lambda m: m.group(1) + text.rstrip("\n") + "\n" + m.group(2), doc)
    with open(path, "w") as f:
        f.write(doc)
    refresh_summary(path)
