-- Day-2 verbs of issue 28 (part 4): where a DPF service runs, per instance
-- and DPU, and a retry of one DPU's placement work. reconcile_now
-- (60_worker_operator.sql) is the same retry for services.

-- One row per (instance, DPU) of an INSTANCE_DPUS service (its attachment
-- rows, one per attached version), or per DPU of an ALL_DPUS service (its
-- rows of extsvc.site_service_dpu_status; instance_id NULL). The two scopes
-- keep their per-DPU rows in different tables; this reads the right one so
-- the operator does not need to know which.
CREATE FUNCTION extsvc.service_dpus(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, version text, dpu_machine_id text, dpu_device_name text, dpu_node_name text,
               placement_state text, deployment_state text, status_message text, observed_at timestamptz,
               updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(service_dpus.service_id, service_dpus.tenant_organization_id);
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services run on DPUs through DPF',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'A KUBERNETES_POD service is run by the DPU agent: extsvc.service_instances(service_id) lists its instances.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' THEN
    -- as extsvc.site_service_status: every observed DPU, plus every
    -- registered DPU the service is wanted on and not observed yet (UNKNOWN)
    RETURN QUERY
    SELECT NULL::uuid, NULL::text, d.machine_id, d.dpu_device_name, d.dpu_node_name,
           NULL::text,
           coalesce(extsvc._effective_deployment_state(t.deployment_state, t.observed_at), 'UNKNOWN'),
           CASE WHEN t.service_id IS NULL THEN 'not observed yet' ELSE t.status_message END,
           t.observed_at, t.observed_at
      FROM extsvc.dpus d
      LEFT JOIN extsvc.site_service_dpu_status t ON t.dpu_machine_id = d.machine_id AND t.service_id = s.service_id
     WHERE t.service_id IS NOT NULL
        OR (d.deregistered_at IS NULL AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
     ORDER BY d.dpu_device_name;
  ELSE
    RETURN QUERY
    SELECT a.instance_id, a.version, a.dpu_machine_id, d.dpu_device_name, d.dpu_node_name,
           a.placement_state::text, extsvc._effective_deployment_state(a.deployment_state, a.observed_at),
           a.status_message, a.observed_at, a.updated_at
      FROM extsvc.dpf_extension_service_attachments a
      JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id
     WHERE a.service_id = s.service_id
     ORDER BY a.instance_id, d.dpu_device_name, a.version;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc.service_dpus(uuid, text) IS
  'Where a DPF service runs: one row per (instance, DPU) of an INSTANCE_DPUS service (its attachment rows: instance_id, version, placement_state ACTIVE or REMOVING) or per DPU of an ALL_DPUS service (instance_id, version and placement_state NULL; a registered DPU not observed yet reads UNKNOWN), with the DPU''s machine id, DPUDevice and Node names, deployment_state (UNKNOWN once older than extsvc.observation_max_age), status_message, observed_at and updated_at. P0002 for an unknown service, 22023 for a KUBERNETES_POD one; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- The per-DPU retry. After a fix (RBAC, a token, the cluster's URL) a DPU
-- whose placement pass failed waits out its backoff, up to
-- extsvc.retry_cap; this makes it due now with a fresh backoff. The
-- state_version bump (as any new intent) makes a pass already in flight,
-- which may have started before the fix, end stale and run again.
CREATE FUNCTION extsvc.reconcile_dpu(machine_id text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_dpu text := extsvc._machine_id(reconcile_dpu.machine_id, 'machine_id', 'dpu');
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = v_dpu) THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', v_dpu),
                          'Check the DPU machine id: SELECT dpu_machine_id, dpu_device_name FROM extsvc.dpu_placement.');
  END IF;
  PERFORM extsvc._touch_dpu(v_dpu);  -- due now, attempts 0, state_version + 1, wakes the workers
  RETURN 1;
END
$fn$;
COMMENT ON FUNCTION extsvc.reconcile_dpu(text) IS
  'Operator: make one DPU''s placement work (extsvc.dpu_placement) due now with its backoff reset and wake the workers; a pass in flight ends stale and runs again. Returns 1. 22023 naming machine_id for an id that is not a DPU MachineId, P0002 for an unknown DPU.';

REVOKE ALL ON FUNCTION extsvc.service_dpus(uuid, text), extsvc.reconcile_dpu(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION extsvc.service_dpus(uuid, text) TO extsvc_api, extsvc_admin;
GRANT EXECUTE ON FUNCTION extsvc.reconcile_dpu(text) TO extsvc_admin;
