-- Descriptions of the tables and internal functions that have none next to
-- their definition (psql's \d+ and \df+ show them; regress/pgtap/schema.sql
-- checks that every table, view and function of the schema has one).

COMMENT ON TABLE extsvc.chart_allowlist IS
  'Chart repositories (and optionally chart names) that DPF_HELM_CHART services may use while extsvc.enforce_chart_allowlist is on; maintained with allow_chart/disallow_chart.';
COMMENT ON TABLE extsvc.service_versions IS
  'Every version of every service (NICo''s version string and number); KUBERNETES_POD definitions live here, DPF_HELM_CHART definitions in helm_revisions.';
COMMENT ON TABLE extsvc.helm_revisions IS
  'Every Helm definition of a DPF_HELM_CHART service, normalized; desired and applied revisions of service_records point here.';
COMMENT ON TABLE extsvc.service_state_history IS
  'Every lifecycle transition and same-state event of every service, checked against lifecycle_transitions; read through the service_history view.';
COMMENT ON TABLE extsvc.dpf_extension_service_reconciliations IS
  'The service queue: one row per DPF_HELM_CHART service with its due time, lease and attempts, claimed by the workers with FOR UPDATE SKIP LOCKED.';
COMMENT ON TABLE extsvc.dpus IS
  'DPU registry (SPEC 2.7): each DPU with its host, DPUDevice and DPU-cluster node name; registered and deregistered by NICo.';
COMMENT ON TABLE extsvc.instances IS
  'Instances (SPEC 2.7) with their network DPUs, dpf_managed flag and NICo config version.';
COMMENT ON TABLE extsvc.instance_extension_services IS
  'An instance''s configured extension services, with tombstones (removed_at) kept until the removal is confirmed.';
COMMENT ON TABLE extsvc.dpf_extension_service_attachments IS
  'Per-DPU placement of an instance''s DPF service (ACTIVE or REMOVING) with the observed deployment state; transitions follow placement_transitions.';
COMMENT ON TABLE extsvc.dpu_reconciliations IS
  'The placement queue: one row per DPU with its due time, lease and last observation, claimed by the workers to set labels and observe pods.';
COMMENT ON TABLE extsvc.site_service_dpu_status IS
  'Per-DPU observed state of ALL_DPUS (site-wide) services, which have no attachments; read with site_service_status.';

COMMENT ON FUNCTION extsvc._aggregate_state IS
  'Internal: aggregates per-DPU deployment states with the precedence of SPEC 2.8.';
COMMENT ON FUNCTION extsvc._backoff IS
  'Internal: the retry delay after a failed attempt (exponential from extsvc.retry_base up to extsvc.retry_cap, never shorter than a clamped Retry-After).';
COMMENT ON FUNCTION extsvc._blocking_instances IS
  'Internal: instances whose configuration or attachments still reference a service.';
COMMENT ON FUNCTION extsvc._check_instance_tenant IS
  'Internal: refuses (42501, without revealing existence) an instance of another tenant when a tenant is given.';
COMMENT ON FUNCTION extsvc._check_lifecycle_transition IS
  'Internal trigger: refuses any lifecycle change not in lifecycle_transitions.';
COMMENT ON FUNCTION extsvc._check_name_free IS
  'Internal: refuses a display name that a live service of the tenant already uses.';
COMMENT ON FUNCTION extsvc._check_service_tenant IS
  'Internal: refuses (42501, without revealing existence) a service of another tenant when a tenant is given.';
COMMENT ON FUNCTION extsvc._cleanup_instance IS
  'Internal: removes converged REMOVING rows, then tombstones without rows, then deleted instances without entries.';
COMMENT ON FUNCTION extsvc._config_version IS
  'Internal: NICo''s ConfigVersion string V<n>-T<micros> of version number n, stamped with the transaction time.';
COMMENT ON FUNCTION extsvc._dpf_service_name IS
  'Internal (C): the generated DPUService name of a service (SPEC 2.2).';
COMMENT ON FUNCTION extsvc._intent_changed IS
  'Internal: marks a DPF service''s queue row as having new intent and due now.';
COMMENT ON FUNCTION extsvc._materialize_instance IS
  'Internal: writes an instance''s per-DPU attachment rows from its configuration and target resolution.';
COMMENT ON FUNCTION extsvc._namespace IS
  'Internal: the namespace of the DPUService objects (extsvc.namespace).';
COMMENT ON FUNCTION extsvc._placement_label_key IS
  'Internal (C): the generated nico/extsvc-* node label key of a service (SPEC 2.2).';
COMMENT ON FUNCTION extsvc._raise IS
  'Internal: raises an error with SQLSTATE, one-line message, DETAIL and HINT.';
COMMENT ON FUNCTION extsvc._record_event IS
  'Internal: records a same-state event (supersede, drift repair, Pod version) after checking it against lifecycle_transitions.';
COMMENT ON FUNCTION extsvc._record_lifecycle_transition IS
  'Internal trigger: records every allowed lifecycle change in service_state_history.';
COMMENT ON FUNCTION extsvc._render_dpuservice IS
  'Internal (C): renders the DPUService object of a service revision; render_dpuservice is the operator''s entry.';
COMMENT ON FUNCTION extsvc._resolve_targets IS
  'Internal: resolves an attachment''s DPU targets (SPEC 2.4); NULL when unresolvable, never an invented empty set.';
COMMENT ON FUNCTION extsvc._service_row IS
  'Internal: the services-view row of one service, for return values.';
COMMENT ON FUNCTION extsvc._service_state_wakes_dpus IS
  'Internal trigger: a DPF service''s lifecycle change makes its DPUs due for observation.';
COMMENT ON FUNCTION extsvc._site_service_cleared IS
  'Internal: true once every registered DPU was observed without an ALL_DPUS service''s label and pods after its delete was requested.';
COMMENT ON FUNCTION extsvc._site_service_wanted IS
  'Internal: whether an ALL_DPUS service is wanted on every registered DPU (accepted by DPF and not being deleted). EXECUTE for extsvc_admin (extsvc.dpu_desired_labels calls it as the reading role).';
COMMENT ON FUNCTION extsvc._tenant_denied IS
  'Internal: the tenant refusal (42501) that does not reveal whether the row exists.';
COMMENT ON FUNCTION extsvc._touch_dpu IS
  'Internal: makes a DPU''s placement work due now.';
COMMENT ON FUNCTION extsvc._validate_helm_chart_data IS
  'Internal (C): validates and normalizes DPF_HELM_CHART data; validate_dpf_helm_chart_data is the public entry.';
COMMENT ON FUNCTION extsvc._wake IS
  'Internal (C): wakes the workers when the transaction commits.';
COMMENT ON FUNCTION extsvc._hand_over IS
  'Internal (C): hands the new service''s work row to a worker when the transaction commits (leased at pre-commit by extsvc._hand_over_creates) and wakes the workers then.';
COMMENT ON FUNCTION extsvc._hand_over_creates IS
  'Internal: run by the creating backend at pre-commit; leases the listed CREATING, due, unleased rows to the worker and returns the leases with their work documents (those that fit p_max_bytes).';
COMMENT ON FUNCTION extsvc.mark_dpus_due IS
  'Worker: makes every DPU due for observation (the resync of placement).';
COMMENT ON FUNCTION extsvc.mark_drift IS
  'Worker: makes a READY service due now because its DPUService drifted.';
COMMENT ON FUNCTION extsvc.resync_snapshot IS
  'Worker: every READY DPF service with its work object (as claim returns it), for the drift detector.';
COMMENT ON FUNCTION extsvc._worker_queues IS
  'Internal: the worker queues by name (service, dpu) with their table, key column, work, completion and claim functions.';
COMMENT ON FUNCTION extsvc._claim_service IS
  'Internal: leases due rows of the service queue for extsvc.claim(''service'', ...): one static statement over the _claimable index.';
COMMENT ON FUNCTION extsvc._claim_dpu IS
  'Internal: leases due rows of the DPU queue for extsvc.claim(''dpu'', ...): one static statement over the _claimable index.';
COMMENT ON FUNCTION extsvc._worker_queue IS
  'Internal: one worker queue of _worker_queues by name; 22023 for an unknown one.';
COMMENT ON FUNCTION extsvc._service_work IS
  'Internal: the work object of a claimed DPF service (wire schema, docs/worker.md).';
COMMENT ON FUNCTION extsvc._dpu_work IS
  'Internal: the work object of a claimed DPU (wire schema, docs/worker.md).';
COMMENT ON FUNCTION extsvc._complete_service IS
  'Internal: applies a service outcome after complete''s compare-and-swap.';
COMMENT ON FUNCTION extsvc._complete_dpu IS
  'Internal: applies a DPU outcome (per-DPU states, convergence, next due time) after complete''s compare-and-swap.';
