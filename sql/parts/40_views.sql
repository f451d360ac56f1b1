-- The service view NICo reads. Column order of the leading columns is fixed
-- by the SQL API contract (SPEC 2.10); extras follow. Every column has the
-- type NICo decodes (issue 22): description is never NULL (a String), the
-- lifecycle state is plain text (sqlx decodes no domain as a String).
CREATE VIEW extsvc.services AS
SELECT s.service_id,
       s.tenant_organization_id,
       s.service_name,
       coalesce(s.description, '') AS description,
       s.service_type,
       s.deployment_scope,
       s.dpu_target,
       s.lifecycle_state::text AS lifecycle_state,
       CASE WHEN s.service_type = 'DPF_HELM_CHART' THEN s.attachable_version
            ELSE (SELECT v.version FROM extsvc.service_versions v
                  WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
                  ORDER BY v.version_number DESC LIMIT 1)
       END AS version,
       s.version_ctr,
       s.desired_revision,
       s.applied_revision,
       s.dpf_service_name,
       s.placement_label_key,
       -- a DPUService someone paused is not fought (issue 9): a READY
       -- service says so where NICo and operators look first; the text is
       -- the worker's (core/dpf_status.cpp), recorded as DPF's message
       CASE WHEN s.lifecycle_state = 'READY' AND r.dpf_message LIKE 'spec.paused is true:%'
            THEN coalesce(s.status_message || '; ', '') || split_part(r.dpf_message, ';', 1)
            ELSE s.status_message END AS status_message,
       s.created_at,
       s.updated_at,
       s.deleted_at,
       s.has_credential,
       s.observability,
       r.dpf_ready,
       r.dpf_reason,
       r.dpf_message
FROM extsvc.service_records s
LEFT JOIN extsvc.dpf_extension_service_reconciliations r USING (service_id);
COMMENT ON VIEW extsvc.services IS 'One row per extension service (SPEC 2.10).';

-- The versions the current transaction removed from a service (issue 22):
-- KUBERNETES_POD versions it soft-deleted, and the one version of a DPF
-- service it moved to DELETING. NICo deletes the Vault keys of those with
-- had_credential after its commit (version_number is the key).
CREATE FUNCTION extsvc._removed_versions(p_service_id uuid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT coalesce(jsonb_agg(jsonb_build_object('version', v.version, 'version_number', v.version_number,
                                               'had_credential', v.has_credential)
                            ORDER BY v.version_number), '[]'::jsonb)
    FROM extsvc.service_versions v
    JOIN extsvc.service_records s ON s.service_id = v.service_id
   WHERE v.service_id = p_service_id
     AND (v.deleted_at = now()
          OR (s.service_type = 'DPF_HELM_CHART' AND s.delete_requested_at = now() AND v.version = s.attachable_version))
$fn$;
COMMENT ON FUNCTION extsvc._removed_versions(uuid) IS
  'Internal: [{version, version_number, had_credential}] of the versions of a service that the current transaction removed (KUBERNETES_POD versions deleted, a DPF service''s version whose delete it requested); [] otherwise.';

-- The row type of extsvc.delete_service: a service row and the versions the
-- current transaction removed from it ([] outside a deleting transaction).
CREATE VIEW extsvc.service_deletions AS
SELECT s.*, extsvc._removed_versions(s.service_id) AS removed_versions
  FROM extsvc.services s;
COMMENT ON VIEW extsvc.service_deletions IS
  'The row extsvc.delete_service returns: the extsvc.services row and removed_versions, the versions the current transaction removed ([{version, version_number, had_credential}]; [] outside a deleting transaction).';

-- Operators: the reconciliation queue with leases, attempts and last errors.
CREATE VIEW extsvc.reconciliation_queue AS
SELECT s.service_id, s.tenant_organization_id, s.service_name, s.dpf_service_name,
       s.lifecycle_state, s.desired_revision, s.applied_revision,
       r.state_version, r.attempts, r.next_due_at,
       r.next_due_at IS NOT NULL AND r.next_due_at <= now()
         AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now()) AS due,
       r.lease_owner, r.lease_expires_at, r.last_error, r.last_http_status, r.last_error_at,
       r.last_attempt_at, r.last_success_at, r.observed_generation
FROM extsvc.service_records s
JOIN extsvc.dpf_extension_service_reconciliations r USING (service_id);
COMMENT ON VIEW extsvc.reconciliation_queue IS
  'Per DPF service: what the worker has to do, when, who holds the lease and the last error.';

CREATE VIEW extsvc.service_history AS
SELECT h.id, h.service_id, s.service_name, h.from_state, h.to_state, h.actor, h.reason,
       h.message, h.revision, h.at
FROM extsvc.service_state_history h
JOIN extsvc.service_records s USING (service_id);
COMMENT ON VIEW extsvc.service_history IS 'Every lifecycle transition and event, oldest first by id.';
