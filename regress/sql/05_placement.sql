-- SPEC 2.4, 2.7, 2.8: DPU and instance registry, attach and detach, target
-- resolution into per-DPU attachment rows, the derived label set, the per-DPU
-- work queue and the status functions. No worker runs (extsvc.workers = 0):
-- this session plays it with extsvc.claim and extsvc.complete on the dpu
-- queue. Version strings and label keys carry the creation time, so outputs
-- show service names instead.
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

-- a configuration list [{service_id, version}] of the given services, in order
CREATE FUNCTION pg_temp.cfg(VARIADIC ids uuid[]) RETURNS jsonb LANGUAGE sql AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object('service_id', s.service_id, 'version', s.version) ORDER BY o), '[]')
    FROM unnest(ids) WITH ORDINALITY u(id, o) JOIN extsvc.services s ON s.service_id = u.id
$$;

-- the worker's side: the DPF service was created (CREATING -> READY)
CREATE FUNCTION pg_temp.make_ready(id uuid) RETURNS text LANGUAGE sql AS $$
  UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker',
         state_reason = CASE lifecycle_state WHEN 'CREATING' THEN 'dpuservice_created' ELSE 'revision_applied' END,
         applied_revision = desired_revision
   WHERE service_id = id RETURNING service_name || ' READY'
$$;

-- the attachment rows of an instance (or of all instances)
CREATE FUNCTION pg_temp.rows(inst uuid DEFAULT NULL) RETURNS TABLE (
    instance text, dpu text, service text, placement text, deployment text, message text,
    observed_cfg integer, removing boolean)
LANGUAGE sql AS $$
  SELECT right(a.instance_id::text, 2), d.dpu_device_name, s.service_name, a.placement_state, a.deployment_state,
         a.status_message, a.observed_config_version, a.removing_since IS NOT NULL
    FROM extsvc.dpf_extension_service_attachments a
    JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id
    JOIN extsvc.service_records s ON s.service_id = a.service_id
   WHERE inst IS NULL OR a.instance_id = inst
   ORDER BY 1, 2, 3
$$;

-- an instance's configuration entries (tombstones have removed_at)
CREATE FUNCTION pg_temp.entries(inst uuid) RETURNS TABLE (service text, removed boolean, config_version integer)
LANGUAGE sql AS $$
  SELECT s.service_name, c.removed_at IS NOT NULL, i.config_version
    FROM extsvc.instance_extension_services c
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = c.service_id
   WHERE c.instance_id = inst ORDER BY 1
$$;

-- the per-DPU work queue, without times
CREATE FUNCTION pg_temp.q() RETURNS TABLE (dpu text, state_version bigint, due text, leased boolean,
                                           attempts integer, last_error text)
LANGUAGE sql AS $$
  SELECT d.dpu_device_name, q.state_version,
         CASE WHEN q.next_due_at IS NULL THEN 'never' WHEN q.next_due_at <= now() THEN 'now' ELSE 'later' END,
         q.lease_token IS NOT NULL, q.attempts, q.last_error
    FROM extsvc.dpu_reconciliations q JOIN extsvc.dpus d ON d.machine_id = q.dpu_machine_id
   ORDER BY 1
$$;

-- the desired label set: one row per (DPU, service) with its reasons
CREATE FUNCTION pg_temp.labels() RETURNS TABLE (dpu text, service text, reasons text)
LANGUAGE sql AS $$
  SELECT d.dpu_device_name, s.service_name,
         string_agg(w.reason || coalesce(':' || right(w.instance_id::text, 2), ''), ', ' ORDER BY w.reason, w.instance_id)
    FROM extsvc.dpu_desired_labels w
    JOIN extsvc.dpus d ON d.machine_id = w.dpu_machine_id
    JOIN extsvc.service_records s ON s.service_id = w.service_id AND s.placement_label_key = w.label_key
   GROUP BY 1, 2 ORDER BY 1, 2
$$;

-- One simulated worker pass: claims every due DPU and reports each item as
-- p_wanted when it is wanted there and p_unwanted when not. DPUs outside
-- p_only are released unobserved (still due). next tells when the DPU is due
-- again ('none': converged); the row is then parked (next_due_at NULL) so that
-- the short, jittered backoffs cannot make later outputs depend on timing.
CREATE FUNCTION pg_temp.pass(p_only text[] DEFAULT NULL, p_wanted text DEFAULT 'RUNNING',
                             p_unwanted text DEFAULT 'TERMINATED', p_keep_polling boolean DEFAULT false)
RETURNS TABLE (dpu text, state_version bigint, deregistered boolean, wanted text[], result text, next text)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
BEGIN
  FOR c IN SELECT * FROM extsvc.claim('dpu', 'test-worker', 100, 30) x ORDER BY x.work->>'device_name' LOOP
    IF p_only IS NOT NULL AND NOT (c.work->>'device_name' = ANY (p_only)) THEN
      UPDATE extsvc.dpu_reconciliations q SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
       WHERE q.dpu_machine_id = c.id;
      CONTINUE;
    END IF;
    dpu := c.work->>'device_name';
    state_version := c.state_version;
    deregistered := (c.work->>'deregistered')::boolean;
    wanted := ARRAY(SELECT s.service_name FROM jsonb_array_elements_text(c.work->'wanted_keys') k
                      JOIN extsvc.service_records s ON s.placement_label_key = k ORDER BY 1);
    result := extsvc.complete('dpu', c.id, c.state_version, c.lease_token,
                              jsonb_build_object('outcome', 'observed',
                                                 'results', coalesce((SELECT jsonb_agg(i || jsonb_build_object('state',
                  CASE WHEN (i->>'wanted')::boolean THEN p_wanted ELSE p_unwanted END))
                  FROM jsonb_array_elements(c.work->'items') i), '[]'),
                                                 'keep_polling', p_keep_polling));
    SELECT CASE WHEN q.next_due_at IS NULL THEN 'none'
                WHEN q.next_due_at <= q.last_observed_at + interval '5 s' THEN 'in <= 5s'
                WHEN q.next_due_at <= q.last_observed_at + interval '30 s' THEN 'in 5..30s'
                ELSE 'later' END INTO next
      FROM extsvc.dpu_reconciliations q WHERE q.dpu_machine_id = c.id;
    UPDATE extsvc.dpu_reconciliations q SET next_due_at = NULL
     WHERE q.dpu_machine_id = c.id AND q.next_due_at > now();
    RETURN NEXT;
  END LOOP;
END $$;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.1","security":{"privileged":false}}'
-- services (tenant-a unless noted)
\set A '''5e000000-0000-0000-0000-0000000000a1'''
\set P '''5e000000-0000-0000-0000-0000000000b2'''
\set N '''5e000000-0000-0000-0000-0000000000c3'''
\set K '''5e000000-0000-0000-0000-0000000000d4'''
\set C '''5e000000-0000-0000-0000-0000000000e5'''
\set X '''5e000000-0000-0000-0000-0000000000f6'''
\set W '''5e000000-0000-0000-0000-000000000007'''
-- hosts: H1 (DPF, two DPUs), H2 (DPF, one DPU), H3 (not DPF-managed), H4 (no DPU registered),
-- H5 (DPF, two DPUs: a host holds one live instance, issue 29, so I2 is not on H1)
\set H1 '''fm100hsc000000000000000000000000000000100000000000000000000'''
\set H2 '''fm100hsc000000000000000000000000000000200000000000000000000'''
\set H3 '''fm100hsc000000000000000000000000000000300000000000000000000'''
\set H4 '''fm100hsc000000000000000000000000000000400000000000000000000'''
\set H5 '''fm100hsc000000000000000000000000000000500000000000000000000'''
\set DA '''fm100dsd000000000000000000000000000000a00000000000000000000'''
\set DB '''fm100dsd000000000000000000000000000000b00000000000000000000'''
\set DC '''fm100dsd000000000000000000000000000000c00000000000000000000'''
\set DD '''fm100dsd000000000000000000000000000000d00000000000000000000'''
\set DE '''fm100dsd000000000000000000000000000000e00000000000000000000'''
\set DF '''fm100dsd000000000000000000000000000000f00000000000000000000'''
-- instances
\set I1 '''10000000-0000-0000-0000-000000000001'''
\set I2 '''10000000-0000-0000-0000-000000000002'''
\set I3 '''10000000-0000-0000-0000-000000000003'''
\set I4 '''10000000-0000-0000-0000-000000000004'''
\set I6 '''10000000-0000-0000-0000-000000000006'''

SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'svc-all', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :A)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'svc-primary', 'DPF_HELM_CHART', :'chart', dpu_target => 'PRIMARY', service_id => :P)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'svc-active', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL_ACTIVE', service_id => :N)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'pod-svc', 'KUBERNETES_POD', 'apiVersion: v1', service_id => :K)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'svc-creating', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :C)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-b', 'svc-other-tenant', 'DPF_HELM_CHART', :'chart', dpu_target => 'ALL', service_id => :X)
UNION ALL
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state FROM extsvc.create_service('tenant-a', 'site-wide', 'DPF_HELM_CHART', :'chart', deployment_scope => 'ALL_DPUS', service_id => :W);
SELECT pg_temp.make_ready(id) FROM unnest(ARRAY[:A, :P, :N, :X]::uuid[]) id ORDER BY 1;

------------------------------------------------------------------ register_dpu
-- names must be Kubernetes names; ids are required
SELECT * FROM pg_temp.try($$SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000a00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', 'DPU_A', 'node-a')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000a00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', 'dpu-a', '-node-a')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000a00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', NULL, 'node-a')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.register_dpu(NULL, 'fm100hsc000000000000000000000000000000100000000000000000000', 'dpu-a', 'node-a')$$);
SELECT count(*) AS dpus FROM extsvc.dpus;
SELECT extsvc.register_dpu(:DA, :H1, 'dpu-a', 'node-a', true);
SELECT extsvc.register_dpu(:DB, :H1, 'dpu-b', 'node-b-old');
SELECT extsvc.register_dpu(:DC, :H2, 'dpu-c', 'node-c', true);
SELECT extsvc.register_dpu(:DD, :H3, 'dpu-d', 'node-d', true);
-- re-registering updates the row
SELECT extsvc.register_dpu(:DB, :H1, 'dpu-b', 'node-b');
-- one primary per host: a new primary demotes the old one
SELECT extsvc.register_dpu(:DB, :H1, 'dpu-b', 'node-b', true);
SELECT dpu_device_name, dpu_node_name, is_primary, deregistered_at FROM extsvc.dpus ORDER BY 1;
SELECT extsvc.register_dpu(:DA, :H1, 'dpu-a', 'node-a', true);
SELECT dpu_device_name, dpu_node_name, is_primary FROM extsvc.dpus WHERE host_machine_id = :H1 ORDER BY 1;
-- every DPU has a work row; nothing is wanted yet (site-wide is CREATING)
SELECT * FROM pg_temp.q();
SELECT * FROM pg_temp.labels();

------------------------------------------------------------------ upsert_instance
SELECT extsvc.upsert_instance(:I1, 'tenant-a', :H1, ARRAY[:DA]::text[]);
-- a host holds one live instance (issue 29): a second one on H1 is refused
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000002', 'tenant-a', 'fm100hsc000000000000000000000000000000100000000000000000000')$$);
SELECT extsvc.upsert_instance(:I3, 'tenant-a', :H4);
SELECT extsvc.upsert_instance(:I4, 'tenant-a', :H3, dpf_managed => false);
SELECT right(instance_id::text, 2) AS instance, tenant_organization_id, cardinality(network_dpus) AS network_dpus,
       dpf_managed, config_version FROM extsvc.instances ORDER BY 1;
-- an instance never changes its tenant
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000001', 'tenant-b', 'fm100hsc000000000000000000000000000000100000000000000000000')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000009', ' ', 'fm100hsc000000000000000000000000000000100000000000000000000')$$);

------------------------------------------------------------------ set_instance_extension_services: validation
-- not an array
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '{}')$$);
-- entry shape
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[1]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000a1') || '[{"service_id": "5e000000-0000-0000-0000-0000000000b2", "version": "V1-T1", "extra": 1}]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[{"service_id": "not-a-uuid", "version": "V1-T1"}]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[{"service_id": "5e000000-0000-0000-0000-0000000000a1", "version": 1}]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[{"service_id": "5e000000-0000-0000-0000-0000000000a1"}]')$$);
-- duplicate service
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000a1', '5e000000-0000-0000-0000-0000000000c3', '5e000000-0000-0000-0000-0000000000a1'))$$);
-- unknown service, unknown version
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[{"service_id": "99999999-9999-9999-9999-999999999999", "version": "V1-T1"}]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[{"service_id": "5e000000-0000-0000-0000-0000000000a1", "version": "V9-T1"}]')$$);
-- another tenant's service
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000f6'))$$);
-- a service that is not READY cannot be attached
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000e5'))$$);
-- ALL_DPUS services are never attached
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-000000000007'))$$);
-- no mix of KUBERNETES_POD and DPF_HELM_CHART
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000d4', '5e000000-0000-0000-0000-0000000000a1'))$$);
-- DPF services only on DPF-managed hosts
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000004', pg_temp.cfg('5e000000-0000-0000-0000-0000000000a1'))$$);
-- a new attachment whose target resolves to no DPU: refused, nothing written
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000003', pg_temp.cfg('5e000000-0000-0000-0000-0000000000a1'))$$);
-- ALL_ACTIVE with a network DPU that is not attached to the host: refused
-- by upsert_instance (issue #12); the instance row gets one anyway (as when
-- a listed DPU is later registered to another host), the attach is refused
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000003', 'tenant-a', 'fm100hsc000000000000000000000000000000400000000000000000000', ARRAY['fm100dsd000000000000000000000000000000a00000000000000000000']::text[])$$);
UPDATE extsvc.instances SET network_dpus = ARRAY[:DA]::text[] WHERE instance_id = :I3;
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000003', pg_temp.cfg('5e000000-0000-0000-0000-0000000000c3'))$$);
SELECT * FROM pg_temp.entries(:I3);
SELECT config_version FROM extsvc.instances WHERE instance_id = :I3;
-- unknown instance; stale config_version
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000009', '[]')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[]', 7)$$);
-- none of the refusals wrote anything
SELECT count(*) AS entries FROM extsvc.instance_extension_services;
SELECT count(*) AS attachment_rows FROM extsvc.dpf_extension_service_attachments;
SELECT right(instance_id::text, 2) AS instance, config_version FROM extsvc.instances ORDER BY 1;

------------------------------------------------------------------ attach: target resolution
-- I1 on H1 (dpu-a primary, dpu-b), network uses dpu-a:
-- ALL -> dpu-a and dpu-b, ALL_ACTIVE -> dpu-a, PRIMARY -> dpu-a
SELECT extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A, :N, :P), 1) AS config_version;
SELECT * FROM pg_temp.entries(:I1);
SELECT * FROM pg_temp.rows(:I1);
-- the rows' DPUs are due, with a new state_version; dpu-c and dpu-d are not touched
SELECT * FROM pg_temp.q();
SELECT * FROM pg_temp.labels();
-- the same set again (any order): same config_version, nothing touched
SELECT extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:P, :A, :N)) AS config_version;
SELECT extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:P, :A, :N), 2) AS config_version;
SELECT * FROM pg_temp.q();
-- a stale config_version is refused
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[]', 1)$$);

------------------------------------------------------------------ the worker: claim and complete
CREATE TEMP TABLE claim1 AS SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30);
SELECT work->>'device_name' AS dpu_device_name, work->>'node_name' AS dpu_node_name, state_version,
       (work->>'deregistered')::boolean AS deregistered, (work->>'attempts')::integer AS attempts,
       ARRAY(SELECT s.service_name FROM jsonb_array_elements_text(work->'wanted_keys') k
               JOIN extsvc.service_records s ON s.placement_label_key = k ORDER BY 1) AS wanted
  FROM claim1 ORDER BY 1;
-- items: one per attachment row on the DPU, with the generated names
SELECT c.work->>'device_name' AS dpu_device_name, i->>'kind' AS kind, right(i->>'instance_id', 2) AS instance, s.service_name,
       i->>'version' = s.attachable_version AS version_ok, i->>'label_key' = s.placement_label_key AS key_ok,
       i->>'dpf_service_name' = s.dpf_service_name AS name_ok, (i->>'wanted')::boolean AS wanted
  FROM claim1 c, jsonb_array_elements(c.work->'items') i JOIN extsvc.service_records s ON s.service_id = (i->>'service_id')::uuid
 ORDER BY 1, 4;
-- the leases are held: SKIP LOCKED / unexpired leases give nothing more
SELECT * FROM pg_temp.q();
SELECT count(*) AS claimed FROM extsvc.claim('dpu', 'w2', 100, 30);
-- new intent while w1 works: the network now also uses dpu-b
SELECT extsvc.upsert_instance(:I1, 'tenant-a', :H1, ARRAY[:DA, :DB]::text[]);
SELECT * FROM pg_temp.rows(:I1);
SELECT * FROM pg_temp.q();
-- w1's result for dpu-b is stale: nothing written, the row is released and due
SELECT extsvc.complete('dpu', id, state_version, lease_token,
                       jsonb_build_object('outcome', 'observed',
                                          'results', jsonb_build_array(jsonb_build_object('kind', 'attachment', 'instance_id', '10000000-0000-0000-0000-000000000001',
                                              'service_id', '5e000000-0000-0000-0000-0000000000a1',
                                              'version', (SELECT version FROM extsvc.services WHERE service_id = :A),
                                              'state', 'RUNNING')))) AS result
  FROM claim1 WHERE work->>'device_name' = 'dpu-b';
-- a wrong lease token is lost
SELECT extsvc.complete('dpu', id, state_version, gen_random_uuid(),
                       jsonb_build_object('outcome', 'observed', 'results', '[]'::jsonb)) AS result
  FROM claim1 WHERE work->>'device_name' = 'dpu-a';
SELECT * FROM pg_temp.rows(:I1);
SELECT * FROM pg_temp.q();
-- dpu-a: everything RUNNING there (the DPU's state_version is unchanged by
-- this status write); converged, so not due again
SELECT extsvc.complete('dpu', id, state_version, lease_token,
                       jsonb_build_object('outcome', 'observed',
                                          'results', (SELECT jsonb_agg(i || '{"state": "RUNNING", "message": "pod ready"}') FROM jsonb_array_elements(work->'items') i),
                                          'observation', '{"labels": "seen"}'::jsonb)) AS result
  FROM claim1 WHERE work->>'device_name' = 'dpu-a';
SELECT * FROM pg_temp.rows(:I1);
-- dpu-c and dpu-d carry nothing: converged too
SELECT work->>'device_name' AS dpu_device_name, extsvc.complete('dpu', id, state_version, lease_token,
                                                               jsonb_build_object('outcome', 'observed')) AS result
  FROM claim1 WHERE work->>'device_name' IN ('dpu-c', 'dpu-d') ORDER BY 1;
SELECT * FROM pg_temp.q();
SELECT dpu_device_name, observation, last_observed_at IS NOT NULL AS observed
  FROM extsvc.dpu_placement ORDER BY 1;
-- a used token is lost afterwards
SELECT extsvc.complete('dpu', id, state_version, lease_token,
                       jsonb_build_object('outcome', 'observed', 'results', '[]'::jsonb)) AS result
  FROM claim1 WHERE work->>'device_name' = 'dpu-a';
-- an unknown outcome is an error
SELECT * FROM pg_temp.try($$SELECT extsvc.complete('dpu', id, state_version, lease_token,
                                                   jsonb_build_object('outcome', 'bogus')) FROM extsvc.claim('dpu', 'w1', 1, 30)$$);

-- 'retry' backs off: attempts counted, error kept, due later (here after Retry-After)
SELECT extsvc.complete('dpu', id, state_version, lease_token,
                       jsonb_build_object('outcome', 'retry', 'message', 'DPU cluster unreachable',
                                          'http_status', 503, 'retry_after_s', 200)) AS result
  FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE work->>'device_name' = 'dpu-b';
SELECT * FROM pg_temp.q();
SELECT next_due_at >= last_error_at + interval '200 s' AS honours_retry_after, last_http_status
  FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB;
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows(:I1);

-- (a few failed attempts already, so that the backoff exceeds both bounds)
UPDATE extsvc.dpu_reconciliations SET next_due_at = now(), attempts = 6 WHERE dpu_machine_id = :DB;
-- dpu-b's pods are not ready yet: not converged, due again within 5 s
SELECT * FROM pg_temp.pass(p_wanted => 'PENDING');
SELECT * FROM pg_temp.rows(:I1);
-- converged: attempts reset, error cleared, not due again
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :DB;
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.q();
-- keep_polling (a rollout is still under way): due again after the backoff, within 30 s
UPDATE extsvc.dpu_reconciliations SET next_due_at = now(), attempts = 6 WHERE dpu_machine_id = :DB;
SELECT * FROM pg_temp.pass(p_keep_polling => true);
UPDATE extsvc.dpu_reconciliations SET attempts = 0 WHERE dpu_machine_id = :DB;

------------------------------------------------------------------ status
SELECT service_name, version = (SELECT version FROM extsvc.services v WHERE v.service_id = x.service_id) AS version_ok,
       dpu_device_name, dpu_node_name, placement_state, deployment_state, removed_at, status_message,
       observed_at IS NOT NULL AS observed, config_version, observed_config_version
  FROM extsvc.instance_extension_service_status(:I1) x;
SELECT service_name, service_type, aggregate_state, removed, dpus, configs_synced
  FROM extsvc.instance_extension_services_summary(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;
SELECT * FROM pg_temp.try($$SELECT extsvc.instance_extension_services_ready('10000000-0000-0000-0000-000000000009')$$);
-- one DPU in ERROR: the aggregate says ERROR, not ready (the resync makes
-- every DPU due)
SELECT extsvc.mark_dpus_due() AS dpus_due;
SELECT * FROM pg_temp.pass(ARRAY['dpu-b'], p_wanted => 'ERROR');
SELECT service_name, aggregate_state, configs_synced FROM extsvc.instance_extension_services_summary(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;
SELECT extsvc.mark_dpus_due() AS dpus_due;
SELECT * FROM pg_temp.pass(ARRAY['dpu-b'], p_wanted => 'UNKNOWN');
SELECT service_name, aggregate_state FROM extsvc.instance_extension_services_summary(:I1);
-- everything RUNNING again
SELECT extsvc.mark_dpus_due() AS dpus_due;
SELECT * FROM pg_temp.pass();
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;
-- the aggregate precedence: ERROR > UNKNOWN > PENDING > all RUNNING > TERMINATING > all TERMINATED
SELECT s AS states, extsvc._aggregate_state(s) AS aggregate FROM (VALUES
  (ARRAY['RUNNING', 'ERROR', 'UNKNOWN', 'PENDING']), (ARRAY['RUNNING', 'UNKNOWN', 'PENDING']),
  (ARRAY['RUNNING', 'PENDING', 'TERMINATING']), (ARRAY['RUNNING', 'RUNNING']), (ARRAY['TERMINATING', 'TERMINATED']),
  (ARRAY['TERMINATED', 'TERMINATED']), (ARRAY['RUNNING', 'TERMINATED']), (ARRAY['RUNNING', 'TERMINATING']),
  (ARRAY[]::text[])) v(s);

------------------------------------------------------------------ network change
-- the network now uses dpu-b only: svc-active leaves dpu-a (REMOVING) and
-- stays on dpu-b; config_version does not change
SELECT extsvc.upsert_instance(:I1, 'tenant-a', :H1, ARRAY[:DB]::text[]);
SELECT * FROM pg_temp.rows(:I1);
SELECT * FROM pg_temp.q();
SELECT * FROM pg_temp.labels();
SELECT service_name, aggregate_state, removed, dpus, configs_synced FROM extsvc.instance_extension_services_summary(:I1);
-- a network naming a DPU of another host (dpu-c) is refused (issue #12):
-- rows untouched, nothing due
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000001', 'tenant-a', 'fm100hsc000000000000000000000000000000100000000000000000000', ARRAY['fm100dsd000000000000000000000000000000b00000000000000000000', 'fm100dsd000000000000000000000000000000c00000000000000000000']::text[])$$);
SELECT * FROM pg_temp.rows(:I1);
SELECT * FROM pg_temp.q();
SELECT extsvc.upsert_instance(:I1, 'tenant-a', :H1, ARRAY[:DB]::text[]);
-- the worker observes dpu-a clean: the REMOVING row goes
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;

------------------------------------------------------------------ reference counting: a hand-over
-- A host holds one live instance (issue 29). I2 (on H5) attaches svc-all;
-- I2 is deleted and I6 takes H5 at once (a hand-over) and attaches svc-all
-- too: one label per DPU, two rows; the old instance's REMOVING rows are
-- released to the new ACTIVE ones at the next observation, never TERMINATED
SELECT extsvc.register_dpu(:DE, :H5, 'dpu-e', 'node-e', true);
SELECT extsvc.register_dpu(:DF, :H5, 'dpu-f', 'node-f');
SELECT extsvc.upsert_instance(:I2, 'tenant-a', :H5, ARRAY[:DE]::text[]);
SELECT extsvc.set_instance_extension_services(:I2, pg_temp.cfg(:A)) AS config_version;
SELECT * FROM pg_temp.pass();
SELECT extsvc.delete_instance(:I2);
SELECT extsvc.upsert_instance(:I6, 'tenant-a', :H5, ARRAY[:DE]::text[]);
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A)) AS config_version;
SELECT * FROM pg_temp.rows(:I2);
SELECT * FROM pg_temp.rows(:I6);
SELECT * FROM pg_temp.labels();
SELECT * FROM pg_temp.pass(p_unwanted => 'RUNNING');
SELECT * FROM pg_temp.rows(:I2);
SELECT count(*) AS i2_left FROM extsvc.instances WHERE instance_id = :I2;
-- I1 detaches svc-all: a tombstone and REMOVING rows on every DPU of H1;
-- observed TERMINATED, they and the tombstone go
SELECT extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:N, :P)) AS config_version;
SELECT * FROM pg_temp.entries(:I1);
SELECT * FROM pg_temp.rows(:I1);
SELECT service_name, aggregate_state, removed, dpus, configs_synced FROM extsvc.instance_extension_services_summary(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows(:I1);
SELECT * FROM pg_temp.entries(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;

------------------------------------------------------------------ detach
-- I6 attaches svc-primary (dpu-e only, H5's primary) then detaches it:
-- REMOVING rows on every DPU of the host
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A, :P)) AS config_version;
SELECT * FROM pg_temp.pass();
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A)) AS config_version;
SELECT * FROM pg_temp.rows(:I6);
SELECT * FROM pg_temp.labels();
SELECT service_name, aggregate_state, removed, dpus, configs_synced FROM extsvc.instance_extension_services_summary(:I6);
-- re-adding before the removal was observed brings the tombstone back to life
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A, :P)) AS config_version;
SELECT * FROM pg_temp.entries(:I6);
SELECT * FROM pg_temp.rows(:I6);
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows(:I6);
SELECT extsvc.instance_extension_services_ready(:I6) AS ready;
-- and detach again
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A)) AS config_version;
SELECT extsvc.instance_extension_services_ready(:I6) AS ready;
-- svc-primary cannot be deleted while I1 uses it and I6's tombstone exists
SELECT extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:N)) AS config_version;
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('5e000000-0000-0000-0000-0000000000b2')$$);
-- dpu-a observed clean; dpu-b, dpu-e and dpu-f not yet: the tombstones stay
SELECT * FROM pg_temp.pass(ARRAY['dpu-a']);
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('5e000000-0000-0000-0000-0000000000b2')$$);
SELECT service_name, aggregate_state, removed, dpus, configs_synced FROM extsvc.instance_extension_services_summary(:I6);
-- the others observed clean: rows and tombstones gone, the delete is allowed
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.entries(:I1);
SELECT * FROM pg_temp.entries(:I6);
SELECT extsvc.instance_extension_services_ready(:I6) AS ready;
SELECT lifecycle_state FROM extsvc.delete_service(:P);

------------------------------------------------------------------ attachments of a service being updated
-- svc-all is UPDATING: the existing attachment stays allowed, a new one is not
SELECT lifecycle_state FROM extsvc.update_service(:A, :'chart2');
SELECT * FROM pg_temp.q();
SELECT extsvc.set_instance_extension_services(:I6, pg_temp.cfg(:A, :N)) AS config_version;
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', pg_temp.cfg('5e000000-0000-0000-0000-0000000000c3', '5e000000-0000-0000-0000-0000000000a1'))$$);
SELECT pg_temp.make_ready(:A);
SELECT * FROM pg_temp.pass();

------------------------------------------------------------------ ALL_DPUS
-- not wanted while CREATING
SELECT * FROM pg_temp.labels() WHERE service = 'site-wide';
SELECT pg_temp.make_ready(:W);
-- READY: wanted on every registered DPU, which are all due
SELECT * FROM pg_temp.labels() WHERE service = 'site-wide';
SELECT * FROM pg_temp.q();
SELECT * FROM pg_temp.pass();
SELECT dpu_device_name, deployment_state FROM extsvc.site_service_dpu_status JOIN extsvc.dpus ON machine_id = dpu_machine_id ORDER BY 1;
-- a deregistered DPU wants nothing
SELECT * FROM pg_temp.try($$SELECT extsvc.deregister_dpu('fm100dsd000000000000000000000000000009900000000000000000000')$$);
SELECT extsvc.deregister_dpu(:DD);
SELECT * FROM pg_temp.labels() WHERE dpu = 'dpu-d';
SELECT * FROM pg_temp.pass();
-- delete: no longer wanted anywhere; the DPUService goes only when every
-- registered DPU reported TERMINATED after the delete
SELECT lifecycle_state FROM extsvc.delete_service(:W);
SELECT * FROM pg_temp.labels() WHERE service = 'site-wide';
SELECT extsvc._site_service_cleared(:W) AS cleared;
SELECT c.work->>'lifecycle_state' AS lifecycle_state, (c.work->>'placement_clear')::boolean AS placement_clear,
       extsvc.complete('service', c.id, c.state_version, c.lease_token,
                       jsonb_build_object('outcome', 'poll')) AS result
  FROM extsvc.claim('service', 'test-worker', 100) c WHERE c.id = :W;
SELECT * FROM pg_temp.pass(ARRAY['dpu-a', 'dpu-b']);
SELECT extsvc._site_service_cleared(:W) AS cleared;
SELECT * FROM pg_temp.pass();
SELECT dpu_device_name, deployment_state FROM extsvc.site_service_dpu_status JOIN extsvc.dpus ON machine_id = dpu_machine_id ORDER BY 1;
SELECT extsvc._site_service_cleared(:W) AS cleared;
-- the TERMINATED reports made the service's row due again
SELECT c.work->>'lifecycle_state' AS lifecycle_state, (c.work->>'placement_clear')::boolean AS placement_clear,
       extsvc.complete('service', c.id, c.state_version, c.lease_token,
                       jsonb_build_object('outcome', 'transition', 'new_state', 'DELETED',
                                          'reason', 'dpuservice_deleted')) AS result
  FROM extsvc.claim('service', 'test-worker', 100) c WHERE c.id = :W;
SELECT * FROM pg_temp.q();

------------------------------------------------------------------ deregister_dpu
-- dpu-b leaves H1: its attachments go REMOVING (never dropped)
SELECT extsvc.deregister_dpu(:DB);
SELECT * FROM pg_temp.rows();
SELECT dpu_device_name, is_primary, deregistered_at IS NOT NULL AS deregistered FROM extsvc.dpus ORDER BY 1;
SELECT * FROM pg_temp.labels();
SELECT * FROM pg_temp.pass();
SELECT * FROM pg_temp.rows();
-- the site-wide service is DELETED: its per-DPU statuses are gone too
SELECT count(*) AS site_statuses FROM extsvc.site_service_dpu_status;

------------------------------------------------------------------ DPU agent feed
-- only KUBERNETES_POD entries, including removed ones; never DPF services
SELECT extsvc.set_instance_extension_services(:I4, pg_temp.cfg(:K)) AS config_version;
SELECT right(instance_id::text, 2) AS instance, service_name, version = (SELECT version FROM extsvc.services WHERE service_id = :K) AS version_ok,
       data, has_credential, removed_at IS NOT NULL AS removed
  FROM extsvc.dpu_agent_extension_services(:DD);
SELECT extsvc.set_instance_extension_services(:I4, '[]') AS config_version;
SELECT right(instance_id::text, 2) AS instance, service_name, removed_at IS NOT NULL AS removed
  FROM extsvc.dpu_agent_extension_services(:DD);
SELECT count(*) AS entries FROM extsvc.dpu_agent_extension_services(:DA);
SELECT * FROM pg_temp.try($$SELECT extsvc.dpu_agent_extension_services('fm100dsd000000000000000000000000000009900000000000000000000')$$);
-- no placement rows for KUBERNETES_POD
SELECT count(*) AS rows FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I4;

------------------------------------------------------------------ delete_instance
-- dpu-b comes back; I1's network uses dpu-a and dpu-b again, and its
-- svc-active entry (without rows since dpu-b left) resolves again
SELECT extsvc.register_dpu(:DB, :H1, 'dpu-b', 'node-b');
SELECT extsvc.upsert_instance(:I1, 'tenant-a', :H1, ARRAY[:DA, :DB]::text[]);
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.pass();
-- deleting I1: every attachment goes REMOVING on every DPU of the host
SELECT extsvc.delete_instance(:I1);
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.entries(:I1);
SELECT service_name, aggregate_state, removed, dpus, configs_synced FROM extsvc.instance_extension_services_summary(:I1);
SELECT extsvc.instance_extension_services_ready(:I1) AS ready;
-- a deleting instance cannot change; deleting again is a no-op
SELECT * FROM pg_temp.try($$SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000001', 'tenant-a', 'fm100hsc000000000000000000000000000000100000000000000000000')$$);
SELECT * FROM pg_temp.try($$SELECT extsvc.set_instance_extension_services('10000000-0000-0000-0000-000000000001', '[]')$$);
SELECT extsvc.delete_instance(:I1);
SELECT * FROM pg_temp.rows(:I1);
-- the service stays blocked until the worker observed the removal
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('5e000000-0000-0000-0000-0000000000c3')$$);
SELECT * FROM pg_temp.pass();
SELECT count(*) AS instances FROM extsvc.instances WHERE instance_id = :I1;
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_instance('10000000-0000-0000-0000-000000000001')$$);
-- instances without DPF attachments go at once
SELECT extsvc.delete_instance(:I4);
SELECT extsvc.delete_instance(:I3);
SELECT right(instance_id::text, 2) AS instance FROM extsvc.instances ORDER BY 1;
-- I6 waits for its DPUs
SELECT extsvc.delete_instance(:I6);
SELECT * FROM pg_temp.rows();
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('5e000000-0000-0000-0000-0000000000a1')$$);
SELECT * FROM pg_temp.pass();
SELECT right(instance_id::text, 2) AS instance FROM extsvc.instances ORDER BY 1;
SELECT count(*) AS entries FROM extsvc.instance_extension_services;
-- nothing references the services any more
SELECT service_name, lifecycle_state FROM extsvc.delete_service(:A);
SELECT service_name, lifecycle_state FROM extsvc.delete_service(:N);
-- the KUBERNETES_POD instance I4 stays with its tombstone until NICo confirms
-- the termination (issue #14 P1-8), and that tombstone blocks pod-svc (P0-6)
SELECT * FROM pg_temp.try($$SELECT extsvc.delete_service('5e000000-0000-0000-0000-0000000000d4')$$);
SELECT extsvc.remove_terminated_services(:I4, pg_temp.cfg(:K)) AS confirmed;
SELECT right(instance_id::text, 2) AS instance FROM extsvc.instances ORDER BY 1;
SELECT service_name, lifecycle_state FROM extsvc.delete_service(:K);
SELECT * FROM pg_temp.labels();
SELECT * FROM pg_temp.q();

DROP EXTENSION nico_extsvc;
