-- Placement internals: the desired labels of every DPU, the triggers that
-- make DPUs due when they change, target resolution and the attachment rows
-- of an instance (SPEC 2.4, 2.7). The API is sql/parts/71_dpu_registry.sql and 72_placement_api.sql.

-- Wanted on every registered DPU: ALL_DPUS services that DPF has accepted and
-- that are not being deleted.
CREATE FUNCTION extsvc._site_service_wanted(p_state text, p_applied integer) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN p_state IN ('READY', 'UPDATING') OR (p_state = 'FAILED' AND p_applied IS NOT NULL);
END
$fn$;

-- The desired NICo-owned label set of every DPU, derived from the active
-- attachments and the ALL_DPUS services (reference-counted by construction:
-- a key is wanted while at least one reason exists).
CREATE VIEW extsvc.dpu_desired_labels AS
SELECT a.dpu_machine_id, s.placement_label_key AS label_key, s.service_id, a.version,
       'attachment'::text AS reason, a.instance_id
  FROM extsvc.dpf_extension_service_attachments a
  JOIN extsvc.service_records s USING (service_id)
 WHERE a.placement_state = 'ACTIVE'
UNION ALL
SELECT d.machine_id, s.placement_label_key, s.service_id, s.attachable_version, 'all_dpus', NULL
  FROM extsvc.dpus d
  CROSS JOIN extsvc.service_records s
 WHERE d.deregistered_at IS NULL
   AND s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
   AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision);
COMMENT ON VIEW extsvc.dpu_desired_labels IS
  'Per DPU: every NICo placement label it should carry and why (attachment or ALL_DPUS service).';

-- Marks a DPU's placement work as due now (its desired labels may have changed).
CREATE FUNCTION extsvc._touch_dpu(p_dpu text) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  INSERT INTO extsvc.dpu_reconciliations AS q (dpu_machine_id, next_due_at)
  VALUES (p_dpu, now())
  ON CONFLICT (dpu_machine_id) DO UPDATE
    SET state_version = q.state_version + 1, next_due_at = now(), attempts = 0;
  PERFORM extsvc._wake();
END
$fn$;

-- Lock order of placement changes (issue 13; docs/reliability.md). The
-- worker's DPU completion, extsvc.complete('dpu', d), locks d's
-- dpu_reconciliations row first, then the instances it may clean up
-- (_cleanup_instance; instance_id order), then writes d's attachment rows. An API call that changes
-- placement locks an instance or DPU row and writes attachment rows, whose
-- trigger then locks their DPUs' dpu_reconciliations rows (_touch_dpu): the
-- other order, and the two deadlocked. So such a call first locks every
-- dpu_reconciliations row it may touch, in dpu_machine_id order, and only
-- then its instance or DPU row; once it holds that row it calls this again
-- for rows a concurrent call added meanwhile. The rows: every DPU of p_hosts
-- and of the instances' hosts, and every DPU with an attachment row of the
-- instances; p_instances NULL means the instances on p_hosts.
CREATE FUNCTION extsvc._lock_dpu_work(p_hosts text[], p_instances uuid[] DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_instances uuid[] := p_instances;
  v_hosts text[] := p_hosts;
BEGIN
  -- each look-up only when it can find something (34 calls in an allocation of 8)
  IF p_instances IS NULL THEN
    v_instances := ARRAY(SELECT i.instance_id FROM extsvc.instances i WHERE i.host_machine_id = ANY (p_hosts));
  ELSIF cardinality(p_instances) > 0 THEN
    v_hosts := p_hosts || ARRAY(SELECT i.host_machine_id FROM extsvc.instances i
                                 WHERE i.instance_id = ANY (p_instances));
  END IF;
  PERFORM FROM extsvc.dpu_reconciliations q
   WHERE q.dpu_machine_id IN (SELECT d.machine_id FROM extsvc.dpus d WHERE d.host_machine_id = ANY (v_hosts)
                              UNION
                              SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
                               WHERE a.instance_id = ANY (v_instances))
   ORDER BY q.dpu_machine_id
   FOR NO KEY UPDATE OF q;
END
$fn$;
COMMENT ON FUNCTION extsvc._lock_dpu_work(text[], uuid[]) IS
  'Internal: locks, in dpu_machine_id order, the DPU work rows a placement change of these hosts or instances may touch; API calls take them before their instance or DPU row, the order of the worker''s DPU completion.';

-- Whether a row version this transaction sees was written by this
-- transaction, at its top level or in a savepoint (a subtransaction has an
-- xid of its own, so xmin = pg_current_xact_id() misses it: a handler run in
-- a savepoint made every DPU of an attach due twice). A visible version whose
-- writer is still in progress can only be this transaction's own. xmin is 32
-- bits and may be old (a frozen row keeps its raw xmin; after the counter
-- wrapped an old xmin is numerically larger than new ones): a savepoint's xid
-- is less than 2^31 ahead of the top level's, counted modulo 2^32, and an
-- old xmin that reads so is taken to be in the current epoch, which
-- pg_xact_status refuses as "in the future" (22023): not this transaction's.
CREATE FUNCTION extsvc._written_by_this_transaction(p_xmin xid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_top bigint := pg_current_xact_id()::text::bigint;
  v_x bigint := p_xmin::text::bigint;
  v_ahead bigint := (v_x - (v_top & 4294967295) + 4294967296) % 4294967296;
BEGIN
  IF v_ahead = 0 THEN
    RETURN true;
  END IF;
  IF v_x < 3 OR v_ahead >= 2147483648 THEN
    RETURN false;  -- a special xid (frozen, bootstrap), or one before the top level's
  END IF;
  BEGIN
    RETURN pg_xact_status((v_top + v_ahead)::text::xid8) = 'in progress';
  EXCEPTION WHEN invalid_parameter_value THEN
    RETURN false;
  END;
END
$fn$;
COMMENT ON FUNCTION extsvc._written_by_this_transaction(xid) IS
  'Internal: whether a visible row version (its xmin) was written by this transaction or one of its subtransactions.';

-- What extsvc.lock_placement holds for the calls of its batch (issue 26,
-- part 3): an allocation of 8 instances made 34 _lock_dpu_work calls, 32 of
-- them for rows lock_placement had locked already (a tenth of its server
-- time). lock_placement notes in a transaction-local setting, under this
-- transaction's id (a session-wide SET of it never matches):
--   1. the hosts it locked the DPU work rows of, those with at least one
--      (a host with none is not covered: register_dpu of a first DPU would
--      not wait for this transaction);
--   2. the instances whose row and every DPU work row they may touch this
--      transaction holds (those lock_placement locked FOR UPDATE;
--      upsert_instance adds those it wrote on a host of 1.);
--   3. every instance id it took the advisory lock of.
-- A call of the batch skips _lock_dpu_work for an instance held (2.) on a
-- covered host (1.): it would lock nothing this transaction does not hold,
-- and none of those rows can change (register_dpu and deregister_dpu lock
-- the host's DPU work rows first, and every other writer the instance
-- row). Nothing else changes: a setting that does not match locks as before.
CREATE FUNCTION extsvc._placement_held(p_host text, p_instance uuid, p_noted boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  m text[] := string_to_array(current_setting('nico_extsvc.placement_locked', true), '|');
BEGIN
  IF m IS NULL OR cardinality(m) <> 4 OR m[1] <> pg_current_xact_id()::text THEN
    RETURN false;
  END IF;
  -- p_noted: an instance id of 3. instead of one held (2.)
  RETURN coalesce(p_host = ANY (m[2]::text[])
                  AND p_instance = ANY ((CASE WHEN p_noted THEN m[4] ELSE m[3] END)::uuid[]), false);
END
$fn$;
COMMENT ON FUNCTION extsvc._placement_held(text, uuid, boolean) IS
  'Internal: whether extsvc.lock_placement, earlier in this transaction, locked the host''s DPU work rows and the instance with every DPU work row it may touch (p_noted: whether it took the instance id''s advisory lock instead), so that the call need not lock them again.';

CREATE FUNCTION extsvc._placement_note_held(p_host text, p_instance uuid) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  m text[] := string_to_array(current_setting('nico_extsvc.placement_locked', true), '|');
BEGIN
  IF m IS NULL OR cardinality(m) <> 4 OR m[1] <> pg_current_xact_id()::text THEN
    RETURN;
  END IF;
  IF coalesce(p_host = ANY (m[2]::text[]) AND NOT p_instance = ANY (m[3]::uuid[]), false) THEN
    PERFORM set_config('nico_extsvc.placement_locked',
                       array_to_string(ARRAY[m[1], m[2], (m[3]::uuid[] || p_instance)::text, m[4]], '|'), true);
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._placement_note_held(text, uuid) IS
  'Internal: upsert_instance wrote the instance on the host, holding its row and every DPU work row it may touch: the calls after it in a batch of extsvc.lock_placement need not lock them again (if the host is one lock_placement covers).';

-- An attachment row's change wakes its DPU from the row's transition
-- trigger (extsvc._attachment_transition, 78_placement_transitions.sql).

-- A DPF service's lifecycle change alters what its DPUs should show (labels
-- for ALL_DPUS, pod revisions for everyone): observe them again.
CREATE FUNCTION extsvc._service_state_wakes_dpus() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  d text;
BEGIN
  IF NEW.service_type <> 'DPF_HELM_CHART' OR NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NULL;
  END IF;
  -- in dpu_machine_id order, the order of _lock_dpu_work (issue 13)
  IF NEW.deployment_scope = 'ALL_DPUS' THEN
    FOR d IN SELECT machine_id FROM extsvc.dpus ORDER BY machine_id LOOP
      PERFORM extsvc._touch_dpu(d);
    END LOOP;
  ELSE
    FOR d IN SELECT DISTINCT dpu_machine_id FROM extsvc.dpf_extension_service_attachments
              WHERE service_id = NEW.service_id ORDER BY dpu_machine_id LOOP
      PERFORM extsvc._touch_dpu(d);
    END LOOP;
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER service_state_wakes_dpus
  AFTER UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._service_state_wakes_dpus();

-- Target resolution (SPEC 2.4). NULL when unresolvable: callers never invent
-- an empty set (that would remove labels).
CREATE FUNCTION extsvc._resolve_targets(p_instance uuid, p_target text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  v text[];
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance;
  IF p_target = 'ALL' THEN
    SELECT array_agg(machine_id ORDER BY machine_id) INTO v FROM extsvc.dpus
     WHERE host_machine_id = i.host_machine_id AND deregistered_at IS NULL;
  ELSIF p_target = 'PRIMARY' THEN
    SELECT array_agg(machine_id) INTO v FROM extsvc.dpus
     WHERE host_machine_id = i.host_machine_id AND is_primary AND deregistered_at IS NULL;
  ELSIF p_target = 'ALL_ACTIVE' THEN
    IF EXISTS (SELECT FROM unnest(i.network_dpus) n(id)
                WHERE NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = n.id
                                    AND d.host_machine_id = i.host_machine_id AND d.deregistered_at IS NULL)) THEN
      RETURN NULL;  -- a network DPU that is not attached to the host
    END IF;
    SELECT array_agg(DISTINCT n.id ORDER BY n.id) INTO v FROM unnest(i.network_dpus) n(id);
  END IF;
  IF v IS NULL OR cardinality(v) = 0 THEN
    RETURN NULL;
  END IF;
  RETURN v;
END
$fn$;

-- Brings an instance's attachment rows in line with its configuration.
-- Rows are written before any label changes (the worker reads them).
-- p_strict: an unresolvable target of an active DPF entry is an error
-- (new attachments); otherwise the entry's rows are left untouched.
CREATE FUNCTION extsvc._materialize_instance(p_instance uuid, p_strict boolean) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e record;
  v_targets text[];
  v_host text[];
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance FOR UPDATE;
  FOR e IN
    -- an attachment's own dpu_target (issue 22) overrides the service's
    SELECT c.service_id, c.version, c.removed_at, c.attached_at, coalesce(c.dpu_target, s.dpu_target) AS dpu_target,
           s.service_name
      FROM extsvc.instance_extension_services c
      JOIN extsvc.service_records s USING (service_id)
     WHERE c.instance_id = p_instance AND s.service_type = 'DPF_HELM_CHART'
  LOOP
    IF e.removed_at IS NULL AND i.delete_requested_at IS NULL THEN
      v_targets := extsvc._resolve_targets(p_instance, e.dpu_target);
      IF v_targets IS NULL THEN
        -- only an entry attached by this very transaction is refused; an
        -- older one keeps its rows until its target resolves again
        IF p_strict AND e.attached_at = now() THEN
          PERFORM extsvc._raise('P0002', format('no DPU matches dpu_target %s for service %s', e.dpu_target, e.service_name),
            format('instance_id: %s, host_machine_id: %s, service_id: %s', p_instance, i.host_machine_id, e.service_id),
            'Register the host''s DPUs (extsvc.register_dpu) and its network DPUs (extsvc.upsert_instance) first.');
        END IF;
        CONTINUE;  -- keep whatever is there: never an invented empty set
      END IF;
      INSERT INTO extsvc.dpf_extension_service_attachments AS a
             (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state)
      SELECT p_instance, t.id, e.service_id, e.version, 'ACTIVE', 'PENDING' FROM unnest(v_targets) t(id)
      ON CONFLICT (instance_id, dpu_machine_id, service_id, version) DO UPDATE
        SET placement_state = 'ACTIVE', removing_since = NULL, updated_at = now(), status_message = NULL,
            deployment_state = CASE WHEN a.placement_state = 'ACTIVE' THEN a.deployment_state ELSE 'PENDING' END
        WHERE a.placement_state <> 'ACTIVE';
      UPDATE extsvc.dpf_extension_service_attachments a
         SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
       WHERE a.instance_id = p_instance AND a.service_id = e.service_id AND a.version = e.version
         AND a.placement_state = 'ACTIVE' AND NOT (a.dpu_machine_id = ANY (v_targets));
    ELSE
      -- detach or instance deletion: every DPU attached to the host must be
      -- observed TERMINATED before the tombstone goes away
      IF v_host IS NULL THEN
        SELECT coalesce(array_agg(machine_id), '{}') INTO v_host FROM extsvc.dpus
         WHERE host_machine_id = i.host_machine_id AND deregistered_at IS NULL;
      END IF;
      INSERT INTO extsvc.dpf_extension_service_attachments AS a
             (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state, removing_since)
      SELECT p_instance, h.id, e.service_id, e.version, 'REMOVING', 'UNKNOWN', now() FROM unnest(v_host) h(id)
      ON CONFLICT (instance_id, dpu_machine_id, service_id, version) DO UPDATE
        SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
        WHERE a.placement_state = 'ACTIVE';
      UPDATE extsvc.dpf_extension_service_attachments a
         SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
       WHERE a.instance_id = p_instance AND a.service_id = e.service_id AND a.version = e.version
         AND a.placement_state = 'ACTIVE';
    END IF;
  END LOOP;
END
$fn$;

-- Removes what has converged: REMOVING rows observed TERMINATED (or released
-- to another active reason on the same DPU), then tombstones without rows,
-- then deleted instances without entries.
CREATE FUNCTION extsvc._cleanup_instance(p_instance uuid) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  DELETE FROM extsvc.dpf_extension_service_attachments a
   WHERE a.instance_id = p_instance AND a.placement_state = 'REMOVING'
     AND (a.deployment_state = 'TERMINATED'
          OR EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                      WHERE w.dpu_machine_id = a.dpu_machine_id AND w.service_id = a.service_id
                        AND w.version = a.version));
  -- a tombstone goes only when none of its rows remain
  DELETE FROM extsvc.instance_extension_services c
   WHERE c.instance_id = p_instance AND c.removed_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                        AND a.version = c.version)
     AND EXISTS (SELECT FROM extsvc.service_records s
                  WHERE s.service_id = c.service_id AND s.service_type = 'DPF_HELM_CHART');
  -- KUBERNETES_POD entries stay until NICo confirms their termination
  -- (extsvc.remove_terminated_services; issue #14 P1-8): the DPU agent must
  -- see them removed
  IF i.delete_requested_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a WHERE a.instance_id = p_instance)
     AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services c WHERE c.instance_id = p_instance) THEN
    DELETE FROM extsvc.instances WHERE instance_id = p_instance;
    -- remembered, so that the deletion probe can tell finished from unknown
    INSERT INTO extsvc.finished_instance_deletions (instance_id, tenant_organization_id, host_machine_id,
                                                    delete_requested_at)
    VALUES (i.instance_id, i.tenant_organization_id, i.host_machine_id, i.delete_requested_at)
    ON CONFLICT (instance_id) DO UPDATE
      SET tenant_organization_id = EXCLUDED.tenant_organization_id, host_machine_id = EXCLUDED.host_machine_id,
          delete_requested_at = EXCLUDED.delete_requested_at, finished_at = now();
  END IF;
END
$fn$;
