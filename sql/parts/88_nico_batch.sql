-- Batch reads (issue 22, part 4): NICo loads many instances per handler
-- (FindInstancesByIds, a batch allocation's answer, the machine controller's
-- pass over its hosts), in one call each, not one per instance. Tenant
-- scoping as extsvc.service_snapshots, the batch form the API already has:
-- with tenant_organization_id, ids of other tenants' instances are absent
-- exactly like unknown ones (nothing tells the two apart); without it,
-- unknown ids are absent. Rows come in the order of the ids given (a
-- repeated id once, at its first place).

CREATE FUNCTION extsvc.get_instances(instance_ids uuid[], tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, tenant_organization_id text, host_machine_id text, network_dpus text[],
               dpf_managed boolean, config_version integer, delete_requested_at timestamptz,
               created_at timestamptz, updated_at timestamptz, services jsonb, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._check_tenant_id(get_instances.tenant_organization_id, false);
  SELECT i.instance_id, i.tenant_organization_id, i.host_machine_id, i.network_dpus, i.dpf_managed,
         i.config_version, i.delete_requested_at, i.created_at, i.updated_at,
         extsvc._instance_services(i.instance_id), i.config_version_text
    FROM (SELECT u.id, min(u.o) AS o FROM unnest(get_instances.instance_ids) WITH ORDINALITY u(id, o)
           GROUP BY u.id) u
    JOIN extsvc.instances i ON i.instance_id = u.id
   WHERE get_instances.tenant_organization_id IS NULL
      OR i.tenant_organization_id = get_instances.tenant_organization_id
   ORDER BY u.o
$fn$;
COMMENT ON FUNCTION extsvc.get_instances(uuid[], text) IS
  'Many instances in one call, each as extsvc.get_instance shows it, in the order of the ids given; unknown ids (and, with tenant_organization_id, other tenants'' instances) are absent.';

CREATE FUNCTION extsvc.instance_extension_services_summaries(instance_ids uuid[],
                                                             tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, service_type text, version text,
               aggregate_state text, removed boolean, removed_at timestamptz, dpus integer, configs_synced boolean,
               config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM extsvc._check_tenant_id(instance_extension_services_summaries.tenant_organization_id, false);
  RETURN QUERY
  SELECT i.instance_id, x.service_id, x.service_name, x.service_type, x.version, x.aggregate_state, x.removed,
         x.removed_at, x.dpus, x.configs_synced, x.config_version, x.config_version_text
    FROM (SELECT u.id, min(u.o) AS o FROM unnest(instance_extension_services_summaries.instance_ids)
                                           WITH ORDINALITY u(id, o)
           GROUP BY u.id) u
    JOIN extsvc.instances i ON i.instance_id = u.id
   CROSS JOIN LATERAL extsvc._instance_summary(i.instance_id) WITH ORDINALITY x
   WHERE instance_extension_services_summaries.tenant_organization_id IS NULL
      OR i.tenant_organization_id = instance_extension_services_summaries.tenant_organization_id
   ORDER BY u.o, x.ordinality;
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_summaries(uuid[], text) IS
  'extsvc.instance_extension_services_summary of many instances in one call: instance_id and its rows, instances in the order of the ids given; unknown ids (and, with tenant_organization_id, other tenants'' instances) are absent.';

REVOKE ALL ON FUNCTION
  extsvc.get_instances(uuid[], text),
  extsvc.instance_extension_services_summaries(uuid[], text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.get_instances(uuid[], text),
  extsvc.instance_extension_services_summaries(uuid[], text)
TO extsvc_api, extsvc_admin;

-- A handler transaction that changes several instances or hosts (NICo's
-- batch allocation: upsert every instance, then set every one's services)
-- takes its locks call by call; two such transactions that meet on two
-- hosts in opposite orders deadlock (40P01, test/nico/concurrency.py).
-- NICo's allocation locks its machine rows first for the same reason; this
-- is the same for the rows the placement calls lock, in the one order every
-- writer uses (docs/nico-integration.md, "Lock order"): first an advisory
-- lock per host and per instance id (NICo's machine rows; also instance ids
-- not inserted yet), then the services FOR SHARE
-- (service_id order), the DPUs' work rows (dpu_machine_id order: the DPUs of
-- the hosts, of the instances' hosts and those with attachment rows of the
-- instances), then the instances FOR UPDATE (instance_id order). Called
-- first, the calls that follow find their locks taken. With
-- tenant_organization_id, only that tenant's services and instances are
-- locked (another tenant's are left alone, and the calls refuse them).
CREATE FUNCTION extsvc.lock_placement(host_machine_ids text[], instance_ids uuid[] DEFAULT NULL,
                                      service_ids uuid[] DEFAULT NULL, tenant_organization_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  v_hosts text[] := coalesce(extsvc._machine_ids(lock_placement.host_machine_ids, 'host_machine_ids', 'host'), '{}');
  v_instances uuid[] := ARRAY(SELECT i.instance_id FROM extsvc.instances i
                               WHERE i.instance_id = ANY (coalesce(lock_placement.instance_ids, '{}'))
                                 AND (lock_placement.tenant_organization_id IS NULL
                                      OR i.tenant_organization_id = lock_placement.tenant_organization_id));
  v_key bigint;
BEGIN
  PERFORM extsvc._check_tenant_id(lock_placement.tenant_organization_id, false);
  -- NICo's allocation locks its machine rows FOR UPDATE first; we have no
  -- machines table, and an instance id of the batch may not exist yet (two
  -- batches inserting the same new ids in another order wait for each
  -- other's unique-index entry): a transaction-level advisory lock per host
  -- and per instance id, in key order, stands for both
  FOR v_key IN
    SELECT DISTINCT hashtextextended('extsvc.lock_placement/' || k, 0)
      FROM unnest(v_hosts || ARRAY(SELECT u::text FROM unnest(coalesce(lock_placement.instance_ids, '{}')) u
                                    WHERE u IS NOT NULL)) k
     ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(v_key);
  END LOOP;
  PERFORM FROM extsvc.service_records r
   WHERE r.service_id = ANY (coalesce(lock_placement.service_ids, '{}'))
     AND (lock_placement.tenant_organization_id IS NULL
          OR r.tenant_organization_id = lock_placement.tenant_organization_id)
   ORDER BY r.service_id
   FOR SHARE OF r;
  PERFORM extsvc._lock_dpu_work(v_hosts, v_instances);
  PERFORM FROM extsvc.instances i WHERE i.instance_id = ANY (v_instances) ORDER BY i.instance_id FOR UPDATE OF i;
  -- what moved meanwhile (an instance's host changed, a DPU was added)
  PERFORM extsvc._lock_dpu_work(v_hosts, v_instances);
  -- what the calls of the batch need not lock again (extsvc._placement_held)
  PERFORM set_config('nico_extsvc.placement_locked', array_to_string(ARRAY[
    pg_current_xact_id()::text,
    ARRAY(SELECT DISTINCT d.host_machine_id FROM extsvc.dpus d
            JOIN extsvc.dpu_reconciliations q ON q.dpu_machine_id = d.machine_id
           WHERE d.host_machine_id = ANY (v_hosts) ORDER BY 1)::text,
    v_instances::text,
    ARRAY(SELECT u FROM unnest(coalesce(lock_placement.instance_ids, '{}')) u WHERE u IS NOT NULL)::text], '|'), true);
END
$fn$;
COMMENT ON FUNCTION extsvc.lock_placement(text[], uuid[], uuid[], text) IS
  'Call first in a transaction that changes several instances or hosts (a batch allocation): takes a transaction-level advisory lock per host and per instance id (in key order; NICo locks its machine rows), then locks the services FOR SHARE, the DPUs'' work rows of the hosts and instances and the instances, in the order every writer uses, so that two such transactions never deadlock. With tenant_organization_id, only that tenant''s services and instances are row-locked. The calls of the batch that follow (upsert_instance, set_instance_extension_services) do not lock again what it holds (extsvc._placement_held).';

REVOKE ALL ON FUNCTION extsvc.lock_placement(text[], uuid[], uuid[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION extsvc.lock_placement(text[], uuid[], uuid[], text) TO extsvc_api, extsvc_admin;
