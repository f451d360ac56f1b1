-- The placement API's DPU registry (SPEC 2.7): register_dpu, deregister_dpu.
-- Instances and attachments: 72_placement_api.sql. Internals: 70_placement_internals.sql.

-- plan_cache_mode: a site is registered into empty tables, often many DPUs
-- in one transaction, and the generic plans of this call and of the ones it
-- makes (_lock_dpu_work) were made while the tables were empty: scans, so
-- registering 25,000 DPUs in one statement took 69 s here, 14-16 s with a
-- plan per call (issue 26). A registration is rare; planning it each time is cheap.
CREATE FUNCTION extsvc.register_dpu(machine_id text, host_machine_id text, dpu_device_name text,
                                    dpu_node_name text, is_primary boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_custom_plan
AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.dpus;
  inst uuid;
  v_primary boolean;
  -- NICo MachineIds (SPEC 7): a DPU id and a host id, in canonical form
  v_dpu text := extsvc._machine_id(register_dpu.machine_id, 'machine_id', 'dpu');
  v_host text := extsvc._machine_id(register_dpu.host_machine_id, 'host_machine_id', 'host');
BEGIN
  IF register_dpu.dpu_device_name IS NULL OR register_dpu.dpu_device_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_device_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_device_name is not a Kubernetes object name',
                          format('field: dpu_device_name = %s', extsvc._token(register_dpu.dpu_device_name)),
                          'Use the name of the DPUDevice object (lowercase DNS subdomain).');
  END IF;
  IF register_dpu.dpu_node_name IS NULL OR register_dpu.dpu_node_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_node_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_node_name is not a Kubernetes node name',
                          format('field: dpu_node_name = %s', extsvc._token(register_dpu.dpu_node_name)),
                          'Use the name of the DPU-cluster Node (the DPU object''s name).');
  END IF;
  -- lock order (issue 13, _lock_dpu_work): the work rows of the DPUs of the
  -- old and new host and of their instances before the DPU row
  PERFORM extsvc._lock_dpu_work(ARRAY[v_host, (SELECT d.host_machine_id FROM extsvc.dpus d WHERE d.machine_id = v_dpu)]);
  SELECT * INTO old FROM extsvc.dpus d WHERE d.machine_id = v_dpu FOR UPDATE;
  PERFORM extsvc._lock_dpu_work(ARRAY[v_host, old.host_machine_id]);
  IF EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id <> v_dpu
               AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name)) THEN
    PERFORM extsvc._raise_c(CASE WHEN EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id <> v_dpu
                                                 AND d.dpu_device_name = register_dpu.dpu_device_name)
                                 THEN 'dpus_dpu_device_name_key' ELSE 'dpus_dpu_node_name_key' END,
                            '23505', 'another DPU is registered with this DPUDevice or Node name',
      format('dpu_device_name: %s, dpu_node_name: %s, registered to: %s', register_dpu.dpu_device_name,
             register_dpu.dpu_node_name,
             (SELECT string_agg(d.machine_id, ', ') FROM extsvc.dpus d
               WHERE d.machine_id <> v_dpu
                 AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name))),
      'Deregister or re-register the other DPU first; names identify cluster objects.');
  END IF;
  -- an omitted is_primary keeps the flag of a DPU that stays on its host
  -- (issue #12); a DPU registered to another host without it is not that
  -- host's primary (it never demotes the DPU that is; issue #13)
  v_primary := coalesce(register_dpu.is_primary,
                        CASE WHEN old.host_machine_id = v_host THEN old.is_primary END, false);
  IF v_primary AND EXISTS (
       SELECT FROM extsvc.dpus d WHERE d.host_machine_id = v_host AND d.is_primary
          AND d.machine_id <> v_dpu AND d.deregistered_at IS NULL) THEN
    -- the host's primary DPU changes: the previous one stops being primary
    UPDATE extsvc.dpus d SET is_primary = false, updated_at = now()
     WHERE d.host_machine_id = v_host AND d.is_primary AND d.machine_id <> v_dpu;
  END IF;
  INSERT INTO extsvc.dpus AS d (machine_id, host_machine_id, dpu_device_name, dpu_node_name, is_primary)
  VALUES (v_dpu, v_host, register_dpu.dpu_device_name, register_dpu.dpu_node_name, v_primary)
  ON CONFLICT ON CONSTRAINT dpus_pkey DO UPDATE
    SET host_machine_id = EXCLUDED.host_machine_id, dpu_device_name = EXCLUDED.dpu_device_name,
        dpu_node_name = EXCLUDED.dpu_node_name,
        is_primary = EXCLUDED.is_primary,
        deregistered_at = NULL, updated_at = now();
  PERFORM extsvc._touch_dpu(v_dpu);
  -- instances on the old and new host see a changed DPU set
  FOR inst IN SELECT instance_id FROM extsvc.instances
               WHERE host_machine_id IN (v_host, old.host_machine_id) LOOP
    PERFORM extsvc._materialize_instance(inst, false);
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc.register_dpu(text, text, text, text, boolean) IS
  'Registers (or updates) a DPU of a host by their NICo MachineIds (22023 naming the argument for anything NICo''s parser refuses, or a host id given for a DPU and the reverse) with its DPUDevice and DPU-cluster Node names. is_primary omitted or NULL: false for a new DPU or one registered to another host, the current flag for a DPU that stays on its host; true makes it the host''s primary DPU.';

CREATE FUNCTION extsvc.deregister_dpu(machine_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  d extsvc.dpus;
  inst uuid;
  v_dpu text := extsvc._machine_id(deregister_dpu.machine_id, 'machine_id', 'dpu');
BEGIN
  -- lock order (issue 13, _lock_dpu_work): the work rows of the host's DPUs
  -- and of its instances before the DPU row
  PERFORM extsvc._lock_dpu_work(ARRAY(SELECT x.host_machine_id FROM extsvc.dpus x WHERE x.machine_id = v_dpu));
  SELECT * INTO d FROM extsvc.dpus x WHERE x.machine_id = v_dpu FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', v_dpu),
                          'Check the DPU machine id.');
  END IF;
  PERFORM extsvc._lock_dpu_work(ARRAY[d.host_machine_id]);
  UPDATE extsvc.dpus x SET deregistered_at = coalesce(x.deregistered_at, now()), is_primary = false, updated_at = now()
   WHERE x.machine_id = d.machine_id;
  -- its attachments are never dropped silently: they go REMOVING and leave
  -- once the DPU is observed clean
  UPDATE extsvc.dpf_extension_service_attachments a
     SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
   WHERE a.dpu_machine_id = d.machine_id AND a.placement_state = 'ACTIVE';
  PERFORM extsvc._touch_dpu(d.machine_id);
  FOR inst IN SELECT instance_id FROM extsvc.instances WHERE host_machine_id = d.host_machine_id LOOP
    PERFORM extsvc._materialize_instance(inst, false);
  END LOOP;
  -- the DPU row stays (deregistered): the worker still removes its labels
END
$fn$;
COMMENT ON FUNCTION extsvc.deregister_dpu(text) IS
  'Deregisters a DPU (NICo MachineId); its attachments move to REMOVING and are removed once observed TERMINATED.';
