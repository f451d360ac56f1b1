-- Bringing NICo's existing data in (issue 22, part 3; SPEC 7). A site that
-- runs KUBERNETES_POD services keeps them without re-minting anything: the
-- rows of NICo's extension_services / extension_service_versions and the
-- extension-service configuration of its instances come in with their ids,
-- their exact ConfigVersion strings (the DPU agents echo them, NICo's Vault
-- keys are their numbers) and their timestamps. Both functions are
-- extsvc_admin only, all or nothing per call, and idempotent: rows already
-- imported with the same content are left as they are; different content
-- under an imported id is a conflict (23505 with the constraint named).
-- docs/nico-integration.md, "Cut-over", has the procedure and the queries
-- that read NICo's tables into the JSON taken here.

INSERT INTO extsvc.lifecycle_transitions (from_state, to_state, actor, reason, description) VALUES
  (NULL, 'READY',   'api', 'import', 'KUBERNETES_POD service imported from NICo''s tables (extsvc.import_nico_services)'),
  (NULL, 'DELETED', 'api', 'import', 'KUBERNETES_POD service NICo had deleted, imported so that its id stays taken');

-- A JSON member as text (a string, or NULL when absent or null when p_null);
-- 22023 naming the path otherwise.
CREATE FUNCTION extsvc._json_text(p_obj jsonb, p_key text, p_path text, p_null boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_obj->p_key IS NULL OR jsonb_typeof(p_obj->p_key) = 'null' THEN
    IF NOT p_null THEN
      PERFORM extsvc._raise('22023', format('%s is required', p_key), format('JSON path: %s.%s', p_path, p_key),
                            'See docs/nico-integration.md, "Cut-over", for the shape of the rows.');
    END IF;
    RETURN NULL;
  END IF;
  IF jsonb_typeof(p_obj->p_key) <> 'string' THEN
    PERFORM extsvc._raise('22023', format('%s must be a string', p_key), format('JSON path: %s.%s', p_path, p_key),
                          'See docs/nico-integration.md, "Cut-over", for the shape of the rows.');
  END IF;
  RETURN p_obj->>p_key;
END
$fn$;
COMMENT ON FUNCTION extsvc._json_text(jsonb, text, text, boolean) IS
  'Internal (imports): a string member of a JSON object, NULL when absent or null and allowed; 22023 naming the JSON path otherwise. No grants.';

-- A JSON member as a timestamp (RFC 3339, as NICo's row_to_json and chrono write it).
CREATE FUNCTION extsvc._json_time(p_obj jsonb, p_key text, p_path text, p_null boolean) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v text := extsvc._json_text(p_obj, p_key, p_path, p_null);
BEGIN
  IF v IS NULL THEN
    RETURN NULL;
  END IF;
  -- a date and a time with an explicit offset: never the session's zone
  IF v !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}(:?[0-9]{2})?)$' THEN
    PERFORM extsvc._raise('22023', format('%s is not an RFC 3339 timestamp', p_key),
                          format('JSON path: %s.%s = %s', p_path, p_key, extsvc._token(v)),
                          'Pass e.g. 2026-08-01T12:00:00.123456Z (a time zone offset is required).');
  END IF;
  -- PostgreSQL keeps microseconds: nanoseconds beyond them are cut, as in
  -- NICo's own timestamptz columns
  RETURN regexp_replace(v, '(\.[0-9]{6})[0-9]+', '\1')::timestamptz;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
  PERFORM extsvc._raise('22023', format('%s is not a valid timestamp', p_key),
                        format('JSON path: %s.%s = %s', p_path, p_key, extsvc._token(v)), 'Pass a valid RFC 3339 timestamp.');
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._json_time(jsonb, text, text, boolean) IS
  'Internal (imports): an RFC 3339 member of a JSON object (offset required, nanoseconds cut to microseconds); 22023 naming the JSON path otherwise. No grants.';

-- Refuses members a shape does not have.
CREATE FUNCTION extsvc._json_keys_only(p_obj jsonb, p_keys text[], p_path text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_bad text;
BEGIN
  IF jsonb_typeof(p_obj) IS DISTINCT FROM 'object' THEN
    PERFORM extsvc._raise('22023', 'each row must be a JSON object', format('JSON path: %s', p_path),
                          'See docs/nico-integration.md, "Cut-over", for the shape of the rows.');
  END IF;
  SELECT min(k) INTO v_bad FROM jsonb_object_keys(p_obj) k WHERE k <> ALL (p_keys);
  IF v_bad IS NOT NULL THEN
    PERFORM extsvc._raise('22023', 'unknown field', format('JSON path: %s.%s', p_path, extsvc._token(v_bad)),
                          format('Allowed here: %s.', array_to_string(p_keys, ', ')));
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._json_keys_only(jsonb, text[], text) IS
  'Internal (imports): 22023 naming the JSON path of a member the row shape does not have. No grants.';

-- A NICo ConfigVersion string V<n>-T<micros> as we store them; returns n.
CREATE FUNCTION extsvc._json_config_version(p_value text, p_path text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_value IS NULL OR p_value !~ '^V[1-9][0-9]{0,8}-T[0-9]{1,19}$' THEN
    PERFORM extsvc._raise('22023', 'not a NICo ConfigVersion string', format('JSON path: %s = %s', p_path, extsvc._token(p_value)),
                          'Pass the string as NICo stores it: V<n>-T<unix microseconds>, n from 1.');
  END IF;
  RETURN substring(p_value FROM '^V([0-9]+)-')::integer;
END
$fn$;
COMMENT ON FUNCTION extsvc._json_config_version(text, text) IS
  'Internal (imports): the number n of a ConfigVersion string V<n>-T<micros> (n from 1 to 999999999); 22023 naming the JSON path otherwise. No grants.';

-- A tenant id of an imported row: the one rule of every tenant argument
-- (extsvc._check_tenant_id, issue 29), named by its JSON path.
CREATE FUNCTION extsvc._json_tenant(p_value text, p_path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_value IS NULL OR length(p_value) > 256 OR p_value !~ '^[A-Za-z0-9_-]+$' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must be 1 to 256 letters, digits, ''_'' or ''-''',
      format('JSON path: %s = %s', p_path, extsvc._token(p_value)),
      'Pass NICo''s tenant organization id as it is (ASCII letters, digits, ''_'' and ''-'', at most 256).');
  END IF;
  RETURN p_value;
END
$fn$;
COMMENT ON FUNCTION extsvc._json_tenant(text, text) IS
  'Internal (imports): a tenant id under the rule of every tenant argument (1 to 256 of A-Za-z0-9_-), 22023 naming the JSON path otherwise. No grants.';

-- Re-raises an error of a check written for a plain argument (its DETAIL
-- names the field, which goes, or a JSON path from $ inside the value) with
-- the JSON path of the imported value in front.
CREATE FUNCTION extsvc._json_reraise(p_path text, p_state text, p_message text, p_detail text, p_hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  PERFORM extsvc._raise(p_state, p_message,
    CASE WHEN p_detail LIKE 'JSON path: $%' THEN 'JSON path: ' || p_path || substr(p_detail, 13)
         ELSE concat_ws('; ', 'JSON path: ' || p_path,
                        nullif(regexp_replace(coalesce(p_detail, ''), '^field: [a-z_]+(, |; |$)', ''), '')) END,
    p_hint);
END
$fn$;
COMMENT ON FUNCTION extsvc._json_reraise(text, text, text, text, text) IS
  'Internal (imports): raises an argument check''s error again with the JSON path of the imported value in its DETAIL. No grants.';

-- The services ------------------------------------------------------------------

-- One NICo service (extension_services row plus its versions) checked and
-- turned into the rows we store; 22023 at the first bad field.
CREATE FUNCTION extsvc._import_service_rows(p_row jsonb, p_path text,
    OUT service extsvc.service_records, OUT versions extsvc.service_versions[])
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v jsonb;
  n integer := 0;
  v_path text;
  x extsvc.service_versions;
  v_type text;
  v_state text;
  v_msg text;
  v_detail text;
  v_hint text;
  v_ctr bigint;
  v_max integer := 0;
  v_live boolean := false;
  v_latest extsvc.service_versions;
BEGIN
  PERFORM extsvc._json_keys_only(p_row, ARRAY['id', 'type', 'name', 'description', 'tenant_organization_id',
                                              'version_ctr', 'created', 'updated', 'deleted', 'versions'], p_path);
  v_type := lower(extsvc._json_text(p_row, 'type', p_path, false));
  IF v_type = 'dpf_helm_chart' THEN
    PERFORM extsvc._raise('22023', 'DPF_HELM_CHART services are not imported',
      format('JSON path: %s.type', p_path),
      'Create DPF services anew with extsvc.create_service (their DPUServices are named after our identity, SPEC 2.2); import only kubernetes_pod services.');
  ELSIF v_type IS DISTINCT FROM 'kubernetes_pod' THEN
    PERFORM extsvc._raise('22023', 'unknown service type', format('JSON path: %s.type = %s', p_path, extsvc._token(p_row->>'type')),
                          'NICo''s types are kubernetes_pod and dpf_helm_chart.');
  END IF;
  BEGIN
    service.service_id := extsvc._json_text(p_row, 'id', p_path, false)::uuid;
  EXCEPTION WHEN invalid_text_representation THEN
    PERFORM extsvc._raise('22023', 'id is not a UUID', format('JSON path: %s.id', p_path), 'Pass the service''s id.');
  END;
  service.tenant_organization_id := extsvc._json_tenant(extsvc._json_text(p_row, 'tenant_organization_id', p_path, false),
                                                        p_path || '.tenant_organization_id');
  service.service_name := extsvc._json_text(p_row, 'name', p_path, false);
  service.description := coalesce(extsvc._json_text(p_row, 'description', p_path, true), '');
  IF btrim(service.service_name) = '' OR length(service.service_name) > 256 OR service.service_name <> btrim(service.service_name) THEN
    PERFORM extsvc._raise('22023', 'name must be 1 to 256 characters without surrounding blanks',
                          format('JSON path: %s.name', p_path), 'Pass the service''s display name.');
  END IF;
  IF length(service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', format('JSON path: %s.description', p_path),
                          'Shorten the description.');
  END IF;
  IF jsonb_typeof(p_row->'version_ctr') IS DISTINCT FROM 'number' OR (p_row->>'version_ctr') !~ '^[0-9]{1,12}$' THEN
    PERFORM extsvc._raise('22023', 'version_ctr must be a whole number', format('JSON path: %s.version_ctr', p_path),
                          'Pass NICo''s version_ctr.');
  END IF;
  v_ctr := (p_row->>'version_ctr')::numeric;
  service.created_at := extsvc._json_time(p_row, 'created', p_path, false);
  service.updated_at := coalesce(extsvc._json_time(p_row, 'updated', p_path, true), service.created_at);
  service.deleted_at := extsvc._json_time(p_row, 'deleted', p_path, true);
  -- a live service's name is stored as every name is (issue 29: NFC, no
  -- invisible or control characters); a deleted one's is history and stays
  -- as NICo has it (the 0.2.0 -> 0.3.0 upgrade does the same)
  IF service.deleted_at IS NULL THEN
    BEGIN
      service.service_name := extsvc._service_name(service.service_name);
    EXCEPTION WHEN invalid_parameter_value THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL,
                              v_hint = PG_EXCEPTION_HINT;
      PERFORM extsvc._json_reraise(p_path || '.name', v_state, v_msg, v_detail,
                                   v_hint || ' Rename the service in NICo before the cut-over.');
    END;
  END IF;
  IF jsonb_typeof(p_row->'versions') IS DISTINCT FROM 'array' OR jsonb_array_length(p_row->'versions') = 0 THEN
    PERFORM extsvc._raise('22023', 'versions must be a non-empty array of the service''s extension_service_versions rows',
                          format('JSON path: %s.versions', p_path), 'Include every version, deleted ones too.');
  END IF;
  versions := '{}';
  FOR v IN SELECT value FROM jsonb_array_elements(p_row->'versions') LOOP
    v_path := format('%s.versions[%s]', p_path, n);
    PERFORM extsvc._json_keys_only(v, ARRAY['service_id', 'version', 'data', 'has_credential', 'created', 'deleted',
                                            'observability'], v_path);
    IF v ? 'service_id' AND (v->>'service_id') IS DISTINCT FROM service.service_id::text THEN
      PERFORM extsvc._raise('22023', 'service_id of a version is not the service''s id', format('JSON path: %s.service_id', v_path),
                            'List each version under its own service.');
    END IF;
    x := NULL;
    x.service_id := service.service_id;
    x.version := extsvc._json_text(v, 'version', v_path, false);
    x.version_number := extsvc._json_config_version(x.version, v_path || '.version');
    x.data := extsvc._json_text(v, 'data', v_path, false);
    IF btrim(x.data) = '' OR octet_length(x.data) > 131072 THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', format('JSON path: %s.data', v_path),
                            'Pass the pod definition as NICo stores it.');
    END IF;
    IF jsonb_typeof(v->'has_credential') IS DISTINCT FROM 'boolean' THEN
      PERFORM extsvc._raise('22023', 'has_credential must be a boolean', format('JSON path: %s.has_credential', v_path),
                            'Pass NICo''s has_credential.');
    END IF;
    x.has_credential := (v->>'has_credential')::boolean;
    x.observability := nullif(v->'observability', 'null'::jsonb);
    -- NICo's ExtensionServiceObservability and its limits, as create_service
    -- checks them (issue 29)
    IF x.observability IS NOT NULL THEN
      BEGIN
        PERFORM extsvc._check_observability(x.observability);
      EXCEPTION WHEN invalid_parameter_value THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL,
                                v_hint = PG_EXCEPTION_HINT;
        PERFORM extsvc._json_reraise(v_path || '.observability', v_state, v_msg, v_detail, v_hint);
      END;
    END IF;
    x.created_at := extsvc._json_time(v, 'created', v_path, false);
    x.deleted_at := extsvc._json_time(v, 'deleted', v_path, true);
    IF EXISTS (SELECT FROM unnest(versions) y WHERE y.version_number = x.version_number) THEN
      PERFORM extsvc._raise('22023', 'two versions have the same number', format('JSON path: %s.version = %s', v_path, x.version),
                            'Each version of a service has its own number.');
    END IF;
    versions := versions || x;
    v_max := greatest(v_max, x.version_number);
    v_live := v_live OR x.deleted_at IS NULL;
    IF x.deleted_at IS NULL AND (v_latest.version_number IS NULL OR x.version_number > v_latest.version_number) THEN
      v_latest := x;
    END IF;
    n := n + 1;
  END LOOP;
  -- NICo numbers a new version version_ctr + 1 (ConfigVersion::new(version_ctr).incremental_change())
  -- and stores it as the new version_ctr: the counter is never below the newest number
  IF v_ctr < v_max OR v_ctr > 2147483647 THEN
    PERFORM extsvc._raise('22023', 'version_ctr is below the newest version''s number',
                          format('JSON path: %s.version_ctr = %s, newest version number %s', p_path, v_ctr, v_max),
                          'Export version_ctr and every version of the service, deleted ones included.');
  END IF;
  service.version_ctr := v_ctr;
  IF service.deleted_at IS NULL AND NOT v_live THEN
    PERFORM extsvc._raise('22023', 'a service that is not deleted has no version left',
                          format('JSON path: %s.versions', p_path),
                          'NICo deletes a service with its last version: export its deleted timestamp too.');
  END IF;
  service.service_type := 'KUBERNETES_POD';
  service.deployment_scope := 'INSTANCE_DPUS';
  service.lifecycle_state := CASE WHEN service.deleted_at IS NULL THEN 'READY' ELSE 'DELETED' END;
  service.state_actor := 'api';
  service.state_reason := 'import';
  service.has_credential := coalesce(v_latest.has_credential, false);
  service.observability := v_latest.observability;
  service.delete_requested_at := service.deleted_at;
END
$fn$;
COMMENT ON FUNCTION extsvc._import_service_rows(jsonb, text) IS
  'Internal (import_nico_services): one NICo service row with its versions, checked (22023 naming the JSON path) and mapped to the rows we store. No grants.';

CREATE FUNCTION extsvc.import_nico_services(services jsonb)
RETURNS TABLE (service_id uuid, service_name text, versions integer, action text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r record;
  e jsonb;
  n integer := 0;
  s extsvc.service_records;
  old extsvc.service_records;
  vs extsvc.service_versions[];
  v_seen uuid[] := '{}';
  v_same boolean;
BEGIN
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of NICo service rows', 'JSON path: $',
                          'See docs/nico-integration.md, "Cut-over".');
  END IF;
  -- every row is checked before anything is written or locked
  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    SELECT * INTO r FROM extsvc._import_service_rows(e, format('$[%s]', n));
    IF (r.service).service_id = ANY (v_seen) THEN
      PERFORM extsvc._raise('22023', 'a service appears twice', format('JSON path: $[%s].id', n), 'List each service once.');
    END IF;
    v_seen := v_seen || (r.service).service_id;
    n := n + 1;
  END LOOP;
  -- in id order (the lock order of the services' writers)
  FOR r IN SELECT x.o, z.service, z.versions
             FROM jsonb_array_elements(services) WITH ORDINALITY x(e, o)
            CROSS JOIN LATERAL extsvc._import_service_rows(x.e, format('$[%s]', x.o - 1)) z
            ORDER BY (z.service).service_id LOOP
    s := r.service;
    vs := r.versions;
    IF EXISTS (SELECT FROM extsvc.purged_services p WHERE p.service_id = s.service_id) THEN
      PERFORM extsvc._raise_c('purged_services_pkey', '23505', 'a service with this id was purged here',
                              format('JSON path: $[%s].id = %s', r.o - 1, s.service_id),
                              'A purged id is not used again; leave this service out of the import.');
    END IF;
    SELECT * INTO old FROM extsvc.service_records x WHERE x.service_id = s.service_id FOR UPDATE;
    IF FOUND THEN
      -- the same rows again: nothing to do; anything else under this id is a conflict
      v_same := old.tenant_organization_id = s.tenant_organization_id AND old.service_name = s.service_name
        AND old.description IS NOT DISTINCT FROM s.description AND old.service_type = s.service_type
        AND old.version_ctr = s.version_ctr AND old.created_at = s.created_at
        AND old.deleted_at IS NOT DISTINCT FROM s.deleted_at AND old.state_reason = 'import'
        AND (SELECT count(*) FROM extsvc.service_versions y WHERE y.service_id = s.service_id) = cardinality(vs)
        AND NOT EXISTS (
          SELECT FROM unnest(vs) w
           WHERE NOT EXISTS (SELECT FROM extsvc.service_versions y
                              WHERE y.service_id = w.service_id AND y.version = w.version
                                AND y.version_number = w.version_number AND y.data = w.data
                                AND y.has_credential = w.has_credential
                                AND y.observability IS NOT DISTINCT FROM w.observability
                                AND y.created_at = w.created_at AND y.deleted_at IS NOT DISTINCT FROM w.deleted_at));
      IF NOT v_same THEN
        PERFORM extsvc._raise_c('service_records_pkey', '23505', 'service_id already exists with other content',
          format('JSON path: $[%s].id = %s', r.o - 1, s.service_id),
          'An imported service is not imported again once it changed (or another service has this id); leave it out.');
      END IF;
      service_id := s.service_id; service_name := s.service_name; versions := cardinality(vs); action := 'unchanged';
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF s.lifecycle_state <> 'DELETED' THEN
      BEGIN
        PERFORM extsvc._check_name_free(s.tenant_organization_id, s.service_name, NULL);
      EXCEPTION WHEN unique_violation THEN
        PERFORM extsvc._raise_c('service_records_tenant_name_key', '23505', 'service name is already in use by this tenant',
          format('JSON path: $[%s].name = %s', r.o - 1, extsvc._token(s.service_name)),
          'Another live service of the tenant has this name (case-insensitively); rename or delete one of them.');
      END;
    END IF;
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description, service_type,
        deployment_scope, lifecycle_state, state_actor, state_reason, version_ctr, has_credential, observability,
        created_at, updated_at, delete_requested_at, deleted_at)
    VALUES (s.service_id, s.tenant_organization_id, s.service_name, s.description, s.service_type,
        s.deployment_scope, s.lifecycle_state, s.state_actor, s.state_reason, s.version_ctr, s.has_credential,
        s.observability, s.created_at, s.updated_at, s.delete_requested_at, s.deleted_at);
    INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability,
                                         created_at, deleted_at)
    SELECT w.service_id, w.version, w.version_number, w.data, w.has_credential, w.observability, w.created_at,
           w.deleted_at
      FROM unnest(vs) w;
    service_id := s.service_id; service_name := s.service_name; versions := cardinality(vs); action := 'imported';
    RETURN NEXT;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc.import_nico_services(jsonb) IS
  'extsvc_admin: imports NICo''s KUBERNETES_POD services [{id, type, name, description, tenant_organization_id, version_ctr, created, updated, deleted, versions: [{version, data, has_credential, created, deleted, observability}]}] with their ids, exact V<n>-T<micros> strings, numbers, data, credential flags and timestamps, all or nothing; a row already imported unchanged is left alone (action unchanged). 22023 naming the JSON path (tenant ids, names and observability under the rules create_service applies; a live service''s name stored in NFC), 23505 with the constraint (service_records_pkey, service_records_tenant_name_key, purged_services_pkey) for a conflict. One row per service: imported or unchanged. docs/nico-integration.md, "Cut-over".';

-- The instances ------------------------------------------------------------------

-- One NICo instance row checked; 22023 at the first bad field. Entries come
-- back as rows (service_id, version, removed_at, attachment_id, dpu_target).
CREATE FUNCTION extsvc._import_instance_row(p_row jsonb, p_path text,
    OUT instance extsvc.instances, OUT entries extsvc.instance_extension_services[])
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v jsonb;
  n integer := 0;
  v_path text;
  x extsvc.instance_extension_services;
  v_cfg jsonb;
BEGIN
  PERFORM extsvc._json_keys_only(p_row, ARRAY['id', 'machine_id', 'tenant_org', 'extension_services_config',
                                              'extension_services_config_version', 'deleted', 'network_dpus',
                                              'dpf_managed'], p_path);
  BEGIN
    instance.instance_id := extsvc._json_text(p_row, 'id', p_path, false)::uuid;
  EXCEPTION WHEN invalid_text_representation THEN
    PERFORM extsvc._raise('22023', 'id is not a UUID', format('JSON path: %s.id', p_path), 'Pass the instance''s id.');
  END;
  instance.tenant_organization_id := extsvc._json_tenant(extsvc._json_text(p_row, 'tenant_org', p_path, false),
                                                         p_path || '.tenant_org');
  instance.host_machine_id := extsvc._machine_id(extsvc._json_text(p_row, 'machine_id', p_path, false),
                                                 p_path || '.machine_id', 'host');
  IF p_row ? 'network_dpus' AND jsonb_typeof(p_row->'network_dpus') <> 'null' THEN
    IF jsonb_typeof(p_row->'network_dpus') <> 'array'
       OR EXISTS (SELECT FROM jsonb_array_elements(p_row->'network_dpus') y WHERE jsonb_typeof(y) <> 'string') THEN
      PERFORM extsvc._raise('22023', 'network_dpus must be an array of DPU MachineIds',
                            format('JSON path: %s.network_dpus', p_path), 'Pass the DPUs the instance''s network uses.');
    END IF;
    instance.network_dpus := extsvc._machine_ids(ARRAY(SELECT jsonb_array_elements_text(p_row->'network_dpus')),
                                                 p_path || '.network_dpus', 'dpu');
  ELSE
    instance.network_dpus := '{}';
  END IF;
  IF p_row ? 'dpf_managed' AND jsonb_typeof(p_row->'dpf_managed') IS DISTINCT FROM 'boolean' THEN
    PERFORM extsvc._raise('22023', 'dpf_managed must be a boolean', format('JSON path: %s.dpf_managed', p_path),
                          'Pass whether the host is managed by DPF (machines.dpf.used_for_ingestion).');
  END IF;
  instance.dpf_managed := coalesce((p_row->>'dpf_managed')::boolean, true);
  instance.config_version_text := extsvc._json_text(p_row, 'extension_services_config_version', p_path, false);
  instance.config_version := extsvc._json_config_version(instance.config_version_text,
                                                         p_path || '.extension_services_config_version');
  instance.delete_requested_at := extsvc._json_time(p_row, 'deleted', p_path, true);
  v_cfg := p_row->'extension_services_config';
  IF jsonb_typeof(v_cfg) IS DISTINCT FROM 'object' OR jsonb_typeof(v_cfg->'service_configs') IS DISTINCT FROM 'array' THEN
    PERFORM extsvc._raise('22023', 'extension_services_config must be {"service_configs": [...]}',
                          format('JSON path: %s.extension_services_config', p_path), 'Pass NICo''s column as it is.');
  END IF;
  PERFORM extsvc._json_keys_only(v_cfg, ARRAY['service_configs'], p_path || '.extension_services_config');
  entries := '{}';
  FOR v IN SELECT value FROM jsonb_array_elements(v_cfg->'service_configs') LOOP
    v_path := format('%s.extension_services_config.service_configs[%s]', p_path, n);
    PERFORM extsvc._json_keys_only(v, ARRAY['service_id', 'version', 'removed', 'id', 'dpu_target'], v_path);
    x := NULL;
    x.instance_id := instance.instance_id;
    BEGIN
      x.service_id := extsvc._json_text(v, 'service_id', v_path, false)::uuid;
    EXCEPTION WHEN invalid_text_representation THEN
      PERFORM extsvc._raise('22023', 'service_id is not a UUID', format('JSON path: %s.service_id', v_path),
                            'Pass the entry''s service id.');
    END;
    x.version := extsvc._json_text(v, 'version', v_path, false);
    PERFORM extsvc._json_config_version(x.version, v_path || '.version');
    x.removed_at := extsvc._json_time(v, 'removed', v_path, true);
    IF instance.delete_requested_at IS NOT NULL THEN
      -- an instance being deleted has every entry removed (delete_instance)
      x.removed_at := coalesce(x.removed_at, instance.delete_requested_at);
    END IF;
    BEGIN
      x.attachment_id := nullif(extsvc._json_text(v, 'id', v_path, true), '')::uuid;
    EXCEPTION WHEN invalid_text_representation THEN
      PERFORM extsvc._raise('22023', 'id is not a UUID', format('JSON path: %s.id', v_path), 'Pass the attachment''s id.');
    END;
    IF extsvc._json_text(v, 'dpu_target', v_path, true) IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target applies only to DPF_HELM_CHART services, which are not imported',
                            format('JSON path: %s.dpu_target', v_path), 'Import kubernetes_pod entries only.');
    END IF;
    IF EXISTS (SELECT FROM unnest(entries) y WHERE y.service_id = x.service_id AND y.version = x.version) THEN
      PERFORM extsvc._raise('22023', 'an entry appears twice', format('JSON path: %s', v_path),
                            'List each (service_id, version) once.');
    END IF;
    entries := entries || x;
    n := n + 1;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc._import_instance_row(jsonb, text) IS
  'Internal (import_nico_instances): one NICo instance row checked (22023 naming the JSON path) and mapped to the instance and entry rows we store. No grants.';

CREATE FUNCTION extsvc.import_nico_instances(instances jsonb)
RETURNS TABLE (instance_id uuid, entries integer, action text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r record;
  e jsonb;
  n integer := 0;
  i extsvc.instances;
  old extsvc.instances;
  es extsvc.instance_extension_services[];
  w extsvc.instance_extension_services;
  s extsvc.service_records;
  v_seen uuid[] := '{}';
  v_bad text;
BEGIN
  IF instances IS NULL OR jsonb_typeof(instances) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'instances must be a JSON array of NICo instance rows', 'JSON path: $',
                          'See docs/nico-integration.md, "Cut-over".');
  END IF;
  FOR e IN SELECT value FROM jsonb_array_elements(instances) LOOP
    SELECT * INTO r FROM extsvc._import_instance_row(e, format('$[%s]', n));
    IF (r.instance).instance_id = ANY (v_seen) THEN
      PERFORM extsvc._raise('22023', 'an instance appears twice', format('JSON path: $[%s].id', n), 'List each instance once.');
    END IF;
    v_seen := v_seen || (r.instance).instance_id;
    n := n + 1;
  END LOOP;
  FOR r IN SELECT x.o, z.instance, z.entries
             FROM jsonb_array_elements(instances) WITH ORDINALITY x(e, o)
            CROSS JOIN LATERAL extsvc._import_instance_row(x.e, format('$[%s]', x.o - 1)) z
            ORDER BY (z.instance).instance_id LOOP
    i := r.instance;
    es := r.entries;
    -- every entry names an imported KUBERNETES_POD version of the instance's tenant
    FOREACH w IN ARRAY es LOOP
      SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = w.service_id;
      IF NOT FOUND OR s.tenant_organization_id <> i.tenant_organization_id
         OR NOT EXISTS (SELECT FROM extsvc.service_versions v WHERE v.service_id = w.service_id AND v.version = w.version) THEN
        PERFORM extsvc._raise('P0002', 'an entry names no imported service version of the instance''s tenant',
          format('JSON path: $[%s] entry service_id %s, version %s', r.o - 1, w.service_id, extsvc._token(w.version)),
          'Import the services first (extsvc.import_nico_services, in the same transaction or before).');
      END IF;
      IF s.service_type <> 'KUBERNETES_POD' THEN
        PERFORM extsvc._raise('22023', 'only KUBERNETES_POD entries are imported',
          format('JSON path: $[%s] entry service_id %s', r.o - 1, w.service_id),
          'Attach DPF services anew with extsvc.set_instance_extension_services.');
      END IF;
    END LOOP;
    IF cardinality(i.network_dpus) > 0 THEN
      SELECT extsvc._token_list(array_agg(n.id), false) INTO v_bad FROM unnest(i.network_dpus) n(id)
       WHERE NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = n.id AND d.host_machine_id = i.host_machine_id
                            AND d.deregistered_at IS NULL);
      IF v_bad IS NOT NULL THEN
        PERFORM extsvc._raise('22023', 'network_dpus names DPUs that are not registered to the instance''s host',
                              format('JSON path: $[%s].network_dpus: %s', r.o - 1, v_bad),
                              'Register the host''s DPUs (extsvc.register_dpu) before importing its instances.');
      END IF;
    END IF;
    PERFORM extsvc._lock_dpu_work(ARRAY[i.host_machine_id], ARRAY[i.instance_id]);
    SELECT * INTO old FROM extsvc.instances x WHERE x.instance_id = i.instance_id FOR UPDATE;
    IF FOUND THEN
      IF old.tenant_organization_id = i.tenant_organization_id AND old.host_machine_id = i.host_machine_id
         AND old.network_dpus = i.network_dpus AND old.dpf_managed = i.dpf_managed
         AND old.config_version = i.config_version AND old.config_version_text = i.config_version_text
         AND old.delete_requested_at IS NOT DISTINCT FROM i.delete_requested_at
         AND (SELECT count(*) FROM extsvc.instance_extension_services c WHERE c.instance_id = i.instance_id) = cardinality(es)
         AND NOT EXISTS (SELECT FROM unnest(es) y
                          WHERE NOT EXISTS (SELECT FROM extsvc.instance_extension_services c
                                             WHERE c.instance_id = y.instance_id AND c.service_id = y.service_id
                                               AND c.version = y.version
                                               AND c.removed_at IS NOT DISTINCT FROM y.removed_at
                                               AND c.attachment_id IS NOT DISTINCT FROM y.attachment_id)) THEN
        instance_id := i.instance_id; entries := cardinality(es); action := 'unchanged';
        RETURN NEXT;
        CONTINUE;
      END IF;
      PERFORM extsvc._raise_c('instances_pkey', '23505', 'instance already exists with other content',
        format('JSON path: $[%s].id = %s', r.o - 1, i.instance_id),
        'An imported instance is not imported again once it changed (or another instance has this id); leave it out.');
    END IF;
    -- a host holds at most one live instance (issue 29): NICo allocates one
    -- instance per machine, so two live rows on one host mean an export that
    -- mixed times; the answer names the row and the host
    IF i.delete_requested_at IS NULL
       AND EXISTS (SELECT FROM extsvc.instances x
                    WHERE x.host_machine_id = i.host_machine_id AND x.delete_requested_at IS NULL) THEN
      PERFORM extsvc._raise_c('instances_one_live_per_host', '23505', 'the host already has a live instance',
        format('JSON path: $[%s].machine_id = %s, id: %s', r.o - 1, i.host_machine_id, i.instance_id),
        'Import only the machine''s current instance (NICo''s deleted instances with their deleted time).');
    END IF;
    INSERT INTO extsvc.instances (instance_id, tenant_organization_id, host_machine_id, network_dpus, dpf_managed,
                                  config_version, config_version_text, delete_requested_at)
    VALUES (i.instance_id, i.tenant_organization_id, i.host_machine_id, i.network_dpus, i.dpf_managed,
            i.config_version, i.config_version_text, i.delete_requested_at);
    INSERT INTO extsvc.instance_extension_services (instance_id, service_id, version, removed_at, attachment_id)
    SELECT y.instance_id, y.service_id, y.version, y.removed_at, y.attachment_id FROM unnest(es) y;
    instance_id := i.instance_id; entries := cardinality(es); action := 'imported';
    RETURN NEXT;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc.import_nico_instances(jsonb) IS
  'extsvc_admin: imports NICo''s instances [{id, machine_id, tenant_org, extension_services_config: {service_configs: [{service_id, version, removed, id}]}, extension_services_config_version, deleted, network_dpus, dpf_managed}] with their KUBERNETES_POD entries (tombstones with their removed time) and their exact ConfigVersion string: the agents keep echoing it and the next change continues its number. All or nothing; an instance already imported unchanged is left alone (action unchanged). 22023 naming the JSON path (machine ids as NICo''s parser accepts them, tenant ids under the rule of every tenant argument), P0002 for an entry without its imported service version, 23505 instances_pkey (or instance_extension_services_attachment_id_key, or instances_one_live_per_host: a host holds one live instance) for a conflict. docs/nico-integration.md, "Cut-over".';

REVOKE ALL ON FUNCTION
  extsvc._json_text(jsonb, text, text, boolean),
  extsvc._json_time(jsonb, text, text, boolean),
  extsvc._json_keys_only(jsonb, text[], text),
  extsvc._json_config_version(text, text),
  extsvc._json_tenant(text, text),
  extsvc._json_reraise(text, text, text, text, text),
  extsvc._import_service_rows(jsonb, text),
  extsvc.import_nico_services(jsonb),
  extsvc._import_instance_row(jsonb, text),
  extsvc.import_nico_instances(jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION extsvc.import_nico_services(jsonb), extsvc.import_nico_instances(jsonb) TO extsvc_admin;
