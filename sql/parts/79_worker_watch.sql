-- What the watcher (the worker that holds the LIST+WATCH caches, issue 11)
-- asks of the database: wake exactly the rows an event concerns. Each
-- returns how many rows it made due. Rows are locked in key order (the
-- order every writer of these tables uses), and a row leased at the moment
-- gets its state_version bumped, so the pass in flight, which decided from
-- older evidence, ends stale and runs again instead of dropping the wake.

-- DPUs whose DPUDevice (by name) or DPU-cluster Node (by name: its labels or
-- the service pods on it) changed.
CREATE FUNCTION extsvc.mark_dpus_due_by_names(device_names text[], node_names text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  -- rows in key order (ON CONFLICT DO UPDATE locks them in the SELECT's order)
  INSERT INTO extsvc.dpu_reconciliations AS r (dpu_machine_id, next_due_at)
  SELECT h.machine_id, now()
    FROM (SELECT d.machine_id FROM extsvc.dpus d
           WHERE d.dpu_device_name = ANY (coalesce(device_names, '{}'))
          UNION
          SELECT d.machine_id FROM extsvc.dpus d
           WHERE d.dpu_node_name = ANY (coalesce(node_names, '{}'))) h
   ORDER BY h.machine_id
  ON CONFLICT (dpu_machine_id) DO UPDATE
     SET next_due_at = now(),
         state_version = r.state_version + CASE WHEN r.lease_token IS NOT NULL THEN 1 ELSE 0 END
   WHERE r.next_due_at IS NULL OR r.next_due_at > now() OR r.lease_token IS NOT NULL;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM extsvc._wake();
  END IF;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.mark_dpus_due_by_names(text[], text[]) IS
  'Worker (watcher): makes the DPUs due whose DPUDevice or Node (by name) changed in the watch caches; returns how many.';

-- Services whose DPUService changed: a DELETING one waits for DPF's
-- finalizers, and the watch says when the object went.
CREATE FUNCTION extsvc.wake_services(service_ids uuid[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  WITH locked AS (
    SELECT q.service_id FROM extsvc.dpf_extension_service_reconciliations q
      JOIN extsvc.service_records s USING (service_id)
     WHERE q.service_id = ANY (coalesce(service_ids, '{}')) AND s.lifecycle_state = 'DELETING'
     ORDER BY q.service_id
       FOR UPDATE OF q
  )
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now(),
         state_version = q.state_version + CASE WHEN q.lease_token IS NOT NULL THEN 1 ELSE 0 END
    FROM locked
   WHERE q.service_id = locked.service_id
     AND (q.next_due_at IS NULL OR q.next_due_at > now() OR q.lease_token IS NOT NULL);
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM extsvc._wake();
  END IF;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.wake_services(uuid[]) IS
  'Worker (watcher): makes DELETING services due whose DPUService changed (finalizers removed, object gone); returns how many.';

-- The drift check of the services a watch event concerned: their work
-- objects, as resync_snapshot gives every READY service's.
CREATE FUNCTION extsvc.resync_snapshot_of(service_ids uuid[])
RETURNS TABLE (service_id uuid, work jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, extsvc._service_work(s.service_id, 0)
    FROM extsvc.service_records s
   WHERE s.service_id = ANY (coalesce(service_ids, '{}'))
     AND s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY'
$fn$;
COMMENT ON FUNCTION extsvc.resync_snapshot_of(uuid[]) IS
  'Worker (watcher): the READY DPF services among service_ids with their work objects, for the drift check of what a watch event changed.';

-- DPUs still converging towards a service whose context changed (a
-- DaemonSet FailedCreate event, DPF's Ready condition): their PENDING
-- messages say more now.
CREATE FUNCTION extsvc.mark_service_dpus_due(service_ids uuid[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  INSERT INTO extsvc.dpu_reconciliations AS r (dpu_machine_id, next_due_at)
  SELECT h.dpu_machine_id, now()
    FROM (SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
           WHERE a.service_id = ANY (coalesce(service_ids, '{}')) AND a.deployment_state <> 'RUNNING'
          UNION
          SELECT x.dpu_machine_id FROM extsvc.site_service_dpu_status x
           WHERE x.service_id = ANY (coalesce(service_ids, '{}')) AND x.deployment_state <> 'RUNNING') h
   ORDER BY h.dpu_machine_id
  ON CONFLICT (dpu_machine_id) DO UPDATE
     SET next_due_at = now(),
         state_version = r.state_version + CASE WHEN r.lease_token IS NOT NULL THEN 1 ELSE 0 END
   WHERE r.next_due_at IS NULL OR r.next_due_at > now() OR r.lease_token IS NOT NULL;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM extsvc._wake();
  END IF;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.mark_service_dpus_due(uuid[]) IS
  'Worker (watcher): makes due the DPUs not yet RUNNING for these services, whose context (a FailedCreate event, DPF''s Ready condition) changed; returns how many.';
