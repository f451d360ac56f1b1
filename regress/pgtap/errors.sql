-- SPEC 2.9: every error class has its SQLSTATE, and a refused call changes
-- nothing.
BEGIN;
\ir helpers.psql
SELECT plan(72);

SET LOCAL extsvc.enforce_chart_allowlist = off;

-- A fingerprint of everything the API writes.
CREATE FUNCTION pg_temp.snapshot() RETURNS text LANGUAGE sql AS $$
  SELECT concat_ws(' | ',
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.service_id), '')) FROM extsvc.service_records t),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.service_id, t.version), '')) FROM extsvc.service_versions t),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.service_id, t.revision), '')) FROM extsvc.helm_revisions t),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.id), '')) FROM extsvc.service_state_history t),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.service_id), '')) FROM extsvc.dpf_extension_service_reconciliations t),
    (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.repo_url, t.chart_name), '')) FROM extsvc.chart_allowlist t),
    (SELECT count(*) FROM extsvc.service_records))
$$;

CREATE ROLE extsvc_tap_tenant LOGIN IN ROLE extsvc_api;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set chart2 '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"2.0.0","security":{"privileged":false}}'

-- fixtures: a DPF service, a KUBERNETES_POD service
SELECT lives_ok($$SELECT extsvc.create_service('t1', 'dpf-one', 'DPF_HELM_CHART', '$$ || :'chart' || $$',
                  dpu_target => 'ALL', service_id => 'e0000000-0000-0000-0000-000000000001')$$, 'fixture: DPF service');
SELECT lives_ok($$SELECT extsvc.create_service('t1', 'pod-one', 'KUBERNETES_POD', 'pod',
                  service_id => 'e0000000-0000-0000-0000-000000000002')$$, 'fixture: KUBERNETES_POD service');

CREATE TEMP TABLE snap AS SELECT pg_temp.snapshot() AS s;

------------------------------------------------------------------ 22P02 data not JSON
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', 'not json', dpu_target => 'ALL')$$,
                 '22P02', NULL, '22P02: create with data that is not JSON');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART',
                   '{"repoURL":"oci://a.example.com/c","repoURL":"oci://b.example.com/c"}', dpu_target => 'ALL')$$,
                 '22P02', 'duplicate key at $.repoURL', '22P02: duplicate key');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001', '{} {}')$$,
                 '22P02', NULL, '22P02: update with trailing data');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '22P02 refusals changed nothing');

------------------------------------------------------------------ 22023 invalid field, enum, reserved path, limit
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '[]', dpu_target => 'ALL')$$,
                 '22023', NULL, '22023: data not an object');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART',
                   replace('$$ || :'chart' || $$', '"chartName"', '"extra":1,"chartName"'), dpu_target => 'ALL')$$,
                 '22023', 'unknown field in data', '22023: unknown field');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART',
                   replace('$$ || :'chart' || $$', '}}', '},"serviceDaemonSet":{"nodeSelector":{}}}'), dpu_target => 'ALL')$$,
                 '22023', NULL, '22023: reserved serviceDaemonSet.nodeSelector');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART',
                   replace('$$ || :'chart' || $$', '}}', '},"values":{"serviceDaemonSet":{"nodeSelector":{}}}}'), dpu_target => 'ALL')$$,
                 '22023', NULL, '22023: reserved values.serviceDaemonSet.nodeSelector');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'OTHER', 'pod')$$, '22023', NULL, '22023: unknown service_type');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', dpu_target => 'SOME')$$,
                 '22023', NULL, '22023: unknown dpu_target');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$', deployment_scope => 'EVERYWHERE')$$,
                 '22023', NULL, '22023: unknown deployment_scope');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$')$$,
                 '22023', NULL, '22023: dpu_target missing for INSTANCE_DPUS');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'KUBERNETES_POD', repeat('x', 131073))$$,
                 '22023', NULL, '22023: pod data over the size limit');
SELECT throws_ok($$SELECT extsvc.create_service('t1', repeat('n', 257), 'KUBERNETES_POD', 'pod')$$,
                 '22023', NULL, '22023: name over 256 characters');
SELECT throws_ok($$SELECT extsvc.create_service('', 'x', 'KUBERNETES_POD', 'pod')$$,
                 '22023', NULL, '22023: empty tenant');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001', description => repeat('d', 4097))$$,
                 '22023', NULL, '22023: description over 4096 characters');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001',
                   replace('$$ || :'chart' || $$', '1.0.0', 'latest'))$$,
                 '22023', NULL, '22023: update with chartVersion latest');
SET LOCAL extsvc.enforce_chart_allowlist = on;
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001', '$$ || :'chart2' || $$')$$,
                 '22023', 'chart is not on the chart allow-list', '22023: chart not on the allow-list');
SET LOCAL extsvc.enforce_chart_allowlist = off;
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '22023 refusals changed nothing');

------------------------------------------------------------------ 23505 duplicate name or id
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'DPF-ONE', 'KUBERNETES_POD', 'pod')$$,
                 '23505', 'service name is already in use by this tenant', '23505: duplicate name (case-insensitive)');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000002', service_name => 'Dpf-One')$$,
                 '23505', NULL, '23505: rename onto a used name');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'dpf-one', 'DPF_HELM_CHART', '$$ || :'chart2' || $$',
                   dpu_target => 'ALL', service_id => 'e0000000-0000-0000-0000-000000000001')$$,
                 '23505', 'service_id already exists', '23505: same id, other data');
SELECT throws_ok($$SELECT extsvc.create_service('t2', 'other', 'KUBERNETES_POD', 'pod',
                   service_id => 'e0000000-0000-0000-0000-000000000002')$$,
                 '42501', 'service_id is not available to this tenant',
                 '42501: the id of another tenant''s service is refused without saying it exists (issue #10)');
-- a generated-name collision (a row squatting on the name the next create
-- would generate in this transaction)
SELECT lives_ok($$
  SET LOCAL session_replication_role = replica;
  INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type, dpu_target,
      lifecycle_state, state_actor, state_reason, attachable_version, desired_revision, dpf_service_name, placement_label_key)
  VALUES ('e0000000-0000-0000-0000-0000000000ff', 't9', 'squatter', 'DPF_HELM_CHART', 'ALL', 'CREATING', 'api', 'create',
      'V1-T1', 1, extsvc.dpf_service_name('e0000000-0000-0000-0000-000000000003', extsvc._config_version(1)), 'nico/squatter');
  SET LOCAL session_replication_role = origin;$$, 'fixture: a row holding another service''s generated name');
UPDATE snap SET s = pg_temp.snapshot();
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'collides', 'DPF_HELM_CHART', '$$ || :'chart' || $$',
                   dpu_target => 'ALL', service_id => 'e0000000-0000-0000-0000-000000000003')$$,
                 '23505', 'generated DPUService name collides with another service', '23505: generated name collision');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '23505 refusals changed nothing');

------------------------------------------------------------------ P0002 unknown service or version
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-00000000dead', description => 'x')$$,
                 'P0002', 'service not found', 'P0002: update unknown service');
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-00000000dead')$$,
                 'P0002', 'service not found', 'P0002: delete unknown service');
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-000000000002', 'V7-T1')$$,
                 'P0002', 'service version not found', 'P0002: delete unknown version');
SELECT throws_ok($$SELECT extsvc.render_dpuservice('e0000000-0000-0000-0000-00000000dead')$$,
                 'P0002', NULL, 'P0002: render unknown service');
SELECT throws_ok($$SELECT extsvc.retry_service('e0000000-0000-0000-0000-00000000dead')$$,
                 'P0002', NULL, 'P0002: retry unknown service');
SELECT throws_ok($$SELECT extsvc.disallow_chart('oci://nowhere.example.com/x')$$,
                 'P0002', NULL, 'P0002: disallow an entry that does not exist');
SELECT throws_ok($$SELECT extsvc.set_instance_extension_services('e1000000-0000-0000-0000-00000000dead', '[]')$$,
                 'P0002', 'instance not found', 'P0002: configure an unknown instance');
SELECT throws_ok($$SELECT extsvc.delete_instance('e1000000-0000-0000-0000-00000000dead')$$,
                 'P0002', 'instance not found', 'P0002: delete an unknown instance');
SELECT throws_ok($$SELECT extsvc.deregister_dpu('fm100dse300000000000000000000000000dead00000000000000000000')$$,
                 'P0002', 'DPU not found', 'P0002: deregister an unknown DPU');
SELECT throws_ok($$SELECT * FROM extsvc.dpu_agent_extension_services('fm100dse300000000000000000000000000dead00000000000000000000')$$,
                 'P0002', 'DPU not found', 'P0002: agent feed of an unknown DPU');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), 'P0002 refusals changed nothing');

------------------------------------------------------------------ 55000 wrong state, version_ctr, attachments
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001', description => 'x',
                   if_version_ctr_match => 7)$$,
                 '55000', 'version_ctr does not match', '55000: version_ctr mismatch');
SELECT throws_ok($$SELECT extsvc.retry_service('e0000000-0000-0000-0000-000000000001')$$,
                 '55000', 'only FAILED services can be retried', '55000: retry of a CREATING service');
-- attachments (rows written directly): an instance configuration entry ...
SELECT lives_ok($$
  INSERT INTO extsvc.instances (instance_id, tenant_organization_id, host_machine_id)
  VALUES ('e1000000-0000-0000-0000-000000000001', 't1', 'fm100hse200000000000000000000000000000100000000000000000000');
  INSERT INTO extsvc.dpus (machine_id, host_machine_id, dpu_device_name, dpu_node_name, is_primary)
  VALUES ('fm100dse300000000000000000000000000000100000000000000000000', 'fm100hse200000000000000000000000000000100000000000000000000', 'dpu-0', 'dpu-0-node', true);
  INSERT INTO extsvc.instance_extension_services (instance_id, service_id, version)
  SELECT 'e1000000-0000-0000-0000-000000000001', service_id, version FROM extsvc.services
   WHERE service_id IN ('e0000000-0000-0000-0000-000000000001', 'e0000000-0000-0000-0000-000000000002');$$,
  'fixture: an instance configured with both services');
UPDATE snap SET s = pg_temp.snapshot();
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-000000000001')$$,
                 '55000', 'service still has active or removing attachments', '55000: DPF delete with a configured instance');
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-000000000002')$$,
                 '55000', 'service is still attached to instances', '55000: KUBERNETES_POD delete while attached');
-- ... or only a REMOVING per-DPU attachment (a tombstone that has not terminated)
SELECT lives_ok($$
  UPDATE extsvc.instance_extension_services SET removed_at = now()
   WHERE service_id = 'e0000000-0000-0000-0000-000000000002';
  DELETE FROM extsvc.instance_extension_services WHERE service_id = 'e0000000-0000-0000-0000-000000000001';
  INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version,
      placement_state, deployment_state)
  SELECT 'e1000000-0000-0000-0000-000000000001', 'fm100dse300000000000000000000000000000100000000000000000000', service_id, version,
         'REMOVING', 'UNKNOWN'
    FROM extsvc.services WHERE service_id = 'e0000000-0000-0000-0000-000000000001';$$,
  'fixture: the DPF service only has a REMOVING attachment left');
UPDATE snap SET s = pg_temp.snapshot();
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-000000000001')$$,
                 '55000', 'service still has active or removing attachments', '55000: DPF delete with a REMOVING attachment');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '55000 refusals changed nothing');
-- a removed (tombstoned) KUBERNETES_POD entry blocks its delete until NICo
-- confirms its termination (issue #14 P0-6, as in NICo)
SELECT throws_ok($$SELECT extsvc.delete_service('e0000000-0000-0000-0000-000000000002')$$,
                 '55000', 'service is still attached to instances', '55000: KUBERNETES_POD delete with an unconfirmed tombstone');
SELECT is(extsvc.remove_terminated_services('e1000000-0000-0000-0000-000000000001',
            (SELECT jsonb_agg(jsonb_build_object('service_id', service_id, 'version', version))
               FROM extsvc.instance_extension_services WHERE service_id = 'e0000000-0000-0000-0000-000000000002')),
          1, 'NICo confirms the tombstone terminated');
SELECT is((extsvc.delete_service('e0000000-0000-0000-0000-000000000002')).lifecycle_state, 'DELETED',
          'KUBERNETES_POD delete allowed once the termination is confirmed');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000002', description => 'x')$$,
                 '55000', 'service is DELETED and cannot be updated', '55000: update of a DELETED service');
UPDATE snap SET s = pg_temp.snapshot();

------------------------------------------------------------------ 42501 admin-only
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.create_service('t1', 'site', 'DPF_HELM_CHART', '$$ || :'chart' || $$',
            deployment_scope => 'ALL_DPUS')$$),
          '42501: only extsvc_admin members may create ALL_DPUS services', '42501: ALL_DPUS by a non-admin');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.allow_chart('oci://registry.example.com/charts')$$),
          '42501: only extsvc_admin members may change the chart allow-list', '42501: allow_chart by a non-admin');
SELECT is(pg_temp.as_user('extsvc_tap_tenant', $$SELECT extsvc.disallow_chart('oci://registry.example.com/charts')$$),
          '42501: only extsvc_admin members may change the chart allow-list', '42501: disallow_chart by a non-admin');
SELECT is(session_user::text, current_user::text, 'session authorization restored');
SELECT lives_ok($$SELECT extsvc.upsert_instance('e1000000-0000-0000-0000-000000000002', 't2',
                   'fm100hse200000000000000000000000000000200000000000000000000')$$, 'fixture: an instance of tenant t2');
UPDATE snap SET s = pg_temp.snapshot();
SELECT throws_ok(format($$SELECT extsvc.set_instance_extension_services('e1000000-0000-0000-0000-000000000002',
                   '[{"service_id": "e0000000-0000-0000-0000-000000000001", "version": "%s"}]')$$,
                   (SELECT version FROM extsvc.services WHERE service_id = 'e0000000-0000-0000-0000-000000000001')),
                 '42501', 'service belongs to another tenant', '42501: cross-tenant attach');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '42501 refusals changed nothing');

------------------------------------------------------------------ 0A000 credentials and observability
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$',
                   dpu_target => 'ALL', has_credential => true)$$, '0A000', NULL, '0A000: credential on create');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART', '$$ || :'chart' || $$',
                   dpu_target => 'ALL', observability => '{"logs":true}')$$, '0A000', NULL, '0A000: observability on create');
SELECT throws_ok($$SELECT extsvc.update_service('e0000000-0000-0000-0000-000000000001', observability => '{}')$$,
                 '0A000', NULL, '0A000: observability on update');
SELECT throws_ok($$SELECT extsvc.create_service('t1', 'x', 'DPF_HELM_CHART',
                   replace('$$ || :'chart' || $$', 'oci://', 'oci://robot:token@'), dpu_target => 'ALL')$$,
                 '0A000', 'repoURL must not embed credentials', '0A000: credentials in repoURL');
SELECT is(pg_temp.snapshot(), (SELECT s FROM snap), '0A000 refusals changed nothing');

------------------------------------------------------------------ long values are never echoed whole (issue #10)
-- 'SQLSTATE|length of DETAIL|whether DETAIL holds the whole value'
CREATE FUNCTION pg_temp.echo(p_stmt text, p_value text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_state text;
  v_detail text;
  v_msg text;
BEGIN
  EXECUTE p_stmt;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_detail = PG_EXCEPTION_DETAIL, v_msg = MESSAGE_TEXT;
  RETURN format('%s|%s|%s', v_state, length(v_detail) <= 160 AND length(v_msg) <= 160,
                strpos(v_detail || v_msg, p_value) > 0);
END $$;
CREATE TEMP TABLE longv AS SELECT repeat('x', 100000) AS v;
SELECT is(pg_temp.echo(format($$SELECT extsvc.create_service('t', 'n', %L, 'x')$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a 100,000-character service_type is refused without echoing it');
SELECT is(pg_temp.echo(format($$SELECT extsvc.create_service('t', 'n', 'KUBERNETES_POD', 'x', deployment_scope => %L)$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a long deployment_scope likewise');
SELECT is(pg_temp.echo(format($$SELECT extsvc.create_service('t', 'n', 'DPF_HELM_CHART', 'x', dpu_target => %L)$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a long dpu_target likewise');
SELECT is(pg_temp.echo(format($$SELECT extsvc.register_dpu('fm100dse400000000000000000000000000000100000000000000000000', 'fm100hse400000000000000000000000000000200000000000000000000', %L, 'node-x')$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a long dpu_device_name likewise');
SELECT is(pg_temp.echo(format($$SELECT extsvc.register_dpu('fm100dse400000000000000000000000000000100000000000000000000', 'fm100hse400000000000000000000000000000200000000000000000000', 'dev-x', %L)$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a long dpu_node_name likewise');
SELECT is(pg_temp.echo(format($$SELECT extsvc.update_service(gen_random_uuid(), description => 'd', tenant_organization_id => %L)$$, (SELECT v FROM longv)), (SELECT v FROM longv)),
          '22023|t|f', 'a long tenant_organization_id likewise (refused by the tenant id rule since issue 29)');
SELECT extsvc.upsert_instance('e3100000-0000-0000-0000-000000000001', 'tenant-long', 'fm100hse400000000000000000000000000000300000000000000000000', ARRAY[]::text[]);
CREATE TEMP TABLE longsvc AS SELECT service_id FROM extsvc.create_service('tenant-long', 'long-pod', 'KUBERNETES_POD', 'kind: Pod');
SELECT is(pg_temp.echo(format($$SELECT extsvc.set_instance_extension_services('e3100000-0000-0000-0000-000000000001', %L)$$,
                              jsonb_build_array(jsonb_build_object('service_id', (SELECT service_id FROM longsvc), 'version', (SELECT v FROM longv)))),
                       (SELECT v FROM longv)),
          'P0002|t|f', 'a long version in an instance configuration likewise');
SELECT is(extsvc._token('short'), 'short', '_token keeps a short value');
SELECT is(extsvc._token(repeat('y', 65)), repeat('y', 48) || '... (65 characters)', '_token cuts a long one and says how long it was');

SELECT * FROM finish();
ROLLBACK;
