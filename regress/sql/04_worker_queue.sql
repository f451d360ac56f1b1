-- SPEC 2.5: the worker's queue. extsvc.claim leases due rows (the work as a
-- JSON object, the wire schema of docs/worker.md); extsvc.complete writes an
-- outcome object only with the claimed state_version and lease token
-- (compare-and-swap). Here this session plays the worker (the cluster runs
-- with extsvc.workers = 0) through those two functions.
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

-- the queue row and service state of one service, without times
CREATE FUNCTION pg_temp.q(id uuid) RETURNS TABLE (
    state text, desired integer, applied integer, status text, state_version bigint, attempts integer,
    due text, leased boolean, lease_owner text, last_error text, last_http_status integer)
LANGUAGE sql AS $$
  SELECT s.lifecycle_state, s.desired_revision, s.applied_revision, s.status_message,
         r.state_version, r.attempts,
         CASE WHEN r.next_due_at IS NULL THEN 'never'
              WHEN r.next_due_at <= now() THEN 'now'
              ELSE 'later' END,
         r.lease_token IS NOT NULL, r.lease_owner, r.last_error, r.last_http_status
    FROM extsvc.service_records s JOIN extsvc.dpf_extension_service_reconciliations r USING (service_id)
   WHERE s.service_id = id
$$;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.1","security":{"privileged":false}}'
\set chart3 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.2","security":{"privileged":false}}'
\set A '''aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa'''
\set B '''bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb'''

SELECT service_id, lifecycle_state FROM extsvc.create_service('tenant', 'a', 'DPF_HELM_CHART', :'chart',
    dpu_target => 'ALL', service_id => :A);
SELECT service_id, lifecycle_state FROM extsvc.create_service('tenant', 'b', 'DPF_HELM_CHART', :'chart',
    dpu_target => 'ALL', service_id => :B);
-- KUBERNETES_POD services have no queue row
SELECT lifecycle_state FROM extsvc.create_service('tenant', 'pod', 'KUBERNETES_POD', 'pod');
SELECT count(*) AS queue_rows FROM extsvc.dpf_extension_service_reconciliations;

------------------------------------------------------------------ claim
-- batch_size bounds the claim; the oldest due row comes first
SELECT id AS service_id, state_version, work->>'lifecycle_state' AS lifecycle_state,
       work->>'dpf_service_name' = extsvc.dpf_service_name(id::uuid, work->>'attachable_version') AS name_ok,
       (work->>'desired_revision')::integer AS desired_revision, (work->>'applied_revision')::integer AS applied_revision,
       (work->>'attempts')::integer AS attempts,
       extsvc._render_dpuservice(id::uuid, work->>'attachable_version', (work->>'desired_revision')::integer,
                                 work->'helm_data', work->>'namespace')
         = extsvc.render_dpuservice(id::uuid) AS desired_ok
  FROM extsvc.claim('service', 'w1', 1);
SELECT * FROM pg_temp.q(:A);
SELECT id AS service_id FROM extsvc.claim('service', 'w2');
-- leased rows are not claimed again; nothing is left
SELECT count(*) AS claimed FROM extsvc.claim('service', 'w3');
SELECT service_name, lifecycle_state, state_version, due, lease_owner IS NOT NULL AS leased
  FROM extsvc.reconciliation_queue ORDER BY service_name;

-- remember A's lease
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = :A \gset

------------------------------------------------------------------ retry
-- a transient failure: attempts + 1, due later (never before Retry-After),
-- the error kept, the lease released, the state unchanged
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'retry', 'message', 'HTTP 503 from the API server',
                                          'http_status', 503, 'retry_after_s', 200));
SELECT * FROM pg_temp.q(:A);
SELECT next_due_at >= last_error_at + interval '200 seconds' AS honours_retry_after,
       next_due_at <= last_error_at + interval '200.001 seconds' AS not_longer
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :A;
-- not due: no claim
SELECT count(*) AS claimed FROM extsvc.claim('service', 'w1');
-- the backoff doubles from extsvc.retry_base (500ms) up to extsvc.retry_cap
-- (300s), with up to 20 % jitter, never below Retry-After
SELECT a, extsvc._backoff(a) BETWEEN lo AND hi AS within_bounds
  FROM (VALUES (1, interval '0.5 s', interval '0.6 s'), (2, '1 s', '1.2 s'), (4, '4 s', '4.8 s'),
               (10, '256 s', '307.2 s'), (30, '300 s', '360 s')) t(a, lo, hi);
SELECT extsvc._backoff(1, 42) AS retry_after_wins;

------------------------------------------------------------------ reconcile_now, poll, transition
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT id AS service_id, state_version, (work->>'attempts')::integer AS attempts FROM extsvc.claim('service', 'w1');
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = :A \gset
-- poll (waiting on the cluster): attempts + 1, due later, last error kept
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'poll', 'retry_after_s', 200));
SELECT * FROM pg_temp.q(:A);
SELECT next_due_at >= last_success_at + interval '200 seconds' AS honours_retry_after
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :A;
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT id AS service_id, (work->>'attempts')::integer AS attempts FROM extsvc.claim('service', 'w1');
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = :A \gset
-- transition to READY with the applied revision: attempts reset, error
-- cleared, nothing due until new intent or drift
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'transition', 'new_state', 'READY',
                                          'reason', 'dpuservice_created', 'message', 'DPUService created',
                                          'applied_revision', 1, 'observed_generation', 1));
SELECT * FROM pg_temp.q(:A);
SELECT revision, applied_at IS NOT NULL AS applied FROM extsvc.helm_revisions WHERE service_id = :A;
SELECT observed_generation, last_success_at IS NOT NULL AS success_at, last_error_at
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :A;
-- a transition the table does not allow is refused (and nothing changes)
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT * FROM pg_temp.try(format($$SELECT extsvc.complete('service', %L, %s, %L,
                                                          jsonb_build_object('outcome', 'transition',
                                                                             'new_state', 'DELETED',
                                                                             'reason', 'dpuservice_deleted'))$$,
                                 :A, :sv_a, :'tok_a'));
SELECT * FROM pg_temp.try(format($$SELECT extsvc.complete('service', %L, %s, %L,
                                                          jsonb_build_object('outcome', 'explode'))$$, :A, :sv_a, :'tok_a'));
SELECT * FROM pg_temp.q(:A);
-- done: nothing changed, nothing more to do
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a', jsonb_build_object('outcome', 'done'));
SELECT * FROM pg_temp.q(:A);

------------------------------------------------------------------ stale
-- new intent lands while the worker talks to Kubernetes: its result is
-- dropped ('stale'), the row is released and due at once
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT lifecycle_state, version_ctr FROM extsvc.update_service(:A, :'chart2');
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'transition', 'new_state', 'FAILED',
                                          'reason', 'permanent_error', 'message', 'HTTP 422'));
SELECT * FROM pg_temp.q(:A);
-- the next pass works from the newest intent
SELECT state_version, work->>'lifecycle_state' AS lifecycle_state, (work->>'desired_revision')::integer AS desired_revision,
       (work->>'applied_revision')::integer AS applied_revision,
       extsvc._render_dpuservice(id::uuid, work->>'attachable_version', (work->>'desired_revision')::integer,
                                 work->'helm_data', work->>'namespace')#>>'{spec,helmChart,source,version}' AS chart_version
  FROM extsvc.claim('service', 'w1');
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.dpf_extension_service_reconciliations
 WHERE service_id = :A \gset
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'transition', 'new_state', 'READY',
                                          'reason', 'revision_applied', 'message', 'revision 2 applied',
                                          'applied_revision', 2));
SELECT * FROM pg_temp.q(:A);

------------------------------------------------------------------ lost
-- a worker whose lease was taken over writes nothing
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT extsvc.complete('service', :A, :sv_a, gen_random_uuid(),
                       jsonb_build_object('outcome', 'transition', 'new_state', 'FAILED',
                                          'reason', 'permanent_error', 'message', 'x'));
SELECT extsvc.complete('service', :A, :sv_a, NULL, jsonb_build_object('outcome', 'done'));
SELECT extsvc.complete('service', '99999999-9999-9999-9999-999999999999', 1, :'tok_a',
                       jsonb_build_object('outcome', 'done'));
SELECT * FROM pg_temp.q(:A);
-- an expired lease can be claimed by another worker; the first one is then lost
UPDATE extsvc.dpf_extension_service_reconciliations SET lease_expires_at = now() - interval '1 second'
 WHERE service_id = :A;
SELECT lease_token AS tok_a2 FROM extsvc.claim('service', 'w2') \gset
SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :A;
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a', jsonb_build_object('outcome', 'done')) AS first_worker;
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a2',
                       jsonb_build_object('outcome', 'event', 'reason', 'drift_patched',
                                          'message', 'spec.helmChart.source.version drifted')) AS second_worker;
SELECT * FROM pg_temp.q(:A);

------------------------------------------------------------------ drift
-- the drift detector compares READY services with the cluster
SELECT r.service_id, r.work->>'dpf_service_name' = s.dpf_service_name AS name_ok,
       r.work->>'lifecycle_state' AS lifecycle_state,
       extsvc._render_dpuservice(r.service_id, r.work->>'attachable_version', (r.work->>'desired_revision')::integer,
                                 r.work->'helm_data', r.work->>'namespace')
         = extsvc.render_dpuservice(r.service_id) AS desired_ok
  FROM extsvc.resync_snapshot() r JOIN extsvc.services s USING (service_id) ORDER BY 1;
-- mark_drift makes a READY, idle service due; a second call is a no-op
SELECT extsvc.mark_drift(:A, 'DPUService missing') AS marked;
SELECT extsvc.mark_drift(:A, 'DPUService missing') AS marked_again;
SELECT * FROM pg_temp.q(:A);
-- not READY: no-op (B is still CREATING and leased by w2)
SELECT extsvc.mark_drift(:B) AS marked_b;
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'event', 'reason', 'drift_recreated',
                                          'message', 'DPUService re-created'));
-- an event not allowed in this state is refused
SELECT extsvc.reconcile_now(:A) AS made_due;
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT * FROM pg_temp.try(format($$SELECT extsvc.complete('service', %L, %s, %L,
                                                          jsonb_build_object('outcome', 'event',
                                                                             'reason', 'superseded'))$$,
                                 :A, :sv_a, :'tok_a'));
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a', jsonb_build_object('outcome', 'done'));

------------------------------------------------------------------ FAILED and retry_service
SELECT lifecycle_state FROM extsvc.update_service(:A, :'chart3');
SELECT lease_token AS tok_a, state_version AS sv_a FROM extsvc.claim('service', 'w1') \gset
SELECT extsvc.complete('service', :A, :sv_a, :'tok_a',
                       jsonb_build_object('outcome', 'transition', 'new_state', 'FAILED',
                                          'reason', 'permanent_error',
                                          'message', 'DPUService refused: 422 spec.helmChart.source.version'));
SELECT * FROM pg_temp.q(:A);
SELECT * FROM pg_temp.try(format('SELECT extsvc.reconcile_now(%L)', :A));
-- retry: FAILED with an applied revision goes back to UPDATING
SELECT lifecycle_state, status_message FROM extsvc.retry_service(:A);
SELECT * FROM pg_temp.q(:A);
SELECT * FROM pg_temp.try(format('SELECT extsvc.retry_service(%L)', :A));
SELECT * FROM pg_temp.try($$SELECT extsvc.retry_service('99999999-9999-9999-9999-999999999999')$$);
-- B fails before it was ever created: retry goes back to CREATING
SELECT extsvc.complete('service', :B, state_version, lease_token,
                       jsonb_build_object('outcome', 'transition', 'new_state', 'FAILED',
                                          'reason', 'ownership_conflict',
                                          'message', 'extsvc-...: owned by another service'))
  FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :B;
SELECT lifecycle_state FROM extsvc.retry_service(:B);

-- reconcile_now of everything reconcilable
SELECT extsvc.reconcile_now() AS made_due;

------------------------------------------------------------------ history
SELECT service_name, from_state, to_state, actor, reason, message, revision
  FROM extsvc.service_history WHERE service_id IN (:A, :B) ORDER BY id;

DROP EXTENSION nico_extsvc;
