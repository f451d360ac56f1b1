-- Privileges: nothing for PUBLIC; the API for extsvc_api and extsvc_admin;
-- operator functions for extsvc_admin; worker functions for the owner only.
REVOKE ALL ON ALL TABLES IN SCHEMA extsvc FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA extsvc FROM PUBLIC;

GRANT SELECT ON extsvc.services TO extsvc_api, extsvc_admin;
GRANT SELECT ON extsvc.reconciliation_queue, extsvc.service_history, extsvc.lifecycle_transitions,
                extsvc.placement_transitions, extsvc.dpu_state_history,
                extsvc.chart_allowlist, extsvc.dpu_placement, extsvc.dpu_desired_labels,
                extsvc.services_outside_allowlist, extsvc.stray_workloads,
                -- the per-DPU rows, read-only (issue 28: the runbook's drain check reads them)
                extsvc.dpf_extension_service_attachments, extsvc.site_service_dpu_status
  TO extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc.update_service(uuid, text, text, text, bigint, boolean, jsonb, text),
  extsvc.delete_service(uuid, text, text),
  extsvc.validate_dpf_helm_chart_data(text),
  extsvc.render_dpuservice(uuid, text),
  extsvc.dpf_service_name(uuid, text),
  extsvc.placement_label_key(uuid, text),
  extsvc.allow_chart(text, text),
  extsvc.disallow_chart(text, text),
  extsvc.register_dpu(text, text, text, text, boolean),
  extsvc.deregister_dpu(text),
  extsvc.upsert_instance(uuid, text, text, text[], boolean),
  extsvc.set_instance_extension_services(uuid, jsonb, bigint, text),
  extsvc.delete_instance(uuid, text),
  extsvc.instance_extension_service_status(uuid, text),
  extsvc.instance_extension_services_summary(uuid, text),
  extsvc.instance_extension_services_ready(uuid, text),
  extsvc.instance_dpu_state_history(uuid, text),
  extsvc.dpu_agent_extension_services(text),
  -- the role test the SECURITY INVOKER entries make as the calling role
  extsvc._caller_is_admin(),
  -- the non-admin gates of the role-dependent SECURITY INVOKER entries
  extsvc._create_service_as_api(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc._update_service_as_api(uuid, text, text, text, bigint, boolean, jsonb, text),
  extsvc._delete_service_as_api(uuid, text, text),
  -- delete_service (SECURITY INVOKER) reports what the deletion removed
  extsvc._removed_versions(uuid)
TO extsvc_api, extsvc_admin;

-- The admin gates: PostgreSQL's EXECUTE check on these (made as the calling
-- role, SET ROLE included) is what grants admin rights.
GRANT EXECUTE ON FUNCTION
  extsvc._create_service_as_admin(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc._update_service_as_admin(uuid, text, text, text, bigint, boolean, jsonb, text),
  extsvc._delete_service_as_admin(uuid, text, text),
  extsvc._allow_chart_as_admin(text, text),
  extsvc._disallow_chart_as_admin(text, text)
TO extsvc_admin;

-- The pure helpers the operators' views call (issue 28): PostgreSQL checks
-- EXECUTE on a function inside a view against the role reading the view,
-- not the view's owner, so extsvc.dpu_desired_labels (and dpu_placement and
-- services_outside_allowlist, which read it) and services_outside_allowlist's
-- allow-list check refused every extsvc_admin member. Both only read what
-- an admin may read anyway; regress/pgtap/view_grants.sql reads every view
-- as a member of each role that may read it.
GRANT EXECUTE ON FUNCTION
  extsvc._site_service_wanted(text, integer),
  extsvc._chart_allowed(jsonb)
TO extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.reconcile_now(uuid),
  extsvc.worker_status(),
  extsvc.watch_status(),
  extsvc.request_resync(),
  extsvc.expire_stale_observations(),
  extsvc.repo_url_matches(text, text),
  extsvc.dpuservice_mutable_patch(jsonb, jsonb),
  extsvc.dpuservice_identity_mismatch(jsonb, uuid, text, text)
TO extsvc_admin;
