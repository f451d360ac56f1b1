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
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of {service_id, version}', 'JSON path: $',
                          'Pass the removed KUBERNETES_POD entries the DPU agent reported terminated.');
  END IF;
  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    IF jsonb_typeof(e) <> 'object' OR EXISTS (SELECT FROM jsonb_object_keys(e) k WHERE k NOT IN ('service_id', 'version'))
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
  SELECT string_agg(format('%s/%s (%s)', w.sid, w.ver,
                           CASE WHEN c.instance_id IS NULL THEN 'not configured'
                                WHEN sr.service_type <> 'KUBERNETES_POD' THEN 'DPF_HELM_CHART: removed by the worker'
                                ELSE 'still active' END), ', ')
    INTO v_bad
    FROM (SELECT (x->>'service_id')::uuid AS sid, x->>'version' AS ver FROM jsonb_array_elements(services) x) w
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

CREATE FUNCTION extsvc.instance_extension_services_terminated(instance_id uuid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT NOT EXISTS (SELECT FROM extsvc.instances i
                      WHERE i.instance_id = instance_extension_services_terminated.instance_id)
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_terminated(uuid) IS
  'Instance deletion probe: true once the instance is gone (its deletion finished: every DPF attachment observed TERMINATED and every KUBERNETES_POD entry confirmed with extsvc.remove_terminated_services), false while it exists. An id that never existed also answers true; there is no tenant argument, since false would confirm another tenant''s instance.';

REVOKE ALL ON FUNCTION
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid)
TO extsvc_api, extsvc_admin;
