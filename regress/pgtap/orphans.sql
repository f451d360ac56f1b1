-- Issue #10, level-triggered cleanup: the resync deletes DPUServices with our
-- ownership label whose name belongs to no live DPF service version. The
-- worker asks extsvc.orphaned_dpuservices(names) which of the listed names
-- those are: the name of a DELETED service, a name no service ever had, the
-- name a superseded version would have had, and a KUBERNETES_POD lookalike.
BEGIN;
\ir helpers.psql
SELECT plan(6);
SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set L '''0a000000-0000-0000-0000-000000000001'''
\set G '''0a000000-0000-0000-0000-000000000002'''

SELECT extsvc.create_service('orph-t', 'live', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :L);
SELECT extsvc.create_service('orph-t', 'gone', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :G);
-- the worker finished the delete of G
SET LOCAL session_replication_role = replica;
UPDATE extsvc.service_records SET lifecycle_state = 'DELETED', deleted_at = now() WHERE service_id = :G;
SET LOCAL session_replication_role = origin;

CREATE TEMP TABLE names AS
SELECT (SELECT dpf_service_name FROM extsvc.services WHERE service_id = :L) AS live,
       (SELECT dpf_service_name FROM extsvc.services WHERE service_id = :G) AS deleted,
       extsvc.dpf_service_name(:L, 'V2-T1700000000000000') AS superseded,
       extsvc.dpf_service_name('0a000000-0000-0000-0000-0000000000ee', 'V1-T1700000000000000') AS unknown;

SELECT is(ARRAY(SELECT extsvc.orphaned_dpuservices(ARRAY[(SELECT live FROM names)])), ARRAY[]::text[],
          'a live service''s DPUService is not an orphan');
SELECT is(ARRAY(SELECT extsvc.orphaned_dpuservices(ARRAY[(SELECT deleted FROM names)])), ARRAY[(SELECT deleted FROM names)],
          'the DPUService of a DELETED service is');
SELECT is(ARRAY(SELECT extsvc.orphaned_dpuservices(ARRAY[(SELECT unknown FROM names)])), ARRAY[(SELECT unknown FROM names)],
          'a name no service has is');
SELECT is(ARRAY(SELECT extsvc.orphaned_dpuservices(ARRAY[(SELECT superseded FROM names)])), ARRAY[(SELECT superseded FROM names)],
          'the name of a version that is not the service''s current one is');
SELECT is(ARRAY(SELECT x FROM extsvc.orphaned_dpuservices(ARRAY(SELECT unnest(ARRAY[live, deleted, superseded, unknown]) FROM names)) x ORDER BY x),
          ARRAY(SELECT x FROM unnest((SELECT ARRAY[deleted, superseded, unknown] FROM names)) x ORDER BY x),
          'several names at once: exactly the orphans');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.orphaned_dpuservices(text[])', 'EXECUTE')
          AND NOT has_function_privilege('extsvc_admin', 'extsvc.orphaned_dpuservices(text[])', 'EXECUTE'),
          'only the owner (the worker) asks');

SELECT * FROM finish();
ROLLBACK;
