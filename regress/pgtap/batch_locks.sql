-- Issue 26, part 3: what extsvc.lock_placement holds for the calls of its
-- batch (extsvc._placement_held): a covered host has at least one DPU work
-- row locked; an instance is held when lock_placement locked it or
-- upsert_instance wrote it on a covered host; the note is this
-- transaction's own (a session-wide or another transaction's value never
-- covers anything); a batch still ends with the rows and history an
-- unbatched call writes; and an attach in a savepoint makes its DPU due
-- once, while an old or frozen xmin is never taken for this transaction's.
BEGIN;
\ir helpers.psql
SELECT plan(20);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set H1 '''fm100hs7e00000000000000000000000000000100000000000000000000'''
\set H2 '''fm100hs7e00000000000000000000000000000200000000000000000000'''
\set H3 '''fm100hs7e00000000000000000000000000000300000000000000000000'''
\set D1 '''fm100ds7f00000000000000000000000000000100000000000000000000'''
\set D2 '''fm100ds7f00000000000000000000000000000200000000000000000000'''
\set S '''7b000000-0000-0000-0000-000000000001'''
\set I1 '''7c000000-0000-0000-0000-000000000001'''
\set I2 '''7c000000-0000-0000-0000-000000000002'''
\set I3 '''7c000000-0000-0000-0000-000000000003'''
\set I4 '''7c000000-0000-0000-0000-000000000004'''
\set H4 '''fm100hs7e00000000000000000000000000000400000000000000000000'''
\set D4 '''fm100ds7f00000000000000000000000000000400000000000000000000'''

CREATE FUNCTION pg_temp.cfg(id uuid) RETURNS jsonb LANGUAGE sql AS $$
  SELECT jsonb_build_array(jsonb_build_object('service_id', s.service_id, 'version', s.version))
    FROM extsvc.services s WHERE s.service_id = id
$$;

-- H1 and H2 have a DPU each, H3 none; I1 exists on H1 before the batch
\o /dev/null
SELECT extsvc.register_dpu(:D1, :H1, 'bl-dpu-1', 'bl-node-1', true);
SELECT extsvc.register_dpu(:D2, :H2, 'bl-dpu-2', 'bl-node-2', true);
SELECT extsvc.register_dpu(:D4, :H4, 'bl-dpu-4', 'bl-node-4', true);
SELECT extsvc.create_service('bl', 'bl-dpf', 'dpf_helm_chart', :'chart', dpu_target => 'primary', service_id => :S);
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision WHERE service_id = :S;
SELECT extsvc.upsert_instance(:I1, 'bl', :H1);
\o

SELECT ok(NOT extsvc._placement_held(:H1, :I1), 'nothing is held before lock_placement');
SELECT lives_ok(format($$SELECT extsvc.lock_placement(ARRAY[%L, %L, %L], ARRAY[%L, %L, %L]::uuid[], ARRAY[%L]::uuid[], 'bl')$$,
                       :H1, :H2, :H3, :I1, :I2, :I3, :S), 'lock_placement of three hosts and three instance ids');
SELECT ok(extsvc._placement_held(:H1, :I1), 'an existing instance lock_placement locked, on a host with a DPU: held');
SELECT ok(NOT extsvc._placement_held(:H2, :I2), 'an instance id that did not exist: not held');
SELECT ok(extsvc._placement_held(:H2, :I2, true), '... but its advisory lock was taken (p_noted)');
SELECT ok(NOT extsvc._placement_held(:H3, :I3, true), 'a host without DPUs is not covered (its first DPU would not wait)');
SELECT ok(NOT extsvc._placement_held(:H1, 'ffffffff-0000-0000-0000-000000000000', true),
          'an instance id lock_placement was not given: not covered');

SELECT extsvc.upsert_instance(:I2, 'bl', :H2);
SELECT ok(extsvc._placement_held(:H2, :I2), 'upsert_instance on a covered host: the instance is held now');
SELECT extsvc.upsert_instance(:I3, 'bl', :H3);
SELECT ok(NOT extsvc._placement_held(:H3, :I3), 'upsert_instance on a host without DPUs: not held');

-- a savepoint rolled back takes what it noted with it, as it takes its rows
SAVEPOINT s1;
\o /dev/null
SELECT set_config('nico_extsvc.placement_locked', 'garbage', true);
\o
ROLLBACK TO SAVEPOINT s1;
SELECT ok(extsvc._placement_held(:H2, :I2), 'a savepoint rolled back: the note as before it');

-- the batch writes what unbatched calls write: the attachment rows and their history
SELECT is(extsvc.set_instance_extension_services(:I1, pg_temp.cfg(:S)), 2, 'set_instance_extension_services of a held instance');
SELECT is(extsvc.set_instance_extension_services(:I2, pg_temp.cfg(:S)), 2, '... of an instance the batch inserted');
SELECT is((SELECT array_agg(dpu_machine_id || '/' || placement_state ORDER BY dpu_machine_id)
             FROM extsvc.dpf_extension_service_attachments WHERE instance_id IN (:I1, :I2)),
          ARRAY[:D1 || '/ACTIVE', :D2 || '/ACTIVE'], 'both attachment rows, ACTIVE on their DPUs');
SELECT is((SELECT count(*)::int FROM extsvc.dpu_state_history WHERE instance_id IN (:I1, :I2)), 4,
          'two history rows each (placement, deployment)');

-- a handler run in a savepoint: its subtransaction's rows carry their own
-- xid, and the final pass of set_instance_extension_services still knows
-- the work row its attachment made due (one update, not two)
SAVEPOINT s2;
SELECT n_tup_upd AS upd_before FROM pg_stat_xact_user_tables WHERE relid = 'extsvc.dpu_reconciliations'::regclass \gset
\o /dev/null
SELECT extsvc.upsert_instance(:I4, 'bl', :H4);
SELECT extsvc.set_instance_extension_services(:I4, pg_temp.cfg(:S));
\o
SELECT is((SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'extsvc.dpu_reconciliations'::regclass)
          - :upd_before, 1::bigint, 'an attach inside a savepoint updates its DPU''s work row once');
RELEASE SAVEPOINT s2;
-- xmin is 32 bits: a frozen row's, or an old one that reads as later after the counter
-- wrapped, is not this transaction's and raises nothing (pg_xact_status refuses the future)
SELECT ok(NOT extsvc._written_by_this_transaction('2'::xid), 'a frozen xmin is not this transaction''s');
SELECT ok(NOT extsvc._written_by_this_transaction(
            ((pg_current_xact_id()::xid::text::bigint + 1000000) % 4294967296)::text::xid),
          'an xmin that reads as a million xids later is not this transaction''s, and raises nothing');
SELECT ok(extsvc._written_by_this_transaction(pg_current_xact_id()::xid), 'the top level''s own xid is');

-- the note is this transaction's: another transaction id, or a value of any other shape, covers nothing
\o /dev/null
SELECT set_config('nico_extsvc.placement_locked',
                  array_to_string(ARRAY['1', ARRAY[:H1]::text, ARRAY[:I1]::uuid[]::text, ARRAY[:I1]::uuid[]::text], '|'), true);
\o
SELECT ok(NOT extsvc._placement_held(:H1, :I1), 'a note under another transaction id covers nothing');
\o /dev/null
SELECT set_config('nico_extsvc.placement_locked', 'garbage', true);
\o
SELECT ok(NOT extsvc._placement_held(:H1, :I1), 'a value of another shape covers nothing and raises nothing');

SELECT * FROM finish();
ROLLBACK;
