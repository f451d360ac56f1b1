-- One health check (issue 28, docs/runbook.md): extsvc.health_check() answers what an operator
-- asks first, one row per check: (check, status ok|warning|error, detail, hint). It reads the
-- workers' shared memory (extsvc.worker_status(), watch_status(), the metrics of each cluster as
-- last seen), the settings in force and the tables; it changes nothing and makes no Kubernetes
-- call. Without shared_preload_libraries only the rows that need no worker are meaningful; the
-- first row says so.

-- An extsvc.* setting through extsvc._setting() (never a session's placeholder), NULL when the
-- library does not define it (a postmaster-only one without preloading).
CREATE FUNCTION extsvc._health_setting(p_name text) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN extsvc._setting(p_name);
EXCEPTION WHEN undefined_object THEN
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._health_setting(text) IS
  'Internal: an extsvc.* setting as extsvc._setting() reads it, NULL when the library does not define it.';

-- The files of the cluster settings: readable by the server (the workers read them as the same
-- OS user), with the OS error when not. Owner only; health_check is its one caller.
CREATE FUNCTION extsvc._health_file_error(p_setting text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_path text := extsvc._health_setting(p_setting);
BEGIN
  IF v_path IS NULL OR v_path = '' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.pg_read_binary_file(v_path, 0, 1);
  RETURN NULL;
EXCEPTION WHEN OTHERS THEN
  -- SQLERRM names the file and keeps the OS error ("...: Permission denied")
  RETURN format('%s: %s', p_setting, SQLERRM);
END
$fn$;
COMMENT ON FUNCTION extsvc._health_file_error(text) IS
  'Internal: NULL when the file a setting names is readable by the server (or the setting is empty), else the setting and the OS error.';

-- The URL rule of the Kubernetes client (src/kube/config.cpp), per cluster setting prefix.
CREATE FUNCTION extsvc._health_url_error(p_prefix text) RETURNS text
LANGUAGE sql STABLE AS $fn$
  SELECT CASE
           WHEN coalesce(extsvc._health_setting(format('extsvc.%skubeconfig', p_prefix)), '') <> '' THEN NULL
           WHEN coalesce(extsvc._health_setting(format('extsvc.%skube_server', p_prefix)), '') = '' THEN NULL
           WHEN extsvc._health_setting(format('extsvc.%skube_server', p_prefix)) LIKE 'https://%' THEN NULL
           WHEN extsvc._health_setting(format('extsvc.%skube_server', p_prefix)) LIKE 'http://%'
                AND coalesce(extsvc._health_setting('extsvc.kube_allow_insecure_http'), 'off') = 'on'
                AND coalesce(extsvc._health_setting(format('extsvc.%skube_token_file', p_prefix)), '') = ''
             THEN NULL
           WHEN extsvc._health_setting(format('extsvc.%skube_server', p_prefix)) LIKE 'http://%'
             THEN format('extsvc.%skube_server is plain http:// (allowed only with extsvc.kube_allow_insecure_http and no token file)',
                         p_prefix)
           ELSE format('extsvc.%skube_server must start with https:// (it is %s)', p_prefix,
                       quote_literal(extsvc._health_setting(format('extsvc.%skube_server', p_prefix))))
         END
$fn$;
COMMENT ON FUNCTION extsvc._health_url_error(text) IS
  'Internal: NULL when the API server URL of a cluster (setting prefix '''' or ''dpu_'') is one the worker accepts, else why not.';

-- The validity of one DER X.509 certificate (RFC 5280: Certificate ::= SEQUENCE { tbsCertificate
-- SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE { notBefore,
-- notAfter }, ... } ... }), NULLs when it is not one. Walks the DER headers only; the signature is
-- not checked (the worker's TLS library does that).
CREATE FUNCTION extsvc._health_der_validity(p_der bytea, OUT not_before timestamptz, OUT not_after timestamptz)
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_at integer := 0;     -- offset of the current TLV
  v_tag integer;
  v_len integer;
  v_hdr integer;
  v_n integer;
  v_step integer := 0;   -- 0: Certificate, 1: tbsCertificate, 2..5: the fields before validity
  v_times timestamptz[] := '{}';
  v_text text;
BEGIN
  LOOP
    IF v_at + 2 > length(p_der) THEN RETURN; END IF;
    v_tag := get_byte(p_der, v_at);
    v_len := get_byte(p_der, v_at + 1);
    v_hdr := 2;
    IF v_len >= 128 THEN
      v_n := v_len - 128;
      IF v_n < 1 OR v_n > 3 OR v_at + 2 + v_n > length(p_der) THEN RETURN; END IF;
      v_len := 0;
      FOR i IN 0 .. v_n - 1 LOOP
        v_len := v_len * 256 + get_byte(p_der, v_at + 2 + i);
      END LOOP;
      v_hdr := 2 + v_n;
    END IF;
    IF v_at + v_hdr + v_len > length(p_der) THEN RETURN; END IF;
    IF v_step IN (0, 1) THEN                      -- enter Certificate, then tbsCertificate
      IF v_tag <> 48 THEN RETURN; END IF;
      v_at := v_at + v_hdr;
      v_step := v_step + 1;
    ELSIF v_step = 2 AND v_tag = 160 THEN         -- [0] version: skip
      v_at := v_at + v_hdr + v_len;
    ELSIF v_step IN (2, 3, 4) THEN                -- serialNumber, signature, issuer: skip
      IF (v_step = 2 AND v_tag <> 2) OR (v_step > 2 AND v_tag <> 48) THEN RETURN; END IF;
      v_at := v_at + v_hdr + v_len;
      v_step := v_step + 1;
    ELSIF v_step = 5 THEN                         -- validity: enter
      IF v_tag <> 48 THEN RETURN; END IF;
      v_at := v_at + v_hdr;
      v_step := 6;
    ELSE                                          -- notBefore, notAfter
      IF v_tag NOT IN (23, 24) THEN RETURN; END IF;  -- UTCTime, GeneralizedTime
      v_text := convert_from(substring(p_der FROM v_at + v_hdr + 1 FOR v_len), 'SQL_ASCII');
      IF v_tag = 23 THEN
        IF v_text !~ '^[0-9]{12}Z$' THEN RETURN; END IF;
        -- RFC 5280 4.1.2.5.1: YY >= 50 is 19YY, else 20YY
        v_text := CASE WHEN left(v_text, 2)::integer >= 50 THEN '19' ELSE '20' END || v_text;
      ELSIF v_text !~ '^[0-9]{14}Z$' THEN
        RETURN;
      END IF;
      v_times := v_times || (to_timestamp(left(v_text, 14), 'YYYYMMDDHH24MISS')::timestamp AT TIME ZONE 'UTC');
      v_at := v_at + v_hdr + v_len;
      IF cardinality(v_times) = 2 THEN
        not_before := v_times[1];
        not_after := v_times[2];
        RETURN;
      END IF;
    END IF;
  END LOOP;
EXCEPTION WHEN OTHERS THEN
  not_before := NULL;
  not_after := NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._health_der_validity(bytea) IS
  'Internal: notBefore and notAfter of a DER X.509 certificate, NULLs when the bytes are not one.';

-- What is wrong with one PEM text the worker would hand to its TLS library (p_kind: ca, a CA
-- bundle; client, a client certificate; key, a private key), as (severity, finding) rows named by
-- p_name (the setting, or the setting and the kubeconfig field). A client certificate or every
-- certificate of a CA bundle expired or not yet valid is an error (the TLS handshake fails); one
-- that expires within 14 days, or an expired one beside valid ones in a bundle, a warning.
CREATE FUNCTION extsvc._health_pem_findings(p_name text, p_pem text, p_kind text,
                                            OUT severity text, OUT finding text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_blocks text[];
  v_der bytea;
  v_nb timestamptz;
  v_na timestamptz;
  v_count integer := 0;
  v_good integer := 0;
  v_bad text[] := '{}';
  m text[];
BEGIN
  IF p_kind = 'key' THEN
    IF p_pem !~ '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----[A-Za-z0-9+/=\s:,-]+-----END ([A-Z]+ )?PRIVATE KEY-----' THEN
      severity := 'error';
      finding := format('%s: no PEM private key (-----BEGIN ... PRIVATE KEY-----)', p_name);
      RETURN NEXT;
    END IF;
    RETURN;
  END IF;
  FOR m IN SELECT regexp_matches(p_pem, '-----BEGIN CERTIFICATE-----([^-]*)-----END CERTIFICATE-----', 'g') LOOP
    v_count := v_count + 1;
    BEGIN
      v_der := decode(regexp_replace(m[1], '\s', '', 'g'), 'base64');
    EXCEPTION WHEN OTHERS THEN
      v_der := NULL;
    END;
    v_nb := NULL;
    v_na := NULL;
    IF v_der IS NOT NULL THEN
      SELECT d.not_before, d.not_after INTO v_nb, v_na FROM extsvc._health_der_validity(v_der) d;
    END IF;
    IF v_na IS NULL THEN
      v_bad := v_bad || format('certificate %s is not a parseable X.509 certificate', v_count);
    ELSIF v_na < now() THEN
      v_bad := v_bad || format('certificate %s expired at %s', v_count,
                               to_char(v_na AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'));
    ELSIF v_nb > now() THEN
      v_bad := v_bad || format('certificate %s is not valid before %s (check this server''s clock)', v_count,
                               to_char(v_nb AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'));
    ELSE
      v_good := v_good + 1;
      IF v_na < now() + interval '14 days' THEN
        severity := 'warning';
        finding := format('%s: certificate %s expires at %s (in %s days)', p_name, v_count,
                          to_char(v_na AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'),
                          floor(extract(epoch FROM v_na - now()) / 86400));
        RETURN NEXT;
      END IF;
    END IF;
  END LOOP;
  IF v_count = 0 THEN
    severity := 'error';
    finding := format('%s: no PEM certificate (-----BEGIN CERTIFICATE-----)', p_name);
    RETURN NEXT;
  ELSIF cardinality(v_bad) > 0 THEN
    -- a CA bundle works while one certificate of it does (the others may be old roots)
    severity := CASE WHEN p_kind = 'ca' AND v_good > 0 THEN 'warning' ELSE 'error' END;
    finding := format('%s: %s', p_name, array_to_string(v_bad, '; '));
    RETURN NEXT;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._health_pem_findings(text, text, text) IS
  'Internal: (severity, finding) rows for a PEM CA bundle, client certificate or private key: missing or unparseable PEM, expired or not yet valid certificates (error), expiry within 14 days (warning).';

-- The TLS material of both clusters as the worker would load it: extsvc.[dpu_]kube_ca_file, and in
-- extsvc.[dpu_]kubeconfig every certificate-authority, client-certificate and client-key (file,
-- relative to the kubeconfig's directory, or -data). The kubeconfig is read line by line for these
-- keys (every user and cluster in it, not only the current context's). Owner only.
CREATE FUNCTION extsvc._health_tls_findings(OUT severity text, OUT finding text, OUT checked integer)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_setting text;
  v_path text;
  v_text text;
  v_value text;
  v_kind text;
  v_file text;
  m text[];
  f record;
BEGIN
  checked := 0;
  FOREACH v_setting IN ARRAY ARRAY['extsvc.kube_ca_file', 'extsvc.dpu_kube_ca_file',
                                    'extsvc.kubeconfig', 'extsvc.dpu_kubeconfig'] LOOP
    v_path := extsvc._health_setting(v_setting);
    CONTINUE WHEN v_path IS NULL OR v_path = '';
    BEGIN
      v_text := convert_from(pg_catalog.pg_read_binary_file(v_path), 'UTF8');
    EXCEPTION WHEN OTHERS THEN
      CONTINUE;  -- the settings row names a file that cannot be read, with the OS error
    END;
    IF v_setting LIKE '%ca_file' THEN
      checked := checked + 1;
      FOR f IN SELECT * FROM extsvc._health_pem_findings(v_setting, v_text, 'ca') LOOP
        severity := f.severity; finding := f.finding; RETURN NEXT;
      END LOOP;
      CONTINUE;
    END IF;
    FOR m IN SELECT regexp_matches(v_text,
               '^[ \t]*(certificate-authority|client-certificate|client-key)(-data)?:[ \t]*"?([^"\s#]+)"?[ \t]*$', 'gn') LOOP
      v_kind := CASE m[1] WHEN 'certificate-authority' THEN 'ca' WHEN 'client-certificate' THEN 'client' ELSE 'key' END;
      checked := checked + 1;
      IF m[2] IS NOT NULL THEN
        BEGIN
          v_value := convert_from(decode(m[3], 'base64'), 'UTF8');
        EXCEPTION WHEN OTHERS THEN
          severity := 'error';
          finding := format('%s: %s-data is not base64 of a PEM text', v_setting, m[1]);
          RETURN NEXT;
          CONTINUE;
        END;
        FOR f IN SELECT * FROM extsvc._health_pem_findings(format('%s %s-data', v_setting, m[1]), v_value, v_kind) LOOP
          severity := f.severity; finding := f.finding; RETURN NEXT;
        END LOOP;
      ELSE
        v_file := CASE WHEN m[3] LIKE '/%' THEN m[3]
                       ELSE regexp_replace(v_path, '[^/]*$', '') || m[3] END;
        BEGIN
          v_value := convert_from(pg_catalog.pg_read_binary_file(v_file), 'UTF8');
        EXCEPTION WHEN OTHERS THEN
          severity := 'error';
          finding := format('%s %s: %s', v_setting, m[1], SQLERRM);
          RETURN NEXT;
          CONTINUE;
        END;
        FOR f IN SELECT * FROM extsvc._health_pem_findings(format('%s %s (%s)', v_setting, m[1], v_file), v_value, v_kind) LOOP
          severity := f.severity; finding := f.finding; RETURN NEXT;
        END LOOP;
      END IF;
    END LOOP;
  END LOOP;
  -- one row with the count when nothing was found
  severity := NULL;
  finding := NULL;
  RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION extsvc._health_tls_findings() IS
  'Internal: what is wrong with the TLS files and data of both clusters (CA bundles, client certificates and keys): (severity, finding) rows, and a last row with NULLs whose checked counts the PEM texts read.';

CREATE FUNCTION extsvc.health_check(OUT "check" text, OUT status text, OUT detail text, OUT hint text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_preloaded boolean := 'nico_extsvc' = ANY (string_to_array(
                           replace(current_setting('shared_preload_libraries'), ' ', ''), ','));
  v_workers integer := coalesce(nullif(extsvc._health_setting('extsvc.workers'), '')::integer, 0);
  v_ws jsonb := '[]';       -- worker_status() rows
  v_watch jsonb := '[]';    -- watch_status() rows
  v_wm jsonb := '[]';       -- the workers' metric rows
  v_standby boolean := pg_is_in_recovery();
  v_errors text[];
  v_warnings text[];
  v_text text;
  v_checked integer;
  r record;
BEGIN
  IF v_preloaded THEN
    SELECT coalesce(jsonb_agg(to_jsonb(w) ORDER BY w.slot), '[]') INTO v_ws FROM extsvc.worker_status() w;
    SELECT coalesce(jsonb_agg(to_jsonb(w)), '[]') INTO v_watch FROM extsvc.watch_status() w;
    SELECT coalesce(jsonb_agg(to_jsonb(m)), '[]') INTO v_wm FROM extsvc._worker_metrics() m;
  END IF;

  -- 1. library preloaded, workers running ----------------------------------------------------
  "check" := 'library';
  IF NOT v_preloaded THEN
    status := 'error';
    detail := 'nico_extsvc is not in shared_preload_libraries: no worker runs, nothing reaches Kubernetes';
    hint := 'Add nico_extsvc to shared_preload_libraries and restart the server (docs/worker.md).';
  ELSIF v_workers < 1 THEN
    status := 'error';
    detail := 'extsvc.workers is 0: no worker runs';
    hint := 'Set extsvc.workers (1 or more) and restart the server.';
  ELSIF v_standby THEN
    status := 'ok';
    detail := format('standby: the %s worker(s) start when this server is promoted', v_workers);
    hint := NULL;
  ELSE
    SELECT count(*) FILTER (WHERE w->>'pid' IS NOT NULL) INTO r FROM jsonb_array_elements(v_ws) w;
    status := CASE WHEN r.count >= v_workers THEN 'ok' ELSE 'error' END;
    detail := format('%s of %s worker(s) running', r.count, v_workers);
    hint := CASE WHEN r.count < v_workers
                 THEN 'A worker that is not running restarts within 5 s; if it does not, read the server log for its exit.' END;
  END IF;
  RETURN NEXT;

  -- 2. what the workers do ---------------------------------------------------------------------
  "check" := 'worker_state';
  IF NOT v_preloaded OR jsonb_array_length(v_ws) = 0 THEN
    status := CASE WHEN v_preloaded AND v_workers > 0 THEN 'warning' ELSE 'error' END;
    detail := 'no worker has reported a state yet';
    hint := 'Wait a few seconds after a start; else see the library row.';
  ELSE
    SELECT string_agg(format('worker %s: %s%s', w->>'slot', w->>'state',
                             coalesce(' (' || (w->>'state_reason') || ')', '')), '; ' ORDER BY (w->>'slot')::int)
      INTO v_text
      FROM jsonb_array_elements(v_ws) w;
    SELECT bool_or(w->>'state' IN ('unconfigured', 'config_error', 'version_mismatch')) AS bad,
           bool_or(w->>'state' NOT IN ('working', 'standby')) AS not_working
      INTO r FROM jsonb_array_elements(v_ws) w;
    status := CASE WHEN r.bad THEN 'error' WHEN r.not_working THEN 'warning' ELSE 'ok' END;
    detail := v_text;
    hint := CASE WHEN r.bad THEN 'Fix the setting named in the reason (SELECT state, config_error FROM extsvc.worker_status()), then SELECT pg_reload_conf(); for version_mismatch run ALTER EXTENSION nico_extsvc UPDATE.'
                 WHEN r.not_working THEN 'disabled: ALTER SYSTEM SET extsvc.enabled = on and reload (or patronictl edit-config); paused/waiting_for_lease: see the site_lease row.' END;
  END IF;
  RETURN NEXT;

  -- 3. settings ------------------------------------------------------------------------------
  "check" := 'settings';
  v_errors := ARRAY(
    SELECT e FROM unnest(ARRAY[
      extsvc._health_url_error(''), extsvc._health_url_error('dpu_'),
      extsvc._health_file_error('extsvc.kubeconfig'), extsvc._health_file_error('extsvc.kube_ca_file'),
      extsvc._health_file_error('extsvc.kube_token_file'), extsvc._health_file_error('extsvc.dpu_kubeconfig'),
      extsvc._health_file_error('extsvc.dpu_kube_ca_file'), extsvc._health_file_error('extsvc.dpu_kube_token_file'),
      CASE WHEN v_preloaded AND coalesce(extsvc._health_setting('extsvc.kubeconfig'), '') = ''
                AND coalesce(extsvc._health_setting('extsvc.kube_server'), '') = ''
           THEN 'no management cluster configured (extsvc.kubeconfig or extsvc.kube_server)' END,
      CASE WHEN v_preloaded AND coalesce(extsvc._health_setting('extsvc.site_id'), '') = ''
           THEN 'extsvc.site_id is not set: the workers write nothing' END]) e
    WHERE e IS NOT NULL);
  -- what the workers themselves refused: the cluster settings, a timing set, the site id
  v_errors := v_errors || ARRAY(
    SELECT DISTINCT x FROM jsonb_array_elements(v_ws) w,
           LATERAL unnest(ARRAY[w->>'config_error', 'refused on reload: ' || (w->>'settings_error'),
                                CASE WHEN w->>'paused_reason' IN ('timing_settings', 'site_id')
                                     THEN (w->>'paused_reason') || ': ' || coalesce(w->>'paused_detail', '') END]) x
     WHERE x IS NOT NULL);
  v_warnings := ARRAY(
    SELECT e FROM unnest(ARRAY[
      CASE WHEN extsvc._health_setting('extsvc.kube_insecure_skip_verify') = 'on'
           THEN 'extsvc.kube_insecure_skip_verify is on: the API server''s certificate is not verified' END,
      CASE WHEN v_preloaded AND coalesce(extsvc._health_setting('extsvc.dpu_kubeconfig'), '') = ''
                AND coalesce(extsvc._health_setting('extsvc.dpu_kube_server'), '') = ''
           THEN 'no DPU cluster configured: per-DPU states stay UNKNOWN' END]) e
    WHERE e IS NOT NULL);
  status := CASE WHEN cardinality(v_errors) > 0 THEN 'error'
                 WHEN cardinality(v_warnings) > 0 THEN 'warning' ELSE 'ok' END;
  detail := coalesce(nullif(array_to_string(v_errors || v_warnings, '; '), ''), 'every setting is usable');
  hint := CASE WHEN status <> 'ok' THEN 'Fix the named setting (ALTER SYSTEM SET ...; a file must be readable by the server''s OS user), then SELECT pg_reload_conf(); docs/worker.md lists every setting.' END;
  RETURN NEXT;

  -- 4. each cluster as last seen ---------------------------------------------------------------
  FOR r IN
    SELECT c.cluster, c.prefix,
           (SELECT (m->>'value')::float8 FROM jsonb_array_elements(v_wm) m
             WHERE m->>'metric' = 'extsvc_kube_last_code' AND m->'labels'->>'cluster' = c.cluster) AS code,
           (SELECT (m->>'value')::float8 FROM jsonb_array_elements(v_wm) m
             WHERE m->>'metric' = 'extsvc_kube_last_response_age_seconds' AND m->'labels'->>'cluster' = c.cluster) AS age,
           (SELECT (m->>'value')::float8 FROM jsonb_array_elements(v_wm) m
             WHERE m->>'metric' = 'extsvc_kube_last_success_age_seconds' AND m->'labels'->>'cluster' = c.cluster) AS ok_age,
           (SELECT string_agg(DISTINCT w->>'last_error', '; ') FROM jsonb_array_elements(v_watch) w
             WHERE w->>'cluster' = c.cluster AND w->>'last_error' IS NOT NULL
               AND NOT (w->>'current')::boolean) AS watch_error
      FROM (VALUES ('management', ''), ('dpu', 'dpu_')) c(cluster, prefix)
  LOOP
    "check" := 'cluster_' || r.cluster;
    hint := NULL;
    IF coalesce(extsvc._health_setting(format('extsvc.%skubeconfig', r.prefix)), '') = ''
       AND coalesce(extsvc._health_setting(format('extsvc.%skube_server', r.prefix)), '') = '' THEN
      status := CASE WHEN r.cluster = 'management' THEN 'error' ELSE 'warning' END;
      detail := format('the %s cluster is not configured', r.cluster);
      hint := 'See the settings row.';
    ELSIF r.code IS NULL THEN
      status := CASE WHEN v_standby THEN 'ok' ELSE 'warning' END;
      detail := format('no request to the %s cluster since the server started%s', r.cluster,
                       coalesce(': ' || r.watch_error, ''));
      hint := CASE WHEN NOT v_standby THEN 'See the worker_state row: a worker that is not working sends nothing.' END;
    ELSIF r.code = 0 THEN
      status := 'error';
      detail := format('unreachable: no HTTP response %s s ago (connection, TLS or timeout); last 2xx %s%s', round(r.age),
                       coalesce(round(r.ok_age) || ' s ago', 'never'), coalesce('; ' || r.watch_error, ''));
      hint := 'Check the URL, the network path and the CA file; the worker''s last_error (extsvc.worker_status()) has the client''s words.';
    ELSIF r.code IN (401, 403) THEN
      status := 'error';
      detail := format('HTTP %s %s s ago: %s', r.code, round(r.age),
                       CASE WHEN r.code = 401 THEN 'the token was rejected' ELSE 'the token''s identity may not do this (RBAC)' END);
      hint := 'Rotate or fix the token file (read again per request) or the RBAC of its ServiceAccount (docs/runbook.md "Rotate credentials").';
    ELSIF r.code = 429 OR r.code >= 500 THEN
      status := 'warning';
      detail := format('HTTP %s %s s ago (the API server is overloaded or failing); last 2xx %s', r.code, round(r.age),
                       coalesce(round(r.ok_age) || ' s ago', 'never'));
      hint := 'The worker retries with backoff; check the API server''s health.';
    ELSE
      status := 'ok';
      detail := format('HTTP %s %s s ago; last 2xx %s', r.code, round(r.age),
                       coalesce(round(r.ok_age) || ' s ago', 'never'));
    END IF;
    RETURN NEXT;
  END LOOP;

  -- 4b. the DPF API the clusters serve (issue 23, part 5: read from the CRDs' OpenAPI at start and
  -- after every reconnect; the minimum release is core::kMinimumDpfRelease)
  "check" := 'dpf_api';
  SELECT w->>'dpf_api_level' AS level, w->>'dpf_api_missing' AS missing INTO r
    FROM jsonb_array_elements(v_ws) w
   ORDER BY (w->>'dpf_api_level' IS NULL), (w->>'slot')::int LIMIT 1;
  IF r.missing IS NOT NULL THEN
    status := 'error';
    detail := format('DPF API %s: missing %s; nico_extsvc needs DPF v26.8 or later', r.level, r.missing);
    hint := 'Upgrade DPF to v26.8 or later (docs/operator-guide.md "The DPF release"), then SELECT extsvc.retry_service(...) for the FAILED services; until then services fail and per-DPU rows are ERROR with that message.';
  ELSIF r.level IS NOT NULL THEN
    status := 'ok';
    detail := format('DPF API %s (nico_extsvc needs DPF v26.8 or later)', r.level);
    hint := NULL;
  ELSE
    status := CASE WHEN v_standby THEN 'ok' ELSE 'warning' END;
    detail := 'DPF API level not detected yet (the workers read it from the management cluster once it answers); nico_extsvc needs DPF v26.8 or later';
    hint := CASE WHEN NOT v_standby THEN 'See the cluster_management and worker_state rows: the level is read once the management cluster answers.' END;
  END IF;
  RETURN NEXT;

  -- 4c. the API servers' clocks, from the Date header of their responses (1 s resolution: a skew
  -- within 1 s is not measurable). Over 2 s the clocks are not synchronised (NTP keeps them within
  -- milliseconds) and the takeover wait of a promotion (the nico/writes-from time one server writes
  -- into the site Lease and another honours by its own clock) is off by the difference; over 15 s
  -- (the whole wait with the default timings: min(lease_renew_deadline, lease_duration -
  -- http_timeout - lease_margin) + http_timeout + lease_margin) it is void, and certificates issued
  -- just now are refused as not yet valid.
  "check" := 'clock_skew';
  SELECT string_agg(format('%s %s%s s (measured %s s ago)', x.cluster,
                           CASE WHEN x.skew >= 0 THEN '+' ELSE '' END, round(x.skew::numeric, 1),
                           round(coalesce(x.age, 0))), '; ' ORDER BY x.cluster) AS text,
         max(abs(x.skew)) AS worst
    INTO r
    FROM (SELECT m->'labels'->>'cluster' AS cluster, (m->>'value')::float8 AS skew,
                 (SELECT (a->>'value')::float8 FROM jsonb_array_elements(v_wm) a
                   WHERE a->>'metric' = 'extsvc_kube_clock_skew_age_seconds'
                     AND a->'labels'->>'cluster' = m->'labels'->>'cluster') AS age
            FROM jsonb_array_elements(v_wm) m
           WHERE m->>'metric' = 'extsvc_kube_clock_skew_seconds') x;
  IF r.text IS NULL THEN
    status := CASE WHEN v_standby OR NOT v_preloaded THEN 'ok' ELSE 'warning' END;
    detail := 'not measured: no API server response with a Date header since the server started';
    hint := CASE WHEN v_preloaded AND NOT v_standby THEN 'See the cluster rows: the skew is measured from the first answer.' END;
  ELSE
    status := CASE WHEN r.worst > 15 THEN 'error' WHEN r.worst > 2 THEN 'warning' ELSE 'ok' END;
    detail := format('API server clock minus ours: %s; Date has 1 s resolution (within 1 s is in sync), warning over 2 s, error over 15 s', r.text);
    hint := CASE WHEN status <> 'ok' THEN 'Synchronise the clocks of this server and the API servers (chronyc tracking / timedatectl on each); docs/runbook.md "clock_skew".' END;
  END IF;
  RETURN NEXT;

  -- 4d. TLS files and data: what the worker's TLS library would refuse
  "check" := 'tls';
  -- the files are read once
  SELECT coalesce(array_agg(t.finding) FILTER (WHERE t.severity = 'error'), '{}'),
         coalesce(array_agg(t.finding) FILTER (WHERE t.severity = 'warning'), '{}'),
         max(t.checked)
    INTO v_errors, v_warnings, v_checked
    FROM extsvc._health_tls_findings() t;
  status := CASE WHEN cardinality(v_errors) > 0 THEN 'error'
                 WHEN cardinality(v_warnings) > 0 THEN 'warning' ELSE 'ok' END;
  detail := coalesce(nullif(array_to_string(v_errors || v_warnings, '; '), ''),
                     CASE WHEN coalesce(v_checked, 0) = 0 THEN 'no CA bundle, client certificate or key configured (the system CA store verifies the API servers)'
                          ELSE format('%s PEM text(s) read: every certificate parses and is valid for 14 days or more, every key is PEM', v_checked) END);
  hint := CASE WHEN status <> 'ok' THEN 'Replace the named file or kubeconfig field (a file must be PEM and readable by the server''s OS user), then SELECT pg_reload_conf(); docs/runbook.md "tls".' END;
  RETURN NEXT;

  -- 5. watch streams -----------------------------------------------------------------------
  "check" := 'watch';
  hint := NULL;
  IF coalesce(extsvc._health_setting('extsvc.watch'), 'off') <> 'on' THEN
    status := 'ok';
    detail := 'extsvc.watch is off: the workers poll and the resync finds drift';
  ELSIF jsonb_array_length(v_watch) = 0 THEN
    status := CASE WHEN v_standby THEN 'ok' ELSE 'warning' END;
    detail := 'no informer reported (the watcher, worker 0, is not running)';
  ELSE
    SELECT string_agg(format('%s@%s: %s', w->>'resource', w->>'cluster',
                             coalesce(w->>'last_error', 'not current')), '; ' ORDER BY w->>'cluster', w->>'resource')
      INTO v_text
      FROM jsonb_array_elements(v_watch) w WHERE NOT (w->>'current')::boolean;
    status := CASE WHEN v_text IS NULL THEN 'ok' ELSE 'error' END;
    detail := coalesce('not current: ' || v_text,
                       format('%s informer(s) current', jsonb_array_length(v_watch)));
    hint := CASE WHEN v_text IS NOT NULL THEN 'A stream that is not current re-lists with backoff; check the cluster rows and the worker''s last_error.' END;
  END IF;
  RETURN NEXT;

  -- 6. the site Lease (one writer per site) ------------------------------------------------
  "check" := 'site_lease';
  hint := NULL;
  IF jsonb_array_length(v_ws) = 0 THEN
    status := CASE WHEN v_standby THEN 'ok' ELSE 'warning' END;
    detail := CASE WHEN v_standby THEN 'standby: the site Lease is taken after promotion' ELSE 'no worker reported the site Lease' END;
  ELSE
    SELECT w INTO r FROM jsonb_array_elements(v_ws) w ORDER BY (w->>'slot')::int LIMIT 1;
    IF (r.w->>'lease_held')::boolean THEN
      status := 'ok';
      detail := format('held by this server (%s) since %s', r.w->>'lease_holder', r.w->>'lease_since');
    ELSE
      status := CASE WHEN r.w->>'paused_reason' IN ('site_id', 'timing_settings', 'database_identity', 'deposed')
                     THEN 'error' ELSE 'warning' END;
      detail := format('not held: %s%s; holder as last seen: %s since %s', coalesce(r.w->>'paused_reason', 'renewal overdue'),
                       coalesce(' (' || (r.w->>'paused_detail') || ')', ''), coalesce(r.w->>'lease_holder', 'none'),
                       coalesce(r.w->>'lease_since', '-'));
      hint := 'Another server holding it is normal on a standby site; else see docs/runbook.md "Site Lease not held".';
    END IF;
  END IF;
  RETURN NEXT;

  -- 7. the queues ------------------------------------------------------------------------
  "check" := 'queue';
  SELECT count(*) FILTER (WHERE q.next_due_at <= now() AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())) AS due,
         count(*) FILTER (WHERE q.attempts > 0) AS retrying,
         extract(epoch FROM now() - min(q.next_due_at) FILTER (
           WHERE q.next_due_at <= now() AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())))::float8 AS due_age,
         extract(epoch FROM now() - min(q.since) FILTER (WHERE q.attempts > 0))::float8 AS retry_age
    INTO r
    FROM (SELECT x.next_due_at, x.lease_expires_at, x.attempts, x.since FROM extsvc._queue_rows() x) q;
  status := CASE WHEN coalesce(r.due_age, 0) > 300 OR coalesce(r.retry_age, 0) > 3600 THEN 'warning' ELSE 'ok' END;
  detail := format('%s row(s) due, oldest due %s s; %s row(s) retrying, oldest without progress %s s',
                   r.due, round(coalesce(r.due_age, 0)), r.retrying, round(coalesce(r.retry_age, 0)));
  hint := CASE WHEN status <> 'ok' THEN 'SELECT * FROM extsvc.reconciliation_queue WHERE attempts > 0 ORDER BY last_error_at shows the errors; after a fix, extsvc.reconcile_now() retries at once.' END;
  RETURN NEXT;

  -- 8. rows stuck in a bad or unfinished state ------------------------------------------
  "check" := 'stuck_rows';
  SELECT count(*) FILTER (WHERE s.lifecycle_state = 'FAILED') AS failed,
         count(*) FILTER (WHERE s.lifecycle_state IN ('CREATING', 'UPDATING', 'DELETING')
                            AND s.updated_at < now() - interval '1 hour') AS slow
    INTO r FROM extsvc.service_records s;
  SELECT r.failed, r.slow,
         count(*) FILTER (WHERE d.st = 'ERROR') AS err,
         count(*) FILTER (WHERE d.st = 'UNKNOWN') AS unknown,
         count(*) FILTER (WHERE d.st = 'PENDING' AND d.since < now() - interval '15 minutes') AS pending
    INTO r
    FROM (SELECT extsvc._effective_deployment_state(a.deployment_state, a.observed_at) AS st, a.created_at AS since
            FROM extsvc.dpf_extension_service_attachments a WHERE a.placement_state = 'ACTIVE'
          UNION ALL
          SELECT extsvc._effective_deployment_state(x.deployment_state, x.observed_at), s.updated_at
            FROM extsvc.site_service_dpu_status x JOIN extsvc.service_records s USING (service_id)) d;
  status := CASE WHEN r.failed + r.slow + r.err + r.unknown + r.pending > 0 THEN 'warning' ELSE 'ok' END;
  detail := format('services FAILED: %s, CREATING/UPDATING/DELETING for over 1 h: %s; per-DPU rows ERROR: %s, UNKNOWN: %s, PENDING for over 15 min: %s',
                   r.failed, r.slow, r.err, r.unknown, r.pending);
  hint := CASE WHEN status <> 'ok' THEN 'extsvc.services (status_message) and extsvc.dpu_placement show the rows; docs/runbook.md "Stuck rows" tells tenant causes from platform faults.' END;
  RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION extsvc.health_check() IS
  'Operator: one row per check (library, worker_state, settings, cluster_management, cluster_dpu, dpf_api, clock_skew, tls, watch, site_lease, queue, stuck_rows) with status ok, warning or error, what was seen (detail) and what to do (hint); docs/runbook.md has an entry per row.';

REVOKE ALL ON FUNCTION extsvc._health_setting(text), extsvc._health_file_error(text), extsvc._health_url_error(text),
                       extsvc._health_der_validity(bytea), extsvc._health_pem_findings(text, text, text),
                       extsvc._health_tls_findings(),
                       extsvc.health_check() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION extsvc.health_check() TO extsvc_admin, pg_monitor;
