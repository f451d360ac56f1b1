-- Issue 29, items 4 and 5: bounds.
--  * observability (KUBERNETES_POD) took 56 MB, a bare string or 5,000-deep
--    nesting: it has NICo's schema now ({"configs": [...]}) and the caps of
--    data (131072 bytes, an object, bounded depth).
--  * error DETAILs quoted caller values whole (a 1 MB version string came
--    back as a 1 MB DETAIL): every caller value is quoted through
--    extsvc._token (48 characters and the length), lists are cut.
--  * tenant ids: one rule everywhere (NICo's TenantOrganizationId: ASCII
--    letters, digits, '_' and '-', 1 to 256 characters, nothing trimmed),
--    22023 with a HINT; a 300-character id gave a raw 23514 with the row in
--    DETAIL, and upsert_instance took anything.
--  * set_instance_extension_services takes at most 64 entries.
BEGIN;
\ir helpers.psql
SELECT plan(32);

SET LOCAL client_min_messages = warning;
SET LOCAL extsvc.enforce_chart_allowlist = off;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''5a500000-0000-0000-0000-000000000001'''
\set K '''5a500000-0000-0000-0000-000000000002'''
\set I '''5a510000-0000-0000-0000-000000000001'''
\set H '''fm100hs5a52000000000000000000000000000100000000000000000000'''

-- fixtures: a KUBERNETES_POD service, a DPF service, an instance
SELECT lives_ok(format($$SELECT extsvc.create_service('bnd-t', 'bnd-pod', 'KUBERNETES_POD', 'kind: Pod', service_id => %L)$$, :S),
                'fixture: a KUBERNETES_POD service');
SELECT lives_ok(format($$SELECT extsvc.create_service('bnd-t', 'bnd-dpf', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY', service_id => %L)$$,
                       :'chart', :K), 'fixture: a DPF service');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 'bnd-t', %L, NULL, false)$$, :I, :H), 'fixture: an instance');

------------------------------------------------------------------ observability
SELECT is(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$, '"logs"'), 'sqlstate', 'message', 'detail', 'hint'),
          '22023 | observability must be a JSON object | JSON path: $ | Pass {"configs": [...]} as NICo stores it, or NULL.',
          'observability: a bare string is refused');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        repeat('{"a":', 5000) || '1' || repeat('}', 5000)), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.a', 'observability: 5,000-deep nesting is refused at its first unknown field');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        jsonb_build_object('configs', (SELECT jsonb_agg(jsonb_build_object('name', 'n' || i,
                                          'config', jsonb_build_object('Logging', jsonb_build_object('path', '/var/log/' || repeat('x', 100)))))
                                          FROM generate_series(1, 1200) i))), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 2),
          'observability is larger than 131072 bytes', 'observability: the size cap of data applies');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"name":"m","config":{"Prometheus":{"endpoint":"svc:9090","scrape_interval_seconds":30,"x":1}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].config.Prometheus.x', 'observability: an unknown field is named by its path');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"name":"m","config":{"Prometheus":{"endpoint":"http://svc/metrics","scrape_interval_seconds":30}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].config.Prometheus.endpoint', 'observability: a Prometheus endpoint is host:port');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"config":{"Logging":{"path":"/var/log/$(reboot)"}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].config.Logging.path', 'observability: a log path has a bounded alphabet');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"name":"m","config":{"Logging":{"path":"/a"},"Prometheus":{"endpoint":"a:1","scrape_interval_seconds":1}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].config', 'observability: a config is either Prometheus or Logging');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"name":"' || repeat('n', 65) || '","config":{"Logging":{"path":"/a"}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].name', 'observability: a config name has at most 64 characters');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o1', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                                        '{"configs":[{"config":{"Prometheus":{"endpoint":"a:1","scrape_interval_seconds":-1}}}]}'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 3),
          'JSON path: $.configs[0].config.Prometheus.scrape_interval_seconds', 'observability: the interval is a u32');
SELECT is(pg_temp.diag(format($$SELECT extsvc.create_service('bnd-t', 'o-ok', 'KUBERNETES_POD', 'kind: Pod', observability => %L)$$,
                             '{"configs":[{"name":"busybox-metrics","config":{"Prometheus":{"scrape_interval_seconds":30,"endpoint":"busybox:9090"}}},'
                             '{"name":null,"config":{"Logging":{"path":"/var/log/service.log"}}}]}'), 'sqlstate', 'message', 'detail', 'hint'),
          'ok', 'observability: NICo''s shape is accepted');
SELECT is(pg_temp.diag(format($$SELECT extsvc.update_service(%L, observability => %L)$$, :S, '[1, 2]'), 'sqlstate', 'message', 'detail', 'hint'),
          '22023 | observability must be a JSON object | JSON path: $ | Pass {"configs": [...]} as NICo stores it, or NULL.',
          'observability: update_service checks it too');
SELECT is(pg_temp.diag(format($$SELECT extsvc.update_service(%L, observability => %L)$$, :S, '{"configs":[]}'), 'sqlstate', 'message', 'detail', 'hint'), 'ok',
          'observability: an empty list of configs is fine');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.update_service(%L, observability => %L)$$, :K, '"x"'), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '0A000',
          'observability on a DPF service is still 0A000');

------------------------------------------------------------------ tenant ids
SELECT is(pg_temp.diag($$SELECT extsvc.create_service(repeat('t', 300), 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'sqlstate', 'message', 'detail', 'hint'),
          '22023 | tenant_organization_id must be 1 to 256 letters, digits, ''_'' or ''-'' | field: tenant_organization_id = tttttttttttttttttttttttttttttttttttttttttttttttt... (300 characters) | Pass NICo''s tenant organization id as it is (ASCII letters, digits, ''_'' and ''-'', at most 256).',
          'a 300-character tenant id is 22023 with a HINT (it was a raw 23514 with the row in DETAIL)');
SELECT is(split_part(pg_temp.diag($$SELECT extsvc.create_service(' bnd-t', 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'a tenant id with a leading blank is refused (it was stored with the blank)');
SELECT is(split_part(pg_temp.diag($$SELECT extsvc.create_service('bnd t', 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'a tenant id with a blank inside is refused');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.create_service(%L, 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'bnd-t' || chr(10)), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'a tenant id with a newline is refused');
SELECT is(split_part(pg_temp.diag($$SELECT extsvc.create_service('', 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'an empty tenant id is refused');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.upsert_instance(gen_random_uuid(), %L, %L)$$, repeat('t', 300), :H), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'upsert_instance: a 300-character tenant id is refused (it had no limit)');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.upsert_instance(gen_random_uuid(), 'bnd;t', %L)$$, :H), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'upsert_instance: a tenant id with another character is refused');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.get_instance(%L, 'bnd t')$$, :I), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'the tenant argument of the reads follows the same rule');
SELECT is(split_part(pg_temp.diag(format($$SELECT extsvc.update_service(%L, description => 'd', tenant_organization_id => %L)$$, :S, repeat('t', 257)), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 1), '22023',
          'and of the mutating functions');
SELECT is(pg_temp.diag($$SELECT extsvc.create_service('Tenant_B-1', 'x', 'KUBERNETES_POD', 'kind: Pod')$$, 'sqlstate', 'message', 'detail', 'hint'), 'ok',
          'NICo''s alphabet is accepted');
SELECT is((SELECT count(*)::int FROM extsvc.service_records WHERE tenant_organization_id <> 'Tenant_B-1' AND tenant_organization_id <> 'bnd-t'), 0,
          'no refused tenant id was stored');

------------------------------------------------------------------ the list cap
SELECT is(split_part(pg_temp.diag(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I,
                                        (SELECT jsonb_agg(jsonb_build_object('service_id', :S, 'version', 'V1-T1')) FROM generate_series(1, 65))), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 2),
          'services lists more than 64 entries', 'set_instance_extension_services: 65 entries are refused before anything else');
SELECT is(split_part(pg_temp.diag(format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I,
                                        (SELECT jsonb_agg(jsonb_build_object('service_id', :S, 'version', v.version)) FROM generate_series(1, 64),
                                           (SELECT version FROM extsvc.services WHERE service_id = :S) v)), 'sqlstate', 'message', 'detail', 'hint'), ' | ', 2),
          'a service appears twice', '64 entries pass the cap');

------------------------------------------------------------------ DETAIL sizes
-- every call quotes a 1 MB caller value at most as a short token
CREATE TEMP TABLE big_calls (what text, stmt text);
CREATE FUNCTION pg_temp.big() RETURNS text LANGUAGE sql AS $$ SELECT repeat('v', 1048576) $$;
INSERT INTO big_calls VALUES
  ('delete_service version', format('SELECT extsvc.delete_service(%L, %L)', :S, pg_temp.big())),
  ('delete_service_versions', format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[%L])', :S, pg_temp.big())),
  ('delete_service_versions x3', format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[%L, %L || ''2'', %L || ''3''])', :S, pg_temp.big(), pg_temp.big(), pg_temp.big())),
  ('service_instances version', format('SELECT * FROM extsvc.service_instances(%L, %L)', :S, pg_temp.big())),
  ('remove_terminated_services version', format('SELECT extsvc.remove_terminated_services(%L, %L)', :I,
     jsonb_build_array(jsonb_build_object('service_id', :S, 'version', pg_temp.big())))),
  ('set_instance_extension_services version', format('SELECT extsvc.set_instance_extension_services(%L, %L)', :I,
     jsonb_build_array(jsonb_build_object('service_id', :S, 'version', pg_temp.big())))),
  ('disallow_chart repo_url', format('SELECT extsvc.disallow_chart(%L)', 'https://' || pg_temp.big())),
  ('disallow_chart chart_name', format('SELECT extsvc.disallow_chart(%L, %L)', 'https://charts.example.com', pg_temp.big())),
  ('allow_chart repo_url', format('SELECT extsvc.allow_chart(%L)', 'https://' || pg_temp.big())),
  ('create_service tenant', format($$SELECT extsvc.create_service(%L, 'x', 'KUBERNETES_POD', 'kind: Pod')$$, pg_temp.big())),
  ('create_service service_type', format($$SELECT extsvc.create_service('bnd-t', 'x', %L, 'kind: Pod')$$, pg_temp.big())),
  ('create_service dpu_target', format($$SELECT extsvc.create_service('bnd-t', 'x', 'DPF_HELM_CHART', %L, dpu_target => %L)$$, :'chart', pg_temp.big())),
  ('create_service deployment_scope', format($$SELECT extsvc.create_service('bnd-t', 'x', 'DPF_HELM_CHART', %L, deployment_scope => %L)$$, :'chart', pg_temp.big())),
  ('create_service name', format($$SELECT extsvc.create_service('bnd-t', %L, 'KUBERNETES_POD', 'kind: Pod')$$, pg_temp.big())),
  ('create_service chartName', format($$SELECT extsvc.create_service('bnd-t', 'x', 'DPF_HELM_CHART', %L, dpu_target => 'ALL')$$,
     replace(:'chart', '"svc"', to_json(pg_temp.big())::text))),
  ('create_service label key', format($$SELECT extsvc.create_service('bnd-t', 'x', 'DPF_HELM_CHART', %L, dpu_target => 'ALL')$$,
     replace(:'chart', '"security"', '"serviceDaemonSet":{"labels":{' || to_json(pg_temp.big())::text || ':"x"}},"security"'))),
  ('update_service tenant', format($$SELECT extsvc.update_service(%L, description => 'd', tenant_organization_id => %L)$$, :S, pg_temp.big())),
  ('upsert_instance tenant', format('SELECT extsvc.upsert_instance(gen_random_uuid(), %L, %L)', pg_temp.big(), :H)),
  ('register_dpu device name', format('SELECT extsvc.register_dpu(%L, %L, %L, %L)', 'fm100ds5a53000000000000000000000000000100000000000000000000', :H, pg_temp.big(), 'n')),
  ('get_instance tenant', format('SELECT extsvc.get_instance(%L, %L)', :I, pg_temp.big())),
  ('render_dpuservice tenant', format('SELECT extsvc.render_dpuservice(%L, %L)', :K, pg_temp.big())),
  ('retry_service tenant', format('SELECT extsvc.retry_service(%L, %L)', :K, pg_temp.big())),
  ('rollback_service tenant', format('SELECT extsvc.rollback_service(%L, 1, NULL, %L)', :K, pg_temp.big())),
  ('set_instance_extension_services tenant', format($$SELECT extsvc.set_instance_extension_services(%L, '[]', NULL, %L)$$, :I, pg_temp.big()));
SELECT is(ARRAY(SELECT what || ': ' || length(r) FROM big_calls, LATERAL pg_temp.diag(stmt, 'sqlstate', 'message', 'detail', 'hint') r
                 WHERE r = 'ok' OR length(r) > 1000 ORDER BY what),
          ARRAY[]::text[], 'every call with a 1 MB caller value fails with at most 1000 characters of message, DETAIL and HINT');
SELECT is((SELECT count(*)::int FROM big_calls), 24, 'the 24 calls ran');
SELECT ok(ARRAY(SELECT what FROM big_calls, LATERAL pg_temp.diag(stmt, 'sqlstate', 'message', 'detail', 'hint') r
                 WHERE split_part(r, ' | ', 3) LIKE '%' || repeat('v', 48) || '... (1048576 characters)%')
          @> ARRAY['delete_service version', 'delete_service_versions', 'service_instances version',
                   'remove_terminated_services version', 'set_instance_extension_services version',
                   'disallow_chart chart_name', 'create_service tenant', 'upsert_instance tenant'],
          'the version strings (four functions echoed them whole), chart names and tenant ids are quoted as their first 48 characters and their length');

SELECT * FROM finish();
ROLLBACK;
