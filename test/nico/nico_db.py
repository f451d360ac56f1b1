"""NICo's database layer over the SQL API, bound as sqlx binds (issue 22).

One function per database operation NICo's handlers make, named after NICo's
own (crates/api-db/src/extension_service.rs, instance.rs, machine.rs; the
commits read are in docs/nico-integration.md). Each takes the connection of
the handler's transaction, binds every argument with the Rust type NICo's
value has (sqlx_pg.bind: String -> text, i64 -> int8, Uuid -> uuid,
Json<T> -> jsonb, Vec<...> -> arrays, Option::None -> a NULL of that type)
and decodes the rows with the Rust types NICo's FromRow implementations use
(ExtensionService.version_ctr is an i32, description a String, a MachineId
or ConfigVersion column a String that must parse). The schemas here are the
table in docs/nico-integration.md.
"""
from sqlx_pg import query, scalar

# --- rows as NICo decodes them -----------------------------------------------------

SERVICE = {  # extsvc.services (create_service, update_service, delete_service)
    "service_id": "Uuid", "tenant_organization_id": "String", "service_name": "String", "description": "String",
    "service_type": "String", "deployment_scope": "String", "dpu_target": "Option<String>",
    "lifecycle_state": "String", "version": "Option<ConfigVersion>", "version_ctr": "i32",
    "desired_revision": "Option<i32>", "applied_revision": "Option<i32>", "dpf_service_name": "Option<String>",
    "placement_label_key": "Option<String>", "status_message": "Option<String>", "created_at": "DateTime<Utc>",
    "updated_at": "DateTime<Utc>", "deleted_at": "Option<DateTime<Utc>>", "has_credential": "bool",
    "observability": "Option<Json>"}
DELETED_SERVICE = dict(SERVICE, removed_versions="Json")
SNAPSHOT = {  # service_snapshots (find_snapshots_by_ids)
    "service_id": "Uuid", "tenant_organization_id": "String", "service_name": "String", "description": "String",
    "service_type": "String", "dpu_target": "Option<String>", "lifecycle_state": "String",
    "version_ctr": "i32", "active_versions": "Vec<ConfigVersion>", "version": "Option<ConfigVersion>",
    "latest_data": "Option<String>", "latest_has_credential": "Option<bool>", "latest_observability": "Option<Json>",
    "latest_created_at": "Option<DateTime<Utc>>", "created_at": "DateTime<Utc>", "updated_at": "DateTime<Utc>",
    "deleted_at": "Option<DateTime<Utc>>", "lifecycle_version": "i64"}
VERSION_INFO = {  # service_versions (find_versions_info)
    "version": "ConfigVersion", "version_number": "i32", "data": "String", "has_credential": "bool",
    "observability": "Option<Json>", "created_at": "DateTime<Utc>", "deleted_at": "Option<DateTime<Utc>>"}
REMOVED_VERSION = {"version": "ConfigVersion", "version_number": "i32", "had_credential": "bool"}
SERVICE_INSTANCE = {"instance_id": "Uuid", "version": "ConfigVersion", "attached_at": "DateTime<Utc>",
                    "removed_at": "Option<DateTime<Utc>>"}
INSTANCE = {  # get_instance / get_instances
    "instance_id": "Uuid", "tenant_organization_id": "String", "host_machine_id": "MachineId",
    "network_dpus": "Vec<MachineId>", "dpf_managed": "bool", "config_version": "i32",
    "config_version_text": "ConfigVersion", "delete_requested_at": "Option<DateTime<Utc>>",
    "created_at": "DateTime<Utc>", "updated_at": "DateTime<Utc>", "services": "Json"}
CONFIG_VERSION = {"config_version": "i32", "config_version_text": "ConfigVersion"}
SUMMARY = {  # instance_extension_services_summary
    "service_id": "Uuid", "service_name": "String", "service_type": "String", "version": "ConfigVersion",
    "aggregate_state": "Option<String>", "removed": "bool", "removed_at": "Option<DateTime<Utc>>", "dpus": "i32",
    "configs_synced": "bool", "config_version": "i32", "config_version_text": "ConfigVersion"}
SUMMARIES = dict(SUMMARY, instance_id="Uuid")
DPU_STATUS = {  # instance_extension_service_status
    "service_id": "Uuid", "service_name": "String", "version": "ConfigVersion", "dpu_machine_id": "MachineId",
    "dpu_device_name": "String", "dpu_node_name": "String", "placement_state": "String",
    "deployment_state": "String", "removed_at": "Option<DateTime<Utc>>", "status_message": "Option<String>",
    "observed_at": "Option<DateTime<Utc>>", "config_version": "i32", "observed_config_version": "Option<i32>",
    "config_version_text": "ConfigVersion"}
AGENT_ENTRY = {  # dpu_agent_extension_services / host_agent_extension_services
    "instance_id": "Uuid", "service_id": "Uuid", "service_name": "String", "version": "ConfigVersion",
    "data": "String", "has_credential": "bool", "observability": "Option<Json>",
    "removed_at": "Option<DateTime<Utc>>", "config_version": "i32", "config_version_text": "ConfigVersion"}
IMPORTED = {"service_id": "Uuid", "service_name": "String", "versions": "i32", "action": "String"}
IMPORTED_INSTANCE = {"instance_id": "Uuid", "entries": "i32", "action": "String"}


def _one(rows):
    assert len(rows) == 1, f"expected one row, got {len(rows)}"
    return rows[0]


# --- extension services (crates/api-db/src/extension_service.rs) ----------------

def create(txn, service_id, service_type, name, tenant, description, data, dpu_target=None, has_credential=False,
           observability=None):
    """extension_service::create -> extsvc.create_service. NICo binds its
    ExtensionServiceType as its Display ("kubernetes_pod", "dpf_helm_chart")
    and a DpuTarget as its serde name ("primary", "all_active", "all")."""
    return _one(query(txn, "SELECT * FROM extsvc.create_service(%s, %s, %s, %s, %s, %s, NULL, %s, %s, %s)",
                      [("String", tenant), ("String", name), ("String", service_type), ("String", data),
                       ("Option<String>", description), ("Option<String>", dpu_target), ("Uuid", service_id),
                       ("bool", has_credential), ("Option<Json>", observability)], SERVICE))


def update(txn, service_id, data=None, name=None, description=None, if_version_ctr_match=None, has_credential=None,
           observability=None, tenant=None):
    """extension_service::update / update_metadata -> extsvc.update_service;
    the counter NICo compares is an i64 (version_nr().cast_signed())."""
    return _one(query(txn, "SELECT * FROM extsvc.update_service(%s, %s, %s, %s, %s, %s, %s, %s)",
                      [("Uuid", service_id), ("Option<String>", data), ("Option<String>", name),
                       ("Option<String>", description), ("Option<i64>", if_version_ctr_match),
                       ("Option<bool>", has_credential), ("Option<Json>", observability),
                       ("Option<String>", tenant)], SERVICE))


def soft_delete_service(txn, service_id, tenant=None):
    """delete with no versions (find_versions_with_credentials +
    soft_delete_versions + soft_delete_service) -> extsvc.delete_service:
    the row plus removed_versions [{version, version_number, had_credential}]."""
    return _one(query(txn, "SELECT * FROM extsvc.delete_service(%s, NULL, %s)",
                      [("Uuid", service_id), ("Option<String>", tenant)], DELETED_SERVICE))


def soft_delete_versions(txn, service_id, versions, tenant=None):
    """delete with versions -> extsvc.delete_service_versions."""
    return query(txn, "SELECT * FROM extsvc.delete_service_versions(%s, %s, %s)",
                 [("Uuid", service_id), ("Vec<ConfigVersion>", versions), ("Option<String>", tenant)],
                 REMOVED_VERSION)


def find_snapshots_by_ids(txn, ids, tenant=None):
    return query(txn, "SELECT * FROM extsvc.service_snapshots(%s, %s)",
                 [("Vec<Uuid>", ids), ("Option<String>", tenant)], SNAPSHOT)


def find_versions_info(txn, service_id, versions=None, tenant=None):
    return query(txn, "SELECT * FROM extsvc.service_versions(%s, %s, false, %s)",
                 [("Uuid", service_id), ("Option<Vec<ConfigVersion>>", versions) if versions is None
                  else ("Vec<ConfigVersion>", versions), ("Option<String>", tenant)], VERSION_INFO)


def find_instances_by_extension_service(txn, service_id, version=None, tenant=None):
    return query(txn, "SELECT * FROM extsvc.service_instances(%s, %s, %s)",
                 [("Uuid", service_id), ("Option<ConfigVersion>", version), ("Option<String>", tenant)],
                 SERVICE_INSTANCE)


def import_services(txn, rows):
    return query(txn, "SELECT * FROM extsvc.import_nico_services(%s)", [("Json", rows)], IMPORTED)


def import_instances(txn, rows):
    return query(txn, "SELECT * FROM extsvc.import_nico_instances(%s)", [("Json", rows)], IMPORTED_INSTANCE)


# --- machines and instances (crates/api-db/src/machine.rs, instance.rs) ----------

def register_dpu(txn, dpu, host, dpu_device_name, dpu_node_name, is_primary=None):
    """machine ingestion: a host's DPU by its DpuMachineId and HostMachineId (String binds)."""
    query(txn, "SELECT extsvc.register_dpu(%s, %s, %s, %s, %s)",
          [("MachineId", dpu), ("MachineId", host), ("String", dpu_device_name), ("String", dpu_node_name),
           ("Option<bool>", is_primary)])


def deregister_dpu(txn, dpu):
    query(txn, "SELECT extsvc.deregister_dpu(%s)", [("MachineId", dpu)])


def upsert_instance(txn, instance_id, tenant, host, network_dpus=None, dpf_managed=None):
    """instance::batch_persist / update_network_config: the instance on its
    host with the DPUs its network uses (Vec<MachineId> binds text[])."""
    query(txn, "SELECT extsvc.upsert_instance(%s, %s, %s, %s, %s)",
          [("Uuid", instance_id), ("String", tenant), ("MachineId", host),
           ("Option<Vec<MachineId>>", network_dpus) if network_dpus is None else ("Vec<MachineId>", network_dpus),
           ("Option<bool>", dpf_managed)])


def update_extension_services_config(txn, instance_id, entries, if_config_version_match=None, tenant=None):
    """instance::update_extension_services_config: the configuration as
    NICo serializes it (Json<Vec<InstanceExtensionServiceConfig>>), CAS on
    the version number (i64); returns (config_version, its string)."""
    return _one(query(txn, "SELECT * FROM extsvc.set_instance_extension_services_versioned(%s, %s, %s, %s)",
                      [("Uuid", instance_id), ("Json", entries), ("Option<i64>", if_config_version_match),
                       ("Option<String>", tenant)], CONFIG_VERSION))


def lock_placement(txn, hosts, instance_ids, service_ids, tenant=None):
    """The locks of a multi-instance transaction, first and in the one order
    (extsvc.lock_placement), as NICo's allocation locks its machine rows first."""
    query(txn, "SELECT extsvc.lock_placement(%s, %s, %s, %s)",
          [("Vec<MachineId>", sorted(set(hosts))), ("Vec<Uuid>", instance_ids), ("Vec<Uuid>", service_ids),
           ("Option<String>", tenant)])


def set_extension_services(txn, instance_id, entries, if_config_version_match=None, tenant=None):
    """The integer form (SPEC 2.10): the new config_version (i32)."""
    return scalar(txn, "SELECT extsvc.set_instance_extension_services(%s, %s, %s, %s) AS v",
                  [("Uuid", instance_id), ("Json", entries), ("Option<i64>", if_config_version_match),
                   ("Option<String>", tenant)], "i32")


def find_by_id(txn, instance_id, tenant=None):
    return _one(query(txn, "SELECT * FROM extsvc.get_instance(%s, %s)",
                      [("Uuid", instance_id), ("Option<String>", tenant)], INSTANCE))


def find_by_ids(txn, instance_ids, tenant=None):
    """Many instances in one call (a handler loads a batch): extsvc.get_instances."""
    return query(txn, "SELECT * FROM extsvc.get_instances(%s, %s)",
                 [("Vec<Uuid>", instance_ids), ("Option<String>", tenant)], INSTANCE)


def mark_as_deleted(txn, instance_id, tenant=None):
    """instance::mark_as_deleted (release) -> extsvc.delete_instance."""
    query(txn, "SELECT extsvc.delete_instance(%s, %s)", [("Uuid", instance_id), ("Option<String>", tenant)])


def all_terminated(txn, instance_id, tenant=None):
    """are_all_extension_services_terminated -> extsvc.instance_extension_services_terminated."""
    return scalar(txn, "SELECT extsvc.instance_extension_services_terminated(%s, %s) AS v",
                  [("Uuid", instance_id), ("Option<String>", tenant)], "bool")


def remove_terminated_services(txn, instance_id, entries, tenant=None):
    return scalar(txn, "SELECT extsvc.remove_terminated_services(%s, %s, %s) AS v",
                  [("Uuid", instance_id), ("Json", entries), ("Option<String>", tenant)], "i32")


def summary(txn, instance_id, tenant=None):
    return query(txn, "SELECT * FROM extsvc.instance_extension_services_summary(%s, %s)",
                 [("Uuid", instance_id), ("Option<String>", tenant)], SUMMARY)


def summaries(txn, instance_ids, tenant=None):
    return query(txn, "SELECT * FROM extsvc.instance_extension_services_summaries(%s, %s)",
                 [("Vec<Uuid>", instance_ids), ("Option<String>", tenant)], SUMMARIES)


def dpu_status(txn, instance_id, tenant=None):
    return query(txn, "SELECT * FROM extsvc.instance_extension_service_status(%s, %s)",
                 [("Uuid", instance_id), ("Option<String>", tenant)], DPU_STATUS)


def ready(txn, instance_id, tenant=None):
    return scalar(txn, "SELECT extsvc.instance_extension_services_ready(%s, %s) AS v",
                  [("Uuid", instance_id), ("Option<String>", tenant)], "bool")


def dpu_agent_config(txn, dpu):
    """GetManagedHostNetworkConfig's extension services of a DPU."""
    return query(txn, "SELECT * FROM extsvc.dpu_agent_extension_services(%s)", [("MachineId", dpu)], AGENT_ENTRY)


def host_agent_config(txn, host):
    return query(txn, "SELECT * FROM extsvc.host_agent_extension_services(%s)", [("MachineId", host)], AGENT_ENTRY)
