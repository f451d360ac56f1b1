-- The worker queue's one shape (issue 8): extsvc.claim / extsvc.complete for
-- both queues, the work objects of the wire schema (docs/worker.md), and the
-- refusals of a queue name or an outcome that does not fit.
BEGIN;
\ir helpers.psql
SELECT plan(31);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''c1000000-0000-0000-0000-000000000001'''
\set D '''fm100dsc10000000000000000000000000000d100000000000000000000'''
\set H '''fm100hsc10000000000000000000000000000f100000000000000000000'''

-- nothing else is due while this file runs
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL;
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL;

SELECT is((SELECT array_agg(queue ORDER BY queue) FROM extsvc._worker_queues()), ARRAY['dpu', 'service'],
          'two queues, by name');
SELECT ok((SELECT bool_and(to_regclass('extsvc.' || queue_table) IS NOT NULL
                           AND to_regprocedure(format('extsvc.%I(%s, integer)', work_function, key_type)) IS NOT NULL
                           AND to_regprocedure(format('extsvc.%I(%s, jsonb)', complete_function, key_type)) IS NOT NULL
                           AND to_regprocedure(format('extsvc.%I(text, integer, integer)', claim_function)) IS NOT NULL)
             FROM extsvc._worker_queues()),
          'each names its table, work, completion and claim function');
SELECT is(extsvc.next_due_in(), NULL, 'next_due_in: NULL when nothing is due');
SELECT throws_ok($$SELECT extsvc.next_due_in('services')$$, '22023', 'unknown worker queue',
                 'next_due_in: an unknown queue is refused');

SELECT throws_ok($$SELECT * FROM extsvc.claim('services', 'w1')$$, '22023', 'unknown worker queue',
                 'claim: an unknown queue is refused');
SELECT throws_ok($$SELECT * FROM extsvc.claim(NULL, 'w1')$$, '22023', 'unknown worker queue',
                 'claim: a NULL queue is refused');
SELECT throws_ok($$SELECT extsvc.complete('services', 'x', 1, gen_random_uuid(), '{"outcome": "done"}')$$,
                 '22023', 'unknown worker queue', 'complete: an unknown queue is refused');
SELECT throws_ok($$SELECT extsvc.complete(NULL, 'x', 1, gen_random_uuid(), '{"outcome": "done"}')$$,
                 '22023', 'unknown worker queue', 'complete: a NULL queue is refused');
SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'queue-tap', 'DPF_HELM_CHART', %L, dpu_target => 'ALL', service_id => %L)$$,
                       :'chart', :S), 'fixture: a DPF service');
SELECT ok(extsvc.next_due_in() <= 0, 'next_due_in: due now after a create');

CREATE TEMP TABLE c1 AS SELECT * FROM extsvc.claim('service', 'w1');
SELECT is((SELECT count(*)::integer FROM c1), 1, 'claim service: the new service');
SELECT is((SELECT id FROM c1), :S, 'claim service: its id (text)');
SELECT is((SELECT array_agg(k ORDER BY k) FROM c1, jsonb_object_keys(work) k),
          ARRAY['applied_helm_data', 'applied_revision', 'attachable_version', 'attempts', 'deployment_scope',
                'desired_revision', 'dpf_service_name', 'helm_data', 'lifecycle_state', 'namespace', 'placement_clear',
                'service_id'],
          'service work: exactly the keys of the wire schema');
SELECT is((SELECT work->'applied_helm_data' FROM c1), 'null'::jsonb,
          'service work: no applied revision data outside UPDATING');
SELECT is((SELECT work->>'lifecycle_state' || ' ' || (work->>'desired_revision') || ' ' || (work->'applied_revision')::text
             FROM c1), 'CREATING 1 null', 'service work: state and revisions');
SELECT is((SELECT work->'helm_data'->>'chartVersion' FROM c1), '1.0.0',
          'service work: the normalized Helm data of the desired revision, rendered by the worker');
SELECT is((SELECT count(*)::integer FROM extsvc.claim('service', 'w2')), 0, 'a leased row is not claimed again');
SELECT ok(extsvc.next_due_in() > 0, 'next_due_in: a leased row counts from its lease expiry');

SELECT throws_ok(format($$SELECT extsvc.complete('service', %L, %s, %L, '"done"')$$,
                        :S, (SELECT state_version FROM c1), (SELECT lease_token FROM c1)),
                 '22023', 'a worker outcome must be a JSON object', 'complete: an outcome that is not an object');
SELECT throws_ok(format($$SELECT extsvc.complete('service', %L, %s, %L, '{"outcome": "bogus"}')$$,
                        :S, (SELECT state_version FROM c1), (SELECT lease_token FROM c1)),
                 '22023', 'unknown reconciliation outcome', 'complete: an unknown outcome');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c1), gen_random_uuid(), '{"outcome": "done"}'),
          'lost', 'complete: another lease token is lost');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c1), (SELECT lease_token FROM c1),
                          jsonb_build_object('outcome', 'transition', 'new_state', 'READY', 'reason', 'dpuservice_created',
                                             'applied_revision', 1)),
          'applied', 'complete: the outcome object is applied');
SELECT is((SELECT lifecycle_state || ' ' || applied_revision FROM extsvc.service_records WHERE service_id = :S),
          'READY 1', 'the transition and applied revision were recorded');

-- the DPU queue has the same shape
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'queue-dpu', 'queue-node')$$, :D, :H),
                'fixture: a DPU');
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() WHERE dpu_machine_id = :D;
CREATE TEMP TABLE k1 AS SELECT * FROM extsvc.claim('dpu', 'w1', 100, 30) WHERE id = :D;
SELECT is((SELECT array_agg(k ORDER BY k) FROM k1, jsonb_object_keys(work) k),
          ARRAY['attempts', 'deregistered', 'device_name', 'dpu_machine_id', 'items', 'node_name', 'wanted_keys'],
          'DPU work: exactly the keys of the wire schema');
SELECT is((SELECT extsvc.renew_leases('w1', ARRAY[(SELECT lease_token FROM k1)], 30)), (SELECT lease_token FROM k1),
          'renew_leases covers the DPU queue too');
SELECT is(extsvc.complete('dpu', :D, (SELECT state_version FROM k1), (SELECT lease_token FROM k1),
                          '{"outcome": "observed", "results": [], "observation": {"seen": true}}'),
          'applied', 'complete dpu: an observation is applied');

-- The claim order (issue 11): a row is claimable from greatest(next_due_at,
-- lease_expires_at) on and rows come in that order; a running lease is never
-- claimed, an expired one counts from its expiry. now() is fixed in this
-- transaction, so the figures are exact.
\set O1 '''fm100dsc10000000000000000000000000000e100000000000000000000'''
\set O2 '''fm100dsc10000000000000000000000000000e200000000000000000000'''
\set O3 '''fm100dsc10000000000000000000000000000e300000000000000000000'''
\set O4 '''fm100dsc10000000000000000000000000000e400000000000000000000'''
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'order-1', 'order-node-1'),
                                extsvc.register_dpu(%L, %L, 'order-2', 'order-node-2'),
                                extsvc.register_dpu(%L, %L, 'order-3', 'order-node-3'),
                                extsvc.register_dpu(%L, %L, 'order-4', 'order-node-4')$$,
                       :O1, :H, :O2, :H, :O3, :H, :O4, :H), 'fixture: four DPUs');
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL;
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL;
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() - interval '3 min' WHERE dpu_machine_id = :O1;
UPDATE extsvc.dpu_reconciliations
   SET next_due_at = now() - interval '10 min', lease_owner = 'gone', lease_token = gen_random_uuid(),
       lease_expires_at = now() - interval '1 min'
 WHERE dpu_machine_id = :O2;
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() - interval '2 min' WHERE dpu_machine_id = :O3;
UPDATE extsvc.dpu_reconciliations
   SET next_due_at = now() - interval '20 min', lease_owner = 'busy', lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '1 min'
 WHERE dpu_machine_id = :O4;
SELECT is(extsvc.next_due_in(), -180::double precision,
          'next_due_in: the row claimable longest (a lease counts from its expiry)');
SELECT set_eq($$SELECT id FROM extsvc.claim('dpu', 'w3', 2)$$, ARRAY[:O1::text, :O3::text],
              'claim: the rows claimable longest first; an expired lease counts from its expiry');
SELECT set_eq($$SELECT id FROM extsvc.claim('dpu', 'w3', 10)$$, ARRAY[:O2::text],
              'claim: then the expired lease; never the running one');

SELECT * FROM finish();
ROLLBACK;
