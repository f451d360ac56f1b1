-- Issue 27: a plain pg_restore works. A row that COPY loads (what pg_dump
-- writes) is history and is taken as it is; every other write keeps the
-- lifecycle rules, and a service's pointers at its own revisions and version
-- (constraint triggers now, no longer circular foreign keys) still refuse
-- what the foreign keys refused.
BEGIN;
\ir helpers.psql
SELECT plan(12);
SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''0b000000-0000-0000-0000-000000000001'''
\set R '''0b000000-0000-0000-0000-000000000002'''

SELECT extsvc.create_service('restore-t', 'svc', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :S);
SET CONSTRAINTS ALL IMMEDIATE;  -- the pointer checks run at commit otherwise

SELECT ok(NOT extsvc._restoring(), 'an ordinary statement is not a restore');

SELECT throws_ok(format('UPDATE extsvc.service_records SET desired_revision = 7 WHERE service_id = %L', :S),
                 '23503', NULL, 'a desired revision that does not exist is refused');
SELECT throws_ok(format('UPDATE extsvc.service_records SET applied_revision = 1, desired_revision = 1, '
                        'attachable_version = ''V9-T1700000000000000'' WHERE service_id = %L', :S),
                 '23503', NULL, 'an attachable version that does not exist is refused');
SELECT throws_ok(format('DELETE FROM extsvc.helm_revisions WHERE service_id = %L AND revision = 1', :S),
                 '23503', NULL, 'the desired revision of a live service cannot be deleted');
SELECT throws_ok(format('DELETE FROM extsvc.service_versions WHERE service_id = %L', :S),
                 '23503', NULL, 'the attachable version of a live service cannot be deleted');
SELECT throws_ok(format('INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, '
                        'service_type, lifecycle_state, state_actor, state_reason) '
                        'VALUES (%L, ''restore-t'', ''pod'', ''KUBERNETES_POD'', ''UPDATING'', ''api'', ''update'')', :R),
                 '55000', NULL, 'an INSERT of a service in UPDATING is refused (it was never created so)');

-- what pg_restore sends: the same row, loaded by COPY
COPY extsvc.service_records (service_id, tenant_organization_id, service_name, service_type, lifecycle_state,
                             state_actor, state_reason) FROM stdin;
0b000000-0000-0000-0000-000000000002	restore-t	pod	KUBERNETES_POD	UPDATING	api	update
\.
SELECT is((SELECT lifecycle_state::text FROM extsvc.service_records WHERE service_id = :R), 'UPDATING',
          'COPY loads it as it is');
SELECT is((SELECT count(*) FROM extsvc.service_state_history WHERE service_id = :R), 0::bigint,
          'and records no history for it (the restored history table holds it)');
SELECT throws_ok(format('UPDATE extsvc.service_records SET lifecycle_state = ''CREATING'', state_actor = ''worker'', '
                        'state_reason = ''bogus'' WHERE service_id = %L', :R),
                 '55000', NULL, 'the next change of a restored row follows the rules again');

-- the pointer checks run at COMMIT as the session's role (NICo's login role, no table
-- privilege): SET CONSTRAINTS ... IMMEDIATE fires the deferred ones the same way
CREATE ROLE extsvc_tap_restore_nico LOGIN IN ROLE extsvc_api;
SET CONSTRAINTS ALL DEFERRED;
SET LOCAL ROLE extsvc_tap_restore_nico;
SELECT extsvc.create_service('restore-t', 'svc2', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL')
  IS NOT NULL AS created;
SELECT lives_ok('SET CONSTRAINTS ALL IMMEDIATE',
                'the deferred pointer checks of a service NICo created pass at its commit');
RESET ROLE;

SELECT lives_ok(format('DELETE FROM extsvc.service_records WHERE service_id = %L', :S),
                'deleting a service takes its revisions and versions along (the pointers go with it)');
SELECT is((SELECT count(*) FROM extsvc.helm_revisions WHERE service_id = :S), 0::bigint, 'its revisions are gone');

SELECT * FROM finish();
ROLLBACK;
