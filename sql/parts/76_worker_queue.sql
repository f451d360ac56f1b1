-- The worker's queue: due rows of two tables (one per DPF service, one per
-- DPU) behind one shape. A worker claims due rows (stamping a lease) and
-- commits, talks to Kubernetes outside any transaction, then records the
-- outcome with a compare-and-swap on (state_version, lease_token):
--   extsvc.claim(queue, worker, batch_size, lease_seconds)
--     -> (id, state_version, lease_token, work jsonb)
--   extsvc.complete(queue, id, state_version, lease_token, outcome jsonb)
--     -> 'applied' | 'stale' | 'lost'
-- The JSON of work and outcome is the worker's wire schema, defined once on
-- the C++ side in src/controller/wire.hpp and described in docs/worker.md.

-- Exponential backoff with positive jitter, bounded by extsvc.retry_cap and
-- never shorter than the server's Retry-After, which is itself honoured only up
-- to extsvc.retry_cap (clamped as a number first: 1e13 s must not overflow the
-- interval and lose the outcome).
CREATE FUNCTION extsvc._backoff(p_attempts integer, p_retry_after_s double precision DEFAULT NULL)
RETURNS interval LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  WITH cfg AS (
    SELECT coalesce(nullif(extsvc._setting('extsvc.retry_base'), ''), '500ms')::interval AS base,
           coalesce(nullif(extsvc._setting('extsvc.retry_cap'), ''), '300s')::interval AS cap)
  SELECT greatest(
           least(cfg.cap, cfg.base * power(2, least(greatest(p_attempts, 1) - 1, 30)))
             * (1 + 0.2 * random()),
           least(coalesce(p_retry_after_s, 0), extract(epoch FROM cfg.cap)::double precision)
             * interval '1 second')
  FROM cfg
$fn$;

-- The queues by name: their table, key column and the functions that claim
-- due rows, build a claimed row's work and apply an outcome. The one place
-- that knows them.
-- A row's id travels as text (a service's uuid, a DPU's NICo MachineId);
-- key_type is the key column's own type.
CREATE FUNCTION extsvc._worker_queues()
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text, key_type text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  VALUES ('service', 'dpf_extension_service_reconciliations', 'service_id', '_service_work', '_complete_service',
          '_claim_service', 'uuid'),
         ('dpu', 'dpu_reconciliations', 'dpu_machine_id', '_dpu_work', '_complete_dpu', '_claim_dpu', 'text')
$fn$;

CREATE FUNCTION extsvc._worker_queue(p_queue text)
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text, key_type text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM extsvc._worker_queues() w WHERE w.queue = p_queue;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('22023', 'unknown worker queue', format('queue: %s', extsvc._token(p_queue)),
                          'Use service or dpu.');
  END IF;
END
$fn$;

-- The queue's claim function (_claim_service, _claim_dpu below) leases the
-- rows with one static statement; each queue's two statements here are
-- static too, so PL/pgSQL keeps every plan for the session (no statement is
-- planned at each call).
CREATE FUNCTION extsvc.claim(queue text, worker text, batch_size integer DEFAULT 32,
                             lease_seconds integer DEFAULT 60)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, work jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_ids text[];
  v_versions bigint[];
  v_tokens uuid[];
  v_attempts integer[];
BEGIN
  PERFORM extsvc._worker_queue(claim.queue);  -- an unknown queue is refused (22023)
  -- Two statements, not one: the claim function (VOLATILE) leases with a
  -- snapshot of its own, taken after the calling statement's, and the work
  -- functions (STABLE) read with the calling statement's. In one statement a
  -- row committed between the two (a DPU registered, a service created at
  -- that moment) was leased but its work read NULL, and the worker crashed
  -- on it (strlen of a NULL pointer; SIGSEGV restarted the whole server).
  -- The second statement's snapshot is newer than the lease's: every leased
  -- row's work is visible.
  IF claim.queue = 'service' THEN
    SELECT array_agg(c.id::text ORDER BY c.o), array_agg(c.state_version ORDER BY c.o),
           array_agg(c.lease_token ORDER BY c.o), array_agg(c.attempts ORDER BY c.o)
      INTO v_ids, v_versions, v_tokens, v_attempts
      FROM extsvc._claim_service(claim.worker, claim.batch_size, claim.lease_seconds)
           WITH ORDINALITY c(id, state_version, lease_token, attempts, o);
    IF v_ids IS NULL THEN
      RETURN;
    END IF;
    RETURN QUERY
      SELECT c.id, c.state_version, c.lease_token, extsvc._service_work(c.id::uuid, c.attempts)
        FROM unnest(v_ids, v_versions, v_tokens, v_attempts)
             WITH ORDINALITY c(id, state_version, lease_token, attempts, o)
       ORDER BY c.o;
  ELSE
    SELECT array_agg(c.id ORDER BY c.o), array_agg(c.state_version ORDER BY c.o),
           array_agg(c.lease_token ORDER BY c.o), array_agg(c.attempts ORDER BY c.o)
      INTO v_ids, v_versions, v_tokens, v_attempts
      FROM extsvc._claim_dpu(claim.worker, claim.batch_size, claim.lease_seconds)
           WITH ORDINALITY c(id, state_version, lease_token, attempts, o);
    IF v_ids IS NULL THEN
      RETURN;
    END IF;
    RETURN QUERY
      SELECT c.id, c.state_version, c.lease_token, extsvc._dpu_work(c.id, c.attempts)
        FROM unnest(v_ids, v_versions, v_tokens, v_attempts)
             WITH ORDINALITY c(id, state_version, lease_token, attempts, o)
       ORDER BY c.o;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim(text, text, integer, integer) IS
  'Worker: lease up to batch_size due rows of a queue (service or dpu) with FOR UPDATE SKIP LOCKED; returns each row''s id, state_version, lease_token and its work (docs/worker.md, wire schema).';

-- The claim of one queue: leases up to batch_size due rows and returns them
-- with their attempts (extsvc.claim adds the work). A row is claimable once
-- next_due_at has passed and no lease runs, i.e. from greatest(next_due_at,
-- lease_expires_at) on (greatest ignores a NULL lease). The queue's
-- _claimable index is in that order: the scan starts at the row claimable
-- longest and stops after batch_size rows it could lock, and rows under a
-- running lease sort after now() and are never read, however many there are
-- (docs/worker.md, "The queue's indexes"). The second and third conditions
-- are the definition of due; the first bounds the index scan. enable_sort is
-- off so that the plan is that ordered scan whatever the statistics say: the
-- number of due rows swings from none to all (a resync marks every DPU due)
-- faster than ANALYZE follows, and a plan made when few were due (all of
-- them fetched, then sorted) would be kept for the session.
CREATE FUNCTION extsvc._claim_service(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET enable_sort = off AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.service_id
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE greatest(r.next_due_at, r.lease_expires_at) <= now()
       AND r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY greatest(r.next_due_at, r.lease_expires_at)
     LIMIT greatest(p_batch_size, 1)
       FOR UPDATE SKIP LOCKED
  )
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET lease_owner = p_worker, lease_token = gen_random_uuid(),
         lease_expires_at = now() + make_interval(secs => p_lease_seconds), last_attempt_at = now()
    FROM due
   WHERE r.service_id = due.service_id
  RETURNING r.service_id, r.state_version, r.lease_token, r.attempts;
END
$fn$;

CREATE FUNCTION extsvc._claim_dpu(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET enable_sort = off AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.dpu_machine_id
      FROM extsvc.dpu_reconciliations r
     WHERE greatest(r.next_due_at, r.lease_expires_at) <= now()
       AND r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY greatest(r.next_due_at, r.lease_expires_at)
     LIMIT greatest(p_batch_size, 1)
       FOR UPDATE SKIP LOCKED
  )
  UPDATE extsvc.dpu_reconciliations r
     SET lease_owner = p_worker, lease_token = gen_random_uuid(),
         lease_expires_at = now() + make_interval(secs => p_lease_seconds), last_attempt_at = now()
    FROM due
   WHERE r.dpu_machine_id = due.dpu_machine_id
  RETURNING r.dpu_machine_id, r.state_version, r.lease_token, r.attempts;
END
$fn$;

-- Records one outcome (a JSON object of the wire schema) with a
-- compare-and-swap. Returns 'applied', 'stale' (intent changed meanwhile:
-- the row is due again at once and the result dropped) or 'lost' (the lease
-- is gone; nothing written).
CREATE FUNCTION extsvc.complete(queue text, id text, state_version bigint, lease_token uuid, outcome jsonb)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_token uuid;
  v_version bigint;
BEGIN
  PERFORM extsvc._worker_queue(complete.queue);  -- an unknown queue is refused (22023)
  IF jsonb_typeof(complete.outcome) IS DISTINCT FROM 'object' THEN
    PERFORM extsvc._raise('22023', 'a worker outcome must be a JSON object', 'argument: outcome',
                          'See the wire schema in docs/worker.md.');
  END IF;
  IF complete.queue = 'service' THEN
    -- Lock order of a service's writers (issue 22): the service row first,
    -- then its reconciliation row. The API's update, delete and retry hold the
    -- service row when they mark new intent on the reconciliation row
    -- (_intent_changed); a completion that took the reconciliation row first
    -- and then the service row (_complete_service) deadlocked with them
    -- (40P01, update_service against a READY completion, found by
    -- test/nico/concurrency.py). The service row's lock is the one
    -- _complete_service takes anyway.
    PERFORM FROM extsvc.service_records s WHERE s.service_id = complete.id::uuid FOR NO KEY UPDATE;
    SELECT r.lease_token, r.state_version INTO v_token, v_version
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE r.service_id = complete.id::uuid FOR UPDATE;
  ELSE
    SELECT r.lease_token, r.state_version INTO v_token, v_version
      FROM extsvc.dpu_reconciliations r
     WHERE r.dpu_machine_id = complete.id FOR UPDATE;
  END IF;
  IF NOT FOUND OR v_token IS DISTINCT FROM complete.lease_token THEN
    RETURN 'lost';
  END IF;
  IF v_version <> complete.state_version THEN
    -- newer intent arrived while the worker was talking to Kubernetes:
    -- drop this result and let the next pass work from the newest intent
    IF complete.queue = 'service' THEN
      UPDATE extsvc.dpf_extension_service_reconciliations r
         SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
       WHERE r.service_id = complete.id::uuid;
    ELSE
      UPDATE extsvc.dpu_reconciliations r
         SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
       WHERE r.dpu_machine_id = complete.id;
    END IF;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;
  IF complete.queue = 'service' THEN
    PERFORM extsvc._complete_service(complete.id::uuid, complete.outcome);
  ELSE
    PERFORM extsvc._complete_dpu(complete.id, complete.outcome);
  END IF;
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete(text, text, bigint, uuid, jsonb) IS
  'Worker: record the outcome of a claimed row (id as claim returned it: a service uuid or a DPU MachineId, as text) (wire schema, docs/worker.md) with compare-and-swap on state_version and lease_token; applied, stale or lost.';

-- The service queue --------------------------------------------------------

-- What a worker needs for one DPF service: its identity and lifecycle, and
-- the normalized Helm data of the desired revision, from which the worker
-- renders the DPUService (core::render_dpuservice, the function
-- extsvc.render_dpuservice calls too). An ALL_DPUS service being deleted is
-- deleted only after its labels are gone everywhere (placement_clear).
CREATE FUNCTION extsvc._service_work(p_id uuid, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'service_id', s.service_id, 'lifecycle_state', s.lifecycle_state,
           'deployment_scope', s.deployment_scope, 'dpf_service_name', s.dpf_service_name,
           'attachable_version', s.attachable_version, 'desired_revision', s.desired_revision,
           'applied_revision', s.applied_revision, 'attempts', p_attempts,
           'placement_clear', CASE WHEN s.deployment_scope = 'ALL_DPUS' AND s.lifecycle_state = 'DELETING'
                                   THEN extsvc._site_service_cleared(s.service_id) ELSE true END,
           'namespace', extsvc._namespace(), 'helm_data', h.data)
    INTO v_work
    FROM extsvc.service_records s
    LEFT JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
   WHERE s.service_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a service outcome. outcome.outcome is one of
--   transition  lifecycle change to new_state for reason (READY, DELETED, FAILED)
--   event       same-state event (drift_recreated, drift_patched) and done
--   done        nothing changed; nothing more to do until new intent or drift
--   retry       transient failure: back off (attempts + 1), keep the error
--   poll        waiting on the cluster (finalizers): check again after a backoff
CREATE FUNCTION extsvc._complete_service(p_id uuid, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  o text := p_outcome->>'outcome';
  v_new_state text := p_outcome->>'new_state';
  v_reason text := p_outcome->>'reason';
  v_message text := p_outcome->>'message';
  v_applied integer := (p_outcome->>'applied_revision')::integer;
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_generation bigint := (p_outcome->>'observed_generation')::bigint;
  v_resource_version text := p_outcome->>'observed_resource_version';
BEGIN
  -- FOR NO KEY UPDATE (issue 13): a DPU completion holding a DPU's work row takes
  -- KEY SHARE on the service (site status rows); FOR UPDATE made the two wait
  -- on each other (a worker-against-worker 40P01 seen while fixing the API's
  -- lock order, docs/reliability.md)
  SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = p_id FOR NO KEY UPDATE;

  IF o = 'transition' THEN
    IF v_new_state = 'READY' AND v_applied IS NOT NULL THEN
      UPDATE extsvc.helm_revisions h SET applied_at = now()
       WHERE h.service_id = s.service_id AND h.revision = v_applied
         AND h.applied_at IS NULL;
    END IF;
    UPDATE extsvc.service_records x
       SET lifecycle_state = v_new_state, state_actor = 'worker',
           state_reason = v_reason,
           applied_revision = CASE WHEN v_new_state = 'READY'
                                   THEN coalesce(v_applied, x.applied_revision)
                                   ELSE x.applied_revision END,
           status_message = v_message,
           deleted_at = CASE WHEN v_new_state = 'DELETED' THEN now() END,
           updated_at = now()
     WHERE x.service_id = s.service_id;
    -- A newly applied revision needs new evidence: a RUNNING observed for the
    -- previous revision no longer proves anything (SPEC 2.8).
    IF v_new_state = 'READY'
       AND v_applied IS DISTINCT FROM s.applied_revision THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = 'PENDING', updated_at = now(),
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE a.service_id = s.service_id AND a.deployment_state = 'RUNNING';
      UPDATE extsvc.site_service_dpu_status x
         SET deployment_state = 'PENDING',
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE x.service_id = s.service_id AND x.deployment_state = 'RUNNING';
    END IF;
    IF v_new_state = 'DELETED' THEN
      UPDATE extsvc.service_versions v SET deleted_at = now()
       WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
    END IF;
  ELSIF o = 'event' THEN
    PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'worker', v_reason,
                                 v_message, s.applied_revision);
  ELSIF o NOT IN ('done', 'retry', 'poll') THEN
    PERFORM extsvc._raise('22023', 'unknown reconciliation outcome', format('outcome.outcome: %s', extsvc._token(o)),
                          'Use transition, event, done, retry or poll.');
  END IF;

  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN o = 'retry' THEN q.attempts + 1
                         WHEN o = 'poll' THEN q.attempts + 1 ELSE 0 END,
         next_due_at = CASE
           WHEN o IN ('retry', 'poll') THEN now() + extsvc._backoff(q.attempts + 1, v_retry_after)
           ELSE NULL END,
         last_error = CASE WHEN o = 'retry' THEN v_message
                           WHEN o = 'poll' THEN q.last_error ELSE NULL END,
         last_http_status = CASE WHEN o = 'retry' THEN v_http_status
                                 WHEN o = 'poll' THEN q.last_http_status ELSE NULL END,
         last_error_at = CASE WHEN o = 'retry' THEN now() WHEN o = 'poll' THEN q.last_error_at ELSE NULL END,
         last_success_at = CASE WHEN o IN ('transition', 'event', 'done', 'poll') THEN now() ELSE q.last_success_at END,
         observed_generation = coalesce(v_generation, q.observed_generation),
         observed_resource_version = coalesce(v_resource_version, q.observed_resource_version)
   WHERE q.service_id = p_id;
  -- what the worker waits for (finalizers, a paused DPUService) or last failed
  -- on is shown to operators; written only when it changed
  IF o = 'retry' OR (o = 'poll' AND v_message IS NOT NULL) THEN
    UPDATE extsvc.service_records x
       SET status_message = v_message, updated_at = now()
     WHERE x.service_id = s.service_id AND x.status_message IS DISTINCT FROM v_message;
  END IF;
END
$fn$;

-- The DPU queue ------------------------------------------------------------

-- What a worker needs for one DPU: its names, the label keys it should carry
-- and every attachment or site-wide service to observe on it (items; each
-- {kind, instance_id, service_id, version, label_key, dpf_service_name,
-- applied_revision, wanted}).
CREATE FUNCTION extsvc._dpu_work(p_id text, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'dpu_machine_id', d.machine_id, 'device_name', d.dpu_device_name,
           'node_name', d.dpu_node_name, 'deregistered', d.deregistered_at IS NOT NULL,
           'attempts', p_attempts,
           'wanted_keys', CASE WHEN d.deregistered_at IS NOT NULL THEN '[]'::jsonb
             ELSE coalesce((SELECT jsonb_agg(DISTINCT w.label_key ORDER BY w.label_key)
                              FROM extsvc.dpu_desired_labels w WHERE w.dpu_machine_id = p_id),
                           '[]'::jsonb) END,
           'items', coalesce((
             SELECT jsonb_agg(x) FROM (
               SELECT jsonb_build_object('kind', 'attachment', 'instance_id', a.instance_id,
                        'service_id', a.service_id, 'version', a.version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', a.placement_state = 'ACTIVE' AND d.deregistered_at IS NULL) AS x
                 FROM extsvc.dpf_extension_service_attachments a
                 JOIN extsvc.service_records s USING (service_id)
                WHERE a.dpu_machine_id = p_id
               UNION ALL
               SELECT jsonb_build_object('kind', 'site', 'instance_id', NULL, 'service_id', s.service_id,
                        'version', s.attachable_version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', d.deregistered_at IS NULL
                                  AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
                 FROM extsvc.service_records s
                WHERE s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
                  AND (extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                       OR s.lifecycle_state = 'DELETING'
                       OR EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                                   WHERE x.service_id = s.service_id AND x.dpu_machine_id = p_id
                                     AND x.deployment_state <> 'TERMINATED'))
             ) items), '[]'::jsonb))
    INTO v_work
    FROM extsvc.dpus d
   WHERE d.machine_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a DPU outcome: outcome.outcome 'observed' (results is an array of
-- {kind, instance_id, service_id, version, state, message}) or 'retry'.
CREATE FUNCTION extsvc._complete_dpu(p_id text, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r jsonb;
  v_final boolean;
  v_inst uuid;
  v_outcome text := p_outcome->>'outcome';
  v_results jsonb := coalesce(nullif(p_outcome->'results', 'null'::jsonb), '[]'::jsonb);
  v_message text := p_outcome->>'message';
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_observation jsonb := nullif(p_outcome->'observation', 'null'::jsonb);
  v_keep_polling boolean := coalesce((p_outcome->>'keep_polling')::boolean, false);
  -- when the evidence was observed: now, or the moment a watch cache that has
  -- lost its stream was last current (issue 11)
  v_observed_at timestamptz := coalesce(to_timestamp((p_outcome->>'observed_at')::double precision), now());
  -- from the watch caches: a change wakes the DPU, no polling while converging
  v_watched boolean := coalesce((p_outcome->>'watched')::boolean, false);
  -- the pods of our services no row of this DPU explains (issue 23, part 2);
  -- absent: the pass did not observe the pods
  v_strays jsonb := nullif(p_outcome->'strays', 'null'::jsonb);
BEGIN
  IF v_outcome = 'retry' THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, attempts = x.attempts + 1,
           next_due_at = now() + extsvc._backoff(x.attempts + 1, v_retry_after),
           last_error = v_message, last_error_at = now(),
           last_http_status = v_http_status
     WHERE x.dpu_machine_id = p_id;
    RETURN;
  ELSIF v_outcome <> 'observed' THEN
    PERFORM extsvc._raise('22023', 'unknown DPU reconciliation outcome',
                          format('outcome.outcome: %s', extsvc._token(v_outcome)), 'Use observed or retry.');
  END IF;

  -- evidence older than the staleness bound proves nothing: the rows keep
  -- their older observation, which readers already see as UNKNOWN
  IF v_observed_at < now() - extsvc._observation_max_age() THEN
    v_results := '[]'::jsonb;
  END IF;

  FOR r IN SELECT value FROM jsonb_array_elements(v_results) LOOP
    IF r->>'kind' = 'attachment' THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = r->>'state', status_message = r->>'message', observed_at = v_observed_at,
             observed_config_version = (SELECT i.config_version FROM extsvc.instances i WHERE i.instance_id = a.instance_id),
             updated_at = CASE WHEN a.deployment_state IS DISTINCT FROM r->>'state' THEN now() ELSE a.updated_at END
       WHERE a.instance_id = (r->>'instance_id')::uuid AND a.dpu_machine_id = p_id
         AND a.service_id = (r->>'service_id')::uuid AND a.version = r->>'version';
    ELSIF r->>'kind' = 'site' THEN
      INSERT INTO extsvc.site_service_dpu_status AS x (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
      VALUES ((r->>'service_id')::uuid, p_id, r->>'state', r->>'message', v_observed_at)
      ON CONFLICT ON CONSTRAINT site_service_dpu_status_pkey DO UPDATE
        SET deployment_state = EXCLUDED.deployment_state, status_message = EXCLUDED.status_message,
            observed_at = EXCLUDED.observed_at;
      -- a site service waiting to be deleted re-checks once a DPU is clean.
      -- The report is new evidence, not a failed attempt: the backoff starts
      -- over (else every DPU's report adds a poll to attempts, and the wait
      -- for DPF's finalizers after the DELETE grows to retry_cap), and a pass
      -- in flight, whose placement_clear was computed before this report,
      -- ends stale and the row is due again at once (else its poll outcome
      -- would overwrite this wake with a backoff).
      IF r->>'state' = 'TERMINATED' THEN
        UPDATE extsvc.dpf_extension_service_reconciliations x
           SET next_due_at = now(), attempts = 0, state_version = x.state_version + 1
         WHERE x.service_id = (r->>'service_id')::uuid
           AND EXISTS (SELECT FROM extsvc.service_records s
                        WHERE s.service_id = x.service_id AND s.lifecycle_state = 'DELETING');
        PERFORM extsvc._wake();
      END IF;
    END IF;
  END LOOP;

  IF v_strays IS NOT NULL AND v_observed_at >= now() - extsvc._observation_max_age() THEN
    PERFORM extsvc._record_stray_pods(p_id, v_strays);
  END IF;

  FOR v_inst IN SELECT DISTINCT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                 WHERE a.dpu_machine_id = p_id AND a.placement_state = 'REMOVING' LOOP
    PERFORM extsvc._cleanup_instance(v_inst);
  END LOOP;

  -- converged: every wanted row RUNNING and nothing left to remove
  v_final := NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                          WHERE a.dpu_machine_id = p_id
                            AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          JOIN extsvc.service_records s USING (service_id)
                          JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id
                          WHERE x.dpu_machine_id = p_id
                            AND x.deployment_state <> CASE
                                  WHEN d.deregistered_at IS NULL
                                       AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                                  THEN 'RUNNING' ELSE 'TERMINATED' END);
  UPDATE extsvc.dpu_reconciliations x
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN v_final AND NOT v_keep_polling
                         THEN 0 ELSE x.attempts + 1 END,
         -- not converged: look again soon; converged but a rollout of one of
         -- its services is still under way somewhere: look again, slower
         next_due_at = CASE
           -- rows in ERROR need a person; look again with the full backoff
           WHEN NOT v_final AND EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state = 'ERROR')
                AND NOT EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state <> 'ERROR'
                     AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
             THEN now() + extsvc._backoff(x.attempts + 1)
           -- converging with the watch caches: the next change wakes it
           -- (mark_dpus_due_by_names); a slow look is only a safety net
           -- (unless the pass could not conclude: keep_polling)
           WHEN NOT v_final AND v_watched AND NOT v_keep_polling THEN now() + interval '60 seconds'
           -- converging (labels propagating, pods starting): poll briskly,
           -- 200 ms more per unchanged pass, at most every 5 s
           WHEN NOT v_final THEN now() + least(interval '200 milliseconds' * (x.attempts + 1), interval '5 seconds')
           WHEN v_keep_polling
             THEN now() + least(extsvc._backoff(x.attempts + 1), interval '30 seconds')
           ELSE NULL END,
         last_error = v_message,
         last_error_at = CASE WHEN v_message IS NULL THEN NULL ELSE now() END,
         last_http_status = v_http_status,
         last_observed_at = v_observed_at,
         observation = coalesce(v_observation, x.observation)
   WHERE x.dpu_machine_id = p_id;
  -- site statuses of DPUs that no longer exist in the desired set are moot
  DELETE FROM extsvc.site_service_dpu_status x
   USING extsvc.service_records s
   WHERE x.dpu_machine_id = p_id AND s.service_id = x.service_id
     AND s.lifecycle_state = 'DELETED';
END
$fn$;

-- Leases -------------------------------------------------------------------

-- Extends the leases a worker still holds (compare-and-swap on lease_token and
-- lease_owner) by lease_seconds from now; returns the tokens it renewed. A
-- token missing from the result belongs to someone else by now: the worker
-- must not call Kubernetes for that row.
CREATE FUNCTION extsvc.renew_leases(worker text, lease_tokens uuid[], lease_seconds integer DEFAULT 60)
RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
BEGIN
  FOR q IN SELECT * FROM extsvc._worker_queues() LOOP
    RETURN QUERY EXECUTE format(
      'UPDATE extsvc.%I r SET lease_expires_at = now() + make_interval(secs => $3) '
      'WHERE r.lease_token = ANY ($2) AND r.lease_owner = $1 RETURNING r.lease_token', q.queue_table)
    USING renew_leases.worker, renew_leases.lease_tokens, renew_leases.lease_seconds;
  END LOOP;
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
  q record;
  n integer;
  total integer := 0;
BEGIN
  FOR q IN SELECT * FROM extsvc._worker_queues() LOOP
    EXECUTE format('UPDATE extsvc.%I r SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL '
                   'WHERE r.lease_owner = $1', q.queue_table)
      USING release_leases.worker;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
  END LOOP;
  RETURN total;
END
$fn$;
COMMENT ON FUNCTION extsvc.release_leases(text) IS
  'Worker: at start, free the leases its slot''s previous process held. Returns how many.';

-- Seconds until the earliest row of any queue becomes claimable (negative when
-- one is overdue; NULL when none is due at all): how long the worker sleeps.
-- The minimum is the first entry of each queue's _claimable index.
CREATE FUNCTION extsvc.next_due_in(queue text DEFAULT NULL) RETURNS double precision
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
  t timestamptz;
  earliest timestamptz;
BEGIN
  -- one queue: a worker that does not work the DPU queue (the watch mode
  -- leaves it to the watcher) sleeps by the service queue alone
  FOR q IN SELECT * FROM extsvc._worker_queues() w WHERE next_due_in.queue IS NULL OR w.queue = next_due_in.queue LOOP
    EXECUTE format('SELECT min(greatest(r.next_due_at, r.lease_expires_at)) '
                   'FROM extsvc.%I r WHERE r.next_due_at IS NOT NULL', q.queue_table) INTO t;
    earliest := least(earliest, t);
  END LOOP;
  RETURN extract(epoch FROM earliest - now())::double precision;
END
$fn$;
COMMENT ON FUNCTION extsvc.next_due_in(text) IS
  'Worker: seconds until the earliest row of a queue (service or dpu; NULL: any) becomes claimable (negative when overdue, NULL when none is due).';
