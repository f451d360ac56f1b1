-- extsvc._hand_over_creates (issue 26, part 4, sql/parts/76_worker_hand_over.sql): what the
-- creating backend runs at pre-commit to hand its new services' rows to a worker. Leases the
-- listed services that are CREATING, due and not leased, as a claim would, and returns each
-- lease with the row's work document; leaves a row leased already, not due, no longer CREATING,
-- not listed or with a work document longer than the limit; and is for the extension's owner
-- only, as extsvc._hand_over, which create_service calls.
BEGIN;
\ir helpers.psql
SELECT plan(16);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S1 '''c2000000-0000-0000-0000-000000000001'''
\set S2 '''c2000000-0000-0000-0000-000000000002'''
\set S3 '''c2000000-0000-0000-0000-000000000003'''
\set S4 '''c2000000-0000-0000-0000-000000000004'''
\set S5 '''c2000000-0000-0000-0000-000000000005'''
\set S9 '''c2000000-0000-0000-0000-000000000009'''

CREATE ROLE extsvc_tap_ho_api LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_ho_admin LOGIN IN ROLE extsvc_admin;

SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'ho-' || n, 'DPF_HELM_CHART', %L, dpu_target => 'ALL',
                                                      service_id => ('c2000000-0000-0000-0000-00000000000' || n)::uuid)
                          FROM generate_series(1, 5) n$$, :'chart'), 'fixture: five DPF services');
-- S2 leased by a worker already, S3 not due, S4 no longer CREATING
UPDATE extsvc.dpf_extension_service_reconciliations
   SET lease_owner = 'other', lease_token = gen_random_uuid(), lease_expires_at = now() + interval '60 seconds'
 WHERE service_id = :S2;
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = now() + interval '1 hour' WHERE service_id = :S3;
SELECT lives_ok(format($$SELECT extsvc.delete_service(%L)$$, :S4), 'fixture: S4 deleted (DELETING)');
CREATE TEMP TABLE v0 AS SELECT service_id, state_version FROM extsvc.dpf_extension_service_reconciliations;

CREATE TEMP TABLE h1 AS
  SELECT * FROM extsvc._hand_over_creates('w-ho', ARRAY[:S1, :S2, :S3, :S4, :S9]::uuid[], 60, 7999);
SELECT is((SELECT array_agg(id ORDER BY id) FROM h1), ARRAY[trim(both '''' from :S1)],
          'only the listed CREATING, due, unleased row is handed over (S5 not listed, S9 unknown)');
SELECT ok((SELECT r.lease_owner = 'w-ho' AND r.lease_token = h1.lease_token AND r.state_version = h1.state_version
             FROM extsvc.dpf_extension_service_reconciliations r JOIN h1 ON h1.id = r.service_id::text),
          'leased to the worker with the token and state_version returned');
SELECT ok((SELECT r.lease_expires_at BETWEEN clock_timestamp() + interval '50 seconds'
                                         AND clock_timestamp() + interval '60 seconds'
             FROM extsvc.dpf_extension_service_reconciliations r WHERE r.service_id = :S1),
          'the lease runs lease_seconds from the hand-over (the clock, not the transaction''s start)');
SELECT is((SELECT h1.work::jsonb - 'attempts' FROM h1),
          (SELECT extsvc._service_work(:S1, 0) - 'attempts'),
          'the work document is the one a claim reads');
SELECT is((SELECT (work::jsonb)->>'lifecycle_state' FROM h1), 'CREATING', 'of a CREATING service');
SELECT is((SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :S2), 'other',
          'a row leased already keeps its lease');
SELECT is((SELECT array_agg(lease_owner IS NULL ORDER BY service_id) FROM extsvc.dpf_extension_service_reconciliations
            WHERE service_id IN (:S3, :S4, :S5)), ARRAY[true, true, true],
          'a row not due, one no longer CREATING and one not listed are not leased');
SELECT is((SELECT count(*)::integer FROM extsvc.dpf_extension_service_reconciliations r JOIN v0 USING (service_id)
            WHERE r.state_version <> v0.state_version), 0, 'no state_version changes');
SELECT is((SELECT count(*)::integer FROM extsvc._hand_over_creates('w-ho', ARRAY[:S1]::uuid[], 60, 7999)), 0,
          'handed over once: the second call finds the row leased');

-- the size limit: a work document longer than it is neither leased nor returned
SELECT is((SELECT count(*)::integer FROM extsvc._hand_over_creates('w-ho', ARRAY[:S5]::uuid[], 60, 10)), 0,
          'a work document over p_max_bytes is not handed over');
SELECT is((SELECT lease_owner FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :S5), NULL,
          'and its row is not leased: a worker claims it');

-- for the owner only
SELECT is(pg_temp.diag_as('extsvc_tap_ho_api', format($$SELECT * FROM extsvc._hand_over_creates('x', ARRAY[%L]::uuid[], 60, 7999)$$, :S5), 'sqlstate'),
          '42501', 'extsvc_api may not hand over');
SELECT is(pg_temp.diag_as('extsvc_tap_ho_admin', format($$SELECT * FROM extsvc._hand_over_creates('x', ARRAY[%L]::uuid[], 60, 7999)$$, :S5), 'sqlstate'),
          '42501', 'extsvc_admin may not hand over');
SELECT is(pg_temp.diag_as('extsvc_tap_ho_api', format($$SELECT extsvc._hand_over(%L)$$, :S5), 'sqlstate'),
          '42501', 'extsvc_api may not call extsvc._hand_over directly');

SELECT * FROM finish();
ROLLBACK;
