-- Issue 22 part 3 / SPEC 7: extsvc.import_nico_services and
-- extsvc.import_nico_instances take NICo's rows as they are (ids, exact
-- ConfigVersion strings, numbers, credential flags, timestamps, tombstones),
-- all or nothing, idempotent, conflicts refused with the constraint named;
-- afterwards NICo's numbering continues (version V<ctr+1>, the instance's
-- config CAS from its imported number) and the agent feed returns the
-- strings the agents already echo.
BEGIN;
\ir helpers.psql
SELECT plan(47);

SET LOCAL client_min_messages = warning;

\set S1 '''c1000000-0000-4000-8000-000000000001'''
\set S2 '''c1000000-0000-4000-8000-000000000002'''
\set S3 '''c1000000-0000-4000-8000-000000000003'''
\set I1 '''c2000000-0000-4000-8000-000000000001'''
\set I2 '''c2000000-0000-4000-8000-000000000002'''
\set A1 '''c3000000-0000-4000-8000-000000000001'''
\set H '''fm100hsc400000000000000000000000000000100000000000000000000'''
\set D '''fm100dsc400000000000000000000000000000a00000000000000000000'''
\set H2 '''fm100hsc400000000000000000000000000000200000000000000000000'''
\set S4 '''c1000000-0000-4000-8000-000000000004'''

-- 'SQLSTATE | constraint | DETAIL' of a failing statement ('-': no constraint),
-- 'ok' otherwise (helpers.psql's diag writes an absent constraint as '')
CREATE FUNCTION pg_temp.err_con(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_state text;
  v_con text;
  v_detail text;
BEGIN
  EXECUTE stmt;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_con = CONSTRAINT_NAME, v_detail = PG_EXCEPTION_DETAIL;
  RETURN v_state || ' | ' || coalesce(nullif(v_con, ''), '-') || ' | ' || v_detail;
END $$;

-- NICo's rows: S1 with three versions (V1 deleted, V3 with a credential),
-- S2 deleted with its last version, as the cut-over queries read them
CREATE TEMP TABLE rows AS SELECT $j$[
 {"id": "c1000000-0000-4000-8000-000000000001", "type": "kubernetes_pod", "name": "telemetry", "description": "",
  "tenant_organization_id": "tenant-i", "version_ctr": 3, "created": "2026-08-01T10:00:00.123456Z",
  "updated": "2026-08-03T10:00:00Z", "deleted": null,
  "versions": [
   {"service_id": "c1000000-0000-4000-8000-000000000001", "version": "V1-T1785578400123456", "data": "kind: Pod",
    "has_credential": true, "created": "2026-08-01T10:00:00.123456Z", "deleted": "2026-08-02T10:00:00Z",
    "observability": {"configs": []}},
   {"version": "V2-T1785664800000000", "data": "kind: Pod2", "has_credential": false,
    "created": "2026-08-02T10:00:00+00:00", "deleted": null, "observability": null},
   {"version": "V3-T1785751200000000", "data": "kind: Pod3", "has_credential": true,
    "created": "2026-08-03T10:00:00.999999999Z", "deleted": null, "observability": {"configs": []}}]},
 {"id": "c1000000-0000-4000-8000-000000000002", "type": "KUBERNETES_POD", "name": "old", "description": "gone",
  "tenant_organization_id": "tenant-i", "version_ctr": 1, "created": "2026-07-01T00:00:00Z",
  "updated": "2026-07-02T00:00:00Z", "deleted": "2026-07-02T00:00:00Z",
  "versions": [{"version": "V1-T1782864000000000", "data": "kind: Old", "has_credential": false,
                "created": "2026-07-01T00:00:00Z", "deleted": "2026-07-02T00:00:00Z", "observability": null}]}
]$j$::jsonb AS services,
$j$[
 {"id": "c2000000-0000-4000-8000-000000000001", "machine_id": "fm100hsc400000000000000000000000000000100000000000000000000",
  "tenant_org": "tenant-i", "extension_services_config_version": "V7-T1785751200000001", "deleted": null,
  "extension_services_config": {"service_configs": [
   {"service_id": "c1000000-0000-4000-8000-000000000001", "version": "V3-T1785751200000000", "removed": null},
   {"service_id": "c1000000-0000-4000-8000-000000000001", "version": "V2-T1785664800000000",
    "removed": "2026-08-03T10:00:00.5Z", "id": "c3000000-0000-4000-8000-000000000001"}]}}
]$j$::jsonb AS instances;

------------------------------------------------------------------ refused input: 22023 with the JSON path, nothing written
SELECT is(pg_temp.err_con($$SELECT * FROM extsvc.import_nico_services('{}')$$), '22023 | - | JSON path: $', 'not an array');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,color}', '"blue"'))), '22023 | - | JSON path: $[0].color',
          'an unknown field, by path');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{1,type}', '"dpf_helm_chart"'))), '22023 | - | JSON path: $[1].type',
          'DPF_HELM_CHART services are not imported (they are created anew)');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,versions,1,version}', '"V2"'))),
          '22023 | - | JSON path: $[0].versions[1].version = V2', 'a version that is no ConfigVersion string');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,version_ctr}', '2'))),
          '22023 | - | JSON path: $[0].version_ctr = 2, newest version number 3', 'version_ctr below the newest number');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,created}', '"2026-08-01 10:00"'))),
          '22023 | - | JSON path: $[0].created = 2026-08-01 10:00', 'a timestamp without a zone');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set(jsonb_set((SELECT services FROM rows), '{0,versions,1,deleted}', '"2026-08-03T00:00:00Z"'),
                      '{0,versions,2,deleted}', '"2026-08-03T00:00:00Z"'))),
          '22023 | - | JSON path: $[0].versions', 'a live service without a live version');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            (SELECT services || (services->0) FROM rows))), '22023 | - | JSON path: $[2].id', 'a service twice');
-- the rules create_service applies (issue 29), named by the JSON path
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{1,tenant_organization_id}', '"tenant i"'))),
          '22023 | - | JSON path: $[1].tenant_organization_id = tenant i',
          'a tenant id outside the one rule of tenant ids (1-256 of A-Za-z0-9_-)');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,name}', to_jsonb('tele' || chr(8203) || 'metry')))),
          '22023 | - | JSON path: $[0].name; character U+200B at position 5',
          'a live service''s name with an invisible character');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_set((SELECT services FROM rows), '{0,versions,2,observability}',
                      '{"configs": [{"name": "m", "config": {"Tracing": {}}}]}'))),
          '22023 | - | JSON path: $[0].versions[2].observability.configs[0].config.Tracing',
          'observability outside NICo''s ExtensionServiceObservability');
SELECT is((SELECT count(*)::int FROM extsvc.service_records), 0, 'nothing written by the refused calls');

------------------------------------------------------------------ the import
SELECT results_eq($$SELECT service_id, versions, action FROM extsvc.import_nico_services((SELECT services FROM rows))$$,
                  format('VALUES (%L::uuid, 3, %L), (%L::uuid, 1, %L)', :S1, 'imported', :S2, 'imported'),
                  'import_nico_services: both services imported');
SELECT is((SELECT row(tenant_organization_id, service_name, description, service_type, lifecycle_state, version,
                      version_ctr, has_credential, created_at, updated_at, deleted_at)::text
             FROM extsvc.services WHERE service_id = :S1),
          row('tenant-i', 'telemetry', '', 'KUBERNETES_POD', 'READY', 'V3-T1785751200000000', 3, true,
              '2026-08-01T10:00:00.123456Z'::timestamptz, '2026-08-03T10:00:00Z'::timestamptz, NULL::timestamptz)::text,
          'the service as NICo had it: id, tenant, name, counter, latest version and its credential, timestamps');
SELECT is(ARRAY(SELECT row(version, version_number, data, has_credential, observability, created_at, deleted_at)::text
                  FROM extsvc.service_versions(:S1, include_deleted => true) ORDER BY version_number),
          ARRAY[row('V1-T1785578400123456', 1, 'kind: Pod', true, '{"configs": []}'::jsonb,
                    '2026-08-01T10:00:00.123456Z'::timestamptz, '2026-08-02T10:00:00Z'::timestamptz)::text,
                row('V2-T1785664800000000', 2, 'kind: Pod2', false, NULL::jsonb,
                    '2026-08-02T10:00:00Z'::timestamptz, NULL::timestamptz)::text,
                row('V3-T1785751200000000', 3, 'kind: Pod3', true, '{"configs": []}'::jsonb,
                    '2026-08-03T10:00:00.999999Z'::timestamptz, NULL::timestamptz)::text],
          'every version with its exact string, number, data, credential flag, observability and timestamps (nanoseconds cut)');
SELECT is((SELECT row(lifecycle_state, deleted_at)::text FROM extsvc.services WHERE service_id = :S2),
          row('DELETED', '2026-07-02T00:00:00Z'::timestamptz)::text, 'a service NICo deleted comes in DELETED');
SELECT is(ARRAY(SELECT coalesce(from_state, '') || '>' || to_state || '/' || actor || '/' || reason FROM extsvc.service_state_history
                 WHERE service_id IN (:S1, :S2) ORDER BY service_id),
          ARRAY['>READY/api/import', '>DELETED/api/import'], 'one history row each: created by the import');
CREATE TEMP TABLE before AS SELECT md5(string_agg(x::text, '|' ORDER BY x::text)) AS h FROM (
  SELECT row(s.*)::text AS x FROM extsvc.service_records s UNION ALL SELECT row(v.*)::text FROM extsvc.service_versions v
  UNION ALL SELECT row(h.service_id, h.from_state, h.to_state, h.reason)::text FROM extsvc.service_state_history h) y;
SELECT results_eq($$SELECT action FROM extsvc.import_nico_services((SELECT services FROM rows))$$,
                  $$VALUES ('unchanged'), ('unchanged')$$, 'a second import of the same rows: unchanged');
SELECT is((SELECT md5(string_agg(x::text, '|' ORDER BY x::text)) FROM (
  SELECT row(s.*)::text AS x FROM extsvc.service_records s UNION ALL SELECT row(v.*)::text FROM extsvc.service_versions v
  UNION ALL SELECT row(h.service_id, h.from_state, h.to_state, h.reason)::text FROM extsvc.service_state_history h) y),
          (SELECT h FROM before), 'and nothing changed');

------------------------------------------------------------------ conflicts: 23505 with the constraint, all or nothing
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_build_array(jsonb_set((SELECT services->0 #- '{versions,0,service_id}' FROM rows), '{id}', to_jsonb(:S3::text)),
                              jsonb_set((SELECT services->0 FROM rows), '{description}', '"changed"')))),
          '23505 | service_records_pkey | JSON path: $[1].id = ' || :S1, 'the same id with other content: service_records_pkey');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.service_records WHERE service_id = :S3),
          'all or nothing: the new service of the refused call is not there');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)',
            jsonb_build_array(jsonb_set(jsonb_set((SELECT services->0 #- '{versions,0,service_id}' FROM rows), '{id}', to_jsonb(:S3::text)),
                                        '{name}', '"TELEMETRY"')))),
          '23505 | service_records_tenant_name_key | JSON path: $[0].name = TELEMETRY',
          'a name a live service of the tenant has (case-insensitively): service_records_tenant_name_key');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.import_nico_services(jsonb)', 'EXECUTE')
          AND NOT has_function_privilege('extsvc_api', 'extsvc.import_nico_instances(jsonb)', 'EXECUTE')
          AND has_function_privilege('extsvc_admin', 'extsvc.import_nico_services(jsonb)', 'EXECUTE')
          AND has_function_privilege('extsvc_admin', 'extsvc.import_nico_instances(jsonb)', 'EXECUTE'),
          'the imports are for extsvc_admin only');

------------------------------------------------------------------ instances
SELECT extsvc.register_dpu(:D, :H, 'imp-dpu', 'imp-node', true);
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,machine_id}', '"c4000000-0000-4000-8000-000000000001"'))),
          '22023 | - | JSON path: $[0].machine_id = c4000000-0000-4000-8000-000000000001: the machine ID has an invalid length of 36',
          'a machine_id NICo''s parser refuses: 22023 with its path');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,extension_services_config_version}', '"7"'))),
          '22023 | - | JSON path: $[0].extension_services_config_version = 7', 'a config version that is no ConfigVersion');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,extension_services_config,service_configs,0,version}',
                      '"V9-T1785751200000000"'))),
          'P0002 | - | JSON path: $[0] entry service_id ' || :S1 || ', version V9-T1785751200000000',
          'an entry without its imported version: P0002');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,extension_services_config,service_configs,0,dpu_target}', '"all"'))),
          '22023 | - | JSON path: $[0].extension_services_config.service_configs[0].dpu_target',
          'a dpu_target (a DPF entry): 22023');
SELECT results_eq($$SELECT instance_id, entries, action FROM extsvc.import_nico_instances((SELECT instances FROM rows))$$,
                  format('VALUES (%L::uuid, 2, %L)', :I1, 'imported'), 'import_nico_instances: imported');
SELECT is((SELECT row(tenant_organization_id, host_machine_id, config_version, config_version_text)::text
             FROM extsvc.get_instance(:I1)),
          row('tenant-i', :H, 7, 'V7-T1785751200000001')::text, 'the instance with NICo''s exact config version string');
SELECT is(ARRAY(SELECT row(version, removed_at, attachment_id)::text FROM extsvc.instance_extension_services
                 WHERE instance_id = :I1 ORDER BY version),
          ARRAY[row('V2-T1785664800000000', '2026-08-03T10:00:00.5Z'::timestamptz, :A1::uuid)::text,
                row('V3-T1785751200000000', NULL::timestamptz, NULL::uuid)::text],
          'its entries: the tombstone with its removed time and id, the active one without an id (none was stored)');
SELECT is(ARRAY(SELECT version || ' ' || config_version_text || ' ' || (removed_at IS NOT NULL)
                  FROM extsvc.dpu_agent_extension_services(:D) ORDER BY version),
          ARRAY['V2-T1785664800000000 V7-T1785751200000001 true', 'V3-T1785751200000000 V7-T1785751200000001 false'],
          'the DPU agent feed: the strings the agents already echo');
SELECT results_eq($$SELECT action FROM extsvc.import_nico_instances((SELECT instances FROM rows))$$,
                  $$VALUES ('unchanged')$$, 'a second import of the instance: unchanged');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,extension_services_config_version}', '"V8-T1785751200000001"'))),
          '23505 | instances_pkey | JSON path: $[0].id = ' || :I1, 'the same instance with other content: instances_pkey');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set((SELECT instances FROM rows), '{0,id}', to_jsonb(:I2::text)))),
          '23505 | instances_one_live_per_host | JSON path: $[0].machine_id = ' || :H || ', id: ' || :I2,
          'another live instance on the imported instance''s host: instances_one_live_per_host (issue 29)');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set(jsonb_set((SELECT instances FROM rows), '{0,id}', to_jsonb(:I2::text)),
                      '{0,tenant_org}', '"tenant/i"'))),
          '22023 | - | JSON path: $[0].tenant_org = tenant/i', 'a tenant_org outside the rule of tenant ids');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_instances(%L)',
            jsonb_set(jsonb_set(jsonb_set((SELECT instances FROM rows), '{0,id}', to_jsonb(:I2::text)),
                                '{0,machine_id}', to_jsonb(:H2::text)),
                      '{0,extension_services_config,service_configs,0,id}', to_jsonb(:A1::text)))),
          '23505 | instance_extension_services_attachment_id_key | Key (attachment_id)=(' || :A1 || ') already exists.',
          'an attachment id another entry has: its unique index');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I2), 'all or nothing');

------------------------------------------------------------------ NICo's numbering continues
SELECT is(pg_temp.err_con(format('SELECT extsvc.set_instance_extension_services(%L, %L, 6)', :I1, '[]')),
          '55000 | config_version_match | if_config_version_match: 6, config_version: 7', 'the config CAS is at the imported number');
SELECT is(extsvc.set_instance_extension_services(:I1, '[]', 7::bigint), 8, 'and the next change is number 8');
SELECT ok((SELECT config_version_text ~ '^V8-T[0-9]+$' FROM extsvc.instances WHERE instance_id = :I1), 'with its string V8-T...');
SELECT is((SELECT version_ctr || ' ' || (version ~ '^V4-T[0-9]+$')
             FROM extsvc.update_service(:S1, 'kind: Pod4', has_credential => true, if_version_ctr_match => 3::bigint)),
          '4 true', 'a rotated credential after the import: version_ctr 4, the service''s version V4-T...');
SELECT is((SELECT version_number || ' ' || (version ~ '^V4-T[0-9]+$') || ' ' || has_credential
             FROM extsvc.service_versions(:S1) ORDER BY version_number DESC LIMIT 1),
          '4 true true', 'the new version continues NICo''s numbering: V4-T..., number 4 (its Vault key)');
SELECT is((SELECT count(*)::int FROM extsvc.service_versions(:S1, include_deleted => true)), 4, 'no version re-minted');
SELECT is(pg_temp.err_con(format('SELECT * FROM extsvc.import_nico_services(%L)', (SELECT services FROM rows))),
          '23505 | service_records_pkey | JSON path: $[0].id = ' || :S1,
          'once changed here, importing the old rows again is a conflict');
SELECT lives_ok(format('SELECT * FROM extsvc.import_nico_services(%L)', jsonb_build_array((SELECT services->1 FROM rows))),
                'the unchanged one alone still imports (unchanged)');

------------------------------------------------------------------ names as every name is stored (issue 29)
SELECT is((SELECT service_name = 'caf' || chr(233) FROM extsvc.import_nico_services(jsonb_build_array(
             jsonb_set(jsonb_set((SELECT services->0 #- '{versions,0,service_id}' FROM rows), '{id}', to_jsonb(:S4::text)),
                       '{name}', to_jsonb('cafe' || chr(769)))))),
          true, 'a live service''s name in NFD comes in NFC');
SELECT results_eq(format($$SELECT action FROM extsvc.import_nico_services(jsonb_build_array(
             jsonb_set(jsonb_set((SELECT services->0 #- '{versions,0,service_id}' FROM rows), '{id}', to_jsonb(%L::text)),
                       '{name}', to_jsonb('cafe' || chr(769)))))$$, :S4),
                  $$VALUES ('unchanged')$$, 'and the same row again is unchanged');

SELECT * FROM finish();
ROLLBACK;
