-- extsvc.health_check() (issue 28, sql/parts/92_health.sql, docs/runbook.md): its shape and
-- grants, and each check that SQL alone can make fail: the queue (a row due for long, a row
-- retrying without progress), stuck rows (FAILED, per-DPU ERROR, UNKNOWN, PENDING for long), the
-- settings and the workers of this test server (no cluster configured: the workers cannot work).
-- The checks that need a cluster (reachability, watch streams, the Lease held) fail in
-- test/e2e/test_ops.py against dpfsim.
BEGIN;
\ir helpers.psql
SELECT plan(41);

SET LOCAL extsvc.enforce_chart_allowlist = off;
\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'

CREATE TEMP VIEW hc AS SELECT h."check", h.status, h.detail, h.hint FROM extsvc.health_check() h;
CREATE FUNCTION pg_temp.st(c text) RETURNS text LANGUAGE sql AS $$ SELECT status FROM hc WHERE "check" = c $$;
CREATE FUNCTION pg_temp.dt(c text) RETURNS text LANGUAGE sql AS $$ SELECT detail FROM hc WHERE "check" = c $$;

-- shape, grants -----------------------------------------------------------------------------------
SELECT is((SELECT array_agg("check" ORDER BY "check") FROM hc),
          ARRAY['clock_skew', 'cluster_dpu', 'cluster_management', 'dpf_api', 'library', 'queue', 'settings',
                'site_lease', 'stuck_rows', 'tls', 'watch', 'worker_state'],
          'one row per check');
SELECT is((SELECT count(*)::int FROM hc WHERE status NOT IN ('ok', 'warning', 'error') OR detail IS NULL), 0,
          'every status is ok, warning or error, with a detail');
SELECT is((SELECT count(*)::int FROM hc WHERE status <> 'ok' AND hint IS NULL), 0, 'every row that is not ok has a hint');
SELECT ok(has_function_privilege('pg_monitor', 'extsvc.health_check()', 'EXECUTE'), 'pg_monitor may run it');
SELECT ok(has_function_privilege('extsvc_admin', 'extsvc.health_check()', 'EXECUTE'), 'extsvc_admin may run it');
SELECT ok(NOT has_function_privilege('extsvc_api', 'extsvc.health_check()', 'EXECUTE'), 'extsvc_api may not');
SELECT ok(NOT has_function_privilege('public', 'extsvc._health_file_error(text)', 'EXECUTE'),
          'the file probe is closed to PUBLIC');
SELECT ok(NOT has_function_privilege('public', 'extsvc._health_tls_findings()', 'EXECUTE'),
          'the TLS probe is closed to PUBLIC');

-- this server: preloaded, workers = 1, no cluster configured -------------------------------------
SELECT is(pg_temp.st('library'), 'ok', 'library: preloaded, the worker runs');
SELECT is(pg_temp.st('settings'), 'error', 'settings: no management cluster is an error');
SELECT matches(pg_temp.dt('settings'), 'no management cluster configured', 'settings: says which');
SELECT is(pg_temp.st('cluster_management'), 'error', 'cluster_management: not configured');
SELECT isnt(pg_temp.st('site_lease'), 'ok', 'site_lease: not held without a cluster');
SELECT is(pg_temp.st('dpf_api'), 'warning', 'dpf_api: not detected without a cluster');
SELECT matches(pg_temp.dt('dpf_api'), 'needs DPF v26\.8 or later', 'dpf_api: names the minimum release');
SELECT is(pg_temp.st('clock_skew'), 'warning', 'clock_skew: not measured without a cluster');
SELECT is(pg_temp.st('tls'), 'ok', 'tls: nothing configured is ok');

-- TLS material (issue 28, part 3): the PEM and X.509 parsing behind the tls row -------------------
\set valid_pem '-----BEGIN CERTIFICATE-----\nMIIBIjCByKADAgECAhRMfkMCRKDHEeQ8jSCY/MpoJUQyajAKBggqhkjOPQQDAjAQ\nMQ4wDAYDVQQDDAV2YWxpZDAgFw0yMDAxMDEwMDAwMDBaGA8yMDk5MTIzMTIzNTk1\nOVowEDEOMAwGA1UEAwwFdmFsaWQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQ1\nDkC4n+9fWWRgsB/h6q8k98NgiPPuhds+OWvQrvugO0iT1OPP9UalrFfZoLU+lRyI\nBNLhpr2otSo92K11B4jQMAoGCCqGSM49BAMCA0kAMEYCIQDt1DB0vtdz8GHg5p+8\nyCYuh73zeKm5IhEpjs36l+L0xAIhALbrme8b3flTpJkCnfQW/8yRIc4pr8jwIKxz\nSH1k89ex\n-----END CERTIFICATE-----'
\set expired_pem '-----BEGIN CERTIFICATE-----\nMIIBIzCByqADAgECAhRFPwqSBYePz4yXCmaV38Wpgr6h6TAKBggqhkjOPQQDAjAS\nMRAwDgYDVQQDDAdleHBpcmVkMB4XDTAwMDEwMTAwMDAwMFoXDTAxMDEwMTEyMDAw\nMFowEjEQMA4GA1UEAwwHZXhwaXJlZDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IA\nBDUOQLif719ZZGCwH+HqryT3w2CI8+6F2z45a9Cu+6A7SJPU48/1RqWsV9mgtT6V\nHIgE0uGmvai1Kj3YrXUHiNAwCgYIKoZIzj0EAwIDSAAwRQIgHk8D4NA0HEuPLVOA\nc1gWLoB42zi8gBe7cdKzVX9VZIwCIQD0ZCI7GTdolO1xuVO1kI1FfD6rh+w+rFt3\nHleLYgS3LQ==\n-----END CERTIFICATE-----'
-- (psql does not fill variables inside dollar quotes: the tests read them from a table)
CREATE TEMP TABLE pem AS SELECT :'valid_pem'::text AS valid, :'expired_pem'::text AS expired;
SELECT is((SELECT row(not_before, not_after)::text FROM extsvc._health_der_validity(
             decode(regexp_replace(regexp_replace(:'valid_pem', '-----[A-Z ]+-----', '', 'g'), '\s', '', 'g'), 'base64'))),
          row('2020-01-01 00:00:00+00'::timestamptz, '2099-12-31 23:59:59+00'::timestamptz)::text,
          'the validity of a DER certificate (UTCTime notBefore, GeneralizedTime notAfter)');
SELECT is((SELECT not_after FROM extsvc._health_der_validity(decode('3003020101', 'hex'))), NULL,
          'bytes that are not a certificate: NULL');
SELECT is_empty($$SELECT * FROM extsvc._health_pem_findings('f', (SELECT valid FROM pem), 'client')$$,
                'a client certificate valid until 2099: nothing to say');
SELECT results_eq($$SELECT severity, finding FROM extsvc._health_pem_findings('extsvc.kube_ca_file', (SELECT expired FROM pem), 'ca')$$,
                  $$VALUES ('error', 'extsvc.kube_ca_file: certificate 1 expired at 2001-01-01 12:00:00 UTC')$$,
                  'a CA bundle whose only certificate expired: error, with the setting and the date');
SELECT results_eq($$SELECT severity FROM extsvc._health_pem_findings('f', (SELECT valid || E'\n' || expired FROM pem), 'ca')$$,
                  $$VALUES ('warning')$$, 'an expired certificate beside a valid one in a CA bundle: warning');
SELECT results_eq($$SELECT severity FROM extsvc._health_pem_findings('f', (SELECT expired FROM pem), 'client')$$,
                  $$VALUES ('error')$$, 'an expired client certificate: error');
SELECT results_eq($$SELECT finding FROM extsvc._health_pem_findings('f', 'hello', 'ca')$$,
                  $$VALUES ('f: no PEM certificate (-----BEGIN CERTIFICATE-----)')$$, 'not PEM: error');
SELECT results_eq($$SELECT finding FROM extsvc._health_pem_findings('f', E'-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----', 'client')$$,
                  $$VALUES ('f: certificate 1 is not a parseable X.509 certificate')$$, 'PEM that is no certificate: error');
SELECT results_eq($$SELECT severity FROM extsvc._health_pem_findings('f', (SELECT valid FROM pem), 'key')$$,
                  $$VALUES ('error')$$, 'a certificate where a key belongs: error');
SELECT is_empty($$SELECT * FROM extsvc._health_pem_findings('f', E'-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----', 'key')$$,
                'a PEM private key: nothing to say');

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
