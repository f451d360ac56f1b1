-- Repeated requests (a client retrying after a lost answer) are safe:
-- create with the same id and arguments, update with the same data and
-- delete are idempotent; the same id with other arguments is a conflict.
BEGIN;
\ir helpers.psql
SELECT plan(29);

SET LOCAL extsvc.enforce_chart_allowlist = off;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false},"values":{"a":1,"b":[1,2]}}'
\set chart_reordered '{ "values": {"b": [1, 2], "a": 1}, "security": {"privileged": false}, "chartVersion": "1.0.0", "chartName": "svc", "repoURL": "oci://registry.example.com/charts" }'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.1.0","security":{"privileged":false}}'
\set D '''d0000000-0000-0000-0000-000000000001'''
\set P '''d0000000-0000-0000-0000-000000000002'''

CREATE TEMP TABLE first AS
SELECT * FROM extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', :'chart', 'desc', 'PRIMARY', NULL, :D);

------------------------------------------------------------------ create
SELECT results_eq(
  format($$SELECT * FROM extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', %L, 'desc', 'PRIMARY', NULL, %L)$$, :'chart', :D),
  'SELECT * FROM first', 'create repeated with the same arguments returns the same row');
SELECT results_eq(
  format($$SELECT * FROM extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', %L, 'desc', 'primary', 'instance_dpus', %L)$$,
         :'chart_reordered', :D),
  'SELECT * FROM first', 'the same request written differently (key order, spacing, case of enums) is the same request');
SELECT is((SELECT count(*)::integer FROM extsvc.service_records WHERE service_id = :D), 1, 'one service row');
SELECT is((SELECT count(*)::integer FROM extsvc.helm_revisions WHERE service_id = :D), 1, 'one revision');
SELECT is((SELECT count(*)::integer FROM extsvc.service_versions WHERE service_id = :D), 1, 'one version');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history WHERE service_id = :D), 1, 'one history row');
SELECT is((SELECT state_version FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :D), 1::bigint,
          'intent not bumped by the repeat');

SELECT throws_ok(format($$SELECT extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', %L, 'desc', 'PRIMARY', NULL, %L)$$, :'chart2', :D),
                 '23505', 'service_id already exists', 'same id, other data: 23505');
SELECT throws_ok(format($$SELECT extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', %L, 'desc', 'ALL', NULL, %L)$$, :'chart', :D),
                 '23505', 'service_id already exists', 'same id, other dpu_target: 23505');
SELECT throws_ok(format($$SELECT extsvc.create_service('t1', 'svc2', 'DPF_HELM_CHART', %L, 'desc', 'PRIMARY', NULL, %L)$$, :'chart', :D),
                 '23505', 'service_id already exists', 'same id, other name: 23505');
SELECT throws_ok(format($$SELECT extsvc.create_service('t1', 'svc', 'DPF_HELM_CHART', %L, NULL, 'PRIMARY', NULL, %L)$$, :'chart', :D),
                 '23505', 'service_id already exists', 'same id, other description: 23505');

-- KUBERNETES_POD
SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'pod', 'KUBERNETES_POD', 'pod spec', service_id => %L)$$, :P),
                'KUBERNETES_POD create');
SELECT is((extsvc.create_service('t1', 'pod', 'KUBERNETES_POD', 'pod spec', service_id => :P)).version,
          (SELECT version FROM extsvc.services WHERE service_id = :P), 'KUBERNETES_POD create repeated: same version');
SELECT is((SELECT count(*)::integer FROM extsvc.service_versions WHERE service_id = :P), 1, 'one KUBERNETES_POD version');
SELECT throws_ok(format($$SELECT extsvc.create_service('t1', 'pod', 'KUBERNETES_POD', 'other spec', service_id => %L)$$, :P),
                 '23505', NULL, 'same id, other pod spec: 23505');

------------------------------------------------------------------ update
SELECT is((extsvc.update_service(:D, :'chart_reordered')).version_ctr, 1, 'update with the current data: version_ctr unchanged');
SELECT is((SELECT count(*)::integer FROM extsvc.helm_revisions WHERE service_id = :D), 1, 'no new revision');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history WHERE service_id = :D), 1, 'no history row');
SELECT is((SELECT state_version FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :D), 1::bigint,
          'no new intent for the worker');
SELECT is((extsvc.update_service(:D, :'chart2')).desired_revision, 2, 'a real change makes revision 2');
SELECT is((extsvc.update_service(:D, :'chart2')).desired_revision, 2, 'repeating it changes nothing');
SELECT is((SELECT version_ctr FROM extsvc.services WHERE service_id = :D), 2, 'version_ctr bumped once');
SELECT is((extsvc.update_service(:P, 'pod spec')).version_ctr, 1, 'KUBERNETES_POD update with the same spec: no new version');

------------------------------------------------------------------ delete
SELECT is((extsvc.delete_service(:D)).lifecycle_state, 'DELETING', 'delete: DELETING');
SELECT results_eq(format('SELECT * FROM extsvc.delete_service(%L)', :D),
                  format('SELECT * FROM extsvc.service_deletions WHERE service_id = %L', :D),
                  'delete again: the same row back (with the versions this transaction removed)');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history WHERE service_id = :D AND to_state = 'DELETING'), 1,
          'one history row for DELETING');
SELECT is((extsvc.delete_service(:P)).lifecycle_state, 'DELETED', 'KUBERNETES_POD delete: DELETED');
SELECT is((extsvc.delete_service(:P)).lifecycle_state, 'DELETED', 'KUBERNETES_POD delete again: DELETED');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history WHERE service_id = :P AND to_state = 'DELETED'), 1,
          'one history row for DELETED');

SELECT * FROM finish();
ROLLBACK;
