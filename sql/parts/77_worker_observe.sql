-- What the worker observes besides its queue: the resync's snapshot and
-- drift marks, DPF's view of each service, the orphan check and the
-- placement resync.

-- What the drift detector compares with the cluster: every READY DPF service,
-- with the same work object a claim returns (the worker renders the desired
-- DPUService from it; a service whose data no longer renders is left out of
-- the comparison and marked FAILED by its next pass).
CREATE FUNCTION extsvc.resync_snapshot()
RETURNS TABLE (service_id uuid, work jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  SELECT s.service_id, extsvc._service_work(s.service_id, 0)
    FROM extsvc.service_records s
   WHERE s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY';
END
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

-- The resync's cleanup: of the DPUService names listed with our ownership
-- label, those that belong to no live service version (the service is
-- DELETED, unknown, or has another current DPUService name). Called after
-- the LIST, so a service committed before its DPUService was created is seen.
-- PL/pgSQL, not SQL, here and in the worker's other set-returning reads (resync_snapshot,
-- resync_snapshot_of): a SQL function with a SET clause is never inlined and its statement
-- is parsed and planned at every call, while PL/pgSQL keeps the plan for the session (the
-- watcher calls these after every watch event; issue 26).
CREATE FUNCTION extsvc.orphaned_dpuservices(names text[]) RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  SELECT n FROM unnest(orphaned_dpuservices.names) AS n
   WHERE NOT EXISTS (SELECT FROM extsvc.service_records s
                      WHERE s.dpf_service_name = n AND s.service_type = 'DPF_HELM_CHART'
                        AND s.lifecycle_state <> 'DELETED');
END
$fn$;
COMMENT ON FUNCTION extsvc.orphaned_dpuservices(text[]) IS
  'Worker: which listed DPUService names belong to no live DPF service version (to be deleted by the resync).';

-- Resync: every DPU is observed again (placement drift such as a label
-- removed by hand is repaired at that pass).
CREATE FUNCTION extsvc.mark_dpus_due() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  n integer;
BEGIN
  -- in dpu_machine_id order, the order of _lock_dpu_work (issue 13)
  INSERT INTO extsvc.dpu_reconciliations (dpu_machine_id, next_due_at)
  SELECT d.machine_id, now() FROM extsvc.dpus d ORDER BY d.machine_id
  -- due now: a row waiting for its next change (the watch mode's 60 s look)
  -- or backing off is derived again too
  ON CONFLICT (dpu_machine_id) DO UPDATE SET next_due_at = least(extsvc.dpu_reconciliations.next_due_at, now());
  GET DIAGNOSTICS n = ROW_COUNT;
  -- observations nobody renewed within extsvc.observation_max_age: UNKNOWN
  PERFORM extsvc.expire_stale_observations();
  RETURN n;
END
$fn$;

-- For ALL_DPUS deletion: true once every registered DPU was observed without
-- the service's label and pods after the delete was requested.
CREATE FUNCTION extsvc._site_service_cleared(p_service_id uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (
    SELECT NOT EXISTS (
      SELECT FROM extsvc.dpus d, extsvc.service_records s
       WHERE s.service_id = p_service_id AND d.deregistered_at IS NULL
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          WHERE x.service_id = p_service_id AND x.dpu_machine_id = d.machine_id
                            AND x.deployment_state = 'TERMINATED'
                            AND x.observed_at >= s.delete_requested_at)));
END
$fn$;
