-- Issue 29, item 8: tenant boundaries the API left open.
--  * render_dpuservice(service_id) returned another tenant's whole definition:
--    it takes the optional trailing tenant argument like every other read.
--  * instance_extension_services_terminated(instance_id) of another tenant's
--    live instance answered false, which confirms it exists: with the tenant
--    argument it answers like an unknown id. Since issue 22 an unknown id is
--    no longer true but P0002, so with the tenant both answer that P0002,
--    word for word (another tenant's finished deletion too: nico_types).
--  * a host holds at most one live instance (one not being deleted), so one
--    tenant's service never lands on a DPU of another tenant's host.
--  * extsvc._mark_rollback (and the other internal steps of rollback_service)
--    is not executable by extsvc_api.
--  * extsvc.allow_privileged = off refuses security.privileged: true from
--    tenants at create, update, rollback and retry.
BEGIN;
\ir helpers.psql
SELECT plan(41);

SET LOCAL client_min_messages = warning;
SET LOCAL extsvc.enforce_chart_allowlist = off;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set priv '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":true}}'
\set priv2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"2.0.0","security":{"privileged":true}}'
\set SA '''5b000000-0000-0000-0000-00000000000a'''
\set SU '''5b000000-0000-0000-0000-0000000000ff'''
\set P '''5b000000-0000-0000-0000-000000000001'''
\set R '''5b000000-0000-0000-0000-000000000003'''
\set Q '''5b000000-0000-0000-0000-000000000002'''
\set H '''fm100hs5b10000000000000000000000000000100000000000000000000'''
\set H2 '''fm100hs5b10000000000000000000000000000200000000000000000000'''
\set IA '''5b200000-0000-0000-0000-00000000000a'''
\set IB '''5b200000-0000-0000-0000-00000000000b'''
\set IA2 '''5b200000-0000-0000-0000-0000000000a2'''
\set IU '''5b200000-0000-0000-0000-0000000000ff'''

CREATE FUNCTION pg_temp.worker(p_id uuid, p_state text, p_reason text) RETURNS void LANGUAGE sql AS $$
  UPDATE extsvc.service_records SET lifecycle_state = p_state, state_actor = 'worker', state_reason = p_reason,
         applied_revision = CASE WHEN p_state = 'READY' THEN desired_revision ELSE applied_revision END
   WHERE service_id = p_id
$$;

CREATE ROLE extsvc_tap_t8_nico LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_t8_ops LOGIN IN ROLE extsvc_admin, extsvc_api;

SELECT lives_ok(format($$SELECT extsvc.create_service('t8-a', 't8-svc', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :SA), 'fixture: tenant t8-a has a DPF service');

-- render_dpuservice ------------------------------------------------------------
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc.render_dpuservice(%L, %L)', :SA, 't8-b')),
          '42501: service is not accessible to this tenant', 'render_dpuservice refuses another tenant''s service');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc.render_dpuservice(%L, %L)', :SU, 't8-b')),
          '42501: service is not accessible to this tenant', 'and an unknown one the same way');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc.render_dpuservice(%L, %L)', :SA, 't8-a')), 'ok',
          'the owner renders its service');
SELECT is(extsvc.render_dpuservice(:SA)->'metadata'->>'name', extsvc.dpf_service_name(:SA,
            (SELECT version FROM extsvc.services WHERE service_id = :SA)),
          'the positional form of SPEC 2.10 still works');
SELECT is(pg_temp.diag(format('SELECT extsvc.render_dpuservice(%L)', :SU), 'sqlstate', 'constraint', 'hint'), 'P0002 |  | Check the service id.',
          'without the tenant, an unknown service is P0002 as before');

-- instance_extension_services_terminated -----------------------------------------
SELECT extsvc.upsert_instance(:IA, 't8-a', :H);
SELECT is(pg_temp.diag(format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :IA, 't8-b'), 'sqlstate', 'constraint', 'hint'),
          pg_temp.diag(format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :IU, 't8-b'), 'sqlstate', 'constraint', 'hint'),
          'terminated: another tenant''s live instance answers exactly like an unknown one');
SELECT is(pg_temp.diag(format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :IU, 't8-b'), 'sqlstate', 'constraint', 'hint'),
          'P0002 |  | Pass the id of an instance of this tenant (an unknown id and another tenant''s id get this same answer); a finished deletion answers true until extsvc.purge_deleted forgets it.',
          'terminated: an unknown instance with the tenant is P0002, the answer of issue 22 for an unknown id');
SELECT is(pg_temp.diag(format('SELECT extsvc.instance_extension_services_terminated(%L)', :IU), 'sqlstate', 'constraint', 'hint'),
          'P0002 |  | Pass the id of an instance of this tenant (an unknown id and another tenant''s id get this same answer); a finished deletion answers true until extsvc.purge_deleted forgets it.',
          'terminated: an unknown instance without the tenant is P0002 (issue 22)');
SELECT is(extsvc.instance_extension_services_terminated(:IA, 't8-a'), false, 'terminated: the owner sees its live instance');
SELECT is(extsvc.instance_extension_services_terminated(:IA), false, 'terminated: the positional form is unchanged');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :IA, 't8-a')),
          'ok', 'extsvc_api may call the form with the tenant');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :IA, 't8-b')),
          'P0002: instance not found', 'and gets the unknown-id answer for another tenant''s instance');

-- one live instance per host --------------------------------------------------------
SELECT is(pg_temp.diag(format('SELECT extsvc.upsert_instance(%L, %L, %L)', :IB, 't8-b', :H), 'sqlstate', 'constraint', 'hint'),
          '23505 | instances_one_live_per_host | Delete the host''s instance first (extsvc.delete_instance); an instance being deleted no longer counts.',
          'another tenant''s instance on a host with a live instance is refused');
SELECT is(pg_temp.diag(format('SELECT extsvc.upsert_instance(%L, %L, %L)', :IA2, 't8-a', :H), 'sqlstate', 'constraint', 'hint'),
          '23505 | instances_one_live_per_host | Delete the host''s instance first (extsvc.delete_instance); an instance being deleted no longer counts.',
          'so is a second instance of the same tenant');
SELECT is((SELECT count(*)::int FROM extsvc.instances WHERE host_machine_id = :H), 1, 'the host still has one instance');
SELECT extsvc.upsert_instance(:IB, 't8-b', :H2);
SELECT is(pg_temp.diag(format('SELECT extsvc.upsert_instance(%L, %L, %L)', :IB, 't8-b', :H), 'sqlstate', 'constraint', 'hint'),
          '23505 | instances_one_live_per_host | Delete the host''s instance first (extsvc.delete_instance); an instance being deleted no longer counts.',
          'an instance cannot move to a host with a live instance');
SELECT is(pg_temp.diag(format('SELECT extsvc.upsert_instance(%L, %L, %L)', :IA, 't8-a', :H), 'sqlstate', 'constraint', 'hint'), 'ok',
          'an upsert of the host''s own instance is fine');
SELECT lives_ok(format($$SELECT extsvc.create_service('t8-a', 't8-attached', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :R), 'fixture: a READY service attached to the host''s instance');
SELECT pg_temp.worker(:R, 'READY', 'dpuservice_created');
SELECT extsvc.register_dpu('fm100ds5b30000000000000000000000000000100000000000000000000', :H, 't8-dpu', 't8-node', true);
SELECT extsvc.set_instance_extension_services(:IA, (SELECT jsonb_build_array(jsonb_build_object('service_id', service_id, 'version', version))
                                                      FROM extsvc.services WHERE service_id = :R));
SELECT extsvc.delete_instance(:IA);
SELECT is((SELECT delete_requested_at IS NOT NULL FROM extsvc.instances WHERE instance_id = :IA), true,
          'fixture: the instance is being deleted (its DPU must be observed clean first)');
SELECT is(pg_temp.diag(format('SELECT extsvc.upsert_instance(%L, %L, %L)', :IB, 't8-b', :H), 'sqlstate', 'constraint', 'hint'), 'ok',
          'once the instance is being deleted, the host takes the next one (hand-over)');
SELECT ok(EXISTS (SELECT FROM pg_indexes WHERE schemaname = 'extsvc' AND indexname = 'instances_one_live_per_host'
                    AND indexdef LIKE '%WHERE (delete_requested_at IS NULL)%'),
          'the rule is a unique index over live instances');

-- rollback's internal steps -----------------------------------------------------------
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc._mark_rollback(uuid,bigint)', 'EXECUTE'),
          'extsvc_api may not execute extsvc._mark_rollback');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname IN ('_mark_rollback', '_revision_data', '_rollback_service')
                   AND (has_function_privilege('extsvc_api', p.oid, 'EXECUTE') OR has_function_privilege('extsvc_admin', p.oid, 'EXECUTE'))),
          ARRAY[]::text[], 'no internal step of rollback_service is executable by the API roles');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format('SELECT extsvc._mark_rollback(%L, 1)', :SA)),
          '42501: permission denied for function _mark_rollback', 'a direct call is refused');

-- extsvc.allow_privileged --------------------------------------------------------------
SELECT lives_ok(format($$SELECT extsvc.create_service('t8-a', 't8-priv', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'priv', :P), 'fixture (allowed): a privileged service');
SELECT pg_temp.worker(:P, 'READY', 'dpuservice_created');
SELECT lives_ok(format($$SELECT extsvc.update_service(%L, %L)$$, :P, :'chart'), 'fixture: its revision 2 is not privileged');
SELECT lives_ok(format($$SELECT extsvc.create_service('t8-a', 't8-priv-failed', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'priv', :Q), 'fixture (allowed): a privileged service whose create fails');
SELECT pg_temp.worker(:Q, 'FAILED', 'permanent_error');
SET LOCAL extsvc.allow_privileged = off;
SELECT is(pg_temp.diag_as('extsvc_tap_t8_nico',
                          format($$SELECT extsvc.create_service('t8-a', 't8-priv-2', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY')$$, :'priv'),
                          'sqlstate', 'constraint', 'hint'),
          '22023 |  | Privileged services are turned off at this site (extsvc.allow_privileged); use security.privileged: false, or ask an operator.',
          'create with security.privileged true is refused, the HINT names the setting');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.create_service('t8-a', 't8-priv-2', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY')$$, :'priv')),
          '22023: security.privileged is not allowed at this site', 'so it is for an extsvc_api login');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.update_service(%L, %L)$$, :SA, :'priv2')),
          '22023: security.privileged is not allowed at this site', 'update to a privileged definition is refused');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.rollback_service(%L, 1)$$, :P)),
          '22023: security.privileged is not allowed at this site', 'rollback to a privileged revision is refused');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.retry_service(%L)$$, :Q)),
          '22023: security.privileged is not allowed at this site', 'retry of a privileged definition is refused');
SELECT is((SELECT array_agg(row(service_id, lifecycle_state, desired_revision)::text ORDER BY service_id)
             FROM extsvc.services WHERE service_id IN (:SA, :P, :Q)),
          ARRAY[row(:P::uuid, 'UPDATING', 2)::text, row(:Q::uuid, 'FAILED', 1)::text, row(:SA::uuid, 'CREATING', 1)::text],
          'the refused calls changed nothing');
SELECT is((SELECT count(*)::int FROM extsvc.services WHERE service_name = 't8-priv-2'), 0, 'nothing was created');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.update_service(%L, %L)$$, :SA,
            replace(:'chart', '1.0.0', '1.0.1'))), 'ok', 'an unprivileged update is fine');
SELECT is(pg_temp.as_user('extsvc_tap_t8_ops', format($$SELECT extsvc.create_service('t8-ops', 't8-ops-priv', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY')$$, :'priv')),
          'ok', 'an operator (extsvc_admin rights of the calling role) may still create a privileged service');
SELECT is(pg_temp.as_user('extsvc_tap_t8_ops', format($$SELECT extsvc.retry_service(%L)$$, :Q)), 'ok',
          'and retry one');
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', 'SET extsvc.allow_privileged = on'),
          '42501: permission denied to set parameter "extsvc.allow_privileged"', 'a tenant session cannot turn it on');
SET LOCAL extsvc.allow_privileged = on;
SELECT is(pg_temp.as_user('extsvc_tap_t8_nico', format($$SELECT extsvc.update_service(%L, %L)$$, :SA, :'priv2')),
          'ok', 'with the default (on) a tenant may create privileged definitions, as before');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'extsvc.allow_privileged'), 'on', 'the default is on');

SELECT * FROM finish();
ROLLBACK;
