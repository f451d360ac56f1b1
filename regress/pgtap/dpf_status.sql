-- Issue #9: DPF's own view on a service (its Ready condition) reaches SQL
-- through extsvc.record_dpf_status, which writes only differences; a
-- DPUService someone paused is named in the READY service's status_message.
BEGIN;
\ir helpers.psql
SELECT plan(8);
SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''0b000000-0000-0000-0000-000000000001'''
\set C '''0b000000-0000-0000-0000-000000000002'''

SELECT extsvc.create_service('dpfst-t', 'ready', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :S);
SELECT extsvc.create_service('dpfst-t', 'creating', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :C);
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision, status_message = NULL WHERE service_id = :S;

SELECT is(extsvc.record_dpf_status(jsonb_build_array(
            jsonb_build_object('service_id', :S, 'ready', false, 'reason', 'Pending',
                               'message', 'The following conditions are not ready: ApplicationsReady'))),
          1, 'record_dpf_status: a new status is written');
SELECT is(extsvc.record_dpf_status(jsonb_build_array(
            jsonb_build_object('service_id', :S, 'ready', false, 'reason', 'Pending',
                               'message', 'The following conditions are not ready: ApplicationsReady'))),
          0, 'record_dpf_status: the same status again writes nothing');
SELECT is((SELECT row(dpf_ready, dpf_reason, dpf_message)::text FROM extsvc.services WHERE service_id = :S),
          row(false, 'Pending', 'The following conditions are not ready: ApplicationsReady')::text,
          'extsvc.services shows DPF''s Ready condition');
SELECT is((SELECT status_message FROM extsvc.services WHERE service_id = :S), NULL,
          'an unready DPUService that is not paused leaves status_message alone');
SELECT is(extsvc.record_dpf_status(jsonb_build_array(
            jsonb_build_object('service_id', :S, 'ready', true, 'reason', 'Success',
                               'message', 'spec.paused is true: DPF does not reconcile or delete this DPUService'),
            jsonb_build_object('service_id', :C, 'ready', true, 'reason', 'Success',
                               'message', 'spec.paused is true: DPF does not reconcile or delete this DPUService; x'))),
          2, 'record_dpf_status: several services in one call');
SELECT is((SELECT status_message FROM extsvc.services WHERE service_id = :S),
          'spec.paused is true: DPF does not reconcile or delete this DPUService',
          'a paused DPUService is named in the READY service''s status_message');
SELECT is((SELECT status_message FROM extsvc.services WHERE service_id = :C),
          'waiting for the worker to create the DPUService',
          'a service that is not READY keeps its own status_message');
SELECT is(extsvc.record_dpf_status('[]'), 0, 'record_dpf_status: an empty list changes nothing');

SELECT * FROM finish();
ROLLBACK;
