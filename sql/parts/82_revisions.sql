-- Revisions, rollback, retry, retention and abandoning a blocked delete
-- (issue #12). rollback_service and retry_service are role-dependent like
-- update_service: SECURITY INVOKER entries (admin rights follow the calling
-- role, issue #10); purge_deleted and abandon_service are for extsvc_admin
-- only (EXECUTE granted to extsvc_admin, checked for the calling role).

-- The Helm revisions of a DPF service, newest first.
CREATE FUNCTION extsvc.service_revisions(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (revision integer, data text, is_desired boolean, is_applied boolean, created_at timestamptz,
               created_by text, applied_at timestamptz, superseded_at timestamptz, rollback_of integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(service_revisions.service_id, service_revisions.tenant_organization_id);
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services have Helm revisions',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Read a KUBERNETES_POD service''s versions with extsvc.service_versions(service_id).');
  END IF;
  RETURN QUERY
  SELECT r.revision, r.data::text, r.revision = s.desired_revision, r.revision IS NOT DISTINCT FROM s.applied_revision,
         r.created_at, r.created_by, r.applied_at, r.superseded_at, r.rollback_of
    FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id
   ORDER BY r.revision DESC;
END
$fn$;
COMMENT ON FUNCTION extsvc.service_revisions(uuid, text) IS
  'The Helm revisions of a DPF service, newest first: revision, normalized data, is_desired, is_applied, created_at/by, applied_at, superseded_at, rollback_of. P0002 for an unknown service, 22023 for a KUBERNETES_POD one; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- rollback_service, step 1: the definition of an old revision, after the
-- tenant and existence checks.
CREATE FUNCTION extsvc._revision_data(p_service_id uuid, p_revision bigint, p_tenant text) RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  s extsvc.service_records;
  v_data text;
BEGIN
  s := extsvc._require_service(p_service_id, p_tenant);
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services can be rolled back',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Update a KUBERNETES_POD service with the data of the version you want.');
  END IF;
  SELECT r.data::text INTO v_data FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id AND r.revision = p_revision;
  IF v_data IS NULL THEN
    PERFORM extsvc._raise('P0002', 'revision not found',
                          format('service_id: %s, revision: %s', s.service_id, p_revision),
                          'List the revisions with extsvc.service_revisions(service_id).');
  END IF;
  RETURN v_data;
END
$fn$;
COMMENT ON FUNCTION extsvc._revision_data(uuid, bigint, text) IS
  'Internal step of extsvc.rollback_service: the normalized data of a revision (tenant check, P0002/22023). No grants.';

-- rollback_service, step 3: marks the revision that this transaction's
-- update created as a rollback of p_revision. Only a revision created now,
-- newer than p_revision and with its data, is marked. Reached only through
-- the gates below (issue 29: it was executable by extsvc_api).
CREATE FUNCTION extsvc._mark_rollback(p_service_id uuid, p_revision bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE extsvc.helm_revisions r
     SET rollback_of = p_revision
    FROM extsvc.service_records s, extsvc.helm_revisions o
   WHERE s.service_id = p_service_id AND r.service_id = s.service_id AND r.revision = s.desired_revision
     AND o.service_id = s.service_id AND o.revision = p_revision
     AND r.revision > p_revision AND r.created_at = now() AND r.data = o.data AND r.rollback_of IS NULL;
  IF FOUND THEN
    UPDATE extsvc.service_records s
       SET status_message = format('rollback to revision %s: waiting for the worker to apply revision %s',
                                   p_revision, s.desired_revision)
     WHERE s.service_id = p_service_id;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._mark_rollback(uuid, bigint) IS
  'Internal step of extsvc.rollback_service: records rollback_of on the revision the update just created. No grants.';

-- The body of rollback_service; p_admin comes from the gate that called it.
-- The update runs through update_service's body with the caller's rights
-- (allow-list, extsvc.allow_privileged, version_ctr guard, supersede rules,
-- ALL_DPUS for extsvc_admin only).
CREATE FUNCTION extsvc._rollback_service(p_service_id uuid, p_revision bigint, p_if_version_ctr_match bigint,
                                         p_tenant text, p_admin boolean)
RETURNS extsvc.services
LANGUAGE plpgsql AS $fn$
DECLARE
  v_data text;
  r extsvc.services;
BEGIN
  v_data := extsvc._revision_data(p_service_id, p_revision, p_tenant);
  r := extsvc._update_service(p_service_id, v_data, NULL, NULL, p_if_version_ctr_match, NULL, NULL, p_tenant, p_admin);
  PERFORM extsvc._mark_rollback(p_service_id, p_revision);
  RETURN extsvc._service_row(p_service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._rollback_service(uuid, bigint, bigint, text, boolean) IS
  'Internal: body of extsvc.rollback_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc.rollback_service(service_id uuid, revision bigint, if_version_ctr_match bigint DEFAULT NULL,
                                        tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF extsvc._caller_is_admin() THEN
    RETURN extsvc._rollback_service_as_admin(rollback_service.service_id, rollback_service.revision,
                                             rollback_service.if_version_ctr_match, rollback_service.tenant_organization_id);
  END IF;
  RETURN extsvc._rollback_service_as_api(rollback_service.service_id, rollback_service.revision,
                                         rollback_service.if_version_ctr_match, rollback_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.rollback_service(uuid, bigint, bigint, text) IS
  'Rolls a DPF service back to an older revision: a new revision with that revision''s definition, through the normal update path (allow-list, extsvc.allow_privileged, version_ctr guard, supersede rules, ALL_DPUS for extsvc_admin only; SECURITY INVOKER in front of two gates, like update_service); rollback_of records the origin. Rolling back to the current desired definition is a no-op. P0002 unknown service or revision, 22023 KUBERNETES_POD, 55000 DELETING/DELETED or version_ctr mismatch. revision and if_version_ctr_match: bigint (NICo binds i64).';
SELECT extsvc._create_gates('rollback_service');

-- retry_service -----------------------------------------------------------------

CREATE FUNCTION extsvc._retry_service(service_id uuid, tenant_organization_id text, p_admin boolean)
RETURNS extsvc.services
LANGUAGE plpgsql AS $fn$
DECLARE
  s extsvc.service_records;
BEGIN
  PERFORM extsvc._check_service_tenant(_retry_service.service_id, _retry_service.tenant_organization_id);
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _retry_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _retry_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may retry ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to retry site-wide services.');
  END IF;
  IF s.lifecycle_state <> 'FAILED' THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', 'only FAILED services can be retried',
                          format('lifecycle_state: %s', s.lifecycle_state), 'Use extsvc.reconcile_now for other states.');
  END IF;
  -- a retried create or update asks DPF to run the definition again: the
  -- site's rules of today apply (issue 29); a retried delete only removes
  IF s.delete_requested_at IS NULL THEN
    PERFORM extsvc._check_service_chart_allowed(s.service_id, format('service_id: %s', s.service_id));
    PERFORM extsvc._check_privileged_allowed(h.data, p_admin,
              format('service_id: %s, revision: %s, JSON path: $.security.privileged', s.service_id, h.revision))
       FROM extsvc.helm_revisions h WHERE h.service_id = s.service_id AND h.revision = s.desired_revision;
  END IF;
  -- a failed delete is requested again; otherwise the newest definition
  -- is created or applied again
  UPDATE extsvc.service_records r
     SET lifecycle_state = CASE WHEN r.delete_requested_at IS NOT NULL THEN 'DELETING'
                                WHEN r.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END,
         state_actor = 'api', state_reason = 'retry', updated_at = now(),
         status_message = CASE WHEN p_admin THEN 'retry requested by an operator' ELSE 'retry requested' END
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._retry_service(uuid, text, boolean) IS
  'Internal: body of extsvc.retry_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc.retry_service(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF extsvc._caller_is_admin() THEN
    RETURN extsvc._retry_service_as_admin(retry_service.service_id, retry_service.tenant_organization_id);
  END IF;
  RETURN extsvc._retry_service_as_api(retry_service.service_id, retry_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.retry_service(uuid, text) IS
  'Retries a FAILED DPF service without changing its definition: CREATING (never applied), UPDATING (applied before) or DELETING (a failed delete). For extsvc_api and extsvc_admin; ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, another tenant''s service is refused (42501) exactly like an unknown one.';
SELECT extsvc._create_gates('retry_service');

-- Retention ---------------------------------------------------------------------

-- What purge_deleted keeps for audit: one row per purged service (identity,
-- owner, lifetime, who purged it, its revisions without their data) and
-- every lifecycle history row it had.
CREATE TABLE extsvc.purged_services (
  service_id             uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL,
  service_name           text NOT NULL,
  service_type           text NOT NULL,
  deployment_scope       text NOT NULL,
  dpf_service_name       text,
  created_at             timestamptz NOT NULL,
  delete_requested_at    timestamptz,
  deleted_at             timestamptz NOT NULL,
  final_reason           text NOT NULL,
  revisions              jsonb NOT NULL DEFAULT '[]',   -- [{revision, created_at, created_by, applied_at, rollback_of}]
  versions               jsonb NOT NULL DEFAULT '[]',   -- [{version, created_at, deleted_at, has_credential}]
  purged_at              timestamptz NOT NULL DEFAULT now(),
  purged_by              text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE extsvc.purged_services IS
  'Audit record of every service removed by extsvc.purge_deleted (definitions and pod specs are not kept).';

CREATE TABLE extsvc.purged_service_history (
  id          bigint PRIMARY KEY,        -- the id it had in extsvc.service_state_history
  service_id  uuid NOT NULL REFERENCES extsvc.purged_services,
  from_state  extsvc.lifecycle_state,
  to_state    extsvc.lifecycle_state NOT NULL,
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  message     text,
  revision    integer,
  at          timestamptz NOT NULL
);
CREATE INDEX purged_service_history_service ON extsvc.purged_service_history (service_id, id);
COMMENT ON TABLE extsvc.purged_service_history IS
  'The lifecycle history rows of purged services, kept for audit by extsvc.purge_deleted.';

SELECT pg_catalog.pg_extension_config_dump('extsvc.purged_services', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.purged_service_history', '');

CREATE FUNCTION extsvc.purge_deleted(older_than interval)
RETURNS TABLE (service_id uuid, tenant_organization_id text, service_name text, deleted_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids uuid[];
BEGIN
  IF purge_deleted.older_than IS NULL OR purge_deleted.older_than < interval '0' THEN
    PERFORM extsvc._raise('22023', 'older_than must be a non-negative interval',
                          format('field: older_than = %s', coalesce(purge_deleted.older_than::text, 'NULL')),
                          'Pass e.g. interval ''90 days''.');
  END IF;
  -- finished instance deletions are forgotten after the same time (issue 22:
  -- the deletion probe then answers P0002 for them)
  DELETE FROM extsvc.finished_instance_deletions f WHERE f.finished_at <= now() - purge_deleted.older_than;
  -- DELETED long enough, and no instance configuration (a KUBERNETES_POD
  -- tombstone still seen by a DPU agent) or attachment refers to it
  SELECT array_agg(s.service_id ORDER BY s.service_id) INTO v_ids
    FROM extsvc.service_records s
   WHERE s.lifecycle_state = 'DELETED' AND s.deleted_at <= now() - purge_deleted.older_than
     AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services c WHERE c.service_id = s.service_id)
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a WHERE a.service_id = s.service_id);
  IF v_ids IS NULL THEN
    RETURN;
  END IF;
  PERFORM FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids) ORDER BY s.service_id FOR UPDATE;
  INSERT INTO extsvc.purged_services (service_id, tenant_organization_id, service_name, service_type,
      deployment_scope, dpf_service_name, created_at, delete_requested_at, deleted_at, final_reason,
      revisions, versions)
  SELECT s.service_id, s.tenant_organization_id, s.service_name, s.service_type, s.deployment_scope,
         s.dpf_service_name, s.created_at, s.delete_requested_at, s.deleted_at, s.state_reason,
         coalesce((SELECT jsonb_agg(jsonb_build_object('revision', r.revision, 'created_at', r.created_at,
                                                       'created_by', r.created_by, 'applied_at', r.applied_at,
                                                       'rollback_of', r.rollback_of) ORDER BY r.revision)
                     FROM extsvc.helm_revisions r WHERE r.service_id = s.service_id), '[]'),
         coalesce((SELECT jsonb_agg(jsonb_build_object('version', v.version, 'created_at', v.created_at,
                                                       'deleted_at', v.deleted_at, 'has_credential', v.has_credential)
                                    ORDER BY v.version_number)
                     FROM extsvc.service_versions v WHERE v.service_id = s.service_id), '[]')
    FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids);
  INSERT INTO extsvc.purged_service_history (id, service_id, from_state, to_state, actor, reason, message, revision, at)
  SELECT h.id, h.service_id, h.from_state, h.to_state, h.actor, h.reason, h.message, h.revision, h.at
    FROM extsvc.service_state_history h WHERE h.service_id = ANY (v_ids);
  -- the service row goes; versions, revisions, history, reconciliation and
  -- site status rows follow by ON DELETE CASCADE
  RETURN QUERY
  DELETE FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids)
  RETURNING s.service_id, s.tenant_organization_id, s.service_name, s.deleted_at;
END
$fn$;
COMMENT ON FUNCTION extsvc.purge_deleted(interval) IS
  'Operator (extsvc_admin): removes services DELETED at least older_than ago that no instance configuration or attachment refers to, and returns them. Kept for audit: extsvc.purged_services (identity, tenant, lifetime, final reason, revision and version metadata, who purged it when) and extsvc.purged_service_history (every lifecycle history row). Dropped: pod specs, Helm definitions, reconciliation and status rows.';

-- Abandoning a delete blocked by a foreign object ----------------------------------

CREATE FUNCTION extsvc.abandon_service(service_id uuid) RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  h extsvc.service_state_history;
BEGIN
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = abandon_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', abandon_service.service_id),
                          'Check the service id.');
  END IF;
  SELECT * INTO h FROM extsvc.service_state_history x
   WHERE x.service_id = s.service_id AND x.to_state = 'FAILED' ORDER BY x.id DESC LIMIT 1;
  IF s.lifecycle_state <> 'FAILED' OR h.from_state IS DISTINCT FROM 'DELETING'
     OR h.reason IS DISTINCT FROM 'ownership_conflict' THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', 'only a delete that FAILED on an ownership conflict can be abandoned',
                          format('service_id: %s, lifecycle_state: %s, last failure: %s', s.service_id, s.lifecycle_state,
                                 coalesce(h.from_state || ' -> FAILED (' || h.reason || ')', 'none')),
                          'Retry the delete with extsvc.retry_service, or fix the cause of the failure.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'abandoned',
         deleted_at = now(), updated_at = now(),
         status_message = format('delete abandoned by %s: the object named %s belongs to someone else and was left alone',
                                 session_user, s.dpf_service_name)
   WHERE r.service_id = s.service_id;
  UPDATE extsvc.service_versions v SET deleted_at = now()
   WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
  -- nothing left to do; a stale worker result fails its compare-and-swap
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET state_version = q.state_version + 1, next_due_at = NULL, attempts = 0,
         lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
   WHERE q.service_id = s.service_id;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.abandon_service(uuid) IS
  'Operator (extsvc_admin): a delete that FAILED because the object with the generated name belongs to someone else becomes DELETED (reason abandoned, recorded in the history with who did it); the foreign object is never touched. 55000 for any other state or failure, P0002 when unknown.';

-- Privileges ----------------------------------------------------------------------
REVOKE ALL ON FUNCTION
  extsvc.service_revisions(uuid, text),
  extsvc._revision_data(uuid, bigint, text),
  extsvc._mark_rollback(uuid, bigint),
  extsvc._rollback_service(uuid, bigint, bigint, text, boolean),
  extsvc._rollback_service_as_admin(uuid, bigint, bigint, text),
  extsvc._rollback_service_as_api(uuid, bigint, bigint, text),
  extsvc.rollback_service(uuid, bigint, bigint, text),
  extsvc._retry_service(uuid, text, boolean),
  extsvc._retry_service_as_admin(uuid, text),
  extsvc._retry_service_as_api(uuid, text),
  extsvc.retry_service(uuid, text),
  extsvc.purge_deleted(interval),
  extsvc.abandon_service(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.service_revisions(uuid, text),
  extsvc._rollback_service_as_api(uuid, bigint, bigint, text),
  extsvc.rollback_service(uuid, bigint, bigint, text),
  extsvc._retry_service_as_api(uuid, text),
  extsvc.retry_service(uuid, text)
TO extsvc_api, extsvc_admin;
GRANT EXECUTE ON FUNCTION
  extsvc._retry_service_as_admin(uuid, text),
  extsvc._rollback_service_as_admin(uuid, bigint, bigint, text),
  extsvc.purge_deleted(interval),
  extsvc.abandon_service(uuid)
TO extsvc_admin;
GRANT SELECT ON extsvc.purged_services, extsvc.purged_service_history TO extsvc_admin;
