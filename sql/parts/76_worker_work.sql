-- The worker's queue, what a claimed row carries and what its outcome does: the work
-- document of each queue (_service_work, _dpu_work) and the outcome's effect (_complete_service,
-- _complete_dpu), which extsvc.claim and extsvc.complete (76_worker_queue.sql) dispatch to.

-- The service queue --------------------------------------------------------

-- What a worker needs for one DPF service: its identity and lifecycle, and
-- the normalized Helm data of the desired revision, from which the worker
-- renders the DPUService (core::render_dpuservice, the function
-- extsvc.render_dpuservice calls too). An ALL_DPUS service being deleted is
-- deleted only after its labels are gone everywhere (placement_clear).
CREATE FUNCTION extsvc._service_work(p_id uuid, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'service_id', s.service_id, 'lifecycle_state', s.lifecycle_state,
           'deployment_scope', s.deployment_scope, 'dpf_service_name', s.dpf_service_name,
           'attachable_version', s.attachable_version, 'desired_revision', s.desired_revision,
           'applied_revision', s.applied_revision, 'attempts', p_attempts,
           'placement_clear', CASE WHEN s.deployment_scope = 'ALL_DPUS' AND s.lifecycle_state = 'DELETING'
                                   THEN extsvc._site_service_cleared(s.service_id) ELSE true END,
           'namespace', extsvc._namespace(), 'helm_data', h.data,
           -- an update's patch base when the watcher's cache shows the applied revision live
           -- (issue 26, part 2: the update is then one PATCH, no GET first)
           'applied_helm_data', CASE WHEN s.lifecycle_state = 'UPDATING' THEN a.data END)
    INTO v_work
    FROM extsvc.service_records s
    LEFT JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
    LEFT JOIN extsvc.helm_revisions a ON a.service_id = s.service_id AND a.revision = s.applied_revision
   WHERE s.service_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a service outcome. outcome.outcome is one of
--   transition  lifecycle change to new_state for reason (READY, DELETED, FAILED)
--   event       same-state event (drift_recreated, drift_patched) and done
--   done        nothing changed; nothing more to do until new intent or drift
--   retry       transient failure: back off (attempts + 1), keep the error
--   poll        waiting on the cluster (finalizers): check again after a backoff
CREATE FUNCTION extsvc._complete_service(p_id uuid, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  s extsvc.service_records;
  o text := p_outcome->>'outcome';
  v_new_state text := p_outcome->>'new_state';
  v_reason text := p_outcome->>'reason';
  v_message text := p_outcome->>'message';
  v_applied integer := (p_outcome->>'applied_revision')::integer;
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_generation bigint := (p_outcome->>'observed_generation')::bigint;
  v_resource_version text := p_outcome->>'observed_resource_version';
BEGIN
  -- FOR NO KEY UPDATE (issue 13): a DPU completion holding a DPU's work row takes
  -- KEY SHARE on the service (site status rows); FOR UPDATE made the two wait
  -- on each other (a worker-against-worker 40P01 seen while fixing the API's
  -- lock order, docs/reliability.md)
  SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = p_id FOR NO KEY UPDATE;

  IF o = 'transition' THEN
    IF v_new_state = 'READY' AND v_applied IS NOT NULL THEN
      UPDATE extsvc.helm_revisions h SET applied_at = now()
       WHERE h.service_id = s.service_id AND h.revision = v_applied
         AND h.applied_at IS NULL;
    END IF;
    UPDATE extsvc.service_records x
       SET lifecycle_state = v_new_state, state_actor = 'worker',
           state_reason = v_reason,
           applied_revision = CASE WHEN v_new_state = 'READY'
                                   THEN coalesce(v_applied, x.applied_revision)
                                   ELSE x.applied_revision END,
           status_message = v_message,
           deleted_at = CASE WHEN v_new_state = 'DELETED' THEN now() END,
           updated_at = now()
     WHERE x.service_id = s.service_id;
    -- A newly applied revision needs new evidence: a RUNNING observed for the
    -- previous revision no longer proves anything (SPEC 2.8).
    IF v_new_state = 'READY'
       AND v_applied IS DISTINCT FROM s.applied_revision THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = 'PENDING', updated_at = now(),
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE a.service_id = s.service_id AND a.deployment_state = 'RUNNING';
      UPDATE extsvc.site_service_dpu_status x
         SET deployment_state = 'PENDING',
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE x.service_id = s.service_id AND x.deployment_state = 'RUNNING';
    END IF;
    IF v_new_state = 'DELETED' THEN
      UPDATE extsvc.service_versions v SET deleted_at = now()
       WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
    END IF;
  ELSIF o = 'event' THEN
    PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'worker', v_reason,
                                 v_message, s.applied_revision);
  ELSIF o NOT IN ('done', 'retry', 'poll') THEN
    PERFORM extsvc._raise('22023', 'unknown reconciliation outcome', format('outcome.outcome: %s', extsvc._token(o)),
                          'Use transition, event, done, retry or poll.');
  END IF;

  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN o = 'retry' THEN q.attempts + 1
                         WHEN o = 'poll' THEN q.attempts + 1 ELSE 0 END,
         next_due_at = CASE
           WHEN o IN ('retry', 'poll') THEN now() + extsvc._backoff(q.attempts + 1, v_retry_after)
           ELSE NULL END,
         last_error = CASE WHEN o = 'retry' THEN v_message
                           WHEN o = 'poll' THEN q.last_error ELSE NULL END,
         last_http_status = CASE WHEN o = 'retry' THEN v_http_status
                                 WHEN o = 'poll' THEN q.last_http_status ELSE NULL END,
         last_error_at = CASE WHEN o = 'retry' THEN now() WHEN o = 'poll' THEN q.last_error_at ELSE NULL END,
         last_success_at = CASE WHEN o IN ('transition', 'event', 'done', 'poll') THEN now() ELSE q.last_success_at END,
         observed_generation = coalesce(v_generation, q.observed_generation),
         observed_resource_version = coalesce(v_resource_version, q.observed_resource_version)
   WHERE q.service_id = p_id;
  -- what the worker waits for (finalizers, a paused DPUService) or last failed
  -- on is shown to operators; written only when it changed
  IF o = 'retry' OR (o = 'poll' AND v_message IS NOT NULL) THEN
    UPDATE extsvc.service_records x
       SET status_message = v_message, updated_at = now()
     WHERE x.service_id = s.service_id AND x.status_message IS DISTINCT FROM v_message;
  END IF;
END
$fn$;

-- The DPU queue ------------------------------------------------------------

-- What a worker needs for one DPU: its names, the label keys it should carry
-- and every attachment or site-wide service to observe on it (items; each
-- {kind, instance_id, service_id, version, label_key, dpf_service_name,
-- applied_revision, wanted}).
CREATE FUNCTION extsvc._dpu_work(p_id text, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'dpu_machine_id', d.machine_id, 'device_name', d.dpu_device_name,
           'node_name', d.dpu_node_name, 'deregistered', d.deregistered_at IS NOT NULL,
           'attempts', p_attempts,
           'wanted_keys', CASE WHEN d.deregistered_at IS NOT NULL THEN '[]'::jsonb
             ELSE coalesce((SELECT jsonb_agg(DISTINCT w.label_key ORDER BY w.label_key)
                              FROM extsvc.dpu_desired_labels w WHERE w.dpu_machine_id = p_id),
                           '[]'::jsonb) END,
           'items', coalesce((
             SELECT jsonb_agg(x) FROM (
               SELECT jsonb_build_object('kind', 'attachment', 'instance_id', a.instance_id,
                        'service_id', a.service_id, 'version', a.version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', a.placement_state = 'ACTIVE' AND d.deregistered_at IS NULL) AS x
                 FROM extsvc.dpf_extension_service_attachments a
                 JOIN extsvc.service_records s USING (service_id)
                WHERE a.dpu_machine_id = p_id
               UNION ALL
               SELECT jsonb_build_object('kind', 'site', 'instance_id', NULL, 'service_id', s.service_id,
                        'version', s.attachable_version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', d.deregistered_at IS NULL
                                  AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
                 FROM extsvc.service_records s
                WHERE s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
                  AND (extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                       OR s.lifecycle_state = 'DELETING'
                       OR EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                                   WHERE x.service_id = s.service_id AND x.dpu_machine_id = p_id
                                     AND x.deployment_state <> 'TERMINATED'))
             ) items), '[]'::jsonb))
    INTO v_work
    FROM extsvc.dpus d
   WHERE d.machine_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a DPU outcome: outcome.outcome 'observed' (results is an array of
-- {kind, instance_id, service_id, version, state, message}) or 'retry'.
CREATE FUNCTION extsvc._complete_dpu(p_id text, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  r jsonb;
  v_final boolean;
  v_inst uuid;
  v_outcome text := p_outcome->>'outcome';
  v_results jsonb := coalesce(nullif(p_outcome->'results', 'null'::jsonb), '[]'::jsonb);
  v_message text := p_outcome->>'message';
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_observation jsonb := nullif(p_outcome->'observation', 'null'::jsonb);
  v_keep_polling boolean := coalesce((p_outcome->>'keep_polling')::boolean, false);
  -- when the evidence was observed: now, or the moment a watch cache that has
  -- lost its stream was last current (issue 11)
  v_observed_at timestamptz := coalesce(to_timestamp((p_outcome->>'observed_at')::double precision), now());
  -- from the watch caches: a change wakes the DPU, no polling while converging
  v_watched boolean := coalesce((p_outcome->>'watched')::boolean, false);
  -- the pods of our services no row of this DPU explains (issue 23, part 2);
  -- absent: the pass did not observe the pods
  v_strays jsonb := nullif(p_outcome->'strays', 'null'::jsonb);
BEGIN
  IF v_outcome = 'retry' THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, attempts = x.attempts + 1,
           next_due_at = now() + extsvc._backoff(x.attempts + 1, v_retry_after),
           last_error = v_message, last_error_at = now(),
           last_http_status = v_http_status
     WHERE x.dpu_machine_id = p_id;
    RETURN;
  ELSIF v_outcome <> 'observed' THEN
    PERFORM extsvc._raise('22023', 'unknown DPU reconciliation outcome',
                          format('outcome.outcome: %s', extsvc._token(v_outcome)), 'Use observed or retry.');
  END IF;

  -- evidence older than the staleness bound proves nothing: the rows keep
  -- their older observation, which readers already see as UNKNOWN
  IF v_observed_at < now() - extsvc._observation_max_age() THEN
    v_results := '[]'::jsonb;
  END IF;

  -- Lock order between passes (issue 13; docs/reliability.md): the
  -- instances this pass may clean up, in instance_id order, before any
  -- attachment row. A cleanup deletes an instance's converged REMOVING rows
  -- on every DPU, so a pass on another DPU that held the instance and waited
  -- for a row this pass had just written, while this pass waited for the
  -- instance, deadlocked (40P01; test/nico/race_dpu_completion.py,
  -- two_passes). The set cannot grow meanwhile: a row turns REMOVING only
  -- under this DPU's work row, which the pass holds.
  PERFORM FROM extsvc.instances i
   WHERE i.instance_id IN (SELECT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                            WHERE a.dpu_machine_id = p_id AND a.placement_state = 'REMOVING')
   ORDER BY i.instance_id
   FOR UPDATE OF i;

  FOR r IN SELECT value FROM jsonb_array_elements(v_results) LOOP
    IF r->>'kind' = 'attachment' THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = r->>'state', status_message = r->>'message', observed_at = v_observed_at,
             observed_config_version = (SELECT i.config_version FROM extsvc.instances i WHERE i.instance_id = a.instance_id),
             updated_at = CASE WHEN a.deployment_state IS DISTINCT FROM r->>'state' THEN now() ELSE a.updated_at END
       WHERE a.instance_id = (r->>'instance_id')::uuid AND a.dpu_machine_id = p_id
         AND a.service_id = (r->>'service_id')::uuid AND a.version = r->>'version';
    ELSIF r->>'kind' = 'site' THEN
      INSERT INTO extsvc.site_service_dpu_status AS x (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
      VALUES ((r->>'service_id')::uuid, p_id, r->>'state', r->>'message', v_observed_at)
      ON CONFLICT ON CONSTRAINT site_service_dpu_status_pkey DO UPDATE
        SET deployment_state = EXCLUDED.deployment_state, status_message = EXCLUDED.status_message,
            observed_at = EXCLUDED.observed_at;
      -- a site service waiting to be deleted re-checks once a DPU is clean.
      -- The report is new evidence, not a failed attempt: the backoff starts
      -- over (else every DPU's report adds a poll to attempts, and the wait
      -- for DPF's finalizers after the DELETE grows to retry_cap), and a pass
      -- in flight, whose placement_clear was computed before this report,
      -- ends stale and the row is due again at once (else its poll outcome
      -- would overwrite this wake with a backoff).
      IF r->>'state' = 'TERMINATED' THEN
        UPDATE extsvc.dpf_extension_service_reconciliations x
           SET next_due_at = now(), attempts = 0, state_version = x.state_version + 1
         WHERE x.service_id = (r->>'service_id')::uuid
           AND EXISTS (SELECT FROM extsvc.service_records s
                        WHERE s.service_id = x.service_id AND s.lifecycle_state = 'DELETING');
        PERFORM extsvc._wake();
      END IF;
    END IF;
  END LOOP;

  IF v_strays IS NOT NULL AND v_observed_at >= now() - extsvc._observation_max_age() THEN
    PERFORM extsvc._record_stray_pods(p_id, v_strays);
  END IF;

  FOR v_inst IN SELECT DISTINCT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                 WHERE a.dpu_machine_id = p_id AND a.placement_state = 'REMOVING'
                 ORDER BY a.instance_id LOOP
    PERFORM extsvc._cleanup_instance(v_inst);
  END LOOP;

  -- converged: every wanted row RUNNING and nothing left to remove
  v_final := NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                          WHERE a.dpu_machine_id = p_id
                            AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          JOIN extsvc.service_records s USING (service_id)
                          JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id
                          WHERE x.dpu_machine_id = p_id
                            AND x.deployment_state <> CASE
                                  WHEN d.deregistered_at IS NULL
                                       AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                                  THEN 'RUNNING' ELSE 'TERMINATED' END);
  UPDATE extsvc.dpu_reconciliations x
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN v_final AND NOT v_keep_polling
                         THEN 0 ELSE x.attempts + 1 END,
         -- not converged: look again soon; converged but a rollout of one of
         -- its services is still under way somewhere: look again, slower
         next_due_at = CASE
           -- rows in ERROR need a person; look again with the full backoff
           WHEN NOT v_final AND EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state = 'ERROR')
                AND NOT EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state <> 'ERROR'
                     AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
             THEN now() + extsvc._backoff(x.attempts + 1)
           -- converging with the watch caches: the next change wakes it
           -- (mark_dpus_due_by_names); a slow look is only a safety net
           -- (unless the pass could not conclude: keep_polling)
           WHEN NOT v_final AND v_watched AND NOT v_keep_polling THEN now() + interval '60 seconds'
           -- converging (labels propagating, pods starting): poll briskly,
           -- 200 ms more per unchanged pass, at most every 5 s
           WHEN NOT v_final THEN now() + least(interval '200 milliseconds' * (x.attempts + 1), interval '5 seconds')
           WHEN v_keep_polling
             THEN now() + least(extsvc._backoff(x.attempts + 1), interval '30 seconds')
           ELSE NULL END,
         last_error = v_message,
         last_error_at = CASE WHEN v_message IS NULL THEN NULL ELSE now() END,
         last_http_status = v_http_status,
         last_observed_at = v_observed_at,
         observation = coalesce(v_observation, x.observation)
   WHERE x.dpu_machine_id = p_id;
  -- site statuses of DPUs that no longer exist in the desired set are moot
  DELETE FROM extsvc.site_service_dpu_status x
   USING extsvc.service_records s
   WHERE x.dpu_machine_id = p_id AND s.service_id = x.service_id
     AND s.lifecycle_state = 'DELETED';
END
$fn$;
