#!/usr/bin/env python3
"""End-to-end: operating the workers (issue 28) with dpfsim.

worker_status().state and extsvc_worker_state follow what the worker does (working, disabled,
config_error for a bad URL, unconfigured, paused without a site id, waiting_for_lease when the
API refuses the Lease); last_error keeps the API's refusal; every informer is exported, also
those of a cluster whose settings are broken or that cannot be reached, with current = 0 and an
age that grows; the shared-memory initialisation time moves at a crash restart while the
postmaster's start time does not. extsvc.health_check() is all ok on a healthy site and reports
each injected failure in its row: a bad URL, an unreadable token file, 403 from the management
cluster, an unreachable DPU cluster, watch streams not current, the Lease not held, no site id,
a FAILED service, an API server whose clock is off (dpfsim's clock offset in the Date header), a
CA file that expired or expires soon, a kubeconfig whose client certificate file is missing, a DPF
release below the minimum (a third server on dpfsim's v25.7 profile). The alert rules of docs/metrics.md (the file's own YAML) are fed to promtool
with the series the server exported during each failure (one scrape a minute, the last held for
the rule's `for`; an age that was growing keeps growing with the clock): each rule of issue 28
fires on its failure and stays silent on a healthy site. Three groups, each with its own server
and dpfsim.
"""
import json
import os
import re
import signal
import sys
import time
import uuid

from extsvc_testkit import alerts
from extsvc_testkit.harness import Env, dpu_id, helm_data, host_id, lit, run_tests, wait_until

ENV = None
HOST = host_id("o1")
DPU = dpu_id(1, "o")


def e():
    return ENV


def status():
    rows = e().pg.sql("SELECT state, state_reason, config_error, last_error, last_error_at, "
                      "extract(epoch FROM now() - last_error_at) FROM extsvc.worker_status() WHERE slot = 0")
    if not rows:
        return None
    s, reason, cfg, err, at, age = rows[0]
    return {"state": s, "reason": reason, "config_error": cfg, "last_error": err, "last_error_at": at,
            "last_error_age": float(age) if age is not None else None}


def wait_state(want, timeout=30):
    try:
        return wait_until(lambda: (s := status()) is not None and s["state"] == want and s, timeout,
                          interval=0.2, what=f"worker state {want}")
    except AssertionError:
        print(status())
        raise


def metrics():
    out = {}
    for metric, labels, value in e().pg.sql("SELECT metric, labels::text, value FROM extsvc.metrics()"):
        out[(metric, frozenset(json.loads(labels).items()))] = float(value)
    return out


def gauge(m, metric, **labels):
    return m.get((metric, frozenset(labels.items())))


def health():
    return {r[0]: (r[1], r[2], r[3]) for r in e().pg.sql("SELECT * FROM extsvc.health_check()")}


def wait_health(check, want_status, contains=None, timeout=40):
    def ok():
        h = health()[check]
        return h if h[0] == want_status and (contains is None or contains in (h[1] or "")) else False
    try:
        return wait_until(ok, timeout, interval=0.3, what=f"health {check} {want_status} {contains!r}")
    except AssertionError:
        for k, v in health().items():
            print("   ", k, v)
        raise


def set_conf(**kv):
    e().pg.set_conf(**kv)


# --- alert rules: docs/metrics.md's rules, fed with what the server exported, through promtool ---

def scrape():
    """One scrape of extsvc.metrics_prometheus() (extsvc_testkit.alerts)."""
    return alerts.scrape(e().pg)


def assert_fires(alert, scrapes, hold_minutes=0, fires=True):
    """docs/metrics.md's rule through promtool with these scrapes (extsvc_testkit.alerts)."""
    alerts.assert_fires(alert, scrapes, e().workdir, hold_minutes=hold_minutes, fires=fires)


def all_ok():
    h = health()
    bad = {k: v for k, v in h.items() if v[0] != "ok"}
    return h if not bad else False


def test_the_runbook_covers_every_alert_and_check():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "docs", "metrics.md")) as f:
        alerts = re.findall(r"^  - alert: (\w+)", f.read(), re.M)
    with open(os.path.join(root, "docs", "runbook.md")) as f:
        headings = set()
        for h in re.findall(r"^### (.+)$", f.read(), re.M):
            headings.update(x.strip() for x in h.split(","))
    checks = [r[0] for r in e().pg.sql('SELECT "check" FROM extsvc.health_check()')]
    assert len(alerts) >= 25 and len(checks) == 12, (alerts, checks)
    missing = [a for a in alerts + checks if a not in headings]
    assert not missing, f"no runbook entry for {missing}"
    # and every metric family an alert could use is documented in docs/metrics.md
    with open(os.path.join(root, "docs", "metrics.md")) as f:
        doc = f.read()
    undocumented = [r[0] for r in e().pg.sql("SELECT family FROM extsvc._metric_families()")
                    if f"`{r[0]}`" not in doc]
    assert not undocumented, f"families missing from docs/metrics.md: {undocumented}"


# --- group 1: a healthy site, then one failure at a time --------------------------------------------

def test_a_healthy_site_is_working_and_all_ok():
    wait_state("working")
    sid = e().create("ops-ok", helm_data())
    e().wait_state(sid, "READY")
    try:
        h = wait_until(all_ok, 40, interval=0.5, what="every health check ok")
    except AssertionError:
        for k, v in health().items():
            print("   ", k, v)
        raise
    assert set(h) == {"library", "worker_state", "settings", "cluster_management", "cluster_dpu", "dpf_api",
                      "clock_skew", "tls", "watch", "site_lease", "queue", "stuck_rows"}, h
    assert "DPF API v26.8+" in h["dpf_api"][1], h
    assert re.search(r"management [+-]?[01]\.\d s", h["clock_skew"][1]), h  # 0.0 has no sign
    assert "2 PEM text(s) read" in h["tls"][1], h
    assert "HTTP 2" in h["cluster_management"][1] and "HTTP 2" in h["cluster_dpu"][1], h
    assert "held by this server" in h["site_lease"][1], h
    m = metrics()
    assert gauge(m, "extsvc_worker_state", state="working", worker="0") == 1
    assert all(gauge(m, "extsvc_worker_state", state=s, worker="0") == 0
               for s in ("disabled", "unconfigured", "config_error", "standby", "version_mismatch", "paused",
                         "waiting_for_lease"))
    assert gauge(m, "extsvc_workers_enabled") == 1
    assert gauge(m, "extsvc_kube_last_code", cluster="management") // 100 == 2, m
    # dpfsim's clock is ours: the skew is within the Date header's resolution
    for c in ("management", "dpu"):
        assert abs(gauge(m, "extsvc_kube_clock_skew_seconds", cluster=c)) <= 1.0, m
    started = gauge(m, "extsvc_shmem_initialized_timestamp_seconds")
    assert abs(started - gauge(m, "extsvc_server_start_timestamp_seconds")) < 10, m
    assert started <= time.time() + 1
    # every informer current, age 0
    for r in e().pg.sql("SELECT resource, cluster FROM extsvc.watch_status()"):
        assert gauge(m, "extsvc_watch_current", cluster=r[1], resource=r[0]) == 1, r
        assert gauge(m, "extsvc_watch_current_age_seconds", cluster=r[1], resource=r[0]) == 0, r
    # the rules of issue 28 stay silent on a healthy site, however long it stays so
    scrapes = [scrape(), (time.sleep(1), scrape())[1], (time.sleep(1), scrape())[1]]
    for alert in ("ExtsvcWorkerNotWorking", "ExtsvcDisabled", "ExtsvcCrashRestart", "ExtsvcWorkRetryingLong",
                  "ExtsvcWorkUnfinishedLong", "ExtsvcKubeAuthFailing", "ExtsvcClusterUnreachable",
                  "ExtsvcWatchNotCurrent", "ExtsvcQueueBehind", "ExtsvcSiteHasNoWriter", "ExtsvcWritesPaused",
                  "ExtsvcServicesFailedPlatform", "ExtsvcDpfNotReady"):
        assert_fires(alert, scrapes, hold_minutes=65, fires=False)


def test_disabled_is_its_own_state():
    set_conf(enabled="off")
    try:
        s = wait_state("disabled")
        assert "extsvc.enabled" in s["reason"], s
        assert gauge(metrics(), "extsvc_workers_enabled") == 0
        assert gauge(metrics(), "extsvc_worker_state", state="disabled", worker="0") == 1
        wait_health("worker_state", "warning", "disabled")
        # new intent waits while disabled: the queue and the unfinished service age
        sid = e().create("ops-paused", helm_data(version="3.0.0"))
        scrapes = [scrape(), (time.sleep(1.5), scrape())[1]]
        assert_fires("ExtsvcDisabled", scrapes, hold_minutes=61)
        assert_fires("ExtsvcQueueBehind", scrapes, hold_minutes=11)
        assert_fires("ExtsvcWorkUnfinishedLong", scrapes, hold_minutes=36)
        assert_fires("ExtsvcWorkerNotWorking", scrapes, hold_minutes=10, fires=False)
    finally:
        set_conf(enabled=None)
    wait_state("working")
    e().wait_state(sid, "READY")


def test_a_bad_url_is_config_error_and_its_informers_stay_exported():
    good = e().pg.one("SHOW extsvc.kube_server")
    set_conf(kube_server="ftp://dpf.example")
    try:
        s = wait_state("config_error")
        assert "https://" in (s["config_error"] or ""), s
        wait_health("settings", "error", "extsvc.kube_server must start with https://")
        wait_health("worker_state", "error", "config_error")
        # the informers of the management cluster are still exported, not current, with why
        rows = {(r[0], r[1]): r for r in e().pg.sql(
            "SELECT resource, cluster, current, last_error FROM extsvc.watch_status()")}
        for res in ("dpudevices", "dpuservices", "dpus"):
            r = rows.get((res, "management"))
            assert r is not None and r[2] == "f" and "not started" in (r[3] or ""), rows
        m1 = metrics()
        time.sleep(1.5)
        m2 = metrics()
        for res in ("dpudevices", "dpuservices", "dpus"):
            assert gauge(m2, "extsvc_watch_current", cluster="management", resource=res) == 0
            assert gauge(m2, "extsvc_watch_current_age_seconds", cluster="management", resource=res) > \
                gauge(m1, "extsvc_watch_current_age_seconds", cluster="management", resource=res)
        wait_health("watch", "error", "dpuservices@management")
        scrapes = [scrape(), (time.sleep(1.5), scrape())[1]]
        assert_fires("ExtsvcWorkerNotWorking", scrapes, hold_minutes=6)
        assert_fires("ExtsvcWatchNotCurrent", scrapes, hold_minutes=8)
    finally:
        set_conf(kube_server=good)
    wait_state("working")


def test_no_cluster_is_unconfigured():
    good = e().pg.one("SHOW extsvc.kube_server")
    set_conf(kube_server="")
    try:
        s = wait_state("unconfigured")
        assert "extsvc.kube_server" in s["reason"], s
        wait_health("cluster_management", "error", "not configured")
    finally:
        set_conf(kube_server=good)
    wait_state("working")


def test_an_unreadable_token_file_names_the_os_error():
    good = e().pg.one("SHOW extsvc.kube_token_file")
    set_conf(kube_token_file="/nonexistent/extsvc-token")
    try:
        wait_health("settings", "error", "extsvc.kube_token_file")
        detail = health()["settings"][1]
        assert "No such file or directory" in detail, detail
    finally:
        set_conf(kube_token_file=good)
    wait_health("settings", "ok")


def test_403_from_the_management_cluster_is_seen():
    wait_state("working")
    before = scrape()
    e().sim.fault(cluster="management", verb="*", status=403)
    try:
        sid = e().create("ops-403", helm_data(version="2.0.0"))
        wait_health("cluster_management", "error", "HTTP 403")
        s = wait_until(lambda: (x := status())["last_error"] and x, 30, what="last_error")
        assert s["last_error_age"] is not None and s["last_error_age"] < 60, s
        # the site Lease cannot be renewed either: the worker waits for it, and says so
        wait_state("waiting_for_lease", timeout=60)
        wait_health("site_lease", "warning", "not held")
        assert gauge(metrics(), "extsvc_worker_state", state="waiting_for_lease", worker="0") == 1
        scrapes = [before, scrape(), (time.sleep(1.5), scrape())[1]]
        assert_fires("ExtsvcKubeAuthFailing", scrapes, hold_minutes=6)
        assert_fires("ExtsvcSiteHasNoWriter", scrapes, hold_minutes=3)
        assert_fires("ExtsvcWorkRetryingLong", scrapes, hold_minutes=66)
    finally:
        e().sim.clear_faults()
    wait_state("working", timeout=60)
    e().wait_state(sid, "READY", timeout=60)
    wait_health("cluster_management", "ok")


def test_an_unreachable_dpu_cluster_and_its_streams():
    good = e().pg.one("SHOW extsvc.dpu_kube_server")
    set_conf(dpu_kube_server="https://127.0.0.1:1")
    try:
        wait_health("cluster_dpu", "error", "unreachable", timeout=60)
        wait_health("watch", "error", "@dpu")
        m = metrics()
        assert gauge(m, "extsvc_watch_current", cluster="dpu", resource="nodes") == 0, m
        assert gauge(m, "extsvc_watch_current_age_seconds", cluster="dpu", resource="nodes") is not None
        scrapes = [scrape(), (time.sleep(1.5), scrape())[1]]
        assert_fires("ExtsvcClusterUnreachable", scrapes, hold_minutes=6)
        assert_fires("ExtsvcWatchNotCurrent", scrapes, hold_minutes=8)
        # a DPU cluster whose settings are refused: its informers are exported as not started
        set_conf(dpu_kube_server="ftp://dpu.example")
        wait_until(lambda: any(r[0] == "nodes" and "not started" in (r[1] or "") for r in e().pg.sql(
            "SELECT resource, last_error FROM extsvc.watch_status() WHERE cluster = 'dpu'")), 30,
            what="nodes@dpu exported as not started")
        s = status()
        assert "DPU cluster" in (s["config_error"] or ""), s
        wait_health("settings", "error", "extsvc.dpu_kube_server must start with https://")
    finally:
        set_conf(dpu_kube_server=good)
    wait_health("cluster_dpu", "ok", timeout=60)
    wait_health("watch", "ok", timeout=60)


def test_dpf_not_ready_and_a_platform_failure_fire_their_alerts():
    # Argo cannot pull the chart: the service is READY (applied) while DPF says not Ready
    e().sim.ctl("POST", "/chart-faults", {"chart": "broken-agent", "kind": "pull"})
    try:
        sid = e().create("ops-dpf", helm_data(chartName="broken-agent"))
        e().wait_state(sid, "READY")
        e().pg.sql(f"SELECT extsvc.register_dpu({lit(DPU)}, {lit(HOST)}, 'dpu-device-0000', "
                   f"'host-0000-dpu-device-0000', true)")
        iid = str(uuid.uuid4())
        e().pg.sql(f"SELECT extsvc.upsert_instance('{iid}', 'tenant-a', {lit(HOST)})")
        version = e().pg.one(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'")
        e().pg.sql(f"SELECT extsvc.set_instance_extension_services('{iid}', "
                   f"{lit(json.dumps([{'service_id': sid, 'version': version}]))})")
        e().pg.sql("SELECT extsvc.request_resync()")
        wait_until(lambda: gauge(metrics(), "extsvc_dpf_not_ready") == 1, 40, interval=0.5,
                   what="extsvc_dpf_not_ready 1")
        scrapes = [scrape(), (time.sleep(1), scrape())[1]]
        assert_fires("ExtsvcDpfNotReady", scrapes, hold_minutes=16)
        assert_fires("ExtsvcServicesFailedPlatform", scrapes, fires=False)
    finally:
        e().sim.ctl("DELETE", "/chart-faults")
    e().free_host(HOST)
    # an object with the service's generated name that is not ours (made while the workers were
    # off): the create finds it, FAILED ownership_conflict, a platform fault
    set_conf(enabled="off")
    try:
        wait_state("disabled")
        sid = e().create("ops-owned", helm_data(version="4.0.0"))
        name = e().pg.one(f"SELECT dpf_service_name FROM extsvc.services WHERE service_id = '{sid}'")
        code, body = e().sim.kube("POST", "/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices",
                                  {"apiVersion": "svc.dpu.nvidia.com/v1alpha1", "kind": "DPUService",
                                   "metadata": {"name": name, "namespace": "dpf-operator-system"},
                                   "spec": {"helmChart": {"source": {"repoURL": "https://charts.example.com/other",
                                                                     "chart": "other", "version": "1.0.0"}},
                                            "security": {"privileged": False}}})
        assert code == 201, (code, body)
    finally:
        set_conf(enabled=None)
    e().wait_state(sid, "FAILED", timeout=40)
    m = metrics()
    assert gauge(m, "extsvc_services_failed", reason="platform") == 1, m
    assert gauge(m, "extsvc_services_failed", reason="tenant") == 0, m
    assert_fires("ExtsvcServicesFailedPlatform", [scrape()])
    wait_health("stuck_rows", "warning", "services FAILED: 1")
    e().sim.kube("DELETE", f"/apis/svc.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpuservices/{name}")
    e().delete(sid)


def test_a_crash_restart_moves_the_shared_memory_time():
    m0 = metrics()
    scrapes = [scrape()]
    pid = int(e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0"))
    os.kill(pid, signal.SIGKILL)

    def after():
        rows = e().pg.sql("SELECT metric, labels::text, value FROM extsvc.metrics() "
                          "WHERE metric LIKE 'extsvc_%timestamp_seconds'", check=False)
        if isinstance(rows, str):
            return False
        m = {r[0]: float(r[2]) for r in rows}
        return m if m.get("extsvc_shmem_initialized_timestamp_seconds", 0) > \
            gauge(m0, "extsvc_shmem_initialized_timestamp_seconds") else False
    m1 = wait_until(after, 60, interval=0.5, what="shared memory reinitialised")
    assert m1["extsvc_server_start_timestamp_seconds"] == gauge(m0, "extsvc_server_start_timestamp_seconds")
    assert m1["extsvc_shmem_initialized_timestamp_seconds"] > m1["extsvc_server_start_timestamp_seconds"]
    wait_state("working", timeout=60)
    scrapes.append(scrape())
    assert_fires("ExtsvcCrashRestart", scrapes)
    assert_fires("ExtsvcCrashLoop", scrapes, fires=False)
    # two more: a crash loop
    for _ in range(2):
        m0 = {("extsvc_shmem_initialized_timestamp_seconds", frozenset()):
              m1["extsvc_shmem_initialized_timestamp_seconds"]}
        os.kill(int(e().pg.one("SELECT pid FROM extsvc.worker_status() WHERE slot = 0")), signal.SIGKILL)
        m1 = wait_until(after, 60, interval=0.5, what="shared memory reinitialised")
        wait_state("working", timeout=60)
        scrapes.append(scrape())
    assert_fires("ExtsvcCrashLoop", scrapes)


def test_an_api_server_clock_that_is_off():
    """dpfsim's Date header moved by its clock offset knob: the skew is measured from it, exported,
    and the clock_skew row warns over 2 s and errors over 15 s."""
    wait_health("clock_skew", "ok")

    def skew_near(want):
        # the management cluster answers every 2 s (the Lease); a watch stream ended by dpfsim makes
        # the watcher ask both clusters again
        def ok():
            e().sim.ctl("POST", "/watch-cut", {"cluster": "*", "mode": "end"})
            time.sleep(0.5)
            m = metrics()
            v = [gauge(m, "extsvc_kube_clock_skew_seconds", cluster=c) for c in ("management", "dpu")]
            return v if all(x is not None and abs(x - want) <= 1.0 for x in v) else False
        return wait_until(ok, 40, interval=0.5, what=f"extsvc_kube_clock_skew_seconds near {want}")
    try:
        e().sim.ctl("POST", "/clock", {"offset_ms": 30000})
        assert e().sim.ctl("GET", "/clock") == {"offset_ms": 30000}
        skew_near(30)
        h = wait_health("clock_skew", "error", "management +")
        assert re.search(r"management \+(29|30|31)\.\d s", h[1]), h
        assert h[2] and "chronyc" in h[2], h
        e().sim.ctl("POST", "/clock", {"offset_ms": -5000})
        skew_near(-5)
        wait_health("clock_skew", "warning", "management -")
    finally:
        e().sim.ctl("POST", "/clock", {"offset_ms": 0})
    skew_near(0)
    wait_health("clock_skew", "ok")


def write_cert(path, days_valid, days_ago=0):
    """A self-signed certificate (PEM) valid from days_ago days before now for days_valid days."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "extsvc-test")])
    start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days_ago)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=days_valid)).sign(key, hashes.SHA256()))
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)
    return path


def test_tls_files_that_the_worker_would_refuse():
    good = e().pg.one("SHOW extsvc.dpu_kube_ca_file")
    wait_health("tls", "ok")
    try:
        # a CA bundle whose only certificate expired: an error naming the setting
        set_conf(dpu_kube_ca_file=write_cert(os.path.join(e().workdir, "expired-ca.pem"), 10, days_ago=20))
        h = wait_health("tls", "error", "extsvc.dpu_kube_ca_file: certificate 1 expired at")
        assert h[2] and "pg_reload_conf" in h[2], h
        # one that expires in 5 days: a warning with the days left
        set_conf(dpu_kube_ca_file=write_cert(os.path.join(e().workdir, "soon-ca.pem"), 6, days_ago=1))
        wait_health("tls", "warning", "(in 4 days)")
        # not PEM at all
        path = os.path.join(e().workdir, "not-pem.pem")
        with open(path, "w") as f:
            f.write("this is not a certificate\n")
        os.chmod(path, 0o644)
        set_conf(dpu_kube_ca_file=path)
        wait_health("tls", "error", "no PEM certificate")
        set_conf(dpu_kube_ca_file=good)
        wait_health("tls", "ok")
        # a kubeconfig whose client certificate (relative to the kubeconfig's directory) is missing
        kdir = os.path.join(e().workdir, "kube")
        os.makedirs(kdir, exist_ok=True)
        os.chmod(kdir, 0o755)
        kc = os.path.join(kdir, "dpu.kubeconfig")
        with open(kc, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
current-context: dpu
clusters:
- name: dpu
  cluster:
    server: {e().sim.dpu}
    certificate-authority: {good}
users:
- name: dpu
  user:
    client-certificate: certs/client.pem
    client-key: certs/client-key.pem
contexts:
- name: dpu
  context: {{cluster: dpu, user: dpu}}
""")
        os.chmod(kc, 0o644)
        set_conf(dpu_kubeconfig=kc)
        h = wait_health("tls", "error", "extsvc.dpu_kubeconfig client-certificate")
        assert "No such file or directory" in h[1] and os.path.join(kdir, "certs/client.pem") in h[1], h
        # the files there, the certificate valid and the key PEM: nothing to say about them
        os.makedirs(os.path.join(kdir, "certs"), exist_ok=True)
        os.chmod(os.path.join(kdir, "certs"), 0o755)
        write_cert(os.path.join(kdir, "certs", "client.pem"), 90)
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        with open(os.path.join(kdir, "certs", "client-key.pem"), "wb") as f:
            f.write(ec.generate_private_key(ec.SECP256R1()).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        os.chmod(os.path.join(kdir, "certs", "client-key.pem"), 0o644)
        h = wait_health("tls", "ok")
        # both CA files, and the kubeconfig's CA, client certificate and key
        assert "5 PEM text(s) read" in h[1], h
    finally:
        set_conf(dpu_kube_ca_file=good, dpu_kubeconfig=None)
    wait_health("tls", "ok")
    wait_health("cluster_dpu", "ok", timeout=60)


# --- group 3: a DPF release below the minimum -------------------------------------------------------

def test_a_dpf_release_below_the_minimum_is_an_error():
    h = wait_health("dpf_api", "error", "DPUService.spec.security")
    assert "DPF API below v26.8" in h[1] and "needs DPF v26.8 or later" in h[1], h
    assert h[2] and "Upgrade DPF" in h[2], h


# --- group 2: no site id ---------------------------------------------------------------------------

def test_without_a_site_id_the_worker_is_paused():
    s = wait_state("paused")
    assert "site_id" in s["reason"], s
    wait_health("site_lease", "error", "site_id")
    wait_health("settings", "error", "extsvc.site_id is not set")
    scrapes = [scrape(), (time.sleep(1), scrape())[1]]
    assert_fires("ExtsvcWritesPaused", scrapes, hold_minutes=6)
    assert_fires("ExtsvcWorkerNotWorking", scrapes, hold_minutes=6, fires=False)


def main():
    global ENV
    ok = True
    ENV = Env(dpus=1, workers=1)
    try:
        ok = run_tests([
            test_the_runbook_covers_every_alert_and_check,
            test_a_healthy_site_is_working_and_all_ok,
            test_disabled_is_its_own_state,
            test_a_bad_url_is_config_error_and_its_informers_stay_exported,
            test_no_cluster_is_unconfigured,
            test_an_unreadable_token_file_names_the_os_error,
            test_403_from_the_management_cluster_is_seen,
            test_an_unreachable_dpu_cluster_and_its_streams,
            test_dpf_not_ready_and_a_platform_failure_fire_their_alerts,
            test_an_api_server_clock_that_is_off,
            test_tls_files_that_the_worker_would_refuse,
            test_a_crash_restart_moves_the_shared_memory_time,
        ], "# e2e: operating the workers (state, health check)")
    finally:
        ENV.close(keep=not ok)
    ENV = Env(dpus=1, workers=1, site_id=None)
    try:
        ok = run_tests([test_without_a_site_id_the_worker_is_paused],
                       "# e2e: operating the workers without a site id") and ok
    finally:
        ENV.close(keep=not ok)
    ENV = Env(dpus=1, workers=1, sim_args=["--dpf-version", "v25.7"])
    try:
        ok = run_tests([test_a_dpf_release_below_the_minimum_is_an_error],
                       "# e2e: operating the workers on DPF v25.7") and ok
    finally:
        ENV.close(keep=not ok)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
