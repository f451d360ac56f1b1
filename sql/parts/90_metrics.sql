-- Metrics (issue 12, SPEC 6, docs/metrics.md): extsvc.metrics() (and the view
-- of the same name) returns one row per sample, (metric, labels, value), with
-- Prometheus-style names prefixed extsvc_; extsvc.metrics_prometheus() renders
-- them in the Prometheus text exposition format (version 0.0.4).
--
-- Gauges about services, queues, attachments and DPUs are computed from the
-- tables at query time. Event counters of the workers (Kubernetes requests,
-- latency histogram, retries, restarts, resyncs) live in shared memory
-- (src/pg/metrics.cpp): they survive a worker restart and reset when shared
-- memory is reinitialised (server restart, crash restart). Without
-- shared_preload_libraries there is no shared memory: the worker part is the
-- single sample extsvc_worker_up 0 (no labels) and extsvc_workers_configured 0.
--
-- This file is self-contained (functions, view, grants, comments) so that the
-- 0.1.0 -> 0.2.0 upgrade script can include it as it is.

-- The rows of both work queues as the gauges and extsvc.health_check() read them: since is when
-- the row last made progress (service: its last success, else when its intent was last set;
-- dpu: its last observation, else when the DPU was registered), the age of a retrying row.
CREATE FUNCTION extsvc._queue_rows(OUT queue text, OUT next_due_at timestamptz,
                                   OUT lease_expires_at timestamptz, OUT attempts integer,
                                   OUT since timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE AS $fn$
  SELECT 'service'::text, r.next_due_at, r.lease_expires_at, r.attempts,
         coalesce(r.last_success_at, s.updated_at)
    FROM extsvc.dpf_extension_service_reconciliations r
    JOIN extsvc.service_records s ON s.service_id = r.service_id
  UNION ALL
  SELECT 'dpu', d.next_due_at, d.lease_expires_at, d.attempts, coalesce(d.last_observed_at, p.registered_at)
    FROM extsvc.dpu_reconciliations d
    JOIN extsvc.dpus p ON p.machine_id = d.dpu_machine_id
$fn$;
COMMENT ON FUNCTION extsvc._queue_rows() IS
  'Internal: the rows of both work queues (queue, next_due_at, lease_expires_at, attempts, since: when the row last made progress) for the gauges and extsvc.health_check().';

-- Worker counters from shared memory (owner only; read through extsvc.metrics()).
CREATE FUNCTION extsvc._worker_metrics(OUT metric text, OUT labels jsonb, OUT value double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_metrics';
COMMENT ON FUNCTION extsvc._worker_metrics() IS
  'Internal: the workers'' event counters from shared memory as metric rows; extsvc_worker_up 0 without shared_preload_libraries. Read extsvc.metrics() instead.';

-- Every metric family: name, Prometheus type, help text (docs/metrics.md).
CREATE FUNCTION extsvc._metric_families(OUT family text, OUT type text, OUT help text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE AS $fn$
  VALUES
    ('extsvc_services', 'gauge', 'Extension services by service type and lifecycle state.'),
    ('extsvc_queue_due', 'gauge', 'Work rows due now and not leased, by queue (service: DPF services, dpu: per-DPU placement).'),
    ('extsvc_queue_leased', 'gauge', 'Work rows under a live worker lease, by queue.'),
    ('extsvc_queue_retrying', 'gauge', 'Work rows whose last pass failed and that wait for a retry (attempts > 0), by queue.'),
    ('extsvc_queue_oldest_due_age_seconds', 'gauge', 'Seconds since the oldest due, unleased row became due (0 when none is due), by queue.'),
    ('extsvc_queue_oldest_retrying_age_seconds', 'gauge', 'Seconds since the oldest retrying row (attempts > 0, due or in backoff) last made progress (service: last success, else its intent set; dpu: last observation, else registration); 0 when none retries, by queue.'),
    ('extsvc_oldest_unfinished_age_seconds', 'gauge', 'Seconds since the oldest row in a non-final state got there (kind service: CREATING, UPDATING or DELETING since its last change; kind dpu_row: an active per-DPU row PENDING since it was attached); 0 when none.'),
    ('extsvc_dpf_not_ready', 'gauge', 'Live DPF services whose DPUService DPF last reported not Ready (dpf_ready = false): applied (READY) is not running.'),
    ('extsvc_services_failed', 'gauge', 'FAILED services by reason: tenant (the tenant''s chart or values were refused: unknown fields, invalid spec, chart not allowed) or platform (anything else).'),
    ('extsvc_placement_attachments', 'gauge', 'Per-DPU attachment rows by placement state and deployment state (UNKNOWN once the observation is older than extsvc.observation_max_age).'),
    ('extsvc_site_service_dpus', 'gauge', 'Per-DPU rows of ALL_DPUS services by deployment state (UNKNOWN once stale).'),
    ('extsvc_dpf_api_level', 'gauge', '1 for the DPF API level the workers detected from the served CRDs (level: v26.8+, below v26.8, unknown before the first read), 0 for the others.'),
    ('extsvc_stray_pods', 'gauge', 'Pods of our services on DPUs without an attachment for them (extsvc.stray_workloads), by reason.'),
    ('extsvc_dpu_states', 'gauge', 'Registered DPUs by state: DEREGISTERED, else the worst deployment state of their rows (ERROR > UNKNOWN > PENDING > TERMINATING > RUNNING > TERMINATED), IDLE without rows.'),
    ('extsvc_kube_requests_total', 'counter', 'Kubernetes API requests by cluster, verb and HTTP code ("error": no HTTP response; "other": the series table was full).'),
    ('extsvc_kube_request_duration_seconds', 'histogram', 'Duration of Kubernetes API requests by cluster and verb.'),
    ('extsvc_retries_total', 'counter', 'Reconciliation passes that ended in a retry with backoff, by queue and reason.'),
    ('extsvc_resyncs_total', 'counter', 'Drift-detecting resyncs by result (failed: the snapshot or the LIST failed).'),
    ('extsvc_last_resync_age_seconds', 'gauge', 'Seconds since the last successful resync ended (absent before the first one).'),
    ('extsvc_last_resync_duration_seconds', 'gauge', 'Duration of the last successful resync in seconds.'),
    ('extsvc_orphans_deleted_total', 'counter', 'DPUServices with our ownership label and no live service version deleted by the resync.'),
    ('extsvc_dpus_rederived_total', 'counter', 'DPUs made due by the resync so that their labels are derived again.'),
    ('extsvc_wakes_requested_total', 'counter', 'Commits that asked the workers to wake up.'),
    ('extsvc_workers_configured', 'gauge', 'Configured background workers (extsvc.workers); 0 without shared_preload_libraries.'),
    ('extsvc_worker_state', 'gauge', '1 for the state the worker is in (working, disabled, unconfigured, config_error, standby, version_mismatch, paused, waiting_for_lease), 0 for the others; extsvc.worker_status().state.'),
    ('extsvc_workers_enabled', 'gauge', 'extsvc.enabled as this server has it: 1 on, 0 off (the workers then write nothing).'),
    ('extsvc_shmem_initialized_timestamp_seconds', 'gauge', 'Unix time when the shared memory of nico_extsvc was initialised: a server start or the crash restart after any backend died by a signal (a crash loop moves it).'),
    ('extsvc_server_start_timestamp_seconds', 'gauge', 'Unix time of the postmaster''s start (pg_postmaster_start_time()); a crash restart does not move it.'),
    ('extsvc_kube_last_code', 'gauge', 'HTTP status of the last answer of the cluster (0: no HTTP response: connection, TLS or timeout); absent before the first request.'),
    ('extsvc_kube_last_response_age_seconds', 'gauge', 'Seconds since the cluster last answered (or failed to) a request.'),
    ('extsvc_kube_last_success_age_seconds', 'gauge', 'Seconds since the cluster last answered 2xx; absent before the first.'),
    ('extsvc_kube_clock_skew_seconds', 'gauge', 'The API server''s clock minus this server''s, in seconds (signed), from the Date header of its last response that had one; the header''s 1 s resolution leaves about 1 s of uncertainty. Absent before the first such response.'),
    ('extsvc_kube_clock_skew_age_seconds', 'gauge', 'Seconds since extsvc_kube_clock_skew_seconds of the cluster was last measured.'),
    ('extsvc_worker_up', 'gauge', '1 while a worker process runs in the slot; a single unlabelled 0 without shared_preload_libraries.'),
    ('extsvc_worker_restarts_total', 'counter', 'Worker process starts in the slot after the first one since shared memory was initialised.'),
    ('extsvc_worker_last_iteration_age_seconds', 'gauge', 'Seconds since the worker last started a loop iteration (it sleeps at most 10 s when enabled and configured, 60 s otherwise).'),
    ('extsvc_worker_iterations_total', 'counter', 'Worker loop iterations.'),
    ('extsvc_worker_claimed_total', 'counter', 'Rows (services and DPUs) claimed by the worker.'),
    ('extsvc_worker_completed_total', 'counter', 'Claimed rows whose outcome was recorded.'),
    ('extsvc_worker_stale_results_total', 'counter', 'Outcomes discarded by compare-and-swap (intent changed or lease lost meanwhile).'),
    ('extsvc_lease_fenced_total', 'counter', 'Passes stopped by the lease fence before a Kubernetes call, and rows skipped because their lease was taken over.'),
    ('extsvc_lease_renewals_total', 'counter', 'Lease renewals (one UPDATE each).'),
    ('extsvc_leases_released_total', 'counter', 'Leases of the slot''s previous process freed when the worker started.'),
    ('extsvc_watch_wakes_total', 'counter', 'DPU rows made due by watch events (the watcher, extsvc.watch on).'),
    ('extsvc_worker_handed_over_total', 'counter', 'Created services'' rows handed over to the worker at commit (extsvc.hand_over) and taken by it, without a claim.'),
    ('extsvc_watch_synced', 'gauge', '1 once the informer listed since the watcher started (extsvc.watch_status()).'),
    ('extsvc_watch_current', 'gauge', '1 while the informer''s watch stream is open: its cache is the server''s state.'),
    ('extsvc_watch_objects', 'gauge', 'Objects in the informer''s cache.'),
    ('extsvc_watch_events_total', 'counter', 'Watch events (ADDED, MODIFIED, DELETED) the informer received since the watcher started.'),
    ('extsvc_watch_lists_total', 'counter', 'Completed LISTs of the informer since the watcher started (the first, after 410 Gone, the resync''s).'),
    ('extsvc_watch_expired_total', 'counter', '410 Gone answers (an expired resourceVersion or continue token) since the watcher started.'),
    ('extsvc_watch_errors_total', 'counter', 'Failed LISTs and broken watch streams of the informer since the watcher started.'),
    ('extsvc_watch_current_age_seconds', 'gauge', 'Seconds since the informer''s cache was last known current (0 while its stream is open; since the watcher started when it never was current, e.g. its cluster is not configured).'),
    ('extsvc_lease_held', 'gauge', '1 while this server holds the site''s Lease (coordination.k8s.io/v1, nico-extsvc-<site_id>) and its workers may write; 0 otherwise.'),
    ('extsvc_lease_acquired_total', 'counter', 'Times this server acquired (or took over) the site''s Lease since shared memory was initialised.'),
    ('extsvc_writes_paused', 'gauge', '1 for the reason the workers write nothing now (site_id, timing_settings, database_identity, lease, deposed), 0 for the others; all 0 while writing.'),
    ('extsvc_foreign_objects', 'gauge', 'Objects the last resync found that are not this site''s and were left alone: DPUServices of another site or without the site label (kind dpuservice), nico/extsvc-* keys this database never wrote on its DPUs (kind placement_key).'),
    ('extsvc_pending_orphans', 'gauge', 'Deletions (kind dpuservice) and label removals (kind placement_labels) the orphan guard holds back until extsvc.confirm_orphan_cleanup().'),
    ('extsvc_placement_keys_registered', 'gauge', 'Placement keys in the registry (every key this database wrote and may still find on a DPU).')
$fn$;
COMMENT ON FUNCTION extsvc._metric_families() IS
  'Internal: name, Prometheus type and help text of every metric family of extsvc.metrics().';

CREATE FUNCTION extsvc.metrics()
RETURNS TABLE (metric text, labels jsonb, value double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH
  svc_n AS (
    SELECT s.service_type, s.lifecycle_state, count(*) AS n FROM extsvc.service_records s GROUP BY 1, 2),
  svc AS (
    SELECT 'extsvc_services'::text AS metric, jsonb_build_object('type', t.type, 'state', st.state) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['DPF_HELM_CHART', 'KUBERNETES_POD']) t(type)
     CROSS JOIN unnest(ARRAY['CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED']) st(state)
      LEFT JOIN svc_n n ON n.service_type = t.type AND n.lifecycle_state = st.state),
  q_rows AS (SELECT * FROM extsvc._queue_rows()),
  q_n AS (
    SELECT r.queue,
           count(*) FILTER (WHERE r.next_due_at <= now()
                              AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())) AS due,
           count(*) FILTER (WHERE r.lease_expires_at >= now()) AS leased,
           count(*) FILTER (WHERE r.attempts > 0) AS retrying,
           extract(epoch FROM now() - min(r.next_due_at) FILTER (
                     WHERE r.next_due_at <= now()
                       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())))::double precision AS oldest,
           extract(epoch FROM now() - min(r.since) FILTER (WHERE r.attempts > 0))::double precision AS oldest_retrying
      FROM q_rows r
     GROUP BY 1),
  q AS (
    SELECT n.queue, coalesce(x.due, 0)::double precision AS due, coalesce(x.leased, 0)::double precision AS leased,
           coalesce(x.retrying, 0)::double precision AS retrying, coalesce(x.oldest, 0) AS oldest,
           greatest(coalesce(x.oldest_retrying, 0), 0) AS oldest_retrying
      FROM unnest(ARRAY['service', 'dpu']) n(queue)
      LEFT JOIN q_n x ON x.queue = n.queue),
  att_n AS (
    SELECT a.placement_state AS p, extsvc._effective_deployment_state(a.deployment_state, a.observed_at) AS s,
           count(*) AS n
      FROM extsvc.dpf_extension_service_attachments a
     GROUP BY 1, 2),
  att AS (
    SELECT 'extsvc_placement_attachments'::text AS metric,
           jsonb_build_object('placement_state', p.s, 'deployment_state', ds.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['ACTIVE', 'REMOVING']) p(s)
     CROSS JOIN unnest(extsvc._deployment_state_precedence()) ds(s)
      LEFT JOIN att_n n ON n.p = p.s AND n.s = ds.s),
  site_n AS (
    SELECT extsvc._effective_deployment_state(x.deployment_state, x.observed_at) AS s, count(*) AS n
      FROM extsvc.site_service_dpu_status x
     GROUP BY 1),
  site AS (
    SELECT 'extsvc_site_service_dpus'::text AS metric, jsonb_build_object('deployment_state', ds.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(extsvc._deployment_state_precedence()) ds(s)
      LEFT JOIN site_n n ON n.s = ds.s),
  -- a DPU's state: the worst of its rows (a plain minimum: unlike an instance's aggregate, a
  -- RUNNING/TERMINATED mix is RUNNING here)
  dpu_worst AS (
    SELECT r.dpu_machine_id,
           min(array_position(extsvc._deployment_state_precedence(),
                              extsvc._effective_deployment_state(r.deployment_state, r.observed_at))) AS rank
      FROM (SELECT a.dpu_machine_id, a.deployment_state, a.observed_at
              FROM extsvc.dpf_extension_service_attachments a
            UNION ALL
            SELECT x.dpu_machine_id, x.deployment_state, x.observed_at
              FROM extsvc.site_service_dpu_status x) r
     GROUP BY 1),
  dpu_n AS (
    SELECT CASE WHEN d.deregistered_at IS NOT NULL THEN 'DEREGISTERED'
                ELSE coalesce((extsvc._deployment_state_precedence())[w.rank], 'IDLE') END AS s,
           count(*) AS n
      FROM extsvc.dpus d
      LEFT JOIN dpu_worst w ON w.dpu_machine_id = d.machine_id
     GROUP BY 1),
  dpus AS (
    SELECT 'extsvc_dpu_states'::text AS metric, jsonb_build_object('state', st.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(extsvc._deployment_state_precedence() || ARRAY['IDLE', 'DEREGISTERED']) st(s)
      LEFT JOIN dpu_n n ON n.s = st.s),
  -- issue 28: what hurts without an error: work unfinished for long, DPF not Ready, FAILED by cause
  unfinished AS (
    SELECT 'service'::text AS kind,
           coalesce(extract(epoch FROM now() - min(s.updated_at)), 0)::double precision AS age
      FROM extsvc.service_records s WHERE s.lifecycle_state IN ('CREATING', 'UPDATING', 'DELETING')
    UNION ALL
    SELECT 'dpu_row', coalesce(extract(epoch FROM now() - min(a.created_at)), 0)::double precision
      FROM extsvc.dpf_extension_service_attachments a
     WHERE a.placement_state = 'ACTIVE'
       AND extsvc._effective_deployment_state(a.deployment_state, a.observed_at) = 'PENDING'),
  failed_n AS (
    SELECT CASE WHEN h.reason = 'permanent_error' THEN 'tenant' ELSE 'platform' END AS cause, count(*) AS n
      FROM extsvc.service_records s
      LEFT JOIN LATERAL (SELECT x.reason FROM extsvc.service_state_history x
                          WHERE x.service_id = s.service_id ORDER BY x.id DESC LIMIT 1) h ON true
     WHERE s.lifecycle_state = 'FAILED'
     GROUP BY 1),
  failed AS (
    SELECT 'extsvc_services_failed'::text AS metric, jsonb_build_object('reason', c.c) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['tenant', 'platform']) c(c) LEFT JOIN failed_n n ON n.cause = c.c)
  SELECT * FROM (
    SELECT * FROM svc
    UNION ALL SELECT 'extsvc_queue_due', jsonb_build_object('queue', queue), due FROM q
    UNION ALL SELECT 'extsvc_queue_leased', jsonb_build_object('queue', queue), leased FROM q
    UNION ALL SELECT 'extsvc_queue_retrying', jsonb_build_object('queue', queue), retrying FROM q
    UNION ALL SELECT 'extsvc_queue_oldest_due_age_seconds', jsonb_build_object('queue', queue), oldest FROM q
    UNION ALL SELECT 'extsvc_queue_oldest_retrying_age_seconds', jsonb_build_object('queue', queue), oldest_retrying FROM q
    UNION ALL SELECT 'extsvc_oldest_unfinished_age_seconds', jsonb_build_object('kind', kind), greatest(age, 0) FROM unfinished
    UNION ALL SELECT 'extsvc_dpf_not_ready', '{}'::jsonb,
                     (SELECT count(*) FROM extsvc.dpf_extension_service_reconciliations r
                        JOIN extsvc.service_records s ON s.service_id = r.service_id
                       WHERE r.dpf_ready = false AND s.lifecycle_state IN ('READY', 'UPDATING'))::double precision
    UNION ALL SELECT * FROM failed
    UNION ALL SELECT 'extsvc_server_start_timestamp_seconds', '{}'::jsonb,
                     extract(epoch FROM pg_postmaster_start_time())::double precision
    UNION ALL SELECT * FROM att
    UNION ALL SELECT * FROM site
    UNION ALL SELECT * FROM dpus
    UNION ALL SELECT w.metric, w.labels, w.value FROM extsvc._worker_metrics() w
    UNION ALL SELECT x.metric, x.labels, x.value FROM extsvc._site_metrics() x
    UNION ALL SELECT 'extsvc_pending_orphans', jsonb_build_object('kind', k.kind),
                     (SELECT count(*) FROM extsvc.pending_orphans p WHERE p.kind = k.kind)::double precision
                FROM unnest(ARRAY['dpuservice', 'placement_labels']) k(kind)
    UNION ALL SELECT 'extsvc_stray_pods', jsonb_build_object('reason', r.reason),
                     (SELECT count(*) FROM extsvc.stray_pods x WHERE x.reason = r.reason)::double precision
                FROM unnest(ARRAY['no_attachment', 'node_key_without_dpudevice']) r(reason)
    UNION ALL SELECT 'extsvc_placement_keys_registered', '{}'::jsonb,
                     (SELECT count(*) FROM extsvc.placement_keys)::double precision
  ) m
  ORDER BY 1, 2
$fn$;
COMMENT ON FUNCTION extsvc.metrics() IS
  'Monitoring: one row per metric sample (metric, labels, value), Prometheus-style names prefixed extsvc_ (docs/metrics.md). Gauges are computed from the tables now; worker counters come from shared memory and reset at a server restart.';

CREATE VIEW extsvc.metrics AS SELECT m.metric, m.labels, m.value FROM extsvc.metrics() m;
COMMENT ON VIEW extsvc.metrics IS
  'Monitoring: the rows of extsvc.metrics() (SPEC 6 names both); readers need EXECUTE on the function too.';

-- One sample line of the text format: name{k="v",...} value, label values
-- escaped (\\, \", \n), le last, +Inf/-Inf/NaN, integers without exponent.
CREATE FUNCTION extsvc._prometheus_line(metric text, labels jsonb, value double precision) RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT _prometheus_line.metric
         || CASE WHEN _prometheus_line.labels IS NULL OR _prometheus_line.labels = '{}'::jsonb THEN ''
                 ELSE '{' || (SELECT string_agg(format('%s="%s"', l.key,
                                                      replace(replace(replace(l.value, '\', '\\'), '"', '\"'),
                                                              E'\n', '\n')),
                                                ',' ORDER BY l.key = 'le', l.key)
                                FROM jsonb_each_text(_prometheus_line.labels) l) || '}' END
         || ' '
         || CASE WHEN _prometheus_line.value = 'Infinity'::double precision THEN '+Inf'
                 WHEN _prometheus_line.value = '-Infinity'::double precision THEN '-Inf'
                 WHEN _prometheus_line.value = 'NaN'::double precision THEN 'NaN'
                 WHEN _prometheus_line.value = trunc(_prometheus_line.value) AND abs(_prometheus_line.value) < 1e15
                   THEN trunc(_prometheus_line.value)::bigint::text
                 ELSE _prometheus_line.value::text END
$fn$;
COMMENT ON FUNCTION extsvc._prometheus_line(text, jsonb, double precision) IS
  'Internal: one sample line of the Prometheus text format (escaped label values, le last, +Inf/-Inf/NaN).';

-- Prometheus text exposition format 0.0.4: # HELP and # TYPE per family,
-- label values escaped (\\, \", \n), +Inf/-Inf/NaN spelled the Prometheus way,
-- a histogram's _bucket (le last, ascending, +Inf included), _sum and _count.
CREATE FUNCTION extsvc.metrics_prometheus() RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH
  fam AS (SELECT f.family, f.type, f.help FROM extsvc._metric_families() f),
  samples AS (
    SELECT m.metric, m.labels, m.value,
           coalesce(f.family, m.metric) AS family, coalesce(f.type, 'untyped') AS type,
           coalesce(f.help, m.metric) AS help,
           CASE WHEN m.metric LIKE '%\_bucket' THEN 0 WHEN m.metric LIKE '%\_sum' THEN 1
                WHEN m.metric LIKE '%\_count' THEN 2 ELSE 0 END AS part,
           CASE WHEN m.labels ? 'le' THEN
                  CASE WHEN m.labels->>'le' = '+Inf' THEN 'Infinity'::double precision
                       ELSE (m.labels->>'le')::double precision END END AS le
      FROM extsvc.metrics() m
      LEFT JOIN fam f ON f.family = m.metric
                      OR (f.type = 'histogram' AND m.metric IN (f.family || '_bucket', f.family || '_sum',
                                                                 f.family || '_count'))),
  lines AS (
    SELECT s.family, s.type, s.help, extsvc._prometheus_line(s.metric, s.labels, s.value) AS line,
           s.labels - 'le' AS series, s.part, s.le, s.labels
      FROM samples s),
  blocks AS (
    SELECT family,
           format(E'# HELP %s %s\n# TYPE %s %s\n', family,
                  replace(replace(min(help), '\', '\\'), E'\n', '\n'), family, min(type))
             || string_agg(line || E'\n', '' ORDER BY series, part, le, labels) AS block
      FROM lines
     GROUP BY family)
  SELECT coalesce(string_agg(block, '' ORDER BY family), '') FROM blocks
$fn$;
COMMENT ON FUNCTION extsvc.metrics_prometheus() IS
  'Monitoring: extsvc.metrics() in the Prometheus text exposition format (version 0.0.4), for a scrape endpoint or a textfile collector.';

REVOKE ALL ON FUNCTION extsvc._queue_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION extsvc._worker_metrics(), extsvc._metric_families(),
                       extsvc._prometheus_line(text, jsonb, double precision), extsvc.metrics(),
                       extsvc.metrics_prometheus() FROM PUBLIC;
REVOKE ALL ON extsvc.metrics FROM PUBLIC;
-- Readers of the metrics: NICo's role, operators, and PostgreSQL's predefined
-- monitoring role (postgres_exporter usually runs as a pg_monitor member).
-- The samples are aggregates: no tenant, service or instance id is a label.
GRANT USAGE ON SCHEMA extsvc TO pg_monitor;
GRANT EXECUTE ON FUNCTION extsvc.metrics(), extsvc.metrics_prometheus() TO extsvc_api, extsvc_admin, pg_monitor;
GRANT SELECT ON extsvc.metrics TO extsvc_api, extsvc_admin, pg_monitor;
-- A read-only role extsvc_reader, where the installation has one, reads them too.
DO $grant$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'extsvc_reader') THEN
    GRANT USAGE ON SCHEMA extsvc TO extsvc_reader;
    GRANT EXECUTE ON FUNCTION extsvc.metrics(), extsvc.metrics_prometheus() TO extsvc_reader;
    GRANT SELECT ON extsvc.metrics TO extsvc_reader;
  END IF;
END
$grant$;
