-- The placement API's reads (SPEC 2.8): per-DPU status of an instance, its summary and
-- readiness, what a DPU agent runs, and the operators' views. Writes: 71_dpu_registry.sql, 72_placement_api.sql.

-- Status -------------------------------------------------------------------------

CREATE FUNCTION extsvc.instance_extension_service_status(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, service_name text, version text, dpu_machine_id text, dpu_device_name text,
               dpu_node_name text, placement_state text, deployment_state text, removed_at timestamptz,
               status_message text, observed_at timestamptz, config_version integer,
               observed_config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM extsvc._require_instance(instance_extension_service_status.instance_id,
                                   instance_extension_service_status.tenant_organization_id);
  RETURN QUERY
  SELECT a.service_id, s.service_name, a.version, a.dpu_machine_id, d.dpu_device_name, d.dpu_node_name,
         a.placement_state::text, extsvc._effective_deployment_state(a.deployment_state, a.observed_at),
         c.removed_at, a.status_message, a.observed_at,
         i.config_version, a.observed_config_version, i.config_version_text
    FROM extsvc.dpf_extension_service_attachments a
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = a.service_id
    JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id
    LEFT JOIN extsvc.instance_extension_services c
      ON c.instance_id = a.instance_id AND c.service_id = a.service_id AND c.version = a.version
   WHERE a.instance_id = instance_extension_service_status.instance_id
   ORDER BY s.service_name, a.version, d.dpu_device_name;
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_service_status(uuid, text) IS
  'One row per (service, version, DPU) of an instance: placement and observed deployment state (UNKNOWN once older than extsvc.observation_max_age). With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

-- Aggregate with the precedence of SPEC 2.8: the worst state, except that RUNNING and
-- TERMINATED say something of every DPU, so they hold only when every state is that one (a mix
-- of the two, an empty set and states outside the vocabulary are UNKNOWN).
CREATE FUNCTION extsvc._aggregate_state(states text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RETURN (
    SELECT CASE WHEN w.worst IN ('RUNNING', 'TERMINATED') AND NOT coalesce(w.worst = ALL (states), false)
                THEN 'UNKNOWN'
                ELSE coalesce(w.worst, 'UNKNOWN') END
      FROM (SELECT p[(SELECT min(array_position(p, x)) FROM unnest(states) x)] AS worst
              FROM extsvc._deployment_state_precedence() p) w);
END
$fn$;

-- The rows of instance_extension_services_summary, without its checks: the
-- summary and instance_extension_services_ready read them (ready once read
-- them through the summary, checks and all, a second time per status read).
-- plpgsql, as the other readers: PostgreSQL 15 plans the body of a SQL
-- function that cannot be inlined (SET search_path) again at every call.
CREATE FUNCTION extsvc._instance_summary(p_instance uuid)
RETURNS TABLE (service_id uuid, service_name text, service_type text, version text, aggregate_state text,
               removed boolean, removed_at timestamptz, dpus integer, configs_synced boolean,
               config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT c.service_id, s.service_name, s.service_type, c.version,
         CASE WHEN s.service_type = 'KUBERNETES_POD' THEN NULL
              WHEN NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                                WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                                  AND a.version = c.version)
                   AND c.removed_at IS NOT NULL THEN 'TERMINATED'
              ELSE extsvc._aggregate_state(ARRAY(
                     SELECT extsvc._effective_deployment_state(a.deployment_state, a.observed_at)
                       FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND (c.removed_at IS NOT NULL OR a.placement_state = 'ACTIVE')))
         END,
         c.removed_at IS NOT NULL, c.removed_at,
         (SELECT count(*)::int FROM extsvc.dpf_extension_service_attachments a
           WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version),
         NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND a.observed_config_version IS DISTINCT FROM i.config_version)
         -- an active DPF entry with no attachment rows yet is not synced (issue #14 P1-13)
         AND NOT (s.service_type = 'DPF_HELM_CHART' AND c.removed_at IS NULL
                  AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                                   WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                                     AND a.version = c.version)),
         i.config_version, i.config_version_text
    FROM extsvc.instance_extension_services c
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = c.service_id
   WHERE c.instance_id = p_instance
   ORDER BY s.service_name, c.version;
END
$fn$;
COMMENT ON FUNCTION extsvc._instance_summary(uuid) IS
  'Internal: the rows of extsvc.instance_extension_services_summary without its tenant and existence checks. No grants.';

CREATE FUNCTION extsvc.instance_extension_services_summary(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, service_name text, service_type text, version text, aggregate_state text,
               removed boolean, removed_at timestamptz, dpus integer, configs_synced boolean,
               config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM extsvc._require_instance(instance_extension_services_summary.instance_id,
                                   instance_extension_services_summary.tenant_organization_id);
  RETURN QUERY SELECT * FROM extsvc._instance_summary(instance_extension_services_summary.instance_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_summary(uuid, text) IS
  'One row per (service, version) of an instance: aggregate state (SPEC 2.8 precedence), removed, configs_synced. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

CREATE FUNCTION extsvc.instance_extension_services_ready(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM extsvc._require_instance(instance_extension_services_ready.instance_id,
                                   instance_extension_services_ready.tenant_organization_id);
  RETURN NOT EXISTS (
    SELECT FROM extsvc._instance_summary(instance_extension_services_ready.instance_id) x
     WHERE x.service_type = 'DPF_HELM_CHART'
       AND (NOT x.configs_synced
            OR (NOT x.removed AND x.aggregate_state <> 'RUNNING')
            OR (x.removed AND x.aggregate_state <> 'TERMINATED')));
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_ready(uuid, text) IS
  'True when every active DPF attachment is RUNNING and every removed one TERMINATED for the current config_version. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

CREATE FUNCTION extsvc.dpu_agent_extension_services(dpu_machine_id text)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, version text, data text,
               has_credential boolean, observability jsonb, removed_at timestamptz,
               config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_dpu text := extsvc._machine_id(dpu_agent_extension_services.dpu_machine_id, 'dpu_machine_id', 'dpu');
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = v_dpu) THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', v_dpu),
                          'Check the DPU machine id.');
  END IF;
  -- The DPU agent's feed is unchanged: only KUBERNETES_POD entries.
  RETURN QUERY
  SELECT c.instance_id, c.service_id, s.service_name, c.version, v.data, v.has_credential, v.observability, c.removed_at,
         i.config_version, i.config_version_text
    FROM extsvc.dpus d
    JOIN extsvc.instances i ON i.host_machine_id = d.host_machine_id
    JOIN extsvc.instance_extension_services c ON c.instance_id = i.instance_id
    JOIN extsvc.service_records s ON s.service_id = c.service_id AND s.service_type = 'KUBERNETES_POD'
    JOIN extsvc.service_versions v ON v.service_id = c.service_id AND v.version = c.version
   WHERE d.machine_id = v_dpu
   ORDER BY c.instance_id, s.service_name, c.version;
END
$fn$;
COMMENT ON FUNCTION extsvc.dpu_agent_extension_services(text) IS
  'The DPU agent''s feed (dpu_machine_id: the DPU''s NICo MachineId): KUBERNETES_POD entries (including removed ones) of instances on the DPU''s host, with the instance''s config_version and its string (which the agent echoes); never DPF services.';

-- Operators: one row per DPU with its placement work.
CREATE VIEW extsvc.dpu_placement AS
SELECT d.machine_id AS dpu_machine_id, d.host_machine_id, d.dpu_device_name, d.dpu_node_name, d.is_primary,
       d.deregistered_at,
       (SELECT array_agg(DISTINCT w.label_key ORDER BY w.label_key) FROM extsvc.dpu_desired_labels w
         WHERE w.dpu_machine_id = d.machine_id) AS desired_labels,
       q.state_version, q.attempts, q.next_due_at, q.lease_owner, q.last_error, q.last_observed_at, q.observation
  FROM extsvc.dpus d
  LEFT JOIN extsvc.dpu_reconciliations q ON q.dpu_machine_id = d.machine_id;
COMMENT ON VIEW extsvc.dpu_placement IS
  'Per DPU: desired NICo labels, placement work (due, lease, attempts, last error) and the last observation.';

-- Services whose chart is not (or no longer) on the allow-list (issue 29).
-- Removing an entry stops new uses of the chart (create, update, rollback,
-- retry, new attachments) but tears nothing down: a service already running
-- from it keeps running where it is, attachments follow their instance's
-- DPUs, an ALL_DPUS service stays on every DPU. This view lists them for the
-- operator, who detaches or deletes them (or allows the chart again). Live
-- services only; one being deleted is on its way out. Independent of
-- extsvc.enforce_chart_allowlist.
CREATE VIEW extsvc.services_outside_allowlist AS
SELECT s.service_id, s.tenant_organization_id, s.service_name, s.deployment_scope, s.lifecycle_state,
       d.data->>'repoURL' AS repo_url, d.data->>'chartName' AS chart_name, d.data->>'chartVersion' AS chart_version,
       s.desired_revision, extsvc._chart_allowed(d.data) AS desired_allowed,
       s.applied_revision, CASE WHEN a.data IS NOT NULL THEN extsvc._chart_allowed(a.data) END AS applied_allowed,
       (SELECT count(DISTINCT c.instance_id)::int FROM extsvc.instance_extension_services c
         WHERE c.service_id = s.service_id AND c.removed_at IS NULL) AS instances,
       (SELECT count(DISTINCT w.dpu_machine_id)::int FROM extsvc.dpu_desired_labels w
         WHERE w.service_id = s.service_id) AS dpus
  FROM extsvc.service_records s
  JOIN extsvc.helm_revisions d ON d.service_id = s.service_id AND d.revision = s.desired_revision
  LEFT JOIN extsvc.helm_revisions a ON a.service_id = s.service_id AND a.revision = s.applied_revision
 WHERE s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state <> 'DELETED' AND s.delete_requested_at IS NULL
   AND (NOT extsvc._chart_allowed(d.data) OR (a.data IS NOT NULL AND NOT extsvc._chart_allowed(a.data)));
COMMENT ON VIEW extsvc.services_outside_allowlist IS
  'Operators: live DPF services whose desired or applied chart no extsvc.chart_allowlist entry admits (left running after disallow_chart), with the instances that list them and the DPUs that should carry them.';
