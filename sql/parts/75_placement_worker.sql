-- The worker's side of placement: per-DPU claims and observations.

CREATE FUNCTION extsvc.claim_dpu_reconciliations(worker text, batch_size integer DEFAULT 32,
                                                 lease_seconds integer DEFAULT 60)
RETURNS TABLE (dpu_machine_id uuid, state_version bigint, lease_token uuid, dpu_device_name text,
               dpu_node_name text, deregistered boolean, attempts integer, wanted_keys text[], items jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT q.dpu_machine_id
      FROM extsvc.dpu_reconciliations q
     WHERE q.next_due_at <= now()
       AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())
     ORDER BY q.next_due_at
     LIMIT greatest(claim_dpu_reconciliations.batch_size, 1)
       FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE extsvc.dpu_reconciliations q
       SET lease_owner = claim_dpu_reconciliations.worker, lease_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => claim_dpu_reconciliations.lease_seconds),
           last_attempt_at = now()
      FROM due
     WHERE q.dpu_machine_id = due.dpu_machine_id
    RETURNING q.dpu_machine_id, q.state_version, q.lease_token, q.attempts
  )
  SELECT c.dpu_machine_id, c.state_version, c.lease_token, d.dpu_device_name, d.dpu_node_name,
         d.deregistered_at IS NOT NULL, c.attempts,
         CASE WHEN d.deregistered_at IS NOT NULL THEN '{}'::text[]
              ELSE coalesce((SELECT array_agg(DISTINCT w.label_key ORDER BY w.label_key)
                               FROM extsvc.dpu_desired_labels w WHERE w.dpu_machine_id = c.dpu_machine_id),
                            '{}') END,
         coalesce((
           SELECT jsonb_agg(x) FROM (
             SELECT jsonb_build_object('kind', 'attachment', 'instance_id', a.instance_id,
                      'service_id', a.service_id, 'version', a.version, 'label_key', s.placement_label_key,
                      'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                      'wanted', a.placement_state = 'ACTIVE' AND d.deregistered_at IS NULL) AS x
               FROM extsvc.dpf_extension_service_attachments a
               JOIN extsvc.service_records s USING (service_id)
              WHERE a.dpu_machine_id = c.dpu_machine_id
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
                                 WHERE x.service_id = s.service_id AND x.dpu_machine_id = c.dpu_machine_id
                                   AND x.deployment_state <> 'TERMINATED'))
           ) items), '[]'::jsonb)
    FROM claimed c
    JOIN extsvc.dpus d ON d.machine_id = c.dpu_machine_id;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_dpu_reconciliations(text, integer, integer) IS
  'Worker: lease due DPUs (FOR UPDATE SKIP LOCKED) with their wanted label keys and every attachment or site service to observe.';

-- Records one DPU pass. outcome: 'observed' (results is an array of
-- {kind, instance_id, service_id, version, state, message}) or 'retry'.
CREATE FUNCTION extsvc.complete_dpu_reconciliation(
    dpu_machine_id uuid, state_version bigint, lease_token uuid, outcome text,
    results jsonb DEFAULT '[]', message text DEFAULT NULL, http_status integer DEFAULT NULL,
    retry_after_s double precision DEFAULT NULL, observation jsonb DEFAULT NULL,
    keep_polling boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  q extsvc.dpu_reconciliations;
  r jsonb;
  v_final boolean;
  v_inst uuid;
BEGIN
  SELECT * INTO q FROM extsvc.dpu_reconciliations x
   WHERE x.dpu_machine_id = complete_dpu_reconciliation.dpu_machine_id FOR UPDATE;
  IF NOT FOUND OR q.lease_token IS DISTINCT FROM complete_dpu_reconciliation.lease_token THEN
    RETURN 'lost';
  END IF;
  IF q.state_version <> complete_dpu_reconciliation.state_version THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
     WHERE x.dpu_machine_id = q.dpu_machine_id;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;

  IF complete_dpu_reconciliation.outcome = 'retry' THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, attempts = x.attempts + 1,
           next_due_at = now() + extsvc._backoff(x.attempts + 1, complete_dpu_reconciliation.retry_after_s),
           last_error = complete_dpu_reconciliation.message, last_error_at = now(),
           last_http_status = complete_dpu_reconciliation.http_status
     WHERE x.dpu_machine_id = q.dpu_machine_id;
    RETURN 'applied';
  ELSIF complete_dpu_reconciliation.outcome <> 'observed' THEN
    PERFORM extsvc._raise('22023', 'unknown DPU reconciliation outcome',
                          format('outcome: %s', complete_dpu_reconciliation.outcome), 'Use observed or retry.');
  END IF;

  FOR r IN SELECT value FROM jsonb_array_elements(coalesce(results, '[]')) LOOP
    IF r->>'kind' = 'attachment' THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = r->>'state', status_message = r->>'message', observed_at = now(),
             observed_config_version = (SELECT i.config_version FROM extsvc.instances i WHERE i.instance_id = a.instance_id),
             updated_at = CASE WHEN a.deployment_state IS DISTINCT FROM r->>'state' THEN now() ELSE a.updated_at END
       WHERE a.instance_id = (r->>'instance_id')::uuid AND a.dpu_machine_id = q.dpu_machine_id
         AND a.service_id = (r->>'service_id')::uuid AND a.version = r->>'version';
    ELSIF r->>'kind' = 'site' THEN
      INSERT INTO extsvc.site_service_dpu_status AS x (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
      VALUES ((r->>'service_id')::uuid, q.dpu_machine_id, r->>'state', r->>'message', now())
      ON CONFLICT ON CONSTRAINT site_service_dpu_status_pkey DO UPDATE
        SET deployment_state = EXCLUDED.deployment_state, status_message = EXCLUDED.status_message,
            observed_at = now();
      -- a site service waiting to be deleted re-checks once a DPU is clean
      IF r->>'state' = 'TERMINATED' THEN
        UPDATE extsvc.dpf_extension_service_reconciliations x SET next_due_at = now()
         WHERE x.service_id = (r->>'service_id')::uuid AND x.lease_token IS NULL
           AND EXISTS (SELECT FROM extsvc.service_records s
                        WHERE s.service_id = x.service_id AND s.lifecycle_state = 'DELETING');
        PERFORM extsvc._wake();
      END IF;
    END IF;
  END LOOP;

  FOR v_inst IN SELECT DISTINCT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                 WHERE a.dpu_machine_id = q.dpu_machine_id AND a.placement_state = 'REMOVING' LOOP
    PERFORM extsvc._cleanup_instance(v_inst);
  END LOOP;

  -- converged: every wanted row RUNNING and nothing left to remove
  v_final := NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                          WHERE a.dpu_machine_id = q.dpu_machine_id
                            AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          JOIN extsvc.service_records s USING (service_id)
                          JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id
                          WHERE x.dpu_machine_id = q.dpu_machine_id
                            AND x.deployment_state <> CASE
                                  WHEN d.deregistered_at IS NULL
                                       AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                                  THEN 'RUNNING' ELSE 'TERMINATED' END);
  UPDATE extsvc.dpu_reconciliations x
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN v_final AND NOT coalesce(complete_dpu_reconciliation.keep_polling, false)
                         THEN 0 ELSE x.attempts + 1 END,
         -- not converged: look again soon; converged but a rollout of one of
         -- its services is still under way somewhere: look again, slower
         next_due_at = CASE
           -- rows in ERROR need a person; look again with the full backoff
           WHEN NOT v_final AND EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = q.dpu_machine_id AND a.deployment_state = 'ERROR')
                AND NOT EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = q.dpu_machine_id AND a.deployment_state <> 'ERROR'
                     AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
             THEN now() + extsvc._backoff(x.attempts + 1)
           -- converging (labels propagating, pods starting): poll briskly,
           -- 200 ms more per unchanged pass, at most every 5 s
           WHEN NOT v_final THEN now() + least(interval '200 milliseconds' * (x.attempts + 1), interval '5 seconds')
           WHEN coalesce(complete_dpu_reconciliation.keep_polling, false)
             THEN now() + least(extsvc._backoff(x.attempts + 1), interval '30 seconds')
           ELSE NULL END,
         last_error = complete_dpu_reconciliation.message,
         last_error_at = CASE WHEN complete_dpu_reconciliation.message IS NULL THEN NULL ELSE now() END,
         last_http_status = complete_dpu_reconciliation.http_status,
         last_observed_at = now(),
         observation = coalesce(complete_dpu_reconciliation.observation, x.observation)
   WHERE x.dpu_machine_id = q.dpu_machine_id;
  -- site statuses of DPUs that no longer exist in the desired set are moot
  DELETE FROM extsvc.site_service_dpu_status x
   USING extsvc.service_records s
   WHERE x.dpu_machine_id = q.dpu_machine_id AND s.service_id = x.service_id
     AND s.lifecycle_state = 'DELETED';
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete_dpu_reconciliation(uuid, bigint, uuid, text, jsonb, text, integer, double precision, jsonb, boolean) IS
  'Worker: record a DPU pass (per-attachment deployment states) with compare-and-swap on state_version and lease_token.';

-- Resync: every DPU is observed again (placement drift such as a label
-- removed by hand is repaired at that pass).
CREATE FUNCTION extsvc.mark_dpus_due() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  n integer;
BEGIN
  INSERT INTO extsvc.dpu_reconciliations (dpu_machine_id, next_due_at)
  SELECT d.machine_id, now() FROM extsvc.dpus d
  ON CONFLICT (dpu_machine_id) DO UPDATE SET next_due_at = coalesce(extsvc.dpu_reconciliations.next_due_at, now());
  GET DIAGNOSTICS n = ROW_COUNT;
  -- observations nobody renewed within extsvc.observation_max_age: UNKNOWN
  PERFORM extsvc.expire_stale_observations();
  RETURN n;
END
$fn$;

-- For ALL_DPUS deletion: true once every registered DPU was observed without
-- the service's label and pods after the delete was requested.
CREATE FUNCTION extsvc._site_service_cleared(p_service_id uuid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT NOT EXISTS (
    SELECT FROM extsvc.dpus d, extsvc.service_records s
     WHERE s.service_id = p_service_id AND d.deregistered_at IS NULL
       AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                        WHERE x.service_id = p_service_id AND x.dpu_machine_id = d.machine_id
                          AND x.deployment_state = 'TERMINATED'
                          AND x.observed_at >= s.delete_requested_at))
$fn$;
