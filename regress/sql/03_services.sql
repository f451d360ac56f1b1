-- SPEC 2.4, 2.5, 2.10: creating, updating and deleting services through the
-- SQL API. Every call only persists intent; no Kubernetes call is made.
CREATE EXTENSION nico_extsvc;

CREATE FUNCTION pg_temp.try(stmt text, OUT state text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE stmt;
  state := '00000'; message := 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                          detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$;

-- the row of one service, without the time-dependent columns
CREATE FUNCTION pg_temp.svc(id uuid) RETURNS TABLE (
    name text, type text, scope text, target text, state text, version_ok boolean,
    version_ctr integer, desired integer, applied integer, has_dpf_name boolean, status text, deleted boolean)
LANGUAGE sql AS $$
  SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state,
         version ~ '^V[0-9]+-T[0-9]+$', version_ctr, desired_revision, applied_revision,
         dpf_service_name IS NOT NULL,
         status_message, deleted_at IS NOT NULL
    FROM extsvc.services WHERE service_id = id
$$;

\set chart '{"repoURL":"oci://registry.example.com/charts/team","chartName":"tenant-service","chartVersion":"1.2.3","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts/team","chartName":"tenant-service","chartVersion":"1.2.4","security":{"privileged":false},"values":{"replicas":2}}'
\set chart3 '{"repoURL":"oci://registry.example.com/charts/team","chartName":"tenant-service","chartVersion":"1.2.5","security":{"privileged":false}}'

-- the view's columns, in order
SELECT attnum, attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute WHERE attrelid = 'extsvc.services'::regclass AND attnum > 0 ORDER BY attnum;

------------------------------------------------------------------ allow-list
-- enforcement is on by default: a chart that is not allowed is refused
SHOW extsvc.enforce_chart_allowlist;
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'svc', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'PRIMARY')$$);
SELECT extsvc.allow_chart('oci://registry.example.com/charts');
-- a second identical entry is a no-op; trailing slashes are trimmed
SELECT extsvc.allow_chart('oci://registry.example.com/charts/');
SELECT repo_url, chart_name FROM extsvc.chart_allowlist ORDER BY 1, 2;
-- the entry must be a valid repository URL
SELECT * FROM pg_temp.try($$SELECT extsvc.allow_chart('http://registry.example.com/charts')$$);
-- prefix matching at a segment boundary only, same scheme, host and port
SELECT u, extsvc.repo_url_matches('oci://registry.example.com/charts', u) AS allowed
  FROM unnest(ARRAY['oci://registry.example.com/charts', 'oci://registry.example.com/charts/team',
                    'oci://registry.example.com/chartsx', 'oci://registry.example.com.evil.io/charts',
                    'https://registry.example.com/charts', 'oci://registry.example.com:5000/charts']) u;

------------------------------------------------------------------ create
-- DPF_HELM_CHART: CREATING, version V1-T..., generated identity, one revision
SELECT service_id, tenant_organization_id, service_name, description, service_type, deployment_scope,
       dpu_target, lifecycle_state, version ~ '^V1-T[0-9]+$' AS version_ok, version_ctr,
       desired_revision, applied_revision,
       dpf_service_name = extsvc.dpf_service_name(service_id, version) AS name_ok,
       placement_label_key = extsvc.placement_label_key(service_id, version) AS key_ok,
       length(dpf_service_name) AS name_len, status_message,
       created_at = now() AS created_now, deleted_at
  FROM extsvc.create_service('tenant-a', '  My Service  ', 'dpf_helm_chart', :'chart', 'first service',
                             dpu_target => 'primary', service_id => '11111111-1111-1111-1111-111111111111');
SELECT revision, data = extsvc.validate_dpf_helm_chart_data(:'chart') AS normalized, applied_at, superseded_at
  FROM extsvc.helm_revisions WHERE service_id = '11111111-1111-1111-1111-111111111111';
SELECT state_version, attempts, next_due_at <= now() AS due, lease_token
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = '11111111-1111-1111-1111-111111111111';

-- the rendered DPUService of the desired revision (the fields that depend on
-- the version string, i.e. on the creation time, are checked separately below)
SELECT jsonb_pretty(extsvc.render_dpuservice('11111111-1111-1111-1111-111111111111')
         #- '{metadata,name}' #- '{metadata,labels,nico/extension-service-version}'
         #- '{spec,helmChart,source,releaseName}'
         #- '{spec,serviceDaemonSet,nodeSelector,nodeSelectorTerms,0,matchExpressions,0,key}') AS dpuservice;
SELECT d->'metadata'->>'name' = s.dpf_service_name AS name_ok,
       d#>>'{spec,helmChart,source,releaseName}' = s.dpf_service_name AS release_ok,
       d->'metadata'->'labels'->>'nico/extension-service-version' = s.version AS version_label_ok,
       d#>>'{spec,serviceDaemonSet,nodeSelector,nodeSelectorTerms,0,matchExpressions,0,key}' = s.placement_label_key AS selector_ok
  FROM extsvc.services s, extsvc.render_dpuservice(s.service_id) d
 WHERE s.service_id = '11111111-1111-1111-1111-111111111111';

-- KUBERNETES_POD: READY at once, no DPF identity, no reconciliation row
SELECT * FROM pg_temp.svc((extsvc.create_service('tenant-a', 'pod-svc', 'KUBERNETES_POD', 'apiVersion: v1
kind: Pod', service_id => '22222222-2222-2222-2222-222222222222')).service_id);
SELECT dpf_service_name, placement_label_key FROM extsvc.services WHERE service_id = '22222222-2222-2222-2222-222222222222';
SELECT count(*) AS reconciliation_rows FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = '22222222-2222-2222-2222-222222222222';
SELECT * FROM pg_temp.try($$SELECT extsvc.render_dpuservice('22222222-2222-2222-2222-222222222222')$$);

-- scope and target rules
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'SOME')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'ALL', deployment_scope => 'ALL_DPUS')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'KUBERNETES_POD', 'pod', dpu_target => 'ALL')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'HELM', 'pod')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', '   ', 'KUBERNETES_POD', 'pod')$$);
-- the legacy inputs are refused for DPF services
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'ALL', has_credential => true)$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'ALL', observability => '{}')$$);
-- ALL_DPUS (the superuser running this test is an extsvc_admin member)
SELECT * FROM pg_temp.svc((extsvc.create_service('tenant-a', 'site-wide', 'DPF_HELM_CHART', :'chart',
    deployment_scope => 'ALL_DPUS', service_id => '33333333-3333-3333-3333-333333333333')).service_id);

------------------------------------------------------------------ names
-- unique per tenant, case-insensitively, among services not DELETED
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'MY SERVICE', 'KUBERNETES_POD', 'pod')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'my service', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'ALL')$$);
-- another tenant may use the name
SELECT * FROM pg_temp.svc((extsvc.create_service('tenant-b', 'My Service', 'KUBERNETES_POD', 'pod',
    service_id => '44444444-4444-4444-4444-444444444444')).service_id);
-- renaming onto a used name is refused too
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('22222222-2222-2222-2222-222222222222', service_name => 'my SERVICE')$$);

------------------------------------------------------------------ update
-- update while CREATING supersedes the pending revision: still CREATING
SELECT * FROM pg_temp.svc((extsvc.update_service('11111111-1111-1111-1111-111111111111', :'chart2')).service_id);
SELECT revision, data->>'chartVersion' AS chart_version, applied_at IS NOT NULL AS applied,
       superseded_at IS NOT NULL AS superseded
  FROM extsvc.helm_revisions WHERE service_id = '11111111-1111-1111-1111-111111111111' ORDER BY revision;
SELECT state_version, attempts, next_due_at <= now() AS due
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = '11111111-1111-1111-1111-111111111111';
-- the same data again (any key order or spacing) is a no-op: no revision, same version_ctr
SELECT * FROM pg_temp.svc((extsvc.update_service('11111111-1111-1111-1111-111111111111',
  '{"values":{"replicas":2},"security":{"privileged":false},"chartVersion":"1.2.4",
    "chartName":"tenant-service","repoURL":"oci://registry.example.com/charts/team"}')).service_id);
-- the rendered object follows the desired revision
SELECT d#>>'{spec,helmChart,source,version}' AS version, d#>'{spec,helmChart,values}' AS "values"
  FROM extsvc.render_dpuservice('11111111-1111-1111-1111-111111111111') d;

-- the worker creates it (a claim, then a transition to READY with revision 2)
SELECT c.id AS service_id, c.work->>'lifecycle_state' AS lifecycle_state,
       (c.work->>'desired_revision')::integer AS desired_revision,
       extsvc.complete('service', c.id, c.state_version, c.lease_token,
                       jsonb_build_object('outcome', 'transition', 'new_state', 'READY',
                                          'reason', 'dpuservice_created', 'message', 'DPUService created',
                                          'applied_revision', (c.work->>'desired_revision')::integer)) AS result
  FROM extsvc.claim('service', 'test-worker') c WHERE c.id = '11111111-1111-1111-1111-111111111111';
SELECT * FROM pg_temp.svc('11111111-1111-1111-1111-111111111111');

-- update of READY: a new revision, UPDATING, the applied revision kept
SELECT * FROM pg_temp.svc((extsvc.update_service('11111111-1111-1111-1111-111111111111', :'chart3',
                                                 if_version_ctr_match => 2)).service_id);
SELECT revision, data->>'chartVersion' AS chart_version, applied_at IS NOT NULL AS applied,
       superseded_at IS NOT NULL AS superseded
  FROM extsvc.helm_revisions WHERE service_id = '11111111-1111-1111-1111-111111111111' ORDER BY revision;
-- a stale version_ctr is refused
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('11111111-1111-1111-1111-111111111111', description => 'x', if_version_ctr_match => 2)$$);
-- name and description alone change neither revision nor state
SELECT * FROM pg_temp.svc((extsvc.update_service('11111111-1111-1111-1111-111111111111',
    service_name => 'Renamed Service', description => 'second')).service_id);
SELECT description FROM extsvc.services WHERE service_id = '11111111-1111-1111-1111-111111111111';
-- a DPF update with credentials is refused
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('11111111-1111-1111-1111-111111111111', has_credential => true)$$);
-- unknown service
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('99999999-9999-9999-9999-999999999999', description => 'x')$$);

-- KUBERNETES_POD update: a new version, still READY; same data again is a no-op
SELECT * FROM pg_temp.svc((extsvc.update_service('22222222-2222-2222-2222-222222222222', 'pod v2')).service_id);
SELECT * FROM pg_temp.svc((extsvc.update_service('22222222-2222-2222-2222-222222222222', 'pod v2')).service_id);
SELECT version_number, data, deleted_at IS NOT NULL AS deleted
  FROM extsvc.service_versions WHERE service_id = '22222222-2222-2222-2222-222222222222' ORDER BY version_number;

------------------------------------------------------------------ delete
-- one KUBERNETES_POD version: the service stays READY with the other
SELECT * FROM pg_temp.svc((extsvc.delete_service('22222222-2222-2222-2222-222222222222',
    (SELECT version FROM extsvc.service_versions WHERE service_id = '22222222-2222-2222-2222-222222222222'
        AND version_number = 1))).service_id);
SELECT version_number, deleted_at IS NOT NULL AS deleted
  FROM extsvc.service_versions WHERE service_id = '22222222-2222-2222-2222-222222222222' ORDER BY version_number;
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('22222222-2222-2222-2222-222222222222', 'V9-T1')$$);
-- the whole KUBERNETES_POD service: DELETED at once; again is a no-op
SELECT * FROM pg_temp.svc((extsvc.delete_service('22222222-2222-2222-2222-222222222222')).service_id);
SELECT * FROM pg_temp.svc((extsvc.delete_service('22222222-2222-2222-2222-222222222222')).service_id);
-- DPF: DELETING (the worker finishes it), intent bumped; again is a no-op
SELECT * FROM pg_temp.svc((extsvc.delete_service('11111111-1111-1111-1111-111111111111')).service_id);
SELECT state_version, next_due_at <= now() AS due
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = '11111111-1111-1111-1111-111111111111';
SELECT * FROM pg_temp.svc((extsvc.delete_service('11111111-1111-1111-1111-111111111111')).service_id);
SELECT state_version FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = '11111111-1111-1111-1111-111111111111';
-- DELETING cannot be updated
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('11111111-1111-1111-1111-111111111111', description => 'x')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('99999999-9999-9999-9999-999999999999')$$);
-- the worker observes the 404 and marks it DELETED
SELECT extsvc.complete('service', c.id, c.state_version, c.lease_token,
                       jsonb_build_object('outcome', 'transition', 'new_state', 'DELETED',
                                          'reason', 'dpuservice_deleted')) AS result
  FROM extsvc.claim('service', 'test-worker') c WHERE c.id = '11111111-1111-1111-1111-111111111111';
SELECT * FROM pg_temp.svc('11111111-1111-1111-1111-111111111111');
-- the name is free again once DELETED
SELECT * FROM pg_temp.svc((extsvc.create_service('tenant-a', 'renamed service', 'KUBERNETES_POD', 'pod',
    service_id => '55555555-5555-5555-5555-555555555555')).service_id);

-- attachments block the delete of a DPF service (rows written directly here)
INSERT INTO extsvc.instances (instance_id, tenant_organization_id, host_machine_id)
VALUES ('aaaaaaaa-0000-0000-0000-000000000001', 'tenant-a', 'bbbbbbbb-0000-0000-0000-000000000001');
INSERT INTO extsvc.instance_extension_services (instance_id, service_id, version)
SELECT 'aaaaaaaa-0000-0000-0000-000000000001', service_id, version FROM extsvc.services
 WHERE service_id = '33333333-3333-3333-3333-333333333333';
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('33333333-3333-3333-3333-333333333333')$$);
SELECT lifecycle_state FROM extsvc.services WHERE service_id = '33333333-3333-3333-3333-333333333333';
DELETE FROM extsvc.instances WHERE instance_id = 'aaaaaaaa-0000-0000-0000-000000000001';
SELECT * FROM pg_temp.svc((extsvc.delete_service('33333333-3333-3333-3333-333333333333')).service_id);

------------------------------------------------------------------ allow-list off
SELECT extsvc.disallow_chart('oci://registry.example.com/charts');
SELECT * FROM pg_temp.try($$SELECT extsvc.disallow_chart('oci://registry.example.com/charts')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.create_service('tenant-a', 'other', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'ALL')$$);
SET extsvc.enforce_chart_allowlist = off;
SELECT * FROM pg_temp.svc((extsvc.create_service('tenant-a', 'other', 'DPF_HELM_CHART', :'chart',
    dpu_target => 'ALL', service_id => '66666666-6666-6666-6666-666666666666')).service_id);
RESET extsvc.enforce_chart_allowlist;
-- a chart-specific entry allows only that chart
SELECT extsvc.allow_chart('oci://registry.example.com/charts/team', 'tenant-service');
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('66666666-6666-6666-6666-666666666666', '$$ || :'chart3' || $$')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.update_service('66666666-6666-6666-6666-666666666666', replace('$$ || :'chart3' || $$', 'tenant-service', 'other-chart'))$$);

------------------------------------------------------------------ history
-- (version strings in messages masked: they carry the creation time)
SELECT service_name, from_state, to_state, actor, reason,
       regexp_replace(message, '-T[0-9]+', '-T<micros>') AS message, revision
  FROM extsvc.service_history ORDER BY id;

DROP EXTENSION nico_extsvc;
