-- Issue #14 P1-12: every refusal NICo has to tell apart carries the
-- CONSTRAINT field (sqlx: DatabaseError::constraint()), so a concurrent
-- modification, a failed precondition and a conflict are distinguishable
-- without parsing messages.
BEGIN;
\ir helpers.psql
SELECT plan(20);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set D '''4a000000-0000-0000-0000-000000000001'''
\set P '''4a000000-0000-0000-0000-000000000002'''
\set C '''4a000000-0000-0000-0000-000000000003'''
\set H '''fm100hs4c00000000000000000000000000000100000000000000000000'''
\set I1 '''41000000-0000-0000-0000-000000000001'''

SELECT extsvc.create_service('con-t', 'con-dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :D);
SELECT extsvc.create_service('con-t', 'con-pod', 'KUBERNETES_POD', 'kind: Pod', service_id => :P);
SELECT extsvc.register_dpu('fm100ds4d00000000000000000000000000000a00000000000000000000', :H, 'con-dpu-a', 'con-node-a', true);
-- I1 on a host of its own (a host holds one live instance, issue 29)
SELECT extsvc.upsert_instance(:I1, 'con-t', 'fm100hs4c00000000000000000000000000000300000000000000000000', NULL, false);
SELECT extsvc.upsert_instance('41000000-0000-0000-0000-000000000002', 'con-t', :H);
SELECT is(pg_temp.con(format($$SELECT extsvc.upsert_instance(%L, 'con-t', %L)$$, '41000000-0000-0000-0000-0000000000f2', :H)),
          '23505 instances_one_live_per_host', 'a second live instance on a host (issue 29)');

SELECT is(pg_temp.con($$SELECT extsvc.create_service('con-t', 'CON-DPF', 'KUBERNETES_POD', 'x')$$),
          '23505 service_records_tenant_name_key', 'duplicate display name');
SELECT is(pg_temp.con(format($$SELECT extsvc.create_service('con-t', 'other', 'KUBERNETES_POD', 'x', service_id => %L)$$, :D)),
          '23505 service_records_pkey', 'duplicate service id');
SELECT is((SELECT conname::text FROM pg_constraint WHERE conrelid = 'extsvc.service_records'::regclass AND contype = 'u'
             AND conkey = ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = 'extsvc.service_records'::regclass
                                  AND attname = 'dpf_service_name')]),
          'service_records_dpf_service_name_key', 'the generated-name collision names the real UNIQUE constraint');
-- a collision made on purpose: the version string is stamped with the
-- transaction time, so the name a create of :C would generate is known here
SELECT dpf_service_name AS d_name FROM extsvc.service_records WHERE service_id = :D \gset
SET LOCAL session_replication_role = replica;
UPDATE extsvc.service_records SET dpf_service_name = extsvc._dpf_service_name(:C, extsvc._config_version(1))
 WHERE service_id = :D;
SET LOCAL session_replication_role = origin;
SELECT is(pg_temp.con(format($$SELECT extsvc.create_service('con-t', 'con-collide', 'DPF_HELM_CHART', %L, dpu_target => 'ALL', service_id => %L)$$,
                             :'chart', :C)),
          '23505 service_records_dpf_service_name_key', 'a generated DPUService name that collides');
SET LOCAL session_replication_role = replica;
UPDATE extsvc.service_records SET dpf_service_name = :'d_name' WHERE service_id = :D;
SET LOCAL session_replication_role = origin;
SELECT is(pg_temp.con($$SELECT extsvc.register_dpu('fm100ds4d00000000000000000000000000000b00000000000000000000', 'fm100hs4c00000000000000000000000000000200000000000000000000', 'con-dpu-a', 'con-node-b')$$),
          '23505 dpus_dpu_device_name_key', 'register_dpu: another DPU has the DPUDevice name');
SELECT is(pg_temp.con($$SELECT extsvc.register_dpu('fm100ds4d00000000000000000000000000000b00000000000000000000', 'fm100hs4c00000000000000000000000000000200000000000000000000', 'con-dpu-b', 'con-node-a')$$),
          '23505 dpus_dpu_node_name_key', 'register_dpu: another DPU has the Node name');
SELECT is(pg_temp.con(format($$UPDATE extsvc.service_records SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'bogus' WHERE service_id = %L$$, :P)),
          '55000 lifecycle_transition', 'a lifecycle change outside the transition table');
SELECT is(pg_temp.con($$SELECT extsvc._refuse_transition('deployment', 'RUNNING', 'PENDING', 'api', 'bogus', 'row: x')$$),
          '55000 deployment_transition', 'a per-DPU change outside the transition table');
SELECT is(pg_temp.con(format($$SELECT extsvc.update_service(%L, description => 'x', if_version_ctr_match => 9)$$, :D)),
          '55000 version_ctr_match', 'version_ctr mismatch');
SELECT is(pg_temp.con(format($$SELECT extsvc.set_instance_extension_services(%L, '[]', 9)$$, :I1)),
          '55000 config_version_match', 'config_version mismatch');
SELECT is(pg_temp.con(format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, '41000000-0000-0000-0000-000000000002',
            jsonb_build_array(jsonb_build_object('service_id', :D, 'version', (SELECT version FROM extsvc.services WHERE service_id = :D))))),
          '55000 service_not_ready', 'attaching a service that is not READY');
SELECT is(pg_temp.con(format($$SELECT extsvc.retry_service(%L)$$, :D)), '55000 service_lifecycle_state', 'retry of a service that is not FAILED');
SELECT extsvc.set_instance_extension_services(:I1, jsonb_build_array(jsonb_build_object('service_id', :P,
         'version', (SELECT version FROM extsvc.services WHERE service_id = :P))));
SELECT is(pg_temp.con(format($$SELECT extsvc.delete_service(%L)$$, :P)), '55000 service_in_use', 'delete of an attached Pod service');
SELECT is(pg_temp.con(format($$SELECT extsvc.remove_terminated_services(%L, %L)$$, :I1,
            jsonb_build_array(jsonb_build_object('service_id', :P, 'version', (SELECT version FROM extsvc.services WHERE service_id = :P))))),
          '55000 entry_not_removed', 'confirming an active entry');
SELECT extsvc.delete_instance(:I1);
SELECT is(pg_temp.con(format($$SELECT extsvc.set_instance_extension_services(%L, '[]')$$, :I1)),
          '55000 instance_deleting', 'configuring a deleting instance');
SELECT is(pg_temp.con(format($$SELECT extsvc.upsert_instance(%L, 'con-t', %L)$$, :I1, 'fm100hs4c00000000000000000000000000000300000000000000000000')),
          '55000 instance_deleting', 'upserting a deleting instance');
SELECT extsvc.delete_service(:D);
SELECT is(pg_temp.con(format($$SELECT extsvc.update_service(%L, description => 'x')$$, :D)),
          '55000 service_lifecycle_state', 'updating a DELETING service');
-- a DPF service with a DPF attachment, and the dpf_managed refusal
SELECT extsvc.create_service('con-t', 'con-dpf2', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :C);
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id = :C;
SELECT extsvc.upsert_instance('41000000-0000-0000-0000-000000000002', 'con-t', :H);
SELECT extsvc.set_instance_extension_services('41000000-0000-0000-0000-000000000002',
         jsonb_build_array(jsonb_build_object('service_id', :C, 'version', (SELECT version FROM extsvc.services WHERE service_id = :C))));
SELECT is(pg_temp.con(format($$SELECT extsvc.delete_service(%L)$$, :C)), '55000 service_in_use', 'delete of an attached DPF service');
SELECT is(pg_temp.con(format($$SELECT extsvc.upsert_instance(%L, 'con-t', %L, NULL, false)$$, '41000000-0000-0000-0000-000000000002', :H)),
          '55000 instance_dpf_attachments', 'leaving DPF with DPF attachments');

SELECT * FROM finish();
ROLLBACK;
