-- The hand-over at commit (issue 26, part 4; src/pg/hand_over.cpp, docs/worker.md): the services
-- a transaction created are leased to a worker just before that transaction commits, and the
-- worker sends their first request without a claim of its own.

-- Registers the new service's row for the hand-over when the current transaction commits, and
-- wakes the workers then (as extsvc._wake()). Called by extsvc._create_service.
CREATE FUNCTION extsvc._hand_over(p_service_id uuid) RETURNS void
  LANGUAGE c VOLATILE STRICT AS 'MODULE_PATHNAME', 'nico_extsvc_hand_over';

-- Run by the creating backend at pre-commit, as the role that created the services: leases the
-- work rows of the listed services that are still CREATING, due and not leased (as the claim of
-- extsvc.claim_service_creates would) to p_worker, and returns the leases with each row's work
-- document (as the claim returns it). A row whose work is longer than p_max_bytes is neither
-- leased nor returned: it waits for a claim.
CREATE FUNCTION extsvc._hand_over_creates(p_worker text, p_ids uuid[], p_lease_seconds integer,
                                          p_max_bytes integer)
RETURNS TABLE (id text, state_version bigint, lease_token uuid, work text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  WITH candidate AS (
    SELECT r.service_id, extsvc._service_work(r.service_id, r.attempts)::text AS work
      FROM extsvc.dpf_extension_service_reconciliations r
      JOIN extsvc.service_records s ON s.service_id = r.service_id
     WHERE r.service_id = ANY (p_ids)
       AND s.lifecycle_state = 'CREATING'
       AND r.next_due_at <= clock_timestamp()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < clock_timestamp())
       FOR UPDATE OF r
  ), leased AS (
    UPDATE extsvc.dpf_extension_service_reconciliations r
       SET lease_owner = p_worker, lease_token = gen_random_uuid(),
           lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_seconds),
           last_attempt_at = clock_timestamp()
      FROM candidate c
     WHERE r.service_id = c.service_id AND octet_length(c.work) <= p_max_bytes
    RETURNING r.service_id, r.state_version, r.lease_token, c.work
  )
  SELECT l.service_id::text, l.state_version, l.lease_token, l.work FROM leased l;
END
$fn$;
