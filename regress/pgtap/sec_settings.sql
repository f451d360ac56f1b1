-- Issue 29, item 6 (with shared_preload_libraries; regress/nopreload covers
-- a server without it): site rules are settings only a superuser (or a
-- reload of postgresql.conf) changes, and the SQL reads every extsvc.*
-- setting through extsvc._setting(), a C function, never current_setting():
-- calling it loads the library, and loading defines the real settings, so a
-- placeholder a session set before is never what the SQL sees.
BEGIN;
\ir helpers.psql
SELECT plan(14);

SET LOCAL client_min_messages = warning;

CREATE ROLE extsvc_tap_set_nico LOGIN IN ROLE extsvc_api;

-- the site rules are superuser-only settings
SELECT results_eq($$SELECT name::text, context::text FROM pg_settings
                     WHERE name IN ('extsvc.refuse_pod_services_on_dpf_hosts', 'extsvc.enforce_chart_allowlist',
                                    'extsvc.allow_privileged', 'extsvc.observation_max_age')
                     ORDER BY name$$,
                  $$VALUES ('extsvc.allow_privileged', 'superuser'), ('extsvc.enforce_chart_allowlist', 'superuser'),
                           ('extsvc.observation_max_age', 'superuser'),
                           ('extsvc.refuse_pod_services_on_dpf_hosts', 'superuser')$$,
                  'the site rules (allow_privileged, enforce_chart_allowlist, observation_max_age, refuse_pod_services_on_dpf_hosts) are superuser settings');
SELECT is(pg_temp.as_user('extsvc_tap_set_nico', 'SET extsvc.refuse_pod_services_on_dpf_hosts = off'),
          '42501: permission denied to set parameter "extsvc.refuse_pod_services_on_dpf_hosts"',
          'an extsvc_api login cannot SET refuse_pod_services_on_dpf_hosts');
SELECT is(pg_temp.as_user('extsvc_tap_set_nico', $$SELECT set_config('extsvc.enforce_chart_allowlist', 'off', true)$$),
          '42501: permission denied to set parameter "extsvc.enforce_chart_allowlist"',
          'nor enforce_chart_allowlist through set_config');
SELECT is(pg_temp.as_user('extsvc_tap_set_nico', 'SET extsvc.allow_privileged = on'),
          '42501: permission denied to set parameter "extsvc.allow_privileged"',
          'nor allow_privileged');
SELECT is(pg_temp.as_user('extsvc_tap_set_nico', 'SET extsvc.observation_max_age = ''1000h'''),
          '42501: permission denied to set parameter "extsvc.observation_max_age"',
          'nor observation_max_age');
SELECT is(pg_temp.as_user('extsvc_tap_set_nico', 'SET extsvc.no_such_rule = off'),
          '42602: invalid configuration parameter name "extsvc.no_such_rule"',
          'and no new extsvc.* placeholder can be made once the library is loaded');

-- the rule holds for the session that tried
SET LOCAL extsvc.refuse_pod_services_on_dpf_hosts = on;
SELECT lives_ok($$SELECT extsvc.create_service('set-t', 'set-pod', 'KUBERNETES_POD', 'kind: Pod',
                   service_id => '5d000000-0000-0000-0000-000000000001')$$, 'fixture: a KUBERNETES_POD service');
SELECT lives_ok($$SELECT extsvc.upsert_instance('5d100000-0000-0000-0000-000000000001', 'set-t',
                   'fm100hs5d20000000000000000000000000000100000000000000000000')$$, 'fixture: a DPF-managed instance');
SELECT is(left(pg_temp.as_user('extsvc_tap_set_nico', $$SELECT extsvc.set_instance_extension_services('5d100000-0000-0000-0000-000000000001',
            (SELECT jsonb_build_array(jsonb_build_object('service_id', service_id, 'version', version))
               FROM extsvc.services WHERE service_id = '5d000000-0000-0000-0000-000000000001'))$$), 70),
          '22023: KUBERNETES_POD services are refused on DPF-managed hosts',
          'the attach is refused: the rule is on');

-- the SQL reads extsvc.* settings only through extsvc._setting (C)
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.prolang <> (SELECT l.oid FROM pg_language l WHERE l.lanname = 'c')
                   AND p.prosrc ~* 'current_setting\s*\(\s*''extsvc\.'
                 ORDER BY 1),
          ARRAY[]::text[], 'no SQL function of the extension reads an extsvc.* setting with current_setting()');
SELECT is(extsvc._setting('extsvc.refuse_pod_services_on_dpf_hosts'), 'on', 'extsvc._setting reads the setting');
SELECT is(extsvc._setting('extsvc.enforce_chart_allowlist'), 'on', 'extsvc._setting reads the allow-list rule');
SELECT throws_ok($$SELECT extsvc._setting('search_path')$$, '22023', NULL,
                 'extsvc._setting reads extsvc.* settings only');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc._setting(text)', 'EXECUTE'),
          'extsvc._setting is not granted to the API roles');

SELECT * FROM finish();
ROLLBACK;
