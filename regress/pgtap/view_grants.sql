-- Issue 28, part 4: every view of schema extsvc can be read by every role
-- granted SELECT on it. PostgreSQL checks EXECUTE on the functions a view
-- calls (also through a view it reads) against the reading role, not the
-- view's owner: extsvc.dpu_placement, dpu_desired_labels and
-- services_outside_allowlist refused every extsvc_admin member with
-- "permission denied for function _site_service_wanted". Each view is read
-- here as a login role that is only a member of the granted role, with a row
-- in the tables behind it, so each of its expressions is evaluated.
BEGIN;
\ir helpers.psql
SELECT plan(2);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set H '''fm100hs8f00000000000000000000000000000100000000000000000000'''
\set DA '''fm100ds8f00000000000000000000000000000a00000000000000000000'''

CREATE ROLE extsvc_tap_vg_api LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_tap_vg_admin LOGIN IN ROLE extsvc_admin;
CREATE ROLE extsvc_tap_vg_monitor LOGIN IN ROLE pg_monitor;

-- fixtures: a DPU, an ALL_DPUS service DPF accepted (wanted everywhere), a
-- service attached to an instance
SELECT extsvc.register_dpu(:DA, :H, 'vg-dpu-a', 'vg-node-a', true);
SELECT extsvc.create_service('vg-t', 'site', 'DPF_HELM_CHART', :'chart', deployment_scope => 'ALL_DPUS',
                             service_id => '8f000000-0000-0000-0000-000000000001');
SELECT extsvc.create_service('vg-t', 'dpf', 'DPF_HELM_CHART', :'chart', dpu_target => 'PRIMARY',
                             service_id => '8f000000-0000-0000-0000-000000000002');
SET LOCAL nico_extsvc.actor = 'worker';
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = desired_revision
 WHERE service_id IN ('8f000000-0000-0000-0000-000000000001', '8f000000-0000-0000-0000-000000000002');
SET LOCAL nico_extsvc.actor = '';
SELECT extsvc.upsert_instance('8f100000-0000-0000-0000-000000000001', 'vg-t', :H, ARRAY[:DA]::text[], true);
SELECT extsvc.set_instance_extension_services('8f100000-0000-0000-0000-000000000001', jsonb_build_array(jsonb_build_object(
         'service_id', '8f000000-0000-0000-0000-000000000002',
         'version', (SELECT version FROM extsvc.services WHERE service_id = '8f000000-0000-0000-0000-000000000002'))));

GRANT EXECUTE ON FUNCTION pg_temp.as_user(name, text) TO PUBLIC;

CREATE TEMP TABLE readers (login name, grantee name);
INSERT INTO readers VALUES ('extsvc_tap_vg_api', 'extsvc_api'), ('extsvc_tap_vg_admin', 'extsvc_admin'),
                           ('extsvc_tap_vg_monitor', 'pg_monitor');
GRANT SELECT ON readers TO PUBLIC;

SELECT ok((SELECT count(*) FROM pg_class c CROSS JOIN readers r
            WHERE c.relnamespace = 'extsvc'::regnamespace AND c.relkind = 'v'
              AND has_table_privilege(r.grantee, c.oid, 'SELECT')) >= 10,
          'the roles may read the operators'' views (the check below is not empty)');
SELECT is(ARRAY(SELECT format('%s as %s: %s', c.oid::regclass, r.grantee, res)
                  FROM pg_class c CROSS JOIN readers r
                  CROSS JOIN LATERAL pg_temp.as_user(r.login, format('SELECT * FROM %s', c.oid::regclass)) res
                 WHERE c.relnamespace = 'extsvc'::regnamespace AND c.relkind = 'v'
                   AND has_table_privilege(r.grantee, c.oid, 'SELECT')
                   AND res <> 'ok'
                 ORDER BY 1),
          ARRAY[]::text[], 'every view of extsvc reads as a member of each role granted SELECT on it');

SELECT * FROM finish();
ROLLBACK;
