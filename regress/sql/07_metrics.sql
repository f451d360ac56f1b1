-- Issue 12: extsvc.metrics() and extsvc.metrics_prometheus(). The library is
-- preloaded here but no cluster is configured, so the worker stays idle and
-- never claims: the queue gauges below only move with this script. Worker
-- counters (iterations, ages) vary from run to run and are checked by shape.
CREATE EXTENSION nico_extsvc;
SET extsvc.enforce_chart_allowlist = off;

------------------------------------------------------------------ shape (SPEC 6)
SELECT pg_get_function_result('extsvc.metrics()'::regprocedure) AS metrics,
       pg_get_function_result('extsvc.metrics_prometheus()'::regprocedure) AS metrics_prometheus;
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'extsvc.metrics'::regclass AND attnum > 0 ORDER BY attnum;
SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p
 WHERE p.pronamespace = 'extsvc'::regnamespace AND p.proname IN ('metrics', 'metrics_prometheus') ORDER BY 1;
-- every sample has a documented family and the extsvc_ prefix (no row)
SELECT DISTINCT m.metric FROM extsvc.metrics() m
 WHERE m.metric !~ '^extsvc_[a-z0-9_]+$'
    OR NOT EXISTS (SELECT FROM extsvc._metric_families() f
                    WHERE f.family = m.metric
                       OR (f.type = 'histogram' AND m.metric IN (f.family || '_bucket', f.family || '_sum', f.family || '_count')));
-- counters end in _total, nothing else does (no row)
SELECT family, type FROM extsvc._metric_families() WHERE (type = 'counter') <> (family LIKE '%\_total');
-- the families of an empty database (gauges are always there, zeros included)
SELECT metric, count(*) AS series, sum(value) AS total FROM extsvc.metrics()
 WHERE metric !~ '^extsvc_(worker|workers|lease|leases|wakes|kube|retries|resyncs|last_resync|orphans|dpus_rederived|watch|shmem|server)'
 GROUP BY metric ORDER BY metric;
-- the preloaded worker part: one slot (extsvc.workers = 1), up, retry series zero
SELECT metric, labels, value FROM extsvc.metrics()
 WHERE metric IN ('extsvc_workers_configured', 'extsvc_worker_up', 'extsvc_worker_restarts_total')
 ORDER BY 1, 2;
SELECT count(*) AS retry_series, sum(value) AS retries FROM extsvc.metrics() WHERE metric = 'extsvc_retries_total';
SELECT value >= 0 AND value < 120 AS iteration_age_ok FROM extsvc.metrics()
 WHERE metric = 'extsvc_worker_last_iteration_age_seconds';

------------------------------------------------------------------ gauges follow the tables
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000a00000000000000000000', 'fm100hsc000000000000000000000000000000100000000000000000000', 'dpu-a', 'node-a', true);
SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000b00000000000000000000', 'fm100hsc000000000000000000000000000000200000000000000000000', 'dpu-b', 'node-b', true);
SELECT extsvc.register_dpu('fm100dsd000000000000000000000000000000c00000000000000000000', 'fm100hsc000000000000000000000000000000300000000000000000000', 'dpu-c', 'node-c', true);
SELECT extsvc.deregister_dpu('fm100dsd000000000000000000000000000000c00000000000000000000');
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'pod', 'KUBERNETES_POD', 'kind: Pod');
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'dpf', 'DPF_HELM_CHART', :'chart',
       dpu_target => 'PRIMARY', service_id => '5e000000-0000-0000-0000-000000000002');
SELECT service_name, lifecycle_state FROM extsvc.create_service('t1', 'dpf2', 'DPF_HELM_CHART', :'chart',
       dpu_target => 'PRIMARY', service_id => '5e000000-0000-0000-0000-000000000003');
SELECT lifecycle_state FROM extsvc.delete_service('5e000000-0000-0000-0000-000000000003');
-- the worker's part for dpf, by hand: created in the cluster, READY
SELECT c.id AS service_id, extsvc.complete('service', c.id, c.state_version, c.lease_token,
                                     jsonb_build_object('outcome', 'transition', 'new_state', 'READY',
                                                        'reason', 'dpuservice_created',
                                                        'applied_revision', (c.work->>'desired_revision')::integer,
                                                        'http_status', 201, 'observed_generation', 1,
                                                        'observed_resource_version', '1')) AS result
  FROM extsvc.claim('service', 'test-worker', 10, 30) c
 WHERE c.id = '5e000000-0000-0000-0000-000000000002';
UPDATE extsvc.dpf_extension_service_reconciliations SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL;
SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000001', 't1', 'fm100hsc000000000000000000000000000000100000000000000000000');
SELECT extsvc.upsert_instance('10000000-0000-0000-0000-000000000002', 't1', 'fm100hsc000000000000000000000000000000200000000000000000000');
SELECT extsvc.set_instance_extension_services(i, jsonb_build_array(jsonb_build_object(
         'service_id', '5e000000-0000-0000-0000-000000000002',
         'version', (SELECT version FROM extsvc.services WHERE service_id = '5e000000-0000-0000-0000-000000000002'))))
  FROM unnest(ARRAY['10000000-0000-0000-0000-000000000001', '10000000-0000-0000-0000-000000000002']::uuid[]) i;
-- a worker pass on the DPUs: dpu-a observes RUNNING, dpu-b ERROR
SELECT d.dpu_device_name,
       extsvc.complete('dpu', c.id, c.state_version, c.lease_token,
                       jsonb_build_object('outcome', 'observed', 'results', (
                         SELECT jsonb_agg(i || jsonb_build_object('state',
                                  CASE d.dpu_device_name WHEN 'dpu-a' THEN 'RUNNING' ELSE 'ERROR' END))
                           FROM jsonb_array_elements(c.work->'items') i))) AS result
  FROM extsvc.claim('dpu', 'test-worker', 100, 30) c
  JOIN extsvc.dpus d ON d.machine_id = c.id
 WHERE jsonb_array_length(c.work->'items') > 0
 ORDER BY 1;
-- one service row leased, one made due 90 s ago
UPDATE extsvc.dpf_extension_service_reconciliations
   SET lease_owner = 'test-worker', lease_token = '00000000-0000-0000-0000-0000000000aa',
       lease_expires_at = now() + interval '1 minute'
 WHERE service_id = '5e000000-0000-0000-0000-000000000003';
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = now() - interval '90 seconds', attempts = 2
 WHERE service_id = '5e000000-0000-0000-0000-000000000002';
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL
 WHERE service_id NOT IN ('5e000000-0000-0000-0000-000000000002', '5e000000-0000-0000-0000-000000000003');
UPDATE extsvc.dpu_reconciliations SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
       next_due_at = NULL;

SELECT metric, labels, value FROM extsvc.metrics()
 WHERE metric IN ('extsvc_services', 'extsvc_placement_attachments', 'extsvc_site_service_dpus', 'extsvc_dpu_states',
                  'extsvc_queue_due', 'extsvc_queue_leased', 'extsvc_queue_retrying')
   AND value <> 0
 ORDER BY 1, 2;
SELECT labels->>'queue' AS queue, value BETWEEN 90 AND 150 AS about_90s
  FROM extsvc.metrics() WHERE metric = 'extsvc_queue_oldest_due_age_seconds' AND value > 0;
-- the same numbers as the tables and views operators read
SELECT (SELECT sum(value) FROM extsvc.metrics() WHERE metric = 'extsvc_services')
         = (SELECT count(*) FROM extsvc.services) AS services_match,
       (SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_queue_due' AND labels = '{"queue": "service"}')
         = (SELECT count(*) FROM extsvc.reconciliation_queue WHERE due) AS queue_due_matches,
       (SELECT sum(value) FROM extsvc.metrics() WHERE metric = 'extsvc_placement_attachments')
         = (SELECT count(*) FROM extsvc.dpf_extension_service_attachments) AS attachments_match,
       (SELECT sum(value) FROM extsvc.metrics() WHERE metric = 'extsvc_dpu_states')
         = (SELECT count(*) FROM extsvc.dpus) AS dpus_match,
       (SELECT count(*) FROM extsvc.metrics) = (SELECT count(*) FROM extsvc.metrics()) AS view_matches;

------------------------------------------------------------------ the exposition format
-- Each line is a # HELP, a # TYPE or a sample (name{labels} value); a TYPE
-- precedes the samples of its family; histograms are cumulative with
-- +Inf = _count. (The e2e test parses the live output with a Python checker.)
CREATE TEMP TABLE expo AS
SELECT n, line FROM regexp_split_to_table(extsvc.metrics_prometheus(), E'\n') WITH ORDINALITY AS t(line, n);
SELECT right(extsvc.metrics_prometheus(), 1) = E'\n' AS ends_with_newline,
       (SELECT count(*) FROM expo WHERE line = '') AS empty_lines;   -- the one after the last newline
SELECT n, line FROM expo
 WHERE line <> ''
   AND line !~ '^# HELP extsvc_[a-z0-9_]+ \S.*$'
   AND line !~ '^# TYPE extsvc_[a-z0-9_]+ (counter|gauge|histogram)$'
   AND line !~ '^extsvc_[a-z0-9_]+(\{[a-z_]+="([^"\\\n]|\\[\\"n])*"(,[a-z_]+="([^"\\\n]|\\[\\"n])*")*\})? (-?[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?|\+Inf|-Inf|NaN)$';
-- every sample's family has exactly one TYPE line, before the sample
WITH s AS (SELECT n, substring(line FROM '^([a-z0-9_]+)') AS name FROM expo WHERE line ~ '^extsvc_'),
     t AS (SELECT n, split_part(line, ' ', 3) AS family, split_part(line, ' ', 4) AS type FROM expo WHERE line LIKE '# TYPE %')
SELECT s.n, s.name FROM s
 WHERE NOT EXISTS (SELECT FROM t WHERE t.n < s.n
                     AND (t.family = s.name OR (t.type = 'histogram' AND s.name IN (t.family || '_bucket', t.family || '_sum', t.family || '_count'))));
SELECT family, count(*) FROM (SELECT split_part(line, ' ', 3) AS family FROM expo WHERE line LIKE '# TYPE %') x
 GROUP BY family HAVING count(*) > 1;
SELECT line FROM expo WHERE line LIKE '# TYPE extsvc\_services %' OR line LIKE '# HELP extsvc\_services %'
    OR line LIKE 'extsvc\_services{%state="FAILED"%' OR line LIKE '# TYPE extsvc\_retries\_total %'
 ORDER BY n;
-- label values are escaped (backslash, double quote, newline), le goes last,
-- special values are spelled the Prometheus way, integers have no exponent
SELECT extsvc._prometheus_line('x_total', jsonb_build_object('le', '+Inf', 'a', E'q"b\\c\nd'), 'Infinity') AS line
UNION ALL SELECT extsvc._prometheus_line('x', '{}', 'NaN')
UNION ALL SELECT extsvc._prometheus_line('x', '{"b": "1", "a": "2"}', '-Infinity')
UNION ALL SELECT extsvc._prometheus_line('x', NULL, 1234567)
UNION ALL SELECT extsvc._prometheus_line('x', NULL, 0.25)
UNION ALL SELECT extsvc._prometheus_line('x', NULL, 1e20);

------------------------------------------------------------------ privileges
CREATE ROLE extsvc_m_nobody LOGIN;
CREATE ROLE extsvc_m_api LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_m_admin LOGIN IN ROLE extsvc_admin;
CREATE ROLE extsvc_m_monitor LOGIN IN ROLE pg_monitor;
CREATE FUNCTION pg_temp.as_user(p_role name, p_stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_res text := 'ok';
BEGIN
  EXECUTE format('SET SESSION AUTHORIZATION %I', p_role);
  BEGIN
    EXECUTE p_stmt;
  EXCEPTION WHEN OTHERS THEN
    v_res := SQLSTATE || ': ' || SQLERRM;
  END;
  RESET SESSION AUTHORIZATION;
  RETURN v_res;
END $$;
SELECT r AS role,
       pg_temp.as_user(r, 'SELECT count(*) FROM extsvc.metrics()') AS metrics,
       pg_temp.as_user(r, 'SELECT count(*) FROM extsvc.metrics') AS view,
       pg_temp.as_user(r, 'SELECT extsvc.metrics_prometheus()') AS prometheus,
       pg_temp.as_user(r, 'SELECT count(*) FROM extsvc._worker_metrics()') AS internal
  FROM unnest(ARRAY['extsvc_m_nobody', 'extsvc_m_api', 'extsvc_m_admin', 'extsvc_m_monitor']::name[]) r;
SELECT has_function_privilege('public', 'extsvc.metrics()', 'EXECUTE') AS public_metrics,
       has_function_privilege('public', 'extsvc.metrics_prometheus()', 'EXECUTE') AS public_prometheus,
       has_table_privilege('public', 'extsvc.metrics', 'SELECT') AS public_view,
       has_schema_privilege('public', 'extsvc', 'USAGE') AS public_schema;
DROP ROLE extsvc_m_nobody, extsvc_m_api, extsvc_m_admin, extsvc_m_monitor;

DROP EXTENSION nico_extsvc;
