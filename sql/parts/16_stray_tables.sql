-- Stray workloads (issue 23, part 2) ------------------------------------------

-- A pod of one of our services on a DPU that no attachment (or ALL_DPUS
-- service) of that DPU explains: a chart that ignores
-- serviceDaemonSet.nodeSelector, or a nico/extsvc-* key on the Node that
-- neither the DPUDevice nor DPF's DPU object carries (the worker removes such
-- a key of this site from the Node). Each placement pass that observed the
-- DPU's pods replaces the DPU's rows with what it saw; first_seen stays while
-- the pod is seen.
CREATE TABLE extsvc.stray_pods (
  dpu_machine_id text NOT NULL REFERENCES extsvc.dpus ON DELETE CASCADE,
  pod            text NOT NULL,          -- "<namespace>/<name>"
  service_id     uuid,                   -- its nico/extension-service-id label, else by its release
  release        text,                   -- the DPUService whose Argo Application applied it
  reason         text NOT NULL CHECK (reason IN ('no_attachment', 'node_key_without_dpudevice')),
  first_seen     timestamptz NOT NULL DEFAULT now(),
  last_seen      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (dpu_machine_id, pod)
);
COMMENT ON TABLE extsvc.stray_pods IS
  'Pods of our services on DPUs without an attachment for them, as the last placement pass of each DPU saw them (read extsvc.stray_workloads).';
-- pg_dump keeps them like the DPUs' observations (15_placement_tables.sql): a
-- restored database shows what was last seen until the next pass replaces it.
SELECT pg_catalog.pg_extension_config_dump('extsvc.stray_pods', '');

-- Replaces a DPU's stray pods with what its placement pass saw (p_strays: an
-- array of {service_id, release, pod, reason}); a pod seen for the first time
-- is a history entry of its service (reason stray_workload).
CREATE FUNCTION extsvc._record_stray_pods(p_dpu text, p_strays jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  r record;
  v_node text;
BEGIN
  IF jsonb_typeof(p_strays) IS DISTINCT FROM 'array' THEN
    RETURN;
  END IF;
  DELETE FROM extsvc.stray_pods x
   WHERE x.dpu_machine_id = p_dpu
     AND NOT EXISTS (SELECT FROM jsonb_array_elements(p_strays) e WHERE e->>'pod' = x.pod);
  SELECT d.dpu_node_name INTO v_node FROM extsvc.dpus d WHERE d.machine_id = p_dpu;
  FOR r IN
    INSERT INTO extsvc.stray_pods AS x (dpu_machine_id, pod, service_id, release, reason)
    SELECT DISTINCT ON (e->>'pod') p_dpu, e->>'pod',
           coalesce(CASE WHEN e->>'service_id' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                         THEN (e->>'service_id')::uuid END,
                    (SELECT s.service_id FROM extsvc.service_records s WHERE s.dpf_service_name = e->>'release')),
           e->>'release', e->>'reason'
      FROM jsonb_array_elements(p_strays) e
     WHERE e->>'pod' IS NOT NULL AND e->>'reason' IN ('no_attachment', 'node_key_without_dpudevice')
     ORDER BY e->>'pod'
    ON CONFLICT ON CONSTRAINT stray_pods_pkey DO UPDATE
      SET last_seen = now(), reason = EXCLUDED.reason,
          service_id = coalesce(EXCLUDED.service_id, x.service_id), release = coalesce(EXCLUDED.release, x.release)
    RETURNING x.service_id, x.pod, x.reason, x.xmax = 0 AS is_new  -- inserted, not updated
  LOOP
    IF r.is_new AND r.service_id IS NOT NULL THEN
      PERFORM extsvc._record_event(s.service_id, s.lifecycle_state::text, 'worker', 'stray_workload',
                                   format('pod %s runs on DPU %s without an attachment (%s)', r.pod, v_node, r.reason))
         FROM extsvc.service_records s
        WHERE s.service_id = r.service_id
          AND EXISTS (SELECT FROM extsvc.lifecycle_transitions t
                       WHERE t.from_state = s.lifecycle_state AND t.to_state = s.lifecycle_state
                         AND t.actor = 'worker' AND t.reason = 'stray_workload');
    END IF;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc._record_stray_pods(text, jsonb) IS
  'Internal (worker): replaces a DPU''s stray pods with what its placement pass saw; a new one is a stray_workload history entry of its service.';

-- Operators: pods of our services on DPUs without an attachment for them.
CREATE VIEW extsvc.stray_workloads AS
SELECT x.service_id, d.dpu_node_name, x.pod, x.reason, x.first_seen,
       x.dpu_machine_id, x.release, x.last_seen
  FROM extsvc.stray_pods x
  JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id;
COMMENT ON VIEW extsvc.stray_workloads IS
  'Pods of our services on DPUs without an attachment for them (a chart that ignores serviceDaemonSet.nodeSelector: no_attachment; a nico/extsvc-* key on the Node that neither the DPUDevice nor the DPU object carries: node_key_without_dpudevice, and the worker removes that key), as each DPU''s last placement pass saw them.';
