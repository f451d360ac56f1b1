-- Issue #12: service_revisions, rollback_service, retry_service for
-- extsvc_api, purge_deleted (what it keeps for audit) and abandon_service
-- (a delete blocked by a foreign object), their grants and SQLSTATEs.
BEGIN;
\ir helpers.psql
SELECT plan(74);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set c1 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set c2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.1","security":{"privileged":false}}'
\set c3 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.2","security":{"privileged":false}}'
\set D '''6a000000-0000-0000-0000-000000000001'''
\set K '''6a000000-0000-0000-0000-000000000002'''
\set S '''6a000000-0000-0000-0000-000000000003'''
\set X '''6a000000-0000-0000-0000-000000000004'''
\set G '''6a000000-0000-0000-0000-000000000005'''
\set O '''6a000000-0000-0000-0000-000000000006'''
\set Y '''6a000000-0000-0000-0000-000000000007'''
\set U '''6a000000-0000-0000-0000-0000000000ff'''

-- the worker's side: a lifecycle change with its reason
CREATE FUNCTION pg_temp.worker(id uuid, state text, reason text) RETURNS void LANGUAGE sql AS $$
  UPDATE extsvc.service_records SET lifecycle_state = state, state_actor = 'worker', state_reason = reason,
         applied_revision = CASE WHEN state = 'READY' THEN desired_revision ELSE applied_revision END,
         deleted_at = CASE WHEN state = 'DELETED' THEN now() END
   WHERE service_id = id
$$;

CREATE ROLE extsvc_tap_rev_nobody LOGIN;
CREATE ROLE extsvc_tap_rev_tenant LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_rev_operator LOGIN IN ROLE extsvc_admin;

------------------------------------------------------------------ grants
CREATE TEMP TABLE fns (fn text, args text[], admin_only boolean);
INSERT INTO fns VALUES
  ('service_revisions', ARRAY['uuid', 'text'], false),
  ('rollback_service', ARRAY['uuid', 'bigint', 'bigint', 'text'], false),
  ('retry_service', ARRAY['uuid', 'text'], false),
  ('purge_deleted', ARRAY['interval'], true),
  ('abandon_service', ARRAY['uuid'], true);
SELECT function_privs_are('extsvc', fn, args, 'extsvc_api', CASE WHEN admin_only THEN ARRAY[]::text[] ELSE ARRAY['EXECUTE'] END,
                          'extsvc_api ' || CASE WHEN admin_only THEN 'may not' ELSE 'may' END || ' execute extsvc.' || fn)
  FROM fns ORDER BY fn;
SELECT function_privs_are('extsvc', fn, args, 'extsvc_admin', ARRAY['EXECUTE'], 'extsvc_admin may execute extsvc.' || fn)
  FROM fns ORDER BY fn;
SELECT function_privs_are('extsvc', fn, args, 'extsvc_tap_rev_nobody', ARRAY[]::text[], 'a role without grants may not execute extsvc.' || fn)
  FROM fns ORDER BY fn;
SELECT is(ARRAY(SELECT fn FROM fns JOIN pg_proc p ON p.oid = format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure
                 WHERE obj_description(p.oid, 'pg_proc') IS NULL
                    OR NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpg_temp$')
                 ORDER BY fn),
          ARRAY[]::text[], 'every new function is commented and pins search_path with pg_temp last');
SELECT is(ARRAY(SELECT fn FROM fns JOIN pg_proc p ON p.oid = format('extsvc.%I(%s)', fn, array_to_string(args, ','))::regprocedure
                 WHERE NOT p.prosecdef ORDER BY fn),
          ARRAY['retry_service', 'rollback_service'],
          'rollback_service and retry_service are role-dependent SECURITY INVOKER entries; the rest SECURITY DEFINER');

------------------------------------------------------------------ fixtures
SELECT extsvc.create_service('rev-t', 'rev-dpf', 'DPF_HELM_CHART', :'c1', dpu_target => 'PRIMARY', service_id => :D);
SELECT pg_temp.worker(:D, 'READY', 'dpuservice_created');
SELECT extsvc.update_service(:D, :'c2');
SELECT pg_temp.worker(:D, 'READY', 'revision_applied');
SELECT extsvc.update_service(:D, :'c3');
SELECT extsvc.create_service('rev-t', 'rev-pod', 'KUBERNETES_POD', 'kind: Pod', service_id => :K);
SELECT extsvc.create_service('rev-t', 'rev-site', 'DPF_HELM_CHART', :'c1', deployment_scope => 'ALL_DPUS', service_id => :S);
SELECT extsvc.create_service('rev-other', 'rev-foreign', 'DPF_HELM_CHART', :'c1', dpu_target => 'ALL', service_id => :O);

------------------------------------------------------------------ service_revisions
SELECT is(ARRAY(SELECT revision FROM extsvc.service_revisions(:D)), ARRAY[3, 2, 1], 'service_revisions: newest first');
SELECT is(ARRAY(SELECT revision FROM extsvc.service_revisions(:D) WHERE is_desired), ARRAY[3], 'service_revisions: is_desired');
SELECT is(ARRAY(SELECT revision FROM extsvc.service_revisions(:D) WHERE is_applied), ARRAY[2], 'service_revisions: is_applied');
SELECT is((SELECT data::jsonb FROM extsvc.service_revisions(:D) WHERE revision = 1), extsvc.validate_dpf_helm_chart_data(:'c1'),
          'service_revisions: the normalized definition');
SELECT is((SELECT created_by FROM extsvc.service_revisions(:D) WHERE revision = 2), session_user::text,
          'service_revisions: created_by');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.service_revisions(%L)', :K)),
          '22023 | service_id: 6a000000-0000-0000-0000-000000000002, service_type: KUBERNETES_POD',
          'service_revisions: a KUBERNETES_POD service -> 22023');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_revisions(%L)', :U)), 5), 'P0002', 'service_revisions: unknown -> P0002');
SELECT is(left(pg_temp.err(format('SELECT * FROM extsvc.service_revisions(%L, %L)', :O, 'rev-t')), 5), '42501',
          'service_revisions: another tenant''s service -> 42501');

------------------------------------------------------------------ rollback_service
SELECT is(pg_temp.err(format('SELECT extsvc.rollback_service(%L, 1, 7)', :D)),
          '55000 | if_version_ctr_match: 7, version_ctr: 3', 'rollback_service: version_ctr mismatch -> 55000');
SELECT is(pg_temp.err(format('SELECT extsvc.rollback_service(%L, 9)', :D)),
          'P0002 | service_id: 6a000000-0000-0000-0000-000000000001, revision: 9', 'rollback_service: unknown revision -> P0002');
SELECT is(left(pg_temp.err(format('SELECT extsvc.rollback_service(%L, 1)', :U)), 5), 'P0002', 'rollback_service: unknown service -> P0002');
SELECT is(left(pg_temp.err(format('SELECT extsvc.rollback_service(%L, 1)', :K)), 5), '22023', 'rollback_service: KUBERNETES_POD -> 22023');
SELECT is(left(pg_temp.err(format('SELECT extsvc.rollback_service(%L, 1, NULL, %L)', :O, 'rev-t')), 5), '42501',
          'rollback_service: another tenant''s service -> 42501');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.rollback_service(%L, 1, 3, %L)', :D, 'rev-t')),
          'ok', 'rollback_service: an extsvc_api member rolls back to revision 1');
SELECT is((SELECT row(desired_revision, version_ctr, lifecycle_state)::text FROM extsvc.services WHERE service_id = :D),
          row(4, 4, 'UPDATING')::text, 'rollback_service: a new revision 4 through the update path');
SELECT is((SELECT data::jsonb FROM extsvc.service_revisions(:D) WHERE revision = 4),
          (SELECT data::jsonb FROM extsvc.service_revisions(:D) WHERE revision = 1), 'rollback_service: revision 4 equals revision 1');
SELECT is((SELECT rollback_of FROM extsvc.service_revisions(:D) WHERE revision = 4), 1, 'rollback_service: rollback_of = 1');
SELECT is((SELECT created_by FROM extsvc.service_revisions(:D) WHERE revision = 4), 'extsvc_tap_rev_tenant',
          'rollback_service: the revision records the caller');
SELECT is((SELECT status_message FROM extsvc.services WHERE service_id = :D),
          'rollback to revision 1: waiting for the worker to apply revision 4', 'rollback_service: status_message');
SELECT is((SELECT superseded_at IS NOT NULL FROM extsvc.helm_revisions WHERE service_id = :D AND revision = 3), true,
          'rollback_service: the pending revision 3 is superseded');
SELECT is((extsvc.rollback_service(:D, 1)).desired_revision, 4, 'rollback_service: to the current definition is a no-op');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.rollback_service(%L, 1)', :S)),
          '42501: only extsvc_admin members may update ALL_DPUS services', 'rollback_service: ALL_DPUS needs extsvc_admin');

------------------------------------------------------------------ retry_service
SELECT is(pg_temp.err(format('SELECT extsvc.retry_service(%L)', :D)), '55000 | lifecycle_state: UPDATING',
          'retry_service: not FAILED -> 55000');
SELECT is(left(pg_temp.err(format('SELECT extsvc.retry_service(%L)', :U)), 5), 'P0002', 'retry_service: unknown -> P0002');
SELECT pg_temp.worker(:D, 'FAILED', 'permanent_error');
SELECT is(left(pg_temp.err(format('SELECT extsvc.retry_service(%L, %L)', :D, 'rev-other')), 5), '42501',
          'retry_service: another tenant -> 42501');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.retry_service(%L, %L)', :D, 'rev-t')),
          'ok', 'retry_service: an extsvc_api member retries a FAILED service');
SELECT is((SELECT row(lifecycle_state, status_message, desired_revision)::text FROM extsvc.services WHERE service_id = :D),
          row('UPDATING', 'retry requested', 4)::text, 'retry_service: UPDATING, same desired revision');
SELECT is((SELECT row(actor, reason)::text FROM extsvc.service_history WHERE service_id = :D ORDER BY id DESC LIMIT 1),
          row('api', 'retry')::text, 'retry_service: recorded in the history');
SELECT ok((SELECT next_due_at <= now() FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :D),
          'retry_service: the work is due');
SELECT pg_temp.worker(:S, 'FAILED', 'permanent_error');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.retry_service(%L)', :S)),
          '42501: only extsvc_admin members may retry ALL_DPUS services', 'retry_service: ALL_DPUS needs extsvc_admin');
SELECT is(pg_temp.as_user('extsvc_tap_rev_operator', format('SELECT extsvc.retry_service(%L)', :S)),
          'ok', 'retry_service: extsvc_admin retries an ALL_DPUS service');
SELECT is((SELECT row(lifecycle_state, status_message)::text FROM extsvc.services WHERE service_id = :S),
          row('CREATING', 'retry requested by an operator')::text, 'retry_service: never created -> CREATING');

-- issue #13 (test/model/model_sql.py seed 1929): an update after a failed delete
-- replaces the delete; a retry of the update's failure retries the update
SELECT extsvc.create_service('rev-t', 'rev-undelete', 'DPF_HELM_CHART', :'c1', dpu_target => 'ALL', service_id => :Y);
SELECT pg_temp.worker(:Y, 'READY', 'dpuservice_created');
SELECT extsvc.delete_service(:Y);
SELECT pg_temp.worker(:Y, 'FAILED', 'permanent_error');
SELECT is((SELECT lifecycle_state FROM extsvc.update_service(:Y, :'c2')), 'UPDATING',
          'update_service of a service whose delete failed: UPDATING');
SELECT is((SELECT delete_requested_at FROM extsvc.service_records WHERE service_id = :Y), NULL,
          'update_service: the failed delete is no longer requested');
SELECT pg_temp.worker(:Y, 'FAILED', 'permanent_error');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.retry_service(%L)', :Y)), 'ok',
          'retry_service after the update failed');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :Y), 'UPDATING',
          'retry_service: the failed update is retried (UPDATING), not the earlier delete');

------------------------------------------------------------------ abandon_service
SELECT extsvc.create_service('rev-t', 'rev-conflict', 'DPF_HELM_CHART', :'c1', dpu_target => 'ALL', service_id => :X);
SELECT pg_temp.worker(:X, 'READY', 'dpuservice_created');
SELECT extsvc.delete_service(:X);
SELECT pg_temp.worker(:X, 'FAILED', 'permanent_error');
SELECT is(pg_temp.err(format('SELECT extsvc.abandon_service(%L)', :X)),
          '55000 | service_id: 6a000000-0000-0000-0000-000000000004, lifecycle_state: FAILED, last failure: DELETING -> FAILED (permanent_error)',
          'abandon_service: a delete refused by the API is not abandoned (55000)');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.retry_service(%L)', :X)), 'ok',
          'retry_service: a failed delete is retried');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :X), 'DELETING', 'retry_service: a failed delete goes DELETING');
SELECT pg_temp.worker(:X, 'FAILED', 'ownership_conflict');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', format('SELECT extsvc.abandon_service(%L)', :X)),
          '42501: permission denied for function abandon_service', 'abandon_service: not for extsvc_api');
SELECT is(pg_temp.as_user('extsvc_tap_rev_operator', format('SELECT extsvc.abandon_service(%L)', :X)), 'ok',
          'abandon_service: an operator abandons a delete blocked by an ownership conflict');
SELECT is((SELECT row(lifecycle_state, deleted_at IS NOT NULL)::text FROM extsvc.services WHERE service_id = :X),
          row('DELETED', true)::text, 'abandon_service: DELETED');
SELECT is((SELECT row(from_state, to_state, actor, reason)::text FROM extsvc.service_history WHERE service_id = :X ORDER BY id DESC LIMIT 1),
          row('FAILED', 'DELETED', 'api', 'abandoned')::text, 'abandon_service: recorded in the history');
SELECT matches((SELECT message FROM extsvc.service_history WHERE service_id = :X ORDER BY id DESC LIMIT 1),
               '^delete abandoned by extsvc_tap_rev_operator: the object named extsvc-[a-z2-7]{20} belongs to someone else and was left alone$',
               'abandon_service: the history names who abandoned it and the object left alone');
SELECT ok((SELECT next_due_at IS NULL AND lease_token IS NULL FROM extsvc.dpf_extension_service_reconciliations WHERE service_id = :X),
          'abandon_service: no work left (the worker never touches the foreign object)');
SELECT is(left(pg_temp.err(format('SELECT extsvc.abandon_service(%L)', :X)), 5), '55000', 'abandon_service: a DELETED service -> 55000');
SELECT is(left(pg_temp.err(format('SELECT extsvc.abandon_service(%L)', :U)), 5), 'P0002', 'abandon_service: unknown -> P0002');

------------------------------------------------------------------ purge_deleted
SELECT extsvc.create_service('rev-t', 'rev-gone', 'DPF_HELM_CHART', :'c1', dpu_target => 'ALL', service_id => :G);
SELECT extsvc.delete_service(:G);
SELECT pg_temp.worker(:G, 'DELETED', 'dpuservice_deleted');
SELECT is(left(pg_temp.err('SELECT * FROM extsvc.purge_deleted(interval ''-1 day'')'), 5), '22023', 'purge_deleted: a negative interval -> 22023');
SELECT is(pg_temp.as_user('extsvc_tap_rev_tenant', 'SELECT * FROM extsvc.purge_deleted(interval ''0'')'),
          '42501: permission denied for function purge_deleted', 'purge_deleted: not for extsvc_api');
SELECT is((SELECT count(*)::int FROM extsvc.purge_deleted(interval '1 day')), 0, 'purge_deleted: nothing DELETED a day ago');
CREATE TEMP TABLE hist AS SELECT id, service_id FROM extsvc.service_state_history WHERE service_id IN (:G, :X);
SELECT is(ARRAY(SELECT service_name FROM extsvc.purge_deleted(interval '0') ORDER BY 1), ARRAY['rev-conflict', 'rev-gone'],
          'purge_deleted: returns the purged services');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.service_records WHERE service_id IN (:G, :X)), 'purge_deleted: the services are gone');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.helm_revisions WHERE service_id IN (:G, :X))
          AND NOT EXISTS (SELECT FROM extsvc.service_versions WHERE service_id IN (:G, :X))
          AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_reconciliations WHERE service_id IN (:G, :X)),
          'purge_deleted: versions, revisions and work rows are gone');
SELECT is((SELECT array_agg(final_reason ORDER BY service_name) FROM extsvc.purged_services WHERE service_id IN (:G, :X)),
          ARRAY['abandoned', 'dpuservice_deleted'], 'purge_deleted: an audit row per service with its final reason');
SELECT is((SELECT array_agg(id ORDER BY id) FROM extsvc.purged_service_history), (SELECT array_agg(id ORDER BY id) FROM hist),
          'purge_deleted: every history row is kept in purged_service_history');
SELECT ok((SELECT jsonb_array_length(revisions) = 1 AND NOT (revisions->0 ? 'data') AND purged_by = session_user
             FROM extsvc.purged_services WHERE service_id = :G),
          'purge_deleted: revision metadata without definitions, and who purged');
SELECT ok(EXISTS (SELECT FROM extsvc.service_records WHERE service_id = :D), 'purge_deleted: live services stay');

SELECT * FROM finish();
ROLLBACK;
