-- Issue #10 / SPEC 6: admin rights follow the calling role (SET ROLE
-- included), never session_user; only extsvc_admin may update or delete an
-- ALL_DPUS service; the optional trailing tenant_organization_id argument
-- refuses another tenant's rows exactly like unknown ones (42501).
BEGIN;
\ir helpers.psql
SELECT plan(49);

SET LOCAL extsvc.enforce_chart_allowlist = off;

-- an operator login (member of both roles, as NICo's operators are) and a
-- NICo-like login that is a member of extsvc_api only
CREATE ROLE extsvc_tap_r_operator LOGIN IN ROLE extsvc_admin, extsvc_api;
CREATE ROLE extsvc_tap_r_nico LOGIN IN ROLE extsvc_api;

CREATE TEMP TABLE chart (name text, data text);
INSERT INTO chart VALUES
  ('plain', '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'),
  ('evil',  '{"repoURL":"oci://registry.example.com/charts","chartName":"evil","chartVersion":"6.6.6","security":{"privileged":true}}');
GRANT SELECT ON chart TO PUBLIC;

-- 1. SET ROLE drops admin rights (before the fix these were all 'ok') -------
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_api', $$SELECT extsvc.create_service('ops', 'site-a', 'DPF_HELM_CHART',
            (SELECT data FROM chart WHERE name = 'plain'), deployment_scope => 'ALL_DPUS')$$),
          '42501: only extsvc_admin members may create ALL_DPUS services',
          'an extsvc_admin login after SET ROLE extsvc_api cannot create an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_api', $$SELECT extsvc.allow_chart('oci://registry.example.com/charts')$$),
          '42501: only extsvc_admin members may change the chart allow-list',
          'an extsvc_admin login after SET ROLE extsvc_api cannot allow a chart');
SELECT is((SELECT count(*)::int FROM extsvc.chart_allowlist WHERE repo_url = 'oci://registry.example.com/charts'), 0,
          'the allow-list did not change');
SELECT is((SELECT count(*)::int FROM extsvc.service_records WHERE service_name = 'site-a'), 0, 'no ALL_DPUS service was created');
-- the same login without SET ROLE is admin
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', NULL, $$SELECT extsvc.create_service('ops', 'site-a', 'DPF_HELM_CHART',
            (SELECT data FROM chart WHERE name = 'plain'), deployment_scope => 'ALL_DPUS',
            service_id => 'a1000000-0000-0000-0000-000000000001')$$),
          'ok', 'the extsvc_admin login (no SET ROLE) creates an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', NULL, $$SELECT extsvc.allow_chart('oci://registry.example.com/charts', 'svc')$$),
          'ok', 'the extsvc_admin login (no SET ROLE) allows a chart');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', NULL, $$SELECT extsvc.disallow_chart('oci://registry.example.com/charts', 'svc')$$),
          'ok', 'the extsvc_admin login (no SET ROLE) disallows a chart');
-- and SET ROLE to the admin role gives admin rights to a session whose login is not admin
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_admin', $$SELECT extsvc.allow_chart('oci://registry.example.com/charts', 'svc')$$),
          'ok', 'SET ROLE extsvc_admin is admin');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_api', $$SELECT extsvc.disallow_chart('oci://registry.example.com/charts', 'svc')$$),
          '42501: only extsvc_admin members may change the chart allow-list',
          'an extsvc_admin login after SET ROLE extsvc_api cannot disallow a chart');

-- 2. the admin gates cannot be used directly --------------------------------
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc._create_service_as_admin('ops', 'site-b', 'DPF_HELM_CHART',
            (SELECT data FROM chart WHERE name = 'plain'), NULL, NULL, 'ALL_DPUS', NULL, false, NULL)$$),
          '42501: permission denied for function _create_service_as_admin', 'extsvc_api cannot call the admin gate of create_service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc._create_service('ops', 'site-b', 'DPF_HELM_CHART',
            (SELECT data FROM chart WHERE name = 'plain'), deployment_scope => 'ALL_DPUS', p_admin => true)$$),
          '42501: permission denied for function _create_service', 'extsvc_api cannot call the body of create_service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc._update_service_as_admin('a1000000-0000-0000-0000-000000000001',
            NULL, NULL, 'x', NULL, NULL, NULL, NULL)$$),
          '42501: permission denied for function _update_service_as_admin', 'extsvc_api cannot call the admin gate of update_service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc._delete_service_as_admin('a1000000-0000-0000-0000-000000000001', NULL, NULL)$$),
          '42501: permission denied for function _delete_service_as_admin', 'extsvc_api cannot call the admin gate of delete_service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc._allow_chart_as_admin('oci://evil.example.com/charts', NULL)$$),
          '42501: permission denied for function _allow_chart_as_admin', 'extsvc_api cannot call the admin gate of allow_chart');

-- 3. ALL_DPUS services: update and delete are for extsvc_admin only ---------
-- (a service of its own, made by the superuser, so this part does not
-- depend on the ones above; before the fix the refusals below were 'ok')
SELECT lives_ok($$SELECT extsvc.create_service('ops', 'site-c', 'DPF_HELM_CHART',
                    (SELECT data FROM chart WHERE name = 'plain'), deployment_scope => 'ALL_DPUS',
                    service_id => 'a1000000-0000-0000-0000-000000000002')$$,
                'the superuser creates an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a1000000-0000-0000-0000-000000000002',
            data => (SELECT data FROM chart WHERE name = 'evil'))$$),
          '42501: only extsvc_admin members may update ALL_DPUS services',
          'extsvc_api cannot rewrite an ALL_DPUS service to a privileged chart');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a1000000-0000-0000-0000-000000000002', description => 'mine')$$),
          '42501: only extsvc_admin members may update ALL_DPUS services', 'extsvc_api cannot even re-describe an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_api', $$SELECT extsvc.update_service('a1000000-0000-0000-0000-000000000002',
            data => (SELECT data FROM chart WHERE name = 'evil'))$$),
          '42501: only extsvc_admin members may update ALL_DPUS services', 'nor can an admin login after SET ROLE extsvc_api');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.delete_service('a1000000-0000-0000-0000-000000000002')$$),
          '42501: only extsvc_admin members may delete ALL_DPUS services', 'extsvc_api cannot delete an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', 'extsvc_api', $$SELECT extsvc.delete_service('a1000000-0000-0000-0000-000000000002')$$),
          '42501: only extsvc_admin members may delete ALL_DPUS services', 'nor can an admin login after SET ROLE extsvc_api');
SELECT results_eq($$SELECT desired_revision, version_ctr, lifecycle_state::text, description FROM extsvc.services
                     WHERE service_id = 'a1000000-0000-0000-0000-000000000002'$$,
                  $$VALUES (1, 1, 'CREATING', ''::text)$$, 'the ALL_DPUS service is unchanged');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', NULL, $$SELECT extsvc.update_service('a1000000-0000-0000-0000-000000000002', description => 'site')$$),
          'ok', 'extsvc_admin updates an ALL_DPUS service');
SELECT is(pg_temp.run_as('extsvc_tap_r_operator', NULL, $$SELECT extsvc.delete_service('a1000000-0000-0000-0000-000000000002')$$),
          'ok', 'extsvc_admin deletes an ALL_DPUS service');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = 'a1000000-0000-0000-0000-000000000002'),
          'DELETING', 'the ALL_DPUS service is DELETING');

-- 4. the tenant argument ----------------------------------------------------
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.create_service('tenant-a', 'svc-a', 'DPF_HELM_CHART',
            (SELECT data FROM chart WHERE name = 'plain'), dpu_target => 'PRIMARY', service_id => 'a2000000-0000-0000-0000-00000000000a')$$),
          'ok', 'tenant-a creates a service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.create_service('tenant-b', 'svc-b', 'KUBERNETES_POD', 'pod',
            service_id => 'a2000000-0000-0000-0000-00000000000b')$$),
          'ok', 'tenant-b creates a service');
-- one answer for "another tenant's" and "unknown"
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a2000000-0000-0000-0000-00000000000b',
            description => 'hijack', tenant_organization_id => 'tenant-a')$$),
          '42501: service is not accessible to this tenant', 'update_service refuses another tenant''s service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a2000000-0000-0000-0000-0000000000ff',
            description => 'x', tenant_organization_id => 'tenant-a')$$),
          '42501: service is not accessible to this tenant', 'update_service answers the same for an unknown service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.delete_service('a2000000-0000-0000-0000-00000000000b', NULL, 'tenant-a')$$),
          '42501: service is not accessible to this tenant', 'delete_service refuses another tenant''s service');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.delete_service('a2000000-0000-0000-0000-0000000000ff', NULL, 'tenant-a')$$),
          '42501: service is not accessible to this tenant', 'delete_service answers the same for an unknown service');
SELECT results_eq($$SELECT description, lifecycle_state::text FROM extsvc.services WHERE service_id = 'a2000000-0000-0000-0000-00000000000b'$$,
                  $$VALUES (''::text, 'READY')$$, 'tenant-b''s service is unchanged');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a2000000-0000-0000-0000-00000000000a',
            description => 'mine', tenant_organization_id => 'tenant-a')$$),
          'ok', 'update_service with the owning tenant works');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a2000000-0000-0000-0000-00000000000a',
            NULL, NULL, 'positional', NULL, NULL, NULL)$$),
          'ok', 'the seven positional arguments of update_service still work');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.update_service('a2000000-0000-0000-0000-0000000000ff', description => 'x')$$),
          'P0002: service not found', 'without the tenant argument an unknown service is still P0002');
-- create_service with another tenant's id: no 23505 "already exists"
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.create_service('tenant-a', 'svc-b', 'KUBERNETES_POD', 'pod',
            service_id => 'a2000000-0000-0000-0000-00000000000b')$$),
          '42501: service_id is not available to this tenant', 'create_service does not confirm another tenant''s service id');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.create_service('tenant-b', 'svc-b', 'KUBERNETES_POD', 'pod',
            service_id => 'a2000000-0000-0000-0000-00000000000b')$$),
          'ok', 'the owning tenant''s identical create is still idempotent');

-- instances
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$
            SELECT extsvc.upsert_instance('a3000000-0000-0000-0000-00000000000a', 'tenant-a', 'fm100hsa400000000000000000000000000000a00000000000000000000');
            SELECT extsvc.upsert_instance('a3000000-0000-0000-0000-00000000000b', 'tenant-b', 'fm100hsa400000000000000000000000000000b00000000000000000000')$$),
          'ok', 'two tenants register an instance each');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.set_instance_extension_services('a3000000-0000-0000-0000-00000000000b',
            '[]', NULL, 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'set_instance_extension_services refuses another tenant''s instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.set_instance_extension_services('a3000000-0000-0000-0000-0000000000ff',
            '[]', NULL, 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'set_instance_extension_services answers the same for an unknown instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.set_instance_extension_services('a3000000-0000-0000-0000-00000000000a',
            '[{"service_id": "a2000000-0000-0000-0000-00000000000b", "version": "V1-T1"}]', NULL, 'tenant-a')$$),
          '42501: service is not accessible to this tenant', 'set_instance_extension_services refuses another tenant''s service entry');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.set_instance_extension_services('a3000000-0000-0000-0000-00000000000a',
            '[{"service_id": "a2000000-0000-0000-0000-0000000000ff", "version": "V1-T1"}]', NULL, 'tenant-a')$$),
          '42501: service is not accessible to this tenant', '... and answers the same for an unknown service entry');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.set_instance_extension_services('a3000000-0000-0000-0000-00000000000a',
            '[]', NULL, 'tenant-a')$$),
          'ok', 'set_instance_extension_services with the owning tenant works');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT * FROM extsvc.instance_extension_service_status('a3000000-0000-0000-0000-00000000000b', 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'instance_extension_service_status refuses another tenant''s instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT * FROM extsvc.instance_extension_services_summary('a3000000-0000-0000-0000-00000000000b', 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'instance_extension_services_summary refuses another tenant''s instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.instance_extension_services_ready('a3000000-0000-0000-0000-00000000000b', 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'instance_extension_services_ready refuses another tenant''s instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.instance_extension_services_ready('a3000000-0000-0000-0000-0000000000ff', 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'instance_extension_services_ready answers the same for an unknown instance');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.delete_instance('a3000000-0000-0000-0000-00000000000b', 'tenant-a')$$),
          '42501: instance is not accessible to this tenant', 'delete_instance refuses another tenant''s instance');
SELECT ok((SELECT delete_requested_at IS NULL FROM extsvc.instances WHERE instance_id = 'a3000000-0000-0000-0000-00000000000b'),
          'tenant-b''s instance is not being deleted');
SELECT is(pg_temp.run_as('extsvc_tap_r_nico', NULL, $$SELECT extsvc.instance_extension_services_ready('a3000000-0000-0000-0000-00000000000a', 'tenant-a')$$),
          'ok', 'the status functions answer the owning tenant');

SELECT * FROM finish();
ROLLBACK;
