-- What the watcher (the worker that holds the LIST+WATCH caches, issue 11)
-- asks of the database, all in one transaction per loop iteration
-- (src/pg/worker_watch.cpp): wake exactly the rows an event concerns, and
-- claim the DPU rows it woke before the queue's backlog. Rows are locked in
-- key order (the order every writer of these tables uses), and a row leased
-- at the moment gets its state_version bumped, so the pass in flight, which
-- decided from older evidence, ends stale and runs again instead of
-- dropping the wake.

-- The DPU rows a watch event names, made due and claimed in one call (issue 24: before, the
-- watcher sent the names, got the ids back and sent them again to claim them, in a second
-- transaction). A row is named by its DPUDevice or its DPU-cluster Node (their labels, the
-- service pods on the Node), or by a service whose context changed (a DaemonSet FailedCreate
-- event, DPF's Ready condition) while the DPU is not RUNNING for it yet, so its PENDING message
-- says more now.
--
-- Every named row is locked in key order (the order of every writer of these rows,
-- _lock_dpu_work) and waited for: a wake must not be skipped because an API call holds the row
-- for a moment, so there is no SKIP LOCKED here; only the watcher claims DPU rows in watch mode,
-- so no other claim competes for them. A row leased at the moment gets its state_version
-- bumped, so the pass in flight, which decided from older evidence, ends stale and runs again.
-- Of the named rows without a running lease, the first max_claims in key order are leased to
-- worker in the same UPDATE (none when worker is NULL: the watcher may not work them yet):
-- their passes read the watch caches and make no call, so the watcher works them before the
-- queue's backlog instead of behind label patches paced by the client's rate limit (a fleet
-- attach showed no RUNNING before the last of 1000 patches).
--
-- Returns the claimed rows as extsvc.claim does, plus woken (whether this call made the row
-- due; a row that was due already is not woken twice); rows it woke but did not claim come
-- with lease_token and work NULL. The work is read by a second statement, as extsvc.claim
-- reads it, whose snapshot is newer than the lease's.
CREATE FUNCTION extsvc.mark_and_claim_dpus(device_names text[], node_names text[], service_ids uuid[],
                                           worker text, lease_seconds integer DEFAULT 60,
                                           max_claims integer DEFAULT 256)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, work jsonb, woken boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_ids text[];
  v_versions bigint[];
  v_tokens uuid[];
  v_attempts integer[];
  v_woken boolean[];
BEGIN
  WITH hit AS (
    SELECT d.machine_id FROM extsvc.dpus d
     WHERE d.dpu_device_name = ANY (coalesce(mark_and_claim_dpus.device_names, '{}'))
    UNION
    SELECT d.machine_id FROM extsvc.dpus d
     WHERE d.dpu_node_name = ANY (coalesce(mark_and_claim_dpus.node_names, '{}'))
    UNION
    SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
     WHERE a.service_id = ANY (coalesce(mark_and_claim_dpus.service_ids, '{}')) AND a.deployment_state <> 'RUNNING'
    UNION
    SELECT x.dpu_machine_id FROM extsvc.site_service_dpu_status x
     WHERE x.service_id = ANY (coalesce(mark_and_claim_dpus.service_ids, '{}')) AND x.deployment_state <> 'RUNNING'
  ), locked AS (
    -- the locked (latest) version of each row decides
    SELECT r.dpu_machine_id,
           (r.next_due_at IS NULL OR r.next_due_at > now() OR r.lease_token IS NOT NULL) AS wake,
           (r.lease_expires_at IS NULL OR r.lease_expires_at < now()) AS free
      FROM extsvc.dpu_reconciliations r
     WHERE r.dpu_machine_id IN (SELECT h.machine_id FROM hit h)
     ORDER BY r.dpu_machine_id
       FOR NO KEY UPDATE OF r
  ), decided AS (
    SELECT l.dpu_machine_id, l.wake,
           l.free AND mark_and_claim_dpus.worker IS NOT NULL
             AND count(*) FILTER (WHERE l.free) OVER (ORDER BY l.dpu_machine_id)
                 <= greatest(coalesce(mark_and_claim_dpus.max_claims, 0), 0) AS claim
      FROM locked l
  ), changed AS (
    UPDATE extsvc.dpu_reconciliations r
       SET next_due_at = CASE WHEN d.wake THEN now() ELSE r.next_due_at END,
           state_version = r.state_version + CASE WHEN r.lease_token IS NOT NULL THEN 1 ELSE 0 END,
           lease_owner = CASE WHEN d.claim THEN mark_and_claim_dpus.worker ELSE r.lease_owner END,
           lease_token = CASE WHEN d.claim THEN gen_random_uuid() ELSE r.lease_token END,
           lease_expires_at = CASE WHEN d.claim THEN now() + make_interval(secs => mark_and_claim_dpus.lease_seconds)
                                   ELSE r.lease_expires_at END,
           last_attempt_at = CASE WHEN d.claim THEN now() ELSE r.last_attempt_at END
      FROM decided d
     WHERE r.dpu_machine_id = d.dpu_machine_id AND (d.wake OR d.claim)
    RETURNING r.dpu_machine_id, r.state_version, CASE WHEN d.claim THEN r.lease_token END AS lease_token,
              r.attempts, d.wake
  ), added AS (
    -- a DPU without a work row (register_dpu makes one; a row deleted by hand): due now, claimed
    -- by the queue's next claim. Only while this worker may write (worker given): a restored
    -- copy's worker, paused, saw DPUs whose work rows pg_restore had not loaded yet, and the
    -- row it added failed the restore's COPY (23505); the resync of a takeover adds them then
    INSERT INTO extsvc.dpu_reconciliations AS r (dpu_machine_id, next_due_at)
    SELECT h.machine_id, now() FROM hit h
     WHERE mark_and_claim_dpus.worker IS NOT NULL
       AND NOT EXISTS (SELECT FROM locked l WHERE l.dpu_machine_id = h.machine_id)
     ORDER BY h.machine_id
    ON CONFLICT (dpu_machine_id) DO NOTHING
    RETURNING r.dpu_machine_id, r.state_version, NULL::uuid AS lease_token, r.attempts, true AS wake
  )
  SELECT array_agg(c.dpu_machine_id ORDER BY c.lease_token IS NULL, c.dpu_machine_id),
         array_agg(c.state_version ORDER BY c.lease_token IS NULL, c.dpu_machine_id),
         array_agg(c.lease_token ORDER BY c.lease_token IS NULL, c.dpu_machine_id),
         array_agg(c.attempts ORDER BY c.lease_token IS NULL, c.dpu_machine_id),
         array_agg(c.wake ORDER BY c.lease_token IS NULL, c.dpu_machine_id)
    INTO v_ids, v_versions, v_tokens, v_attempts, v_woken
    FROM (SELECT * FROM changed UNION ALL SELECT * FROM added) c;
  IF v_ids IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY
    SELECT c.id, c.state_version, c.lease_token,
           CASE WHEN c.lease_token IS NOT NULL THEN extsvc._dpu_work(c.id, c.attempts) END, c.woken
      FROM unnest(v_ids, v_versions, v_tokens, v_attempts, v_woken)
           WITH ORDINALITY c(id, state_version, lease_token, attempts, woken, o)
     ORDER BY c.o;
END
$fn$;
COMMENT ON FUNCTION extsvc.mark_and_claim_dpus(text[], text[], uuid[], text, integer, integer) IS
  'Worker (watcher): in one statement, makes due the DPUs whose DPUDevice or Node (by name) changed in the watch caches, or not RUNNING yet for a service whose context changed, and leases up to max_claims of them to worker (none when NULL); returns the claimed rows as extsvc.claim does (woken: made due by this call), then the rows it woke but did not claim (lease_token and work NULL). A DPU without a work row gets one only when worker is given.';

-- Services whose DPUService changed: a DELETING one waits for DPF's
-- finalizers, and the watch says when the object went. every_deleting: a
-- fresh cache's first list (a started or restarted watcher) has no event for
-- an object that went before it, so every DELETING service is woken once and
-- its pass finds out.
CREATE FUNCTION extsvc.wake_services(service_ids uuid[], every_deleting boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  WITH locked AS (
    SELECT q.service_id FROM extsvc.dpf_extension_service_reconciliations q
      JOIN extsvc.service_records s USING (service_id)
     WHERE (wake_services.every_deleting OR q.service_id = ANY (coalesce(wake_services.service_ids, '{}')))
       AND s.lifecycle_state = 'DELETING'
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
COMMENT ON FUNCTION extsvc.wake_services(uuid[], boolean) IS
  'Worker (watcher): makes DELETING services due whose DPUService changed (finalizers removed, object gone), or every DELETING service (every_deleting: after a fresh cache''s first list); returns how many.';

-- The drift check of the services a watch event concerned: their work
-- objects, as resync_snapshot gives every READY service's.
CREATE FUNCTION extsvc.resync_snapshot_of(service_ids uuid[])
RETURNS TABLE (service_id uuid, work jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- PL/pgSQL for its kept plan (see extsvc.orphaned_dpuservices)
  RETURN QUERY
  SELECT s.service_id, extsvc._service_work(s.service_id, 0)
    FROM extsvc.service_records s
   WHERE s.service_id = ANY (coalesce(resync_snapshot_of.service_ids, '{}'))
     AND s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY';
END
$fn$;
COMMENT ON FUNCTION extsvc.resync_snapshot_of(uuid[]) IS
  'Worker (watcher): the READY DPF services among service_ids with their work objects, for the drift check of what a watch event changed.';

