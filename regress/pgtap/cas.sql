-- SPEC 2.5: every worker write is a compare-and-swap on (state_version,
-- lease_token); concurrent claims never hand out the same row.
BEGIN;
\ir helpers.psql
SELECT plan(35);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"2.0.0","security":{"privileged":false}}'
\set S '''c0000000-0000-0000-0000-000000000001'''

-- dblink connections for the two-session part at the end; leftovers of an
-- earlier, interrupted run are removed first
CREATE EXTENSION IF NOT EXISTS dblink;
DO $$
DECLARE
  v_conn text := format('dbname=%s host=%s port=%s user=%s', current_database(),
                        split_part(current_setting('unix_socket_directories'), ',', 1),
                        current_setting('port'), current_user);
BEGIN
  PERFORM dblink_connect('cas_setup', v_conn);
  PERFORM dblink_connect('cas_a', v_conn);
  PERFORM dblink_connect('cas_b', v_conn);
  PERFORM dblink_exec('cas_setup', $q$DELETE FROM extsvc.service_records WHERE tenant_organization_id = 'cas-tap'$q$);
END $$;

SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'cas', 'DPF_HELM_CHART', %L, dpu_target => 'ALL', service_id => %L)$$,
                       :'chart', :S), 'fixture: a DPF service');

------------------------------------------------------------------ stale state_version
CREATE TEMP TABLE c1 AS SELECT * FROM extsvc.claim('service', 'w1');
SELECT is((SELECT count(*)::integer FROM c1), 1, 'claimed');
SELECT is((SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :S), 'w1', 'leased to w1');
-- new intent arrives while w1 works
SELECT is((extsvc.update_service(:S, :'chart2')).desired_revision, 2, 'update while leased: revision 2');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c1), (SELECT lease_token FROM c1),
                          '{"outcome": "transition", "new_state": "READY", "reason": "dpuservice_created",
                            "message": "created", "applied_revision": 1}'),
          'stale', 'completion with the old state_version is stale');
SELECT is((SELECT ARRAY[lifecycle_state, applied_revision::text, status_message] FROM extsvc.services WHERE service_id = :S),
          ARRAY['CREATING', NULL, 'waiting for the worker to apply revision 2'], 'the service is unchanged');
SELECT is((SELECT count(*)::integer FROM extsvc.helm_revisions WHERE service_id = :S AND applied_at IS NOT NULL), 0,
          'no revision marked applied');
SELECT ok((SELECT lease_token IS NULL AND next_due_at <= now() FROM extsvc.dpf_extension_service_reconciliations
            WHERE service_id = :S), 'the row is released and due again');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history WHERE service_id = :S AND actor = 'worker'), 0,
          'no worker history written');
-- a delete that lands during an in-flight create wins
CREATE TEMP TABLE c2 AS SELECT * FROM extsvc.claim('service', 'w1');
SELECT is((SELECT (work->>'desired_revision')::integer FROM c2), 2, 'the next claim works from revision 2');
SELECT is((extsvc.delete_service(:S)).lifecycle_state, 'DELETING', 'delete while the create is in flight');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c2), (SELECT lease_token FROM c2),
                          '{"outcome": "transition", "new_state": "READY", "reason": "dpuservice_created",
                            "message": "created", "applied_revision": 2}'),
          'stale', 'the in-flight create result is stale');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :S), 'DELETING', 'the delete wins');
CREATE TEMP TABLE c3 AS SELECT * FROM extsvc.claim('service', 'w1');
SELECT is((SELECT work->>'lifecycle_state' FROM c3), 'DELETING', 'the next pass deletes');

------------------------------------------------------------------ lost lease
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c3), gen_random_uuid(),
                          '{"outcome": "transition", "new_state": "DELETED", "reason": "dpuservice_deleted"}'),
          'lost', 'completion with another lease token is lost');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :S), 'DELETING', 'nothing written');
SELECT is((SELECT lease_token FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :S),
          (SELECT lease_token FROM c3), 'the lease is untouched');
-- an unexpired lease cannot be claimed by another worker
SELECT is((SELECT count(*)::integer FROM extsvc.claim('service', 'w2')), 0, 'a held lease is not claimed again');
-- an expired one can; the first worker is then lost
UPDATE extsvc.dpf_extension_service_reconciliations SET lease_expires_at = now() - interval '1 second' WHERE service_id = :S;
CREATE TEMP TABLE c4 AS SELECT * FROM extsvc.claim('service', 'w2');
SELECT is((SELECT count(*)::integer FROM c4), 1, 'an expired lease is reclaimed');
SELECT isnt((SELECT lease_token FROM c4), (SELECT lease_token FROM c3), 'with a new token');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c3), (SELECT lease_token FROM c3),
                          '{"outcome": "transition", "new_state": "DELETED", "reason": "dpuservice_deleted"}'),
          'lost', 'the first worker''s late result is lost');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c4), (SELECT lease_token FROM c4),
                          '{"outcome": "transition", "new_state": "DELETED", "reason": "dpuservice_deleted"}'),
          'applied', 'the second worker''s result is applied');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :S), 'DELETED', 'DELETED');
SELECT is(extsvc.complete('service', :S, (SELECT state_version FROM c4), (SELECT lease_token FROM c4),
                          '{"outcome": "done"}'),
          'lost', 'a second completion with a used token is lost');

------------------------------------------------------------------ two sessions
-- Claims of two sessions never overlap (FOR UPDATE SKIP LOCKED). The rows
-- must be committed for the other session to see them, so this part works
-- through dblink connections and removes its rows at the end.
SELECT lives_ok(format($$SELECT dblink_exec('cas_setup', %L)$$, format($d$DO $do$ BEGIN
  SET LOCAL extsvc.enforce_chart_allowlist = off;
  PERFORM extsvc.create_service('cas-tap', 'svc-' || g, 'DPF_HELM_CHART', %L, dpu_target => 'ALL',
                                service_id => ('c1000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid)
     FROM generate_series(1, 10) g;
END $do$$d$, :'chart')), 'committed fixture: 10 DPF services');
SELECT lives_ok($$SELECT dblink_exec('cas_b', 'SET statement_timeout = ''10s''')$$, 'session B will not wait long');

-- session A claims 6 inside an open transaction (holding the row locks)
SELECT is(dblink_exec('cas_a', 'BEGIN'), 'BEGIN', 'session A opens a transaction');
CREATE TEMP TABLE claimed_a AS
SELECT * FROM dblink('cas_a', $$SELECT id FROM extsvc.claim('service', 'a', 6)$$) AS t(service_id uuid);
-- session B claims concurrently: it must skip A's rows, not wait for them
CREATE TEMP TABLE claimed_b AS
SELECT * FROM dblink('cas_b', $$SELECT id FROM extsvc.claim('service', 'b', 10)$$) AS t(service_id uuid);
SELECT is((SELECT count(*)::integer FROM claimed_a), 6, 'session A claimed 6');
SELECT is((SELECT count(*)::integer FROM claimed_b), 4, 'session B claimed the other 4 without waiting');
SELECT is((SELECT count(*)::integer FROM claimed_a JOIN claimed_b USING (service_id)), 0, 'no row claimed by both');
SELECT is(dblink_exec('cas_a', 'COMMIT'), 'COMMIT', 'session A commits');
SELECT is((SELECT count(*)::integer FROM dblink('cas_b', $$SELECT id FROM extsvc.claim('service', 'b', 10)$$)
            AS t(service_id uuid)), 0, 'after A commits, its leased rows are still not claimable');
SELECT is((SELECT count(DISTINCT lease_owner)::integer FROM dblink('cas_setup',
             $$SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations r JOIN extsvc.service_records s USING (service_id)
                WHERE s.tenant_organization_id = 'cas-tap'$$) AS t(lease_owner text)), 2,
          'all 10 rows leased, to A and B');

-- clean up the committed rows
SELECT is(dblink_exec('cas_setup', $$DELETE FROM extsvc.service_records WHERE tenant_organization_id = 'cas-tap'$$),
          'DELETE 10', 'the committed rows are removed');
DO $$ BEGIN
  PERFORM dblink_disconnect('cas_a');
  PERFORM dblink_disconnect('cas_b');
  PERFORM dblink_disconnect('cas_setup');
END $$;
SELECT is((SELECT count(*)::integer FROM extsvc.service_records WHERE tenant_organization_id = 'cas-tap'), 0, 'cleaned up');

SELECT * FROM finish();
ROLLBACK;
