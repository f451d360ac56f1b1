-- SPEC 2.5, 2.7, 2.8 / issue #15: the per-DPU state machines (attachment
-- placement_state, attachment deployment_state, ALL_DPUS per-DPU state) are
-- enforced by extsvc.placement_transitions. Every combination of from state,
-- to state, actor and context is driven through the triggers: the listed
-- ones are accepted and recorded in extsvc.dpu_state_history with actor and
-- reason, every other one is refused with 55000 and a DETAIL naming
-- from/to/actor. Then: every listed row was exercised, the staleness bound
-- (no worker: readiness false after extsvc.observation_max_age; persisted by
-- the resync), the bulk paths, the history bound and its reader.
BEGIN;
\ir helpers.psql
SET LOCAL client_min_messages = warning;

------------------------------------------------------------------ fixtures
-- A fresh NICo MachineId of a kind (d: DPU, h: host), as machine ids are
-- since 0.3.0: the 32 hex digits of a random uuid padded with base32 zeros.
CREATE FUNCTION pg_temp.mid(p_kind text) RETURNS text LANGUAGE sql AS $$
  SELECT 'fm100' || p_kind || 's' || replace(gen_random_uuid()::text, '-', '') || repeat('0', 20)
$$;
-- One DPF service S (INSTANCE_DPUS, READY, version V1-T1) and three ALL_DPUS
-- services: W (READY: wanted), WD (DELETING: not wanted), WX (DELETED).
CREATE FUNCTION pg_temp.svc(p_id uuid, p_scope text, p_state text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  SET LOCAL session_replication_role = replica;
  INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, service_type,
      deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason, attachable_version, desired_revision,
      applied_revision, dpf_service_name, placement_label_key, deleted_at)
  VALUES (p_id, 'tenant-trans', 'svc-' || p_id, 'DPF_HELM_CHART', p_scope,
      CASE WHEN p_scope = 'INSTANCE_DPUS' THEN 'ALL' END, p_state, 'api', 'setup', 'V1-T1', 1, 1,
      extsvc._dpf_service_name(p_id, 'V1-T1'), extsvc._placement_label_key(p_id, 'V1-T1'),
      CASE WHEN p_state = 'DELETED' THEN now() END);
  INSERT INTO extsvc.service_versions (service_id, version, version_number) VALUES (p_id, 'V1-T1', 1);
  SET LOCAL session_replication_role = origin;
END $$;
SELECT pg_temp.svc('a5000000-0000-0000-0000-000000000001', 'INSTANCE_DPUS', 'READY');
SELECT pg_temp.svc('a5000000-0000-0000-0000-000000000002', 'ALL_DPUS', 'READY');
SELECT pg_temp.svc('a5000000-0000-0000-0000-000000000003', 'ALL_DPUS', 'DELETING');
SELECT pg_temp.svc('a5000000-0000-0000-0000-000000000004', 'ALL_DPUS', 'DELETED');
CREATE SEQUENCE pg_temp.n;

-- A fresh DPU, instance, entry and (p_placement not NULL) attachment row,
-- written with the triggers off. ctx: live | detached (entry removed) |
-- deleting (instance being deleted) | deregistered (DPU deregistered) |
-- released (another instance's ACTIVE row wants the same label).
CREATE FUNCTION pg_temp.att(p_ctx text, p_placement text, p_state text, p_observed_at timestamptz,
                            OUT instance_id uuid, OUT dpu text) LANGUAGE plpgsql AS $$
DECLARE
  k bigint := nextval('pg_temp.n');
  s uuid := 'a5000000-0000-0000-0000-000000000001';
BEGIN
  instance_id := gen_random_uuid();
  dpu := pg_temp.mid('d');
  SET LOCAL session_replication_role = replica;
  INSERT INTO extsvc.dpus (machine_id, host_machine_id, dpu_device_name, dpu_node_name, deregistered_at)
  VALUES (dpu, pg_temp.mid('h'), 'tr-dev-' || k, 'tr-node-' || k, CASE WHEN p_ctx = 'deregistered' THEN now() END);
  INSERT INTO extsvc.instances (instance_id, tenant_organization_id, host_machine_id, delete_requested_at)
  VALUES (instance_id, 'tenant-trans', pg_temp.mid('h'), CASE WHEN p_ctx = 'deleting' THEN now() END);
  INSERT INTO extsvc.instance_extension_services (instance_id, service_id, version, removed_at)
  VALUES (instance_id, s, 'V1-T1', CASE WHEN p_ctx IN ('detached', 'deleting') THEN now() END);
  IF p_placement IS NOT NULL THEN
    INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version,
        placement_state, deployment_state, observed_at)
    VALUES (instance_id, dpu, s, 'V1-T1', p_placement, p_state, p_observed_at);
  END IF;
  IF p_ctx = 'released' THEN
    INSERT INTO extsvc.instances (instance_id, tenant_organization_id, host_machine_id)
    VALUES (('a5100000-0000-0000-0000-' || lpad(k::text, 12, '0'))::uuid, 'tenant-trans', pg_temp.mid('h'));
    INSERT INTO extsvc.instance_extension_services (instance_id, service_id, version)
    VALUES (('a5100000-0000-0000-0000-' || lpad(k::text, 12, '0'))::uuid, s, 'V1-T1');
    INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version,
        placement_state, deployment_state)
    VALUES (('a5100000-0000-0000-0000-' || lpad(k::text, 12, '0'))::uuid, dpu, s, 'V1-T1', 'ACTIVE', 'RUNNING');
  END IF;
  SET LOCAL session_replication_role = origin;
END $$;

-- Runs p_stmt (with %1$L = instance, %2$L = DPU) as p_actor; returns the
-- newest history row of p_machine for the row ('from>to/actor/reason'), or
-- 'SQLSTATE | DETAIL' when refused.
CREATE FUNCTION pg_temp.move(p_machine text, p_actor text, p_stmt text, p_instance uuid, p_dpu text,
                             p_service uuid DEFAULT 'a5000000-0000-0000-0000-000000000001') RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v text;
  v_state text;
  v_detail text;
BEGIN
  PERFORM set_config('nico_extsvc.actor', p_actor, true);
  BEGIN
    EXECUTE format(p_stmt, p_instance, p_dpu);
  EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_detail = PG_EXCEPTION_DETAIL;
    PERFORM set_config('nico_extsvc.actor', '', true);
    RETURN v_state || ' | ' || v_detail;
  END;
  PERFORM set_config('nico_extsvc.actor', '', true);
  SELECT format('%s>%s/%s/%s', coalesce(h.from_state, '(new)'), coalesce(h.to_state, '(removed)'), h.actor, h.reason)
    INTO v FROM extsvc.dpu_state_history h
   WHERE h.machine = p_machine AND h.dpu_machine_id = p_dpu AND h.service_id = p_service
     AND h.instance_id IS NOT DISTINCT FROM p_instance
   ORDER BY h.id DESC LIMIT 1;
  RETURN coalesce(v, 'no history');
END $$;

CREATE TEMP TABLE cases (
  id serial, machine text, from_state text, to_state text, actor text, ctx text,
  reason text,        -- the reason this context must be recorded with
  prior_ok boolean,   -- the placement part of a combined change is allowed
  stmt text, result text);

CREATE FUNCTION pg_temp.listed(c cases) RETURNS boolean LANGUAGE sql AS $$
  SELECT c.prior_ok AND EXISTS (SELECT FROM extsvc.placement_transitions t
                                 WHERE t.machine = c.machine AND t.from_state IS NOT DISTINCT FROM c.from_state
                                   AND t.to_state IS NOT DISTINCT FROM c.to_state AND t.actor = c.actor
                                   AND t.reason = c.reason)
$$;

-- the evidence class of an observation (SPEC 2.8), as the docs state it
CREATE FUNCTION pg_temp.evidence(p_to text, p_wanted boolean, p_stale boolean, p_shared boolean DEFAULT false)
RETURNS text LANGUAGE sql AS $$
  SELECT CASE
    WHEN p_to IN ('RUNNING', 'PENDING') AND NOT p_wanted AND p_shared THEN 'label_held_by_other'
    WHEN p_to = 'UNKNOWN' THEN CASE WHEN p_stale THEN 'observation_stale' ELSE 'not_observable' END
    WHEN p_to = 'ERROR' THEN 'non_transient_failure'
    WHEN p_to = 'RUNNING' THEN CASE WHEN p_wanted THEN 'running_observed' ELSE 'running_unwanted' END
    WHEN p_to = 'PENDING' THEN CASE WHEN p_wanted THEN 'not_running_observed' ELSE 'pending_unwanted' END
    WHEN p_to = 'TERMINATING' THEN CASE WHEN p_wanted THEN 'terminating_wanted' ELSE 'remnant_observed' END
    ELSE CASE WHEN p_wanted THEN 'dpu_gone' ELSE 'absence_observed' END END
$$;

------------------------------------------------------------------ placement machine
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'placement', m.f, m.t, a.actor, x.ctx,
       CASE WHEN m.t = 'ACTIVE' THEN CASE WHEN x.ctx IN ('live', 'released', 'terminated')
                                          THEN CASE WHEN m.f IS NULL THEN 'targeted' ELSE 'retargeted' END
                                          ELSE 'not_targeted' END
            WHEN m.t = 'REMOVING' THEN CASE x.ctx WHEN 'deleting' THEN 'instance_deleted' WHEN 'detached' THEN 'detached'
                                                  WHEN 'deregistered' THEN 'dpu_deregistered' ELSE 'untargeted' END
            WHEN m.f = 'ACTIVE' THEN 'still_active'
            WHEN x.ctx = 'terminated' THEN 'terminated_observed'
            WHEN x.ctx = 'released' THEN 'released'
            ELSE 'not_terminated' END,
       true, m.stmt
  FROM (VALUES
    (NULL, 'ACTIVE', $s$INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state) VALUES (%1$L, %2$L, 'a5000000-0000-0000-0000-000000000001', 'V1-T1', 'ACTIVE', 'PENDING')$s$),
    (NULL, 'REMOVING', $s$INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state) VALUES (%1$L, %2$L, 'a5000000-0000-0000-0000-000000000001', 'V1-T1', 'REMOVING', 'UNKNOWN')$s$),
    ('ACTIVE', 'REMOVING', $s$UPDATE extsvc.dpf_extension_service_attachments SET placement_state = 'REMOVING', deployment_state = 'UNKNOWN' WHERE instance_id = %1$L AND dpu_machine_id = %2$L$s$),
    ('REMOVING', 'ACTIVE', $s$UPDATE extsvc.dpf_extension_service_attachments SET placement_state = 'ACTIVE', deployment_state = 'PENDING' WHERE instance_id = %1$L AND dpu_machine_id = %2$L$s$),
    ('ACTIVE', NULL, $s$DELETE FROM extsvc.dpf_extension_service_attachments WHERE instance_id = %1$L AND dpu_machine_id = %2$L$s$),
    ('REMOVING', NULL, $s$DELETE FROM extsvc.dpf_extension_service_attachments WHERE instance_id = %1$L AND dpu_machine_id = %2$L$s$)
  ) m(f, t, stmt)
  CROSS JOIN (VALUES ('live'), ('detached'), ('deleting'), ('deregistered'), ('released'), ('terminated')) x(ctx)
  CROSS JOIN (VALUES ('api'), ('worker')) a(actor);

CREATE FUNCTION pg_temp.run_placement(c cases) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  SELECT * INTO r FROM pg_temp.att(CASE WHEN c.ctx = 'terminated' THEN 'live' ELSE c.ctx END, c.from_state,
                                   CASE WHEN c.ctx = 'terminated' THEN 'TERMINATED'
                                        WHEN c.from_state = 'ACTIVE' THEN 'RUNNING' ELSE 'UNKNOWN' END, now());
  RETURN pg_temp.move('placement', c.actor, c.stmt, r.instance_id, r.dpu);
END $$;
UPDATE cases c SET result = pg_temp.run_placement(c) WHERE c.machine = 'placement';

------------------------------------------------------------------ deployment machine (attachments)
-- observations: the row keeps its placement; fresh (observed_at renewed) or
-- stale (the old observation is kept and older than the bound)
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'deployment', f, t, actor, p || '/' || o, pg_temp.evidence(t, p = 'ACTIVE', o = 'stale', p = 'SHARED'), true,
       format($s$UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = %L%s WHERE instance_id = %%1$L AND dpu_machine_id = %%2$L$s$,
              t, CASE WHEN o = 'fresh' THEN ', observed_at = now()' ELSE '' END)
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) f,
       unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) t,
       unnest('{ACTIVE,REMOVING,SHARED}'::text[]) p, unnest('{fresh,stale}'::text[]) o, unnest('{api,worker}'::text[]) actor
 WHERE f <> t;
-- creation: ACTIVE (attach) or REMOVING (detach sweep) rows in any state
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'deployment', NULL, t, actor, 'create/' || p,
       CASE WHEN p = 'ACTIVE' AND t = 'PENDING' THEN 'attached' WHEN p = 'REMOVING' AND t = 'UNKNOWN' THEN 'removal_requested'
            ELSE 'placement_' || lower(p) || '_with_' || lower(t) END,
       actor = 'api',
       format($s$INSERT INTO extsvc.dpf_extension_service_attachments (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state) VALUES (%%1$L, %%2$L, 'a5000000-0000-0000-0000-000000000001', 'V1-T1', %L, %L)$s$, p, t)
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) t,
       unnest('{ACTIVE,REMOVING}'::text[]) p, unnest('{api,worker}'::text[]) actor;
-- placement changes: ACTIVE -> REMOVING (detach) and REMOVING -> ACTIVE (re-attach)
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'deployment', f, t, actor, 'to/' || p,
       CASE WHEN p = 'REMOVING' AND t = 'UNKNOWN' THEN 'removal_requested' WHEN p = 'ACTIVE' AND t = 'PENDING' THEN 'reattached'
            ELSE 'placement_' || lower(p) || '_with_' || lower(t) END,
       actor = 'api',
       format($s$UPDATE extsvc.dpf_extension_service_attachments SET placement_state = %L, deployment_state = %L WHERE instance_id = %%1$L AND dpu_machine_id = %%2$L$s$, p, t)
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) f,
       unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) t,
       unnest('{ACTIVE,REMOVING}'::text[]) p, unnest('{api,worker}'::text[]) actor
 WHERE f <> t;

CREATE FUNCTION pg_temp.run_deployment(c cases) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  SELECT * INTO r FROM pg_temp.att(
         CASE WHEN c.ctx IN ('create/REMOVING', 'to/REMOVING') THEN 'detached'
              WHEN c.ctx LIKE 'SHARED/%' THEN 'released' ELSE 'live' END,
         CASE WHEN c.ctx LIKE 'create/%' THEN NULL
              WHEN c.ctx = 'to/REMOVING' THEN 'ACTIVE' WHEN c.ctx = 'to/ACTIVE' THEN 'REMOVING'
              WHEN c.ctx LIKE 'SHARED/%' THEN 'REMOVING'
              ELSE split_part(c.ctx, '/', 1) END,
         c.from_state,
         CASE WHEN c.ctx LIKE '%/stale' THEN now() - interval '1 hour' ELSE now() - interval '1 minute' END);
  RETURN pg_temp.move('deployment', c.actor, c.stmt, r.instance_id, r.dpu);
END $$;
UPDATE cases c SET result = pg_temp.run_deployment(c) WHERE c.machine = 'deployment';

------------------------------------------------------------------ site_deployment machine (ALL_DPUS rows)
CREATE FUNCTION pg_temp.site_row(p_service uuid, p_state text, p_observed_at timestamptz) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  k bigint := nextval('pg_temp.n');
  d text := pg_temp.mid('d');
BEGIN
  SET LOCAL session_replication_role = replica;
  INSERT INTO extsvc.dpus (machine_id, host_machine_id, dpu_device_name, dpu_node_name)
  VALUES (d, pg_temp.mid('h'), 'tr-dev-' || k, 'tr-node-' || k);
  IF p_state IS NOT NULL THEN
    INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state, observed_at)
    VALUES (p_service, d, p_state, p_observed_at);
  END IF;
  SET LOCAL session_replication_role = origin;
  RETURN d;
END $$;

INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'site_deployment', f, t, actor, w || '/' || o, pg_temp.evidence(t, w = 'wanted', o = 'stale'), true,
       format($s$UPDATE extsvc.site_service_dpu_status SET deployment_state = %L%s WHERE dpu_machine_id = %%2$L$s$,
              t, CASE WHEN o = 'fresh' THEN ', observed_at = now()' ELSE '' END)
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) f,
       unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) t,
       unnest('{wanted,unwanted}'::text[]) w, unnest('{fresh,stale}'::text[]) o, unnest('{api,worker}'::text[]) actor
 WHERE f <> t;
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'site_deployment', NULL, t, actor, w || '/create', pg_temp.evidence(t, w = 'wanted', false), true,
       format($s$INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state) VALUES (%L, %%2$L, %L)$s$,
              CASE WHEN w = 'wanted' THEN 'a5000000-0000-0000-0000-000000000002' ELSE 'a5000000-0000-0000-0000-000000000003' END, t)
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) t,
       unnest('{wanted,unwanted}'::text[]) w, unnest('{api,worker}'::text[]) actor;
INSERT INTO cases (machine, from_state, to_state, actor, ctx, reason, prior_ok, stmt)
SELECT 'site_deployment', f, NULL, actor, s || '/delete',
       CASE WHEN s = 'deleted' THEN 'service_deleted' ELSE 'service_not_deleted' END, true,
       $s$DELETE FROM extsvc.site_service_dpu_status WHERE dpu_machine_id = %2$L$s$
  FROM unnest('{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}'::text[]) f,
       unnest('{deleted,wanted}'::text[]) s, unnest('{api,worker}'::text[]) actor;

CREATE FUNCTION pg_temp.run_site(c cases) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_service uuid := CASE WHEN c.ctx LIKE 'deleted/%' THEN 'a5000000-0000-0000-0000-000000000004'::uuid
                         WHEN c.ctx LIKE 'wanted/%' THEN 'a5000000-0000-0000-0000-000000000002'::uuid
                         ELSE 'a5000000-0000-0000-0000-000000000003'::uuid END;
  v_dpu text;
BEGIN
  v_dpu := pg_temp.site_row(v_service, c.from_state,
             CASE WHEN c.ctx LIKE '%/stale' THEN now() - interval '1 hour' ELSE now() - interval '1 minute' END);
  RETURN pg_temp.move('site_deployment', c.actor, c.stmt, NULL, v_dpu, v_service);
END $$;
UPDATE cases c SET result = pg_temp.run_site(c) WHERE c.machine = 'site_deployment';

------------------------------------------------------------------ the plan
SELECT plan((SELECT count(*)::integer FROM cases) + (SELECT count(*)::integer FROM extsvc.placement_transitions) + 42);

-- every combination: listed -> accepted and recorded with actor and reason;
-- otherwise -> 55000 with a DETAIL naming from, to and actor
SELECT CASE WHEN pg_temp.listed(c)
  THEN is(c.result, format('%s>%s/%s/%s', coalesce(c.from_state, '(new)'), coalesce(c.to_state, '(removed)'), c.actor, c.reason),
          format('allowed %s: %s -> %s by %s [%s]', c.machine, coalesce(c.from_state, '(new)'),
                 coalesce(c.to_state, '(removed)'), c.actor, c.ctx))
  ELSE ok(c.result LIKE '55000 | machine: %, from: %, to: %, actor: ' || c.actor || ', reason: %',
          format('refused %s: %s -> %s by %s [%s] (%s)', c.machine, coalesce(c.from_state, '(new)'),
                 coalesce(c.to_state, '(removed)'), c.actor, c.ctx, c.result)) END
  FROM cases c ORDER BY c.id;

-- every listed transition was accepted by at least one case
SELECT ok(EXISTS (SELECT FROM cases c WHERE pg_temp.listed(c) AND c.machine = t.machine
                     AND c.from_state IS NOT DISTINCT FROM t.from_state AND c.to_state IS NOT DISTINCT FROM t.to_state
                     AND c.actor = t.actor AND c.reason = t.reason
                     AND c.result = format('%s>%s/%s/%s', coalesce(c.from_state, '(new)'), coalesce(c.to_state, '(removed)'), c.actor, c.reason)),
          format('listed %s: %s -> %s by %s (%s) is exercised', t.machine, coalesce(t.from_state, '(new)'),
                 coalesce(t.to_state, '(removed)'), t.actor, t.reason))
  FROM extsvc.placement_transitions t ORDER BY t.machine, t.from_state NULLS FIRST, t.to_state NULLS LAST, t.actor, t.reason;

SELECT is((SELECT count(*)::integer FROM extsvc.placement_transitions WHERE actor = 'worker' AND machine = 'placement' AND to_state IS NOT NULL),
          0, 'the worker never changes placement (it only removes rows it observed TERMINATED or released)');
SELECT ok(NOT EXISTS (SELECT FROM extsvc.placement_transitions WHERE machine = 'placement' AND from_state = 'ACTIVE' AND to_state IS NULL),
          'an ACTIVE attachment row is never removed');
SELECT throws_like($$SELECT extsvc._refuse_transition('deployment', 'RUNNING', 'PENDING', 'api', 'bogus', 'row: x')$$,
                   '%deployment transition RUNNING -> PENDING by api (bogus) is not allowed%', 'the message names the move');

------------------------------------------------------------------ staleness (no worker runs)
SELECT is(extsvc._observation_max_age(), interval '15 min', 'observation_max_age defaults to 15min');
SET LOCAL extsvc.observation_max_age = '10min';
SELECT is(extsvc._observation_max_age(), interval '10 min', 'observation_max_age is read from the GUC');
SET LOCAL extsvc.observation_max_age = '1min';
SELECT is(extsvc._observation_max_age(), interval '10 min', 'never less than twice extsvc.resync_interval (5min)');
RESET extsvc.observation_max_age;
SET LOCAL extsvc.observation_max_age = '15min';

CREATE TEMP TABLE st AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'RUNNING', now() - interval '1 minute');
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), false,
          'fixture instance: not synced for its config_version yet');
UPDATE extsvc.dpf_extension_service_attachments SET observed_config_version = 1
 WHERE instance_id = (SELECT instance_id FROM st);
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), true, 'a fresh RUNNING observation: ready');
-- the workers stop: nobody renews observed_at
UPDATE extsvc.dpf_extension_service_attachments SET observed_at = now() - interval '14 min'
 WHERE instance_id = (SELECT instance_id FROM st);
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), true, 'within the bound: still ready');
UPDATE extsvc.dpf_extension_service_attachments SET observed_at = now() - interval '16 min'
 WHERE instance_id = (SELECT instance_id FROM st);
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), false, 'older than the bound: not ready');
SELECT is((SELECT deployment_state FROM extsvc.instance_extension_service_status((SELECT instance_id FROM st))),
          'UNKNOWN', 'status reads UNKNOWN once stale');
SELECT is((SELECT aggregate_state FROM extsvc.instance_extension_services_summary((SELECT instance_id FROM st))),
          'UNKNOWN', 'summary reads UNKNOWN once stale');
SELECT is((SELECT deployment_state FROM extsvc.dpf_extension_service_attachments WHERE instance_id = (SELECT instance_id FROM st)),
          'RUNNING', 'nothing was written by reading');
SET LOCAL extsvc.observation_max_age = '1h';
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), true, 'a larger bound: ready again');
SET LOCAL extsvc.observation_max_age = '15min';
SELECT is(extsvc._effective_deployment_state('ERROR', now() - interval '1 day'), 'ERROR', 'a stale ERROR stays ERROR');
SELECT is(extsvc._effective_deployment_state('PENDING', NULL), 'PENDING', 'a never observed row keeps its state');

-- the resync persists it (actor worker, reason observation_stale)
SELECT cmp_ok(extsvc.mark_dpus_due(), '>', 0, 'the resync runs');
SELECT is((SELECT deployment_state || ' / ' || (status_message LIKE 'last observation at % is older than extsvc.observation_max_age%')
             FROM extsvc.dpf_extension_service_attachments WHERE instance_id = (SELECT instance_id FROM st)),
          'UNKNOWN / true', 'the resync persisted UNKNOWN with the reason in status_message');
SELECT is((SELECT format('%s>%s/%s/%s', from_state, to_state, actor, reason) FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM st))
            WHERE machine = 'deployment' ORDER BY at DESC LIMIT 1),
          'RUNNING>UNKNOWN/worker/observation_stale', 'history: RUNNING -> UNKNOWN by the worker, observation_stale');
SELECT is(extsvc.instance_extension_services_ready((SELECT instance_id FROM st)), false, 'still not ready');
-- the next observation is the truth again
CREATE TEMP TABLE st2 AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'RUNNING', now() - interval '20 min');
SELECT is(extsvc.expire_stale_observations(), 1, 'an operator run marks the other stale row');
SELECT is((SELECT format('%s>%s/%s/%s', from_state, to_state, actor, reason) FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM st2))
            WHERE machine = 'deployment' ORDER BY at DESC LIMIT 1),
          'RUNNING>UNKNOWN/api/observation_stale', 'an operator run is recorded as api');

------------------------------------------------------------------ bulk paths through the same rules
CREATE TEMP TABLE bk AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'RUNNING', now());
UPDATE extsvc.dpus SET host_machine_id = (SELECT host_machine_id FROM extsvc.instances WHERE instance_id = (SELECT instance_id FROM bk))
 WHERE machine_id = (SELECT dpu FROM bk);
SELECT lives_ok(format('SELECT extsvc.deregister_dpu(%L)', (SELECT dpu FROM bk)), 'deregister_dpu');
SELECT is((SELECT string_agg(format('%s:%s>%s/%s/%s', machine, from_state, to_state, actor, reason), ', ' ORDER BY machine DESC)
             FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM bk))),
          'placement:ACTIVE>REMOVING/api/dpu_deregistered, deployment:RUNNING>UNKNOWN/api/removal_requested',
          'a DPU that disappeared: its rows go REMOVING through the rules');
SELECT lives_ok(format('SELECT extsvc.delete_instance(%L)', (SELECT instance_id FROM bk)), 'delete_instance');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM bk))), 2,
          'instance deletion of a row already REMOVING (not TERMINATED) records nothing new');
SELECT throws_ok(format($$DELETE FROM extsvc.dpf_extension_service_attachments WHERE instance_id = %L$$, (SELECT instance_id FROM bk)),
                 '55000', NULL, 'a REMOVING row that was not observed TERMINATED cannot be deleted');

------------------------------------------------------------------ a tenant cannot claim to be the worker
CREATE ROLE extsvc_tap_trans_tenant LOGIN IN ROLE extsvc_api;
CREATE TEMP TABLE tn AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'RUNNING', now());
UPDATE extsvc.dpus SET host_machine_id = (SELECT host_machine_id FROM extsvc.instances WHERE instance_id = (SELECT instance_id FROM tn))
 WHERE machine_id = (SELECT dpu FROM tn);
GRANT SELECT ON tn TO extsvc_tap_trans_tenant;
SET SESSION AUTHORIZATION extsvc_tap_trans_tenant;
SET LOCAL nico_extsvc.actor = 'worker';
SELECT extsvc.deregister_dpu((SELECT dpu FROM tn));
SET LOCAL nico_extsvc.actor = '';
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(format('%s:%s/%s', machine, actor, reason), ', ' ORDER BY machine DESC)
             FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM tn))),
          'placement:api/dpu_deregistered, deployment:api/removal_requested',
          'a tenant session setting nico_extsvc.actor = worker still acts as api');

------------------------------------------------------------------ history: bounded, readable by extsvc_api for one instance
CREATE TEMP TABLE hb AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'PENDING', now());
SET LOCAL nico_extsvc.actor = 'worker';
DO $$
BEGIN
  FOR i IN 1..20 LOOP
    UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'RUNNING', observed_at = now()
     WHERE instance_id = (SELECT instance_id FROM hb);
    UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = 'PENDING', observed_at = now()
     WHERE instance_id = (SELECT instance_id FROM hb);
  END LOOP;
END $$;
SET LOCAL nico_extsvc.actor = '';
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM hb))), 32,
          '40 changes of one row: the newest 32 are kept');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM st))) > 0
          AND NOT EXISTS (SELECT FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM st)) h
                           WHERE h.dpu_machine_id <> (SELECT dpu FROM st)),
          true, 'the reader returns one instance''s rows only');
SELECT ok(has_function_privilege('extsvc_api', 'extsvc.instance_dpu_state_history(uuid, text)', 'EXECUTE')
          AND NOT has_table_privilege('extsvc_api', 'extsvc.dpu_state_history', 'SELECT'),
          'extsvc_api reads the history through the function only');
UPDATE extsvc.dpu_state_history SET at = now() - interval '31 days' WHERE instance_id = (SELECT instance_id FROM hb);
SELECT is(extsvc.expire_stale_observations(), 0, 'nothing else stale');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM hb))), 0,
          'history older than 30 days is pruned by the resync''s sweep');

------------------------------------------------------------------ history: evidence, no row per observation, the reader's errors
CREATE TEMP TABLE ev AS SELECT * FROM pg_temp.att('live', 'ACTIVE', 'PENDING', now());
SET LOCAL nico_extsvc.actor = 'worker';
UPDATE extsvc.dpf_extension_service_attachments
   SET status_message = 'pod ev-1 not Ready: CrashLoopBackOff', observed_at = now()
 WHERE instance_id = (SELECT instance_id FROM ev);
UPDATE extsvc.dpf_extension_service_attachments
   SET status_message = 'pod ev-1 not Ready: CrashLoopBackOff (again)', observed_at = now()
 WHERE instance_id = (SELECT instance_id FROM ev);
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM ev))), 0,
          'observing the same state again (new message, new observed_at) records no history row');
UPDATE extsvc.dpf_extension_service_attachments
   SET deployment_state = 'RUNNING', status_message = 'pod ev-2 Ready at revision 1', observed_at = now()
 WHERE instance_id = (SELECT instance_id FROM ev);
SET LOCAL nico_extsvc.actor = '';
SELECT is((SELECT format('%s>%s/%s/%s: %s', from_state, to_state, actor, reason, message)
             FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM ev))),
          'PENDING>RUNNING/worker/running_observed: pod ev-2 Ready at revision 1',
          'a change is recorded once, with the evidence that made it in message');
SELECT throws_ok(format('SELECT * FROM extsvc.instance_dpu_state_history(%L)', gen_random_uuid()),
          'P0002', NULL, 'history of an id that is neither an instance nor in the history: P0002');
SELECT throws_ok(format('SELECT * FROM extsvc.instance_dpu_state_history(%L, %L)',
                        (SELECT instance_id FROM ev), 'tenant-other'),
          '42501', NULL, 'history with another tenant''s id: 42501');
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM ev), 'tenant-trans')),
          1, 'history with the instance''s own tenant');
SET LOCAL session_replication_role = replica;
DELETE FROM extsvc.dpf_extension_service_attachments WHERE instance_id = (SELECT instance_id FROM ev);
DELETE FROM extsvc.instance_extension_services WHERE instance_id = (SELECT instance_id FROM ev);
DELETE FROM extsvc.instances WHERE instance_id = (SELECT instance_id FROM ev);
SET LOCAL session_replication_role = origin;
SELECT is((SELECT count(*)::integer FROM extsvc.instance_dpu_state_history((SELECT instance_id FROM ev))), 1,
          'a deleted instance''s history stays readable');
SELECT throws_ok(format('SELECT * FROM extsvc.instance_dpu_state_history(%L, %L)',
                        (SELECT instance_id FROM ev), 'tenant-trans'),
          '42501', NULL, 'with the tenant argument a deleted instance is refused like a foreign one');

------------------------------------------------------------------ stale site-wide rows read as UNKNOWN
CREATE TEMP TABLE m0 AS SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_site_service_dpus'
                           AND labels = '{"deployment_state": "UNKNOWN"}';
SET LOCAL session_replication_role = replica;
INSERT INTO extsvc.dpus (machine_id, host_machine_id, dpu_device_name, dpu_node_name)
VALUES ('fm100dsa520000000000000000000000000000100000000000000000000', pg_temp.mid('h'), 'tr-site-fresh', 'tr-site-fresh-node'),
       ('fm100dsa520000000000000000000000000000200000000000000000000', pg_temp.mid('h'), 'tr-site-stale', 'tr-site-stale-node');
INSERT INTO extsvc.site_service_dpu_status (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
VALUES ('a5000000-0000-0000-0000-000000000002', 'fm100dsa520000000000000000000000000000100000000000000000000', 'RUNNING', 'fresh', now()),
       ('a5000000-0000-0000-0000-000000000002', 'fm100dsa520000000000000000000000000000200000000000000000000', 'RUNNING', 'old', now() - interval '16 min');
SET LOCAL session_replication_role = origin;
SELECT is((SELECT string_agg(dpu_device_name || ':' || deployment_state, ', ' ORDER BY dpu_device_name)
             FROM extsvc.site_service_status('a5000000-0000-0000-0000-000000000002')
            WHERE dpu_device_name LIKE 'tr-site-%'),
          'tr-site-fresh:RUNNING, tr-site-stale:UNKNOWN',
          'site_service_status: an observation older than extsvc.observation_max_age reads UNKNOWN');
SELECT is((SELECT value FROM extsvc.metrics() WHERE metric = 'extsvc_site_service_dpus'
             AND labels = '{"deployment_state": "UNKNOWN"}') - (SELECT value FROM m0), 1::double precision,
          'metrics: the stale site-wide row is counted UNKNOWN (and the fresh one is not)');

SELECT * FROM finish();
ROLLBACK;
