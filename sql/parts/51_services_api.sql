-- Service lifecycle API (SPEC 2.5, 2.9, 2.10): create, update and delete, each a body and its
-- two gates. Every function only validates and persists intent in the caller's transaction;
-- none calls Kubernetes. The checks they share are in 50_service_checks.sql.

-- Marks a DPF service's reconciliation row as having new intent.
CREATE FUNCTION extsvc._intent_changed(p_service_id uuid) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET state_version = r.state_version + 1, next_due_at = now(), attempts = 0,
         last_error = NULL, last_http_status = NULL, last_error_at = NULL
   WHERE r.service_id = p_service_id;
  PERFORM extsvc._wake();
END
$fn$;

-- The body of create_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql AS $fn$
DECLARE
  v_id      uuid := coalesce(_create_service.service_id, gen_random_uuid());
  v_type    text := upper(btrim(_create_service.service_type));
  v_scope   text := coalesce(upper(btrim(_create_service.deployment_scope)), 'INSTANCE_DPUS');
  v_target  text := upper(btrim(_create_service.dpu_target));
  v_name    text;
  v_data    jsonb;
  v_version text := extsvc._config_version(1);
  v_existing extsvc.service_records;
BEGIN
  PERFORM extsvc._check_tenant_id(_create_service.tenant_organization_id, true);
  v_name := extsvc._service_name(_create_service.service_name);
  IF length(_create_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;
  IF v_type IS NULL OR v_type NOT IN ('KUBERNETES_POD', 'DPF_HELM_CHART') THEN
    PERFORM extsvc._raise('22023', 'unknown service_type', format('field: service_type = %s', extsvc._token(_create_service.service_type)),
                          'Use KUBERNETES_POD or DPF_HELM_CHART.');
  END IF;
  IF v_scope NOT IN ('INSTANCE_DPUS', 'ALL_DPUS') THEN
    PERFORM extsvc._raise('22023', 'unknown deployment_scope', format('field: deployment_scope = %s', extsvc._token(_create_service.deployment_scope)),
                          'Use INSTANCE_DPUS (default) or ALL_DPUS.');
  END IF;
  IF v_target IS NOT NULL AND v_target NOT IN ('PRIMARY', 'ALL_ACTIVE', 'ALL') THEN
    PERFORM extsvc._raise('22023', 'unknown dpu_target', format('field: dpu_target = %s', extsvc._token(_create_service.dpu_target)),
                          'Use PRIMARY, ALL_ACTIVE or ALL.');
  END IF;
  IF _create_service.data IS NULL THEN
    PERFORM extsvc._raise('22023', 'data must not be NULL', 'field: data', 'Pass the service definition.');
  END IF;

  IF v_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_create_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _create_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF v_scope = 'ALL_DPUS' THEN
      IF NOT p_admin THEN
        PERFORM extsvc._raise('42501', 'only extsvc_admin members may create ALL_DPUS services',
                              'field: deployment_scope = ALL_DPUS', 'Ask an operator to create site-wide services.');
      END IF;
      IF v_target IS NOT NULL THEN
        PERFORM extsvc._raise('22023', 'dpu_target must be NULL for ALL_DPUS services', 'field: dpu_target',
                              'Omit dpu_target: an ALL_DPUS service runs on every registered DPU.');
      END IF;
    ELSIF v_target IS NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target is required for INSTANCE_DPUS services', 'field: dpu_target',
                            'Use PRIMARY, ALL_ACTIVE or ALL.');
    END IF;
    v_data := extsvc._validate_helm_chart_data(_create_service.data);
    PERFORM extsvc._check_chart_allowed(v_data);
    PERFORM extsvc._check_privileged_allowed(v_data, p_admin);
  ELSE
    IF v_target IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target applies only to DPF_HELM_CHART services', 'field: dpu_target',
                            'Omit dpu_target for KUBERNETES_POD services.');
    END IF;
    IF v_scope <> 'INSTANCE_DPUS' THEN
      PERFORM extsvc._raise('22023', 'ALL_DPUS applies only to DPF_HELM_CHART services', 'field: deployment_scope',
                            'Omit deployment_scope for KUBERNETES_POD services.');
    END IF;
    IF btrim(_create_service.data) = '' OR octet_length(_create_service.data) > 131072 THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data',
                            'Pass the pod definition.');
    END IF;
    PERFORM extsvc._check_observability(_create_service.observability);
  END IF;

  -- A repeated create with the same id and the same request returns the
  -- existing service; anything else with that id is a conflict.
  SELECT * INTO v_existing FROM extsvc.service_records s WHERE s.service_id = v_id FOR UPDATE;
  IF FOUND THEN
    IF v_existing.tenant_organization_id <> _create_service.tenant_organization_id THEN
      -- never confirm another tenant's service (nor return its row)
      PERFORM extsvc._raise('42501', 'service_id is not available to this tenant',
        format('service_id: %s, tenant_organization_id: %s', v_id, extsvc._token(_create_service.tenant_organization_id)),
        'Omit service_id to get a fresh one, or pass the id of one of this tenant''s services.');
    END IF;
    IF v_existing.tenant_organization_id = _create_service.tenant_organization_id
       AND v_existing.service_name = v_name
       AND v_existing.service_type = v_type
       AND v_existing.deployment_scope = v_scope
       AND v_existing.dpu_target IS NOT DISTINCT FROM v_target
       AND v_existing.description IS NOT DISTINCT FROM _create_service.description
       AND v_existing.lifecycle_state NOT IN ('DELETING', 'DELETED')
       AND ((v_type = 'DPF_HELM_CHART'
             AND (SELECT r.data FROM extsvc.helm_revisions r
                   WHERE r.service_id = v_id AND r.revision = v_existing.desired_revision) = v_data)
         OR (v_type = 'KUBERNETES_POD'
             AND (SELECT v.data FROM extsvc.service_versions v WHERE v.service_id = v_id
                   ORDER BY v.version_number DESC LIMIT 1) = _create_service.data)) THEN
      RETURN extsvc._service_row(v_id);
    END IF;
    PERFORM extsvc._raise_c('service_records_pkey', '23505', 'service_id already exists', format('service_id: %s', v_id),
                          'Repeat a create only with identical arguments, or omit service_id.');
  END IF;

  PERFORM extsvc._check_name_free(_create_service.tenant_organization_id, v_name, NULL);

  IF v_type = 'DPF_HELM_CHART' THEN
    IF EXISTS (SELECT FROM extsvc.service_records s
               WHERE s.dpf_service_name = extsvc._dpf_service_name(v_id, v_version)) THEN
      PERFORM extsvc._raise_c('service_records_dpf_service_name_key', '23505', 'generated DPUService name collides with another service',
        format('dpf_service_name: %s', extsvc._dpf_service_name(v_id, v_version)),
        'Retry the create with another service_id.');
    END IF;
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        attachable_version, desired_revision, dpf_service_name, placement_label_key, status_message)
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
        v_type, v_scope, v_target, 'CREATING', 'api', 'create',
        v_version, 1, extsvc._dpf_service_name(v_id, v_version), extsvc._placement_label_key(v_id, v_version),
        'waiting for the worker to create the DPUService');
    INSERT INTO extsvc.service_versions (service_id, version, version_number)
    VALUES (v_id, v_version, 1);
    INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (v_id, 1, v_data);
    INSERT INTO extsvc.dpf_extension_service_reconciliations (service_id, next_due_at) VALUES (v_id, now());
    -- handed to a worker when this transaction commits (and the workers woken): issue 26, part 4
    PERFORM extsvc._hand_over(v_id);
  ELSE
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        has_credential, observability)
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
        v_type, v_scope, NULL, 'READY', 'api', 'create',
        coalesce(_create_service.has_credential, false), _create_service.observability);
    INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
    VALUES (v_id, v_version, 1, _create_service.data, coalesce(_create_service.has_credential, false),
            _create_service.observability);
  END IF;
  RETURN extsvc._service_row(v_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb, boolean) IS
  'Internal: body of extsvc.create_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

-- The entry, then its gates (extsvc._create_gates): SECURITY DEFINER, the admin one executable by
-- extsvc_admin only.
CREATE FUNCTION extsvc.create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF extsvc._caller_is_admin() THEN
    RETURN extsvc._create_service_as_admin(create_service.tenant_organization_id, create_service.service_name,
      create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
      create_service.deployment_scope, create_service.service_id, create_service.has_credential,
      create_service.observability);
  END IF;
  RETURN extsvc._create_service_as_api(create_service.tenant_organization_id, create_service.service_name,
    create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
    create_service.deployment_scope, create_service.service_id, create_service.has_credential,
    create_service.observability);
END
$fn$;
COMMENT ON FUNCTION extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Creates a service. DPF_HELM_CHART answers CREATING: the worker creates the DPUService later. ALL_DPUS needs extsvc_admin rights of the calling role (SET ROLE included); another tenant''s service_id is refused (42501).';
SELECT extsvc._create_gates('create_service');

-- The body of update_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match bigint DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql AS $fn$
DECLARE
  s        extsvc.service_records;
  v_name   text;
  v_data   jsonb;
  v_cur    jsonb;
  v_rev    integer;
  v_next   text;
  v_vnum   integer;
BEGIN
  PERFORM extsvc._check_service_tenant(_update_service.service_id, _update_service.tenant_organization_id);
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _update_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _update_service.service_id),
                          'Check the service id; deleted services stay visible in extsvc.services.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may update ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to change site-wide services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', format('service is %s and cannot be updated', s.lifecycle_state),
                          format('service_id: %s, lifecycle_state: %s', s.service_id, s.lifecycle_state),
                          'Create a new service instead.');
  END IF;
  IF _update_service.if_version_ctr_match IS NOT NULL AND _update_service.if_version_ctr_match <> s.version_ctr THEN
    PERFORM extsvc._raise_c('version_ctr_match', '55000', 'version_ctr does not match',
                          format('if_version_ctr_match: %s, version_ctr: %s', _update_service.if_version_ctr_match, s.version_ctr),
                          'Re-read the service and retry with its current version_ctr.');
  END IF;
  -- the stored name again (a name kept from before issue 29 included) is no
  -- rename; any other is checked as a new one
  IF _update_service.service_name IS NOT NULL THEN
    v_name := CASE WHEN btrim(_update_service.service_name) = s.service_name THEN s.service_name
                   ELSE extsvc._service_name(_update_service.service_name) END;
  END IF;
  IF length(_update_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_update_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _update_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF _update_service.data IS NOT NULL THEN
      v_data := extsvc._validate_helm_chart_data(_update_service.data);
      PERFORM extsvc._check_chart_allowed(v_data);
      PERFORM extsvc._check_privileged_allowed(v_data, p_admin);
    END IF;
  ELSE
    IF _update_service.data IS NOT NULL
       AND (btrim(_update_service.data) = '' OR octet_length(_update_service.data) > 131072) THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data', 'Pass the pod definition.');
    END IF;
    PERFORM extsvc._check_observability(_update_service.observability);
  END IF;

  IF v_name IS NOT NULL AND v_name <> s.service_name THEN
    PERFORM extsvc._check_name_free(s.tenant_organization_id, v_name, s.service_id);
    UPDATE extsvc.service_records r SET service_name = v_name, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;
  IF _update_service.description IS NOT NULL AND _update_service.description IS DISTINCT FROM s.description THEN
    UPDATE extsvc.service_records r SET description = _update_service.description, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' AND v_data IS NOT NULL THEN
    SELECT r.data INTO v_cur FROM extsvc.helm_revisions r
     WHERE r.service_id = s.service_id AND r.revision = s.desired_revision;
    IF v_cur IS DISTINCT FROM v_data THEN
      v_rev := s.desired_revision + 1;
      INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (s.service_id, v_rev, v_data);
      -- a pending revision that never reached DPF is superseded, not lost
      UPDATE extsvc.helm_revisions r SET superseded_at = now()
       WHERE r.service_id = s.service_id AND r.revision = s.desired_revision AND r.applied_at IS NULL;
      v_next := CASE s.lifecycle_state
                  WHEN 'READY' THEN 'UPDATING'
                  WHEN 'FAILED' THEN CASE WHEN s.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END
                  ELSE s.lifecycle_state END;
      -- an update of a FAILED service replaces a delete that failed before:
      -- a later retry_service retries this definition, not the delete (issue #13)
      UPDATE extsvc.service_records r
         SET desired_revision = v_rev, version_ctr = r.version_ctr + 1, updated_at = now(),
             delete_requested_at = CASE WHEN s.lifecycle_state = 'FAILED' THEN NULL ELSE r.delete_requested_at END,
             lifecycle_state = v_next, state_actor = 'api', state_reason = 'update',
             status_message = format('waiting for the worker to apply revision %s', v_rev)
       WHERE r.service_id = s.service_id;
      IF v_next = s.lifecycle_state THEN
        PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'api', 'superseded',
                                     format('revision %s supersedes revision %s', v_rev, s.desired_revision), v_rev);
      END IF;
      PERFORM extsvc._intent_changed(s.service_id);
    END IF;
  ELSIF s.service_type = 'KUBERNETES_POD' AND (_update_service.data IS NOT NULL
        OR _update_service.has_credential IS NOT NULL OR _update_service.observability IS NOT NULL) THEN
    SELECT v.version_number INTO v_vnum FROM extsvc.service_versions v
     WHERE v.service_id = s.service_id ORDER BY v.version_number DESC LIMIT 1;
    -- A version with data is a full spec, as in NICo (issue #14 P1-10): an
    -- omitted has_credential / observability means none. has_credential =>
    -- true says NICo stored a (rotated) credential: always a new version,
    -- numbered version_ctr + 1, NICo's Vault key (issue #14 P0-5): NICo's own
    -- rule (ConfigVersion::new(version_ctr).incremental_change()), which an
    -- imported service's counter continues (issue 22).
    IF _update_service.data IS NOT NULL AND NOT coalesce(_update_service.has_credential, false) AND EXISTS (
         SELECT FROM extsvc.service_versions v WHERE v.service_id = s.service_id
            AND v.version_number = v_vnum AND v.deleted_at IS NULL AND v.data = _update_service.data
            AND NOT v.has_credential
            AND v.observability IS NOT DISTINCT FROM _update_service.observability) THEN
      NULL;  -- same definition: idempotent no-op
    ELSE
      INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
      SELECT s.service_id, extsvc._config_version(s.version_ctr + 1), s.version_ctr + 1,
             coalesce(_update_service.data, v.data),
             CASE WHEN _update_service.data IS NOT NULL THEN coalesce(_update_service.has_credential, false)
                  ELSE coalesce(_update_service.has_credential, v.has_credential) END,
             CASE WHEN _update_service.data IS NOT NULL THEN _update_service.observability
                  ELSE coalesce(_update_service.observability, v.observability) END
        FROM extsvc.service_versions v WHERE v.service_id = s.service_id AND v.version_number = v_vnum;
      UPDATE extsvc.service_records r
         SET version_ctr = r.version_ctr + 1, updated_at = now(),
             has_credential = v.has_credential, observability = v.observability
        FROM extsvc.service_versions v
       WHERE r.service_id = s.service_id AND v.service_id = s.service_id AND v.version_number = s.version_ctr + 1;
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'new_version',
                                   format('version %s%s', extsvc._config_version(s.version_ctr + 1),
                                          CASE WHEN coalesce(_update_service.has_credential, false)
                                               THEN ' (credential provided)' ELSE '' END), NULL);
    END IF;
  END IF;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._update_service(uuid, text, text, text, bigint, boolean, jsonb, text, boolean) IS
  'Internal: body of extsvc.update_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc.update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match bigint DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF extsvc._caller_is_admin() THEN
    RETURN extsvc._update_service_as_admin(update_service.service_id, update_service.data,
      update_service.service_name, update_service.description, update_service.if_version_ctr_match,
      update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
  END IF;
  RETURN extsvc._update_service_as_api(update_service.service_id, update_service.data,
    update_service.service_name, update_service.description, update_service.if_version_ctr_match,
    update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.update_service(uuid, text, text, text, bigint, boolean, jsonb, text) IS
  'Updates name, description or data. A DPF data change becomes a new Helm revision; the same data again is a no-op. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';
SELECT extsvc._create_gates('update_service');

-- Instances whose configuration or attachments still reference a service.
CREATE FUNCTION extsvc._blocking_instances(p_service_id uuid, p_version text) RETURNS text
LANGUAGE sql STABLE AS $fn$
  SELECT string_agg(x.instance_id::text, ', ' ORDER BY x.instance_id::text)
  FROM (SELECT DISTINCT i.instance_id
          FROM extsvc.instance_extension_services i
         WHERE i.service_id = p_service_id AND (p_version IS NULL OR i.version = p_version)
        UNION
        SELECT DISTINCT a.instance_id
          FROM extsvc.dpf_extension_service_attachments a
         WHERE a.service_id = p_service_id AND (p_version IS NULL OR a.version = p_version)
         LIMIT 20) x
$fn$;

-- The body of delete_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._delete_service(service_id uuid, version text DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql AS $fn$
DECLARE
  s          extsvc.service_records;
  v_blocking text;
BEGIN
  PERFORM extsvc._check_service_tenant(_delete_service.service_id, _delete_service.tenant_organization_id);
  -- FOR NO KEY UPDATE, not FOR UPDATE (issue 13): the key never changes, and
  -- the worker's DPU completion, holding a DPU's work row, takes KEY SHARE on
  -- the service (the foreign key of the site_service_dpu_status row it
  -- inserts). FOR UPDATE made it wait for this call while the lifecycle
  -- trigger (_service_state_wakes_dpus) made this call wait for that work
  -- row: a deadlock (test/nico/race_dpu_completion.py). An attach's FOR SHARE
  -- still waits for this lock (race_attach_delete.py).
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _delete_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _delete_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may delete ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to delete site-wide services.');
  END IF;
  IF _delete_service.version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v
        WHERE v.service_id = s.service_id AND v.version = _delete_service.version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', s.service_id, extsvc._token(_delete_service.version)),
                          'List the versions with SELECT version FROM extsvc.services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    RETURN extsvc._service_row(s.service_id);   -- idempotent
  END IF;

  IF s.service_type = 'KUBERNETES_POD' THEN
    -- in use (issue #14 P0-6, as in NICo): active entries, tombstones whose
    -- termination NICo has not confirmed yet (extsvc.remove_terminated_services),
    -- and entries of instances being deleted
    SELECT string_agg(DISTINCT i.instance_id::text, ', ') INTO v_blocking
      FROM extsvc.instance_extension_services i
     WHERE i.service_id = s.service_id
       AND (_delete_service.version IS NULL OR i.version = _delete_service.version);
    IF v_blocking IS NOT NULL THEN
      PERFORM extsvc._raise_c('service_in_use', '55000', 'service is still attached to instances',
                            format('instances: %s', v_blocking),
                            'Detach the service from these instances and confirm termination (extsvc.remove_terminated_services) first.');
    END IF;
    UPDATE extsvc.service_versions v SET deleted_at = now()
     WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
       AND (_delete_service.version IS NULL OR v.version = _delete_service.version);
    IF NOT EXISTS (SELECT FROM extsvc.service_versions v
                    WHERE v.service_id = s.service_id AND v.deleted_at IS NULL) THEN
      UPDATE extsvc.service_records r
         SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'delete',
             deleted_at = now(), delete_requested_at = now(), updated_at = now(), status_message = NULL
       WHERE r.service_id = s.service_id;
    ELSE
      UPDATE extsvc.service_records r SET updated_at = now() WHERE r.service_id = s.service_id;  -- issue #14 P1-11
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'version_deleted',
                                   format('version %s', _delete_service.version), NULL);
    END IF;
    RETURN extsvc._service_row(s.service_id);
  END IF;

  -- DPF_HELM_CHART: blocked while any attachment or tombstone references it.
  v_blocking := extsvc._blocking_instances(s.service_id, NULL);
  IF v_blocking IS NOT NULL THEN
    PERFORM extsvc._raise_c('service_in_use', '55000', 'service still has active or removing attachments',
                          format('instances: %s', v_blocking),
                          'Detach the service from these instances and wait until their DPUs report TERMINATED.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = 'DELETING', state_actor = 'api', state_reason = 'delete',
         delete_requested_at = now(), updated_at = now(),
         status_message = 'waiting for the worker to delete the DPUService'
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._delete_service(uuid, text, text, boolean) IS
  'Internal: body of extsvc.delete_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc.delete_service(service_id uuid, version text DEFAULT NULL,
                                      tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.service_deletions
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  r extsvc.services;
  v extsvc.service_deletions;
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF extsvc._caller_is_admin() THEN
    r := extsvc._delete_service_as_admin(delete_service.service_id, delete_service.version,
                                         delete_service.tenant_organization_id);
  ELSE
    r := extsvc._delete_service_as_api(delete_service.service_id, delete_service.version,
                                       delete_service.tenant_organization_id);
  END IF;
  -- what this deletion removed, for NICo's Vault cleanup (issue 22)
  SELECT (r).*, extsvc._removed_versions(r.service_id) INTO v;
  RETURN v;
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service(uuid, text, text) IS
  'Deletes a service (or one KUBERNETES_POD version). DPF services go DELETING; the worker finishes the delete. Returns the service row and removed_versions [{version, version_number, had_credential}] of what this transaction removed, so NICo deletes those Vault keys after its commit. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';
SELECT extsvc._create_gates('delete_service');
