-- Issue 28, part 4: the day-2 verbs. extsvc.service_dpus(service_id): where a
-- DPF service runs, one row per (instance, DPU) for both scopes;
-- extsvc.reconcile_dpu(machine_id): one DPU's placement work due now, out of
-- backoff. Their grants, their errors (SQLSTATE, DETAIL, HINT), and that a
-- refused call changes nothing.
BEGIN;
\ir helpers.psql
SELECT plan(35);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set D '''8d000000-0000-0000-0000-000000000001'''
\set S '''8d000000-0000-0000-0000-000000000002'''
\set P '''8d000000-0000-0000-0000-000000000003'''
\set F '''8d000000-0000-0000-0000-000000000004'''
\set U '''8d000000-0000-0000-0000-0000000000ff'''
\set I1 '''8d100000-0000-0000-0000-000000000001'''
\set H '''fm100hs8e00000000000000000000000000000100000000000000000000'''
\set DA '''fm100ds8e00000000000000000000000000000a00000000000000000000'''
\set DB '''fm100ds8e00000000000000000000000000000b00000000000000000000'''
\set DU '''fm100ds8e00000000000000000000000000000f00000000000000000000'''

CREATE ROLE extsvc_tap_d2_nobody LOGIN;
CREATE ROLE extsvc_tap_d2_tenant LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_d2_operator LOGIN IN ROLE extsvc_admin;

------------------------------------------------------------------ definitions and grants
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.oid IN ('extsvc.service_dpus(uuid,text)'::regprocedure, 'extsvc.reconcile_dpu(text)'::regprocedure)
                   AND p.prosecdef AND obj_description(p.oid, 'pg_proc') IS NOT NULL
                   AND EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpg_temp$')
                 ORDER BY 1),
          ARRAY['extsvc.reconcile_dpu(text)', 'extsvc.service_dpus(uuid,text)'],
          'both are SECURITY DEFINER with a search_path ending in pg_temp, and commented');
SELECT is((SELECT provolatile::text FROM pg_proc WHERE oid = 'extsvc.service_dpus(uuid,text)'::regprocedure), 's',
          'service_dpus is STABLE (a read)');
SELECT function_privs_are('extsvc', 'service_dpus', ARRAY['uuid', 'text'], 'extsvc_api', ARRAY['EXECUTE'],
                          'extsvc_api may execute service_dpus (as the other reads)');
SELECT function_privs_are('extsvc', 'service_dpus', ARRAY['uuid', 'text'], 'extsvc_admin', ARRAY['EXECUTE'],
                          'extsvc_admin may execute service_dpus');
SELECT function_privs_are('extsvc', 'service_dpus', ARRAY['uuid', 'text'], 'extsvc_tap_d2_nobody', ARRAY[]::text[],
                          'a role without grants may not execute service_dpus');
SELECT function_privs_are('extsvc', 'reconcile_dpu', ARRAY['text'], 'extsvc_admin', ARRAY['EXECUTE'],
                          'extsvc_admin may execute reconcile_dpu (as reconcile_now)');
SELECT function_privs_are('extsvc', 'reconcile_dpu', ARRAY['text'], 'extsvc_api', ARRAY[]::text[],
                          'extsvc_api may not execute reconcile_dpu');
SELECT ok(NOT has_function_privilege('public', 'extsvc.reconcile_dpu(text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'extsvc.service_dpus(uuid,text)', 'EXECUTE'),
          'PUBLIC may execute neither');

------------------------------------------------------------------ fixtures
SELECT extsvc.register_dpu(:DA, :H, 'd2-dpu-a', 'd2-node-a', true);
SELECT extsvc.register_dpu(:DB, :H, 'd2-dpu-b', 'd2-node-b', false);
SELECT extsvc.create_service('d2-t', 'dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :D);
SELECT extsvc.create_service('d2-t', 'site', 'DPF_HELM_CHART', :'chart', deployment_scope => 'ALL_DPUS', service_id => :S);
SELECT extsvc.create_service('d2-t', 'pod', 'KUBERNETES_POD', 'kind: Pod', service_id => :P);
SELECT extsvc.create_service('d2-other', 'foreign', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :F);
-- what the worker records: both DPF services applied and READY
SET LOCAL nico_extsvc.actor = 'worker';
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision
 WHERE service_id IN (:D, :S);
INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state, status_message)
VALUES (:S, :DA, 'RUNNING', 'pod ready');
SET LOCAL nico_extsvc.actor = '';
SELECT extsvc.upsert_instance(:I1, 'd2-t', :H, ARRAY[:DA, :DB]::text[], true);
SELECT extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object(
         'service_id', :D, 'version', (SELECT version FROM extsvc.services WHERE service_id = :D))));

------------------------------------------------------------------ service_dpus
SELECT is(ARRAY(SELECT row(instance_id, dpu_machine_id, dpu_device_name, dpu_node_name, placement_state, deployment_state)::text
                  FROM extsvc.service_dpus(:D)),
          ARRAY[row(:I1::uuid, :DA, 'd2-dpu-a', 'd2-node-a', 'ACTIVE', 'PENDING')::text,
                row(:I1::uuid, :DB, 'd2-dpu-b', 'd2-node-b', 'ACTIVE', 'PENDING')::text],
          'service_dpus: an INSTANCE_DPUS service, one row per (instance, DPU) of its attachments');
SELECT is((SELECT bool_and(version = (SELECT version FROM extsvc.services WHERE service_id = :D) AND updated_at IS NOT NULL)
             FROM extsvc.service_dpus(:D)), true, 'service_dpus: the attached version and updated_at');
SELECT is(ARRAY(SELECT row(instance_id, dpu_machine_id, dpu_node_name, placement_state, deployment_state, status_message,
                           observed_at IS NOT NULL)::text
                  FROM extsvc.service_dpus(:S)),
          ARRAY[row(NULL::uuid, :DA, 'd2-node-a', NULL::text, 'RUNNING', 'pod ready', true)::text,
                row(NULL::uuid, :DB, 'd2-node-b', NULL::text, 'UNKNOWN', 'not observed yet', false)::text],
          'service_dpus: an ALL_DPUS service, one row per DPU (no instance), UNKNOWN where not observed yet');
SELECT is((SELECT array_agg(row(dpu_machine_id, deployment_state, status_message)::text ORDER BY dpu_machine_id)
             FROM extsvc.service_dpus(:S)),
          (SELECT array_agg(row(dpu_machine_id, deployment_state, status_message)::text ORDER BY dpu_machine_id)
             FROM extsvc.site_service_status(:S)),
          'service_dpus agrees with site_service_status for an ALL_DPUS service');
SELECT is((SELECT count(*)::int FROM extsvc.service_dpus(:F)), 0, 'service_dpus: a service attached nowhere has no rows');
SELECT is(pg_temp.diag(format('SELECT * FROM extsvc.service_dpus(%L)', :U), 'sqlstate', 'message', 'detail', 'hint'),
          'P0002 | service not found | service_id: 8d000000-0000-0000-0000-0000000000ff | Check the service id; deleted services stay readable until purged.',
          'service_dpus: an unknown service -> P0002 with the id in DETAIL and a HINT');
SELECT is(pg_temp.diag(format('SELECT * FROM extsvc.service_dpus(%L)', :P), 'sqlstate', 'detail'),
          '22023 | service_id: 8d000000-0000-0000-0000-000000000003, service_type: KUBERNETES_POD',
          'service_dpus: a KUBERNETES_POD service -> 22023 naming its type');
SELECT is(pg_temp.diag(format('SELECT * FROM extsvc.service_dpus(%L)', :P), 'hint'),
          'A KUBERNETES_POD service is run by the DPU agent: extsvc.service_instances(service_id) lists its instances.',
          'service_dpus: ... with a HINT');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_dpus(%L, %L)', :F, 'd2-t')), 5), '42501',
          'service_dpus: another tenant''s service -> 42501');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_dpus(%L, %L)', :U, 'd2-t')), 5), '42501',
          'service_dpus: with a tenant, an unknown service gets the same 42501');
SELECT is((SELECT count(*)::int FROM extsvc.service_dpus(:D, 'd2-t')), 2, 'service_dpus: the owning tenant reads its rows');
SELECT is(pg_temp.as_user('extsvc_tap_d2_tenant', format('SELECT * FROM extsvc.service_dpus(%L)', :D)), 'ok',
          'service_dpus: an extsvc_api member may call it');
SELECT is(pg_temp.as_user('extsvc_tap_d2_operator', format('SELECT * FROM extsvc.service_dpus(%L)', :S)), 'ok',
          'service_dpus: an extsvc_admin member may call it');
SELECT alike(pg_temp.as_user('extsvc_tap_d2_nobody', format('SELECT * FROM extsvc.service_dpus(%L)', :D)),
             '42501: permission denied for %', 'service_dpus: a role without grants is refused');

------------------------------------------------------------------ reconcile_dpu
-- DPU a failed its pass and waits out a backoff; b is idle
UPDATE extsvc.dpu_reconciliations SET attempts = 5, next_due_at = now() + interval '1 hour',
       last_error = 'Forbidden (HTTP 403)', last_http_status = 403
 WHERE dpu_machine_id = :DA;
UPDATE extsvc.dpu_reconciliations SET attempts = 0, next_due_at = NULL WHERE dpu_machine_id = :DB;
CREATE TEMP TABLE before AS SELECT dpu_machine_id, state_version FROM extsvc.dpu_reconciliations;
SELECT is(pg_temp.as_user('extsvc_tap_d2_operator', format('SELECT extsvc.reconcile_dpu(%L)', :DA)), 'ok',
          'reconcile_dpu: an extsvc_admin member makes a DPU due');
SELECT is((SELECT row(next_due_at <= now(), attempts)::text FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DA),
          row(true, 0)::text, 'reconcile_dpu: the DPU is due now, its backoff reset');
SELECT cmp_ok((SELECT q.state_version FROM extsvc.dpu_reconciliations q WHERE q.dpu_machine_id = :DA), '>',
              (SELECT b.state_version FROM before b WHERE b.dpu_machine_id = :DA),
              'reconcile_dpu: state_version moves (a pass in flight ends stale and runs again)');
SELECT is((SELECT row(q.next_due_at, q.attempts, q.state_version = b.state_version)::text
             FROM extsvc.dpu_reconciliations q JOIN before b USING (dpu_machine_id) WHERE q.dpu_machine_id = :DB),
          row(NULL::timestamptz, 0, true)::text, 'reconcile_dpu: another DPU is left alone');
SELECT is((SELECT last_error FROM extsvc.dpu_placement WHERE dpu_machine_id = :DA), 'Forbidden (HTTP 403)',
          'reconcile_dpu: the last error stays until the next pass replaces it');
SELECT is(extsvc.reconcile_dpu(:DB), 1, 'reconcile_dpu: returns 1');
-- errors
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() + interval '1 hour' WHERE dpu_machine_id = :DB;
SELECT is(pg_temp.diag(format('SELECT extsvc.reconcile_dpu(%L)', :DU), 'sqlstate', 'message', 'detail', 'hint'),
          'P0002 | DPU not found | machine_id: fm100ds8e00000000000000000000000000000f00000000000000000000 | Check the DPU machine id: SELECT dpu_machine_id, dpu_device_name FROM extsvc.dpu_placement.',
          'reconcile_dpu: an unknown DPU -> P0002 with the id in DETAIL and a HINT');
SELECT is(left(pg_temp.err(format('SELECT extsvc.reconcile_dpu(%L)', 'not-a-machine-id')), 5), '22023',
          'reconcile_dpu: a string that is no MachineId -> 22023');
SELECT is(left(pg_temp.err(format('SELECT extsvc.reconcile_dpu(%L)', :H)), 5), '22023',
          'reconcile_dpu: a host''s MachineId -> 22023');
SELECT is(left(pg_temp.err('SELECT extsvc.reconcile_dpu(NULL)'), 5), '22023', 'reconcile_dpu: NULL -> 22023');
SELECT is(pg_temp.as_user('extsvc_tap_d2_tenant', format('SELECT extsvc.reconcile_dpu(%L)', :DB)),
          '42501: permission denied for function reconcile_dpu', 'reconcile_dpu: an extsvc_api member is refused');
SELECT alike(pg_temp.as_user('extsvc_tap_d2_nobody', format('SELECT extsvc.reconcile_dpu(%L)', :DB)),
             '42501: permission denied for %', 'reconcile_dpu: a role without grants is refused');
SELECT is((SELECT next_due_at > now() FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB), true,
          'reconcile_dpu: refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
