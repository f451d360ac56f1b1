-- The allowed service lifecycle changes. docs/lifecycle.md is generated from
-- this table (tools/lifecycle_doc.py --write) and a test (--check) keeps them equal.
INSERT INTO extsvc.lifecycle_transitions (from_state, to_state, actor, reason, description) VALUES
  (NULL,       'CREATING', 'api',    'create',              'DPF_HELM_CHART service created; intent persisted, no Kubernetes call yet'),
  (NULL,       'READY',    'api',    'create',              'KUBERNETES_POD service created (synchronous)'),
  ('CREATING', 'READY',    'worker', 'dpuservice_created',  'DPUService created by the worker'),
  ('CREATING', 'READY',    'worker', 'dpuservice_adopted',  'DPUService already existed with our ownership labels and identity'),
  ('CREATING', 'CREATING', 'api',    'superseded',          'data updated before the create was applied; the newest revision is created'),
  ('CREATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the DPUService (400/422 or similar)'),
  ('CREATING', 'FAILED',   'worker', 'ownership_conflict',  'an object with the generated name belongs to someone else'),
  ('CREATING', 'FAILED',   'worker', 'unknown_fields',      'the DPF API refused (fieldValidation=Strict) or dropped fields its CRD does not define: the DPF release is too old'),
  ('CREATING', 'FAILED',   'worker', 'namespace_missing',   'the create answered 404: extsvc.namespace names a namespace that does not exist'),
  ('CREATING', 'DELETING', 'api',    'delete',              'delete requested before the create finished; the delete wins'),
  ('READY',    'UPDATING', 'api',    'update',              'new Helm revision requested'),
  ('READY',    'READY',    'api',    'new_version',         'KUBERNETES_POD data changed: new version'),
  ('READY',    'READY',    'api',    'version_deleted',     'KUBERNETES_POD version deleted'),
  ('READY',    'READY',    'worker', 'drift_recreated',     'the DPUService was missing and was re-created'),
  ('READY',    'READY',    'worker', 'drift_patched',       'the DPUService spec had drifted and was patched back'),
  ('READY',    'READY',    'worker', 'site_label_adopted',  'the DPUService, made before 0.3.0, got this site''s nico/site label on its metadata (no spec change, no pod restart)'),
  ('READY',    'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('READY',    'FAILED',   'worker', 'permanent_error',     'a drift repair was refused by the API'),
  ('READY',    'FAILED',   'worker', 'unknown_fields',      'a drift repair was refused or pruned: the DPF CRD no longer defines a field (DPF downgraded)'),
  ('READY',    'DELETING', 'api',    'delete',              'delete requested'),
  ('READY',    'DELETED',  'api',    'delete',              'KUBERNETES_POD service deleted (synchronous)'),
  ('UPDATING', 'READY',    'worker', 'revision_applied',    'DPF accepted the desired revision'),
  ('UPDATING', 'UPDATING', 'api',    'superseded',          'data updated again before the pending revision was applied'),
  ('UPDATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the patch (400/422 or similar)'),
  ('UPDATING', 'FAILED',   'worker', 'unknown_fields',      'the DPF API refused (fieldValidation=Strict) or dropped fields its CRD does not define: the DPF release is too old'),
  ('UPDATING', 'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('UPDATING', 'FAILED',   'worker', 'dpuservice_missing',  'the DPUService disappeared during an update'),
  ('UPDATING', 'DELETING', 'api',    'delete',              'delete requested during an update; the delete wins'),
  ('FAILED',   'CREATING', 'api',    'update',              'new definition for a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'update',              'new definition for a service that exists in DPF'),
  ('FAILED',   'CREATING', 'api',    'retry',               'operator retry of a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'retry',               'operator retry of a service that exists in DPF'),
  ('FAILED',   'DELETING', 'api',    'delete',              'delete requested'),
  ('FAILED',   'DELETING', 'api',    'retry',               'retry of a failed delete: the delete is requested again'),
  ('FAILED',   'DELETED',  'api',    'abandoned',           'operator abandoned a delete that failed on an ownership conflict; the foreign object is left alone'),
  ('DELETING', 'DELETED',  'worker', 'dpuservice_deleted',  'the API answered 404: the DPUService and its finalizers are gone'),
  ('DELETING', 'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name belongs to someone else; not deleted'),
  ('DELETING', 'FAILED',   'worker', 'permanent_error',     'the API refused the delete'),
  -- issue 23, part 2: a pod of the service on a DPU without an attachment for it (extsvc.stray_workloads)
  ('CREATING', 'CREATING', 'worker', 'stray_workload',      'a pod of the service runs on a DPU without an attachment for it (extsvc.stray_workloads)'),
  ('READY',    'READY',    'worker', 'stray_workload',      'a pod of the service runs on a DPU without an attachment for it (extsvc.stray_workloads)'),
  ('UPDATING', 'UPDATING', 'worker', 'stray_workload',      'a pod of the service runs on a DPU without an attachment for it (extsvc.stray_workloads)'),
  ('FAILED',   'FAILED',   'worker', 'stray_workload',      'a pod of the service runs on a DPU without an attachment for it (extsvc.stray_workloads)'),
  ('DELETING', 'DELETING', 'worker', 'stray_workload',      'a pod of the service runs on a DPU without an attachment for it (extsvc.stray_workloads)');

-- Refuses any lifecycle change not in extsvc.lifecycle_transitions; the
-- AFTER trigger below records every allowed one in the history.
CREATE FUNCTION extsvc._check_lifecycle_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_from text := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.lifecycle_state END;
BEGIN
  IF extsvc._restoring() THEN RETURN NEW; END IF;  -- a restored row is history already
  IF TG_OP = 'UPDATE' AND NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NEW;
  END IF;
  IF NOT EXISTS (
      SELECT FROM extsvc.lifecycle_transitions t
      WHERE t.from_state IS NOT DISTINCT FROM v_from
        AND t.to_state = NEW.lifecycle_state
        AND t.actor = NEW.state_actor
        AND t.reason = NEW.state_reason) THEN
    RAISE EXCEPTION 'lifecycle transition % -> % by % (%) is not allowed',
        coalesce(v_from, '(new)'), NEW.lifecycle_state, NEW.state_actor, NEW.state_reason
      USING ERRCODE = '55000', CONSTRAINT = 'lifecycle_transition',
            DETAIL = format('service_id: %s', NEW.service_id),
            HINT = 'See extsvc.lifecycle_transitions for the allowed changes.';
  END IF;
  RETURN NEW;
END
$fn$;

CREATE FUNCTION extsvc._record_lifecycle_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF extsvc._restoring() THEN RETURN NULL; END IF;  -- a restored row is history already
  IF TG_OP = 'UPDATE' AND NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NULL;
  END IF;
  INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision)
  VALUES (NEW.service_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.lifecycle_state END, NEW.lifecycle_state,
          NEW.state_actor, NEW.state_reason, NEW.status_message, NEW.desired_revision);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER lifecycle_transition_check
  BEFORE INSERT OR UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_lifecycle_transition();

CREATE TRIGGER lifecycle_transition_history
  AFTER INSERT OR UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._record_lifecycle_transition();

-- Same-state events (supersede, drift repair, Pod versions) are checked
-- against the same table and recorded the same way.
CREATE FUNCTION extsvc._record_event(p_service_id uuid, p_state text, p_actor text, p_reason text,
                                     p_message text DEFAULT NULL, p_revision integer DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  -- the check and the row in one statement: no row when the event is not allowed
  INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision)
  SELECT p_service_id, p_state, p_state, p_actor, p_reason, p_message, p_revision
   WHERE EXISTS (SELECT FROM extsvc.lifecycle_transitions t
                  WHERE t.from_state = p_state AND t.to_state = p_state
                    AND t.actor = p_actor AND t.reason = p_reason);
  IF NOT FOUND THEN
    RAISE EXCEPTION 'lifecycle event % on % by % is not allowed', p_reason, p_state, p_actor
      USING ERRCODE = '55000', HINT = 'See extsvc.lifecycle_transitions.';
  END IF;
END
$fn$;
