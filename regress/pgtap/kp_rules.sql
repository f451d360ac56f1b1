-- Issue #14: KUBERNETES_POD rules as NICo has them: credential rotation makes
-- a new version (P0-5), a version with data is a full spec (P1-10),
-- tombstones and deleting instances keep a service in use (P0-6), NICo
-- confirms terminated tombstones (P1-8), the instance deletion probe and
-- configs_synced of an entry without attachment rows (P1-13).
BEGIN;
\ir helpers.psql
SELECT plan(49);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set P '''5a000000-0000-0000-0000-000000000001'''
\set Q '''5a000000-0000-0000-0000-000000000002'''
\set D '''5a000000-0000-0000-0000-000000000003'''
\set H1 '''fm100hs5c00000000000000000000000000000100000000000000000000'''
\set H2 '''fm100hs5c00000000000000000000000000000200000000000000000000'''
\set I1 '''51000000-0000-0000-0000-000000000001'''
\set I2 '''51000000-0000-0000-0000-000000000002'''
\set I3 '''51000000-0000-0000-0000-000000000003'''
\set IU '''51000000-0000-0000-0000-0000000000ff'''

-- [{service_id, version}] of one version (the latest when vnum is NULL)
CREATE FUNCTION pg_temp.entry(id uuid, vnum integer DEFAULT NULL) RETURNS jsonb LANGUAGE sql AS $$
  SELECT jsonb_build_array(jsonb_build_object('service_id', id, 'version', v.version))
    FROM extsvc.service_versions v WHERE v.service_id = id
   ORDER BY (v.version_number = vnum) DESC NULLS LAST, v.version_number DESC LIMIT 1
$$;

------------------------------------------------------------------ grants
SELECT function_privs_are('extsvc', 'remove_terminated_services', ARRAY['uuid', 'jsonb', 'text'], 'extsvc_api', ARRAY['EXECUTE'],
                          'extsvc_api may execute extsvc.remove_terminated_services');
SELECT function_privs_are('extsvc', 'instance_extension_services_terminated', ARRAY['uuid', 'text'], 'extsvc_api', ARRAY['EXECUTE'],
                          'extsvc_api may execute extsvc.instance_extension_services_terminated');
SELECT ok(NOT has_function_privilege('public', 'extsvc.remove_terminated_services(uuid,jsonb,text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'extsvc.instance_extension_services_terminated(uuid,text)', 'EXECUTE'),
          'PUBLIC may execute neither');
SELECT ok((SELECT bool_and(p.prosecdef AND obj_description(p.oid, 'pg_proc') IS NOT NULL) FROM pg_proc p
            WHERE p.oid IN ('extsvc.remove_terminated_services(uuid,jsonb,text)'::regprocedure,
                            'extsvc.instance_extension_services_terminated(uuid,text)'::regprocedure)),
          'both are SECURITY DEFINER and commented');

------------------------------------------------------------------ P0-5 credential rotation, P1-10 full spec
SELECT extsvc.create_service('kp-t', 'kp', 'KUBERNETES_POD', 'kind: Pod', service_id => :P, has_credential => true,
                             observability => '{"configs": [{"name": "logs", "config": {"Logging": {"path": "/var/log/agent.log"}}}]}');
SELECT is((extsvc.update_service(:P, 'kind: Pod', has_credential => true)).version_ctr, 2,
          'same data with has_credential => true (a rotated credential): a new version, version_ctr 2');
SELECT is((SELECT max(version_number) FROM extsvc.service_versions v WHERE v.service_id = :P), 2,
          'the new version''s number is the returned version_ctr (NICo''s Vault key)');
SELECT is((SELECT observability FROM extsvc.service_versions(:P) WHERE version_number = 2), NULL,
          'a version with data is a full spec: omitted observability means none');
SELECT is((extsvc.update_service(:P, 'kind: Pod', has_credential => true)).version_ctr, 3,
          'every rotation is a new version');
SELECT is((extsvc.update_service(:P, 'kind: Pod')).version_ctr, 4,
          'the same data without has_credential drops the credential: a new version');
SELECT is((SELECT has_credential FROM extsvc.service_versions(:P) WHERE version_number = 4), false,
          'omitted has_credential with data means none');
SELECT is((extsvc.update_service(:P, 'kind: Pod')).version_ctr, 4, 'the same full spec again is a no-op');
SELECT is((extsvc.update_service(:P, 'kind: Pod', has_credential => false)).version_ctr, 4,
          'has_credential => false with the same spec is a no-op too');
SELECT is((extsvc.update_service(:P, observability => '{"configs": []}')).version_ctr, 5,
          'observability alone: a new version carrying the data');
SELECT is((SELECT row(data, observability)::text FROM extsvc.service_versions(:P) WHERE version_number = 5),
          row('kind: Pod', '{"configs": []}'::jsonb)::text, 'the data is carried over');
SELECT is((SELECT row(has_credential, observability)::text FROM extsvc.services WHERE service_id = :P),
          row(false, '{"configs": []}'::jsonb)::text, 'extsvc.services shows the latest version''s flags');
SELECT matches((SELECT message FROM extsvc.service_history WHERE service_id = :P AND reason = 'new_version' ORDER BY id LIMIT 1),
               '^version V2-T[0-9]+ \(credential provided\)$', 'the history says a credential was provided');

------------------------------------------------------------------ P0-6 in use, P1-8 tombstones
SELECT extsvc.upsert_instance(:I1, 'kp-t', :H1, NULL, false);
SELECT extsvc.upsert_instance(:I2, 'kp-t', :H2, NULL, false);
SELECT extsvc.create_service('kp-t', 'kp2', 'KUBERNETES_POD', 'kind: Pod', service_id => :Q);
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.entry(:Q)), 2, 'attach kp2 to I1');
SELECT is(extsvc.set_instance_extension_services(:I1, '[]'), 3, 'detach it: a tombstone');
SELECT is(pg_temp.err(format('SELECT extsvc.delete_service(%L)', :Q)), '55000 | instances: 51000000-0000-0000-0000-000000000001',
          'P0-6: an unconfirmed tombstone keeps the service in use (55000)');
SELECT is(pg_temp.err(format('SELECT extsvc.remove_terminated_services(%L, %L)', :I1, '{}')), '22023 | JSON path: $',
          'remove_terminated_services: not an array -> 22023');
SELECT is(pg_temp.err(format('SELECT extsvc.remove_terminated_services(%L, %L)', :I1, '[{"service_id": "x"}]')), '22023 | JSON path: $[0]',
          'remove_terminated_services: a bad entry -> 22023');
SELECT is(left(pg_temp.err(format('SELECT extsvc.remove_terminated_services(%L, %L)', :IU, '[]')), 5), 'P0002',
          'remove_terminated_services: unknown instance -> P0002');
SELECT is(left(pg_temp.err(format('SELECT extsvc.remove_terminated_services(%L, %L, %L)', :I1, '[]', 'kp-other')), 5), '42501',
          'remove_terminated_services: another tenant''s instance -> 42501');
SELECT is(extsvc.set_instance_extension_services(:I2, pg_temp.entry(:Q)), 2, 'attach kp2 to I2');
SELECT is(pg_temp.err(format('SELECT extsvc.remove_terminated_services(%L, %L)', :I2, pg_temp.entry(:Q))),
          format('55000 | instance_id: 51000000-0000-0000-0000-000000000002; entries: %s/%s (still active)', :Q,
                 (SELECT version FROM extsvc.services WHERE service_id = :Q)),
          'remove_terminated_services: an active entry -> 55000 naming it');
SELECT is(extsvc.remove_terminated_services(:I1, pg_temp.entry(:Q)), 1, 'NICo confirms I1''s tombstone terminated');
SELECT is((SELECT row(config_version, jsonb_array_length(services))::text FROM extsvc.get_instance(:I1)), row(3, 0)::text,
          'the tombstone is gone, config_version unchanged');
SELECT extsvc.delete_instance(:I2);
SELECT ok(EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I2),
          'P1-8: a deleted KUBERNETES_POD instance stays with its removed entries');
SELECT ok((SELECT bool_and(removed_at IS NOT NULL) FROM extsvc.instance_extension_services WHERE instance_id = :I2),
          'and its entries are removed (the DPU agent sees them removed)');
SELECT is(pg_temp.err(format('SELECT extsvc.delete_service(%L)', :Q)), '55000 | instances: 51000000-0000-0000-0000-000000000002',
          'P0-6: an instance being deleted keeps the service in use');
SELECT is(extsvc.instance_extension_services_terminated(:I2), false, 'P1-13: not terminated while the instance exists');
SELECT is(extsvc.remove_terminated_services(:I2, pg_temp.entry(:Q)), 1, 'NICo confirms the termination');
SELECT is(extsvc.instance_extension_services_terminated(:I2), true, 'P1-13: terminated once the instance is gone');
SELECT is((extsvc.delete_service(:Q)).lifecycle_state, 'DELETED', 'then the service can be deleted');

------------------------------------------------------------------ P1-11 several versions, P1-9 host feed
SELECT extsvc.create_service('kp-t', 'kp3', 'KUBERNETES_POD', 'kind: A', service_id => '5a000000-0000-0000-0000-000000000009',
                             has_credential => true);
SELECT extsvc.update_service('5a000000-0000-0000-0000-000000000009', 'kind: B');
SELECT extsvc.update_service('5a000000-0000-0000-0000-000000000009', 'kind: C', has_credential => true);
CREATE TEMP TABLE kp3 AS SELECT version_number AS n, version AS v FROM extsvc.service_versions('5a000000-0000-0000-0000-000000000009');
UPDATE extsvc.service_records SET updated_at = now() - interval '1 hour' WHERE service_id = '5a000000-0000-0000-0000-000000000009';
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L)', '5a000000-0000-0000-0000-000000000009',
            ARRAY[(SELECT v FROM kp3 WHERE n = 1), 'V9-T9'])),
          'P0002 | service_id: 5a000000-0000-0000-0000-000000000009, versions: V9-T9', 'delete_service_versions: unknown versions named (P0002)');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L, %L)', '5a000000-0000-0000-0000-000000000009',
            ARRAY[(SELECT v FROM kp3 WHERE n = 1)], 'kp-other')), 5),
          '42501', 'delete_service_versions: another tenant''s service -> 42501');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L, %L)', '5a000000-0000-0000-0000-0000000000ee',
            ARRAY['V1-T1'], 'kp-other')), 5),
          '42501', 'delete_service_versions: an unknown service with the tenant argument -> the same 42501');
SELECT is((SELECT count(*)::int FROM extsvc.service_versions('5a000000-0000-0000-0000-000000000009')), 3,
          'delete_service_versions: the refused calls deleted nothing');
SELECT is((SELECT array_agg(row(version_number, had_credential)::text ORDER BY version_number)
             FROM extsvc.delete_service_versions('5a000000-0000-0000-0000-000000000009', ARRAY(SELECT v FROM kp3 WHERE n < 3))),
          ARRAY[row(1, true)::text, row(2, false)::text], 'delete_service_versions: the deleted versions and which had credentials');
SELECT is((SELECT row(lifecycle_state, updated_at > now() - interval '1 minute')::text FROM extsvc.services
            WHERE service_id = '5a000000-0000-0000-0000-000000000009'),
          row('READY', true)::text, 'a partial delete keeps the service READY and bumps updated_at');
SELECT is((SELECT count(*)::int FROM extsvc.host_agent_extension_services(:H1)), 0, 'host feed: nothing on H1 any more');
SELECT extsvc.upsert_instance('51000000-0000-0000-0000-000000000009', 'kp-t', 'fm100hs5c00000000000000000000000000000900000000000000000000', NULL, false);
SELECT extsvc.set_instance_extension_services('51000000-0000-0000-0000-000000000009', pg_temp.entry('5a000000-0000-0000-0000-000000000009'));
SELECT is((SELECT array_agg(row(service_name, data, removed_at IS NULL)::text)
             FROM extsvc.host_agent_extension_services('fm100hs5c00000000000000000000000000000900000000000000000000')),
          ARRAY[row('kp3', 'kind: C', true)::text], 'host feed: the KUBERNETES_POD entries of a host without registered DPUs');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L)', '5a000000-0000-0000-0000-000000000009',
            ARRAY(SELECT v FROM kp3 WHERE n = 3))),
          '55000 | instances: 51000000-0000-0000-0000-000000000009', 'delete_service_versions: a version in use -> 55000');

------------------------------------------------------------------ P1-13 configs_synced without rows
-- (a host of its own: H1 keeps I1, and a host holds one live instance)
SELECT extsvc.register_dpu('fm100ds5d00000000000000000000000000000a00000000000000000000', 'fm100hs5c00000000000000000000000000000300000000000000000000', 'kp-dpu-a', 'kp-node-a', true);
SELECT extsvc.upsert_instance(:I3, 'kp-t', 'fm100hs5c00000000000000000000000000000300000000000000000000');
SELECT extsvc.create_service('kp-t', 'kp-dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :D);
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id = :D;
SELECT extsvc.set_instance_extension_services(:I3, pg_temp.entry(:D));
SET LOCAL session_replication_role = replica;  -- fixture: bypass the transition trigger
DELETE FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I3;  -- as if not yet written
SET LOCAL session_replication_role = origin;
SELECT is((SELECT configs_synced FROM extsvc.instance_extension_services_summary(:I3)), false,
          'P1-13: an active DPF entry with no attachment rows is not synced');
SELECT is(extsvc.instance_extension_services_ready(:I3), false, 'and the instance is not ready');

SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L)', :D, ARRAY['V1-T1'])), 5), '22023',
          'delete_service_versions: a DPF service -> 22023');

------------------------------------------------------------------ P1-14 KP on DPF-managed hosts (opt-in)
SELECT extsvc.register_dpu('fm100ds5d00000000000000000000000000000c00000000000000000000', :H2, 'kp-dpu-c', 'kp-node-c', true);
SELECT extsvc.upsert_instance('51000000-0000-0000-0000-000000000014', 'kp-t', :H2);
SET LOCAL extsvc.refuse_pod_services_on_dpf_hosts = on;
SELECT is(left(pg_temp.err(format('SELECT extsvc.set_instance_extension_services(%L, %L)',
                                  '51000000-0000-0000-0000-000000000014', pg_temp.entry(:P))), 5), '22023',
          'P1-14: with extsvc.refuse_pod_services_on_dpf_hosts on, a KUBERNETES_POD entry on a DPF-managed instance -> 22023');
SET LOCAL extsvc.refuse_pod_services_on_dpf_hosts = off;
SELECT lives_ok(format('SELECT extsvc.set_instance_extension_services(%L, %L)',
                       '51000000-0000-0000-0000-000000000014', pg_temp.entry(:P)),
                'with the setting off (the default) it is accepted');
SET LOCAL extsvc.refuse_pod_services_on_dpf_hosts = on;
SELECT lives_ok(format('SELECT extsvc.set_instance_extension_services(%L, %L)',
                       '51000000-0000-0000-0000-000000000014', pg_temp.entry(:P)),
                'an entry already attached stays allowed when the setting is turned on');
RESET extsvc.refuse_pod_services_on_dpf_hosts;

SELECT * FROM finish();
ROLLBACK;
