-- The operator's rendering of a service's DPUService, and the chart
-- allow-list (SPEC 2.2).

-- tenant_organization_id (issue 29): as in every other read, another
-- tenant's service and an unknown one get the same 42501.
CREATE FUNCTION extsvc.render_dpuservice(service_id uuid, tenant_organization_id text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  v_data jsonb;
BEGIN
  PERFORM extsvc._check_service_tenant(render_dpuservice.service_id, render_dpuservice.tenant_organization_id);
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = render_dpuservice.service_id;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', render_dpuservice.service_id),
                          'Check the service id.');
  END IF;
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services have a DPUService',
                          format('service_type: %s', s.service_type), 'Pass the id of a DPF_HELM_CHART service.');
  END IF;
  SELECT r.data INTO v_data FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id AND r.revision = s.desired_revision;
  RETURN extsvc._render_dpuservice(s.service_id, s.attachable_version, s.desired_revision, v_data,
                                   extsvc._namespace(), extsvc._site_id());
END
$fn$;
COMMENT ON FUNCTION extsvc.render_dpuservice(uuid, text) IS
  'The DPUService object of the desired revision, as the worker sends it to the management cluster. With tenant_organization_id, another tenant''s service is refused (42501) exactly like an unknown one.';

-- The body of allow_chart: reached only through its admin gate.
CREATE FUNCTION extsvc._allow_chart(repo_url text, chart_name text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  v_probe text;
BEGIN
  -- The entry must itself be a valid repository URL.
  v_probe := format('{"repoURL":%s,"chartName":"probe","chartVersion":"1.0.0","security":{"privileged":false}}',
                    to_json(_allow_chart.repo_url));
  PERFORM extsvc._validate_helm_chart_data(v_probe);
  INSERT INTO extsvc.chart_allowlist (repo_url, chart_name)
  VALUES (rtrim(_allow_chart.repo_url, '/'), coalesce(_allow_chart.chart_name, ''))
  ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION extsvc._allow_chart(text, text) IS 'Internal: body of extsvc.allow_chart. No grants.';

CREATE FUNCTION extsvc.allow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF NOT extsvc._caller_is_admin() THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'only extsvc_admin members may change the chart allow-list',
                          DETAIL = 'function: extsvc.allow_chart', HINT = 'Ask an operator.';
  END IF;
  PERFORM extsvc._allow_chart_as_admin(allow_chart.repo_url, allow_chart.chart_name);
END
$fn$;
COMMENT ON FUNCTION extsvc.allow_chart(text, text) IS
  'Admin: allow charts from a repository URL prefix (chart_name NULL = any chart). Needs extsvc_admin rights of the calling role (SET ROLE included).';
SELECT extsvc._create_gates('allow_chart');

-- The body of disallow_chart: reached only through its admin gate.
CREATE FUNCTION extsvc._disallow_chart(repo_url text, chart_name text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM extsvc.chart_allowlist a
   WHERE a.repo_url = rtrim(_disallow_chart.repo_url, '/')
     AND a.chart_name = coalesce(_disallow_chart.chart_name, '');
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'allow-list entry not found',
                          format('repo_url: %s, chart_name: %s', extsvc._token(_disallow_chart.repo_url),
                                 CASE WHEN _disallow_chart.chart_name IS NULL THEN '(any)'
                                      ELSE extsvc._token(_disallow_chart.chart_name) END),
                          'List entries with SELECT * FROM extsvc.chart_allowlist.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._disallow_chart(text, text) IS 'Internal: body of extsvc.disallow_chart. No grants.';

CREATE FUNCTION extsvc.disallow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF NOT extsvc._caller_is_admin() THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'only extsvc_admin members may change the chart allow-list',
                          DETAIL = 'function: extsvc.disallow_chart', HINT = 'Ask an operator.';
  END IF;
  PERFORM extsvc._disallow_chart_as_admin(disallow_chart.repo_url, disallow_chart.chart_name);
END
$fn$;
COMMENT ON FUNCTION extsvc.disallow_chart(text, text) IS
  'Admin: remove an allow-list entry. Needs extsvc_admin rights of the calling role (SET ROLE included).';
SELECT extsvc._create_gates('disallow_chart');
