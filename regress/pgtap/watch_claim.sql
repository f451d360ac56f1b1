-- extsvc.mark_and_claim_dpus (issue 24, sql/parts/79_worker_watch.sql): the watcher's one call
-- that makes the DPU rows a watch event names due and leases them before the queue's backlog.
-- Marks and claims in one statement, bumps a leased row's state_version (its pass in flight ends
-- stale) without claiming it, re-claims an expired lease, waits for a row another session holds
-- (a wake is never skipped), ignores unknown names, claims at most max_claims and nothing without
-- a worker, and is for the worker (the owner) only.
BEGIN;
\ir helpers.psql
SELECT plan(37);

\set D1 '''fm100dsm10000000000000000000000000000d100000000000000000000'''
\set D2 '''fm100dsm10000000000000000000000000000d200000000000000000000'''
\set D3 '''fm100dsm10000000000000000000000000000d300000000000000000000'''
\set D9 '''fm100dsm10000000000000000000000000000d900000000000000000000'''
\set H1 '''fm100hsm10000000000000000000000000000f100000000000000000000'''
\set H2 '''fm100hsm10000000000000000000000000000f200000000000000000000'''
\set H3 '''fm100hsm10000000000000000000000000000f300000000000000000000'''
\set H9 '''fm100hsm10000000000000000000000000000f900000000000000000000'''

CREATE ROLE extsvc_tap_wc_api LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_wc_admin LOGIN IN ROLE extsvc_admin;

SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-m1', 'node-m1', true)$$, :D1, :H1), 'fixture: DPU 1');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-m2', 'node-m2', true)$$, :D2, :H2), 'fixture: DPU 2');
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'dev-m3', 'node-m3', true)$$, :D3, :H3), 'fixture: DPU 3');
-- nothing is due while this file runs, unless it makes it so
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL, attempts = 0;
CREATE TEMP TABLE v0 AS SELECT dpu_machine_id, state_version FROM extsvc.dpu_reconciliations;

-- marks and claims in one call --------------------------------------------------------------------
CREATE TEMP TABLE c1 AS
  SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m1'], ARRAY['node-m2', 'node-unknown'], NULL, 'w1', 60);
SELECT is((SELECT array_agg(id || ' ' || woken || ' ' || (lease_token IS NOT NULL) ORDER BY id) FROM c1),
          ARRAY[trim(both '''' from :D1) || ' true true', trim(both '''' from :D2) || ' true true'],
          'a device name and a node name: both DPUs woken and claimed; an unknown name nothing');
SELECT is((SELECT array_agg(lease_owner ORDER BY dpu_machine_id) FROM extsvc.dpu_reconciliations
            WHERE dpu_machine_id IN (:D1, :D2)), ARRAY['w1', 'w1'], 'leased to the worker');
SELECT is((SELECT count(*)::integer FROM extsvc.dpu_reconciliations r JOIN c1 ON c1.id = r.dpu_machine_id
            WHERE r.lease_token = c1.lease_token AND r.state_version = c1.state_version
              AND r.next_due_at <= now() AND r.lease_expires_at = now() + interval '60 seconds'), 2,
          'the row''s lease token, state_version, due time and lease expiry as returned');
SELECT is((SELECT work->>'device_name' FROM c1 WHERE id = :D1), 'dev-m1', 'with the work of the wire schema');
SELECT is((SELECT count(*)::integer FROM extsvc.dpu_reconciliations r JOIN v0 USING (dpu_machine_id)
            WHERE r.dpu_machine_id IN (:D1, :D2) AND r.state_version = v0.state_version), 2,
          'an unleased row keeps its state_version');
SELECT is((SELECT lease_owner FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D3), NULL,
          'a DPU nothing named is left alone');

-- a leased row: woken, state_version bumped, not claimed -----------------------------------------
UPDATE extsvc.dpu_reconciliations SET next_due_at = now() + interval '60 seconds' WHERE dpu_machine_id = :D1;
CREATE TEMP TABLE c2 AS SELECT * FROM extsvc.mark_and_claim_dpus(NULL, ARRAY['node-m1'], NULL, 'w2', 60);
SELECT is((SELECT array_agg(id || ' ' || woken || ' ' || (lease_token IS NULL) || ' ' || (work IS NULL)) FROM c2),
          ARRAY[trim(both '''' from :D1) || ' true true true'],
          'a row leased to another worker is woken but not claimed (no token, no work)');
SELECT is((SELECT state_version FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D1),
          (SELECT state_version + 1 FROM c1 WHERE id = :D1), 'its state_version bumped: the pass in flight ends stale');
SELECT is((SELECT state_version FROM c2), (SELECT state_version + 1 FROM c1 WHERE id = :D1),
          'the bumped state_version is returned');
SELECT ok((SELECT lease_owner = 'w1' AND lease_token = (SELECT lease_token FROM c1 WHERE id = :D1) AND next_due_at <= now()
             FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D1),
          'the lease stays the other worker''s; due now, so the next pass runs');
SELECT is(extsvc.complete('dpu', :D1, (SELECT state_version FROM c1 WHERE id = :D1), (SELECT lease_token FROM c1 WHERE id = :D1),
                          '{"outcome": "observed", "results": []}'),
          'stale', 'the completion of the pass in flight is stale');

-- an expired lease is bumped and claimed again ---------------------------------------------------
UPDATE extsvc.dpu_reconciliations SET lease_expires_at = now() - interval '1 second', next_due_at = now() + interval '1 minute'
 WHERE dpu_machine_id = :D2;
CREATE TEMP TABLE c3 AS SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m2'], NULL, NULL, 'w2', 30);
SELECT ok((SELECT woken AND lease_token IS NOT NULL AND lease_token <> (SELECT lease_token FROM c1 WHERE id = :D2)
             AND state_version = (SELECT state_version + 1 FROM c1 WHERE id = :D2) FROM c3),
          'a row whose lease expired: woken, bumped and claimed with a new token');
SELECT is((SELECT lease_owner FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D2), 'w2', 'by the new worker');

-- no worker: marks only; a row due already is claimed but not woken twice -------------------------
CREATE TEMP TABLE c4 AS SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m3'], NULL, NULL, NULL);
SELECT is((SELECT array_agg(id || ' ' || woken || ' ' || (lease_token IS NULL)) FROM c4),
          ARRAY[trim(both '''' from :D3) || ' true true'], 'worker NULL: woken, not claimed');
SELECT ok((SELECT lease_token IS NULL AND next_due_at <= now() FROM extsvc.dpu_reconciliations WHERE dpu_machine_id = :D3),
          'due now and unleased');
SELECT is((SELECT count(*)::integer FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m3'], NULL, NULL, NULL)), 0,
          'named again without a worker: nothing to report (due already, not woken twice)');
CREATE TEMP TABLE c5 AS SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m3'], NULL, NULL, 'w3');
SELECT is((SELECT array_agg(id || ' ' || woken || ' ' || (lease_token IS NOT NULL)) FROM c5),
          ARRAY[trim(both '''' from :D3) || ' false true'], 'with a worker: claimed, but it was due already');

-- max_claims, unknown names ------------------------------------------------------------------------
UPDATE extsvc.dpu_reconciliations SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = NULL
 WHERE dpu_machine_id IN (:D1, :D2, :D3);
CREATE TEMP TABLE c6 AS
  SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m1', 'dev-m2', 'dev-m3'], NULL, NULL, 'w1', 60, 2)
                WITH ORDINALITY AS x(id, state_version, lease_token, work, woken, o);
SELECT is((SELECT array_agg(id ORDER BY id) FILTER (WHERE lease_token IS NOT NULL) FROM c6), ARRAY[:D1::text, :D2::text],
          'max_claims 2: the first two in key order are claimed');
SELECT is((SELECT array_agg(id) FILTER (WHERE lease_token IS NULL) FROM c6), ARRAY[:D3::text],
          'the third is woken, due for the queue''s next claim');
SELECT is((SELECT array_agg(id ORDER BY o) FROM c6),
          ARRAY[:D1::text, :D2::text, :D3::text], 'claimed rows first, in key order');
CREATE TEMP TABLE before_unknown AS SELECT * FROM extsvc.dpu_reconciliations;
SELECT is((SELECT count(*)::integer FROM extsvc.mark_and_claim_dpus(ARRAY['no-such-device'], ARRAY['no-such-node'],
                                                                    ARRAY['e2000000-0000-0000-0000-00000000dead']::uuid[], 'w1')),
          0, 'unknown names and services: no row');
SELECT is((SELECT count(*)::integer FROM (SELECT * FROM extsvc.dpu_reconciliations EXCEPT SELECT * FROM before_unknown) x), 0,
          'and no row changed');
SELECT is((SELECT count(*)::integer FROM extsvc.mark_and_claim_dpus(NULL, NULL, NULL, 'w1')), 0, 'NULL arrays: no row');

-- privileges: the worker's (the owner's) only ------------------------------------------------------
SELECT ok(NOT has_function_privilege('public', 'extsvc.mark_and_claim_dpus(text[],text[],uuid[],text,integer,integer)', 'EXECUTE'),
          'not executable by PUBLIC');
SELECT alike(pg_temp.as_user('extsvc_tap_wc_api', $$SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m1'], NULL, NULL, 'x')$$),
             '42501: permission denied for function mark_and_claim_dpus', 'an extsvc_api member may not call it');
SELECT alike(pg_temp.as_user('extsvc_tap_wc_admin', $$SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m1'], NULL, NULL, 'x')$$),
             '42501: permission denied for function mark_and_claim_dpus', 'an extsvc_admin member may not call it');

-- a row another session holds is waited for, not skipped (the wake would be lost) -------------------
-- The row must be committed for the other session to lock it: this part works through dblink
-- connections and removes its rows at the end.
CREATE EXTENSION IF NOT EXISTS dblink;
DO $$
DECLARE
  v_conn text := format('dbname=%s host=%s port=%s user=%s', current_database(),
                        split_part(current_setting('unix_socket_directories'), ',', 1),
                        current_setting('port'), current_user);
BEGIN
  PERFORM dblink_connect('wc_setup', v_conn);
  PERFORM dblink_connect('wc_a', v_conn);
  -- leftovers of an interrupted run (DPU 9)
  PERFORM dblink_exec('wc_setup', $q$DELETE FROM extsvc.dpus
                                     WHERE machine_id = 'fm100dsm10000000000000000000000000000d900000000000000000000'$q$);
END $$;
SELECT lives_ok(format($$SELECT dblink_exec('wc_setup', %L)$$,
                       format($d$DO $x$ BEGIN PERFORM extsvc.register_dpu(%L, %L, 'dev-m9', 'node-m9', true); END $x$$d$,
                              :D9, :H9)),
                'committed fixture: DPU 9');
SELECT lives_ok(format($$SELECT dblink_exec('wc_setup', %L)$$,
                       format($d$UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL WHERE dpu_machine_id = %L$d$, :D9)),
                'committed fixture: DPU 9 not due');
SELECT is(dblink_exec('wc_a', 'BEGIN'), 'BEGIN', 'session A opens a transaction');
SELECT is((SELECT count(*)::integer FROM dblink('wc_a', format($d$SELECT dpu_machine_id FROM extsvc.dpu_reconciliations
                                                   WHERE dpu_machine_id = %L FOR NO KEY UPDATE$d$, :D9)) AS t(id text)),
          1, 'session A holds DPU 9''s work row (an API call placing it)');
SET LOCAL lock_timeout = '300ms';
SELECT is(pg_temp.diag($$SELECT * FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m9'], NULL, NULL, 'w1')$$, 'sqlstate'), '55P03',
          'the call waits for it (here until lock_timeout) instead of skipping it');
SET LOCAL lock_timeout = 0;
SELECT is(dblink_exec('wc_a', 'COMMIT'), 'COMMIT', 'session A commits');
SELECT is((SELECT array_agg(woken::text || ' ' || (lease_token IS NOT NULL)) FROM dblink('wc_setup',
             format($d$SELECT woken, lease_token FROM extsvc.mark_and_claim_dpus(ARRAY['dev-m9'], NULL, NULL, 'w1')$d$))
             AS t(woken boolean, lease_token uuid)),
          ARRAY['true true'], 'once released, the row is woken and claimed');
SELECT is(dblink_exec('wc_setup', format('DELETE FROM extsvc.dpus WHERE machine_id = %L', :D9)), 'DELETE 1',
          'the committed rows are removed');
DO $$ BEGIN
  PERFORM dblink_disconnect('wc_a');
  PERFORM dblink_disconnect('wc_setup');
END $$;

SELECT * FROM finish();
ROLLBACK;
