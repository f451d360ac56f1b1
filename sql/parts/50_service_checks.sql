-- Service API, part one (SPEC 2.5, 2.9, 2.10): the public pure helpers (validation, names,
-- label keys) and the checks that create, update and delete share (allow-list, privileged,
-- observability, names). None writes and none calls Kubernetes.

CREATE FUNCTION extsvc.validate_dpf_helm_chart_data(data text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._validate_helm_chart_data(data)
$fn$;
COMMENT ON FUNCTION extsvc.validate_dpf_helm_chart_data(text) IS
  'Parses DPF_HELM_CHART data strictly and returns its normalized form, or raises naming the JSON path.';

CREATE FUNCTION extsvc.dpf_service_name(service_id uuid, version text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN extsvc._dpf_service_name(service_id, version);
END
$fn$;
COMMENT ON FUNCTION extsvc.dpf_service_name(uuid, text) IS
  'DPUService and Helm release name of a DPF service version: extsvc-<first 20 base32 chars of SHA-256(lower(uuid)/version)>.';

CREATE FUNCTION extsvc.placement_label_key(service_id uuid, version text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN extsvc._placement_label_key(service_id, version);
END
$fn$;
COMMENT ON FUNCTION extsvc.placement_label_key(uuid, text) IS
  'Node label key that places a DPF service version on a DPU: nico/extsvc-<hash>, value enabled.';

-- The services row of one service (for return values).
-- PL/pgSQL: a SQL function with a SET clause is planned again at every call (PostgreSQL 15),
-- and this one plans the services view (issue 26, part 3: about 1 ms of every create and update).
CREATE FUNCTION extsvc._service_row(p_service_id uuid) RETURNS extsvc.services
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  r extsvc.services;
BEGIN
  SELECT * INTO r FROM extsvc.services s WHERE s.service_id = p_service_id;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RETURN r;
END
$fn$;

-- True when an allow-list entry admits the chart of normalized Helm data
-- (whether or not enforcement is on).
CREATE FUNCTION extsvc._chart_allowed(p_data jsonb) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN (
    SELECT EXISTS (SELECT FROM extsvc.chart_allowlist a
                    WHERE extsvc.repo_url_matches(a.repo_url, p_data->>'repoURL')
                      AND (a.chart_name = '' OR a.chart_name = p_data->>'chartName')));
END
$fn$;
COMMENT ON FUNCTION extsvc._chart_allowed(jsonb) IS
  'Internal: true when an extsvc.chart_allowlist entry admits the repoURL and chartName of normalized Helm data. EXECUTE for extsvc_admin only (extsvc.services_outside_allowlist calls it as the reading role).';

-- Refuses a chart that is not on the allow-list while enforcement is on.
-- p_detail: the DETAIL (default: the repoURL's JSON path and the chart).
CREATE FUNCTION extsvc._check_chart_allowed(p_data jsonb, p_detail text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
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
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  r record;
BEGIN
  -- off: no revision to read (an attach calls this once per new entry)
  IF extsvc._setting('extsvc.enforce_chart_allowlist') = 'off' THEN
    RETURN;
  END IF;
  FOR r IN SELECT h.data FROM extsvc.service_records s
             JOIN extsvc.helm_revisions h ON h.service_id = s.service_id
                                         AND h.revision IN (s.desired_revision, s.applied_revision)
            WHERE s.service_id = p_service_id ORDER BY h.revision DESC LOOP
    -- the refusal (and its DETAIL's text) only for a chart the list does not admit
    IF NOT extsvc._chart_allowed(r.data) THEN
      PERFORM extsvc._check_chart_allowed(r.data, format('%s (chart %s)', p_detail, r.data->>'chartName'));
    END IF;
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
LANGUAGE plpgsql STABLE AS $fn$
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
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN CASE WHEN p_key ~ '^[A-Za-z_][A-Za-z0-9_]*$' AND length(p_key) <= 64 THEN p_parent || '.' || p_key
                WHEN length(p_key) <= 64 THEN p_parent || '[' || to_json(p_key)::text || ']'
                ELSE p_parent || '[' || to_json(left(p_key, 48))::text || '...]' END;
END
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
LANGUAGE plpgsql IMMUTABLE AS $fn$
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
LANGUAGE plpgsql STABLE AS $fn$
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
LANGUAGE plpgsql STABLE AS $fn$
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

