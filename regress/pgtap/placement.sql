-- SPEC 2.4, 2.7, 2.8: DPU and instance registry, attach/detach validation,
-- target resolution into attachment rows, the derived label set, the per-DPU
-- work queue (claim / complete with compare-and-swap), cleanup of removed
-- attachments, status functions and the ALL_DPUS deletion gate. No worker
-- runs: this session plays it.
BEGIN;
\ir helpers.psql
SELECT plan(219);

SET LOCAL extsvc.enforce_chart_allowlist = off;
-- set_instance_extension_services reuses a temp table within a transaction
SET LOCAL client_min_messages = warning;

\ir placement_fixtures.psql

-- fixtures
SELECT lives_ok(format($$
  SELECT extsvc.create_service('place-a', 'svc-all', 'DPF_HELM_CHART', %1$L, dpu_target => 'ALL', service_id => %2$L);
  SELECT extsvc.create_service('place-a', 'svc-primary', 'DPF_HELM_CHART', %1$L, dpu_target => 'PRIMARY', service_id => %3$L);
  SELECT extsvc.create_service('place-a', 'svc-active', 'DPF_HELM_CHART', %1$L, dpu_target => 'ALL_ACTIVE', service_id => %4$L);
  SELECT extsvc.create_service('place-a', 'pod-svc', 'KUBERNETES_POD', 'pod', service_id => %5$L);
  SELECT extsvc.create_service('place-a', 'svc-creating', 'DPF_HELM_CHART', %1$L, dpu_target => 'ALL', service_id => %6$L);
  SELECT extsvc.create_service('place-b', 'svc-other', 'DPF_HELM_CHART', %1$L, dpu_target => 'ALL', service_id => %7$L);
  SELECT extsvc.create_service('place-a', 'site-wide', 'DPF_HELM_CHART', %1$L, deployment_scope => 'ALL_DPUS', service_id => %8$L);
  SELECT pg_temp.make_ready(id) FROM unnest(ARRAY[%2$L, %3$L, %4$L, %7$L]::uuid[]) id;
$$, :'chart', :A, :P, :N, :K, :C, :X, :W), 'fixture: services');

------------------------------------------------------------------ register_dpu
SELECT is(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'Place_A', 'place-node-a')$$, :DA, :H1)),
          '22023 | field: dpu_device_name = Place_A', 'register_dpu: a device name that is not a Kubernetes name');
SELECT is(pg_temp.err(format($$SELECT extsvc.register_dpu(%L, %L, 'place-a', 'place-node-a.')$$, :DA, :H1)),
          '22023 | field: dpu_node_name = place-node-a.', 'register_dpu: a node name ending in a dot');
SELECT throws_ok(format($$SELECT extsvc.register_dpu(%L, %L, repeat('a', 254), 'place-node-a')$$, :DA, :H1),
                 '22023', 'dpu_device_name is not a Kubernetes object name', 'register_dpu: a device name longer than 253');
SELECT throws_ok(format($$SELECT extsvc.register_dpu(%L, NULL, 'place-a', 'place-node-a')$$, :DA),
                 '22023', 'host_machine_id is required', 'register_dpu: host required');
SELECT lives_ok(format($$
  SELECT extsvc.register_dpu(%L, %L, 'place-a', 'place-node-a', true);
  SELECT extsvc.register_dpu(%L, %L, 'place-b', 'place-node-b-old');
  SELECT extsvc.register_dpu(%L, %L, 'place-c', 'place-node-c', true);
$$, :DA, :H1, :DB, :H1, :DC, :H2), 'fixture: DPUs a (primary), b on H1; c on H2');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'place-b', 'place-node-b')$$, :DB, :H1), 're-register b');
SELECT is((SELECT dpu_node_name FROM extsvc.dpus WHERE machine_id = :DB), 'place-node-b', 're-registering updates the node name');
SELECT is((SELECT count(*)::integer FROM extsvc.dpus WHERE machine_id = :DB), 1, 're-registering keeps one row');
SELECT throws_ok(format($$SELECT extsvc.register_dpu('fm100ds7d0000000000000000000000000000ff00000000000000000000', %L, 'place-a', 'place-node-x')$$, :H2),
                 '23505', NULL, 'a DPUDevice name used by another DPU is refused');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'place-b', 'place-node-b', true)$$, :DB, :H1), 'b becomes primary');
SELECT is(ARRAY(SELECT dpu_device_name FROM extsvc.dpus WHERE host_machine_id = :H1 AND is_primary), ARRAY['place-b'],
          'a new primary demotes the old one');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'place-a', 'place-node-a', true)$$, :DA, :H1), 'a primary again');
SELECT is(ARRAY(SELECT dpu_device_name FROM extsvc.dpus WHERE host_machine_id = :H1 AND is_primary), ARRAY['place-a'],
          'one primary per host');
SELECT ok((SELECT bool_and(coalesce(next_due_at <= now(), false)) FROM extsvc.dpu_reconciliations WHERE dpu_machine_id IN (:DA, :DB, :DC)),
          'registered DPUs have due work rows');
SELECT throws_ok($$SELECT extsvc.deregister_dpu('fm100ds7d0000000000000000000000000000ee00000000000000000000')$$, 'P0002', 'DPU not found',
                 'deregister_dpu of an unknown DPU');

------------------------------------------------------------------ upsert_instance
SELECT lives_ok(format($$
  SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L]::text[]);
  SELECT extsvc.upsert_instance(%L, 'place-a', %L);
  SELECT extsvc.upsert_instance(%L, 'place-a', %L, dpf_managed => false);
$$, :I1, :H1, :DA, :I3, :H4, :I4, :H3), 'fixture: instances');
SELECT is(pg_temp.err(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L)$$, :I2, :H1)),
          '23505 | host_machine_id: fm100hs7c00000000000000000000000000000100000000000000000000, instance_id: 71000000-0000-0000-0000-000000000002',
          'upsert_instance: a second live instance on a host is refused (issue 29)');
SELECT throws_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-b', %L)$$, :I1, :H1), '42501',
                 'instance_id is not available to this tenant', 'upsert_instance: tenant change refused');
SELECT throws_ok(format($$SELECT extsvc.upsert_instance(%L, '', %L)$$, :I1, :H1), '22023', NULL,
                 'upsert_instance: empty tenant');
SELECT throws_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', NULL)$$, :I1), '22023', NULL,
                 'upsert_instance: host required');

------------------------------------------------------------------ set_instance_extension_services: validation
CREATE TEMP TABLE snap AS SELECT
  (SELECT count(*) FROM extsvc.instance_extension_services) AS entries,
  (SELECT count(*) FROM extsvc.dpf_extension_service_attachments) AS att,
  (SELECT sum(config_version) FROM extsvc.instances) AS cfg,
  (SELECT sum(state_version) FROM extsvc.dpu_reconciliations) AS sv;
CREATE FUNCTION pg_temp.set_err(inst uuid, services text) RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.err(format('SELECT extsvc.set_instance_extension_services(%L, %s)', inst, services))
$$;
SELECT is(pg_temp.set_err(:I1, $$'{"service_id": "x"}'$$), '22023 | JSON path: $', 'not an array: 22023 at $');
SELECT is(pg_temp.set_err(:I1, $$'null'$$), '22023 | JSON path: $', 'JSON null: 22023 at $');
SELECT is(pg_temp.set_err(:I1, $$'["x"]'$$), '22023 | JSON path: $[0]', 'an entry that is not an object');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L) || %L', :A, '[{"service_id": "7a000000-0000-0000-0000-0000000000b2", "version": "V1-T1", "x": 1}]')),
          '22023 | JSON path: $[1].x', 'an entry with an unknown key, at its index');
SELECT is(pg_temp.set_err(:I1, $$'[{"service_id": "7a000000-0000-0000-0000-0000000000a", "version": "V1-T1"}]'$$),
          '22023 | JSON path: $[0].service_id', 'a service_id that is not a UUID');
SELECT is(pg_temp.set_err(:I1, $$'[{"service_id": 7, "version": "V1-T1"}]'$$),
          '22023 | JSON path: $[0].service_id', 'a service_id that is not a string');
SELECT is(pg_temp.set_err(:I1, $$'[{"service_id": "7a000000-0000-0000-0000-0000000000a1", "version": null}]'$$),
          '22023 | JSON path: $[0].version', 'a version that is not a string');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L, %L, %L)', :A, :N, :A)),
          '22023 | JSON path: $[2].service_id', 'a duplicate service');
SELECT is(pg_temp.set_err(:I1, $$'[{"service_id": "7a000000-0000-0000-0000-000000000099", "version": "V1-T1"}]'$$),
          'P0002 | JSON path: $[0].service_id = 7a000000-0000-0000-0000-000000000099', 'an unknown service: P0002');
SELECT is(pg_temp.set_err(:I1, $$'[{"service_id": "7a000000-0000-0000-0000-0000000000a1", "version": "V2-T1"}]'$$),
          'P0002 | JSON path: $[0].version = V2-T1', 'an unknown version: P0002');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L)', :X)),
          '42501 | JSON path: $[0].service_id = 7a000000-0000-0000-0000-0000000000f6', 'another tenant''s service: 42501');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L, %L)', :A, :C)),
          '55000 | JSON path: $[1].service_id = 7a000000-0000-0000-0000-0000000000e5', 'a CREATING service: 55000');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L)', :W)),
          '22023 | JSON path: $[0].service_id = 7a000000-0000-0000-0000-000000000007', 'an ALL_DPUS service is never attached');
SELECT is(pg_temp.set_err(:I1, format('pg_temp.cfg(%L, %L)', :A, :K)), '22023 | JSON path: $',
          'KUBERNETES_POD and DPF_HELM_CHART mixed');
SELECT is(pg_temp.set_err(:I4, format('pg_temp.cfg(%L)', :A)),
          '22023 | JSON path: $[0].service_id = 7a000000-0000-0000-0000-0000000000a1, instance_id: 71000000-0000-0000-0000-000000000004',
          'a DPF service on a host that is not DPF-managed');
SELECT is(pg_temp.set_err(:I3, format('pg_temp.cfg(%L)', :P)),
          'P0002 | instance_id: 71000000-0000-0000-0000-000000000003, host_machine_id: fm100hs7c00000000000000000000000000000400000000000000000000, service_id: 7a000000-0000-0000-0000-0000000000b2',
          'a new attachment whose target resolves to no DPU: P0002');
SELECT is(pg_temp.set_err('71000000-0000-0000-0000-000000000099', $$'[]'$$),
          'P0002 | instance_id: 71000000-0000-0000-0000-000000000099', 'an unknown instance: P0002');
SELECT is(pg_temp.set_err(:I1, $$'[]', 2$$), '55000 | if_config_version_match: 2, config_version: 1',
          'a config_version mismatch: 55000');
SELECT is((SELECT ROW(entries, att, cfg, sv)::text FROM snap),
          (SELECT ROW((SELECT count(*) FROM extsvc.instance_extension_services),
                      (SELECT count(*) FROM extsvc.dpf_extension_service_attachments),
                      (SELECT sum(config_version) FROM extsvc.instances),
                      (SELECT sum(state_version) FROM extsvc.dpu_reconciliations))::text),
          'the refusals wrote nothing (entries, rows, config_version, DPU work)');

------------------------------------------------------------------ attach: target resolution
CREATE TEMP TABLE sv0 AS SELECT pg_temp.sv(:DA) AS a, pg_temp.sv(:DB) AS b, pg_temp.sv(:DC) AS c;
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A, :N, :P), 1), 2, 'attach: config_version 2');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/PENDING', '1/place-a/svc-all/ACTIVE/PENDING',
                                '1/place-a/svc-primary/ACTIVE/PENDING', '1/place-b/svc-all/ACTIVE/PENDING'],
          'ALL -> every DPU of the host, ALL_ACTIVE -> the network DPUs, PRIMARY -> the primary');
SELECT ok(pg_temp.sv(:DA) > (SELECT a FROM sv0) AND pg_temp.sv(:DB) > (SELECT b FROM sv0),
          'an attachment insert bumps its DPU''s state_version');
SELECT is(pg_temp.sv(:DC), (SELECT c FROM sv0), 'other DPUs are not touched');
SELECT is(pg_temp.labels(), ARRAY['place-a/svc-active', 'place-a/svc-all', 'place-a/svc-primary', 'place-b/svc-all'],
          'the desired labels follow the rows');
DELETE FROM sv0;
INSERT INTO sv0 SELECT pg_temp.sv(:DA), pg_temp.sv(:DB), pg_temp.sv(:DC);
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:P, :A, :N)), 2, 'the same set again: same config_version');
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:P, :A, :N), 2), 2, 'with a matching if_config_version_match');
SELECT is(ROW(pg_temp.sv(:DA), pg_temp.sv(:DB))::text, (SELECT ROW(a, b)::text FROM sv0), 'the same set again touches no DPU');

------------------------------------------------------------------ claim / complete
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id = :DC;
CREATE TEMP TABLE k1 AS SELECT * FROM extsvc.claim('dpu', 'w1', 1, 30);
SELECT is((SELECT count(*)::integer FROM k1), 1, 'claim honours batch_size');
CREATE TEMP TABLE k2 AS SELECT * FROM extsvc.claim('dpu', 'w2', 100, 30) WHERE work->>'device_name' LIKE 'place-%';
SELECT is((SELECT count(*)::integer FROM k2), 1, 'a second worker gets the other due DPU, not the leased one');
SELECT is((SELECT count(*)::integer FROM extsvc.claim('dpu', 'w3', 100, 30) WHERE work->>'device_name' LIKE 'place-%'), 0,
          'leased DPUs are not claimed again');
CREATE TEMP TABLE ka AS SELECT * FROM k1 UNION ALL SELECT * FROM k2;
SELECT is((SELECT lease_owner FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = (SELECT id FROM k1)), 'w1',
          'the lease names its worker');
SELECT is((SELECT ARRAY(SELECT jsonb_array_elements_text(work->'wanted_keys')) FROM ka WHERE id = :DA),
          ARRAY(SELECT placement_label_key FROM extsvc.service_records WHERE service_id IN (:A, :N, :P) ORDER BY 1),
          'wanted_keys: the sorted label keys of the DPU');
SELECT is((SELECT ARRAY[work->>'device_name', work->>'node_name', work->>'deregistered'] FROM ka WHERE id = :DB),
          ARRAY['place-b', 'place-node-b', 'false'], 'the claim carries the DPUDevice and Node names');
SELECT is((SELECT jsonb_agg(i->>'service_id' ORDER BY i->>'service_id') FROM ka, jsonb_array_elements(work->'items') i WHERE id = :DA),
          jsonb_build_array(:A, :P, :N), 'items: one per attachment row of the DPU');
SELECT ok((SELECT bool_and((i->>'wanted')::boolean AND i->>'kind' = 'attachment' AND i->>'instance_id' = :I1
                           AND i->>'label_key' = s.placement_label_key AND i->>'dpf_service_name' = s.dpf_service_name
                           AND i->>'version' = s.attachable_version)
             FROM ka, jsonb_array_elements(work->'items') i JOIN extsvc.service_records s ON s.service_id = (i->>'service_id')::uuid),
          'items carry instance, label key, DPUService name and version, and wanted');
-- new intent while the worker works: the network also uses place-b
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L, %L]::text[])$$, :I1, :H1, :DA, :DB),
                'network change while leased');
SELECT is(pg_temp.sv(:DB), (SELECT state_version FROM ka WHERE id = :DB) + 1, 'the new row bumped place-b''s state_version');
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM ka WHERE id = :DB),
            (SELECT lease_token FROM ka WHERE id = :DB), jsonb_build_object('outcome', 'observed', 'results',
            (SELECT jsonb_agg(i || '{"state": "RUNNING"}') FROM ka, jsonb_array_elements(work->'items') i WHERE id = :DB))),
          'stale', 'a completion with the old state_version is stale');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/PENDING', '1/place-a/svc-all/ACTIVE/PENDING',
                                '1/place-a/svc-primary/ACTIVE/PENDING', '1/place-b/svc-active/ACTIVE/PENDING',
                                '1/place-b/svc-all/ACTIVE/PENDING'], 'the stale result wrote nothing');
SELECT ok((SELECT lease_token IS NULL AND next_due_at <= now() FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB),
          'the stale DPU is released and due');
SELECT is(extsvc.complete('dpu', :DA, (SELECT state_version FROM ka WHERE id = :DA), gen_random_uuid(),
            '{"outcome": "observed", "results": [{"kind": "attachment", "state": "RUNNING"}]}'), 'lost', 'a wrong lease token is lost');
SELECT ok((SELECT lease_token = (SELECT lease_token FROM ka WHERE id = :DA) FROM extsvc.dpu_reconciliations
            WHERE dpu_machine_id = :DA), 'the lease is untouched by a lost completion');
CREATE TEMP TABLE sva AS SELECT pg_temp.sv(:DA) AS v;
SELECT is(extsvc.complete('dpu', :DA, (SELECT state_version FROM ka WHERE id = :DA),
            (SELECT lease_token FROM ka WHERE id = :DA), jsonb_build_object('outcome', 'observed', 'results',
            (SELECT jsonb_agg(i || '{"state": "RUNNING", "message": "ready"}') FROM ka, jsonb_array_elements(work->'items') i WHERE id = :DA),
            'observation', '{"node": "seen"}'::jsonb)),
          'applied', 'the current completion is applied');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-a/svc-primary/ACTIVE/RUNNING', '1/place-b/svc-active/ACTIVE/PENDING',
                                '1/place-b/svc-all/ACTIVE/PENDING'], 'observed deployment states are written');
SELECT is((SELECT array_agg(DISTINCT observed_config_version) FROM extsvc.dpf_extension_service_attachments WHERE dpu_machine_id = :DA),
          ARRAY[2], 'observed_config_version is the instance''s config_version');
SELECT is((SELECT status_message FROM extsvc.dpf_extension_service_attachments WHERE dpu_machine_id = :DA AND service_id = :A),
          'ready', 'the message is kept');
SELECT is(pg_temp.sv(:DA), (SELECT v FROM sva), 'status writes do not bump the DPU''s state_version');
SELECT ok((SELECT next_due_at IS NULL AND attempts = 0 AND lease_token IS NULL AND observation = '{"node": "seen"}'
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DA), 'converged: not due, lease released, observation kept');
SELECT is(extsvc.complete('dpu', :DA, (SELECT state_version FROM ka WHERE id = :DA),
            (SELECT lease_token FROM ka WHERE id = :DA), '{"outcome": "observed", "results": []}'), 'lost', 'a used token is lost');
-- direct status writes play the worker (extsvc.placement_transitions)
SET LOCAL nico_extsvc.actor = 'worker';
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'ERROR' WHERE dpu_machine_id = :DA AND service_id = :P;
SELECT ok(pg_temp.sv(:DA) = (SELECT v FROM sva) AND (SELECT next_due_at IS NULL FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DA),
          'a direct deployment_state write does not wake the DPU');
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'RUNNING' WHERE dpu_machine_id = :DA AND service_id = :P;
SET LOCAL nico_extsvc.actor = '';
-- retry
CREATE TEMP TABLE kb AS SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :DB;
SELECT throws_ok(format($$SELECT extsvc.complete('dpu', %L, %s, %L, '{"outcome": "bogus"}')$$, :DB,
                        (SELECT state_version FROM kb), (SELECT lease_token FROM kb)),
                 '22023', 'unknown DPU reconciliation outcome', 'an unknown outcome is refused');
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM kb), (SELECT lease_token FROM kb),
            '{"outcome": "retry", "message": "DPU cluster unreachable", "http_status": 503, "retry_after_s": 120}'),
          'applied', 'retry');
SELECT ok((SELECT attempts = 1 AND last_error = 'DPU cluster unreachable' AND last_http_status = 503
                  AND next_due_at >= now() + interval '120 s' AND lease_token IS NULL
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB), 'retry backs off (honouring Retry-After) and keeps the error');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-a/svc-primary/ACTIVE/RUNNING', '1/place-b/svc-active/ACTIVE/PENDING',
                                '1/place-b/svc-all/ACTIVE/PENDING'], 'retry writes no status');
SELECT is((SELECT count(*)::integer FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :DB), 0,
          'not due during the backoff');
-- not converged
UPDATE extsvc.dpu_reconciliations SET next_due_at = now(), attempts = 6 WHERE dpu_machine_id = :DB;
CREATE TEMP TABLE kc AS SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :DB;
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM kc), (SELECT lease_token FROM kc),
            jsonb_build_object('outcome', 'observed', 'results',
            (SELECT jsonb_agg(i || '{"state": "PENDING"}') FROM kc, jsonb_array_elements(work->'items') i))), 'applied', 'PENDING observed');
SELECT ok((SELECT next_due_at > now() AND next_due_at <= now() + interval '5 s' AND attempts = 7
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB), 'not converged: due again within 5 s');
-- keep polling
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :DB;
DELETE FROM kc;
INSERT INTO kc SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :DB;
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM kc), (SELECT lease_token FROM kc),
            jsonb_build_object('outcome', 'observed', 'results',
            (SELECT jsonb_agg(i || '{"state": "RUNNING"}') FROM kc, jsonb_array_elements(work->'items') i), 'keep_polling', true)),
          'applied', 'RUNNING observed with keep_polling');
SELECT ok((SELECT next_due_at > now() + interval '5 s' AND next_due_at <= now() + interval '30 s'
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DB), 'keep_polling: due again later, within 30 s');
-- an expired lease is reclaimed; the old holder is lost
UPDATE extsvc.dpu_reconciliations SET next_due_at = now(), attempts = 0 WHERE dpu_machine_id = :DB;
DELETE FROM kc;
INSERT INTO kc SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :DB;
UPDATE extsvc.dpu_reconciliations SET lease_expires_at = now() - interval '1 s' WHERE dpu_machine_id = :DB;
CREATE TEMP TABLE kd AS SELECT * FROM extsvc.claim('dpu', 'w2', 100, 30) WHERE id = :DB;
SELECT is((SELECT count(*)::integer FROM kd), 1, 'an expired lease is reclaimed');
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM kc), (SELECT lease_token FROM kc), '{"outcome": "observed", "results": []}'),
          'lost', 'the first holder is lost');
SELECT is(extsvc.complete('dpu', :DB, (SELECT state_version FROM kd), (SELECT lease_token FROM kd),
            jsonb_build_object('outcome', 'observed', 'results',
            (SELECT jsonb_agg(i || '{"state": "RUNNING"}') FROM kd, jsonb_array_elements(work->'items') i))), 'applied', 'the new holder is applied');

------------------------------------------------------------------ status
SELECT is(extsvc.instance_extension_services_ready(:I1), true, 'ready: every active attachment RUNNING');
SELECT is((SELECT array_agg(aggregate_state || '/' || configs_synced ORDER BY service_name)
             FROM extsvc.instance_extension_services_summary(:I1)),
          ARRAY['RUNNING/true', 'RUNNING/true', 'RUNNING/true'], 'summary: RUNNING and synced');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_extension_service_status(:I1)), 5, 'status: one row per (service, version, DPU)');
SELECT is((SELECT array_agg(dpu_node_name ORDER BY dpu_node_name) FROM extsvc.instance_extension_service_status(:I1) WHERE service_id = :A),
          ARRAY['place-node-a', 'place-node-b'], 'status rows name the Nodes');
SET LOCAL nico_extsvc.actor = 'worker';
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'PENDING' WHERE instance_id = :I1 AND dpu_machine_id = :DB AND service_id = :A;
SELECT is((SELECT aggregate_state FROM extsvc.instance_extension_services_summary(:I1) WHERE service_id = :A), 'PENDING', 'PENDING over RUNNING');
SELECT is(extsvc.instance_extension_services_ready(:I1), false, 'not ready while one DPU is PENDING');
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'UNKNOWN' WHERE instance_id = :I1 AND dpu_machine_id = :DB AND service_id = :A;
SELECT is((SELECT aggregate_state FROM extsvc.instance_extension_services_summary(:I1) WHERE service_id = :A), 'UNKNOWN', 'UNKNOWN never counts as running');
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'ERROR' WHERE instance_id = :I1 AND dpu_machine_id = :DA AND service_id = :A;
SELECT is((SELECT aggregate_state FROM extsvc.instance_extension_services_summary(:I1) WHERE service_id = :A), 'ERROR', 'ERROR over UNKNOWN');
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'RUNNING' WHERE instance_id = :I1;
SET LOCAL nico_extsvc.actor = '';
SELECT is(extsvc._aggregate_state(ARRAY['TERMINATING', 'TERMINATED']), 'TERMINATING', 'TERMINATING over TERMINATED');
SELECT is(extsvc._aggregate_state(ARRAY['TERMINATED', 'TERMINATED']), 'TERMINATED', 'all TERMINATED');
SELECT is(extsvc._aggregate_state(ARRAY['RUNNING', 'TERMINATED']), 'UNKNOWN', 'mixed RUNNING/TERMINATED: UNKNOWN');
SELECT is(extsvc._aggregate_state(ARRAY['PENDING', 'TERMINATING']), 'PENDING', 'PENDING over TERMINATING');
SELECT is(extsvc._aggregate_state('{}'), 'UNKNOWN', 'no rows: UNKNOWN');
-- the aggregate reads its order from extsvc._deployment_state_precedence(): it agrees with
-- SPEC 2.8's rule written out for every array of up to three states (NULL included)
SELECT is(ARRAY(
  WITH v(x) AS (SELECT unnest(ARRAY['ERROR', 'UNKNOWN', 'PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', NULL])),
  arrays(s) AS (SELECT '{}'::text[] UNION ALL SELECT ARRAY[a.x] FROM v a
                UNION ALL SELECT ARRAY[a.x, b.x] FROM v a, v b
                UNION ALL SELECT ARRAY[a.x, b.x, c.x] FROM v a, v b, v c)
  SELECT s::text FROM arrays
   WHERE extsvc._aggregate_state(s) IS DISTINCT FROM CASE
           WHEN cardinality(s) = 0 THEN 'UNKNOWN'
           WHEN 'ERROR' = ANY (s) THEN 'ERROR'
           WHEN 'UNKNOWN' = ANY (s) THEN 'UNKNOWN'
           WHEN 'PENDING' = ANY (s) THEN 'PENDING'
           WHEN 'RUNNING' = ALL (s) THEN 'RUNNING'
           WHEN 'TERMINATING' = ANY (s) THEN 'TERMINATING'
           WHEN 'TERMINATED' = ALL (s) THEN 'TERMINATED'
           ELSE 'UNKNOWN' END),
  ARRAY[]::text[], 'the aggregate of every array of up to three states follows SPEC 2.8');
SELECT throws_ok($$SELECT extsvc.instance_extension_services_ready('71000000-0000-0000-0000-000000000099')$$, 'P0002', 'instance not found',
                 'ready of an unknown instance');

------------------------------------------------------------------ config change: every DPU observed again
-- I2, on H2 (a host holds one live instance, issue 29: H1 has I1), with a
-- second DPU place-e there, attaches svc-all; once converged it adds
-- svc-primary, whose row is only on place-c (H2's primary), yet place-e must
-- be observed for the new config_version too (configs_synced), so it is
-- woken as well
SELECT lives_ok(format($$
  SELECT extsvc.register_dpu(%L, %L, 'place-e', 'place-node-e');
  SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L]::text[]);
$$, :DE, :H2, :I2, :H2, :DC), 'fixture: place-e on H2, and I2 on H2');
SELECT is(extsvc.set_instance_extension_services(:I2, pg_temp.cfg(:A)), 2, 'I2 attaches svc-all');
SELECT is(pg_temp.pass(), 2, 'both DPUs observed');
SELECT is(extsvc.instance_extension_services_ready(:I2), true, 'I2 ready');
SELECT ok((SELECT bool_and(next_due_at IS NULL) FROM extsvc.dpu_reconciliations WHERE dpu_machine_id IN (:DC, :DE)), 'converged');
SELECT is(extsvc.set_instance_extension_services(:I2, pg_temp.cfg(:A, :P)), 3, 'I2 adds svc-primary');
SELECT is((SELECT array_agg(aggregate_state || '/' || configs_synced ORDER BY service_name) FROM extsvc.instance_extension_services_summary(:I2)),
          ARRAY['RUNNING/false', 'PENDING/false'], 'configs_synced false until observed for config_version 3');
SELECT is(extsvc.instance_extension_services_ready(:I2), false, 'not ready until the new configuration is observed');
SELECT ok((SELECT bool_and(coalesce(next_due_at <= now(), false)) FROM extsvc.dpu_reconciliations WHERE dpu_machine_id IN (:DC, :DE)),
          'every DPU of the instance is due after a configuration change, also the one whose rows did not change');
SELECT is(pg_temp.pass(), 2, 'both DPUs observed');
SELECT is(extsvc.instance_extension_services_ready(:I2), true, 'ready for config_version 3');
SELECT is(extsvc.set_instance_extension_services(:I2, '[]'), 4, 'I2 detaches everything');
SELECT is(pg_temp.pass(), 2, 'both DPUs observed');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I2)
          AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services WHERE instance_id = :I2),
          'I2''s rows (observed TERMINATED) and tombstones are gone');
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A, :N)), 3, 'I1 detaches svc-primary: config_version 3');
SELECT is(extsvc.instance_extension_services_ready(:I1), false, 'I1 not ready until the removal is observed');

------------------------------------------------------------------ detach and tombstones
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-a/svc-primary/REMOVING/UNKNOWN', '1/place-b/svc-active/ACTIVE/RUNNING',
                                '1/place-b/svc-all/ACTIVE/RUNNING', '1/place-b/svc-primary/REMOVING/UNKNOWN'],
          'detach: REMOVING rows on every DPU of the host, never dropped');
SELECT ok((SELECT removed_at IS NOT NULL FROM extsvc.instance_extension_services WHERE instance_id = :I1 AND service_id = :P),
          'the removed entry is a tombstone with removed_at');
SELECT is((SELECT aggregate_state || '/' || removed FROM extsvc.instance_extension_services_summary(:I1) WHERE service_id = :P),
          'UNKNOWN/true', 'summary of the removed entry: UNKNOWN until observed');
SELECT throws_like(format($$SELECT extsvc.delete_service(%L)$$, :P), 'service still has active or removing attachments',
                   'delete_service is blocked by the tombstone');
SELECT is(pg_temp.err(format($$SELECT extsvc.delete_service(%L)$$, :P)), '55000 | instances: 71000000-0000-0000-0000-000000000001',
          'the refusal is 55000 and names the instance');
-- re-added before the removal was observed: the tombstone comes back to life
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A, :N, :P)), 4, 're-add: config_version 4');
SELECT ok((SELECT removed_at IS NULL FROM extsvc.instance_extension_services WHERE instance_id = :I1 AND service_id = :P),
          'the tombstone is alive again');
SELECT is((SELECT array_agg(placement_state || '/' || deployment_state || '/' || coalesce(status_message, '-') ORDER BY dpu_machine_id)
             FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I1 AND service_id = :P),
          ARRAY['ACTIVE/PENDING/-', 'REMOVING/UNKNOWN/-'],
          'the primary''s row is ACTIVE again (PENDING, message cleared); the other DPU''s stays REMOVING');
SELECT is(pg_temp.pass(), 2, 'a pass over both DPUs');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-a/svc-primary/ACTIVE/RUNNING', '1/place-b/svc-active/ACTIVE/RUNNING',
                                '1/place-b/svc-all/ACTIVE/RUNNING'], 'the REMOVING row observed TERMINATED is deleted');
SELECT is(extsvc.instance_extension_services_ready(:I1), true, 'ready again');
-- detach and observe: the tombstone disappears, the delete is allowed
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A, :N)), 5, 'detach svc-primary again');
SELECT is(pg_temp.pass(ARRAY[:DA]::text[]), 1, 'only place-a observed');
SELECT ok((SELECT removed_at IS NOT NULL FROM extsvc.instance_extension_services WHERE instance_id = :I1 AND service_id = :P),
          'the tombstone stays while place-b has not reported TERMINATED');
SELECT is(extsvc.instance_extension_services_ready(:I1), false, 'not ready while a removal is unobserved');
SELECT is(pg_temp.pass(), 1, 'place-b observed');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_extension_services WHERE instance_id = :I1 AND service_id = :P), 0,
          'the tombstone is gone once every DPU reported TERMINATED');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_extension_services_summary(:I1) WHERE service_id = :P), 0,
          'and the summary no longer lists it');
SELECT is(extsvc.instance_extension_services_ready(:I1), true, 'ready');
SELECT is((extsvc.delete_service(:P)).lifecycle_state, 'DELETING', 'delete_service allowed after cleanup');

------------------------------------------------------------------ network change
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L]::text[])$$, :I1, :H1, :DB),
                'the network now uses place-b only');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/REMOVING/UNKNOWN', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING'],
          'a no-longer-targeted row goes REMOVING');
SELECT is((SELECT string_agg(format('%s/%s/%s', from_state, actor, reason), ', ')
             FROM extsvc.instance_dpu_state_history(:I1)
            WHERE machine = 'placement' AND to_state = 'REMOVING' AND service_name = 'svc-active'
              AND dpu_machine_id = :DA),
          'ACTIVE/api/untargeted', 'issue #15: the history names the network change: ACTIVE -> REMOVING by api, untargeted');
SELECT is((SELECT config_version FROM extsvc.instances WHERE instance_id = :I1), 5, 'a network change keeps config_version');
SELECT ok((SELECT next_due_at <= now() FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :DA), 'a placement change makes the DPU due');
SELECT throws_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L, %L]::text[])$$, :I1, :H1, :DA, :DC),
                 '22023', 'network_dpus names DPUs that are not registered to the instance''s host',
                 'a network naming a DPU of another host is refused (issue #12; place-c is on another host)');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/REMOVING/UNKNOWN', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING'],
          'a refused network change leaves the rows untouched');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L, %L]::text[])$$, :I1, :H1, :DA, :DB),
                'the network uses both DPUs');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/PENDING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING'],
          'a REMOVING row targeted again is ACTIVE (PENDING)');
SELECT is(pg_temp.pass(), 1, 'place-a observed');

------------------------------------------------------------------ a second host's network change
SELECT is(extsvc.set_instance_extension_services(:I2, pg_temp.cfg(:N)), 5, 'I2 attaches svc-active (network place-c)');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L]::text[])$$, :I2, :H2, :DE),
                'I2''s network moves to place-e');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING',
                                '2/place-c/svc-active/REMOVING/UNKNOWN', '2/place-e/svc-active/ACTIVE/PENDING'],
          'I2''s rows follow its network');

------------------------------------------------------------------ reference counting: a hand-over
-- A host holds one live instance (issue 29); once the old one is being
-- deleted the next takes the host, and a label both want stays: the old
-- instance's REMOVING row is released to the new ACTIVE one.
SELECT lives_ok(format('SELECT extsvc.delete_instance(%L)', :I2), 'I2 is deleted: the hand-over starts');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING',
                                '2/place-c/svc-active/REMOVING/UNKNOWN', '2/place-e/svc-active/REMOVING/UNKNOWN'],
          'its rows go REMOVING on every DPU of the host');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L, ARRAY[%L]::text[])$$, :I5, :H2, :DE),
                'the next instance (I5) takes the host while I2 is being deleted');
SELECT is(extsvc.set_instance_extension_services(:I5, pg_temp.cfg(:N)), 2, 'I5 attaches svc-active (network place-e)');
SELECT is((SELECT count(*)::integer FROM extsvc.dpf_extension_service_attachments WHERE dpu_machine_id = :DE AND service_id = :N), 2,
          'two rows for svc-active on place-e: I2''s REMOVING, I5''s ACTIVE');
SELECT is((SELECT count(DISTINCT label_key)::integer FROM extsvc.dpu_desired_labels WHERE dpu_machine_id = :DE AND service_id = :N), 1,
          'one label key, wanted because of I5');
SELECT ok(NOT ('place-c/svc-active' = ANY (pg_temp.labels())), 'no longer wanted on place-c');
-- the worker still sees the pod on place-e (the label stays): the REMOVING
-- row there is released, the one on place-c waits for TERMINATED
SELECT is(pg_temp.pass(p_unwanted => 'TERMINATING'), 2, 'a pass: removals not yet complete');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-active/ACTIVE/RUNNING', '1/place-a/svc-all/ACTIVE/RUNNING',
                                '1/place-b/svc-active/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING',
                                '2/place-c/svc-active/REMOVING/TERMINATING', '5/place-e/svc-active/ACTIVE/RUNNING'],
          'the row kept by another reason is released; the other waits');
SELECT is((SELECT aggregate_state FROM extsvc.instance_extension_services_summary(:I2) WHERE service_id = :N), 'TERMINATING',
          'the old instance''s removed entry aggregates TERMINATING');
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :DC;
SELECT is(pg_temp.pass(), 1, 'place-c observed clean');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I2), 'the old instance is gone once its DPUs are clean');
SELECT is(extsvc.set_instance_extension_services(:I5, '[]'), 3, 'I5 detaches');
SELECT is(pg_temp.pass(), 2, 'place-c and place-e observed clean');
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:A)), 6, 'I1 detaches svc-active');
SELECT is(pg_temp.pass(), 2, 'place-a and place-b observed clean');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-all/ACTIVE/RUNNING', '1/place-b/svc-all/ACTIVE/RUNNING'],
          'TERMINATED rows are deleted');

------------------------------------------------------------------ dpu_agent_extension_services
SELECT is(extsvc.set_instance_extension_services(:I4, pg_temp.cfg(:K)), 2, 'a KUBERNETES_POD service on the non-DPF host');
SELECT lives_ok(format($$SELECT extsvc.register_dpu('fm100ds7d00000000000000000000000000000d00000000000000000000', %L, 'place-d', 'place-node-d', true)$$, :H3),
                'a DPU on the non-DPF host');
SELECT is((SELECT array_agg(service_name || '/' || (removed_at IS NOT NULL)) FROM extsvc.dpu_agent_extension_services('fm100ds7d00000000000000000000000000000d00000000000000000000')),
          ARRAY['pod-svc/false'], 'the agent feed lists the KUBERNETES_POD entry');
SELECT is((SELECT count(*)::integer FROM extsvc.dpu_agent_extension_services(:DB)), 0, 'never DPF services');
SELECT is(extsvc.set_instance_extension_services(:I4, '[]'), 3, 'detach it');
SELECT is((SELECT array_agg(service_name || '/' || (removed_at IS NOT NULL)) FROM extsvc.dpu_agent_extension_services('fm100ds7d00000000000000000000000000000d00000000000000000000')),
          ARRAY['pod-svc/true'], 'removed entries stay in the feed');
SELECT throws_ok($$SELECT * FROM extsvc.dpu_agent_extension_services('fm100ds7d00000000000000000000000000009900000000000000000000')$$, 'P0002', 'DPU not found',
                 'agent feed of an unknown DPU');

------------------------------------------------------------------ ALL_DPUS
SELECT ok(NOT EXISTS (SELECT FROM extsvc.dpu_desired_labels WHERE service_id = :W), 'ALL_DPUS: not wanted while CREATING');
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id IN (SELECT machine_id FROM extsvc.dpus WHERE dpu_device_name LIKE 'place-%');
SELECT pg_temp.make_ready(:W);
SELECT is((SELECT array_agg(d.dpu_device_name ORDER BY d.dpu_device_name) FROM extsvc.dpu_desired_labels w JOIN extsvc.dpus d ON d.machine_id = w.dpu_machine_id
            WHERE w.service_id = :W AND d.dpu_device_name LIKE 'place-%'),
          ARRAY['place-a', 'place-b', 'place-c', 'place-d', 'place-e'], 'READY: wanted on every registered DPU');
SELECT ok((SELECT bool_and(coalesce(next_due_at <= now(), false)) FROM extsvc.dpu_reconciliations
            WHERE dpu_machine_id IN (SELECT machine_id FROM extsvc.dpus WHERE dpu_device_name LIKE 'place-%')),
          'READY made every DPU due');
SELECT is(pg_temp.pass(), 5, 'every DPU observed');
SELECT is((SELECT array_agg(deployment_state::text) FROM extsvc.site_service_dpu_status WHERE service_id = :W), ARRAY['RUNNING', 'RUNNING', 'RUNNING', 'RUNNING', 'RUNNING'],
          'per-DPU site statuses recorded');
SELECT lives_ok($$SELECT extsvc.deregister_dpu('fm100ds7d00000000000000000000000000000d00000000000000000000')$$, 'deregister place-d');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.dpu_desired_labels WHERE dpu_machine_id = 'fm100ds7d00000000000000000000000000000d00000000000000000000'),
          'a deregistered DPU wants nothing');
CREATE TEMP TABLE ke AS SELECT * FROM extsvc.claim('dpu', 'w1', 1000, 30) WHERE id = 'fm100ds7d00000000000000000000000000000d00000000000000000000';
SELECT is((SELECT ARRAY[work->>'deregistered', jsonb_array_length(work->'wanted_keys')::text] FROM ke), ARRAY['true', '0'],
          'its claim says deregistered, nothing wanted');
SELECT is((SELECT (i->>'wanted')::boolean FROM ke, jsonb_array_elements(work->'items') i WHERE i->>'kind' = 'site'), false,
          'the site item is not wanted there');
SELECT is(extsvc.complete('dpu', (SELECT id FROM ke), (SELECT state_version FROM ke), (SELECT lease_token FROM ke),
            jsonb_build_object('outcome', 'observed', 'results',
              jsonb_build_array(jsonb_build_object('kind', 'site', 'service_id', :W, 'state', 'TERMINATED')))),
          'applied', 'place-d observed clean');
SELECT is((extsvc.delete_service(:W)).lifecycle_state, 'DELETING', 'delete the ALL_DPUS service');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.dpu_desired_labels WHERE service_id = :W), 'DELETING: wanted nowhere');
SELECT is(extsvc._site_service_cleared(:W), false, 'not cleared before the DPUs report');
SELECT is((SELECT (work->>'placement_clear')::boolean FROM extsvc.claim('service', 'tap', 1000) WHERE id = :W), false,
          'claim service: placement_clear false');
-- as if it had polled seven times already
UPDATE extsvc.dpf_extension_service_reconciliations SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = NULL,
       attempts = 7
 WHERE service_id = :W;
SELECT is(pg_temp.pass(ARRAY[:DA, :DB]::text[]), 2, 'place-a and place-b report TERMINATED');
SELECT is(extsvc._site_service_cleared(:W), false, 'not cleared while place-c and place-e have not reported');
SELECT ok((SELECT next_due_at <= now() FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :W),
          'a TERMINATED report makes the deleting service due');
-- issue 13 (kill-point sweep): every report used to add a poll to attempts,
-- so the wait for DPF's finalizers after the DELETE grew to retry_cap
SELECT is((SELECT attempts FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :W), 0,
          'and starts its backoff over: a report is evidence, not a failed attempt');
-- a pass in flight when the last DPU reports must not overwrite that wake
CREATE TEMP TABLE kw AS SELECT * FROM extsvc.claim('service', 'tap', 1000) WHERE id = :W;
SELECT is((SELECT (work->>'placement_clear')::boolean FROM kw), false, 'a pass claims the service before place-c reports');
SELECT is(pg_temp.pass(), 3, 'place-c and place-e report TERMINATED (and place-d, woken by the delete, again)');
SELECT is(extsvc.complete('service', (SELECT id FROM kw), (SELECT state_version FROM kw), (SELECT lease_token FROM kw),
            '{"outcome": "poll"}'),
          'stale', 'the poll that pass decided before the report is stale');
SELECT ok((SELECT next_due_at <= now() AND lease_token IS NULL FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :W),
          'and the service is due again at once, not after a backoff');
SELECT is(extsvc._site_service_cleared(:W), true, 'cleared once every registered DPU reported TERMINATED');
SELECT is((SELECT (work->>'placement_clear')::boolean FROM extsvc.claim('service', 'tap', 1000) WHERE id = :W), true,
          'claim service: placement_clear true');

------------------------------------------------------------------ deregister_dpu
SELECT lives_ok(format($$SELECT extsvc.deregister_dpu(%L)$$, :DB), 'deregister place-b');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-all/ACTIVE/RUNNING', '1/place-b/svc-all/REMOVING/UNKNOWN'],
          'its attachments go REMOVING, never dropped');
SELECT ok((SELECT deregistered_at IS NOT NULL AND NOT is_primary FROM extsvc.dpus WHERE machine_id = :DB), 'the DPU row stays, deregistered');
SELECT is(pg_temp.pass(), 1, 'a pass over place-b');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-all/ACTIVE/RUNNING'], 'observed clean: the rows are gone');

------------------------------------------------------------------ delete_instance
SELECT lives_ok(format($$SELECT extsvc.delete_instance(%L)$$, :I1), 'delete I1');
SELECT is(pg_temp.rows(), ARRAY['1/place-a/svc-all/REMOVING/UNKNOWN'], 'its attachments go REMOVING');
SELECT throws_ok(format($$SELECT extsvc.upsert_instance(%L, 'place-a', %L)$$, :I1, :H1), '55000', 'instance is being deleted',
                 'upsert_instance of a deleting instance: 55000');
SELECT throws_ok(format($$SELECT extsvc.set_instance_extension_services(%L, '[]')$$, :I1), '55000', 'instance is being deleted',
                 'set_instance_extension_services of a deleting instance: 55000');
SELECT lives_ok(format($$SELECT extsvc.delete_instance(%L)$$, :I1), 'delete_instance again is a no-op');
SELECT is(pg_temp.err(format($$SELECT extsvc.delete_service(%L)$$, :A)), '55000 | instances: 71000000-0000-0000-0000-000000000001',
          'the service is blocked by the deleting instance');
SELECT is(pg_temp.pass(), 1, 'a pass');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I1), 'the instance is gone once all rows are gone');
SELECT throws_ok(format($$SELECT extsvc.delete_instance(%L)$$, :I1), 'P0002', 'instance not found', 'then delete_instance says P0002');
SELECT is((extsvc.delete_service(:A)).lifecycle_state, 'DELETING', 'delete_service allowed after cleanup');
SELECT lives_ok(format($$SELECT extsvc.delete_instance(%L); SELECT extsvc.delete_instance(%L)$$, :I3, :I4),
                'instances without DPF rows');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I3), 'an instance without entries is deleted at once');
SELECT ok(EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I4),
          'an instance with a KUBERNETES_POD tombstone stays until NICo confirms its termination (issue #14 P1-8)');
SELECT is(extsvc.remove_terminated_services(:I4, pg_temp.cfg(:K)), 1, 'NICo confirms it');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.instances WHERE instance_id = :I4), 'then the instance is gone');

------------------------------------------------------------------ privileges
CREATE ROLE extsvc_tap_place LOGIN IN ROLE extsvc_api;
SELECT is(extsvc.set_instance_extension_services(:I5, pg_temp.cfg(:N)), 4, 'fixture: I5 attaches svc-active again');
SELECT is(pg_temp.as_user('extsvc_tap_place', format($$SELECT extsvc.set_instance_extension_services(%L, %L)$$, :I5, '[]')),
          'ok', 'an extsvc_api member sets an instance''s services');
SELECT ok((SELECT bool_and(placement_state = 'REMOVING') FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I5),
          'and its rows go REMOVING');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.claim(text,text,integer,integer)', 'EXECUTE')
          AND NOT has_function_privilege('extsvc_api',
                'extsvc.complete(text,text,bigint,uuid,jsonb)', 'EXECUTE')
          AND NOT has_function_privilege('extsvc_api', 'extsvc.mark_dpus_due()', 'EXECUTE'),
          'extsvc_api may not claim or complete DPU work');

SELECT * FROM finish();
ROLLBACK;
