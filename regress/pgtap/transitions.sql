-- SPEC 2.5: every row of extsvc.lifecycle_transitions is accepted by the
-- trigger and recorded in the history with its actor and reason; any other
-- change is refused with SQLSTATE 55000 and leaves no history.
BEGIN;
\ir helpers.psql
SELECT plan((SELECT count(*)::integer FROM extsvc.lifecycle_transitions) * 2 + 17);

-- A DPF service row placed directly in state p_state (triggers bypassed
-- with session_replication_role, so any starting state can be set up).
CREATE FUNCTION pg_temp.service_in(p_state text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
  v_id uuid := gen_random_uuid();
BEGIN
  SET LOCAL session_replication_role = replica;
  INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type,
      dpu_target, lifecycle_state, state_actor, state_reason, attachable_version, desired_revision,
      applied_revision, dpf_service_name, placement_label_key, deleted_at)
  VALUES (v_id, 'tenant-t', 'svc-' || v_id, 'DPF_HELM_CHART', 'ALL', p_state, 'api', 'setup', 'V1-T1', 1,
      CASE WHEN p_state IN ('READY', 'UPDATING', 'DELETING') THEN 1 END,
      extsvc._dpf_service_name(v_id, 'V1-T1'), extsvc._placement_label_key(v_id, 'V1-T1'),
      CASE WHEN p_state = 'DELETED' THEN now() END);
  SET LOCAL session_replication_role = origin;
  RETURN v_id;
END $$;

-- Drives one transition through the trigger; returns the history row it
-- left ('from>to/actor/reason') or the error.
CREATE FUNCTION pg_temp.drive(p_from text, p_to text, p_actor text, p_reason text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id uuid;
  v_hist text;
BEGIN
  IF p_from IS NULL THEN
    v_id := gen_random_uuid();
    -- (a service created DELETED: imported from NICo already deleted)
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type,
        dpu_target, lifecycle_state, state_actor, state_reason, attachable_version, desired_revision,
        dpf_service_name, placement_label_key, deleted_at)
    VALUES (v_id, 'tenant-t', 'svc-' || v_id, 'DPF_HELM_CHART', 'ALL', p_to, p_actor, p_reason, 'V1-T1', 1,
        extsvc._dpf_service_name(v_id, 'V1-T1'), extsvc._placement_label_key(v_id, 'V1-T1'),
        CASE WHEN p_to = 'DELETED' THEN now() END);
  ELSIF p_from = p_to THEN
    -- same-state events go through extsvc._record_event
    v_id := pg_temp.service_in(p_from);
    PERFORM extsvc._record_event(v_id, p_from, p_actor, p_reason, 'test event', 1);
  ELSE
    v_id := pg_temp.service_in(p_from);
    UPDATE extsvc.service_records
       SET lifecycle_state = p_to, state_actor = p_actor, state_reason = p_reason,
           deleted_at = CASE WHEN p_to = 'DELETED' THEN now() END
     WHERE service_id = v_id;
  END IF;
  SELECT string_agg(format('%s>%s/%s/%s', coalesce(h.from_state, '(new)'), h.to_state, h.actor, h.reason), ', ')
    INTO v_hist FROM extsvc.service_state_history h WHERE h.service_id = v_id;
  RETURN v_hist;
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- every allowed row is accepted and recorded exactly once, with actor and reason
SELECT is(pg_temp.drive(from_state, to_state, actor, reason),
          format('%s>%s/%s/%s', coalesce(from_state, '(new)'), to_state, actor, reason),
          format('allowed: %s -> %s by %s (%s)', coalesce(from_state, '(new)'), to_state, actor, reason))
  FROM extsvc.lifecycle_transitions ORDER BY from_state NULLS FIRST, to_state, actor, reason;

-- and the history row carries the state the row is in afterwards
SELECT ok(h.at IS NOT NULL AND h.actor = t.actor AND h.reason = t.reason
          AND (t.from_state IS NULL OR s.lifecycle_state = t.to_state),
          format('history and state after %s -> %s (%s)', coalesce(t.from_state, '(new)'), t.to_state, t.reason))
  FROM extsvc.lifecycle_transitions t
  JOIN LATERAL (SELECT * FROM extsvc.service_state_history h
                 WHERE h.from_state IS NOT DISTINCT FROM t.from_state AND h.to_state = t.to_state
                   AND h.actor = t.actor AND h.reason = t.reason ORDER BY h.id DESC LIMIT 1) h ON true
  JOIN extsvc.service_records s ON s.service_id = h.service_id
 ORDER BY t.from_state NULLS FIRST, t.to_state, t.actor, t.reason;

-- refused changes: SQLSTATE 55000; the row keeps its state and gets no history
CREATE FUNCTION pg_temp.refuse(p_from text, p_to text, p_actor text, p_reason text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id uuid;
  v_err text := 'accepted';
  v_state text;
  v_hist integer;
BEGIN
  IF p_from IS NOT NULL THEN
    v_id := pg_temp.service_in(p_from);
  ELSE
    v_id := gen_random_uuid();
  END IF;
  BEGIN
    IF p_from IS NULL THEN
      INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type,
          dpu_target, lifecycle_state, state_actor, state_reason, attachable_version, desired_revision,
          dpf_service_name, placement_label_key)
      VALUES (v_id, 'tenant-t', 'svc-' || v_id, 'DPF_HELM_CHART', 'ALL', p_to, p_actor, p_reason, 'V1-T1', 1,
          extsvc._dpf_service_name(v_id, 'V1-T1'), extsvc._placement_label_key(v_id, 'V1-T1'));
    ELSIF p_from = p_to THEN
      PERFORM extsvc._record_event(v_id, p_from, p_actor, p_reason);
    ELSE
      UPDATE extsvc.service_records
         SET lifecycle_state = p_to, state_actor = p_actor, state_reason = p_reason,
             deleted_at = CASE WHEN p_to = 'DELETED' THEN now() END
       WHERE service_id = v_id;
    END IF;
  EXCEPTION WHEN OTHERS THEN
    v_err := SQLSTATE;
  END;
  SELECT lifecycle_state INTO v_state FROM extsvc.service_records WHERE service_id = v_id;
  SELECT count(*) INTO v_hist FROM extsvc.service_state_history WHERE service_id = v_id;
  RETURN format('%s, state %s, %s history rows', v_err, coalesce(v_state, '(none)'), v_hist);
END $$;

CREATE TEMP TABLE refused (from_state text, to_state text, actor text, reason text);
INSERT INTO refused VALUES
  ('DELETED',  'READY',    'worker', 'dpuservice_created'),   -- DELETED is final
  ('DELETED',  'DELETING', 'api',    'delete'),
  ('CREATING', 'UPDATING', 'api',    'update'),               -- an update while CREATING supersedes
  ('READY',    'DELETED',  'worker', 'dpuservice_deleted'),   -- a DPF delete goes through DELETING
  ('CREATING', 'READY',    'api',    'dpuservice_created'),   -- right reason, wrong actor
  ('CREATING', 'READY',    'worker', 'looks_fine'),           -- right actor, unknown reason
  ('DELETING', 'READY',    'worker', 'revision_applied'),     -- a stale worker cannot resurrect
  ('FAILED',   'READY',    'worker', 'dpuservice_created'),
  (NULL,       'UPDATING', 'api',    'create'),               -- creation only as CREATING or READY
  ('READY',    'READY',    'worker', 'superseded');           -- an event not allowed in that state
SELECT is(pg_temp.refuse(from_state, to_state, actor, reason),
          format('55000, state %s, 0 history rows', coalesce(from_state, '(none)')),
          format('refused: %s -> %s by %s (%s)', coalesce(from_state, '(new)'), to_state, actor, reason))
  FROM refused;

-- the refusal names the change and points at the table
SELECT throws_ok(format($$UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker',
                            state_reason = 'dpuservice_created', deleted_at = NULL WHERE service_id = %L$$,
                        pg_temp.service_in('DELETED')),
                 '55000', 'lifecycle transition DELETED -> READY by worker (dpuservice_created) is not allowed',
                 'DELETED -> READY refused with its message');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history h
            JOIN refused r ON h.from_state IS NOT DISTINCT FROM r.from_state AND h.to_state = r.to_state
             AND h.actor = r.actor AND h.reason = r.reason), 0, 'no history row anywhere for a refused change');

-- a same-state UPDATE (e.g. a message change) is no transition and records nothing
SELECT lives_ok(format($$UPDATE extsvc.service_records SET status_message = 'x', state_reason = 'anything'
                          WHERE service_id = %L$$, pg_temp.service_in('READY')),
                'same-state update passes the trigger');
SELECT is((SELECT count(*)::integer FROM extsvc.service_state_history h JOIN extsvc.service_records s USING (service_id)
            WHERE s.status_message = 'x'), 0, 'same-state update records no history');

-- through the API: updates of DELETING/DELETED services are refused
SELECT throws_ok(format('SELECT extsvc.update_service(%L, description => %L)', pg_temp.service_in('DELETED'), 'x'),
                 '55000', NULL, 'update of a DELETED service refused');
SELECT throws_ok(format('SELECT extsvc.update_service(%L, description => %L)', pg_temp.service_in('DELETING'), 'x'),
                 '55000', NULL, 'update of a DELETING service refused');
SELECT throws_ok(format('SELECT extsvc.retry_service(%L)', pg_temp.service_in('READY')),
                 '55000', NULL, 'retry of a READY service refused');

SELECT * FROM finish();
ROLLBACK;
