-- The operator's handles on the workers: make work due now, the per-slot
-- counters, a resync on demand. The queue itself is sql/parts/76_worker_queue.sql.

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
    OUT orphans_deleted bigint, OUT dpus_rederived bigint, OUT leases_released bigint,
    OUT watch_wakes bigint, OUT lease_held boolean, OUT lease_holder text,
    OUT lease_since timestamptz, OUT paused_reason text, OUT paused_detail text,
    OUT settings_error text)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_status';
COMMENT ON FUNCTION extsvc.worker_status() IS
  'Operator: one row per worker slot with counters since server start, and the site''s writer state (issue 25): lease_held (this server holds the site Lease and writes), lease_holder (spec.holderIdentity as last seen), lease_since, paused_reason (NULL while writing; site_id, timing_settings, database_identity, lease, deposed, disabled, starting) with paused_detail, settings_error (a reload refused). Needs shared_preload_libraries.';

CREATE FUNCTION extsvc.watch_status(
    OUT resource text, OUT cluster text, OUT watcher_pid integer, OUT synced boolean,
    OUT current boolean, OUT current_at timestamptz, OUT objects bigint, OUT lists bigint,
    OUT watches bigint, OUT events bigint, OUT bookmarks bigint, OUT expired bigint,
    OUT errors bigint, OUT last_error text)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_watch_status';
COMMENT ON FUNCTION extsvc.watch_status() IS
  'Operator: one row per informer of the watcher (worker 0 with extsvc.watch on): listed (synced), stream open (current), when last current, cached objects, and counters since the watcher started; no rows when nothing is watched.';

CREATE FUNCTION extsvc.request_resync() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_request_resync';
COMMENT ON FUNCTION extsvc.request_resync() IS
  'Operator: run the drift-detecting resync pass now instead of at the next extsvc.resync_interval.';
