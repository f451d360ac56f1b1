-- The worker's side of the queue. A worker claims due rows (stamping a lease),
-- commits, talks to Kubernetes outside any transaction, then records the
-- outcome with a compare-and-swap on (state_version, lease_token).

-- Exponential backoff with positive jitter, bounded by extsvc.retry_cap and
-- never shorter than the server's Retry-After, which is itself honoured only up
-- to extsvc.retry_cap (clamped as a number first: 1e13 s must not overflow the
-- interval and lose the outcome).
CREATE FUNCTION extsvc._backoff(p_attempts integer, p_retry_after_s double precision DEFAULT NULL)
RETURNS interval LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  WITH cfg AS (
    SELECT coalesce(nullif(current_setting('extsvc.retry_base', true), ''), '500ms')::interval AS base,
           coalesce(nullif(current_setting('extsvc.retry_cap', true), ''), '300s')::interval AS cap)
  SELECT greatest(
           least(cfg.cap, cfg.base * power(2, least(greatest(p_attempts, 1) - 1, 30)))
             * (1 + 0.2 * random()),
           least(coalesce(p_retry_after_s, 0), extract(epoch FROM cfg.cap)::double precision)
             * interval '1 second')
  FROM cfg
$fn$;

-- One row that can no longer be rendered (data stored by an older version,
-- changed by hand) must not fail the whole claim and stall the queue: its
-- error is returned instead, and the worker marks that service FAILED.
-- Resource errors and cancellations are not swallowed.
CREATE FUNCTION extsvc._render_for_worker(p_service_id uuid, p_version text, p_revision integer,
                                          p_data jsonb, p_namespace text,
                                          OUT desired jsonb, OUT render_error text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  desired := extsvc._render_dpuservice(p_service_id, p_version, p_revision, p_data, p_namespace);
EXCEPTION WHEN OTHERS THEN
  IF SQLSTATE IN ('53000', '53100', '53200', '53300', '53400', '57014', '57P01', '57P02', '57P03',
                  '55P03', '40001', '40P01') THEN
    RAISE;
  END IF;
  desired := NULL;
  render_error := left(SQLERRM, 500);
END
$fn$;

CREATE FUNCTION extsvc.claim_reconciliations(worker text, batch_size integer DEFAULT 32,
                                             lease_seconds integer DEFAULT 60)
RETURNS TABLE (service_id uuid, state_version bigint, lease_token uuid, lifecycle_state text,
               deployment_scope text, dpf_service_name text, attachable_version text,
               desired_revision integer, applied_revision integer, attempts integer,
               desired jsonb, placement_clear boolean, render_error text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.service_id
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY r.next_due_at
     LIMIT greatest(claim_reconciliations.batch_size, 1)
       FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE extsvc.dpf_extension_service_reconciliations r
       SET lease_owner = claim_reconciliations.worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => claim_reconciliations.lease_seconds),
           last_attempt_at = now()
      FROM due
     WHERE r.service_id = due.service_id
    RETURNING r.service_id, r.state_version, r.lease_token, r.attempts
  )
  SELECT c.service_id, c.state_version, c.lease_token, s.lifecycle_state, s.deployment_scope,
         s.dpf_service_name, s.attachable_version, s.desired_revision, s.applied_revision, c.attempts,
         r.desired,
         -- an ALL_DPUS service is deleted only after its labels are gone everywhere
         CASE WHEN s.deployment_scope = 'ALL_DPUS' AND s.lifecycle_state = 'DELETING'
              THEN extsvc._site_service_cleared(s.service_id) ELSE true END,
         r.render_error
    FROM claimed c
    JOIN extsvc.service_records s ON s.service_id = c.service_id
    JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
    CROSS JOIN LATERAL extsvc._render_for_worker(s.service_id, s.attachable_version, h.revision, h.data,
                                                 extsvc._namespace()) r;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_reconciliations(text, integer, integer) IS
  'Worker: lease up to batch_size due DPF services (FOR UPDATE SKIP LOCKED) and return what to do for each.';

-- Records one outcome. outcome is one of
--   transition  lifecycle change to new_state for reason (READY, DELETED, FAILED)
--   event       same-state event (drift_recreated, drift_patched) and done
--   done        nothing changed; nothing more to do until new intent or drift
--   retry       transient failure: back off (attempts + 1), keep the error
--   poll        waiting on the cluster (finalizers): check again after a backoff
-- Returns 'applied', 'stale' (intent changed meanwhile: re-queued at once) or
-- 'lost' (the lease is gone; nothing written).
CREATE FUNCTION extsvc.complete_reconciliation(
    service_id uuid, state_version bigint, lease_token uuid, outcome text,
    new_state text DEFAULT NULL, reason text DEFAULT NULL, message text DEFAULT NULL,
    applied_revision integer DEFAULT NULL, http_status integer DEFAULT NULL,
    retry_after_s double precision DEFAULT NULL, observed_generation bigint DEFAULT NULL,
    observed_resource_version text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r extsvc.dpf_extension_service_reconciliations;
  s extsvc.service_records;
  o text := complete_reconciliation.outcome;
BEGIN
  SELECT * INTO r FROM extsvc.dpf_extension_service_reconciliations q
   WHERE q.service_id = complete_reconciliation.service_id FOR UPDATE;
  IF NOT FOUND OR r.lease_token IS DISTINCT FROM complete_reconciliation.lease_token THEN
    RETURN 'lost';
  END IF;
  IF r.state_version <> complete_reconciliation.state_version THEN
    -- newer intent arrived while the worker was talking to Kubernetes:
    -- drop this result and let the next pass work from the newest intent
    UPDATE extsvc.dpf_extension_service_reconciliations q
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
     WHERE q.service_id = r.service_id;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;
  SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = r.service_id FOR UPDATE;

  IF o = 'transition' THEN
    IF complete_reconciliation.new_state = 'READY' AND complete_reconciliation.applied_revision IS NOT NULL THEN
      UPDATE extsvc.helm_revisions h SET applied_at = now()
       WHERE h.service_id = s.service_id AND h.revision = complete_reconciliation.applied_revision
         AND h.applied_at IS NULL;
    END IF;
    UPDATE extsvc.service_records x
       SET lifecycle_state = complete_reconciliation.new_state, state_actor = 'worker',
           state_reason = complete_reconciliation.reason,
           applied_revision = CASE WHEN complete_reconciliation.new_state = 'READY'
                                   THEN coalesce(complete_reconciliation.applied_revision, x.applied_revision)
                                   ELSE x.applied_revision END,
           status_message = complete_reconciliation.message,
           deleted_at = CASE WHEN complete_reconciliation.new_state = 'DELETED' THEN now() END,
           updated_at = now()
     WHERE x.service_id = s.service_id;
    -- A newly applied revision needs new evidence: a RUNNING observed for the
    -- previous revision no longer proves anything (SPEC 2.8).
    IF complete_reconciliation.new_state = 'READY'
       AND complete_reconciliation.applied_revision IS DISTINCT FROM s.applied_revision THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = 'PENDING', updated_at = now(),
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     complete_reconciliation.applied_revision)
       WHERE a.service_id = s.service_id AND a.deployment_state = 'RUNNING';
      UPDATE extsvc.site_service_dpu_status x
         SET deployment_state = 'PENDING',
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     complete_reconciliation.applied_revision)
       WHERE x.service_id = s.service_id AND x.deployment_state = 'RUNNING';
    END IF;
    IF complete_reconciliation.new_state = 'DELETED' THEN
      UPDATE extsvc.service_versions v SET deleted_at = now()
       WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
    END IF;
  ELSIF o = 'event' THEN
    PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'worker', complete_reconciliation.reason,
                                 complete_reconciliation.message, s.applied_revision);
  ELSIF o NOT IN ('done', 'retry', 'poll') THEN
    PERFORM extsvc._raise('22023', 'unknown reconciliation outcome', format('outcome: %s', o),
                          'Use transition, event, done, retry or poll.');
  END IF;

  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN o = 'retry' THEN q.attempts + 1
                         WHEN o = 'poll' THEN q.attempts + 1 ELSE 0 END,
         next_due_at = CASE
           WHEN o IN ('retry', 'poll') THEN now() + extsvc._backoff(q.attempts + 1, complete_reconciliation.retry_after_s)
           ELSE NULL END,
         last_error = CASE WHEN o = 'retry' THEN complete_reconciliation.message
                           WHEN o = 'poll' THEN q.last_error ELSE NULL END,
         last_http_status = CASE WHEN o = 'retry' THEN complete_reconciliation.http_status
                                 WHEN o = 'poll' THEN q.last_http_status ELSE NULL END,
         last_error_at = CASE WHEN o = 'retry' THEN now() WHEN o = 'poll' THEN q.last_error_at ELSE NULL END,
         last_success_at = CASE WHEN o IN ('transition', 'event', 'done', 'poll') THEN now() ELSE q.last_success_at END,
         observed_generation = coalesce(complete_reconciliation.observed_generation, q.observed_generation),
         observed_resource_version = coalesce(complete_reconciliation.observed_resource_version, q.observed_resource_version)
   WHERE q.service_id = r.service_id;
  -- what the worker waits for (finalizers, a paused DPUService) or last failed
  -- on is shown to operators; written only when it changed
  IF o = 'retry' OR (o = 'poll' AND complete_reconciliation.message IS NOT NULL) THEN
    UPDATE extsvc.service_records x
       SET status_message = complete_reconciliation.message, updated_at = now()
     WHERE x.service_id = s.service_id AND x.status_message IS DISTINCT FROM complete_reconciliation.message;
  END IF;
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete_reconciliation(uuid, bigint, uuid, text, text, text, text, integer, integer, double precision, bigint, text) IS
  'Worker: record the outcome of a claimed reconciliation with compare-and-swap on state_version and lease_token.';

-- What the drift detector compares with the cluster: every DPF service that
-- should have a DPUService right now, with its desired object.
CREATE FUNCTION extsvc.resync_snapshot()
RETURNS TABLE (service_id uuid, dpf_service_name text, lifecycle_state text, desired jsonb)
-- A service whose data no longer renders is left out (its next pass marks it
-- FAILED) rather than failing the whole resync.
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, s.dpf_service_name, s.lifecycle_state, r.desired
    FROM extsvc.service_records s
    JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
    CROSS JOIN LATERAL extsvc._render_for_worker(s.service_id, s.attachable_version, h.revision, h.data,
                                                 extsvc._namespace()) r
   WHERE s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY' AND r.desired IS NOT NULL
$fn$;

-- Drift found: make a READY service due now (no-op if it is already due).
CREATE FUNCTION extsvc.mark_drift(service_id uuid, detail text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now(), last_error = coalesce(mark_drift.detail, q.last_error)
   WHERE q.service_id = mark_drift.service_id AND q.next_due_at IS NULL
     AND EXISTS (SELECT FROM extsvc.service_records s
                  WHERE s.service_id = q.service_id AND s.lifecycle_state = 'READY');
  RETURN FOUND;
END
$fn$;

-- DPF's Ready condition as observed by any pass (create/patch responses, the
-- resync LIST, a DPU pass): statuses is a JSON array of
-- {service_id, ready (boolean or null), reason, message}. Writes only rows
-- whose recorded status differs; returns how many changed.
CREATE FUNCTION extsvc.record_dpf_status(statuses jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET dpf_ready = x.ready, dpf_reason = x.reason, dpf_message = x.message, dpf_observed_at = now()
    FROM jsonb_to_recordset(coalesce(record_dpf_status.statuses, '[]')) AS x(service_id uuid, ready boolean,
                                                                             reason text, message text)
   WHERE q.service_id = x.service_id
     AND (q.dpf_ready, q.dpf_reason, q.dpf_message) IS DISTINCT FROM (x.ready, x.reason, x.message);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.record_dpf_status(jsonb) IS
  'Worker: record DPF''s Ready condition (ready, reason, message) per service as last observed; writes only differences.';

-- Fencing (issue 10) ---------------------------------------------------------

-- Extends the leases a worker still holds (compare-and-swap on lease_token and
-- lease_owner) by lease_seconds from now; returns the tokens it renewed. A
-- token missing from the result belongs to someone else by now: the worker
-- must not call Kubernetes for that row.
CREATE FUNCTION extsvc.renew_leases(worker text, lease_tokens uuid[], lease_seconds integer DEFAULT 60)
RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_expires_at = now() + make_interval(secs => renew_leases.lease_seconds)
   WHERE q.lease_token = ANY (renew_leases.lease_tokens) AND q.lease_owner = renew_leases.worker
  RETURNING q.lease_token;
  RETURN QUERY
  UPDATE extsvc.dpu_reconciliations q
     SET lease_expires_at = now() + make_interval(secs => renew_leases.lease_seconds)
   WHERE q.lease_token = ANY (renew_leases.lease_tokens) AND q.lease_owner = renew_leases.worker
  RETURNING q.lease_token;
END
$fn$;
COMMENT ON FUNCTION extsvc.renew_leases(text, uuid[], integer) IS
  'Worker: extend the leases it still holds (CAS on lease_token and lease_owner); returns the renewed tokens.';

-- A worker slot runs one process at a time: at start, leases held under its
-- name belong to its previous process (killed or crashed) and are freed, so
-- the rows are claimable at once instead of after extsvc.lease_time.
CREATE FUNCTION extsvc.release_leases(worker text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
  m integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
   WHERE q.lease_owner = release_leases.worker;
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE extsvc.dpu_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
   WHERE q.lease_owner = release_leases.worker;
  GET DIAGNOSTICS m = ROW_COUNT;
  RETURN n + m;
END
$fn$;
COMMENT ON FUNCTION extsvc.release_leases(text) IS
  'Worker: at start, free the leases its slot''s previous process held. Returns how many.';

-- The resync's cleanup: of the DPUService names listed with our ownership
-- label, those that belong to no live service version (the service is
-- DELETED, unknown, or has another current DPUService name). Called after
-- the LIST, so a service committed before its DPUService was created is seen.
CREATE FUNCTION extsvc.orphaned_dpuservices(names text[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT n FROM unnest(orphaned_dpuservices.names) AS n
   WHERE NOT EXISTS (SELECT FROM extsvc.service_records s
                      WHERE s.dpf_service_name = n AND s.service_type = 'DPF_HELM_CHART'
                        AND s.lifecycle_state <> 'DELETED')
$fn$;
COMMENT ON FUNCTION extsvc.orphaned_dpuservices(text[]) IS
  'Worker: which listed DPUService names belong to no live DPF service version (to be deleted by the resync).';

-- Operators ------------------------------------------------------------------

CREATE FUNCTION extsvc.reconcile_now(service_id uuid DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now()
    FROM extsvc.service_records s
   WHERE s.service_id = q.service_id
     AND (reconcile_now.service_id IS NULL OR q.service_id = reconcile_now.service_id)
     AND s.lifecycle_state IN ('CREATING', 'READY', 'UPDATING', 'DELETING');
  GET DIAGNOSTICS n = ROW_COUNT;
  IF reconcile_now.service_id IS NOT NULL AND n = 0 THEN
    PERFORM extsvc._raise('P0002', 'no reconcilable DPF service with that id',
                          format('service_id: %s', reconcile_now.service_id),
                          'FAILED services need extsvc.retry_service; DELETED ones are final.');
  END IF;
  PERFORM extsvc._wake();
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.reconcile_now(uuid) IS
  'Operator: make one (or every) DPF service due now and wake the workers. Returns how many.';

-- extsvc.retry_service: sql/parts/82_revisions.sql (for extsvc_api too, issue #12).

CREATE FUNCTION extsvc.worker_status(
    OUT slot integer, OUT pid integer, OUT iterations bigint, OUT claimed bigint,
    OUT completed bigint, OUT stale bigint, OUT http_requests bigint, OUT http_errors bigint,
    OUT last_activity timestamptz, OUT fenced bigint, OUT lease_renewals bigint,
    OUT orphans_deleted bigint, OUT dpus_rederived bigint, OUT leases_released bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_status';
COMMENT ON FUNCTION extsvc.worker_status() IS
  'Operator: one row per worker slot with counters since server start (needs shared_preload_libraries).';

CREATE FUNCTION extsvc.request_resync() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_request_resync';
COMMENT ON FUNCTION extsvc.request_resync() IS
  'Operator: run the drift-detecting resync pass now instead of at the next extsvc.resync_interval.';
