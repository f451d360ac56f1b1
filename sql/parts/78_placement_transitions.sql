-- Transition tables of the per-DPU state machines (SPEC 2.5, 2.7, 2.8),
-- enforced by triggers exactly like extsvc.lifecycle_transitions:
--   placement        extsvc.dpf_extension_service_attachments.placement_state
--                    (ACTIVE, REMOVING; from NULL = row created, to NULL = row removed)
--   deployment       extsvc.dpf_extension_service_attachments.deployment_state
--   site_deployment  extsvc.site_service_dpu_status.deployment_state (ALL_DPUS)
-- The writers (API functions, the worker's extsvc.complete) do
-- not pass a reason: the trigger derives it from the change and the rows it
-- depends on (the evidence rules of SPEC 2.8), and the actor from the
-- function that runs (nico_extsvc.actor, set on the worker's entry points).
-- docs/placement.md's state tables are generated from this table
-- (tools/lifecycle_doc.py --write DB placement) and checked by the tests.

CREATE TABLE extsvc.placement_transitions (
  machine     extsvc.placement_machine NOT NULL,
  from_state  text,   -- NULL: the row is created
  to_state    text,   -- NULL: the row is removed
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  description text NOT NULL,
  CONSTRAINT placement_transition_states CHECK (
    CASE WHEN machine = 'placement'
         THEN (from_state::extsvc.placement_state, to_state::extsvc.placement_state) IS NOT DISTINCT FROM (from_state, to_state)
         ELSE (from_state::extsvc.deployment_state, to_state::extsvc.deployment_state) IS NOT DISTINCT FROM (from_state, to_state) END),
  CONSTRAINT placement_transition_moves CHECK (from_state IS DISTINCT FROM to_state),
  UNIQUE NULLS NOT DISTINCT (machine, from_state, to_state, actor, reason)
);
COMMENT ON TABLE extsvc.placement_transitions IS
  'Every allowed change of an attachment''s placement_state and of a per-DPU deployment_state (attachments and ALL_DPUS rows), with actor and reason; triggers refuse any other.';

-- placement_state of an attachment row
INSERT INTO extsvc.placement_transitions (machine, from_state, to_state, actor, reason, description) VALUES
  ('placement', NULL,       'ACTIVE',   'api', 'targeted',         'the DPU is in the target set of an active entry of a live instance (attach, network change, DPU registered or made primary): its label becomes wanted'),
  ('placement', NULL,       'REMOVING', 'api', 'detached',         'a detach writes a REMOVING row on every registered DPU of the host, so a label left outside the last target set is found too'),
  ('placement', NULL,       'REMOVING', 'api', 'instance_deleted', 'instance deletion writes a REMOVING row on every registered DPU of the host'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'detached',         'the entry was removed from the instance''s configuration (it stays as a tombstone)'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'instance_deleted', 'the instance is being deleted'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'dpu_deregistered', 'the DPU was deregistered; its rows are never dropped silently'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'untargeted',       'the DPU left the entry''s target set (network DPUs changed, another DPU became primary)'),
  ('placement', 'REMOVING', 'ACTIVE',   'api', 'retargeted',       'the entry is active again and the DPU back in its target set before the removal finished'),
  ('placement', 'REMOVING', NULL,       'api', 'terminated_observed', 'observed TERMINATED after the removal was requested (the move to REMOVING reset the state to UNKNOWN); cleanup at deletion'),
  ('placement', 'REMOVING', NULL,       'worker', 'terminated_observed', 'observed TERMINATED after the removal was requested (the move to REMOVING reset the state to UNKNOWN)'),
  ('placement', 'REMOVING', NULL,       'api', 'released',         'another active reason (an ACTIVE row of another instance, an ALL_DPUS service) wants the same label on this DPU: the row is released to it'),
  ('placement', 'REMOVING', NULL,       'worker', 'released',      'another active reason (an ACTIVE row of another instance, an ALL_DPUS service) wants the same label on this DPU: the row is released to it');

-- deployment_state: what the API writes when placement changes, what the
-- worker may record from an observation (SPEC 2.8 evidence rules; a worker
-- observation may jump from any state, e.g. RUNNING -> TERMINATED when the
-- pod is already gone when the detach is first observed), and staleness.
INSERT INTO extsvc.placement_transitions (machine, from_state, to_state, actor, reason, description)
SELECT m.machine, nullif(f.s, 'NEW'), nullif(r.to_state, 'REMOVED'), r.actor, r.reason, r.description
  FROM (VALUES
    ('{deployment}'::text[], '{NEW}'::text[], 'PENDING', 'api', 'attached',
     'a row is created ACTIVE: wanted, nothing observed yet'),
    ('{deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,ERROR}', 'UNKNOWN', 'api', 'removal_requested',
     'the row is created or moved REMOVING: an observation made while it was wanted proves nothing about the removal, which must be observed'),
    ('{deployment}', '{RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'api', 'reattached',
     'a REMOVING row becomes ACTIVE again: RUNNING must be observed anew'),
    ('{deployment,site_deployment}', '{NEW,PENDING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'RUNNING', 'worker', 'running_observed',
     'wanted; in one pass: the DPUDevice, DPF''s DPU object (when one exists) and the Node carry the label, the Node is not Ready=Unknown, and a pod on that Node carries the service label (nico/extension-service-id) and the revision annotation equal to the applied revision, phase Running, Ready=True, no deletionTimestamp (DPF''s Ready is context, never proof)'),
    ('{deployment,site_deployment}', '{NEW,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'worker', 'not_running_observed',
     'wanted, but some RUNNING evidence is missing; status_message says which (label, no pod, pod of the previous revision, container waiting such as ImagePullBackOff or CrashLoopBackOff); also when a new revision is applied, since a pod of the previous one proves nothing'),
    ('{deployment}', '{PENDING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'RUNNING', 'worker', 'label_held_by_other',
     'not wanted for this row, but another active reason (an instance taking over, an ALL_DPUS service) keeps the same label on this DPU: the pod seen is theirs; the row is released at cleanup'),
    ('{deployment}', '{RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'worker', 'label_held_by_other',
     'not wanted for this row, but another active reason keeps the same label on this DPU, whose pod is not yet Ready; the row is released at cleanup'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATED,ERROR,UNKNOWN}', 'TERMINATING', 'worker', 'remnant_observed',
     'not wanted, but the label (DPUDevice, DPU object or Node) or any pod of the service (carrying its label, or of the DaemonSet Argo CD applied for it: a chart that drops the label; terminating included) remains on the Node'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,ERROR,UNKNOWN}', 'TERMINATED', 'worker', 'absence_observed',
     'not wanted; in one pass: the label absent on the DPUDevice, the DPU object and the Node (a key still on the DPU object reaches the Node later), no pod of the service on the Node (labelled, or of the DaemonSet Argo CD applied for it), terminating ones included, and the Node not Ready=Unknown (a jump from RUNNING is legal: the pod may be gone before the detach is first observed)'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,ERROR,UNKNOWN}', 'TERMINATED', 'worker', 'dpu_gone',
     'wanted, but the DPU itself is gone (DPUDevice and Node both answer 404), recorded as such; never counts as RUNNING'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,UNKNOWN}', 'ERROR', 'worker', 'non_transient_failure',
     'a non-transient failure (DPUDevice missing, label patch refused): needs a person'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,ERROR}', 'UNKNOWN', 'worker', 'not_observable',
     'the pass could not observe: DPU cluster unreachable or not configured, Node unmapped or stopped reporting (Ready=Unknown), revisions unreadable; never counts as RUNNING or TERMINATED'),
    ('{deployment,site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED}', 'UNKNOWN', 'worker', 'observation_stale',
     'the last observation is older than extsvc.observation_max_age (default 15min): readers already see UNKNOWN, the resync persists it'),
    ('{deployment,site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED}', 'UNKNOWN', 'api', 'observation_stale',
     'the same, persisted by an operator calling extsvc.expire_stale_observations()'),
    ('{site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'REMOVED', 'worker', 'service_deleted',
     'the ALL_DPUS service is DELETED: its per-DPU rows are moot and go at the DPU''s next pass')
  ) r(machines, froms, to_state, actor, reason, description)
  CROSS JOIN LATERAL unnest(r.machines) m(machine)
  CROSS JOIN LATERAL unnest(r.froms) f(s)
 -- the worker never creates attachment rows (only ALL_DPUS rows)
 WHERE NOT (m.machine = 'deployment' AND f.s = 'NEW' AND r.actor = 'worker');

-- The helpers of this file return a plain expression where they can:
-- PL/pgSQL evaluates that on its fast path, while RETURN (SELECT ...)
-- started the executor at every call (per attachment row, per status row).

-- Who is changing the row: 'worker' inside the worker's entry points (they
-- carry SET nico_extsvc.actor = 'worker'; the workers connect as a
-- superuser), 'api' otherwise. A tenant session setting the variable itself
-- stays 'api'.
CREATE FUNCTION extsvc._transition_actor() RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF current_setting('nico_extsvc.actor', true) IS DISTINCT FROM 'worker' THEN
    RETURN 'api';
  END IF;
  RETURN CASE WHEN coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user), false)
              THEN 'worker' ELSE 'api' END;
END
$fn$;
COMMENT ON FUNCTION extsvc._transition_actor() IS
  'Actor of a per-DPU state change: worker inside the worker''s entry points (nico_extsvc.actor), api otherwise.';

-- Staleness bound (SPEC 2.8): extsvc.observation_max_age (15 min by
-- default; read through extsvc._setting, issue 29), but never less than twice
-- extsvc.resync_interval: a converged DPU is observed again only at the
-- resync, so a smaller bound would turn healthy rows UNKNOWN between passes.
CREATE FUNCTION extsvc._observation_max_age() RETURNS interval
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN greatest(coalesce(nullif(extsvc._setting('extsvc.observation_max_age'), '')::interval, interval '15 min'),
                2 * coalesce(nullif(extsvc._setting('extsvc.resync_interval'), '')::interval, interval '5 min'));
END
$fn$;
COMMENT ON FUNCTION extsvc._observation_max_age() IS
  'The staleness bound of per-DPU observations: extsvc.observation_max_age (default 15min), at least twice extsvc.resync_interval.';

-- A state read from an observation older than the bound reads as UNKNOWN.
-- ERROR stays (it needs a person and outranks UNKNOWN anyway); rows never
-- observed (observed_at NULL) keep the state the API gave them.
CREATE FUNCTION extsvc._effective_deployment_state(p_state text, p_observed_at timestamptz) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN CASE WHEN p_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
                 AND p_observed_at < now() - extsvc._observation_max_age()
            THEN 'UNKNOWN' ELSE p_state END;
END
$fn$;
COMMENT ON FUNCTION extsvc._effective_deployment_state(text, timestamptz) IS
  'The deployment_state readers see: UNKNOWN once the observation is older than extsvc.observation_max_age.';

-- A change that keeps an observation older than the bound (nobody looked
-- again): the staleness transition, as opposed to a fresh observation.
CREATE FUNCTION extsvc._went_stale(p_old_observed_at timestamptz, p_new_observed_at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN coalesce(p_new_observed_at IS NOT DISTINCT FROM p_old_observed_at
                AND p_old_observed_at < now() - extsvc._observation_max_age(), false);
END
$fn$;
COMMENT ON FUNCTION extsvc._went_stale(timestamptz, timestamptz) IS
  'True when a state change keeps an observation older than extsvc.observation_max_age (the staleness transition).';

CREATE FUNCTION extsvc._refuse_transition(p_machine text, p_from text, p_to text, p_actor text, p_reason text,
                                          p_row text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.placement_transitions t
                  WHERE t.machine = p_machine AND t.from_state IS NOT DISTINCT FROM p_from
                    AND t.to_state IS NOT DISTINCT FROM p_to AND t.actor = p_actor AND t.reason = p_reason) THEN
    RAISE EXCEPTION '% transition % -> % by % (%) is not allowed', p_machine,
        coalesce(p_from, '(new)'), coalesce(p_to, '(removed)'), p_actor, p_reason
      USING ERRCODE = '55000', CONSTRAINT = p_machine || '_transition',
            DETAIL = format('machine: %s, from: %s, to: %s, actor: %s, reason: %s, %s', p_machine,
                            coalesce(p_from, '(new)'), coalesce(p_to, '(removed)'), p_actor, p_reason, p_row),
            HINT = 'See extsvc.placement_transitions for the allowed changes.';
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._refuse_transition(text, text, text, text, text, text) IS
  'Raises 55000 unless the per-DPU state change is listed in extsvc.placement_transitions.';

-- Reason of a placement change, derived from the instance, its entry and
-- the DPU (the order matters: deletion explains more than a detach).
CREATE FUNCTION extsvc._placement_reason(p_old extsvc.dpf_extension_service_attachments,
                                         p_new extsvc.dpf_extension_service_attachments) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  r extsvc.dpf_extension_service_attachments := CASE WHEN p_new IS NULL THEN p_old ELSE p_new END;
  v_deleting boolean;
  v_entry_active boolean;
  v_deregistered boolean;
BEGIN
  IF p_new IS NULL THEN  -- row removed
    IF p_old.placement_state <> 'REMOVING' THEN
      RETURN 'still_active';
    ELSIF p_old.deployment_state = 'TERMINATED' THEN
      RETURN 'terminated_observed';
    ELSIF EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                   WHERE w.dpu_machine_id = p_old.dpu_machine_id AND w.service_id = p_old.service_id
                     AND w.version = p_old.version) THEN
      RETURN 'released';
    END IF;
    RETURN 'not_terminated';
  END IF;
  SELECT (SELECT i.delete_requested_at IS NOT NULL FROM extsvc.instances i WHERE i.instance_id = r.instance_id),
         (SELECT c.removed_at IS NULL FROM extsvc.instance_extension_services c
           WHERE c.instance_id = r.instance_id AND c.service_id = r.service_id AND c.version = r.version),
         (SELECT d.deregistered_at IS NOT NULL FROM extsvc.dpus d WHERE d.machine_id = r.dpu_machine_id)
    INTO v_deleting, v_entry_active, v_deregistered;
  IF p_new.placement_state = 'ACTIVE' THEN
    IF coalesce(v_deleting, true) OR NOT coalesce(v_entry_active, false) OR coalesce(v_deregistered, true) THEN
      RETURN 'not_targeted';
    END IF;
    RETURN CASE WHEN p_old IS NULL THEN 'targeted' ELSE 'retargeted' END;
  END IF;
  RETURN CASE WHEN coalesce(v_deleting, false) THEN 'instance_deleted'
              WHEN NOT coalesce(v_entry_active, false) THEN 'detached'
              WHEN v_deregistered THEN 'dpu_deregistered'
              ELSE 'untargeted' END;
END
$fn$;
COMMENT ON FUNCTION extsvc._placement_reason(extsvc.dpf_extension_service_attachments, extsvc.dpf_extension_service_attachments) IS
  'Reason of an attachment placement change (NULL old: created, NULL new: removed), derived from instance, entry and DPU.';

-- Reason of a deployment_state change (SPEC 2.8): an API write that comes
-- with a placement change, staleness (state changed to UNKNOWN while the
-- observation, not renewed, is older than the bound), or an
-- observation, whose evidence class follows from the state and whether the
-- row is wanted.
CREATE FUNCTION extsvc._deployment_reason(p_created boolean, p_placement_changed boolean, p_placement text,
                                          p_to text, p_stale boolean, p_wanted boolean,
                                          p_shared boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN CASE
      WHEN p_placement_changed AND p_placement = 'REMOVING' AND p_to = 'UNKNOWN' THEN 'removal_requested'
      WHEN p_placement_changed AND p_placement = 'ACTIVE' AND p_to = 'PENDING'
        THEN CASE WHEN p_created THEN 'attached' ELSE 'reattached' END
      WHEN p_placement_changed THEN 'placement_' || lower(p_placement) || '_with_' || lower(p_to)
      WHEN p_to = 'UNKNOWN' AND p_stale THEN 'observation_stale'
      WHEN p_to = 'UNKNOWN' THEN 'not_observable'
      WHEN p_to = 'ERROR' THEN 'non_transient_failure'
      WHEN p_to IN ('RUNNING', 'PENDING') AND NOT p_wanted AND p_shared THEN 'label_held_by_other'
      WHEN p_to = 'RUNNING' THEN CASE WHEN p_wanted THEN 'running_observed' ELSE 'running_unwanted' END
      WHEN p_to = 'PENDING' THEN CASE WHEN p_wanted THEN 'not_running_observed' ELSE 'pending_unwanted' END
      WHEN p_to = 'TERMINATING' THEN CASE WHEN p_wanted THEN 'terminating_wanted' ELSE 'remnant_observed' END
      WHEN p_to = 'TERMINATED' THEN CASE WHEN p_wanted THEN 'dpu_gone' ELSE 'absence_observed' END
  END;
END
$fn$;
COMMENT ON FUNCTION extsvc._deployment_reason(boolean, boolean, text, text, boolean, boolean, boolean) IS
  'Reason of a per-DPU deployment_state change: API write with a placement change, staleness, or the SPEC 2.8 evidence class of an observation.';

CREATE FUNCTION extsvc._attachment_wanted(p_row extsvc.dpf_extension_service_attachments) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT p_row.placement_state = 'ACTIVE'
       AND EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = p_row.dpu_machine_id AND d.deregistered_at IS NULL));
END
$fn$;
COMMENT ON FUNCTION extsvc._attachment_wanted(extsvc.dpf_extension_service_attachments) IS
  'Whether an attachment row''s label is wanted (ACTIVE on a registered DPU), as the worker''s claim computes it.';

-- A hand-over: another active reason wants the same label on the same DPU.
CREATE FUNCTION extsvc._attachment_shared(p_row extsvc.dpf_extension_service_attachments) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                    WHERE w.dpu_machine_id = p_row.dpu_machine_id AND w.service_id = p_row.service_id
                      AND w.version = p_row.version AND w.instance_id IS DISTINCT FROM p_row.instance_id));
END
$fn$;
COMMENT ON FUNCTION extsvc._attachment_shared(extsvc.dpf_extension_service_attachments) IS
  'Whether another active reason (another instance''s ACTIVE row, an ALL_DPUS service) wants the same label on the row''s DPU.';

CREATE FUNCTION extsvc._site_row_wanted(p_service uuid, p_dpu text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT coalesce((SELECT extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                       FROM extsvc.service_records s WHERE s.service_id = p_service), false)
       AND EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = p_dpu AND d.deregistered_at IS NULL));
END
$fn$;
COMMENT ON FUNCTION extsvc._site_row_wanted(uuid, text) IS
  'Whether an ALL_DPUS service is wanted on a DPU (service accepted and not being deleted, DPU registered).';

-- History (SPEC 2.8): every state change of a per-DPU row (not repeated
-- observations of the same state), bounded: at most 32 entries per row key
-- and nothing older than 30 days (pruned by extsvc.expire_stale_observations,
-- which the resync runs).
CREATE TABLE extsvc.dpu_state_history (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  machine        extsvc.placement_machine NOT NULL,
  instance_id    uuid,          -- NULL for ALL_DPUS rows
  dpu_machine_id text NOT NULL,
  service_id     uuid NOT NULL,
  version        text,
  from_state     text,
  to_state       text,
  actor          extsvc.state_actor NOT NULL,
  reason         text NOT NULL,
  message        text,          -- status_message at the change: the evidence
  observed_at    timestamptz,
  at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX dpu_state_history_instance ON extsvc.dpu_state_history (instance_id, id) WHERE instance_id IS NOT NULL;
CREATE INDEX dpu_state_history_row ON extsvc.dpu_state_history (service_id, dpu_machine_id, instance_id, id);
CREATE INDEX dpu_state_history_at ON extsvc.dpu_state_history (at);
COMMENT ON TABLE extsvc.dpu_state_history IS
  'Per-DPU state changes (placement, deployment, ALL_DPUS) with actor, reason and evidence; at most 32 per row, 30 days.';
-- pg_dump keeps the history and its id sequence; extsvc.placement_transitions
-- holds only the install script's seed rows and is not dumped.
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_state_history', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_state_history_id_seq', '');

-- Keeps the newest 32 history entries of one row key. The instance is
-- compared with = or IS NULL, not IS NOT DISTINCT FROM, which no index
-- serves: the scan stays within the key in dpu_state_history_row.
CREATE FUNCTION extsvc._trim_dpu_history(p_service uuid, p_dpu text, p_instance uuid) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  v_cut bigint;
BEGIN
  IF p_instance IS NULL THEN
    SELECT h.id INTO v_cut FROM extsvc.dpu_state_history h
     WHERE h.service_id = p_service AND h.dpu_machine_id = p_dpu AND h.instance_id IS NULL
     ORDER BY h.id DESC OFFSET 32 LIMIT 1;
  ELSE
    SELECT h.id INTO v_cut FROM extsvc.dpu_state_history h
     WHERE h.service_id = p_service AND h.dpu_machine_id = p_dpu AND h.instance_id = p_instance
     ORDER BY h.id DESC OFFSET 32 LIMIT 1;
  END IF;
  IF v_cut IS NOT NULL THEN
    DELETE FROM extsvc.dpu_state_history h
     WHERE h.service_id = p_service AND h.dpu_machine_id = p_dpu AND h.instance_id IS NOT DISTINCT FROM p_instance
       AND h.id <= v_cut;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._trim_dpu_history(uuid, text, uuid) IS
  'Internal: deletes all but the newest 32 extsvc.dpu_state_history entries of one row key (service, DPU, instance or NULL).';

CREATE FUNCTION extsvc._record_dpu_state(p_machine text, p_instance uuid, p_dpu text, p_service uuid, p_version text,
                                         p_from text, p_to text, p_actor text, p_reason text, p_message text,
                                         p_observed_at timestamptz) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO extsvc.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version, from_state, to_state,
                                        actor, reason, message, observed_at)
  VALUES (p_machine, p_instance, p_dpu, p_service, p_version, p_from, p_to, p_actor, p_reason, p_message, p_observed_at);
  PERFORM extsvc._trim_dpu_history(p_service, p_dpu, p_instance);
END
$fn$;
COMMENT ON FUNCTION extsvc._record_dpu_state(text, uuid, text, uuid, text, text, text, text, text, text, timestamptz) IS
  'Appends one per-DPU state change to extsvc.dpu_state_history and keeps the newest 32 of the row.';

-- Attachments: one AFTER row trigger refuses a change the table does not
-- list, records the others and wakes the DPU whose desired labels changed.
-- It runs once the row changed, inside the statement, so a refusal (55000)
-- still leaves the statement without effect; and it derives the reason,
-- wanted and actor once per change (a BEFORE check and an AFTER record
-- derived each twice, the largest part of an attach's cost: issue 26, part
-- 3). An INSERT ... ON CONFLICT that updates is checked and recorded as the
-- update it was. What a deployment change's reason needs of the row's
-- context (wanted, shared, stale) is read only when the placement did not
-- change with it: a placement change alone decides the reason. Both changes
-- of one row go into the history in one INSERT.
CREATE FUNCTION extsvc._attachment_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_actor text;
  v_old extsvc.dpf_extension_service_attachments;
  v_new extsvc.dpf_extension_service_attachments;
  r extsvc.dpf_extension_service_attachments;
  v_row text;
  v_placement_reason text;
  v_deployment_reason text;
  v_placement_changed boolean;
  v_deployment_changed boolean;
  v_wanted boolean;
BEGIN
  IF extsvc._restoring() THEN RETURN NULL; END IF;  -- a restored row is history already
  v_actor := extsvc._transition_actor();
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  r := CASE WHEN TG_OP = 'DELETE' THEN v_old ELSE v_new END;
  v_placement_changed := TG_OP <> 'UPDATE' OR NEW.placement_state <> OLD.placement_state;
  v_deployment_changed := TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.deployment_state <> OLD.deployment_state);
  IF v_placement_changed THEN
    v_placement_reason := extsvc._placement_reason(v_old, v_new);
  END IF;
  IF v_deployment_changed THEN
    IF v_placement_changed THEN
      v_deployment_reason := extsvc._deployment_reason(TG_OP = 'INSERT', true, NEW.placement_state,
                                                       NEW.deployment_state, false, NULL, NULL);
    ELSE
      v_wanted := extsvc._attachment_wanted(NEW);
      v_deployment_reason := extsvc._deployment_reason(false, false, NEW.placement_state, NEW.deployment_state,
                                                       extsvc._went_stale(v_old.observed_at, NEW.observed_at),
                                                       v_wanted,
                                                       NOT v_wanted AND NEW.deployment_state IN ('RUNNING', 'PENDING')
                                                       AND extsvc._attachment_shared(NEW));
    END IF;
  END IF;
  -- Both changes checked against the table in one statement; the refusal
  -- (placement first) and its DETAIL's text only when one is not listed
  -- (issue 26, part 3: the trigger runs at every attach and observation).
  IF NOT ((NOT v_placement_changed OR EXISTS (
             SELECT FROM extsvc.placement_transitions t
              WHERE t.machine = 'placement' AND t.from_state IS NOT DISTINCT FROM v_old.placement_state::text
                AND t.to_state IS NOT DISTINCT FROM v_new.placement_state::text AND t.actor = v_actor
                AND t.reason = v_placement_reason))
      AND (NOT v_deployment_changed OR EXISTS (
             SELECT FROM extsvc.placement_transitions t
              WHERE t.machine = 'deployment' AND t.from_state IS NOT DISTINCT FROM v_old.deployment_state::text
                AND t.to_state IS NOT DISTINCT FROM NEW.deployment_state::text AND t.actor = v_actor
                AND t.reason = v_deployment_reason))) THEN
    v_row := format('instance_id: %s, dpu_machine_id: %s, service_id: %s, version: %s',
                    r.instance_id, r.dpu_machine_id, r.service_id, r.version);
    IF v_placement_changed THEN
      PERFORM extsvc._refuse_transition('placement', v_old.placement_state, v_new.placement_state, v_actor,
                                        v_placement_reason, v_row);
    END IF;
    PERFORM extsvc._refuse_transition('deployment', v_old.deployment_state, NEW.deployment_state, v_actor,
                                      v_deployment_reason, v_row);
  END IF;
  IF v_placement_changed OR v_deployment_changed THEN
    INSERT INTO extsvc.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version, from_state,
                                          to_state, actor, reason, message, observed_at)
    SELECT x.machine, r.instance_id, r.dpu_machine_id, r.service_id, r.version, x.from_state, x.to_state,
           v_actor, x.reason, x.message, x.observed_at
      FROM (VALUES (1, 'placement'::extsvc.placement_machine, v_old.placement_state::text,
                    v_new.placement_state::text, v_placement_reason, r.status_message, r.observed_at),
                   (2, 'deployment', v_old.deployment_state::text, NEW.deployment_state::text,
                    v_deployment_reason, NEW.status_message, NEW.observed_at))
           x(o, machine, from_state, to_state, reason, message, observed_at)
     WHERE (x.o = 1 AND v_placement_changed) OR (x.o = 2 AND v_deployment_changed)
     ORDER BY x.o;
    PERFORM extsvc._trim_dpu_history(r.service_id, r.dpu_machine_id, r.instance_id);
  END IF;
  -- the DPU's desired labels changed: observe it again (a REMOVING row that
  -- goes away was not wanted any more)
  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND v_placement_changed)
     OR (TG_OP = 'DELETE' AND OLD.placement_state = 'ACTIVE') THEN
    PERFORM extsvc._touch_dpu(r.dpu_machine_id);
  END IF;
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._attachment_transition() IS
  'Trigger: refuses attachment placement and deployment changes not listed in extsvc.placement_transitions (55000), records every other in extsvc.dpu_state_history and wakes the DPU when the placement changed.';

CREATE TRIGGER attachment_transition
  AFTER INSERT OR DELETE OR UPDATE OF placement_state, deployment_state ON extsvc.dpf_extension_service_attachments
  FOR EACH ROW EXECUTE FUNCTION extsvc._attachment_transition();

-- ALL_DPUS per-DPU rows
CREATE FUNCTION extsvc._site_transition_reason(p_op text, p_old extsvc.site_service_dpu_status,
                                               p_new extsvc.site_service_dpu_status) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT CASE
      WHEN p_op = 'DELETE' THEN
        CASE WHEN EXISTS (SELECT FROM extsvc.service_records s
                           WHERE s.service_id = p_old.service_id AND s.lifecycle_state = 'DELETED')
             THEN 'service_deleted' ELSE 'service_not_deleted' END
      ELSE extsvc._deployment_reason(p_op = 'INSERT', false, NULL, p_new.deployment_state,
                                     extsvc._went_stale(p_old.observed_at, p_new.observed_at),
                                     extsvc._site_row_wanted(p_new.service_id, p_new.dpu_machine_id))
    END);
END
$fn$;
COMMENT ON FUNCTION extsvc._site_transition_reason(text, extsvc.site_service_dpu_status, extsvc.site_service_dpu_status) IS
  'Reason of a change of an ALL_DPUS per-DPU row (deletion: the service is DELETED; otherwise the evidence class).';

-- One AFTER row trigger refuses and records, as for attachments.
CREATE FUNCTION extsvc._site_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_old extsvc.site_service_dpu_status;
  v_new extsvc.site_service_dpu_status;
  r extsvc.site_service_dpu_status;
  v_actor text;
  v_reason text;
BEGIN
  IF extsvc._restoring() THEN RETURN NULL; END IF;  -- a restored row is history already
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  IF TG_OP = 'UPDATE' AND NEW.deployment_state = OLD.deployment_state THEN
    RETURN NULL;
  END IF;
  r := CASE WHEN TG_OP = 'DELETE' THEN v_old ELSE v_new END;
  v_actor := extsvc._transition_actor();
  v_reason := extsvc._site_transition_reason(TG_OP, v_old, v_new);
  PERFORM extsvc._refuse_transition('site_deployment', v_old.deployment_state, v_new.deployment_state,
    v_actor, v_reason, format('service_id: %s, dpu_machine_id: %s', r.service_id, r.dpu_machine_id));
  PERFORM extsvc._record_dpu_state('site_deployment', NULL, r.dpu_machine_id, r.service_id, NULL,
    v_old.deployment_state, v_new.deployment_state, v_actor, v_reason, r.status_message, r.observed_at);
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._site_transition() IS
  'Trigger: refuses ALL_DPUS per-DPU state changes not listed in extsvc.placement_transitions (55000) and records every other in extsvc.dpu_state_history.';

CREATE TRIGGER site_transition
  AFTER INSERT OR DELETE OR UPDATE OF deployment_state ON extsvc.site_service_dpu_status
  FOR EACH ROW EXECUTE FUNCTION extsvc._site_transition();

-- Persists staleness: observed states older than the bound become UNKNOWN
-- (readers already see that through extsvc._effective_deployment_state), and
-- prunes history older than 30 days. Run by the resync (mark_dpus_due).
CREATE FUNCTION extsvc.expire_stale_observations() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, extsvc, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_bound interval := extsvc._observation_max_age();
  n integer;
  m integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_attachments a
     SET deployment_state = 'UNKNOWN', updated_at = now(),
         status_message = format('last observation at %s is older than extsvc.observation_max_age (%s)',
                                 a.observed_at, v_bound)
   WHERE a.deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
     AND a.observed_at < now() - v_bound;
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE extsvc.site_service_dpu_status x
     SET deployment_state = 'UNKNOWN',
         status_message = format('last observation at %s is older than extsvc.observation_max_age (%s)',
                                 x.observed_at, v_bound)
   WHERE x.deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
     AND x.observed_at < now() - v_bound;
  GET DIAGNOSTICS m = ROW_COUNT;
  DELETE FROM extsvc.dpu_state_history h WHERE h.at < now() - interval '30 days';
  RETURN n + m;
END
$fn$;
COMMENT ON FUNCTION extsvc.expire_stale_observations() IS
  'Marks per-DPU states observed longer ago than extsvc.observation_max_age UNKNOWN (reason observation_stale); prunes history older than 30 days. Returns the rows marked.';

CREATE FUNCTION extsvc.instance_dpu_state_history(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (at timestamptz, service_id uuid, service_name text, version text, dpu_machine_id text,
               dpu_node_name text, machine text, from_state text, to_state text, actor text, reason text,
               message text, observed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, extsvc, pg_temp AS $fn$
BEGIN
  -- the tenant check of every instance function (a deleted instance has no
  -- tenant left to compare, so with the argument it is refused like a
  -- foreign one); without it, a deleted instance's history stays readable
  -- until retention removes it, and only an id with neither is unknown
  PERFORM extsvc._check_instance_tenant(instance_dpu_state_history.instance_id,
                                        instance_dpu_state_history.tenant_organization_id);
  IF NOT EXISTS (SELECT FROM extsvc.instances i WHERE i.instance_id = instance_dpu_state_history.instance_id)
     AND NOT EXISTS (SELECT FROM extsvc.dpu_state_history h
                      WHERE h.instance_id = instance_dpu_state_history.instance_id) THEN
    PERFORM extsvc._raise('P0002', 'instance not found',
                          format('instance_id: %s', instance_dpu_state_history.instance_id),
                          'Check the instance id; history of a deleted instance is kept 30 days.');
  END IF;
  RETURN QUERY
  SELECT h.at, h.service_id, s.service_name, h.version, h.dpu_machine_id, d.dpu_node_name, h.machine::text,
         h.from_state, h.to_state, h.actor::text, h.reason, h.message, h.observed_at
    FROM extsvc.dpu_state_history h
    LEFT JOIN extsvc.service_records s ON s.service_id = h.service_id
    LEFT JOIN extsvc.dpus d ON d.machine_id = h.dpu_machine_id
   WHERE h.instance_id = instance_dpu_state_history.instance_id
   ORDER BY h.id;
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_dpu_state_history(uuid, text) IS
  'Per-DPU state changes of one instance''s attachments (placement and deployment), oldest first, with the evidence in message; kept 30 days, at most 32 per row; a deleted instance''s history stays readable. P0002 for an id with neither instance nor history; with tenant_organization_id, 42501 for another tenant''s, a deleted or an unknown instance alike.';

-- The worker's entry points run as actor 'worker' (function-scoped setting,
-- looked up by name so a changed signature does not break the install).
DO $do$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'extsvc'::regnamespace
              AND p.proname IN ('complete', 'mark_dpus_due') LOOP
    EXECUTE format('ALTER FUNCTION %s SET nico_extsvc.actor = %L', f, 'worker');
  END LOOP;
END
$do$;
