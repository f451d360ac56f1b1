-- Issues #12 and #14: the reads NICo's database layer and operators need
-- (service_versions, service_snapshots, get_instance, service_instances,
-- site_service_status), their grants, the tenant argument of issue #10, and
-- P0002 for an unknown instance in every instance status function.
BEGIN;
\ir helpers.psql
SELECT plan(84);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.1","security":{"privileged":false}}'
\set P '''8a000000-0000-0000-0000-000000000001'''
\set D '''8a000000-0000-0000-0000-000000000002'''
\set S '''8a000000-0000-0000-0000-000000000003'''
\set F '''8a000000-0000-0000-0000-000000000004'''
\set Q '''8a000000-0000-0000-0000-000000000005'''
\set U '''8a000000-0000-0000-0000-0000000000ff'''
\set H '''fm100hs8c00000000000000000000000000000100000000000000000000'''
\set DA '''fm100ds8d00000000000000000000000000000a00000000000000000000'''
\set DB '''fm100ds8d00000000000000000000000000000b00000000000000000000'''
\set I1 '''81000000-0000-0000-0000-000000000001'''
\set I2 '''81000000-0000-0000-0000-000000000002'''
\set IU '''81000000-0000-0000-0000-0000000000ff'''

GRANT EXECUTE ON FUNCTION pg_temp.as_user(name, text) TO PUBLIC;

CREATE ROLE extsvc_tap_reads_nobody LOGIN;
CREATE ROLE extsvc_tap_reads_tenant LOGIN IN ROLE extsvc_api;

------------------------------------------------------------------ grants
CREATE TEMP TABLE reads (fn text, args text[]);
INSERT INTO reads VALUES
  ('service_versions', ARRAY['uuid', 'text[]', 'boolean', 'text']),
  ('service_snapshots', ARRAY['uuid[]', 'text']),
  ('get_instance', ARRAY['uuid', 'text']),
  ('service_instances', ARRAY['uuid', 'text', 'text']),
  ('site_service_status', ARRAY['uuid', 'text']);
SELECT function_privs_are('extsvc', fn, args, 'extsvc_api', ARRAY['EXECUTE'], 'extsvc_api may execute extsvc.' || fn)
  FROM reads ORDER BY fn;
SELECT function_privs_are('extsvc', fn, args, 'extsvc_admin', ARRAY['EXECUTE'], 'extsvc_admin may execute extsvc.' || fn)
  FROM reads ORDER BY fn;
SELECT function_privs_are('extsvc', fn, args, 'extsvc_tap_reads_nobody', ARRAY[]::text[],
                          'a role without grants may not execute extsvc.' || fn)
  FROM reads ORDER BY fn;
SELECT is(ARRAY(SELECT fn FROM reads JOIN pg_proc p ON p.oid = format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure
                 WHERE NOT (p.prosecdef AND p.provolatile = 's'
                            AND EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpg_temp$')
                            AND obj_description(p.oid, 'pg_proc') IS NOT NULL
                            AND 'tenant_organization_id' = p.proargnames[p.pronargs] AND p.pronargdefaults > 0)
                 ORDER BY fn),
          ARRAY[]::text[],
          'every read is STABLE SECURITY DEFINER, search_path ending in pg_temp, commented, with an optional trailing tenant_organization_id');

------------------------------------------------------------------ fixtures
SELECT extsvc.register_dpu(:DA, :H, 'reads-dpu-a', 'reads-node-a', true);
SELECT extsvc.register_dpu(:DB, :H, 'reads-dpu-b', 'reads-node-b', false);
SELECT extsvc.create_service('reads-t', 'pod', 'KUBERNETES_POD', 'kind: Pod', service_id => :P,
                             has_credential => true, observability => '{"configs": [{"name": "m", "config": {"Prometheus": {"endpoint": "agent:9090", "scrape_interval_seconds": 30}}}]}');
SELECT extsvc.update_service(:P, 'kind: Pod2', has_credential => true, observability => '{"configs": [{"name": "m", "config": {"Prometheus": {"endpoint": "agent:9090", "scrape_interval_seconds": 30}}}]}');
SELECT extsvc.update_service(:P, 'kind: Pod3', has_credential => true, observability => '{"configs": [{"name": "m", "config": {"Prometheus": {"endpoint": "agent:9090", "scrape_interval_seconds": 30}}}]}');
SELECT extsvc.create_service('reads-t', 'dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :D);
SELECT extsvc.update_service(:D, :'chart2');
SELECT extsvc.create_service('reads-t', 'site', 'DPF_HELM_CHART', :'chart', deployment_scope => 'ALL_DPUS', service_id => :S);
SELECT extsvc.create_service('reads-other', 'foreign', 'KUBERNETES_POD', 'kind: Pod', service_id => :F);
SELECT extsvc.create_service('reads-t', 'pod2', 'KUBERNETES_POD', 'kind: Pod', service_id => :Q);

------------------------------------------------------------------ service_versions
SELECT is(ARRAY(SELECT version_number FROM extsvc.service_versions(:P)), ARRAY[3, 2, 1], 'service_versions: newest first');
SELECT is(ARRAY(SELECT data FROM extsvc.service_versions(:P)), ARRAY['kind: Pod3', 'kind: Pod2', 'kind: Pod'],
          'service_versions: a Pod version''s data as given');
SELECT is((SELECT bool_and(has_credential AND observability = '{"configs": [{"name": "m", "config": {"Prometheus": {"endpoint": "agent:9090", "scrape_interval_seconds": 30}}}]}') FROM extsvc.service_versions(:P)), true,
          'service_versions: has_credential and observability carried per version');
SELECT extsvc.delete_service(:P, (SELECT version FROM extsvc.service_versions(:P) WHERE version_number = 2));
SELECT is(ARRAY(SELECT version_number FROM extsvc.service_versions(:P)), ARRAY[3, 1], 'service_versions: a deleted version is hidden');
SELECT is(ARRAY(SELECT version_number FROM extsvc.service_versions(:P, include_deleted => true)), ARRAY[3, 2, 1],
          'service_versions: include_deleted shows it');
SELECT ok((SELECT deleted_at IS NOT NULL FROM extsvc.service_versions(:P, include_deleted => true) WHERE version_number = 2),
          'service_versions: deleted_at set on the deleted version');
SELECT is(ARRAY(SELECT version_number FROM extsvc.service_versions(:P,
             ARRAY[(SELECT version FROM extsvc.service_versions(:P) WHERE version_number = 1), 'V9-T9'])),
          ARRAY[1], 'service_versions: the versions filter; unknown strings are simply absent');
SELECT is((SELECT data::jsonb FROM extsvc.service_versions(:D)), extsvc.validate_dpf_helm_chart_data(:'chart2'),
          'service_versions: a DPF version''s data is the desired revision''s normalized definition');
SELECT is((SELECT count(*)::int FROM extsvc.service_versions(:D)), 1, 'service_versions: a DPF service has one version');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.service_versions(%L)', :U)),
          'P0002 | service_id: 8a000000-0000-0000-0000-0000000000ff', 'service_versions: unknown service -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_versions(%L, tenant_organization_id => %L)', :F, 'reads-t')), 5),
          '42501', 'service_versions: another tenant''s service -> 42501');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_versions(%L, tenant_organization_id => %L)', :U, 'reads-t')), 5),
          '42501', 'service_versions: with a tenant, an unknown service gets the same 42501');
SELECT is((SELECT count(*)::int FROM extsvc.service_versions(:P, tenant_organization_id => 'reads-t')), 2,
          'service_versions: the owning tenant reads its versions');

------------------------------------------------------------------ service_snapshots
SELECT is(ARRAY(SELECT service_name FROM extsvc.service_snapshots(ARRAY[:D, :U, :P, :F]::uuid[])),
          ARRAY['dpf', 'pod', 'foreign'], 'service_snapshots: known ids in the order given, unknown ids absent');
SELECT is(ARRAY(SELECT service_name FROM extsvc.service_snapshots(ARRAY[:D, :P, :F]::uuid[], 'reads-t')),
          ARRAY['dpf', 'pod'], 'service_snapshots: with a tenant, other tenants'' services are absent');
SELECT is((SELECT active_versions FROM extsvc.service_snapshots(ARRAY[:P]::uuid[])),
          ARRAY(SELECT version FROM extsvc.service_versions(:P)), 'service_snapshots: active_versions newest first');
SELECT is((SELECT row(latest_data, latest_has_credential, latest_observability)::text FROM extsvc.service_snapshots(ARRAY[:P]::uuid[])),
          row('kind: Pod3', true, '{"configs": [{"name": "m", "config": {"Prometheus": {"endpoint": "agent:9090", "scrape_interval_seconds": 30}}}]}'::jsonb)::text, 'service_snapshots: the latest version''s data, has_credential, observability');
SELECT is((SELECT latest_data::jsonb FROM extsvc.service_snapshots(ARRAY[:D]::uuid[])), extsvc.validate_dpf_helm_chart_data(:'chart2'),
          'service_snapshots: a DPF service''s latest data is the desired revision');
SELECT is((SELECT row(lifecycle_state, version_ctr, desired_revision, state_reason, state_actor)::text
             FROM extsvc.service_snapshots(ARRAY[:D]::uuid[])),
          row('CREATING', 2, 2, 'update', 'api')::text, 'service_snapshots: the service fields and the last reason');
SELECT is((SELECT row(state_since IS NOT NULL, state_since <= state_changed_at, attempts)::text
             FROM extsvc.service_snapshots(ARRAY[:D]::uuid[])),
          row(true, true, 0)::text, 'service_snapshots: state_since (time in state) and the worker''s attempts');
CREATE TEMP TABLE lv AS SELECT lifecycle_version FROM extsvc.service_snapshots(ARRAY[:D]::uuid[]);
SELECT extsvc.update_service(:D, :'chart');
SELECT cmp_ok((SELECT lifecycle_version FROM extsvc.service_snapshots(ARRAY[:D]::uuid[])), '>', (SELECT lifecycle_version FROM lv),
              'service_snapshots: lifecycle_version grows with every lifecycle event');
SELECT is((SELECT delete_requested_at FROM extsvc.service_snapshots(ARRAY[:Q]::uuid[])), NULL,
          'service_snapshots: delete_requested_at NULL before a delete');
SELECT extsvc.delete_service(:Q);
SELECT ok((SELECT delete_requested_at IS NOT NULL AND active_versions = '{}' FROM extsvc.service_snapshots(ARRAY[:Q]::uuid[])),
          'service_snapshots: delete_requested_at set and no active versions after a delete');

------------------------------------------------------------------ get_instance
-- make the DPF service READY (the worker's part)
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id IN (:D, :S);
SELECT extsvc.upsert_instance(:I1, 'reads-t', :H, ARRAY[:DA]::text[], true);
-- (I2 and the instance below on hosts of their own: a host holds one live instance, issue 29)
SELECT extsvc.upsert_instance(:I2, 'reads-t', 'fm100hs8c00000000000000000000000000000200000000000000000000', NULL, false);
SELECT is((SELECT row(config_version, network_dpus, dpf_managed, delete_requested_at, services)::text FROM extsvc.get_instance(:I1)),
          row(1, ARRAY[:DA]::text[], true, NULL::timestamptz, '[]'::jsonb)::text, 'get_instance: a fresh instance');
SELECT is(extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object('service_id', :D, 'version',
            (SELECT version FROM extsvc.services WHERE service_id = :D)))), 2, 'attach the DPF service');
SELECT is(extsvc.set_instance_extension_services(:I1, '[]'), 3, 'detach it: a tombstone');
SELECT is((SELECT config_version FROM extsvc.get_instance(:I1)), 3, 'get_instance: config_version');
SELECT is((SELECT jsonb_array_length(services) FROM extsvc.get_instance(:I1)), 1, 'get_instance: the tombstone is listed');
SELECT ok((SELECT services->0->>'removed_at' IS NOT NULL AND services->0->>'service_id' = :D
                  AND services->0->>'service_type' = 'DPF_HELM_CHART' AND services->0 ? 'attached_at'
             FROM extsvc.get_instance(:I1)), 'get_instance: the entry with removed_at, type and attached_at');
SELECT extsvc.set_instance_extension_services(:I2, jsonb_build_array(jsonb_build_object('service_id', :P, 'version',
            (SELECT version FROM extsvc.services WHERE service_id = :P))));
SELECT is((SELECT row(dpf_managed, services->0->>'removed_at', services->0->>'service_name')::text FROM extsvc.get_instance(:I2)),
          row(false, NULL::text, 'pod')::text, 'get_instance: an active Pod entry on a host without DPF');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.get_instance(%L)', :IU)),
          'P0002 | instance_id: 81000000-0000-0000-0000-0000000000ff', 'get_instance: unknown instance -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.get_instance(%L, %L)', :I1, 'reads-other')), 5), '42501',
          'get_instance: another tenant''s instance -> 42501');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.get_instance(%L, %L)', :IU, 'reads-other')), 5), '42501',
          'get_instance: with a tenant, an unknown instance gets the same 42501');
SELECT is(pg_temp.as_user('extsvc_tap_reads_tenant', format('SELECT * FROM extsvc.get_instance(%L, %L)', :I1, 'reads-t')),
          'ok', 'get_instance: an extsvc_api member reads its instance');
SELECT alike(pg_temp.as_user('extsvc_tap_reads_nobody', format('SELECT * FROM extsvc.get_instance(%L)', :I1)),
             '42501: permission denied for %', 'get_instance: a role without grants gets permission denied');

------------------------------------------------------------------ config version string (issue #14 P1-7)
SELECT matches((SELECT config_version_text FROM extsvc.get_instance(:I1)), '^V3-T[0-9]{16}$',
               'get_instance: config_version_text is V<config_version>-T<microseconds>');
CREATE TEMP TABLE cvt AS SELECT config_version_text AS t FROM extsvc.get_instance(:I1);
SELECT extsvc.upsert_instance(:I1, 'reads-t', :H, ARRAY[:DA]::text[]);
SELECT is((SELECT config_version_text FROM extsvc.get_instance(:I1)), (SELECT t FROM cvt),
          'config_version_text is stable while config_version does not change');
SELECT is((SELECT array_agg(DISTINCT config_version_text) FROM extsvc.instance_extension_service_status(:I1)),
          ARRAY[(SELECT t FROM cvt)], 'instance_extension_service_status rows carry it');
SELECT is((SELECT array_agg(DISTINCT row(config_version, config_version_text)::text) FROM extsvc.instance_extension_services_summary(:I1)),
          ARRAY[row(3, (SELECT t FROM cvt))::text], 'instance_extension_services_summary rows carry both');
SELECT matches((SELECT config_version_text FROM extsvc.get_instance(:I2)), '^V2-T[0-9]{16}$', 'and it follows each change');
-- one call returns both (SPEC 6 keeps set_instance_extension_services'
-- integer), and the agent feeds carry the string the agent echoes
SELECT extsvc.register_dpu('fm100ds8d0000000000000000000000000000f500000000000000000000', 'fm100hs8c00000000000000000000000000000300000000000000000000', 'reads-dpu-f5', 'reads-node-f5', true);
SELECT extsvc.upsert_instance('81000000-0000-0000-0000-0000000000f5', 'reads-t', 'fm100hs8c00000000000000000000000000000300000000000000000000', ARRAY[]::text[]);
CREATE TEMP TABLE cfg5 AS SELECT jsonb_build_array(jsonb_build_object('service_id', :P,
    'version', (SELECT version FROM extsvc.services WHERE service_id = :P))) AS c;
CREATE TEMP TABLE vv AS SELECT * FROM extsvc.set_instance_extension_services_versioned(
    '81000000-0000-0000-0000-0000000000f5', (SELECT c FROM cfg5));
SELECT is((SELECT row(config_version, config_version_text)::text FROM vv),
          (SELECT row(config_version, config_version_text)::text FROM extsvc.get_instance('81000000-0000-0000-0000-0000000000f5')),
          'set_instance_extension_services_versioned: the new config_version and the string get_instance shows');
SELECT ok((SELECT config_version_text ~ ('^V' || config_version || '-T[0-9]{16}$') FROM vv),
          'set_instance_extension_services_versioned: the string is V<config_version>-T<microseconds>');
SELECT is((SELECT row(config_version, config_version_text)::text
             FROM extsvc.set_instance_extension_services_versioned('81000000-0000-0000-0000-0000000000f5', (SELECT c FROM cfg5))),
          (SELECT row(config_version, config_version_text)::text FROM vv),
          'set_instance_extension_services_versioned: the same configuration again keeps both');
SELECT ok((SELECT a = b AND a <> 'ok'
             FROM (SELECT pg_temp.err(format('SELECT * FROM extsvc.set_instance_extension_services_versioned(%L, %L, 99)',
                                             '81000000-0000-0000-0000-0000000000f5', (SELECT c FROM cfg5))) AS a,
                          pg_temp.err(format('SELECT extsvc.set_instance_extension_services(%L, %L, 99)',
                                             '81000000-0000-0000-0000-0000000000f5', (SELECT c FROM cfg5))) AS b) e),
          'set_instance_extension_services_versioned: the errors of set_instance_extension_services (a stale if_config_version_match)');
SELECT is((SELECT array_agg(DISTINCT row(config_version, config_version_text)::text) FROM extsvc.dpu_agent_extension_services('fm100ds8d0000000000000000000000000000f500000000000000000000')
            WHERE instance_id = '81000000-0000-0000-0000-0000000000f5'),
          ARRAY[(SELECT row(config_version, config_version_text)::text FROM vv)],
          'dpu_agent_extension_services rows carry config_version and its string');
SELECT is((SELECT array_agg(DISTINCT row(config_version, config_version_text)::text) FROM extsvc.host_agent_extension_services('fm100hs8c00000000000000000000000000000300000000000000000000')
            WHERE instance_id = '81000000-0000-0000-0000-0000000000f5'),
          ARRAY[(SELECT row(config_version, config_version_text)::text FROM vv)],
          'host_agent_extension_services rows carry config_version and its string');
SELECT extsvc.deregister_dpu('fm100ds8d0000000000000000000000000000f500000000000000000000');  -- (out of the site status below)
-- the writes and feeds NICo calls besides the reads above
SELECT function_privs_are('extsvc', fn, args, r, CASE WHEN r = 'extsvc_tap_reads_nobody' THEN ARRAY[]::text[] ELSE ARRAY['EXECUTE'] END,
                          format('%s: EXECUTE on extsvc.%s is %s', r, fn, CASE WHEN r = 'extsvc_tap_reads_nobody' THEN 'refused' ELSE 'granted' END))
  FROM (VALUES ('set_instance_extension_services_versioned', ARRAY['uuid', 'jsonb', 'bigint', 'text']),
               ('delete_service_versions', ARRAY['uuid', 'text[]', 'text']),
               ('host_agent_extension_services', ARRAY['text'])) f(fn, args)
  CROSS JOIN unnest(ARRAY['extsvc_api', 'extsvc_tap_reads_nobody']) r ORDER BY fn, r;

------------------------------------------------------------------ unknown instance: P0002 everywhere
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.%s(%L)', fn, :IU)),
          'P0002 | instance_id: 81000000-0000-0000-0000-0000000000ff', fn || ': unknown instance -> P0002')
  FROM unnest(ARRAY['instance_extension_service_status', 'instance_extension_services_summary',
                    'instance_extension_services_ready', 'get_instance']) fn;

------------------------------------------------------------------ service_instances
SELECT is((SELECT array_agg(row(instance_id, removed_at IS NOT NULL)::text) FROM extsvc.service_instances(:D)),
          ARRAY[row(:I1::uuid, true)::text], 'service_instances: the tombstone is listed with removed_at');
SELECT is((SELECT array_agg(instance_id ORDER BY instance_id) FROM extsvc.service_instances(:P, (SELECT version FROM extsvc.services WHERE service_id = :P))),
          ARRAY[:I2::uuid, '81000000-0000-0000-0000-0000000000f5'], 'service_instances: filtered by version (the versioned-call instance has it too)');
SELECT is((SELECT count(*)::int FROM extsvc.service_instances(:P, (SELECT version FROM extsvc.service_versions(:P) WHERE version_number = 1))),
          0, 'service_instances: a version nobody uses has no rows');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.service_instances(%L, %L)', :P, 'V9-T9')),
          'P0002 | service_id: 8a000000-0000-0000-0000-000000000001, version: V9-T9', 'service_instances: unknown version -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_instances(%L)', :U)), 5), 'P0002',
          'service_instances: unknown service -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_instances(%L, tenant_organization_id => %L)', :F, 'reads-t')), 5),
          '42501', 'service_instances: another tenant''s service -> 42501');

------------------------------------------------------------------ site_service_status
SET LOCAL nico_extsvc.actor = 'worker';  -- fixture: what the worker would record
INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state, status_message)
VALUES (:S, :DA, 'RUNNING', 'pod ready');
SET LOCAL nico_extsvc.actor = '';
SELECT is(ARRAY(SELECT row(dpu_device_name, deployment_state, status_message, observed_at IS NOT NULL)::text
                  FROM extsvc.site_service_status(:S)),
          ARRAY[row('reads-dpu-a', 'RUNNING', 'pod ready', true)::text, row('reads-dpu-b', 'UNKNOWN', 'not observed yet', false)::text],
          'site_service_status: observed rows, and UNKNOWN for a registered DPU not observed yet');
SELECT is((SELECT array_agg(dpu_machine_id ORDER BY dpu_device_name) FROM extsvc.site_service_status(:S)),
          ARRAY[:DA, :DB]::text[], 'site_service_status: dpu_machine_id');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.site_service_status(%L)', :D)),
          '22023 | service_id: 8a000000-0000-0000-0000-000000000002, deployment_scope: INSTANCE_DPUS',
          'site_service_status: an INSTANCE_DPUS service -> 22023');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.site_service_status(%L)', :U)), 5), 'P0002',
          'site_service_status: unknown service -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.site_service_status(%L, %L)', :S, 'reads-other')), 5), '42501',
          'site_service_status: another tenant''s service -> 42501');
SELECT is(pg_temp.as_user('extsvc_tap_reads_tenant', format('SELECT * FROM extsvc.site_service_status(%L)', :S)),
          'ok', 'site_service_status: an extsvc_api member may read it');

SELECT * FROM finish();
ROLLBACK;
