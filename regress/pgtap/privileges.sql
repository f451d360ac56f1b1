-- SPEC 2.10: SECURITY DEFINER API with a fixed search_path, EXECUTE revoked
-- from PUBLIC and granted to extsvc_api and extsvc_admin; ALL_DPUS and the
-- chart allow-list are for extsvc_admin members only. The role-dependent
-- entries are SECURITY INVOKER in front of SECURITY DEFINER gates (issue #10:
-- admin rights follow the calling role); regress/pgtap/roles.sql tests SET ROLE.
BEGIN;
\ir helpers.psql
SELECT plan(73);

SET LOCAL extsvc.enforce_chart_allowlist = off;

CREATE ROLE extsvc_tap_nobody LOGIN;
CREATE ROLE extsvc_tap_tenant LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_operator LOGIN IN ROLE extsvc_admin;

CREATE TEMP TABLE api (fn text, args text[]);
INSERT INTO api VALUES
  ('create_service', ARRAY['text', 'text', 'text', 'text', 'text', 'text', 'text', 'uuid', 'boolean', 'jsonb']),
  ('update_service', ARRAY['uuid', 'text', 'text', 'text', 'bigint', 'boolean', 'jsonb', 'text']),
  ('delete_service', ARRAY['uuid', 'text', 'text']),
  ('validate_dpf_helm_chart_data', ARRAY['text']),
  ('render_dpuservice', ARRAY['uuid', 'text']),
  ('dpf_service_name', ARRAY['uuid', 'text']),
  ('placement_label_key', ARRAY['uuid', 'text']),
  ('allow_chart', ARRAY['text', 'text']),
  ('disallow_chart', ARRAY['text', 'text']),
  ('register_dpu', ARRAY['text', 'text', 'text', 'text', 'boolean']),
  ('deregister_dpu', ARRAY['text']),
  ('upsert_instance', ARRAY['uuid', 'text', 'text', 'text[]', 'boolean']),
  ('set_instance_extension_services', ARRAY['uuid', 'jsonb', 'bigint', 'text']),
  ('delete_instance', ARRAY['uuid', 'text']),
  ('instance_extension_service_status', ARRAY['uuid', 'text']),
  ('instance_extension_services_summary', ARRAY['uuid', 'text']),
  ('instance_extension_services_ready', ARRAY['uuid', 'text']),
  ('dpu_agent_extension_services', ARRAY['text']);
GRANT SELECT ON api TO PUBLIC;

-- the API: EXECUTE for extsvc_api and extsvc_admin, nobody else
SELECT function_privs_are('extsvc', fn, args, 'extsvc_api', ARRAY['EXECUTE'], 'extsvc_api may execute extsvc.' || fn)
  FROM api ORDER BY fn;
SELECT function_privs_are('extsvc', fn, args, 'extsvc_tap_nobody', ARRAY[]::text[], 'a role without grants may not execute extsvc.' || fn)
  FROM api ORDER BY fn;
SELECT ok(bool_and(has_function_privilege('extsvc_admin', format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure, 'EXECUTE')),
          'extsvc_admin may execute the whole API') FROM api;
SELECT is(ARRAY(SELECT fn FROM api JOIN pg_proc p ON p.oid = format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure
                 WHERE NOT p.prosecdef ORDER BY fn),
          ARRAY['allow_chart', 'create_service', 'delete_service', 'disallow_chart', 'update_service'],
          'every API function is SECURITY DEFINER except the role-dependent SECURITY INVOKER entries');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM api
                  JOIN pg_proc p ON p.oid = format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure
                 WHERE NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpg_temp$')
                 ORDER BY 1),
          ARRAY[]::text[], 'every API function (SECURITY INVOKER entries too) has search_path ending in pg_temp');
-- the tenant argument is optional and trailing: the SPEC 2.10 positional
-- forms resolve to the same functions
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname IN (SELECT fn FROM api)
                   AND 'tenant_organization_id' = p.proargnames[p.pronargs] AND p.pronargdefaults > 0
                 ORDER BY 1),
          ARRAY['extsvc.delete_instance(uuid,text)', 'extsvc.delete_service(uuid,text,text)',
                'extsvc.instance_extension_service_status(uuid,text)', 'extsvc.instance_extension_services_ready(uuid,text)',
                'extsvc.instance_extension_services_summary(uuid,text)', 'extsvc.render_dpuservice(uuid,text)',
                'extsvc.set_instance_extension_services(uuid,jsonb,bigint,text)',
                'extsvc.update_service(uuid,text,text,text,bigint,boolean,jsonb,text)'],
          'the mutating and status functions take an optional trailing tenant_organization_id');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname IN (SELECT fn FROM api)
                 GROUP BY p.proname HAVING count(*) > 1),
          ARRAY[]::text[], 'no API function is overloaded (no ambiguous old signature left)');
-- the gates: the admin ones for extsvc_admin only, the bodies for nobody
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname ~ '_as_admin$'
                   AND has_function_privilege('extsvc_api', p.oid, 'EXECUTE')
                 ORDER BY 1),
          ARRAY[]::text[], 'extsvc_api may execute no admin gate');
SELECT is((SELECT count(*)::int FROM pg_proc p
            WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname ~ '_as_admin$' AND p.prosecdef
              AND has_function_privilege('extsvc_admin', p.oid, 'EXECUTE')),
          7, 'extsvc_admin may execute the seven SECURITY DEFINER admin gates (rollback_service''s since issue 29)');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname ~ '_as_api$' AND p.prosecdef
                   AND has_function_privilege('extsvc_api', p.oid, 'EXECUTE')
                 ORDER BY 1),
          ARRAY['_create_service_as_api', '_delete_service_as_api', '_retry_service_as_api',
                '_rollback_service_as_api', '_update_service_as_api'],
          'extsvc_api may execute the five SECURITY DEFINER api gates (extsvc._create_gates makes them)');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace
                   AND p.proname IN ('_create_service', '_update_service', '_delete_service', '_allow_chart', '_disallow_chart',
                                     '_retry_service', '_rollback_service', '_mark_rollback', '_revision_data')
                   AND (p.prosecdef OR has_function_privilege('extsvc_admin', p.oid, 'EXECUTE')
                        OR has_function_privilege('extsvc_api', p.oid, 'EXECUTE'))
                 ORDER BY 1),
          ARRAY[]::text[], 'the bodies behind the gates are neither SECURITY DEFINER nor executable by the API roles');

-- nothing in the schema for PUBLIC
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')
                 ORDER BY 1),
          ARRAY[]::text[], 'no function in schema extsvc is executable by PUBLIC');
SELECT is(ARRAY(SELECT c.oid::regclass::text FROM pg_class c
                 WHERE c.relnamespace = 'extsvc'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p')
                   AND has_table_privilege('public', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE')
                 ORDER BY 1),
          ARRAY[]::text[], 'no table or view in schema extsvc is accessible to PUBLIC');
SELECT ok(NOT has_schema_privilege('public', 'extsvc', 'USAGE'), 'PUBLIC has no USAGE on schema extsvc');

-- every SECURITY DEFINER function pins search_path with pg_temp last
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.prosecdef
                   AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpg_temp$')
                 ORDER BY 1),
          ARRAY[]::text[], 'every SECURITY DEFINER function has search_path ending in pg_temp');
SELECT cmp_ok((SELECT count(*)::integer FROM pg_proc p WHERE p.pronamespace = 'extsvc'::regnamespace AND p.prosecdef),
              '>=', 18, 'the API functions are among the SECURITY DEFINER ones');

-- worker and operator functions are not part of the tenant API
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.claim(text,text,integer,integer)', 'EXECUTE'),
          'extsvc_api may not claim work');
SELECT ok(NOT has_function_privilege('extsvc_api',
            'extsvc.complete(text,text,bigint,uuid,jsonb)', 'EXECUTE'),
          'extsvc_api may not complete work');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.reconcile_now(uuid)', 'EXECUTE'), 'reconcile_now is not for extsvc_api');
SELECT ok(has_function_privilege('extsvc_admin', 'extsvc.reconcile_now(uuid)', 'EXECUTE'), 'reconcile_now is for extsvc_admin');
SELECT ok(has_function_privilege('extsvc_admin', 'extsvc.retry_service(uuid,text)', 'EXECUTE'), 'retry_service is for extsvc_admin');
SELECT ok(has_table_privilege('extsvc_api', 'extsvc.services', 'SELECT'), 'extsvc_api may read extsvc.services');
SELECT ok(NOT has_table_privilege('extsvc_api', 'extsvc.service_records', 'SELECT,INSERT,UPDATE,DELETE'),
          'extsvc_api has no direct access to the tables');

-- calls by real sessions
SELECT alike(pg_temp.as_user('extsvc_tap_nobody', $$SELECT extsvc.dpf_service_name('00000000-0000-0000-0000-000000000000', 'V1-T1')$$),
            '42501: permission denied for %', 'a role without grants gets 42501 permission denied');
SELECT alike(pg_temp.as_user('extsvc_tap_nobody', $$SELECT extsvc.create_service('t', 'n', 'KUBERNETES_POD', 'pod')$$),
            '42501: permission denied for %', 'a role without grants cannot create');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.create_service('t', 'tenant-svc', 'DPF_HELM_CHART',
            '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
            dpu_target => 'PRIMARY', service_id => 'f0000000-0000-0000-0000-000000000001')$$),
          'ok', 'an extsvc_api member creates an INSTANCE_DPUS service');
SELECT is((SELECT created_by FROM extsvc.helm_revisions WHERE service_id = 'f0000000-0000-0000-0000-000000000001'),
          'extsvc_tap_tenant', 'the revision records the calling session user');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.update_service('f0000000-0000-0000-0000-000000000001', description => 'd')$$),
          'ok', 'an extsvc_api member updates');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT count(*) FROM extsvc.services$$), 'ok', 'an extsvc_api member reads the view');
SELECT alike(pg_temp.as_user('extsvc_tap_tenant', $$UPDATE extsvc.service_records SET lifecycle_state = 'READY'$$),
            '42501: permission denied for table service_records', 'an extsvc_api member cannot write the tables');
SELECT alike(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.reconcile_now()$$),
            '42501: permission denied for function reconcile_now', 'an extsvc_api member cannot use operator functions');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.create_service('t', 'site', 'DPF_HELM_CHART',
            '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
            deployment_scope => 'ALL_DPUS')$$),
          '42501: only extsvc_admin members may create ALL_DPUS services', 'only extsvc_admin may create ALL_DPUS');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.allow_chart('oci://registry.example.com/charts')$$),
          '42501: only extsvc_admin members may change the chart allow-list', 'only extsvc_admin may allow charts');
SELECT is(pg_temp.as_user('extsvc_tap_operator', $$SELECT extsvc.create_service('t', 'site', 'DPF_HELM_CHART',
            '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
            deployment_scope => 'ALL_DPUS', service_id => 'f0000000-0000-0000-0000-000000000002')$$),
          'ok', 'an extsvc_admin member creates an ALL_DPUS service');
SELECT is((SELECT deployment_scope FROM extsvc.services WHERE service_id = 'f0000000-0000-0000-0000-000000000002'),
          'ALL_DPUS', 'the ALL_DPUS service exists');
SELECT is(pg_temp.as_user('extsvc_tap_operator', $$SELECT extsvc.allow_chart('oci://registry.example.com/charts', 'svc')$$),
          'ok', 'an extsvc_admin member allows a chart');
SELECT is((SELECT added_by FROM extsvc.chart_allowlist WHERE repo_url = 'oci://registry.example.com/charts'),
          'extsvc_tap_operator', 'the allow-list entry records who added it');
SELECT is(pg_temp.as_user('extsvc_tap_operator', $$SELECT extsvc.reconcile_now()$$), 'ok', 'an extsvc_admin member may reconcile_now');
SELECT is(session_user::text, current_user::text, 'session authorization restored');

SELECT * FROM finish();
ROLLBACK;
