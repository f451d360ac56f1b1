-- Issues #12 and #14: the reads for NICo's database layer and operators.
-- Version strings carry the creation time, so outputs show numbers and
-- names instead.
CREATE EXTENSION nico_extsvc;
SET extsvc.enforce_chart_allowlist = off;

CREATE FUNCTION pg_temp.try(stmt text, OUT state text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE stmt;
  state := '00000'; message := 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                          detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000a00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', 'dpu-a', 'node-a', true);
SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000b00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', 'dpu-b', 'node-b');
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'pod', 'KUBERNETES_POD', 'kind: Pod',
       service_id => '5e000000-0000-0000-0000-000000000001', has_credential => true);
SELECT service_name, version_ctr FROM extsvc.update_service('5e000000-0000-0000-0000-000000000001', 'kind: Pod2', has_credential => true);
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'dpf', 'DPF_HELM_CHART', :'chart',
       dpu_target => 'PRIMARY', service_id => '5e000000-0000-0000-0000-000000000002');
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'site', 'DPF_HELM_CHART', :'chart',
       deployment_scope => 'ALL_DPUS', service_id => '5e000000-0000-0000-0000-000000000003');

------------------------------------------------------------------ service_versions
SELECT version_number, data, has_credential, deleted_at IS NOT NULL AS deleted
  FROM extsvc.service_versions('5e000000-0000-0000-0000-000000000001');
SELECT version_number, data FROM extsvc.service_versions('5e000000-0000-0000-0000-000000000002');
SELECT * FROM pg_temp.try($$SELECT * FROM extsvc.service_versions('5e000000-0000-0000-0000-0000000000ff')$$);
SELECT * FROM pg_temp.try($$SELECT * FROM extsvc.service_versions('5e000000-0000-0000-0000-000000000001', tenant_organization_id => 't2')$$);

------------------------------------------------------------------ service_snapshots
SELECT service_name, lifecycle_state, cardinality(active_versions) AS active, latest_data, latest_has_credential,
       lifecycle_version, state_reason, state_actor
  FROM extsvc.service_snapshots(ARRAY['5e000000-0000-0000-0000-000000000002', '5e000000-0000-0000-0000-0000000000ff',
                                      '5e000000-0000-0000-0000-000000000001']::uuid[]);

------------------------------------------------------------------ get_instance, service_instances
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id IN ('5e000000-0000-0000-0000-000000000002', '5e000000-0000-0000-0000-000000000003');
SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000001', 't1', 'fm100hsc000000000000000000000000000000100000000000000000000',
                              ARRAY['fm100dsd000000000000000000000000000000a00000000000000000000']::text[]);
SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001',
       (SELECT jsonb_agg(jsonb_build_object('service_id', service_id, 'version', version)) FROM extsvc.services WHERE service_name = 'dpf'));
SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[]');
SELECT instance_id, tenant_organization_id, network_dpus, dpf_managed, config_version, delete_requested_at,
       jsonb_path_query_array(services, '$[*].service_name') AS service_names,
       jsonb_path_query_array(services, '$[*].removed_at != null') AS removed
  FROM extsvc.get_instance('10000000-0000-0000-0000-000000000001');
SELECT instance_id, removed_at IS NOT NULL AS removed FROM extsvc.service_instances('5e000000-0000-0000-0000-000000000002');
SELECT * FROM pg_temp.try($$SELECT * FROM extsvc.service_instances('5e000000-0000-0000-0000-000000000002', 'V9-T9')$$);

------------------------------------------------------------------ unknown instance: P0002 in every status function
SELECT f, (pg_temp.try(format('SELECT * FROM extsvc.%s(%L)', f, '10000000-0000-0000-0000-0000000000ff'))).*
  FROM unnest(ARRAY['get_instance', 'instance_extension_service_status', 'instance_extension_services_summary',
                    'instance_extension_services_ready']) f;
SELECT f, (pg_temp.try(format('SELECT * FROM extsvc.%s(%L, %L)', f, '10000000-0000-0000-0000-000000000001', 't2'))).*
  FROM unnest(ARRAY['get_instance', 'instance_extension_service_status']) f;

------------------------------------------------------------------ site_service_status
SET nico_extsvc.actor = 'worker';  -- fixture: what the worker would record
INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state, status_message)
VALUES ('5e000000-0000-0000-0000-000000000003', 'fm100dsd000000000000000000000000000000b00000000000000000000', 'PENDING', 'no pod yet');
RESET nico_extsvc.actor;
SELECT dpu_machine_id, dpu_device_name, deployment_state, status_message, observed_at IS NOT NULL AS observed
  FROM extsvc.site_service_status('5e000000-0000-0000-0000-000000000003');
SELECT * FROM pg_temp.try($$SELECT * FROM extsvc.site_service_status('5e000000-0000-0000-0000-000000000002')$$);

DROP EXTENSION nico_extsvc;
