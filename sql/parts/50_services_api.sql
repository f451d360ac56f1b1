-- Service lifecycle API (SPEC 2.5, 2.9, 2.10). Every function only validates
-- and persists intent in the caller's transaction; none calls Kubernetes.

CREATE FUNCTION extsvc.validate_dpf_helm_chart_data(data text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._validate_helm_chart_data(data)
$fn$;
COMMENT ON FUNCTION extsvc.validate_dpf_helm_chart_data(text) IS
  'Parses DPF_HELM_CHART data strictly and returns its normalized form, or raises naming the JSON path.';

CREATE FUNCTION extsvc.dpf_service_name(service_id uuid, version text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._dpf_service_name(service_id, version)
$fn$;
COMMENT ON FUNCTION extsvc.dpf_service_name(uuid, text) IS
  'DPUService and Helm release name of a DPF service version: extsvc-<first 20 base32 chars of SHA-256(lower(uuid)/version)>.';

CREATE FUNCTION extsvc.placement_label_key(service_id uuid, version text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._placement_label_key(service_id, version)
$fn$;
COMMENT ON FUNCTION extsvc.placement_label_key(uuid, text) IS
  'Node label key that places a DPF service version on a DPU: nico/extsvc-<hash>, value enabled.';

-- The services row of one service (for return values).
CREATE FUNCTION extsvc._service_row(p_service_id uuid) RETURNS extsvc.services
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT * FROM extsvc.services s WHERE s.service_id = p_service_id
$fn$;

-- True when an allow-list entry admits the chart of normalized Helm data
-- (whether or not enforcement is on).
CREATE FUNCTION extsvc._chart_allowed(p_data jsonb) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT FROM extsvc.chart_allowlist a
                  WHERE extsvc.repo_url_matches(a.repo_url, p_data->>'repoURL')
                    AND (a.chart_name = '' OR a.chart_name = p_data->>'chartName'))
$fn$;
COMMENT ON FUNCTION extsvc._chart_allowed(jsonb) IS
  'Internal: true when an extsvc.chart_allowlist entry admits the repoURL and chartName of normalized Helm data. EXECUTE for extsvc_admin only (extsvc.services_outside_allowlist calls it as the reading role).';

-- Refuses a chart that is not on the allow-list while enforcement is on.
-- p_detail: the DETAIL (default: the repoURL's JSON path and the chart).
CREATE FUNCTION extsvc._check_chart_allowed(p_data jsonb, p_detail text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF extsvc._setting('extsvc.enforce_chart_allowlist') = 'off' THEN
    RETURN;
  END IF;
  IF NOT extsvc._chart_allowed(p_data) THEN
    PERFORM extsvc._raise('22023', 'chart is not on the chart allow-list',
      coalesce(p_detail, format('JSON path: $.repoURL (chart %s)', p_data->>'chartName')),
      'An operator (extsvc_admin) can allow it with extsvc.allow_chart(repo_url, chart_name).');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_chart_allowed(jsonb, text) IS
  'Internal: 22023 when enforcement (extsvc.enforce_chart_allowlist) is on and the chart of the data is not on the allow-list. No grants.';

-- The same for what an existing DPF service runs and will run (issue 29):
-- its desired revision and its applied one. Retry and attach call it.
CREATE FUNCTION extsvc._check_service_chart_allowed(p_service_id uuid, p_detail text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT h.data FROM extsvc.service_records s
             JOIN extsvc.helm_revisions h ON h.service_id = s.service_id
                                         AND h.revision IN (s.desired_revision, s.applied_revision)
            WHERE s.service_id = p_service_id ORDER BY h.revision DESC LOOP
    PERFORM extsvc._check_chart_allowed(r.data, format('%s (chart %s)', p_detail, r.data->>'chartName'));
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_service_chart_allowed(uuid, text) IS
  'Internal: extsvc._check_chart_allowed for the desired and the applied revision of a DPF service (retry, attach). No grants.';

-- extsvc.allow_privileged = off (issue 29): a site refuses
-- security.privileged: true from tenants, i.e. callers without extsvc_admin
-- rights (operators may still run privileged services, such as an ALL_DPUS
-- agent). Called where a definition is about to run: create, update (and so
-- rollback), retry.
CREATE FUNCTION extsvc._check_privileged_allowed(p_data jsonb, p_admin boolean, p_detail text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT p_admin AND coalesce((p_data->'security'->>'privileged')::boolean, false)
     AND extsvc._setting('extsvc.allow_privileged') = 'off' THEN
    PERFORM extsvc._raise('22023', 'security.privileged is not allowed at this site',
      coalesce(p_detail, 'JSON path: $.security.privileged'),
      'Privileged services are turned off at this site (extsvc.allow_privileged); use security.privileged: false, or ask an operator.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_privileged_allowed(jsonb, boolean, text) IS
  'Internal: 22023 for security.privileged: true from a caller without extsvc_admin rights while extsvc.allow_privileged is off. No grants.';

-- JSONPath-style member access for error DETAILs, as the C++ core writes
-- it (core/json_path.hpp): .name for identifier-like keys, otherwise
-- ["key"] with JSON escaping; a key longer than 64 characters is cut to 48
-- and marked ["prefix"...], so a path never quotes a long key whole.
CREATE FUNCTION extsvc._json_path_member(p_parent text, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN p_key ~ '^[A-Za-z_][A-Za-z0-9_]*$' AND length(p_key) <= 64 THEN p_parent || '.' || p_key
              WHEN length(p_key) <= 64 THEN p_parent || '[' || to_json(p_key)::text || ']'
              ELSE p_parent || '[' || to_json(left(p_key, 48))::text || '...]' END
$fn$;
COMMENT ON FUNCTION extsvc._json_path_member(text, text) IS
  'Internal: parent.key or parent["key"] for an error DETAIL; keys over 64 characters are cut to 48 and marked. No grants.';

-- KUBERNETES_POD observability (issue 29): NICo's ExtensionServiceObservability
-- as it stores it, {"configs": [{"name": string|null, "config":
-- {"Prometheus": {"scrape_interval_seconds": u32, "endpoint": "host:port"}}
-- | {"Logging": {"path": "/..."}}}]}, with NICo's own limits (name 64,
-- endpoint and path 128 characters, their alphabets) and the caps of data
-- (131072 bytes); unknown fields are refused at every level, so the depth
-- is the schema's. The first offending field is named by its JSON path.
CREATE FUNCTION extsvc._check_observability(p jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  c jsonb;
  n integer := 0;
  v_path text;
  v_kind text;
  v_body jsonb;
  v_key text;
BEGIN
  IF p IS NULL THEN
    RETURN;
  END IF;
  IF octet_length(p::text) > 131072 THEN
    PERFORM extsvc._raise('22023', 'observability is larger than 131072 bytes',
                          format('field: observability (%s bytes)', octet_length(p::text)),
                          'Pass at most 131072 bytes, as for data.');
  END IF;
  IF jsonb_typeof(p) <> 'object' THEN
    PERFORM extsvc._raise('22023', 'observability must be a JSON object', 'JSON path: $',
                          'Pass {"configs": [...]} as NICo stores it, or NULL.');
  END IF;
  SELECT k INTO v_key FROM jsonb_object_keys(p) k WHERE k <> 'configs' ORDER BY k LIMIT 1;
  IF v_key IS NOT NULL THEN
    PERFORM extsvc._raise('22023', 'unknown field in observability', 'JSON path: ' || extsvc._json_path_member('$', v_key),
                          'observability has one field, configs.');
  END IF;
  IF jsonb_typeof(p->'configs') IS DISTINCT FROM 'array' THEN
    PERFORM extsvc._raise('22023', 'observability.configs must be an array', 'JSON path: $.configs',
                          'Pass {"configs": [...]} as NICo stores it, or NULL.');
  END IF;
  FOR c IN SELECT value FROM jsonb_array_elements(p->'configs') LOOP
    v_path := format('$.configs[%s]', n);
    IF jsonb_typeof(c) <> 'object' THEN
      PERFORM extsvc._raise('22023', 'an observability config must be an object', 'JSON path: ' || v_path,
                            'Pass {"name": ..., "config": {"Prometheus": {...}} or {"Logging": {...}}}.');
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(c) k WHERE k NOT IN ('name', 'config') ORDER BY k LIMIT 1;
    IF v_key IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'unknown field in an observability config',
                            'JSON path: ' || extsvc._json_path_member(v_path, v_key), 'A config has name and config.');
    END IF;
    IF coalesce(jsonb_typeof(c->'name'), 'null') NOT IN ('null', 'string')
       OR (jsonb_typeof(c->'name') = 'string' AND length(c->>'name') > 64) THEN
      PERFORM extsvc._raise('22023', 'an observability config name is a string of at most 64 characters',
                            format('JSON path: %s.name', v_path), 'Shorten the name, or omit it.');
    END IF;
    IF jsonb_typeof(c->'config') IS DISTINCT FROM 'object'
       OR (SELECT count(*) FROM jsonb_object_keys(c->'config')) <> 1 THEN
      PERFORM extsvc._raise('22023', 'an observability config is either Prometheus or Logging',
                            format('JSON path: %s.config', v_path),
                            'Pass {"Prometheus": {...}} or {"Logging": {...}}.');
    END IF;
    SELECT k INTO v_kind FROM jsonb_object_keys(c->'config') k;
    v_body := c->'config'->v_kind;
    v_path := extsvc._json_path_member(v_path || '.config', v_kind);
    IF v_kind NOT IN ('Prometheus', 'Logging') THEN
      PERFORM extsvc._raise('22023', 'an observability config is either Prometheus or Logging',
                            'JSON path: ' || v_path, 'Pass {"Prometheus": {...}} or {"Logging": {...}}.');
    END IF;
    IF jsonb_typeof(v_body) <> 'object' THEN
      PERFORM extsvc._raise('22023', format('an observability %s config must be an object', v_kind),
                            'JSON path: ' || v_path, 'See docs/sql-api.md, create_service.');
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(v_body) k
     WHERE k NOT IN (CASE WHEN v_kind = 'Prometheus' THEN 'scrape_interval_seconds' ELSE 'path' END,
                     CASE WHEN v_kind = 'Prometheus' THEN 'endpoint' ELSE 'path' END)
     ORDER BY k LIMIT 1;
    IF v_key IS NOT NULL THEN
      PERFORM extsvc._raise('22023', format('unknown field in an observability %s config', v_kind),
                            'JSON path: ' || extsvc._json_path_member(v_path, v_key),
                            CASE WHEN v_kind = 'Prometheus' THEN 'Prometheus has scrape_interval_seconds and endpoint.'
                                 ELSE 'Logging has path.' END);
    END IF;
    IF v_kind = 'Prometheus' THEN
      IF jsonb_typeof(v_body->'scrape_interval_seconds') IS DISTINCT FROM 'number'
         OR (v_body->>'scrape_interval_seconds') !~ '^[0-9]{1,10}$'
         OR (v_body->>'scrape_interval_seconds')::bigint > 4294967295 THEN
        PERFORM extsvc._raise('22023', 'scrape_interval_seconds must be an integer from 0 to 4294967295',
                              format('JSON path: %s.scrape_interval_seconds', v_path), 'Pass the interval in seconds.');
      END IF;
      IF jsonb_typeof(v_body->'endpoint') IS DISTINCT FROM 'string'
         OR (v_body->>'endpoint') !~ '^[A-Za-z0-9:-]{1,128}$' THEN
        PERFORM extsvc._raise('22023', 'endpoint must be 1 to 128 letters, digits, '':'' or ''-''',
                              format('JSON path: %s.endpoint', v_path), 'Pass host:port, e.g. busybox:9090.');
      END IF;
    ELSIF jsonb_typeof(v_body->'path') IS DISTINCT FROM 'string'
          OR (v_body->>'path') !~ '^[A-Za-z0-9_/.@-]{1,128}$' THEN
      PERFORM extsvc._raise('22023', 'path must be 1 to 128 letters, digits, ''_'', ''/'', ''.'', ''@'' or ''-''',
                            format('JSON path: %s.path', v_path), 'Pass a log file path, e.g. /var/log/service.log.');
    END IF;
    n := n + 1;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_observability(jsonb) IS
  'Internal: 22023 unless observability is NICo''s {"configs": [...]} (Prometheus or Logging configs, NICo''s limits) within 131072 bytes; names the JSON path. No grants.';

-- A service name as it is stored (issue 29): blanks trimmed at both ends,
-- Unicode NFC (in a UTF-8 database), 1 to 256 characters, and none of the
-- characters that make two names look identical while they differ:
-- controls (Cc), format characters (Cf: zero-width, bidirectional, soft
-- hyphen, ...), line and paragraph separators, every space separator but
-- U+0020, the Hangul fillers, the combining grapheme joiner and the
-- variation selectors. 22023 names the first such character and its
-- position in the trimmed, normalized name. sql/migrations/0.2.0--0.3.0.sql
-- applies the same classes to the names already stored.
CREATE FUNCTION extsvc._service_name(p_name text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v text := btrim(p_name);
  v_pos integer;
BEGIN
  IF v IS NULL OR v = '' OR length(v) > 256 THEN
    PERFORM extsvc._raise('22023', 'service_name must be 1 to 256 characters', 'field: service_name',
                          'Pass a non-empty display name.');
  END IF;
  IF getdatabaseencoding() = 'UTF8' THEN
    v := normalize(v, NFC);
    v_pos := regexp_instr(v, '[\u0001-\u001F\u007F-\u009F\u00A0\u00AD\u034F\u0600-\u0605\u061C\u06DD\u070F'
                             '\u0890\u0891\u08E2\u115F\u1160\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u206F'
                             '\u3000\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF9-\uFFFB\U000110BD\U000110CD'
                             '\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001'
                             '\U000E0020-\U000E007F\U000E0100-\U000E01EF]');
  ELSE
    v_pos := regexp_instr(v, '[\x01-\x1F\x7F]');
  END IF;
  IF v_pos > 0 THEN
    PERFORM extsvc._raise('22023', 'service_name contains an invisible or control character',
      format('field: service_name, character U+%s at position %s', upper(lpad(to_hex(ascii(substr(v, v_pos, 1))), 4, '0')), v_pos),
      'Use visible characters only (ordinary spaces are fine); names that look alike must not differ by invisible characters.');
  END IF;
  RETURN v;
END
$fn$;
COMMENT ON FUNCTION extsvc._service_name(text) IS
  'Internal: the stored form of a service name (trimmed, NFC, 1-256 characters) or 22023 naming an invisible, control or look-alike space character. No grants.';

-- Refuses a display name that a live service of the tenant already uses.
CREATE FUNCTION extsvc._check_name_free(p_tenant text, p_name text, p_except uuid) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF EXISTS (SELECT FROM extsvc.service_records s
             WHERE s.tenant_organization_id = p_tenant AND lower(s.service_name) = lower(p_name)
               AND s.lifecycle_state <> 'DELETED' AND s.service_id IS DISTINCT FROM p_except) THEN
    PERFORM extsvc._raise_c('service_records_tenant_name_key', '23505', 'service name is already in use by this tenant',
      format('service_name: %s', p_name),
      'Choose another name; a name becomes reusable once its service is DELETED.');
  END IF;
END
$fn$;

-- Marks a DPF service's reconciliation row as having new intent.
CREATE FUNCTION extsvc._intent_changed(p_service_id uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET state_version = r.state_version + 1, next_due_at = now(), attempts = 0,
         last_error = NULL, last_http_status = NULL, last_error_at = NULL
   WHERE r.service_id = p_service_id;
  PERFORM extsvc._wake();
END
$fn$;

-- The body of create_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_id      uuid := coalesce(_create_service.service_id, gen_random_uuid());
  v_type    text := upper(btrim(_create_service.service_type));
  v_scope   text := coalesce(upper(btrim(_create_service.deployment_scope)), 'INSTANCE_DPUS');
  v_target  text := upper(btrim(_create_service.dpu_target));
  v_name    text;
  v_data    jsonb;
  v_version text := extsvc._config_version(1);
  v_existing extsvc.service_records;
BEGIN
  PERFORM extsvc._check_tenant_id(_create_service.tenant_organization_id, true);
  v_name := extsvc._service_name(_create_service.service_name);
  IF length(_create_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;
  IF v_type IS NULL OR v_type NOT IN ('KUBERNETES_POD', 'DPF_HELM_CHART') THEN
    PERFORM extsvc._raise('22023', 'unknown service_type', format('field: service_type = %s', extsvc._token(_create_service.service_type)),
                          'Use KUBERNETES_POD or DPF_HELM_CHART.');
  END IF;
  IF v_scope NOT IN ('INSTANCE_DPUS', 'ALL_DPUS') THEN
    PERFORM extsvc._raise('22023', 'unknown deployment_scope', format('field: deployment_scope = %s', extsvc._token(_create_service.deployment_scope)),
                          'Use INSTANCE_DPUS (default) or ALL_DPUS.');
  END IF;
  IF v_target IS NOT NULL AND v_target NOT IN ('PRIMARY', 'ALL_ACTIVE', 'ALL') THEN
    PERFORM extsvc._raise('22023', 'unknown dpu_target', format('field: dpu_target = %s', extsvc._token(_create_service.dpu_target)),
                          'Use PRIMARY, ALL_ACTIVE or ALL.');
  END IF;
  IF _create_service.data IS NULL THEN
    PERFORM extsvc._raise('22023', 'data must not be NULL', 'field: data', 'Pass the service definition.');
  END IF;

  IF v_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_create_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _create_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF v_scope = 'ALL_DPUS' THEN
      IF NOT p_admin THEN
        PERFORM extsvc._raise('42501', 'only extsvc_admin members may create ALL_DPUS services',
                              'field: deployment_scope = ALL_DPUS', 'Ask an operator to create site-wide services.');
      END IF;
      IF v_target IS NOT NULL THEN
        PERFORM extsvc._raise('22023', 'dpu_target must be NULL for ALL_DPUS services', 'field: dpu_target',
                              'Omit dpu_target: an ALL_DPUS service runs on every registered DPU.');
      END IF;
    ELSIF v_target IS NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target is required for INSTANCE_DPUS services', 'field: dpu_target',
                            'Use PRIMARY, ALL_ACTIVE or ALL.');
    END IF;
    v_data := extsvc._validate_helm_chart_data(_create_service.data);
    PERFORM extsvc._check_chart_allowed(v_data);
    PERFORM extsvc._check_privileged_allowed(v_data, p_admin);
  ELSE
    IF v_target IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target applies only to DPF_HELM_CHART services', 'field: dpu_target',
                            'Omit dpu_target for KUBERNETES_POD services.');
    END IF;
    IF v_scope <> 'INSTANCE_DPUS' THEN
      PERFORM extsvc._raise('22023', 'ALL_DPUS applies only to DPF_HELM_CHART services', 'field: deployment_scope',
                            'Omit deployment_scope for KUBERNETES_POD services.');
    END IF;
    IF btrim(_create_service.data) = '' OR octet_length(_create_service.data) > 131072 THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data',
                            'Pass the pod definition.');
    END IF;
    PERFORM extsvc._check_observability(_create_service.observability);
  END IF;

  -- A repeated create with the same id and the same request returns the
  -- existing service; anything else with that id is a conflict.
  SELECT * INTO v_existing FROM extsvc.service_records s WHERE s.service_id = v_id FOR UPDATE;
  IF FOUND THEN
    IF v_existing.tenant_organization_id <> _create_service.tenant_organization_id THEN
      -- never confirm another tenant's service (nor return its row)
      PERFORM extsvc._raise('42501', 'service_id is not available to this tenant',
        format('service_id: %s, tenant_organization_id: %s', v_id, extsvc._token(_create_service.tenant_organization_id)),
        'Omit service_id to get a fresh one, or pass the id of one of this tenant''s services.');
    END IF;
    IF v_existing.tenant_organization_id = _create_service.tenant_organization_id
       AND v_existing.service_name = v_name
       AND v_existing.service_type = v_type
       AND v_existing.deployment_scope = v_scope
       AND v_existing.dpu_target IS NOT DISTINCT FROM v_target
       AND v_existing.description IS NOT DISTINCT FROM _create_service.description
       AND v_existing.lifecycle_state NOT IN ('DELETING', 'DELETED')
       AND ((v_type = 'DPF_HELM_CHART'
             AND (SELECT r.data FROM extsvc.helm_revisions r
                   WHERE r.service_id = v_id AND r.revision = v_existing.desired_revision) = v_data)
         OR (v_type = 'KUBERNETES_POD'
             AND (SELECT v.data FROM extsvc.service_versions v WHERE v.service_id = v_id
                   ORDER BY v.version_number DESC LIMIT 1) = _create_service.data)) THEN
      RETURN extsvc._service_row(v_id);
    END IF;
    PERFORM extsvc._raise_c('service_records_pkey', '23505', 'service_id already exists', format('service_id: %s', v_id),
                          'Repeat a create only with identical arguments, or omit service_id.');
  END IF;

  PERFORM extsvc._check_name_free(_create_service.tenant_organization_id, v_name, NULL);

  IF v_type = 'DPF_HELM_CHART' THEN
    IF EXISTS (SELECT FROM extsvc.service_records s
               WHERE s.dpf_service_name = extsvc._dpf_service_name(v_id, v_version)) THEN
      PERFORM extsvc._raise_c('service_records_dpf_service_name_key', '23505', 'generated DPUService name collides with another service',
        format('dpf_service_name: %s', extsvc._dpf_service_name(v_id, v_version)),
        'Retry the create with another service_id.');
    END IF;
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        attachable_version, desired_revision, dpf_service_name, placement_label_key, status_message)
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
        v_type, v_scope, v_target, 'CREATING', 'api', 'create',
        v_version, 1, extsvc._dpf_service_name(v_id, v_version), extsvc._placement_label_key(v_id, v_version),
        'waiting for the worker to create the DPUService');
    INSERT INTO extsvc.service_versions (service_id, version, version_number)
    VALUES (v_id, v_version, 1);
    INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (v_id, 1, v_data);
    INSERT INTO extsvc.dpf_extension_service_reconciliations (service_id, next_due_at) VALUES (v_id, now());
    PERFORM extsvc._wake();
  ELSE
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        has_credential, observability)
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
        v_type, v_scope, NULL, 'READY', 'api', 'create',
        coalesce(_create_service.has_credential, false), _create_service.observability);
    INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
    VALUES (v_id, v_version, 1, _create_service.data, coalesce(_create_service.has_credential, false),
            _create_service.observability);
  END IF;
  RETURN extsvc._service_row(v_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb, boolean) IS
  'Internal: body of extsvc.create_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

-- The gates: SECURITY DEFINER; the admin one is executable by extsvc_admin only.
CREATE FUNCTION extsvc._create_service_as_admin(
    tenant_organization_id text, service_name text, service_type text, data text, description text,
    dpu_target text, deployment_scope text, service_id uuid, has_credential boolean, observability jsonb)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._create_service($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, true)
$fn$;
COMMENT ON FUNCTION extsvc._create_service_as_admin(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Internal gate of extsvc.create_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._create_service_as_api(
    tenant_organization_id text, service_name text, service_type text, data text, description text,
    dpu_target text, deployment_scope text, service_id uuid, has_credential boolean, observability jsonb)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._create_service($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, false)
$fn$;
COMMENT ON FUNCTION extsvc._create_service_as_api(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Internal gate of extsvc.create_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._create_service_as_admin(create_service.tenant_organization_id, create_service.service_name,
      create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
      create_service.deployment_scope, create_service.service_id, create_service.has_credential,
      create_service.observability);
  END IF;
  RETURN extsvc._create_service_as_api(create_service.tenant_organization_id, create_service.service_name,
    create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
    create_service.deployment_scope, create_service.service_id, create_service.has_credential,
    create_service.observability);
END
$fn$;
COMMENT ON FUNCTION extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Creates a service. DPF_HELM_CHART answers CREATING: the worker creates the DPUService later. ALL_DPUS needs extsvc_admin rights of the calling role (SET ROLE included); another tenant''s service_id is refused (42501).';

-- The body of update_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match bigint DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s        extsvc.service_records;
  v_name   text;
  v_data   jsonb;
  v_cur    jsonb;
  v_rev    integer;
  v_next   text;
  v_vnum   integer;
BEGIN
  PERFORM extsvc._check_service_tenant(_update_service.service_id, _update_service.tenant_organization_id);
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _update_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _update_service.service_id),
                          'Check the service id; deleted services stay visible in extsvc.services.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may update ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to change site-wide services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', format('service is %s and cannot be updated', s.lifecycle_state),
                          format('service_id: %s, lifecycle_state: %s', s.service_id, s.lifecycle_state),
                          'Create a new service instead.');
  END IF;
  IF _update_service.if_version_ctr_match IS NOT NULL AND _update_service.if_version_ctr_match <> s.version_ctr THEN
    PERFORM extsvc._raise_c('version_ctr_match', '55000', 'version_ctr does not match',
                          format('if_version_ctr_match: %s, version_ctr: %s', _update_service.if_version_ctr_match, s.version_ctr),
                          'Re-read the service and retry with its current version_ctr.');
  END IF;
  -- the stored name again (a name kept from before issue 29 included) is no
  -- rename; any other is checked as a new one
  IF _update_service.service_name IS NOT NULL THEN
    v_name := CASE WHEN btrim(_update_service.service_name) = s.service_name THEN s.service_name
                   ELSE extsvc._service_name(_update_service.service_name) END;
  END IF;
  IF length(_update_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_update_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _update_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF _update_service.data IS NOT NULL THEN
      v_data := extsvc._validate_helm_chart_data(_update_service.data);
      PERFORM extsvc._check_chart_allowed(v_data);
      PERFORM extsvc._check_privileged_allowed(v_data, p_admin);
    END IF;
  ELSE
    IF _update_service.data IS NOT NULL
       AND (btrim(_update_service.data) = '' OR octet_length(_update_service.data) > 131072) THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data', 'Pass the pod definition.');
    END IF;
    PERFORM extsvc._check_observability(_update_service.observability);
  END IF;

  IF v_name IS NOT NULL AND v_name <> s.service_name THEN
    PERFORM extsvc._check_name_free(s.tenant_organization_id, v_name, s.service_id);
    UPDATE extsvc.service_records r SET service_name = v_name, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;
  IF _update_service.description IS NOT NULL AND _update_service.description IS DISTINCT FROM s.description THEN
    UPDATE extsvc.service_records r SET description = _update_service.description, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' AND v_data IS NOT NULL THEN
    SELECT r.data INTO v_cur FROM extsvc.helm_revisions r
     WHERE r.service_id = s.service_id AND r.revision = s.desired_revision;
    IF v_cur IS DISTINCT FROM v_data THEN
      v_rev := s.desired_revision + 1;
      INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (s.service_id, v_rev, v_data);
      -- a pending revision that never reached DPF is superseded, not lost
      UPDATE extsvc.helm_revisions r SET superseded_at = now()
       WHERE r.service_id = s.service_id AND r.revision = s.desired_revision AND r.applied_at IS NULL;
      v_next := CASE s.lifecycle_state
                  WHEN 'READY' THEN 'UPDATING'
                  WHEN 'FAILED' THEN CASE WHEN s.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END
                  ELSE s.lifecycle_state END;
      -- an update of a FAILED service replaces a delete that failed before:
      -- a later retry_service retries this definition, not the delete (issue #13)
      UPDATE extsvc.service_records r
         SET desired_revision = v_rev, version_ctr = r.version_ctr + 1, updated_at = now(),
             delete_requested_at = CASE WHEN s.lifecycle_state = 'FAILED' THEN NULL ELSE r.delete_requested_at END,
             lifecycle_state = v_next, state_actor = 'api', state_reason = 'update',
             status_message = format('waiting for the worker to apply revision %s', v_rev)
       WHERE r.service_id = s.service_id;
      IF v_next = s.lifecycle_state THEN
        PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'api', 'superseded',
                                     format('revision %s supersedes revision %s', v_rev, s.desired_revision), v_rev);
      END IF;
      PERFORM extsvc._intent_changed(s.service_id);
    END IF;
  ELSIF s.service_type = 'KUBERNETES_POD' AND (_update_service.data IS NOT NULL
        OR _update_service.has_credential IS NOT NULL OR _update_service.observability IS NOT NULL) THEN
    SELECT v.version_number INTO v_vnum FROM extsvc.service_versions v
     WHERE v.service_id = s.service_id ORDER BY v.version_number DESC LIMIT 1;
    -- A version with data is a full spec, as in NICo (issue #14 P1-10): an
    -- omitted has_credential / observability means none. has_credential =>
    -- true says NICo stored a (rotated) credential: always a new version,
    -- numbered version_ctr + 1, NICo's Vault key (issue #14 P0-5): NICo's own
    -- rule (ConfigVersion::new(version_ctr).incremental_change()), which an
    -- imported service's counter continues (issue 22).
    IF _update_service.data IS NOT NULL AND NOT coalesce(_update_service.has_credential, false) AND EXISTS (
         SELECT FROM extsvc.service_versions v WHERE v.service_id = s.service_id
            AND v.version_number = v_vnum AND v.deleted_at IS NULL AND v.data = _update_service.data
            AND NOT v.has_credential
            AND v.observability IS NOT DISTINCT FROM _update_service.observability) THEN
      NULL;  -- same definition: idempotent no-op
    ELSE
      INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
      SELECT s.service_id, extsvc._config_version(s.version_ctr + 1), s.version_ctr + 1,
             coalesce(_update_service.data, v.data),
             CASE WHEN _update_service.data IS NOT NULL THEN coalesce(_update_service.has_credential, false)
                  ELSE coalesce(_update_service.has_credential, v.has_credential) END,
             CASE WHEN _update_service.data IS NOT NULL THEN _update_service.observability
                  ELSE coalesce(_update_service.observability, v.observability) END
        FROM extsvc.service_versions v WHERE v.service_id = s.service_id AND v.version_number = v_vnum;
      UPDATE extsvc.service_records r
         SET version_ctr = r.version_ctr + 1, updated_at = now(),
             has_credential = v.has_credential, observability = v.observability
        FROM extsvc.service_versions v
       WHERE r.service_id = s.service_id AND v.service_id = s.service_id AND v.version_number = s.version_ctr + 1;
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'new_version',
                                   format('version %s%s', extsvc._config_version(s.version_ctr + 1),
                                          CASE WHEN coalesce(_update_service.has_credential, false)
                                               THEN ' (credential provided)' ELSE '' END), NULL);
    END IF;
  END IF;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._update_service(uuid, text, text, text, bigint, boolean, jsonb, text, boolean) IS
  'Internal: body of extsvc.update_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc._update_service_as_admin(
    service_id uuid, data text, service_name text, description text, if_version_ctr_match bigint,
    has_credential boolean, observability jsonb, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._update_service($1, $2, $3, $4, $5, $6, $7, $8, true)
$fn$;
COMMENT ON FUNCTION extsvc._update_service_as_admin(uuid, text, text, text, bigint, boolean, jsonb, text) IS
  'Internal gate of extsvc.update_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._update_service_as_api(
    service_id uuid, data text, service_name text, description text, if_version_ctr_match bigint,
    has_credential boolean, observability jsonb, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._update_service($1, $2, $3, $4, $5, $6, $7, $8, false)
$fn$;
COMMENT ON FUNCTION extsvc._update_service_as_api(uuid, text, text, text, bigint, boolean, jsonb, text) IS
  'Internal gate of extsvc.update_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match bigint DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._update_service_as_admin(update_service.service_id, update_service.data,
      update_service.service_name, update_service.description, update_service.if_version_ctr_match,
      update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
  END IF;
  RETURN extsvc._update_service_as_api(update_service.service_id, update_service.data,
    update_service.service_name, update_service.description, update_service.if_version_ctr_match,
    update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.update_service(uuid, text, text, text, bigint, boolean, jsonb, text) IS
  'Updates name, description or data. A DPF data change becomes a new Helm revision; the same data again is a no-op. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';

-- Instances whose configuration or attachments still reference a service.
CREATE FUNCTION extsvc._blocking_instances(p_service_id uuid, p_version text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT string_agg(x.instance_id::text, ', ' ORDER BY x.instance_id::text)
  FROM (SELECT DISTINCT i.instance_id
          FROM extsvc.instance_extension_services i
         WHERE i.service_id = p_service_id AND (p_version IS NULL OR i.version = p_version)
        UNION
        SELECT DISTINCT a.instance_id
          FROM extsvc.dpf_extension_service_attachments a
         WHERE a.service_id = p_service_id AND (p_version IS NULL OR a.version = p_version)
         LIMIT 20) x
$fn$;

-- The body of delete_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._delete_service(service_id uuid, version text DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s          extsvc.service_records;
  v_blocking text;
BEGIN
  PERFORM extsvc._check_service_tenant(_delete_service.service_id, _delete_service.tenant_organization_id);
  -- FOR NO KEY UPDATE, not FOR UPDATE (issue 13): the key never changes, and
  -- the worker's DPU completion, holding a DPU's work row, takes KEY SHARE on
  -- the service (the foreign key of the site_service_dpu_status row it
  -- inserts). FOR UPDATE made it wait for this call while the lifecycle
  -- trigger (_service_state_wakes_dpus) made this call wait for that work
  -- row: a deadlock (test/nico/race_dpu_completion.py). An attach's FOR SHARE
  -- still waits for this lock (race_attach_delete.py).
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _delete_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _delete_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may delete ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to delete site-wide services.');
  END IF;
  IF _delete_service.version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v
        WHERE v.service_id = s.service_id AND v.version = _delete_service.version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', s.service_id, extsvc._token(_delete_service.version)),
                          'List the versions with SELECT version FROM extsvc.services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    RETURN extsvc._service_row(s.service_id);   -- idempotent
  END IF;

  IF s.service_type = 'KUBERNETES_POD' THEN
    -- in use (issue #14 P0-6, as in NICo): active entries, tombstones whose
    -- termination NICo has not confirmed yet (extsvc.remove_terminated_services),
    -- and entries of instances being deleted
    SELECT string_agg(DISTINCT i.instance_id::text, ', ') INTO v_blocking
      FROM extsvc.instance_extension_services i
     WHERE i.service_id = s.service_id
       AND (_delete_service.version IS NULL OR i.version = _delete_service.version);
    IF v_blocking IS NOT NULL THEN
      PERFORM extsvc._raise_c('service_in_use', '55000', 'service is still attached to instances',
                            format('instances: %s', v_blocking),
                            'Detach the service from these instances and confirm termination (extsvc.remove_terminated_services) first.');
    END IF;
    UPDATE extsvc.service_versions v SET deleted_at = now()
     WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
       AND (_delete_service.version IS NULL OR v.version = _delete_service.version);
    IF NOT EXISTS (SELECT FROM extsvc.service_versions v
                    WHERE v.service_id = s.service_id AND v.deleted_at IS NULL) THEN
      UPDATE extsvc.service_records r
         SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'delete',
             deleted_at = now(), delete_requested_at = now(), updated_at = now(), status_message = NULL
       WHERE r.service_id = s.service_id;
    ELSE
      UPDATE extsvc.service_records r SET updated_at = now() WHERE r.service_id = s.service_id;  -- issue #14 P1-11
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'version_deleted',
                                   format('version %s', _delete_service.version), NULL);
    END IF;
    RETURN extsvc._service_row(s.service_id);
  END IF;

  -- DPF_HELM_CHART: blocked while any attachment or tombstone references it.
  v_blocking := extsvc._blocking_instances(s.service_id, NULL);
  IF v_blocking IS NOT NULL THEN
    PERFORM extsvc._raise_c('service_in_use', '55000', 'service still has active or removing attachments',
                          format('instances: %s', v_blocking),
                          'Detach the service from these instances and wait until their DPUs report TERMINATED.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = 'DELETING', state_actor = 'api', state_reason = 'delete',
         delete_requested_at = now(), updated_at = now(),
         status_message = 'waiting for the worker to delete the DPUService'
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._delete_service(uuid, text, text, boolean) IS
  'Internal: body of extsvc.delete_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc._delete_service_as_admin(service_id uuid, version text, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._delete_service($1, $2, $3, true)
$fn$;
COMMENT ON FUNCTION extsvc._delete_service_as_admin(uuid, text, text) IS
  'Internal gate of extsvc.delete_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._delete_service_as_api(service_id uuid, version text, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._delete_service($1, $2, $3, false)
$fn$;
COMMENT ON FUNCTION extsvc._delete_service_as_api(uuid, text, text) IS
  'Internal gate of extsvc.delete_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.delete_service(service_id uuid, version text DEFAULT NULL,
                                      tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.service_deletions
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r extsvc.services;
  v extsvc.service_deletions;
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    r := extsvc._delete_service_as_admin(delete_service.service_id, delete_service.version,
                                         delete_service.tenant_organization_id);
  ELSE
    r := extsvc._delete_service_as_api(delete_service.service_id, delete_service.version,
                                       delete_service.tenant_organization_id);
  END IF;
  -- what this deletion removed, for NICo's Vault cleanup (issue 22)
  SELECT (r).*, extsvc._removed_versions(r.service_id) INTO v;
  RETURN v;
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service(uuid, text, text) IS
  'Deletes a service (or one KUBERNETES_POD version). DPF services go DELETING; the worker finishes the delete. Returns the service row and removed_versions [{version, version_number, had_credential}] of what this transaction removed, so NICo deletes those Vault keys after its commit. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';
