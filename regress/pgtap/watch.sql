-- What the watcher asks of the database (issue 11, sql/parts/79_worker_watch.sql, docs/worker.md
-- "Observation"): waking DPUs by DPUDevice or Node name (mark_and_claim_dpus without a worker:
-- marks only; its claims are in watch_claim.sql) and DELETING services, the drift check's
-- snapshot of some services, the DPUs of a service whose context changed, a woken row claimed by
-- the queue's claim, next_due_in of one queue; and what a DPU outcome from the watch caches means in
-- _complete_dpu (observed_at, watched, evidence older than the staleness bound).
BEGIN;
\ir helpers.psql
SELECT plan(35);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''e1000000-0000-0000-0000-000000000001'''
\set D1 '''fm100dse10000000000000000000000000000d100000000000000000000'''
\set D2 '''fm100dse10000000000000000000000000000d200000000000000000000'''
\set H1 '''fm100hse10000000000000000000000000000f100000000000000000000'''
\set H2 '''fm100hse10000000000000000000000000000f200000000000000000000'''
\set I '''e1000000-0000-0000-0000-0000000000a1'''

SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-w1', 'node-w1', true)$$, :D1, :H1), 'fixture: DPU 1');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-w2', 'node-w2', true)$$, :D2, :H2), 'fixture: DPU 2');
-- nothing is due while this file runs, unless it makes it so
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL;
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL, attempts = 0;

-- mark_and_claim_dpus, marks only ---------------------------------------------------------------
SELECT is((SELECT array_agg(id || ' ' || woken ORDER BY id)
             FROM extsvc.mark_and_claim_dpus(ARRAY['dev-w1'], ARRAY['node-w2', 'node-unknown'], NULL, NULL)),
          ARRAY[trim(both '''' from :D1) || ' true', trim(both '''' from :D2) || ' true'],
          'mark_and_claim_dpus: a device name and a node name wake their DPUs; unknown names nothing');
SELECT is((SELECT count(*)::integer FROM extsvc.dpu_reconciliations
            WHERE dpu_machine_id IN (:D1, :D2) AND next_due_at <= now()), 2, 'both are due now');
SELECT is((SELECT count(*)::integer FROM extsvc.mark_and_claim_dpus(ARRAY['dev-w1'], NULL, NULL, NULL) WHERE woken), 0,
          'a DPU due already is named again but not woken twice');
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() + interval '60 seconds', attempts = 1
 WHERE dpu_machine_id = :D1;
SELECT is((SELECT array_agg(woken) FROM extsvc.mark_and_claim_dpus(NULL, ARRAY['node-w1'], NULL, NULL)), ARRAY[true],
          'a DPU waiting for its next change (the 60 s look) is woken now');
-- a leased row: its state_version moves, so the pass in flight ends stale
UPDATE extsvc.dpu_reconciliations SET lease_token = gen_random_uuid(), lease_owner = 'w9',
       lease_expires_at = now() + interval '1 minute' WHERE dpu_machine_id = :D2;
CREATE TEMP TABLE v0 AS SELECT state_version FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D2;
SELECT is((SELECT array_agg(woken) FROM extsvc.mark_and_claim_dpus(ARRAY['dev-w2'], NULL, NULL, NULL)), ARRAY[true],
          'a leased DPU is woken');
SELECT is((SELECT state_version FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D2),
          (SELECT state_version + 1 FROM v0), 'and its state_version bumped (the pass in flight ends stale)');
UPDATE extsvc.dpu_reconciliations SET lease_token = NULL, lease_owner = NULL, lease_expires_at = NULL
 WHERE dpu_machine_id = :D2;

-- a woken row is claimed by the queue's claim ---------------------------------------------------------
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id = :D2;
CREATE TEMP TABLE c1 AS SELECT * FROM extsvc.claim('dpu', 'w1');
SELECT is((SELECT array_agg(id) FROM c1), ARRAY[:D1::text], 'claim: the woken row, not the one that is not due');
SELECT is((SELECT work->>'device_name' FROM c1), 'dev-w1', 'claim: with the work of the wire schema');
SELECT is((SELECT lease_owner FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D1), 'w1',
          'claim: leased to the worker');
SELECT is((SELECT count(*)::integer FROM extsvc.claim('dpu', 'w2')), 0,
          'claim: a leased row is not claimed again');
SELECT throws_ok($$SELECT * FROM extsvc.claim('dpus', 'w1')$$, '22023', 'unknown worker queue',
                 'claim: an unknown queue is refused');

-- next_due_in of one queue ------------------------------------------------------------------------
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() - interval '10 seconds', lease_token = NULL,
       lease_owner = NULL, lease_expires_at = NULL WHERE dpu_machine_id = :D2;
SELECT is(extsvc.next_due_in('service'), NULL, 'next_due_in(service): the DPU queue does not count');
SELECT ok(extsvc.next_due_in('dpu') < 0, 'next_due_in(dpu): overdue');
SELECT ok(extsvc.next_due_in() < 0, 'next_due_in(): any queue');

-- services: wake_services, resync_snapshot_of, mark_and_claim_dpus by service ---------------------
SELECT lives_ok(format($$SELECT extsvc.create_service('tw', 'watch-tap', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :S), 'fixture: a DPF service');
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL WHERE service_id = :S;
SELECT is(extsvc.wake_services(ARRAY[:S]::uuid[]), 0, 'wake_services: a CREATING service is not woken by an event');
SELECT is((SELECT count(*)::integer FROM extsvc.resync_snapshot_of(ARRAY[:S]::uuid[])), 0,
          'resync_snapshot_of: only READY services are checked for drift');
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = 1 WHERE service_id = :S;
SELECT is((SELECT work->>'service_id' FROM extsvc.resync_snapshot_of(ARRAY[:S]::uuid[])), trim(both '''' from :S),
          'resync_snapshot_of: a READY one with its work');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'tw', %L)$$, :I, :H1), 'fixture: an instance');
SELECT lives_ok(format($$SELECT extsvc.set_instance_extension_services(%L, jsonb_build_array(jsonb_build_object('service_id', %L::text, 'version', (SELECT version FROM extsvc.services WHERE service_id = %L))))$$,
                       :I, :S, :S), 'fixture: attached');
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id = :D1;
SELECT is((SELECT array_agg(id || ' ' || woken) FROM extsvc.mark_and_claim_dpus(NULL, NULL, ARRAY[:S]::uuid[], NULL)),
          ARRAY[trim(both '''' from :D1) || ' true'],
          'mark_and_claim_dpus by service: the DPU of a service whose context changed, not RUNNING yet');

-- _complete_dpu with evidence from the watch caches --------------------------------------------------
UPDATE extsvc.dpu_reconciliations SET next_due_at = now(), attempts = 0, lease_token = NULL, lease_owner = NULL,
       lease_expires_at = NULL WHERE dpu_machine_id = :D1;
-- D1 alone is due from here on: the claims below lease it
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id = :D2;
CREATE TEMP TABLE c2 AS SELECT * FROM extsvc.claim('dpu', 'w1');
SELECT is(extsvc.complete('dpu', :D1, (SELECT state_version FROM c2), (SELECT lease_token FROM c2),
          jsonb_build_object('outcome', 'observed', 'watched', true,
                             'observed_at', extract(epoch FROM now() - interval '3 seconds'),
                             'results', jsonb_build_array(jsonb_build_object(
                               'kind', 'attachment', 'instance_id', :I::text, 'service_id', :S::text,
                               'version', (SELECT version FROM extsvc.services WHERE service_id = :S),
                               'state', 'PENDING', 'message', 'waiting for DPF to copy the label to the Node')))),
          'applied', 'a watched outcome is applied');
SELECT ok((SELECT abs(extract(epoch FROM observed_at - (now() - interval '3 seconds'))) < 0.01
             FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I),
          'observed_at is when the evidence was current, not now');
SELECT ok((SELECT next_due_at BETWEEN now() + interval '59 seconds' AND now() + interval '61 seconds'
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D1),
          'a watched DPU that converges is not polled: only a look in 60 s as a safety net');
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :D1;
CREATE TEMP TABLE c3 AS SELECT * FROM extsvc.claim('dpu', 'w1');
SELECT is(extsvc.complete('dpu', :D1, (SELECT state_version FROM c3), (SELECT lease_token FROM c3),
          jsonb_build_object('outcome', 'observed', 'watched', true, 'keep_polling', true,
                             'results', jsonb_build_array(jsonb_build_object(
                               'kind', 'attachment', 'instance_id', :I::text, 'service_id', :S::text,
                               'version', (SELECT version FROM extsvc.services WHERE service_id = :S),
                               'state', 'UNKNOWN', 'message', 'removal not confirmed')))),
          'applied', 'a watched pass that could not conclude');
SELECT ok((SELECT next_due_at < now() + interval '6 seconds' FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D1),
          'is looked at again briskly (keep_polling)');
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :D1;
CREATE TEMP TABLE c4 AS SELECT * FROM extsvc.claim('dpu', 'w1');
SELECT is(extsvc.complete('dpu', :D1, (SELECT state_version FROM c4), (SELECT lease_token FROM c4),
          jsonb_build_object('outcome', 'observed', 'watched', true,
                             'observed_at', extract(epoch FROM now() - interval '2 hours'),
                             'results', jsonb_build_array(jsonb_build_object(
                               'kind', 'attachment', 'instance_id', :I::text, 'service_id', :S::text,
                               'version', (SELECT version FROM extsvc.services WHERE service_id = :S),
                               'state', 'RUNNING', 'message', 'Ready pod of revision 1')))),
          'applied', 'an outcome whose evidence is older than the staleness bound');
SELECT is((SELECT deployment_state FROM extsvc.dpf_extension_service_attachments WHERE instance_id = :I), 'UNKNOWN',
          'changes no row: stale evidence proves nothing');

-- a DELETING service waiting for DPF's finalizers is woken by its DPUService's events
\set S2 '''e1000000-0000-0000-0000-000000000002'''
SELECT lives_ok(format($$SELECT extsvc.create_service('tw', 'watch-tap-2', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :S2), 'fixture: a second DPF service');
SELECT is((SELECT lifecycle_state::text FROM extsvc.delete_service(:S2)), 'DELETING', 'fixture: deleted');
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = now() + interval '5 minutes' WHERE service_id = :S2;
SELECT is(extsvc.wake_services(ARRAY[:S2]::uuid[]), 1, 'wake_services: a DELETING service is woken (finalizers)');
-- a fresh cache's first list: no event for an object that went before it
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = now() + interval '5 minutes' WHERE service_id = :S2;
SELECT is(extsvc.wake_services('{}'::uuid[]), 0, 'wake_services: no ids, nothing woken');
SELECT is(extsvc.wake_services('{}'::uuid[], every_deleting => true), 1,
          'wake_services(every_deleting): every DELETING service is woken (and no other)');

SELECT * FROM finish();
ROLLBACK;
