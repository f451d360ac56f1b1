-- SPEC 6 / issue #10: runs against a server WITHOUT shared_preload_libraries.
-- Before the fix, loading the library outside preload defined PGC_POSTMASTER
-- GUCs and PostgreSQL ended the session with FATAL.
SHOW shared_preload_libraries;

-- The install preamble refuses a schema extsvc prepared by another role ...
\set SHOW_CONTEXT never
CREATE ROLE extsvc_np_squatter;
CREATE SCHEMA extsvc AUTHORIZATION extsvc_np_squatter;
CREATE EXTENSION nico_extsvc;
-- ... or one where other roles may create objects ...
ALTER SCHEMA extsvc OWNER TO CURRENT_USER;
GRANT CREATE ON SCHEMA extsvc TO extsvc_np_squatter;
CREATE EXTENSION nico_extsvc;
-- ... or one that already holds objects.
REVOKE CREATE ON SCHEMA extsvc FROM extsvc_np_squatter;
CREATE TABLE extsvc.services (service_id uuid);
CREATE EXTENSION nico_extsvc;
\set SHOW_CONTEXT errors
DROP SCHEMA extsvc CASCADE;
DROP ROLE extsvc_np_squatter;

-- CREATE EXTENSION works and the session survives it
CREATE EXTENSION nico_extsvc;
SELECT 'session survived CREATE EXTENSION' AS ok;
SELECT extversion FROM pg_extension WHERE extname = 'nico_extsvc';

-- the library is loaded (a C function ran) but the postmaster-only GUCs do
-- not exist; the others do
SELECT extsvc.dpf_service_name('00000000-0000-0000-0000-000000000000', 'V1-T1');
SELECT name, setting, context FROM pg_settings
 WHERE name IN ('extsvc.workers', 'extsvc.database', 'extsvc.enabled', 'extsvc.enforce_chart_allowlist')
 ORDER BY name;

-- the SQL API works
SET extsvc.enforce_chart_allowlist = off;
SELECT service_name, service_type, deployment_scope, dpu_target, lifecycle_state, version_ctr
  FROM extsvc.create_service('tenant-a', 'chart', 'DPF_HELM_CHART',
    '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
    dpu_target => 'PRIMARY', service_id => '11111111-0000-0000-0000-000000000001');
SELECT service_name, lifecycle_state, version_ctr, desired_revision
  FROM extsvc.update_service('11111111-0000-0000-0000-000000000001',
    '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.1","security":{"privileged":false}}');
SELECT service_name, lifecycle_state FROM extsvc.create_service('tenant-a', 'pod', 'KUBERNETES_POD', 'pod-spec');
SELECT extsvc.register_dpu('fm100ds2222222200000000000000000000000100000000000000000000', 'fm100hs3333333300000000000000000000000100000000000000000000',
                           'dpu0', 'node-dpu0', true);
SELECT extsvc.upsert_instance('44444444-0000-0000-0000-000000000001', 'tenant-a', 'fm100hs3333333300000000000000000000000100000000000000000000');
SELECT extsvc.instance_extension_services_ready('44444444-0000-0000-0000-000000000001');
SELECT lifecycle_state FROM extsvc.delete_service('11111111-0000-0000-0000-000000000001');

-- metrics work without the worker (issue 12): the table gauges are there,
-- and the worker part is just extsvc_worker_up 0 and extsvc_workers_configured 0
SELECT metric, labels, value FROM extsvc.metrics()
 WHERE metric !~ '^extsvc_(services|queue_|placement_attachments|site_service_dpus|dpu_states|pending_orphans|placement_keys)' ORDER BY 1, 2;
SELECT metric, labels, value FROM extsvc.metrics()
 WHERE metric IN ('extsvc_services', 'extsvc_queue_due', 'extsvc_dpu_states') AND value <> 0 ORDER BY 1, 2;
SELECT line FROM regexp_split_to_table(extsvc.metrics_prometheus(), E'\n') line
 WHERE line LIKE '%extsvc\_worker\_up%' OR line LIKE '%extsvc\_workers\_configured%';

-- worker functions say that the worker is not loaded
SELECT * FROM extsvc.worker_status();
SELECT extsvc.request_resync();

-- Issue 29, item 6: a site rule cannot be switched off by a session. Without
-- preloading, a new session has not loaded the library: a non-superuser's
-- SET of an extsvc.* name makes a placeholder that PostgreSQL accepts. The
-- SQL reads site rules only through a C function, whose call loads the
-- library, which defines the real (superuser-only) settings; PostgreSQL then
-- drops the unprivileged placeholder value with a WARNING. Before the fix
-- the placeholder was read as the rule and the attach below succeeded.
\set su :USER
\set SHOW_CONTEXT never
ALTER DATABASE :"DBNAME" SET extsvc.refuse_pod_services_on_dpf_hosts = on;
CREATE ROLE extsvc_np_nico LOGIN IN ROLE extsvc_api;
SELECT service_name FROM extsvc.create_service('tenant-np', 'np-pod', 'KUBERNETES_POD', 'kind: Pod',
                                               service_id => '55555555-0000-0000-0000-000000000001');
SELECT extsvc.upsert_instance('44444444-0000-0000-0000-000000000009', 'tenant-np', 'fm100hs3333333300000000000000000000000900000000000000000000');
\c - extsvc_np_nico
SELECT count(*) AS nico_extsvc_loaded FROM pg_settings WHERE name = 'extsvc.enabled';
SET extsvc.refuse_pod_services_on_dpf_hosts = off;
SET extsvc.enforce_chart_allowlist = off;
SET extsvc.allow_privileged = on;
SELECT extsvc.set_instance_extension_services('44444444-0000-0000-0000-000000000009',
  (SELECT jsonb_build_array(jsonb_build_object('service_id', service_id, 'version', version))
     FROM extsvc.services WHERE service_id = '55555555-0000-0000-0000-000000000001'));
SHOW extsvc.refuse_pod_services_on_dpf_hosts;
-- the allow-list holds too (nothing is allowed in this database)
SELECT extsvc.create_service('tenant-np', 'np-chart', 'DPF_HELM_CHART',
    '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
    dpu_target => 'PRIMARY');
SHOW extsvc.enforce_chart_allowlist;
-- once loaded, a SET is refused outright
SET extsvc.refuse_pod_services_on_dpf_hosts = off;
SET extsvc.allow_privileged = off;
\c - :su
SELECT count(*) AS attached FROM extsvc.instance_extension_services WHERE instance_id = '44444444-0000-0000-0000-000000000009';
ALTER DATABASE :"DBNAME" RESET extsvc.refuse_pod_services_on_dpf_hosts;
DROP ROLE extsvc_np_nico;
\set SHOW_CONTEXT errors

DROP EXTENSION nico_extsvc;
