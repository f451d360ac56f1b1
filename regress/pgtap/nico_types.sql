-- Issue 22 / SPEC 7: NICo's types. Machine ids are NICo MachineIds (text),
-- checked as NICo's parser (crates/uuid/src/machine/mod.rs) checks them:
-- its own test vectors, the kind of each argument, the canonical form; the
-- counters are bigint (int4 callers still resolve); NICo's spellings; NICo's
-- serialized entries with attachment ids and per-attachment targets;
-- description never NULL; delete_service's removed versions; the deletion
-- probe; the batch reads.
BEGIN;
\ir helpers.psql
SELECT plan(69);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
-- NICo's own test vector (test_machine_id_parse_cases) and two of its doc examples
\set NV '''fm100ht038bg3qsho433vkg684heguv282qaggmrsh2ugn1qk096n2c6hcg'''
\set H '''fm100htjtiaehv1n5vh67tbmqq4eabcjdng40f7jupsadbedhruh6rag1l0'''
\set D1 '''fm100dsasb5dsh6e6ogogslpovne4rj82rp9jlf00qd7mcvmaadv85phk3g'''
\set D2 '''fm100dtjtiaehv1n5vh67tbmqq4eabcjdng40f7jupsadbedhruh6rag1l0'''
\set H2 '''fm100hsasb5dsh6e6ogogslpovne4rj82rp9jlf00qd7mcvmaadv85phk3g'''
\set S '''b1000000-0000-0000-0000-000000000001'''
\set K '''b1000000-0000-0000-0000-000000000002'''
\set I1 '''b2000000-0000-0000-0000-000000000001'''
\set I2 '''b2000000-0000-0000-0000-000000000002'''
\set I3 '''b2000000-0000-0000-0000-000000000003'''
\set A1 '''b3000000-0000-0000-0000-000000000001'''

------------------------------------------------------------------ NICo's parser, its test cases
SELECT is((SELECT row(canonical, machine_type, source, problem)::text FROM extsvc.parse_machine_id(:NV)),
          row(:NV, 'host', 'tpm', NULL)::text, 'parse: NICo''s valid host TPM machine ID');
SELECT is((SELECT problem FROM extsvc.parse_machine_id(left(:NV, 58))), 'the machine ID has an invalid length of 58',
          'parse: one character short -> length');
SELECT is((SELECT problem FROM extsvc.parse_machine_id('')), 'the machine ID has an invalid length of 0',
          'parse: empty string -> length');
SELECT is((SELECT problem FROM extsvc.parse_machine_id('FM100' || substr(:NV, 6))), 'the machine ID has an invalid prefix',
          'parse: invalid prefix casing -> prefix');
SELECT is((SELECT problem FROM extsvc.parse_machine_id('fm100x' || substr(:NV, 7))), 'the machine ID has an invalid prefix',
          'parse: invalid machine type -> prefix');
SELECT is((SELECT problem FROM extsvc.parse_machine_id('fm100dx' || substr(:NV, 8))), 'the machine ID has an invalid prefix',
          'parse: invalid source -> prefix');
SELECT is((SELECT problem FROM extsvc.parse_machine_id('fm100ht038bg3qsho433vkg684heguv28!qaggmrsh2ugn1qk096n2c6hcg')),
          'the machine ID has an invalid encoding', 'parse: invalid base32 payload -> encoding');
-- BASE32_DNSSEC: 52 characters are 260 bits for 256: the last one carries
-- four trailing bits that must be zero (0 or g); decoding is case-insensitive
SELECT is((SELECT problem FROM extsvc.parse_machine_id(left(:NV, 58) || 'h')), 'the machine ID has an invalid encoding',
          'parse: non-zero trailing bits -> encoding');
SELECT is((SELECT problem FROM extsvc.parse_machine_id(left(:NV, 7) || 'w' || substr(:NV, 9))), 'the machine ID has an invalid encoding',
          'parse: a character outside 0-9 a-v -> encoding');
SELECT is((SELECT canonical FROM extsvc.parse_machine_id(left(:NV, 7) || upper(substr(:NV, 8)))), :NV,
          'parse: an upper-case payload decodes, canonical (NICo''s Display) is lower case');
SELECT is((SELECT array_agg(machine_type ORDER BY machine_type) FROM (VALUES (:D1), (:H), ('fm100p' || substr(:H, 7))) v(x),
                  extsvc.parse_machine_id(x)), ARRAY['dpu', 'host', 'predictedhost'], 'parse: the three machine types, named as NICo''s MachineType::metrics_value');

------------------------------------------------------------------ arguments: kind, canonical form, 22023 naming them
SELECT is(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'nt-dpu-1', 'nt-node-1', true)$$,
                             '00000000-0000-0000-0000-000000000001', :H)),
          '22023 | argument: machine_id = 00000000-0000-0000-0000-000000000001: the machine ID has an invalid length of 36',
          'register_dpu: a uuid is not a MachineId (22023 naming the argument and NICo''s reason)');
SELECT ok(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'nt-dpu-1', 'nt-node-1', true)$$, :H, :H))
            LIKE '22023 | argument: machine_id = %: a DPU (fm100d...) MachineId was expected, got a host MachineId',
          'register_dpu: a host id for the DPU is refused');
SELECT ok(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'nt-dpu-1', 'nt-node-1', true)$$, :D1, :D2))
            LIKE '22023 | argument: host_machine_id = %a host (fm100h... or fm100p...) MachineId was expected, got a DPU MachineId',
          'register_dpu: a DPU id for the host is refused');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'nt-dpu-1', 'nt-node-1', true)$$,
                       left(:D1, 7) || upper(substr(:D1, 8)), :H), 'register_dpu: an upper-case payload');
SELECT is((SELECT machine_id FROM extsvc.dpus WHERE dpu_device_name = 'nt-dpu-1'), :D1,
          'stored in NICo''s canonical form');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'nt-dpu-2', 'nt-node-2')$$, :D2, :H), 'a second DPU');
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'nt', %L, ARRAY[%L, 'fm100dnope']::text[])$$, :I1, :H, :D1)),
          '22023 | argument: network_dpus[1] = fm100dnope: the machine ID has an invalid length of 10',
          'upsert_instance: a bad network DPU is named by its position');
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'nt', %L)$$, :I1, 'host-1')),
          '22023 | argument: host_machine_id = host-1: the machine ID has an invalid length of 6', 'upsert_instance: a bad host id');
SELECT is(left(pg_temp.err($$SELECT * FROM extsvc.dpu_agent_extension_services('not-an-id')$$), 44),
          '22023 | argument: dpu_machine_id = not-an-id', 'dpu_agent_extension_services: 22023 for a non-MachineId');
SELECT is(left(pg_temp.err($$SELECT * FROM extsvc.host_agent_extension_services('not-an-id')$$), 45),
          '22023 | argument: host_machine_id = not-an-id', 'host_agent_extension_services: 22023 for a non-MachineId');
SELECT is(pg_temp.err(format($$SELECT extsvc.deregister_dpu(%L)$$, left(:D1, 6) || 'x' || substr(:D1, 8))),
          '22023 | argument: machine_id = ' || left(:D1, 6) || 'x' || substr(:D1, 8) || ': the machine ID has an invalid prefix',
          'deregister_dpu: a bad source character');

------------------------------------------------------------------ counters bigint, NICo's spellings, description
SELECT is(pg_get_function_identity_arguments('extsvc.update_service(uuid,text,text,text,bigint,boolean,jsonb,text)'::regprocedure),
          'service_id uuid, data text, service_name text, description text, if_version_ctr_match bigint, has_credential boolean, observability jsonb, tenant_organization_id text',
          'update_service: if_version_ctr_match bigint');
SELECT is(pg_get_function_identity_arguments('extsvc.set_instance_extension_services(uuid,jsonb,bigint,text)'::regprocedure),
          'instance_id uuid, services jsonb, if_config_version_match bigint, tenant_organization_id text',
          'set_instance_extension_services: if_config_version_match bigint');
SELECT is((SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'extsvc'::regnamespace
             AND proname IN ('update_service', 'set_instance_extension_services', 'rollback_service',
                             'set_instance_extension_services_versioned')
             AND 'int4'::regtype = ANY (proargtypes::oid[]::regtype[])), 0, 'no int4 counter parameter is left');
SELECT lives_ok(format($$SELECT extsvc.create_service('nt', 'nt-dpf', 'dpf_helm_chart', %L, dpu_target => 'all_active', service_id => %L)$$,
                       :'chart', :S), 'create_service: NICo''s lower-case spellings (dpf_helm_chart, all_active)');
SELECT is((SELECT row(service_type, dpu_target, description)::text FROM extsvc.services WHERE service_id = :S),
          row('DPF_HELM_CHART', 'ALL_ACTIVE', '')::text, 'outputs keep the SPEC values; no description reads ''''');
SELECT is((SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = 'extsvc.services'::regclass AND attname = 'lifecycle_state'),
          'text', 'extsvc.services.lifecycle_state is text (no domain: sqlx decodes it as a String)');
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = 1 WHERE service_id = :S;
SELECT is((extsvc.update_service(:S, description => 'd', if_version_ctr_match => 1)).description, 'd',
          'an int4 counter still resolves');
SELECT is((extsvc.update_service(:S, description => 'e', if_version_ctr_match => 1::bigint)).description, 'e',
          'an int8 counter resolves');
SELECT is(pg_temp.err(format($$SELECT extsvc.update_service(%L, description => 'x', if_version_ctr_match => %s::bigint)$$,
                             :S, 4294967297)),
          '55000 | if_version_ctr_match: 4294967297, version_ctr: 1', 'a counter beyond int4 is compared, not refused as a type');
SELECT lives_ok(format($$SELECT extsvc.create_service('nt', 'nt-pod', 'kubernetes_pod', 'kind: Pod', service_id => %L, has_credential => true)$$, :K),
                'create_service: kubernetes_pod');

------------------------------------------------------------------ NICo's entries: removed, id, dpu_target
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'nt', %L, ARRAY[%L]::text[])$$, :I1, :H, :D1), 'an instance on H');
SELECT is(extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object(
            'service_id', :S, 'version', (SELECT version FROM extsvc.services WHERE service_id = :S), 'removed', NULL,
            'id', :A1, 'dpu_target', 'all'))), 2,
          'NICo''s serialized entry with the DSX id and dpu_target');
SELECT is((SELECT row(attachment_id, dpu_target)::text FROM extsvc.instance_extension_services WHERE instance_id = :I1),
          row(:A1::uuid, 'ALL')::text, 'the attachment id is kept, the target stored in SPEC spelling');
SELECT is((SELECT array_agg(dpu_machine_id ORDER BY dpu_machine_id) FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I1),
          ARRAY[:D1, :D2], 'dpu_target ALL overrides the service''s ALL_ACTIVE: both DPUs of the host');
SELECT is(extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object(
            'service_id', :S, 'version', (SELECT version FROM extsvc.services WHERE service_id = :S),
            'id', gen_random_uuid(), 'dpu_target', 'ALL'))), 2,
          'the same entry with another id: no change (the stored id wins)');
SELECT is((SELECT attachment_id FROM extsvc.instance_extension_services WHERE instance_id = :I1), :A1::uuid,
          'the stored attachment id stays');
SELECT is(extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object(
            'service_id', :S, 'version', (SELECT version FROM extsvc.services WHERE service_id = :S)))), 3,
          'dropping the override is a change');
SELECT is((SELECT array_agg(dpu_machine_id || ':' || placement_state ORDER BY dpu_machine_id) FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I1),
          ARRAY[:D1 || ':ACTIVE', :D2 || ':REMOVING'], 'back to the service''s ALL_ACTIVE: the other DPU goes REMOVING');
SELECT is((SELECT (services->0->>'id')::uuid FROM extsvc.get_instance(:I1)), :A1::uuid, 'get_instance returns the attachment id');
SELECT is(extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object(
            'service_id', :S, 'version', (SELECT version FROM extsvc.services WHERE service_id = :S),
            'removed', '2026-08-01T00:00:00Z'))), 4,
          'an entry with a removed time is not wanted (NICo takes removed = None only): a detach');
SELECT ok((SELECT removed_at IS NOT NULL FROM extsvc.instance_extension_services WHERE instance_id = :I1), 'the entry is a tombstone');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, :I1,
            '[{"service_id": "b1000000-0000-0000-0000-000000000001", "version": "V1", "removed": "yesterday"}]')),
          '22023 | JSON path: $[0].removed = yesterday', 'a removed that is no timestamp: 22023 with its path');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, :I1,
            '[{"service_id": "b1000000-0000-0000-0000-000000000001", "version": "V1", "dpu_target": "some"}]')),
          '22023 | JSON path: $[0].dpu_target = some', 'an unknown dpu_target: 22023 with its path');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, :I1,
            '[{"service_id": "b1000000-0000-0000-0000-000000000001", "version": "V1", "id": "00000000-0000-0000-0000-000000000000"}]')),
          '22023 | JSON path: $[0].id', 'a nil attachment id: 22023');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, :I1,
            '[{"service_id": "b1000000-0000-0000-0000-000000000001", "version": "V1", "state": 1}]')),
          '22023 | JSON path: $[0].state', 'any other key: 22023 naming it');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'nt', %L, NULL, false)$$, :I2, :H2), 'an instance without DPF');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, jsonb_build_array(jsonb_build_object('service_id', %L, 'version', %L, 'dpu_target', 'primary')))$$,
            :I2, :K, (SELECT version FROM extsvc.services WHERE service_id = :K))),
          '22023 | JSON path: $[0].dpu_target', 'dpu_target on a KUBERNETES_POD entry: 22023');
SELECT is(pg_temp.err(format($$SELECT extsvc.set_instance_extension_services(%L, jsonb_build_array(jsonb_build_object('service_id', %L, 'version', %L, 'id', %L)))$$,
            :I2, :K, (SELECT version FROM extsvc.services WHERE service_id = :K), :A1)),
          '23505 | Key (attachment_id)=(' || :A1 || ') already exists.', 'an attachment id used by another attachment: 23505');

------------------------------------------------------------------ delete_service: removed versions
SELECT extsvc.update_service(:K, 'kind: Pod2');
SELECT extsvc.update_service(:K, 'kind: Pod3', has_credential => true);
SELECT is((SELECT jsonb_agg(jsonb_build_array(x->>'version_number', x->>'had_credential')) FROM extsvc.delete_service(:K) d,
                  jsonb_array_elements(d.removed_versions) x),
          '[["1", "true"], ["2", "false"], ["3", "true"]]'::jsonb,
          'delete_service of a KUBERNETES_POD service: every removed version with its number and had_credential');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :K), 'DELETED', 'and the service is DELETED');

------------------------------------------------------------------ the deletion probe
SELECT is(pg_temp.err(format('SELECT extsvc.instance_extension_services_terminated(%L)', :I3)),
          'P0002 | instance_id: ' || :I3, 'terminated: an unknown instance is P0002, not true');
SELECT is(extsvc.instance_extension_services_terminated(:I2), false, 'terminated: false while the instance exists');
SELECT extsvc.delete_instance(:I2);
SELECT is(extsvc.instance_extension_services_terminated(:I2, 'nt'), true, 'terminated: true once its deletion finished');
SELECT is(pg_temp.err(format('SELECT extsvc.instance_extension_services_terminated(%L, %L)', :I2, 'other')),
          'P0002 | instance_id: ' || :I2, 'terminated: another tenant''s finished deletion is the P0002 of an unknown id');

------------------------------------------------------------------ batch reads
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'nt-other', %L)$$, :I3, :H2), 'an instance of another tenant');
SELECT is(ARRAY(SELECT instance_id FROM extsvc.get_instances(ARRAY[:I3, gen_random_uuid(), :I1, :I3]::uuid[])),
          ARRAY[:I3, :I1]::uuid[], 'get_instances: order kept, unknown ids absent, a repeated id once');
SELECT is(ARRAY(SELECT instance_id FROM extsvc.get_instances(ARRAY[:I3, :I1]::uuid[], 'nt')),
          ARRAY[:I1]::uuid[], 'get_instances: with a tenant, another tenant''s instance is absent');
SELECT is((SELECT row(host_machine_id, network_dpus, config_version)::text FROM extsvc.get_instances(ARRAY[:I1]::uuid[])),
          (SELECT row(host_machine_id, network_dpus, config_version)::text FROM extsvc.get_instance(:I1)),
          'get_instances: each row as get_instance shows it');
SELECT is(ARRAY(SELECT instance_id || ':' || service_id FROM extsvc.instance_extension_services_summaries(ARRAY[:I3, :I1]::uuid[], 'nt')),
          ARRAY[:I1 || ':' || :S], 'summaries: the tenant''s instances, their rows');
SELECT results_eq(format($$SELECT service_id, aggregate_state, removed, dpus, configs_synced
                            FROM extsvc.instance_extension_services_summaries(ARRAY[%L]::uuid[])$$, :I1),
                  format($$SELECT service_id, aggregate_state, removed, dpus, configs_synced
                            FROM extsvc.instance_extension_services_summary(%L)$$, :I1),
                  'summaries: the rows of instance_extension_services_summary');
SELECT ok(has_function_privilege('extsvc_api', 'extsvc.get_instances(uuid[],text)', 'EXECUTE')
          AND has_function_privilege('extsvc_api', 'extsvc.instance_extension_services_summaries(uuid[],text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'extsvc.get_instances(uuid[],text)', 'EXECUTE'),
          'the batch reads are for extsvc_api (and not PUBLIC)');

------------------------------------------------------------------ the placement lock, the tenant before any lock
SELECT is(left(pg_temp.err(format($$SELECT extsvc.lock_placement(ARRAY[%L])$$, :D1)), 5), '22023',
          'lock_placement: a DPU id is no host (22023)');
SELECT lives_ok(format($$SELECT extsvc.lock_placement(ARRAY[%L, %L, %L], ARRAY[%L, %L, %L]::uuid[], ARRAY[%L]::uuid[], 'nt')$$,
                       :H, :H2, :H, :I1, :I3, 'b2000000-0000-0000-0000-0000000000ff', :S),
                'lock_placement: hosts (one twice), instances (one unknown, one of another tenant), services');
SELECT is((SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted), 5,
          'lock_placement: one advisory lock per host and per instance id, an id not inserted yet included');
SELECT ok(has_function_privilege('extsvc_api', 'extsvc.lock_placement(text[],uuid[],uuid[],text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'extsvc.lock_placement(text[],uuid[],uuid[],text)', 'EXECUTE'),
          'lock_placement is for extsvc_api (and not PUBLIC)');
-- an instance being deleted: its own tenant hears 55000, another tenant 42501
-- (decided before any lock; nothing of the row leaks)
SELECT extsvc.delete_instance(:I1);
SELECT is(left(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'nt-other', %L)$$, :I1, :H)), 5), '42501',
          'upsert_instance: another tenant''s instance being deleted is 42501, not 55000');
SELECT is(left(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'nt', %L)$$, :I1, :H)), 5), '55000',
          'upsert_instance: its own tenant hears instance_deleting');

SELECT * FROM finish();
ROLLBACK;
