-- extsvc.health_check() (issue 28, sql/parts/92_health.sql, docs/runbook.md): its shape and
-- grants, and each check that SQL alone can make fail: the queue (a row due for long, a row
-- retrying without progress), stuck rows (FAILED, per-DPU ERROR, UNKNOWN, PENDING for long), the
-- settings and the workers of this test server (no cluster configured: the workers cannot work).
-- The checks that need a cluster (reachability, watch streams, the Lease held) fail in
-- test/e2e/test_ops.py against dpfsim.
BEGIN;
\ir helpers.psql
SELECT plan(26);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'

CREATE TEMP VIEW hc AS SELECT h."check", h.status, h.detail, h.hint FROM extsvc.health_check() h;
CREATE FUNCTION pg_temp.st(c text) RETURNS text LANGUAGE sql AS $$ SELECT status FROM hc WHERE "check" = c $$;
CREATE FUNCTION pg_temp.dt(c text) RETURNS text LANGUAGE sql AS $$ SELECT detail FROM hc WHERE "check" = c $$;

-- shape, grants -----------------------------------------------------------------------------------
SELECT is((SELECT array_agg("check" ORDER BY "check") FROM hc),
          ARRAY['cluster_dpu', 'cluster_management', 'library', 'queue', 'settings', 'site_lease',
                'stuck_rows', 'watch', 'worker_state'],
          'one row per check');
SELECT is((SELECT count(*)::int FROM hc WHERE status NOT IN ('ok', 'warning', 'error') OR detail IS NULL), 0,
          'every status is ok, warning or error, with a detail');
SELECT is((SELECT count(*)::int FROM hc WHERE status <> 'ok' AND hint IS NULL), 0, 'every row that is not ok has a hint');
SELECT ok(has_function_privilege('pg_monitor', 'extsvc.health_check()', 'EXECUTE'), 'pg_monitor may run it');
SELECT ok(has_function_privilege('extsvc_admin', 'extsvc.health_check()', 'EXECUTE'), 'extsvc_admin may run it');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.health_check()', 'EXECUTE'), 'extsvc_api may not');
SELECT ok(NOT has_function_privilege('public', 'extsvc._health_file_error(text)', 'EXECUTE'),
          'the file probe is closed to PUBLIC');

-- this server: preloaded, workers = 1, no cluster configured -------------------------------------
SELECT is(pg_temp.st('library'), 'ok', 'library: preloaded, the worker runs');
SELECT is(pg_temp.st('settings'), 'error', 'settings: no management cluster is an error');
SELECT matches(pg_temp.dt('settings'), 'no management cluster configured', 'settings: says which');
SELECT is(pg_temp.st('cluster_management'), 'error', 'cluster_management: not configured');
SELECT isnt(pg_temp.st('site_lease'), 'ok', 'site_lease: not held without a cluster');

-- the queue: a clean queue is ok, then a row due for 10 minutes --------------------------------
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = NULL, attempts = 0;
UPDATE extsvc.dpu_reconciliations SET next_due_at = NULL, attempts = 0;
SELECT is(pg_temp.st('queue'), 'ok', 'queue: nothing due, nothing retrying');
SELECT lives_ok(format($$SELECT extsvc.create_service(tenant_organization_id => 'tenant-h', service_name => 'h1',
                          service_type => 'DPF_HELM_CHART', data => %L, dpu_target => 'PRIMARY')$$, :'chart'),
                'fixture: a service');
UPDATE extsvc.dpf_extension_service_reconciliations SET next_due_at = now() - interval '10 minutes';
SELECT is(pg_temp.st('queue'), 'warning', 'queue: a row due for 10 minutes is a warning');
SELECT matches(pg_temp.dt('queue'), 'oldest due (59[89]|60[0-9]) s', 'queue: its age in the detail');
-- retrying without progress for 2 hours (due later: only the retry age shows)
UPDATE extsvc.dpf_extension_service_reconciliations
   SET next_due_at = now() + interval '1 minute', attempts = 7, last_success_at = now() - interval '2 hours';
SELECT is(pg_temp.st('queue'), 'warning', 'queue: a row retrying for 2 hours is a warning');

SELECT cmp_ok((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_queue_oldest_retrying_age_seconds'
                  AND labels = '{"queue": "service"}'), '>=', 7200::float8,
              'extsvc_queue_oldest_retrying_age_seconds: a row in backoff counts from its last success');
SELECT is((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_queue_oldest_due_age_seconds'
            AND labels = '{"queue": "service"}'), 0::float8, '... which the due age does not see');

-- stuck rows, FAILED by cause ------------------------------------------------------------------------
SELECT is(pg_temp.st('stuck_rows'), 'ok', 'stuck_rows: a fresh CREATING service is not stuck');
UPDATE extsvc.service_records SET updated_at = now() - interval '2 hours' WHERE tenant_organization_id = 'tenant-h';
SELECT is(pg_temp.st('stuck_rows'), 'warning', 'stuck_rows: CREATING for 2 hours');
SELECT matches(pg_temp.dt('stuck_rows'), 'for over 1 h: 1;', 'stuck_rows: counted');
SELECT cmp_ok((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_oldest_unfinished_age_seconds'
                  AND labels = '{"kind": "service"}'), '>=', 7200::float8,
              'extsvc_oldest_unfinished_age_seconds{kind=service}');
UPDATE extsvc.service_records SET lifecycle_state = 'FAILED', state_actor = 'worker', state_reason = 'permanent_error',
                                  status_message = 'the API refused the DPUService'
 WHERE tenant_organization_id = 'tenant-h';
SELECT matches(pg_temp.dt('stuck_rows'), 'services FAILED: 1,', 'stuck_rows: a FAILED service');
SELECT lives_ok(format($$SELECT extsvc.create_service(tenant_organization_id => 'tenant-h2', service_name => 'h2',
                          service_type => 'DPF_HELM_CHART', data => %L, dpu_target => 'PRIMARY')$$, :'chart'),
                'fixture: a second service');
UPDATE extsvc.service_records SET lifecycle_state = 'FAILED', state_actor = 'worker', state_reason = 'unknown_fields',
                                  status_message = 'pruned fields'
 WHERE tenant_organization_id = 'tenant-h2';
SELECT is((SELECT jsonb_object_agg(labels->>'reason', value) FROM extsvc.metrics() WHERE metric = 'extsvc_services_failed'),
          '{"tenant": 1, "platform": 1}'::jsonb,
          'extsvc_services_failed: a refused spec is the tenant''s, a DPF release without the fields the platform''s');

SELECT * FROM finish();
ROLLBACK;
