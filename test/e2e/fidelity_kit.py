"""What the fidelity suite's files share (test_fidelity.py runs them): the profile under test,
the Env (set by test_fidelity.main), the fleet of one host with four DPUs and the readers of its
per-DPU rows."""
import os
import sys

from extsvc_testkit.harness import helm_data, wait_until, dpu_id as harness_dpu_id, host_id

ENV = None
PROFILE = os.environ.get("E2E_DPF_VERSION") or (sys.argv[1] if len(sys.argv) > 1 else "v26.10")
# what the worker finds missing on each release below v26.8 (extsvc.worker_status().dpf_api_missing)
OLD_MISSING = {"v24.10": "DPUService.spec.security, DPUDevice (resource)",
               "v25.7": "DPUService.spec.security, DPUDevice.spec.cluster"}
NS = "dpf-operator-system"
HOST = host_id("f1")
REV = "nico/extension-service-revision"


def dpu_id(i):
    return harness_dpu_id(i, "e")


def e():
    return ENV


def setup_fleet(env):
    for i in range(4):  # one host with four DPUs; DPU 0 is the primary
        env.register_dpu(i, HOST, i == 0, tag="e")


def per_dpu(iid, sid):
    """device -> (deployment_state, status_message, applied_revision)."""
    return {r[0]: (r[1], r[2], int(r[3])) for r in e().pg.sql(
        f"SELECT st.dpu_device_name, st.deployment_state, coalesce(st.status_message, ''), s.applied_revision "
        f"FROM extsvc.instance_extension_service_status('{iid}') st "
        f"JOIN extsvc.services s USING (service_id) WHERE st.service_id = '{sid}'")}


def ready_pod_of(pods, revision):
    return any(p["metadata"].get("annotations", {}).get(REV) == str(revision)
               and not p["metadata"].get("deletionTimestamp")
               and p.get("status", {}).get("phase") == "Running"
               and any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in p.get("status", {}).get("conditions", []))
               for p in pods)


def ready_service(name, target="ALL_ACTIVE", **data_kw):
    return e().ready_service(name, target, data=helm_data(values={"v": 1}, **data_kw))


def wait_dpu(iid, sid, dev, state, timeout=40):
    def check():
        row = per_dpu(iid, sid).get(dev)
        return row if row and row[0] == state else False
    return wait_until(check, timeout, interval=0.1, what=f"{dev} {state}")


def detach_all(iid):
    e().attach(iid)
    wait_until(lambda: not e().pg.sql(f"SELECT 1 FROM extsvc.instance_extension_services_summary('{iid}')"),
               timeout=60, interval=0.1, what="detached")


def management_writes(resource):
    c = e().sim.counts().get("management", {})
    return sum(v for k, v in c.items() if k.split(" ")[0] in ("PATCH", "PUT", "POST", "DELETE")
               and k.endswith(resource))
