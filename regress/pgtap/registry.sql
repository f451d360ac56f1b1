-- Issue #12: upsert_instance refuses network DPUs that are unknown, of
-- another host or deregistered (22023 naming them), refuses dpf_managed =>
-- false while DPF attachments remain (55000), and an omitted dpf_managed
-- keeps the current value; register_dpu without is_primary keeps the flag,
-- except for a DPU registered to another host (issue #13, found by
-- test/model/model_sql.py seed 60: the kept flag made a second primary there and
-- the call failed on the index dpus_one_primary_per_host).
-- The SPEC 2.10 positional forms stay callable.
BEGIN;
\ir helpers.psql
SELECT plan(30);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set D '''9a000000-0000-0000-0000-000000000001'''
\set H1 '''fm100hs9c00000000000000000000000000000100000000000000000000'''
\set H2 '''fm100hs9c00000000000000000000000000000200000000000000000000'''
\set DA '''fm100ds9d00000000000000000000000000000a00000000000000000000'''
\set DB '''fm100ds9d00000000000000000000000000000b00000000000000000000'''
\set DC '''fm100ds9d00000000000000000000000000000c00000000000000000000'''
\set DD '''fm100ds9d00000000000000000000000000000d00000000000000000000'''
\set DE '''fm100ds9d00000000000000000000000000000e00000000000000000000'''
\set H3 '''fm100hs9c00000000000000000000000000000300000000000000000000'''
\set H4 '''fm100hs9c00000000000000000000000000000400000000000000000000'''
\set DX '''fm100ds9d0000000000000000000000000000ff00000000000000000000'''
\set I1 '''91000000-0000-0000-0000-000000000001'''
\set I2 '''91000000-0000-0000-0000-000000000002'''

------------------------------------------------------------------ signatures
SELECT is(pg_get_function_arguments('extsvc.upsert_instance(uuid,text,text,text[],boolean)'::regprocedure),
          'instance_id uuid, tenant_organization_id text, host_machine_id text, network_dpus text[] DEFAULT NULL::text[], dpf_managed boolean DEFAULT NULL::boolean',
          'upsert_instance: SPEC 2.10 positional order, SPEC 7 types (machine ids text); dpf_managed DEFAULT NULL (omitted keeps)');
SELECT is(pg_get_function_arguments('extsvc.register_dpu(text,text,text,text,boolean)'::regprocedure),
          'machine_id text, host_machine_id text, dpu_device_name text, dpu_node_name text, is_primary boolean DEFAULT NULL::boolean',
          'register_dpu: SPEC 2.10 positional order, SPEC 7 types (machine ids text); is_primary DEFAULT NULL (omitted keeps)');

------------------------------------------------------------------ register_dpu: is_primary
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-a', 'reg-node-a', true)$$, :DA, :H1), 'register a primary DPU');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-b', 'reg-node-b')$$, :DB, :H1), 'register a DPU without is_primary (4 arguments)');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DB), false, 'a new DPU without is_primary is not primary');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-a', 'reg-node-a')$$, :DA, :H1),
                're-register the primary without is_primary');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DA), true, 'an omitted is_primary keeps the primary flag');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-a', 'reg-node-a', NULL)$$, :DA, :H1), 'is_primary => NULL');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DA), true, 'is_primary NULL keeps the flag too');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-a', 'reg-node-a', false)$$, :DA, :H1), 'is_primary => false');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DA), false, 'an explicit false demotes');
SELECT extsvc.register_dpu(:DA, :H1, 'reg-dpu-a', 'reg-node-a', true);
SELECT extsvc.register_dpu(:DC, :H2, 'reg-dpu-c', 'reg-node-c', true);

------------------------------------------------------------------ upsert_instance: network_dpus
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L)$$, :I1, :H1), 'upsert_instance with 3 arguments');
SELECT is((SELECT dpf_managed FROM extsvc.instances WHERE instance_id = :I1), true, 'a new instance without dpf_managed is DPF-managed');
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, ARRAY[%L, %L, %L]::text[])$$, :I1, :H1, :DA, :DX, :DC)),
          '22023 | field: network_dpus; host_machine_id: fm100hs9c00000000000000000000000000000100000000000000000000; '
          'fm100ds9d0000000000000000000000000000ff00000000000000000000 (not registered), fm100ds9d00000000000000000000000000000c00000000000000000000 (registered to host fm100hs9c00000000000000000000000000000200000000000000000000)',
          'an unknown DPU and a DPU of another host: 22023 naming both');
SELECT extsvc.register_dpu(:DB, :H1, 'reg-dpu-b', 'reg-node-b');
SELECT extsvc.deregister_dpu(:DB);
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, ARRAY[%L]::text[])$$, :I1, :H1, :DB)),
          '22023 | field: network_dpus; host_machine_id: fm100hs9c00000000000000000000000000000100000000000000000000; fm100ds9d00000000000000000000000000000b00000000000000000000 (deregistered)',
          'a deregistered DPU: 22023');
SELECT is((SELECT network_dpus FROM extsvc.instances WHERE instance_id = :I1), '{}'::text[], 'a refused upsert changes nothing');
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, ARRAY[%L]::text[])$$, :I2, :H1, :DC)),
          '22023 | field: network_dpus; host_machine_id: fm100hs9c00000000000000000000000000000100000000000000000000; fm100ds9d00000000000000000000000000000c00000000000000000000 (registered to host fm100hs9c00000000000000000000000000000200000000000000000000)',
          'a new instance with a DPU of another host: 22023');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I2), 'and it is not created');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, ARRAY[%L]::text[], true)$$, :I1, :H1, :DA),
                'the host''s own DPU is accepted (5 arguments)');

------------------------------------------------------------------ upsert_instance: dpf_managed
SELECT extsvc.create_service('reg-t', 'reg-dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'PRIMARY', service_id => :D);
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id = :D;
SELECT extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object('service_id', :D,
         'version', (SELECT version FROM extsvc.services WHERE service_id = :D))));
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, NULL, false)$$, :I1, :H1)),
          '55000 | field: dpf_managed; instance_id: 91000000-0000-0000-0000-000000000001; services: 9a000000-0000-0000-0000-000000000001',
          'dpf_managed => false with an active DPF attachment: 55000 naming the service');
SELECT extsvc.set_instance_extension_services(:I1, '[]');
SELECT is(left(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, NULL, false)$$, :I1, :H1)), 5), '55000',
          'dpf_managed => false while the tombstone and its REMOVING rows remain: 55000');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, ARRAY[%L]::text[])$$, :I1, :H1, :DA),
                'an upsert without dpf_managed is accepted while DPF attachments remain');
SELECT is((SELECT dpf_managed FROM extsvc.instances WHERE instance_id = :I1), true, 'and dpf_managed stays true');
-- the worker observed the DPU clean: the tombstone goes
SET LOCAL nico_extsvc.actor = 'worker';  -- fixture: what the worker would record
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'TERMINATED' WHERE instance_id = :I1;
SET LOCAL nico_extsvc.actor = '';
SELECT extsvc._cleanup_instance(:I1);
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L, NULL, false)$$, :I1, :H1),
                'dpf_managed => false once no DPF entry remains');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'reg-t', %L)$$, :I1, :H1), 'an upsert without dpf_managed');
SELECT is((SELECT dpf_managed FROM extsvc.instances WHERE instance_id = :I1), false, 'an omitted dpf_managed keeps false');

------------------------------------------------------------------ register_dpu: a primary DPU moves to another host
SELECT extsvc.register_dpu(:DD, :H3, 'reg-dpu-d', 'reg-node-d', true);
SELECT extsvc.register_dpu(:DE, :H4, 'reg-dpu-e', 'reg-node-e', true);
SELECT is(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'reg-dpu-d', 'reg-node-d')$$, :DD, :H4)), 'ok',
          'a primary DPU registered to another host without is_primary is accepted');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DD), false,
          'it is not primary on its new host (the omitted flag is kept only on the same host)');
SELECT is((SELECT is_primary FROM extsvc.dpus WHERE machine_id = :DE), true, 'the new host keeps its primary DPU');
SELECT extsvc.register_dpu(:DD, :H4, 'reg-dpu-d', 'reg-node-d', true);
SELECT is((SELECT array_agg(machine_id ORDER BY machine_id) FROM extsvc.dpus WHERE host_machine_id = :H4 AND is_primary),
          ARRAY[:DD]::text[], 'is_primary => true there makes it the primary and demotes the other');

SELECT * FROM finish();
ROLLBACK;
