-- Issue 29, item 3: the chart allow-list was checked only at create and
-- update: after disallow_chart, retry_service of a FAILED service went to
-- CREATING and attaching a READY service put it on new DPUs. The allow-list
-- is checked at retry, rollback and attach too (a retried delete is never
-- refused: removing a chart is always allowed). Services already running
-- from a removed chart keep running where they are (nothing is torn down
-- behind the tenant's back) and are listed in extsvc.services_outside_allowlist.
BEGIN;
\ir helpers.psql
SELECT plan(30);

SET LOCAL client_min_messages = warning;
SET LOCAL extsvc.enforce_chart_allowlist = on;

\set chart '{"repoURL":"oci://charts.sec.example.com/a","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://charts.sec.example.com/a","chartName":"svc","chartVersion":"2.0.0","security":{"privileged":false}}'
\set R '''5f000000-0000-0000-0000-000000000001'''
\set F '''5f000000-0000-0000-0000-000000000002'''
\set X '''5f000000-0000-0000-0000-000000000003'''
\set A '''5f000000-0000-0000-0000-000000000004'''
\set H '''fm100hs5f10000000000000000000000000000100000000000000000000'''
\set D '''fm100ds5f20000000000000000000000000000100000000000000000000'''
\set I '''5f300000-0000-0000-0000-000000000001'''
\set J '''5f300000-0000-0000-0000-000000000002'''

-- the worker's answers, played: a state change with actor worker
CREATE FUNCTION pg_temp.worker(p_id uuid, p_state text, p_reason text) RETURNS void LANGUAGE sql AS $$
  UPDATE extsvc.service_records SET lifecycle_state = p_state, state_actor = 'worker', state_reason = p_reason,
         applied_revision = CASE WHEN p_state = 'READY' THEN desired_revision ELSE applied_revision END,
         deleted_at = CASE WHEN p_state = 'DELETED' THEN now() END
   WHERE service_id = p_id
$$;

CREATE FUNCTION pg_temp.entry(p_id uuid) RETURNS jsonb LANGUAGE sql AS $$
  SELECT jsonb_build_array(jsonb_build_object('service_id', service_id, 'version', version))
    FROM extsvc.services WHERE service_id = p_id
$$;

SELECT lives_ok($$SELECT extsvc.allow_chart('oci://charts.sec.example.com/a')$$, 'fixture: the chart is allowed');
SELECT lives_ok(format($$SELECT extsvc.create_service('al-t', 'al-ready', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$, :'chart', :R),
                'fixture: a service that becomes READY');
SELECT pg_temp.worker(:R, 'READY', 'dpuservice_created');
SELECT lives_ok(format($$SELECT extsvc.update_service(%L, %L)$$, :R, :'chart2'), 'fixture: its revision 2 (UPDATING)');
SELECT pg_temp.worker(:R, 'READY', 'revision_applied');
SELECT lives_ok(format($$SELECT extsvc.create_service('al-t', 'al-failed', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$, :'chart', :F),
                'fixture: a service whose create FAILED');
SELECT pg_temp.worker(:F, 'FAILED', 'permanent_error');
SELECT lives_ok(format($$SELECT extsvc.create_service('al-t', 'al-delete-failed', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$, :'chart', :X),
                'fixture: a service whose delete FAILED');
SELECT pg_temp.worker(:X, 'READY', 'dpuservice_created');
SELECT lives_ok(format('SELECT extsvc.delete_service(%L)', :X), 'fixture: its delete');
SELECT pg_temp.worker(:X, 'FAILED', 'permanent_error');
SELECT lives_ok(format($$SELECT extsvc.create_service('al-t', 'al-attached', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$, :'chart', :A),
                'fixture: a service attached before the chart is removed');
SELECT pg_temp.worker(:A, 'READY', 'dpuservice_created');
SELECT extsvc.register_dpu(:D, :H, 'al-dpu', 'al-node', true);
SELECT extsvc.upsert_instance(:I, 'al-t', :H);
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I, pg_temp.entry(:A))), 'ok',
          'fixture: attached while the chart is allowed');
SELECT is((SELECT count(*)::int FROM extsvc.services_outside_allowlist), 0, 'nothing runs outside the allow-list');

-- the chart is removed
SELECT lives_ok($$SELECT extsvc.disallow_chart('oci://charts.sec.example.com/a')$$, 'the operator removes the chart');

-- the view lists what runs (or would run) outside the allow-list
SELECT results_eq($$SELECT service_id::text, service_name, lifecycle_state::text, desired_allowed, applied_allowed, instances
                      FROM extsvc.services_outside_allowlist ORDER BY service_name$$,
                  $$VALUES ('5f000000-0000-0000-0000-000000000004', 'al-attached', 'READY', false, false, 1),
                           ('5f000000-0000-0000-0000-000000000002', 'al-failed', 'FAILED', false, NULL::boolean, 0),
                           ('5f000000-0000-0000-0000-000000000001', 'al-ready', 'READY', false, false, 0)$$,
                  'extsvc.services_outside_allowlist lists every live service of a removed chart (DELETING ones are on their way out)');
SELECT ok(has_table_privilege('extsvc_admin', 'extsvc.services_outside_allowlist', 'SELECT')
          AND NOT has_table_privilege('extsvc_api', 'extsvc.services_outside_allowlist', 'SELECT'),
          'operators read the view; extsvc_api does not');

-- retry: a FAILED create is refused, a FAILED delete is not
SELECT is(pg_temp.try(format('SELECT extsvc.retry_service(%L)', :F)),
          '22023: chart is not on the chart allow-list', 'retry_service of a FAILED create is refused (it went CREATING)');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :F), 'FAILED', 'the service stays FAILED');
SELECT is(pg_temp.try(format('SELECT extsvc.retry_service(%L)', :X)), 'ok', 'retry_service of a FAILED delete is allowed');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :X), 'DELETING', 'the delete is requested again');

-- attach: a new entry is refused, the existing one stays, a detach works
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I,
                             pg_temp.entry(:A) || pg_temp.entry(:R))),
          '22023: chart is not on the chart allow-list',
          'attaching a READY service of a removed chart is refused');
SELECT is((SELECT count(*)::int FROM extsvc.instance_extension_services WHERE instance_id = :I AND service_id = :R), 0,
          'nothing was attached');
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I, pg_temp.entry(:A))), 'ok',
          'the same configuration again (the entry attached before) is accepted');
SELECT is((SELECT config_version FROM extsvc.instances WHERE instance_id = :I), 2, 'and changes nothing');
SELECT extsvc.upsert_instance(:J, 'al-t', 'fm100hs5f10000000000000000000000000000200000000000000000000');
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :J, pg_temp.entry(:A))),
          '22023: chart is not on the chart allow-list',
          'a service already attached elsewhere cannot be attached to another instance');
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I, '[]')), 'ok', 'a detach is accepted');
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I, pg_temp.entry(:A))),
          '22023: chart is not on the chart allow-list', 'attaching the detached entry again is refused');

-- rollback to a revision of a removed chart
SELECT is(pg_temp.try(format('SELECT extsvc.rollback_service(%L, 1)', :R)),
          '22023: chart is not on the chart allow-list', 'rollback_service to a revision of a removed chart is refused');
SELECT is((SELECT desired_revision FROM extsvc.services WHERE service_id = :R), 2, 'no revision was made');

-- with enforcement off, or the chart allowed again, everything works
SET LOCAL extsvc.enforce_chart_allowlist = off;
SELECT is((SELECT count(*)::int FROM extsvc.services_outside_allowlist), 3, 'the view does not depend on enforcement');
SELECT is(pg_temp.try(format('SELECT extsvc.retry_service(%L)', :F)), 'ok', 'enforcement off: retry_service works');
SET LOCAL extsvc.enforce_chart_allowlist = on;
SELECT lives_ok($$SELECT extsvc.allow_chart('oci://charts.sec.example.com/a', 'svc')$$, 'the chart is allowed again');
SELECT is(pg_temp.try(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I, pg_temp.entry(:R))), 'ok',
          'attaching works again');
SELECT is((SELECT count(*)::int FROM extsvc.services_outside_allowlist), 0, 'and the view is empty');

SELECT * FROM finish();
ROLLBACK;
