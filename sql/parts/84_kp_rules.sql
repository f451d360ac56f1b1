-- KUBERNETES_POD tombstones and the instance deletion probe (issue #14 P1-8,
-- P1-13). The DPU agent runs KUBERNETES_POD services; NICo learns from its
-- reports when a removed entry has terminated and confirms it here.

CREATE FUNCTION extsvc.remove_terminated_services(instance_id uuid, services jsonb,
                                                  tenant_organization_id text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e jsonb;
  n integer := 0;
  v_bad text;
  v_removed integer;
BEGIN
  PERFORM extsvc._require_instance(remove_terminated_services.instance_id,
                                   remove_terminated_services.tenant_organization_id);
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = remove_terminated_services.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    -- its deletion finished while this call waited for the lock: the answer
    -- of an unknown instance (issue 22, test/nico/concurrency.py)
    PERFORM extsvc._require_instance(remove_terminated_services.instance_id,
                                     remove_terminated_services.tenant_organization_id);
  END IF;
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of {service_id, version}', 'JSON path: $',
                          'Pass the removed KUBERNETES_POD entries the DPU agent reported terminated.');
  END IF;
  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    -- NICo's entry shape (set_instance_extension_services): the pair names
    -- the entry; removed, id and dpu_target may come along
    IF jsonb_typeof(e) <> 'object'
       OR EXISTS (SELECT FROM jsonb_object_keys(e) k WHERE k NOT IN ('service_id', 'version', 'removed', 'id', 'dpu_target'))
       OR jsonb_typeof(e->'service_id') IS DISTINCT FROM 'string'
       OR (e->>'service_id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR jsonb_typeof(e->'version') IS DISTINCT FROM 'string' THEN
      PERFORM extsvc._raise('22023', 'each entry must be an object with a UUID service_id and a version string',
                            format('JSON path: $[%s]', n), 'Pass {"service_id": "...", "version": "V1-T..."}.');
    END IF;
    n := n + 1;
  END LOOP;
  -- only removed KUBERNETES_POD entries may go: an active one, or a DPF
  -- one (whose removal the worker observes), is refused
  SELECT extsvc._token_list(array_agg(format('%s/%s (%s)', w.sid, extsvc._token(w.ver),
                           CASE WHEN c.instance_id IS NULL THEN 'not configured'
                                WHEN sr.service_type <> 'KUBERNETES_POD' THEN 'DPF_HELM_CHART: removed by the worker'
                                ELSE 'still active' END) ORDER BY w.o), false)
    INTO v_bad
    FROM (SELECT (x->>'service_id')::uuid AS sid, x->>'version' AS ver, o
            FROM jsonb_array_elements(services) WITH ORDINALITY e(x, o)) w
    LEFT JOIN extsvc.instance_extension_services c
      ON c.instance_id = i.instance_id AND c.service_id = w.sid AND c.version = w.ver
    LEFT JOIN extsvc.service_records sr ON sr.service_id = c.service_id
   WHERE c.instance_id IS NULL OR sr.service_type <> 'KUBERNETES_POD' OR c.removed_at IS NULL;
  IF v_bad IS NOT NULL THEN
    PERFORM extsvc._raise_c('entry_not_removed', '55000', 'only removed KUBERNETES_POD entries can be confirmed terminated',
                          format('instance_id: %s; entries: %s', i.instance_id, v_bad),
                          'Detach the entry first (extsvc.set_instance_extension_services) and confirm it once the DPU agent reports it terminated.');
  END IF;
  DELETE FROM extsvc.instance_extension_services c
   USING (SELECT (x->>'service_id')::uuid AS sid, x->>'version' AS ver FROM jsonb_array_elements(services) x) w
   WHERE c.instance_id = i.instance_id AND c.service_id = w.sid AND c.version = w.ver;
  GET DIAGNOSTICS v_removed = ROW_COUNT;
  -- no config_version bump (as in NICo); a deleted instance goes once empty
  PERFORM extsvc._cleanup_instance(i.instance_id);
  RETURN v_removed;
END
$fn$;
COMMENT ON FUNCTION extsvc.remove_terminated_services(uuid, jsonb, text) IS
  'NICo confirms that removed KUBERNETES_POD entries [{service_id, version}] terminated on the DPU: their tombstones go (no config_version bump), and an instance being deleted disappears once nothing remains. Returns the number removed. 22023 bad shape, 55000 for an active, unknown or DPF entry, P0002 unknown instance; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- The probe answers only about this database's own instances (issue 22):
-- an id that was never an instance here is P0002, not true (true would tell
-- NICo a deletion finished that never started). A finished deletion keeps
-- answering true through extsvc.finished_instance_deletions, which keeps the
-- tenant of the removed row. With tenant_organization_id (issue 29), unknown
-- and foreign answer alike, and since issue 22 that answer is the P0002 of an
-- unknown id: an unknown id, another tenant's live instance and another
-- tenant's finished deletion all get the same error, word for word, so
-- nothing tells a tenant whether another tenant's instance exists or existed.
CREATE FUNCTION extsvc.instance_extension_services_terminated(instance_id uuid,
                                                              tenant_organization_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_tenant text;
BEGIN
  PERFORM extsvc._check_tenant_id(instance_extension_services_terminated.tenant_organization_id, false);
  SELECT i.tenant_organization_id INTO v_tenant FROM extsvc.instances i
   WHERE i.instance_id = instance_extension_services_terminated.instance_id;
  IF FOUND AND (instance_extension_services_terminated.tenant_organization_id IS NULL
                OR instance_extension_services_terminated.tenant_organization_id = v_tenant) THEN
    RETURN false;   -- the deletion has not finished (or was never requested)
  END IF;
  IF NOT FOUND THEN
    SELECT f.tenant_organization_id INTO v_tenant FROM extsvc.finished_instance_deletions f
     WHERE f.instance_id = instance_extension_services_terminated.instance_id;
    IF FOUND AND (instance_extension_services_terminated.tenant_organization_id IS NULL
                  OR instance_extension_services_terminated.tenant_organization_id = v_tenant) THEN
      RETURN true;
    END IF;
  END IF;
  -- unknown, or (with a tenant) another tenant's instance, live or deleted:
  -- one answer, word for word
  PERFORM extsvc._raise('P0002', 'instance not found',
                        format('instance_id: %s', instance_extension_services_terminated.instance_id),
                        'Pass the id of an instance of this tenant (an unknown id and another tenant''s id get this same answer); a finished deletion answers true until extsvc.purge_deleted forgets it.');
  RETURN NULL;  -- not reached
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_terminated(uuid, text) IS
  'Instance deletion probe: true once the instance''s deletion finished (every DPF attachment observed TERMINATED and every KUBERNETES_POD entry confirmed with extsvc.remove_terminated_services), false while the instance exists, P0002 for an id that was never an instance here (or whose finished deletion extsvc.purge_deleted forgot). With tenant_organization_id, another tenant''s instance (live or deleted) gets that same P0002, word for word, like an unknown one; true and false only for this tenant''s own.';

-- Several KUBERNETES_POD versions at once (issue #14 P1-11), all or none:
-- NICo learns which versions had credentials so it can clean Vault after
-- the commit.
CREATE FUNCTION extsvc.delete_service_versions(service_id uuid, versions text[],
                                               tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (version text, version_number integer, had_credential boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
  v_missing text;
  v_before text[];
  v text;
BEGIN
  s := extsvc._require_service(delete_service_versions.service_id, delete_service_versions.tenant_organization_id);
  IF s.service_type <> 'KUBERNETES_POD' THEN
    PERFORM extsvc._raise('22023', 'only KUBERNETES_POD services have several versions to delete',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Delete a DPF_HELM_CHART service with extsvc.delete_service(service_id).');
  END IF;
  IF delete_service_versions.versions IS NULL OR cardinality(delete_service_versions.versions) = 0 THEN
    PERFORM extsvc._raise('22023', 'versions must name at least one version', 'field: versions',
                          'Pass the version strings to delete, or use extsvc.delete_service(service_id) for all.');
  END IF;
  -- a NULL element reached delete_service as "no version" and deleted every
  -- version (issue 29): NULL and empty elements are refused, by position
  SELECT format('field: versions[%s] is %s', w.o, CASE WHEN w.v IS NULL THEN 'NULL' ELSE 'empty' END) INTO v_missing
    FROM unnest(delete_service_versions.versions) WITH ORDINALITY w(v, o)
   WHERE w.v IS NULL OR btrim(w.v) = ''
   ORDER BY w.o LIMIT 1;
  IF v_missing IS NOT NULL THEN
    PERFORM extsvc._raise('22023', 'versions must not contain NULL or empty elements', v_missing,
                          'Pass each version string as extsvc.service_versions(service_id) lists it.');
  END IF;
  -- the service row first (the lock _delete_service takes), then the check:
  -- a concurrent call deleting the same versions commits first and this one
  -- answers P0002, as after it in a serial order, instead of deleting them
  -- "again" (test/nico/concurrency.py found it)
  PERFORM FROM extsvc.service_records r WHERE r.service_id = s.service_id FOR NO KEY UPDATE;
  SELECT extsvc._token_list(array_agg(w.v ORDER BY w.o)) INTO v_missing
    FROM unnest(delete_service_versions.versions) WITH ORDINALITY w(v, o)
   WHERE NOT EXISTS (SELECT FROM extsvc.service_versions x
                      WHERE x.service_id = s.service_id AND x.version = w.v AND x.deleted_at IS NULL);
  IF v_missing IS NOT NULL THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, versions: %s', s.service_id, v_missing),
                          'List the versions with extsvc.service_versions(service_id).');
  END IF;
  -- what is active now: the result is every version this call deletes
  v_before := ARRAY(SELECT x.version FROM extsvc.service_versions x
                     WHERE x.service_id = s.service_id AND x.deleted_at IS NULL);
  -- one version at a time through delete_service's body: the in-use rule,
  -- the history event, DELETED when the last one goes (a raise undoes all)
  FOR v IN SELECT DISTINCT u.v FROM unnest(delete_service_versions.versions) u(v) ORDER BY 1 LOOP
    PERFORM extsvc._delete_service(s.service_id, v, delete_service_versions.tenant_organization_id, false);
  END LOOP;
  RETURN QUERY
  SELECT x.version, x.version_number, x.has_credential FROM extsvc.service_versions x
   WHERE x.service_id = s.service_id AND x.version = ANY (v_before) AND x.deleted_at IS NOT NULL
   ORDER BY x.version_number;
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service_versions(uuid, text[], text) IS
  'Deletes several KUBERNETES_POD versions in one call, all or none, and returns them with had_credential so NICo can clean its secrets after the commit; the service is DELETED when no version is left, otherwise updated_at moves. P0002 unknown service or versions (named), 22023 DPF service, empty list, or a NULL or empty element (named by position), 55000 (service_in_use) when any is in use; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- The DPU agent's feed keyed by host (issue #14 P1-9): hosts that are not
-- DPF-managed need no DPUDevice / Node names, so NICo never invents them.
CREATE FUNCTION extsvc.host_agent_extension_services(host_machine_id text)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, version text, data text,
               has_credential boolean, observability jsonb, removed_at timestamptz,
               config_version integer, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._machine_id(host_agent_extension_services.host_machine_id, 'host_machine_id', 'host');
  SELECT c.instance_id, c.service_id, s.service_name, c.version, v.data, v.has_credential, v.observability, c.removed_at,
         i.config_version, i.config_version_text
    FROM extsvc.instances i
    JOIN extsvc.instance_extension_services c ON c.instance_id = i.instance_id
    JOIN extsvc.service_records s ON s.service_id = c.service_id AND s.service_type = 'KUBERNETES_POD'
    JOIN extsvc.service_versions v ON v.service_id = c.service_id AND v.version = c.version
   WHERE i.host_machine_id = extsvc._machine_id(host_agent_extension_services.host_machine_id, 'host_machine_id', 'host')
   ORDER BY c.instance_id, s.service_name, c.version
$fn$;
COMMENT ON FUNCTION extsvc.host_agent_extension_services(text) IS
  'The DPU agent''s feed keyed by host (its NICo MachineId; 22023 for anything else): KUBERNETES_POD entries (including removed ones) of the host''s instances, with the instance''s config_version and its string; never DPF services. Needs no registered DPU (hosts without DPF have no DPUDevice or Node names); no rows for an unknown host.';

REVOKE ALL ON FUNCTION
  extsvc.delete_service_versions(uuid, text[], text),
  extsvc.host_agent_extension_services(text),
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.delete_service_versions(uuid, text[], text),
  extsvc.host_agent_extension_services(text),
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid, text)
TO extsvc_api, extsvc_admin;
