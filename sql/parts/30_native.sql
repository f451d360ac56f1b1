-- Native (C++) functions. The leading underscore marks internals; the public
-- API wraps them below.

CREATE FUNCTION extsvc._validate_helm_chart_data(data text) RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_validate_helm_chart_data';

CREATE FUNCTION extsvc._dpf_service_name(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_dpf_service_name';

CREATE FUNCTION extsvc._placement_label_key(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_placement_label_key';

-- site_id (issue 25): nico/site on the metadata ('' renders as 0.2.0 did, without it)
CREATE FUNCTION extsvc._render_dpuservice(service_id uuid, version text, revision integer, data jsonb,
                                          namespace text, site_id text DEFAULT '')
  RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_render_dpuservice';

CREATE FUNCTION extsvc.repo_url_matches(allowlist_entry text, repo_url text) RETURNS boolean
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_repo_url_matches';
COMMENT ON FUNCTION extsvc.repo_url_matches(text, text) IS
  'True when an allow-list entry admits a repoURL: same scheme, host and port, entry path a prefix at a segment boundary.';

CREATE FUNCTION extsvc.dpuservice_mutable_patch(live jsonb, desired jsonb) RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_mutable_patch';
COMMENT ON FUNCTION extsvc.dpuservice_mutable_patch(jsonb, jsonb) IS
  'The minimal JSON merge patch (RFC 7396) of the NICo-owned mutable DPUService fields that turns live into desired.';

CREATE FUNCTION extsvc.dpuservice_identity_mismatch(live jsonb, service_id uuid, version text, namespace text)
  RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_identity_mismatch';
COMMENT ON FUNCTION extsvc.dpuservice_identity_mismatch(jsonb, uuid, text, text) IS
  'Path of the first ownership or immutable-identity field of a live DPUService that is not ours; NULL when it is ours.';

CREATE FUNCTION extsvc._wake() RETURNS void
  LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_wake';

-- The SQL reads extsvc.* settings only through this C function, never with
-- current_setting() (issue 29): its call loads the library in the session,
-- and loading defines the settings, so a placeholder a session SET before
-- the library was loaded (a non-superuser may make one) is re-checked
-- against the role that set it and dropped; the value read is the site's.
-- As current_setting() shows it (units included).
CREATE FUNCTION extsvc._setting(name text) RETURNS text
  LANGUAGE c STABLE STRICT AS 'MODULE_PATHNAME', 'nico_extsvc_setting';
COMMENT ON FUNCTION extsvc._setting(text) IS
  'Internal: an extsvc.* setting as the loaded library defines it (never a session''s placeholder); the only way the SQL reads one. No grants.';

-- The site id in force for SQL (GUC extsvc.site_id; '' when unset).
CREATE FUNCTION extsvc._site_id() RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN coalesce(extsvc._setting('extsvc.site_id'), '');
END
$fn$;
COMMENT ON FUNCTION extsvc._site_id() IS
  'Internal: extsvc.site_id (the nico/site label of this site''s DPUServices), '''' when unset.';

-- The namespace of the DPUService objects (GUC extsvc.namespace).
CREATE FUNCTION extsvc._namespace() RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN coalesce(nullif(extsvc._setting('extsvc.namespace'), ''), 'dpf-operator-system');
END
$fn$;

-- A caller's value as quoted in an error's DETAIL (issue #10): at most 64
-- characters, so an error never echoes a long (or hostile) value whole.
CREATE FUNCTION extsvc._token(p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN CASE WHEN p_value IS NULL THEN 'NULL'
            WHEN length(p_value) <= 64 THEN p_value
            ELSE left(p_value, 48) || format('... (%s characters)', length(p_value)) END;
END
$fn$;
COMMENT ON FUNCTION extsvc._token(text) IS
  'Internal: a caller''s value for an error DETAIL, cut to 48 characters plus its length when longer than 64. No grants.';

-- A list of caller values for a DETAIL (issue 29): the first five, each
-- through _token (unless p_quote is false: items already made of bounded
-- parts), then how many more; NULL for an empty list.
CREATE FUNCTION extsvc._token_list(p_values text[], p_quote boolean DEFAULT true) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN (
    SELECT nullif(concat_ws(', ',
             (SELECT string_agg(CASE WHEN p_quote THEN extsvc._token(v.x) ELSE v.x END, ', ' ORDER BY v.o)
                FROM unnest(p_values) WITH ORDINALITY v(x, o) WHERE v.o <= 5),
             CASE WHEN cardinality(p_values) > 5 THEN format('... and %s more', cardinality(p_values) - 5) END), ''));
END
$fn$;
COMMENT ON FUNCTION extsvc._token_list(text[], boolean) IS
  'Internal: caller values for an error DETAIL: the first five through extsvc._token, then how many more. No grants.';

-- Raises an error with SQLSTATE, one-line message, DETAIL and HINT.
CREATE FUNCTION extsvc._raise(p_sqlstate text, p_message text, p_detail text, p_hint text)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message,
                        DETAIL = coalesce(p_detail, ''), HINT = coalesce(p_hint, '');
END
$fn$;

-- _raise with the error's CONSTRAINT field set (issue #14 P1-12): sqlx
-- exposes it, so NICo can tell a concurrent modification from a failed
-- precondition without parsing messages. Real constraint names where a
-- constraint exists; otherwise the stable names listed in docs/sql-api.md.
CREATE FUNCTION extsvc._raise_c(p_constraint text, p_sqlstate text, p_message text, p_detail text, p_hint text)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message, CONSTRAINT = p_constraint,
                        DETAIL = coalesce(p_detail, ''), HINT = coalesce(p_hint, '');
END
$fn$;
COMMENT ON FUNCTION extsvc._raise_c(text, text, text, text, text) IS
  'Internal: raises like extsvc._raise with the CONSTRAINT field set (names in docs/sql-api.md). No grants.';

-- NICo ConfigVersion of version number n, stamped with the transaction time.
CREATE FUNCTION extsvc._config_version(n integer) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN format('V%s-T%s', n, (extract(epoch FROM now()) * 1000000)::bigint);
END
$fn$;

-- Admin rights follow the calling role, the way PostgreSQL privileges do
-- (SET ROLE included), never session_user. Inside a SECURITY DEFINER function
-- current_user is the owner, so no definer body can ask who called it. The
-- role-dependent API functions (create_service, update_service,
-- delete_service, rollback_service, retry_service, allow_chart,
-- disallow_chart) are therefore SECURITY INVOKER entries that pick one of two
-- SECURITY DEFINER gates: *_as_admin, executable by extsvc_admin only, or
-- *_as_api. PostgreSQL's own EXECUTE check on the gate decides; a caller
-- cannot claim admin rights it does not have.

-- Whether the calling role has extsvc_admin rights, the one test every
-- role-dependent entry makes. Meaningful only where current_user is the
-- caller: in a SECURITY INVOKER function, never in a SECURITY DEFINER one.
CREATE FUNCTION extsvc._caller_is_admin() RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN pg_has_role(current_user, 'extsvc_admin', 'USAGE');
END
$fn$;
COMMENT ON FUNCTION extsvc._caller_is_admin() IS
  'Internal: whether the calling role (SET ROLE included) has extsvc_admin rights; the test of the SECURITY INVOKER entries that pick a gate.';

-- The gates of a role-dependent entry, written once for all of them. The entry
-- extsvc.<fn> (SECURITY INVOKER) has a body extsvc._<fn> (no grants) that
-- takes the entry's arguments and, when it serves both roles, a trailing
-- p_admin boolean. This creates extsvc._<fn>_as_admin(the entry's arguments)
-- calling the body with p_admin true, and, for a body with p_admin, the
-- extsvc._<fn>_as_api twin calling it with false: SECURITY DEFINER, the
-- body's result. Who may execute which is granted where the entry is.
CREATE FUNCTION extsvc._create_gates(p_entry text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  v_entry oid := (SELECT p.oid FROM pg_proc p
                   WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname = p_entry);
  v_nargs integer := (SELECT p.pronargs FROM pg_proc p WHERE p.oid = v_entry);
  v_body oid := (SELECT p.oid FROM pg_proc p
                  WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname = '_' || p_entry
                    AND (p.pronargs = v_nargs
                         OR (p.pronargs = v_nargs + 1 AND p.proargtypes[v_nargs] = 'boolean'::regtype)));
  v_flagged boolean := (SELECT p.pronargs > v_nargs FROM pg_proc p WHERE p.oid = v_body);
  v_args text := (SELECT string_agg('$' || i, ', ' ORDER BY i) FROM generate_series(1, v_nargs) i);
  g record;
BEGIN
  IF v_body IS NULL THEN
    RAISE EXCEPTION 'extsvc._create_gates: no entry extsvc.% with a body extsvc._%', p_entry, p_entry;
  END IF;
  FOR g IN SELECT * FROM (VALUES
             ('admin', 'true', 'for callers with extsvc_admin rights (EXECUTE for extsvc_admin only)'),
             ('api', 'false', 'for callers without extsvc_admin rights')) x(role, flag, who)
            WHERE v_flagged OR x.role = 'admin' LOOP
    -- PL/pgSQL, not SQL: PostgreSQL 15 parses and plans a SQL function's
    -- body again in every transaction that calls it (fmgr_sql), PL/pgSQL
    -- keeps its plan for the session (issue 26, part 3)
    EXECUTE format('CREATE FUNCTION extsvc.%I(%s) RETURNS %s
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS %L',
                   format('_%s_as_%s', p_entry, g.role), pg_get_function_identity_arguments(v_entry),
                   pg_get_function_result(v_body),
                   format(CASE WHEN pg_get_function_result(v_body) = 'void'
                               THEN 'BEGIN PERFORM extsvc.%I(%s); END'
                               ELSE 'BEGIN RETURN extsvc.%I(%s); END' END, '_' || p_entry,
                          concat_ws(', ', v_args, CASE WHEN v_flagged THEN g.flag END)));
    EXECUTE format('COMMENT ON FUNCTION extsvc.%I(%s) IS %L', format('_%s_as_%s', p_entry, g.role),
                   pg_get_function_identity_arguments(v_entry),
                   format('Internal gate of extsvc.%s %s.', p_entry,
                          CASE WHEN v_flagged THEN g.who ELSE '(EXECUTE for extsvc_admin only)' END));
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc._create_gates(text) IS
  'Internal, install only: creates the SECURITY DEFINER gates _<entry>_as_admin (and _as_api for a body with p_admin) of a role-dependent entry. No grants.';

CREATE FUNCTION extsvc._tenant_denied(p_what text, p_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  -- One answer for "does not exist" and "belongs to another tenant".
  PERFORM extsvc._raise('42501', format('%s is not accessible to this tenant', p_what),
    format('%s_id: %s, tenant_organization_id: %s', p_what, p_id, extsvc._token(p_tenant)),
    format('Pass the id of one of this tenant''s %ss; an unknown id and another tenant''s id get this same answer.', p_what));
END
$fn$;

-- One rule for tenant ids wherever one is passed (issue 29): NICo's
-- TenantOrganizationId (ASCII letters, digits, '_' and '-'; nothing trimmed)
-- and at most 256 characters, the column's limit. p_required: NULL is
-- refused too (create_service, upsert_instance); otherwise NULL means "no
-- tenant given".
CREATE FUNCTION extsvc._check_tenant_id(p_tenant text, p_required boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_tenant IS NULL AND NOT p_required THEN
    RETURN;
  END IF;
  IF p_tenant IS NULL OR length(p_tenant) > 256 OR p_tenant !~ '^[A-Za-z0-9_-]+$' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must be 1 to 256 letters, digits, ''_'' or ''-''',
      format('field: tenant_organization_id = %s', extsvc._token(p_tenant)),
      'Pass NICo''s tenant organization id as it is (ASCII letters, digits, ''_'' and ''-'', at most 256).');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_tenant_id(text, boolean) IS
  'Internal: 22023 unless the tenant id is 1 to 256 ASCII letters, digits, _ or - (NICo''s TenantOrganizationId); NULL passes unless required. No grants.';

-- Raises the tenant refusal when a tenant is given and the service is not one
-- of its services (unknown or another tenant's).
CREATE FUNCTION extsvc._check_service_tenant(p_service_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  PERFORM extsvc._check_tenant_id(p_tenant, false);
  IF p_tenant IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_records s
        WHERE s.service_id = p_service_id AND s.tenant_organization_id = p_tenant) THEN
    PERFORM extsvc._tenant_denied('service', p_service_id, p_tenant);
  END IF;
END
$fn$;

-- The same for an instance.
CREATE FUNCTION extsvc._check_instance_tenant(p_instance_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  PERFORM extsvc._check_tenant_id(p_tenant, false);
  IF p_tenant IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.instances i
        WHERE i.instance_id = p_instance_id AND i.tenant_organization_id = p_tenant) THEN
    PERFORM extsvc._tenant_denied('instance', p_instance_id, p_tenant);
  END IF;
END
$fn$;

-- The tenant check, then P0002 for an unknown instance (issue #12: every
-- instance status function answers an unknown instance the same way).
CREATE FUNCTION extsvc._require_instance(p_instance_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  PERFORM extsvc._check_instance_tenant(p_instance_id, p_tenant);
  IF NOT EXISTS (SELECT FROM extsvc.instances i WHERE i.instance_id = p_instance_id) THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', p_instance_id),
                          'Check the instance id; a finished deletion removes the instance.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_instance(uuid, text) IS
  'Internal: the tenant check, then P0002 for an unknown instance (every instance status function). No grants.';
