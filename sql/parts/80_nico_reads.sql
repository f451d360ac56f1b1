-- Reads for NICo's database layer and operators (issues #12 and #14):
-- versions, snapshots for FindByIds, instances, the instances of a service,
-- and the per-DPU status of site-wide services. All STABLE SECURITY DEFINER;
-- the optional trailing tenant_organization_id works as in the mutating API
-- (issue #10): with it, another tenant's row and an unknown id get the same
-- 42501 answer, so a caller cannot probe for existence.

-- NICo's instance config version is a string V<n>-T<micros> that the DPU
-- agent echoes and NICo compares byte for byte (issue #14 P1-7): stamped
-- whenever config_version changes, stable until the next change.
CREATE FUNCTION extsvc._stamp_config_version() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- an insert that brings its string (extsvc.import_nico_instances: NICo's
  -- own) keeps it; the agents already echo it
  IF (TG_OP = 'INSERT' AND NEW.config_version_text IS NULL)
     OR (TG_OP = 'UPDATE' AND NEW.config_version IS DISTINCT FROM OLD.config_version)
     OR NEW.config_version_text IS NULL THEN
    NEW.config_version_text := extsvc._config_version(NEW.config_version);
  END IF;
  RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION extsvc._stamp_config_version() IS
  'Trigger: instances.config_version_text = V<config_version>-T<transaction time in microseconds> at every change of config_version (an insert that brings its own string keeps it).';
CREATE TRIGGER instances_config_version_text
  BEFORE INSERT OR UPDATE ON extsvc.instances
  FOR EACH ROW EXECUTE FUNCTION extsvc._stamp_config_version();

-- The service row, or P0002 (after the tenant check).
CREATE FUNCTION extsvc._require_service(p_service_id uuid, p_tenant text) RETURNS extsvc.service_records
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  s extsvc.service_records;
BEGIN
  PERFORM extsvc._check_service_tenant(p_service_id, p_tenant);
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = p_service_id;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', p_service_id),
                          'Check the service id; deleted services stay readable until purged.');
  END IF;
  RETURN s;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_service(uuid, text) IS
  'Internal: the service row after the tenant check; P0002 when unknown. No grants.';

CREATE FUNCTION extsvc.service_versions(service_id uuid, versions text[] DEFAULT NULL,
                                        include_deleted boolean DEFAULT false,
                                        tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (version text, version_number integer, data text, has_credential boolean,
               observability jsonb, created_at timestamptz, deleted_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(service_versions.service_id, service_versions.tenant_organization_id);
  RETURN QUERY
  SELECT v.version, v.version_number,
         -- DPF: the one attachable version carries the desired revision's definition
         CASE WHEN s.service_type = 'DPF_HELM_CHART'
              THEN (SELECT r.data::text FROM extsvc.helm_revisions r
                     WHERE r.service_id = s.service_id AND r.revision = s.desired_revision)
              ELSE v.data END,
         v.has_credential, v.observability, v.created_at, v.deleted_at
    FROM extsvc.service_versions v
   WHERE v.service_id = s.service_id
     AND (service_versions.versions IS NULL OR v.version = ANY (service_versions.versions))
     AND (coalesce(service_versions.include_deleted, false) OR v.deleted_at IS NULL)
   ORDER BY v.version_number DESC;
END
$fn$;
COMMENT ON FUNCTION extsvc.service_versions(uuid, text[], boolean, text) IS
  'One row per version of a service, newest first (GetDpuExtensionServiceVersionsInfo): version string and number, data as text (DPF: the desired revision''s normalized definition), has_credential, observability, created_at, deleted_at. versions filters (unknown strings are simply absent); deleted versions only with include_deleted. P0002 for an unknown service; with tenant_organization_id, 42501 for unknown and foreign alike.';

CREATE FUNCTION extsvc.service_snapshots(service_ids uuid[], tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, tenant_organization_id text, service_name text, description text,
               service_type text, deployment_scope text, dpu_target text, lifecycle_state text,
               version text, version_ctr integer, desired_revision integer, applied_revision integer,
               dpf_service_name text, placement_label_key text, status_message text,
               created_at timestamptz, updated_at timestamptz, deleted_at timestamptz,
               delete_requested_at timestamptz, active_versions text[],
               latest_data text, latest_has_credential boolean, latest_observability jsonb,
               latest_created_at timestamptz,
               lifecycle_version bigint, state_reason text, state_actor text, state_changed_at timestamptz,
               last_error text, last_error_at timestamptz, next_due_at timestamptz,
               state_since timestamptz, attempts integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._check_tenant_id(service_snapshots.tenant_organization_id, false);
  SELECT s.service_id, s.tenant_organization_id, s.service_name, s.description, s.service_type,
         s.deployment_scope, s.dpu_target, s.lifecycle_state, s.version, s.version_ctr,
         s.desired_revision, s.applied_revision, s.dpf_service_name, s.placement_label_key,
         s.status_message, s.created_at, s.updated_at, s.deleted_at, r.delete_requested_at,
         ARRAY(SELECT x.version FROM extsvc.service_versions x
                WHERE x.service_id = s.service_id AND x.deleted_at IS NULL
                ORDER BY x.version_number DESC),
         l.data, l.has_credential, l.observability, l.created_at,
         h.n, r.state_reason, r.state_actor, h.at,
         q.last_error, q.last_error_at, q.next_due_at, h.since, q.attempts
    FROM unnest(service_snapshots.service_ids) WITH ORDINALITY u(id, o)
    JOIN extsvc.services s ON s.service_id = u.id
    JOIN extsvc.service_records r ON r.service_id = u.id
    LEFT JOIN extsvc.dpf_extension_service_reconciliations q ON q.service_id = u.id
    LEFT JOIN LATERAL (SELECT count(*) AS n, max(hh.at) AS at,
                              max(hh.at) FILTER (WHERE hh.from_state IS DISTINCT FROM hh.to_state) AS since
                         FROM extsvc.service_state_history hh
                        WHERE hh.service_id = u.id) h ON true
    LEFT JOIN LATERAL (
      SELECT x.has_credential, x.observability, x.created_at,
             CASE WHEN r.service_type = 'DPF_HELM_CHART'
                  THEN (SELECT hr.data::text FROM extsvc.helm_revisions hr
                         WHERE hr.service_id = u.id AND hr.revision = r.desired_revision)
                  ELSE x.data END AS data
        FROM extsvc.service_versions x
       WHERE x.service_id = u.id AND x.deleted_at IS NULL
       ORDER BY x.version_number DESC LIMIT 1) l ON true
   WHERE service_snapshots.tenant_organization_id IS NULL
      OR s.tenant_organization_id = service_snapshots.tenant_organization_id
   ORDER BY u.o
$fn$;
COMMENT ON FUNCTION extsvc.service_snapshots(uuid[], text) IS
  'FindByIds: one row per known id, in the order given (unknown ids, and with tenant_organization_id other tenants'' ids, are absent): the service fields, delete_requested_at, active_versions (newest first), the latest active version''s data / has_credential / observability / created_at, and lifecycle_version (history rows so far: grows with every transition and event) with the last state_reason, actor and time (state_changed_at), state_since (when lifecycle_state was entered: time in state = now() - state_since), and the worker''s last_error, last_error_at, next_due_at and attempts (messages never carry secrets, SPEC 2.6).';

-- An instance's configured entries as get_instance(s) show them.
CREATE FUNCTION extsvc._instance_services(p_instance uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT coalesce(jsonb_agg(jsonb_build_object(
                      'id', c.attachment_id, 'service_id', c.service_id, 'service_name', s.service_name,
                      'service_type', s.service_type, 'version', c.version, 'dpu_target', c.dpu_target,
                      'attached_at', c.attached_at, 'removed_at', c.removed_at)
                    ORDER BY c.removed_at IS NOT NULL, s.service_name, c.version), '[]'::jsonb)
      FROM extsvc.instance_extension_services c
      JOIN extsvc.service_records s ON s.service_id = c.service_id
     WHERE c.instance_id = p_instance);
END
$fn$;
COMMENT ON FUNCTION extsvc._instance_services(uuid) IS
  'Internal: the configured entries of an instance as extsvc.get_instance shows them, active ones first. No grants.';

CREATE FUNCTION extsvc.get_instance(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, tenant_organization_id text, host_machine_id text, network_dpus text[],
               dpf_managed boolean, config_version integer, delete_requested_at timestamptz,
               created_at timestamptz, updated_at timestamptz, services jsonb, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_instance(get_instance.instance_id, get_instance.tenant_organization_id);
  SELECT i.instance_id, i.tenant_organization_id, i.host_machine_id, i.network_dpus, i.dpf_managed,
         i.config_version, i.delete_requested_at, i.created_at, i.updated_at,
         extsvc._instance_services(i.instance_id), i.config_version_text
    FROM extsvc.instances i
   WHERE i.instance_id = get_instance.instance_id
$fn$;
COMMENT ON FUNCTION extsvc.get_instance(uuid, text) IS
  'One instance as NICo stores it: tenant, host and network_dpus (NICo MachineIds), dpf_managed, config_version and its string, delete_requested_at, and services = every configured entry [{id, service_id, service_name, service_type, version, dpu_target, attached_at, removed_at}] (id: the attachment''s, NULL for entries older than 0.3.0; dpu_target: the attachment''s own, NULL for the service''s), tombstones (removed_at set) included, active ones first. P0002 for an unknown instance; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- NICo's instance config update in one call (issue #14 P1-7): the integer
-- config_version of extsvc.set_instance_extension_services (whose signature
-- SPEC 6 fixes) together with the string NICo hands to the DPU agent.
CREATE FUNCTION extsvc.set_instance_extension_services_versioned(
    instance_id uuid, services jsonb, if_config_version_match bigint DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (config_version integer, config_version_text text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  config_version := extsvc.set_instance_extension_services(
      set_instance_extension_services_versioned.instance_id, set_instance_extension_services_versioned.services,
      set_instance_extension_services_versioned.if_config_version_match,
      set_instance_extension_services_versioned.tenant_organization_id);
  SELECT i.config_version_text INTO config_version_text
    FROM extsvc.instances i WHERE i.instance_id = set_instance_extension_services_versioned.instance_id;
  RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION extsvc.set_instance_extension_services_versioned(uuid, jsonb, bigint, text) IS
  'extsvc.set_instance_extension_services, returning the new config_version and its string V<n>-T<micros> (NICo''s config version, echoed by the DPU agent; stable until the next change). Same arguments, rules and errors.';

-- P0002 for a version the service never had (deleted ones are known).
CREATE FUNCTION extsvc._require_service_version(p_service_id uuid, p_version text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  PERFORM extsvc._require_service(p_service_id, p_tenant);
  IF p_version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v WHERE v.service_id = p_service_id AND v.version = p_version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', p_service_id, extsvc._token(p_version)),
                          'List the versions with extsvc.service_versions(service_id).');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_service_version(uuid, text, text) IS
  'Internal: tenant check, then P0002 for an unknown service or version. No grants.';

-- LANGUAGE sql: the input and the output column are both named version.
CREATE FUNCTION extsvc.service_instances(service_id uuid, version text DEFAULT NULL,
                                         tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, version text, attached_at timestamptz, removed_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_service_version(service_instances.service_id, service_instances.version,
                                         service_instances.tenant_organization_id);
  SELECT c.instance_id, c.version, c.attached_at, c.removed_at
    FROM extsvc.instance_extension_services c
   WHERE c.service_id = service_instances.service_id
     AND (service_instances.version IS NULL OR c.version = service_instances.version)
   ORDER BY c.instance_id, c.version
$fn$;
COMMENT ON FUNCTION extsvc.service_instances(uuid, text, text) IS
  'FindInstancesByDpuExtensionService: (instance_id, version, attached_at, removed_at) of every instance configured with the service (or one version of it), tombstones included. P0002 for an unknown service or version; with tenant_organization_id, 42501 for an unknown or foreign service alike.';

CREATE FUNCTION extsvc.site_service_status(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (dpu_machine_id text, dpu_device_name text, deployment_state text, status_message text,
               observed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(site_service_status.service_id, site_service_status.tenant_organization_id);
  IF s.deployment_scope <> 'ALL_DPUS' THEN
    PERFORM extsvc._raise('22023', 'only ALL_DPUS services have site-wide status',
                          format('service_id: %s, deployment_scope: %s', s.service_id, s.deployment_scope),
                          'Read an instance''s status with extsvc.instance_extension_service_status(instance_id).');
  END IF;
  -- every observed DPU, plus every registered DPU not observed yet (UNKNOWN:
  -- nothing is claimed that was not observed)
  RETURN QUERY
  SELECT d.machine_id, d.dpu_device_name,
         coalesce(extsvc._effective_deployment_state(t.deployment_state, t.observed_at), 'UNKNOWN'),
         CASE WHEN t.service_id IS NULL THEN 'not observed yet' ELSE t.status_message END,
         t.observed_at
    FROM extsvc.dpus d
    LEFT JOIN extsvc.site_service_dpu_status t ON t.dpu_machine_id = d.machine_id AND t.service_id = s.service_id
   WHERE t.service_id IS NOT NULL
      OR (d.deregistered_at IS NULL AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
   ORDER BY d.dpu_device_name;
END
$fn$;
COMMENT ON FUNCTION extsvc.site_service_status(uuid, text) IS
  'Per-DPU status of an ALL_DPUS service (rows of extsvc.site_service_dpu_status): dpu_machine_id, dpu_device_name, deployment_state (UNKNOWN once older than extsvc.observation_max_age), status_message, observed_at; a registered DPU not observed yet reads UNKNOWN. P0002 for an unknown service, 22023 for an INSTANCE_DPUS one; with tenant_organization_id, 42501 for unknown and foreign alike.';

REVOKE ALL ON FUNCTION
  extsvc.set_instance_extension_services_versioned(uuid, jsonb, bigint, text),
  extsvc._instance_services(uuid),
  extsvc._require_service(uuid, text),
  extsvc._require_service_version(uuid, text, text),
  extsvc.service_versions(uuid, text[], boolean, text),
  extsvc.service_snapshots(uuid[], text),
  extsvc.get_instance(uuid, text),
  extsvc.service_instances(uuid, text, text),
  extsvc.site_service_status(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.set_instance_extension_services_versioned(uuid, jsonb, bigint, text),
  extsvc.service_versions(uuid, text[], boolean, text),
  extsvc.service_snapshots(uuid[], text),
  extsvc.get_instance(uuid, text),
  extsvc.service_instances(uuid, text, text),
  extsvc.site_service_status(uuid, text)
TO extsvc_api, extsvc_admin;
