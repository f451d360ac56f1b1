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
RETURNS interval LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  -- PL/pgSQL: a SQL function with a SET clause is planned at every call (every completion)
  v_base interval := coalesce(nullif(extsvc._setting('extsvc.retry_base'), ''), '500ms')::interval;
  v_cap interval := coalesce(nullif(extsvc._setting('extsvc.retry_cap'), ''), '300s')::interval;
BEGIN
  RETURN greatest(
           least(v_cap, v_base * power(2, least(greatest(p_attempts, 1) - 1, 30)))
             * (1 + 0.2 * random()),
           least(coalesce(p_retry_after_s, 0), extract(epoch FROM v_cap)::double precision)
             * interval '1 second');
END
$fn$;

-- The queues by name: their table, key column and the functions that claim
-- due rows, build a claimed row's work and apply an outcome. The one place
-- that knows them.
-- A row's id travels as text (a service's uuid, a DPU's NICo MachineId);
-- key_type is the key column's own type.
CREATE FUNCTION extsvc._worker_queues()
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text, key_type text)
LANGUAGE sql IMMUTABLE AS $fn$
  VALUES ('service', 'dpf_extension_service_reconciliations', 'service_id', '_service_work', '_complete_service',
          '_claim_service', 'uuid'),
         ('dpu', 'dpu_reconciliations', 'dpu_machine_id', '_dpu_work', '_complete_dpu', '_claim_dpu', 'text')
$fn$;

CREATE FUNCTION extsvc._worker_queue(p_queue text)
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text, key_type text)
LANGUAGE plpgsql STABLE AS $fn$
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
  -- an unknown queue is refused (22023) by the registry; the two known ones skip it: it
  -- is a set-returning SQL function, parsed and planned at every call, and took about 40 % of
  -- a claim in a profile of the worker (issue 26, part 4)
  IF claim.queue IS DISTINCT FROM 'service' AND claim.queue IS DISTINCT FROM 'dpu' THEN
    PERFORM extsvc._worker_queue(claim.queue);
  END IF;
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
LANGUAGE plpgsql SET enable_sort = off AS $fn$
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

-- Issue 26, part 2: with extsvc.watch on, an update, a delete or a drift repair is decided
-- from the watcher's cache in one request, so only the watcher claims those rows; the other
-- workers claim the creates (one POST either way, so they keep spreading them). The same claim
-- as _claim_service, over the same index, skipping rows of other states.
CREATE FUNCTION extsvc._claim_service_creates(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET enable_sort = off AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.service_id
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE greatest(r.next_due_at, r.lease_expires_at) <= now()
       AND r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
       AND EXISTS (SELECT FROM extsvc.service_records s
                    WHERE s.service_id = r.service_id AND s.lifecycle_state = 'CREATING')
     ORDER BY greatest(r.next_due_at, r.lease_expires_at)
     LIMIT greatest(p_batch_size, 1)
       FOR UPDATE OF r SKIP LOCKED
  )
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET lease_owner = p_worker, lease_token = gen_random_uuid(),
         lease_expires_at = now() + make_interval(secs => p_lease_seconds), last_attempt_at = now()
    FROM due
   WHERE r.service_id = due.service_id
  RETURNING r.service_id, r.state_version, r.lease_token, r.attempts;
END
$fn$;
COMMENT ON FUNCTION extsvc._claim_service_creates(text, integer, integer) IS
  'Internal: _claim_service restricted to CREATING services, for extsvc.claim_service_creates.';

-- The claim of a worker other than the watcher in watch mode: extsvc.claim('service', ...) of
-- the CREATING services only (same result shape and lease).
CREATE FUNCTION extsvc.claim_service_creates(worker text, batch_size integer DEFAULT 32,
                                             lease_seconds integer DEFAULT 60)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, work jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_ids text[];
  v_versions bigint[];
  v_tokens uuid[];
  v_attempts integer[];
BEGIN
  -- two statements, as in extsvc.claim: the work is read with a snapshot newer than the lease's
  SELECT array_agg(c.id::text ORDER BY c.o), array_agg(c.state_version ORDER BY c.o),
         array_agg(c.lease_token ORDER BY c.o), array_agg(c.attempts ORDER BY c.o)
    INTO v_ids, v_versions, v_tokens, v_attempts
    FROM extsvc._claim_service_creates(claim_service_creates.worker, claim_service_creates.batch_size,
                                       claim_service_creates.lease_seconds)
         WITH ORDINALITY c(id, state_version, lease_token, attempts, o);
  IF v_ids IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY
    SELECT c.id, c.state_version, c.lease_token, extsvc._service_work(c.id::uuid, c.attempts)
      FROM unnest(v_ids, v_versions, v_tokens, v_attempts)
           WITH ORDINALITY c(id, state_version, lease_token, attempts, o)
     ORDER BY c.o;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_service_creates(text, integer, integer) IS
  'Worker (not the watcher, extsvc.watch on): lease up to batch_size due CREATING services; same result as extsvc.claim(''service'', ...).';

CREATE FUNCTION extsvc._claim_dpu(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET enable_sort = off AS $fn$
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
  -- an unknown queue is refused (22023); the known ones skip the registry, as in extsvc.claim
  IF complete.queue IS DISTINCT FROM 'service' AND complete.queue IS DISTINCT FROM 'dpu' THEN
    PERFORM extsvc._worker_queue(complete.queue);
  END IF;
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
  v_services timestamptz;
  v_dpus timestamptz;
BEGIN
  -- Static statements, not a loop over the registry with EXECUTE: every worker calls this after
  -- every iteration, and the dynamic statements were parsed and planned at each call (about a
  -- tenth of an idle worker's CPU in a perf profile; issue 26). An unknown queue is refused
  -- (22023) by the registry, as extsvc.claim refuses it.
  IF next_due_in.queue IS NOT NULL AND next_due_in.queue <> 'service' AND next_due_in.queue <> 'dpu' THEN
    PERFORM extsvc._worker_queue(next_due_in.queue);
  END IF;
  -- one queue: a worker that does not work the DPU queue (the watch mode leaves it to the
  -- watcher) sleeps by the service queue alone
  IF next_due_in.queue IS DISTINCT FROM 'dpu' THEN
    SELECT min(greatest(r.next_due_at, r.lease_expires_at)) INTO v_services
      FROM extsvc.dpf_extension_service_reconciliations r WHERE r.next_due_at IS NOT NULL;
  END IF;
  IF next_due_in.queue IS DISTINCT FROM 'service' THEN
    SELECT min(greatest(r.next_due_at, r.lease_expires_at)) INTO v_dpus
      FROM extsvc.dpu_reconciliations r WHERE r.next_due_at IS NOT NULL;
  END IF;
  RETURN extract(epoch FROM least(v_services, v_dpus) - now())::double precision;
END
$fn$;
COMMENT ON FUNCTION extsvc.next_due_in(text) IS
  'Worker: seconds until the earliest row of a queue (service or dpu; NULL: any) becomes claimable (negative when overdue, NULL when none is due).';
