"""NICo's handlers, one transaction each (issue 22, parts 5 and 6).

Each method is one gRPC handler of NICo (crates/api-core/src/handlers/
extension_service.rs, instance.rs, dpu.rs; machine ingestion) reduced to its
database work: it opens one transaction on its connection (NICo's
`api.txn_begin()` / `with_txn`), makes the calls NICo makes in it through
nico_db (typed binds, typed decoding) and commits; any error rolls the whole
transaction back, as dropping an uncommitted sqlx Transaction does. Vault
work happens after the commit in NICo; the handlers return what NICo would
hand to Vault (the keys of deleted credentials).
"""
import uuid

import nico_db as db


def entry(service_id, version, attachment_id=None, dpu_target=None, removed=None):
    """An InstanceExtensionServiceConfig as NICo serializes it (serde):
    service_id, version (ConfigVersion as its string), removed (null while
    active); the DSX line adds id (the attachment's uuid) and dpu_target."""
    e = {"service_id": str(service_id), "version": version, "removed": removed}
    if attachment_id is not None:
        e["id"] = str(attachment_id)
    if dpu_target is not None:
        e["dpu_target"] = dpu_target
    return e


def vault_key(service_id, version):
    """create_extension_service_credential_key: (service id, version_nr)."""
    return (str(service_id), int(version.split("-")[0][1:]))


class Nico:
    """NICo's handlers on one connection (a login role with extsvc_api only)."""

    def __init__(self, conn):
        self.conn = conn

    def _txn(self):
        return self.conn.transaction()

    # --- DPU extension services --------------------------------------------------

    def create_extension_service(self, tenant, name, service_type, data, description=None, dpu_target=None,
                                 has_credential=False, service_id=None):
        """CreateDpuExtensionService: one insert (the handler stores a credential in Vault first)."""
        with self._txn():
            return db.create(self.conn, service_id or uuid.uuid4(), service_type, name, tenant, description, data,
                             dpu_target, has_credential)

    def update_extension_service(self, service_id, tenant, data=None, name=None, description=None,
                                 if_version_ctr_match=None, credential=False):
        """UpdateDpuExtensionService: the update with NICo's version counter
        check; a new credential means a new version (Vault key version_ctr)."""
        with self._txn():
            row = db.update(self.conn, service_id, data, name, description, if_version_ctr_match,
                            True if credential else None, None, tenant)
        return row

    def delete_extension_service(self, service_id, tenant, versions=()):
        """DeleteDpuExtensionService: all versions (empty list) or some; the
        Vault keys of the removed versions with credentials are cleaned after
        the commit."""
        with self._txn():
            if versions:
                removed = db.soft_delete_versions(self.conn, service_id, list(versions), tenant)
                row = None
            else:
                row = db.soft_delete_service(self.conn, service_id, tenant)
                removed = row["removed_versions"]
        keys = [(str(service_id), int(r["version_number"])) for r in removed if r["had_credential"]]
        return row, removed, keys

    def find_extension_services_by_ids(self, ids, tenant=None):
        with self._txn():
            return db.find_snapshots_by_ids(self.conn, ids, tenant)

    def get_versions_info(self, service_id, tenant=None, versions=None):
        with self._txn():
            return db.find_versions_info(self.conn, service_id, versions, tenant)

    def find_instances_by_extension_service(self, service_id, tenant=None, version=None):
        with self._txn():
            return db.find_instances_by_extension_service(self.conn, service_id, version, tenant)

    # --- machines --------------------------------------------------------------------

    def ingest_host(self, host, dpus):
        """Machine ingestion of a host: its DPUs [(dpu, device, node, is_primary)] in one transaction."""
        with self._txn():
            for dpu, device, node, primary in dpus:
                db.register_dpu(self.conn, dpu, host, device, node, primary)

    def replace_dpu(self, old, new, host, device, node, primary=None):
        with self._txn():
            db.deregister_dpu(self.conn, old)
            db.register_dpu(self.conn, new, host, device, node, primary)

    # --- instances ---------------------------------------------------------------------

    def batch_allocate(self, tenant, allocations):
        """AllocateInstances: every instance of the batch with its extension
        services in one transaction (batch_persist, then the configuration):
        allocations [(instance_id, host, network_dpus, dpf_managed, entries)].
        Returns the new config versions."""
        out = []
        with self._txn():
            # NICo locks the machines of the batch first; the rows our calls
            # lock, the same way (one order, two batches never deadlock)
            db.lock_placement(self.conn, [a[1] for a in allocations], [a[0] for a in allocations],
                              [e["service_id"] for a in allocations for e in a[4]], tenant)
            for iid, host, network_dpus, dpf_managed, _ in allocations:
                db.upsert_instance(self.conn, iid, tenant, host, network_dpus, dpf_managed)
            for iid, _, _, _, entries in allocations:
                out.append(db.update_extension_services_config(self.conn, iid, entries, None, tenant))
        return out

    def update_instance_config(self, instance_id, tenant, entries, if_version_match=None):
        """UpdateInstanceConfig: read the instance, update its configuration
        with a compare-and-swap on the version it read (or the one the
        caller names), read it back."""
        with self._txn():
            before = db.find_by_id(self.conn, instance_id, tenant)
            expected = before["config_version"] if if_version_match is None else if_version_match
            cv = db.update_extension_services_config(self.conn, instance_id, entries, expected, tenant)
            after = db.find_by_id(self.conn, instance_id, tenant)
        return before, cv, after

    def update_instance_network(self, instance_id, tenant, host, network_dpus):
        with self._txn():
            db.upsert_instance(self.conn, instance_id, tenant, host, network_dpus)

    def find_instances_by_ids(self, ids, tenant=None):
        """FindInstancesByIds: the instances and their extension-service status, one call each."""
        with self._txn():
            return db.find_by_ids(self.conn, ids, tenant), db.summaries(self.conn, ids, tenant)

    def instance_status(self, instance_id, tenant=None):
        with self._txn():
            return (db.ready(self.conn, instance_id, tenant), db.summary(self.conn, instance_id, tenant),
                    db.dpu_status(self.conn, instance_id, tenant))

    def release_instance(self, instance_id, tenant):
        """ReleaseInstance: mark_as_deleted."""
        with self._txn():
            db.mark_as_deleted(self.conn, instance_id, tenant)

    def instance_deletion_finished(self, instance_id, tenant=None):
        with self._txn():
            return db.all_terminated(self.conn, instance_id, tenant)

    def agent_reported_terminated(self, instance_id, tenant, entries):
        """The DPU agent reported removed KUBERNETES_POD entries terminated."""
        with self._txn():
            return db.remove_terminated_services(self.conn, instance_id, entries, tenant)

    # --- the DPU agent -------------------------------------------------------------

    def managed_host_network_config(self, dpu):
        """GetManagedHostNetworkConfig's extension services (KUBERNETES_POD only)."""
        with self._txn():
            return db.dpu_agent_config(self.conn, dpu)

    def host_network_config(self, host):
        with self._txn():
            return db.host_agent_config(self.conn, host)


class Admin(Nico):
    """An operator's session (extsvc_admin): the cut-over imports."""

    def import_site(self, services, instances):
        """Both imports in one transaction: all or nothing."""
        with self._txn():
            return db.import_services(self.conn, services), db.import_instances(self.conn, instances)
