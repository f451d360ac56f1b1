-- What the watcher (the worker that holds the LIST+WATCH caches, issue 11)
-- asks of the database: wake exactly the rows an event concerns, and claim
-- the DPU rows it woke before the queue's backlog. Rows are locked in key
-- order (the order every writer of these tables uses), and a row leased at
-- the moment gets its state_version bumped, so the pass in flight, which
-- decided from older evidence, ends stale and runs again instead of
-- dropping the wake.

-- Makes the given DPUs due now and tells which of them this call woke (the
-- others were due already); rows in key order (ON CONFLICT DO UPDATE locks
-- them in the SELECT's order, the order of every writer of these rows). A
-- row leased at the moment gets its state_version bumped, so the pass in
-- flight, which decided from older evidence, ends stale and runs again.
CREATE FUNCTION extsvc._wake_dpus(p_ids text[]) RETURNS TABLE (dpu_machine_id text, woken boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
  WITH hit AS (
    SELECT DISTINCT unnest(coalesce(p_ids, '{}')) AS machine_id
  ), marked AS (
    INSERT INTO extsvc.dpu_reconciliations AS r (dpu_machine_id, next_due_at)
    SELECT h.machine_id, now() FROM hit h ORDER BY h.machine_id
    ON CONFLICT (dpu_machine_id) DO UPDATE
       SET next_due_at = now(),
           state_version = r.state_version + CASE WHEN r.lease_token IS NOT NULL THEN 1 ELSE 0 END
     WHERE r.next_due_at IS NULL OR r.next_due_at > now() OR r.lease_token IS NOT NULL
    RETURNING r.dpu_machine_id
  )
  SELECT h.machine_id, EXISTS (SELECT FROM marked m WHERE m.dpu_machine_id = h.machine_id) FROM hit h
$fn$;
COMMENT ON FUNCTION extsvc._wake_dpus(text[]) IS
  'Internal: makes these DPUs due now (in key order; a leased one gets its state_version bumped); returns each and whether this call woke it.';

-- DPUs whose DPUDevice (by name) or DPU-cluster Node (by name: its labels or
-- the service pods on it) changed.
CREATE FUNCTION extsvc.mark_dpus_due_by_names(device_names text[], node_names text[])
RETURNS TABLE (dpu_machine_id text, woken boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  -- every DPU the names concern, for the watcher to work them before the
  -- backlog (no wake: the watcher, the only worker of the DPU queue in watch
  -- mode, works them right after this call)
  SELECT w.dpu_machine_id, w.woken FROM extsvc._wake_dpus(ARRAY(
    SELECT d.machine_id FROM extsvc.dpus d WHERE d.dpu_device_name = ANY (coalesce(device_names, '{}'))
    UNION
    SELECT d.machine_id FROM extsvc.dpus d WHERE d.dpu_node_name = ANY (coalesce(node_names, '{}')))) w
$fn$;
COMMENT ON FUNCTION extsvc.mark_dpus_due_by_names(text[], text[]) IS
  'Worker (watcher): makes the DPUs due whose DPUDevice or Node (by name) changed in the watch caches; returns every DPU concerned and whether this call made it due.';

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
CREATE FUNCTION extsvc.mark_service_dpus_due(service_ids uuid[])
RETURNS TABLE (dpu_machine_id text, woken boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT w.dpu_machine_id, w.woken FROM extsvc._wake_dpus(ARRAY(
    SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
     WHERE a.service_id = ANY (coalesce(service_ids, '{}')) AND a.deployment_state <> 'RUNNING'
    UNION
    SELECT x.dpu_machine_id FROM extsvc.site_service_dpu_status x
     WHERE x.service_id = ANY (coalesce(service_ids, '{}')) AND x.deployment_state <> 'RUNNING')) w
$fn$;
COMMENT ON FUNCTION extsvc.mark_service_dpus_due(uuid[]) IS
  'Worker (watcher): makes due the DPUs not yet RUNNING for these services, whose context (a FailedCreate event, DPF''s Ready condition) changed; returns every DPU concerned and whether this call made it due.';

-- The rows a watch event just woke, claimed by id before the queue's backlog:
-- their passes read the watch caches and make no call, so they must not wait
-- behind label patches paced by the client's rate limit (a fleet attach
-- showed no RUNNING before the last of 1000 patches). Same shape and lease as
-- extsvc.claim; only due, unleased rows among ids, in key order, SKIP LOCKED.
CREATE FUNCTION extsvc.claim_ids(queue text, worker text, ids text[], lease_seconds integer DEFAULT 60)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, work jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
BEGIN
  SELECT * INTO q FROM extsvc._worker_queue(claim_ids.queue);
  RETURN QUERY EXECUTE format($q$
    WITH due AS (
      SELECT r.%2$I AS id
        FROM extsvc.%1$I r
       WHERE r.%2$I = ANY ($3::%4$s[])
         AND r.next_due_at <= now()
         AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
       ORDER BY r.%2$I
         FOR UPDATE SKIP LOCKED
    ), claimed AS (
      UPDATE extsvc.%1$I r
         SET lease_owner = $1, lease_token = gen_random_uuid(),
             lease_expires_at = now() + make_interval(secs => $2), last_attempt_at = now()
        FROM due
       WHERE r.%2$I = due.id
      RETURNING r.%2$I AS id, r.state_version, r.lease_token, r.attempts
    )
    SELECT c.id::text, c.state_version, c.lease_token, extsvc.%3$I(c.id, c.attempts) FROM claimed c$q$,
    q.queue_table, q.key_column, q.work_function, q.key_type)
  USING claim_ids.worker, claim_ids.lease_seconds, coalesce(claim_ids.ids, '{}');
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_ids(text, text, text[], integer) IS
  'Worker (watcher): lease the due, unleased rows among ids (those a watch event just woke), before the queue''s backlog; same result as extsvc.claim.';
