-- The placement API's writes: instance registry and attachments (SPEC 2.4, 2.7).
-- DPU registry: 71_dpu_registry.sql. Reads (per-DPU status, SPEC 2.8): 73_placement_reads.sql. Internals: 70_placement_internals.sql.

-- plan_cache_mode = force_generic_plan on the calls NICo's handlers make in
-- bursts (upsert_instance, set_instance_extension_services and
-- delete_instance here, extsvc.lock_placement, and create_service,
-- update_service and delete_service with their gates): their
-- statements look rows up by key, and under the default mode PostgreSQL kept
-- planning many of them anew at every call, because a custom plan for a
-- one-element array (= ANY) looks cheaper than the generic one. An
-- allocation of 8 instances spent a third of its time planning (22 ms
-- against 15 ms with generic plans, one session; issue 26, part 3). The
-- setting applies to the statements of the calls they make too; the
-- registry calls (register_dpu, 71_dpu_registry.sql) keep custom plans for the reason given there.

-- Instances -----------------------------------------------------------------

CREATE FUNCTION extsvc.upsert_instance(instance_id uuid, tenant_organization_id text, host_machine_id text,
                                       network_dpus text[] DEFAULT NULL, dpf_managed boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.instances;
  v_bad text;
  v_host text;
  v_net text[];
  v_inserted boolean;
  v_owner text;
  v_held boolean;
BEGIN
  IF upsert_instance.instance_id IS NULL THEN
    PERFORM extsvc._raise('22023', 'instance_id is required', 'argument: instance_id is NULL',
                          'Pass the instance id.');
  END IF;
  -- NICo MachineIds (SPEC 7): the host, and the DPUs the network uses
  v_host := extsvc._machine_id(upsert_instance.host_machine_id, 'host_machine_id', 'host');
  v_net := extsvc._machine_ids(upsert_instance.network_dpus, 'network_dpus', 'dpu');
  PERFORM extsvc._check_tenant_id(upsert_instance.tenant_organization_id, true);
  -- Another tenant's instance is refused before any lock is taken: an
  -- instance never changes its tenant, so the unlocked read decides, and a
  -- batch that names another tenant's instance fails at once instead of
  -- waiting for (and, in a second batch, deadlocking with) its owner's
  -- transaction (test/nico/concurrency.py found that one)
  SELECT i.tenant_organization_id INTO v_owner FROM extsvc.instances i
   WHERE i.instance_id = upsert_instance.instance_id;
  IF v_owner <> upsert_instance.tenant_organization_id THEN
    PERFORM extsvc._raise('42501', 'instance_id is not available to this tenant',
                          format('instance_id: %s, tenant_organization_id: %s', upsert_instance.instance_id,
                                 extsvc._token(upsert_instance.tenant_organization_id)),
                          'An instance keeps the tenant it was registered with; use another instance_id.');
  END IF;
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows (old and new
  -- host) before the instance; in a batch of lock_placement, the host's and
  -- the instance's are held already (an instance that did not exist then has
  -- none but the host's)
  v_held := extsvc._placement_held(v_host, upsert_instance.instance_id, v_owner IS NULL);
  IF NOT v_held THEN
    PERFORM extsvc._lock_dpu_work(ARRAY[v_host], ARRAY[upsert_instance.instance_id]);
  END IF;
  SELECT * INTO old FROM extsvc.instances i WHERE i.instance_id = upsert_instance.instance_id FOR UPDATE;
  -- an instance another call created meanwhile may have attachment rows
  IF NOT v_held OR (old.instance_id IS NOT NULL AND NOT extsvc._placement_held(v_host, old.instance_id)) THEN
    PERFORM extsvc._lock_dpu_work(ARRAY[v_host], ARRAY[upsert_instance.instance_id]);
  END IF;
  IF old.instance_id IS NOT NULL THEN
    IF old.tenant_organization_id <> upsert_instance.tenant_organization_id THEN
      -- an instance never changes its tenant; the answer names nothing of the row
      PERFORM extsvc._raise('42501', 'instance_id is not available to this tenant',
                            format('instance_id: %s, tenant_organization_id: %s', old.instance_id,
                                   extsvc._token(upsert_instance.tenant_organization_id)),
                            'An instance keeps the tenant it was registered with; use another instance_id.');
    END IF;
    IF old.delete_requested_at IS NOT NULL THEN
      PERFORM extsvc._raise_c('instance_deleting', '55000', 'instance is being deleted', format('instance_id: %s', old.instance_id),
                            'Wait until the deletion finished.');
    END IF;
  END IF;
  -- network_dpus must be registered DPUs of this host (issue #12: otherwise
  -- the placement silently froze on the old DPU, which still read ready);
  -- a list not passed (NULL: the current one stays) is not read
  IF v_net IS NOT NULL THEN
    SELECT extsvc._token_list(array_agg(format('%s (%s)', n.id,
                             CASE WHEN d.machine_id IS NULL THEN 'not registered'
                                  WHEN d.host_machine_id <> v_host
                                    THEN format('registered to host %s', d.host_machine_id)
                                  ELSE 'deregistered' END) ORDER BY n.o), false)
      INTO v_bad
      FROM unnest(v_net) WITH ORDINALITY n(id, o)
      LEFT JOIN extsvc.dpus d ON d.machine_id = n.id
     WHERE d.machine_id IS NULL OR d.host_machine_id <> v_host
        OR d.deregistered_at IS NOT NULL;
    IF v_bad IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'network_dpus names DPUs that are not registered to the instance''s host',
                            format('field: network_dpus; host_machine_id: %s; %s', v_host, v_bad),
                            'Register the host''s DPUs with extsvc.register_dpu first, and list only DPUs of host_machine_id.');
    END IF;
  END IF;
  -- an instance with DPF services cannot leave DPF while any remain
  IF old.instance_id IS NOT NULL AND old.dpf_managed AND upsert_instance.dpf_managed IS NOT NULL AND NOT upsert_instance.dpf_managed THEN
    SELECT string_agg(DISTINCT s.service_id::text, ', ') INTO v_bad
      FROM extsvc.service_records s
     WHERE s.service_type = 'DPF_HELM_CHART'
       AND (EXISTS (SELECT FROM extsvc.instance_extension_services c
                     WHERE c.instance_id = old.instance_id AND c.service_id = s.service_id)
            OR EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                        WHERE a.instance_id = old.instance_id AND a.service_id = s.service_id));
    IF v_bad IS NOT NULL THEN
      PERFORM extsvc._raise_c('instance_dpf_attachments', '55000', 'instance still has DPF_HELM_CHART attachments; dpf_managed cannot become false',
                            format('field: dpf_managed; instance_id: %s; services: %s', old.instance_id, v_bad),
                            'Detach its DPF services and wait until their DPUs report TERMINATED, then retry.');
    END IF;
  END IF;
  -- a host holds at most one live instance (issue 29; the unique index
  -- instances_one_live_per_host): the answer names only what was passed
  IF EXISTS (SELECT FROM extsvc.instances x
              WHERE x.host_machine_id = v_host AND x.delete_requested_at IS NULL
                AND x.instance_id <> upsert_instance.instance_id) THEN
    PERFORM extsvc._raise_c('instances_one_live_per_host', '23505', 'the host already has a live instance',
      format('host_machine_id: %s, instance_id: %s', v_host, upsert_instance.instance_id),
      'Delete the host''s instance first (extsvc.delete_instance); an instance being deleted no longer counts.');
  END IF;
  BEGIN
    INSERT INTO extsvc.instances AS i (instance_id, tenant_organization_id, host_machine_id, network_dpus, dpf_managed)
    VALUES (upsert_instance.instance_id, upsert_instance.tenant_organization_id, v_host,
            coalesce(v_net, '{}'), coalesce(upsert_instance.dpf_managed, true))
    ON CONFLICT ON CONSTRAINT instances_pkey DO UPDATE
      SET host_machine_id = EXCLUDED.host_machine_id,
          network_dpus = coalesce(v_net, i.network_dpus),
          -- an omitted dpf_managed (NULL) keeps the current value (issue #12)
          dpf_managed = coalesce(upsert_instance.dpf_managed, i.dpf_managed), updated_at = now()
    -- xmax 0: the row was inserted, not updated
    RETURNING i.xmax = 0 INTO v_inserted;
  EXCEPTION WHEN unique_violation THEN
    -- a concurrent call put another live instance on the host first
    GET STACKED DIAGNOSTICS v_bad = CONSTRAINT_NAME;
    IF v_bad IS DISTINCT FROM 'instances_one_live_per_host' THEN
      RAISE;
    END IF;
    PERFORM extsvc._raise_c('instances_one_live_per_host', '23505', 'the host already has a live instance',
      format('host_machine_id: %s, instance_id: %s', v_host, upsert_instance.instance_id),
      'Delete the host''s instance first (extsvc.delete_instance); an instance being deleted no longer counts.');
  END;
  -- a new instance has no entries (they reference it) and so no targets to resolve
  IF NOT v_inserted THEN
    PERFORM extsvc._materialize_instance(upsert_instance.instance_id, false);
  END IF;
  -- this transaction holds the row and every DPU work row it may touch now
  PERFORM extsvc._placement_note_held(v_host, upsert_instance.instance_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.upsert_instance(uuid, text, text, text[], boolean) IS
  'Registers or updates an instance (host and network DPUs by NICo MachineId, 22023 naming the argument or the element otherwise; DPF-managed); re-resolves its DPU targets. network_dpus must be registered DPUs of the host (22023 naming the others); NULL keeps the current list. dpf_managed NULL: true for a new instance, the current value otherwise; false is refused while DPF attachments or tombstones remain (55000). Another tenant''s instance_id is refused (42501). A host holds at most one live (not deleting) instance (23505 instances_one_live_per_host).';

CREATE FUNCTION extsvc.set_instance_extension_services(instance_id uuid, services jsonb,
                                                       if_config_version_match bigint DEFAULT NULL,
                                                       tenant_organization_id text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e jsonb;
  n integer := 0;
  v_sid uuid;
  v_ver text;
  s record;
  v_types text[] := '{}';
  v_seen uuid[] := '{}';   -- requested service ids, in order
  v_vers text[] := '{}';   -- their versions
  v_ids uuid[] := '{}';    -- their attachment ids as given (NULL: none)
  v_tgts text[] := '{}';   -- their own DPU targets (NULL: the service's)
  v_id uuid;
  v_tgt text;
  v_key text;
  v_changed boolean := false;
  v_tenant text;
  v_dpu text;
  v_xmin xid;
  v_due timestamptz;
  v_attempts integer;
  v_host text;
  v_held boolean;
  v_had_entries boolean;
BEGIN
  -- The instance's tenant and host, read without a lock: the tenant never
  -- changes (upsert_instance refuses another tenant), and NULL (an unknown
  -- instance) locks nothing below. With a tenant given, an unknown instance
  -- and another tenant's get one answer (extsvc._check_instance_tenant's).
  PERFORM extsvc._check_tenant_id(set_instance_extension_services.tenant_organization_id, false);
  SELECT x.tenant_organization_id, x.host_machine_id INTO v_tenant, v_host FROM extsvc.instances x
   WHERE x.instance_id = set_instance_extension_services.instance_id;
  IF set_instance_extension_services.tenant_organization_id IS NOT NULL
     AND v_tenant IS DISTINCT FROM set_instance_extension_services.tenant_organization_id THEN
    PERFORM extsvc._tenant_denied('instance', set_instance_extension_services.instance_id,
                                  set_instance_extension_services.tenant_organization_id);
  END IF;
  -- at most 64 entries, refused before anything is locked (issue 29)
  IF jsonb_typeof(services) = 'array' AND jsonb_array_length(services) > 64 THEN
    PERFORM extsvc._raise('22023', 'services lists more than 64 entries',
                          format('JSON path: $ (%s entries)', jsonb_array_length(services)),
                          'An instance has at most 64 extension services; list each once.');
  END IF;
  -- Lock the referenced services of that tenant FOR SHARE, in id order,
  -- before checking them (issue #14 P0-4): a concurrent delete_service (FOR
  -- NO KEY UPDATE) either waits for this transaction and then sees its
  -- entries, or commits first and this call sees DELETING.
  -- test/nico/race_attach_delete.py proves it. They come first (issue 13): a
  -- service call holds its service row while its lifecycle trigger locks the
  -- work rows of the service's DPUs. Another tenant's service is never
  -- locked (issue 29): the call refuses it below, and while this call waited
  -- for the instance (the next locks) that tenant's own update_service
  -- waited behind it (test/nico/race_tenant_lock.py). Lock order of this
  -- call: these service rows (service_id order), the DPUs' work rows
  -- (dpu_machine_id order), the instance row.
  PERFORM FROM extsvc.service_records r
   WHERE r.tenant_organization_id = v_tenant
     AND r.service_id IN (
           SELECT (x->>'service_id')::uuid
             FROM jsonb_array_elements(CASE WHEN jsonb_typeof(services) = 'array' THEN services END) x
            WHERE jsonb_typeof(x) = 'object' AND jsonb_typeof(x->'service_id') = 'string'
              AND (x->>'service_id') ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
   ORDER BY r.service_id
   FOR SHARE OF r;
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows before the
  -- instance; in a batch of lock_placement held already, with the instance
  -- (whose host read above cannot change while this transaction holds it)
  v_held := extsvc._placement_held(v_host, set_instance_extension_services.instance_id);
  IF NOT v_held THEN
    PERFORM extsvc._lock_dpu_work('{}', ARRAY[set_instance_extension_services.instance_id]);
  END IF;
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = set_instance_extension_services.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    -- gone while this call waited for its locks (a deletion that finished):
    -- with a tenant, the answer of an unknown instance is 42501 (issue 22,
    -- test/nico/concurrency.py)
    PERFORM extsvc._check_instance_tenant(set_instance_extension_services.instance_id,
                                          set_instance_extension_services.tenant_organization_id);
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', set_instance_extension_services.instance_id),
                          'Register it with extsvc.upsert_instance first.');
  END IF;
  IF NOT v_held THEN
    PERFORM extsvc._lock_dpu_work('{}', ARRAY[i.instance_id]);
  END IF;
  IF i.delete_requested_at IS NOT NULL THEN
    PERFORM extsvc._raise_c('instance_deleting', '55000', 'instance is being deleted', format('instance_id: %s', i.instance_id),
                          'Its configuration can no longer change.');
  END IF;
  IF if_config_version_match IS NOT NULL AND if_config_version_match <> i.config_version THEN
    PERFORM extsvc._raise_c('config_version_match', '55000', 'config_version does not match',
                          format('if_config_version_match: %s, config_version: %s', if_config_version_match, i.config_version),
                          'Re-read the instance and retry with its current config_version.');
  END IF;
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of {service_id, version}', 'JSON path: $',
                          'Pass e.g. [{"service_id": "...", "version": "V1-T..."}] or [] to detach all.');
  END IF;
  -- An entry is NICo's serialized InstanceExtensionServiceConfig:
  -- service_id, version, removed (null: active), and on NICo's DSX line id
  -- (the attachment's uuid) and dpu_target (issue 22). Nothing else.
  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    IF jsonb_typeof(e) <> 'object' THEN
      PERFORM extsvc._raise('22023', 'each entry must be an object', format('JSON path: $[%s]', n),
                            'Pass {"service_id": "...", "version": "...", "removed": null}.');
    END IF;
    IF e - '{service_id,version,removed,id,dpu_target}'::text[] <> '{}'::jsonb THEN
      SELECT min(k) INTO v_key FROM jsonb_object_keys(e - '{service_id,version,removed,id,dpu_target}'::text[]) k;
      PERFORM extsvc._raise('22023', 'unknown field in an entry', format('JSON path: $[%s].%s', n, extsvc._token(v_key)),
                            'An entry has service_id, version and optionally removed, id and dpu_target.');
    END IF;
    -- an entry with a removed time is not part of the wanted configuration:
    -- NICo takes only entries with removed = None (tombstones are its own)
    IF jsonb_typeof(e->'removed') IS DISTINCT FROM 'null' AND e ? 'removed' THEN
      PERFORM extsvc._json_time(e, 'removed', format('$[%s]', n), false);
      n := n + 1;
      CONTINUE;
    END IF;
    IF jsonb_typeof(e->'service_id') IS DISTINCT FROM 'string' OR (e->>'service_id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
      PERFORM extsvc._raise('22023', 'service_id must be a UUID string', format('JSON path: $[%s].service_id', n),
                            'Pass the service id as returned by create_service.');
    END IF;
    IF jsonb_typeof(e->'version') IS DISTINCT FROM 'string' THEN
      PERFORM extsvc._raise('22023', 'version must be a string', format('JSON path: $[%s].version', n),
                            'Pass the exact version string, e.g. V1-T1700000000000000.');
    END IF;
    v_sid := (e->>'service_id')::uuid;
    v_ver := e->>'version';
    v_id := NULL;
    IF e ? 'id' AND jsonb_typeof(e->'id') <> 'null' THEN
      IF jsonb_typeof(e->'id') <> 'string' OR (e->>'id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
         OR (e->>'id')::uuid = '00000000-0000-0000-0000-000000000000' THEN
        PERFORM extsvc._raise('22023', 'id must be a non-nil UUID string', format('JSON path: $[%s].id', n),
                              'Pass the attachment''s id, or omit it to have one made.');
      END IF;
      v_id := (e->>'id')::uuid;
    END IF;
    v_tgt := NULL;
    IF e ? 'dpu_target' AND jsonb_typeof(e->'dpu_target') <> 'null' THEN
      v_tgt := upper(btrim(e->>'dpu_target'));
      IF jsonb_typeof(e->'dpu_target') <> 'string' OR v_tgt NOT IN ('PRIMARY', 'ALL_ACTIVE', 'ALL') THEN
        PERFORM extsvc._raise('22023', 'unknown dpu_target',
                              format('JSON path: $[%s].dpu_target = %s', n, extsvc._token(e->>'dpu_target')),
                              'Use PRIMARY, ALL_ACTIVE or ALL (NICo''s primary, all_active, all), or omit it for the service''s.');
      END IF;
    END IF;
    IF v_id IS NOT NULL AND v_id = ANY (v_ids) THEN
      PERFORM extsvc._raise('22023', 'an attachment id appears twice', format('JSON path: $[%s].id', n),
                            'Each attachment has its own id.');
    END IF;
    IF v_sid = ANY (v_seen) THEN
      PERFORM extsvc._raise('22023', 'a service appears twice', format('JSON path: $[%s].service_id', n),
                            'List each service once.');
    END IF;
    v_seen := v_seen || v_sid;
    -- the service, whether it has this version and whether the instance has
    -- the entry already, in one statement
    SELECT r.tenant_organization_id, r.service_type, r.deployment_scope, r.lifecycle_state,
           EXISTS (SELECT FROM extsvc.service_versions v WHERE v.service_id = v_sid AND v.version = v_ver
                      AND v.deleted_at IS NULL) AS has_version,
           EXISTS (SELECT FROM extsvc.instance_extension_services c
                    WHERE c.instance_id = i.instance_id AND c.service_id = v_sid AND c.version = v_ver
                      AND c.removed_at IS NULL) AS attached
      INTO s FROM extsvc.service_records r WHERE r.service_id = v_sid;
    IF set_instance_extension_services.tenant_organization_id IS NOT NULL
       AND (NOT FOUND OR s.tenant_organization_id <> set_instance_extension_services.tenant_organization_id) THEN
      -- with a tenant given: one answer for unknown and foreign services
      PERFORM extsvc._raise('42501', 'service is not accessible to this tenant',
        format('JSON path: $[%s].service_id = %s, tenant_organization_id: %s', n, v_sid,
               extsvc._token(set_instance_extension_services.tenant_organization_id)),
        'Pass the id of one of this tenant''s services; an unknown id and another tenant''s id get this same answer.');
    END IF;
    IF NOT FOUND THEN
      PERFORM extsvc._raise('P0002', 'service not found', format('JSON path: $[%s].service_id = %s', n, v_sid),
                            'Check the service id.');
    END IF;
    IF s.tenant_organization_id <> i.tenant_organization_id THEN
      PERFORM extsvc._raise('42501', 'service belongs to another tenant', format('JSON path: $[%s].service_id = %s', n, v_sid),
                            'An instance can only use its own tenant''s services.');
    END IF;
    IF NOT s.has_version THEN
      PERFORM extsvc._raise('P0002', 'service version not found', format('JSON path: $[%s].version = %s', n, extsvc._token(v_ver)),
                            'Use the exact version string from extsvc.services.version.');
    END IF;
    IF s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS' THEN
      PERFORM extsvc._raise('22023', 'ALL_DPUS services run everywhere and cannot be attached',
                            format('JSON path: $[%s].service_id = %s', n, v_sid), 'Remove this entry.');
    END IF;
    IF s.service_type = 'DPF_HELM_CHART' AND NOT i.dpf_managed THEN
      PERFORM extsvc._raise('22023', 'DPF_HELM_CHART services need a DPF-managed host',
                            format('JSON path: $[%s].service_id = %s, instance_id: %s', n, v_sid, i.instance_id),
                            'Attach KUBERNETES_POD services to hosts that are not managed by DPF.');
    END IF;
    -- NICo's rule (issue #14 P1-14), opt-in: DPF-managed hosts run tenant
    -- workloads through DPF only; entries already attached stay allowed
    IF s.service_type = 'KUBERNETES_POD' AND i.dpf_managed
       AND extsvc._setting('extsvc.refuse_pod_services_on_dpf_hosts')::boolean
       AND NOT s.attached THEN
      PERFORM extsvc._raise('22023', 'KUBERNETES_POD services are refused on DPF-managed hosts',
                            format('JSON path: $[%s].service_id = %s, instance_id: %s', n, v_sid, i.instance_id),
                            'Use a DPF_HELM_CHART service, or turn off extsvc.refuse_pod_services_on_dpf_hosts.');
    END IF;
    IF NOT s.attached THEN
      IF s.lifecycle_state <> 'READY' THEN
        PERFORM extsvc._raise_c('service_not_ready', '55000', format('service is %s; only READY services can be attached', s.lifecycle_state),
                              format('JSON path: $[%s].service_id = %s', n, v_sid),
                              'Wait until the service is READY.');
      END IF;
      -- a new attachment puts the chart on more DPUs: the allow-list of
      -- today applies (issue 29); entries attached before stay
      IF s.service_type = 'DPF_HELM_CHART' THEN
        PERFORM extsvc._check_service_chart_allowed(v_sid, format('JSON path: $[%s].service_id = %s', n, v_sid));
      END IF;
    END IF;
    -- an attachment's own target, validated like the service's (SPEC 2.4)
    IF v_tgt IS NOT NULL AND (s.service_type <> 'DPF_HELM_CHART' OR s.deployment_scope <> 'INSTANCE_DPUS') THEN
      PERFORM extsvc._raise('22023', 'dpu_target applies only to DPF_HELM_CHART services of scope INSTANCE_DPUS',
                            format('JSON path: $[%s].dpu_target', n), 'Omit dpu_target for this entry.');
    END IF;
    v_types := v_types || s.service_type;
    v_vers := v_vers || v_ver;
    v_ids := v_ids || v_id;
    v_tgts := v_tgts || v_tgt;
    n := n + 1;
  END LOOP;
  IF 'KUBERNETES_POD' = ANY (v_types) AND 'DPF_HELM_CHART' = ANY (v_types) THEN
    PERFORM extsvc._raise('22023', 'KUBERNETES_POD and DPF_HELM_CHART services cannot be mixed on one instance',
                          'JSON path: $', 'Use one service type per instance.');
  END IF;

  -- An instance without entries yet (a new one: every allocation) has no
  -- entry to tombstone, retarget or purge: those three statements are
  -- skipped (issue 26, part 3). This transaction holds the instance row, and
  -- every call that adds entries locks it first.
  v_had_entries := EXISTS (SELECT FROM extsvc.instance_extension_services c WHERE c.instance_id = i.instance_id);
  -- removed entries become tombstones
  IF v_had_entries THEN
    UPDATE extsvc.instance_extension_services c SET removed_at = now()
     WHERE c.instance_id = i.instance_id AND c.removed_at IS NULL
       AND NOT EXISTS (SELECT FROM unnest(v_seen, v_vers) w(service_id, version)
                        WHERE w.service_id = c.service_id AND w.version = c.version);
    v_changed := FOUND;
  END IF;
  -- new entries (a tombstone of the same service and version comes back to
  -- life). An entry keeps the attachment id it was first stored with (none
  -- for entries older than 0.3.0), as NICo's calculate_new_extension_services_config
  -- keeps the stored id of a (service_id, version) pair; a new one takes the
  -- id given, or a fresh one.
  INSERT INTO extsvc.instance_extension_services AS c (instance_id, service_id, version, attachment_id, dpu_target)
  SELECT i.instance_id, w.service_id, w.version, coalesce(w.id, gen_random_uuid()), w.tgt
    FROM unnest(v_seen, v_vers, v_ids, v_tgts) w(service_id, version, id, tgt)
  ON CONFLICT ON CONSTRAINT instance_extension_services_pkey DO UPDATE
    SET removed_at = NULL, attached_at = now(), dpu_target = EXCLUDED.dpu_target WHERE c.removed_at IS NOT NULL;
  v_changed := v_changed OR FOUND;
  -- an active entry whose own target changed (a new entry has the target given)
  IF v_had_entries THEN
    UPDATE extsvc.instance_extension_services c SET dpu_target = w.tgt
      FROM unnest(v_seen, v_vers, v_tgts) w(service_id, version, tgt)
     WHERE c.instance_id = i.instance_id AND c.service_id = w.service_id AND c.version = w.version
       AND c.removed_at IS NULL AND c.dpu_target IS DISTINCT FROM w.tgt;
    v_changed := v_changed OR FOUND;
  END IF;
  IF NOT v_changed THEN
    RETURN i.config_version;  -- the same configuration again: no new config_version
  END IF;
  UPDATE extsvc.instances x SET config_version = x.config_version + 1, updated_at = now()
   WHERE x.instance_id = i.instance_id;
  PERFORM extsvc._materialize_instance(i.instance_id, true);
  -- a removed DPF entry with no row left to observe (its host has no
  -- registered DPU any more) has nothing to wait for: it goes now
  IF v_had_entries THEN
    DELETE FROM extsvc.instance_extension_services c
     WHERE c.instance_id = i.instance_id AND c.removed_at IS NOT NULL
       AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                        WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                          AND a.version = c.version)
       AND EXISTS (SELECT FROM extsvc.service_records s
                    WHERE s.service_id = c.service_id AND s.service_type = 'DPF_HELM_CHART');
  END IF;
  -- every DPU of the instance must be observed again for the new
  -- config_version (configs_synced), also those whose rows did not change.
  -- A work row this transaction already made due (its attachment rows'
  -- trigger did: written by this transaction or one of its savepoints, due
  -- now, no attempts) is
  -- left as it is: a second bump changes nothing the worker can see. One
  -- look-up by key per DPU: as a join, the generic plan of this statement
  -- read every work row (9.6 ms a call at 25,000 DPUs; issue 26, part 3).
  -- The look-up names the key only: with `next_due_at = now()` in it the
  -- generic plan scanned the partial claimable index (small when ANALYZE
  -- ran) for the key, every due row of a backlog (1.1 ms a call at 2,500
  -- DPUs, the largest statement of an allocation).
  FOR v_dpu IN SELECT DISTINCT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
                WHERE a.instance_id = i.instance_id ORDER BY 1 LOOP
    SELECT q.xmin, q.next_due_at, q.attempts INTO v_xmin, v_due, v_attempts
      FROM extsvc.dpu_reconciliations q WHERE q.dpu_machine_id = v_dpu;
    IF NOT coalesce(FOUND AND v_due = now() AND v_attempts = 0 AND extsvc._written_by_this_transaction(v_xmin),
                    false) THEN
      PERFORM extsvc._touch_dpu(v_dpu);
    END IF;
  END LOOP;
  RETURN i.config_version + 1;
END
$fn$;
COMMENT ON FUNCTION extsvc.set_instance_extension_services(uuid, jsonb, bigint, text) IS
  'Sets an instance''s extension services from NICo''s entries {service_id, version, removed (null), id, dpu_target}, at most 64 (an entry with a removed time is ignored, as NICo ignores it; id: the attachment''s, kept once stored; dpu_target: this attachment''s, instead of the service''s); removed entries stay as tombstones until their DPUs report TERMINATED. if_config_version_match: bigint (NICo binds i64). Returns the new config_version. With tenant_organization_id, an instance or service of another tenant is refused (42501) exactly like an unknown one. Locks only the instance tenant''s services.';

CREATE FUNCTION extsvc.delete_instance(instance_id uuid, tenant_organization_id text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
BEGIN
  PERFORM extsvc._check_instance_tenant(delete_instance.instance_id, delete_instance.tenant_organization_id);
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows before the instance
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[delete_instance.instance_id]);
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = delete_instance.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    -- gone meanwhile: the answer of an unknown instance (42501 with a tenant)
    PERFORM extsvc._check_instance_tenant(delete_instance.instance_id, delete_instance.tenant_organization_id);
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', delete_instance.instance_id),
                          'Check the instance id; a finished deletion removes the instance.');
  END IF;
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[i.instance_id]);
  IF i.delete_requested_at IS NOT NULL THEN
    RETURN;  -- idempotent
  END IF;
  UPDATE extsvc.instances x SET delete_requested_at = now(), config_version = x.config_version + 1, updated_at = now()
   WHERE x.instance_id = i.instance_id;
  UPDATE extsvc.instance_extension_services c SET removed_at = now()
   WHERE c.instance_id = i.instance_id AND c.removed_at IS NULL;  -- a detached entry keeps its time
  PERFORM extsvc._materialize_instance(i.instance_id, false);
  PERFORM extsvc._cleanup_instance(i.instance_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_instance(uuid, text) IS
  'Deletes an instance: every attachment goes REMOVING on every DPU of the host; the instance disappears when all are TERMINATED. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';
