-- Issue 29, item 1 (the SQL side; test/e2e/test_hostile_public.py runs the
-- worker end to end against a hostile public schema): every entry point of
-- the extension pins its search_path (pg_catalog first, pg_temp last): each
-- SECURITY DEFINER function, each function a role other than the owner may
-- execute, each trigger function and each function a view, constraint,
-- default or index calls. The internal helpers they call (executable by the
-- owner only) run on that pinned path without a SET clause of their own,
-- which cost a tenth to a sixth of an allocation's CPU (issue 26, part 3;
-- docs/security.md). The API, the worker's entry points and a superuser's
-- direct DML, called from a session whose search_path puts a hostile schema
-- before pg_catalog, never run one of its look-alike operators or functions.
BEGIN;
\ir helpers.psql
SELECT plan(6);

SET LOCAL client_min_messages = warning;
SET LOCAL extsvc.enforce_chart_allowlist = off;

SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace
                   AND p.prolang <> (SELECT l.oid FROM pg_language l WHERE l.lanname = 'c')
                   AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=pg_catalog(, .*)?, pg_temp$')
                   AND (p.prosecdef OR p.prorettype = 'trigger'::regtype OR p.proacl IS NULL
                        OR EXISTS (SELECT FROM aclexplode(p.proacl) a WHERE a.grantee <> p.proowner)
                        OR EXISTS (SELECT FROM pg_depend d
                                    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = p.oid
                                      AND d.classid <> 'pg_proc'::regclass AND d.deptype = 'n'))
                 ORDER BY 1),
          ARRAY[]::text[], 'every entry point (SECURITY DEFINER, trigger, executable by a role, called by a view, constraint, default or index) has search_path = pg_catalog, ..., pg_temp');
SELECT cmp_ok((SELECT count(*)::integer FROM pg_proc p
                WHERE p.pronamespace = 'extsvc'::regnamespace AND p.prorettype = 'trigger'::regtype
                  AND EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=pg_catalog(, .*)?, pg_temp$')),
              '>=', 5, 'the trigger functions are among the pinned entry points');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace = 'extsvc'::regnamespace
                   AND EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*\mpublic\M')
                 ORDER BY 1),
          ARRAY[]::text[], 'no function of the extension has public on its search_path');

-- 'SQLSTATE' of a failing statement, 'succeeded' otherwise; unlike the helpers
-- of helpers.psql it pins its own path: the session's path is hostile here
CREATE FUNCTION pg_temp.try_pinned(stmt text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  EXECUTE stmt;
  RETURN 'succeeded';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;

-- a hostile schema with look-alikes that record every call
CREATE SCHEMA hostile;
CREATE TABLE hostile.calls (what text);
CREATE FUNCTION hostile.hit(p_what text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN INSERT INTO hostile.calls VALUES (p_what); END $$;
DO $hostile$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['text', 'extsvc.lifecycle_state', 'extsvc.deployment_state', 'extsvc.placement_state',
                           'extsvc.state_actor', 'uuid', 'integer'] LOOP
    EXECUTE format($f$CREATE FUNCTION hostile.eq(a %1$s, b %1$s) RETURNS boolean LANGUAGE plpgsql
                      SET search_path = pg_catalog, pg_temp AS $b$ BEGIN PERFORM hostile.hit('= %1$s'); RETURN a = b; END $b$$f$, t);
    EXECUTE format('CREATE OPERATOR hostile.= (LEFTARG = %1$s, RIGHTARG = %1$s, FUNCTION = hostile.eq)', t);
    EXECUTE format($f$CREATE FUNCTION hostile.ne(a %1$s, b %1$s) RETURNS boolean LANGUAGE plpgsql
                      SET search_path = pg_catalog, pg_temp AS $b$ BEGIN PERFORM hostile.hit('<> %1$s'); RETURN a <> b; END $b$$f$, t);
    EXECUTE format('CREATE OPERATOR hostile.<> (LEFTARG = %1$s, RIGHTARG = %1$s, FUNCTION = hostile.ne)', t);
  END LOOP;
END
$hostile$;
CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('now()'); RETURN now(); END $$;
CREATE FUNCTION hostile.lower(a text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('lower()'); RETURN lower(a); END $$;
CREATE FUNCTION hostile.btrim(a text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('btrim()'); RETURN btrim(a); END $$;
CREATE FUNCTION hostile.jsonb_typeof(a jsonb) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('jsonb_typeof()'); RETURN jsonb_typeof(a); END $$;
CREATE FUNCTION hostile.current_setting(a text, b boolean) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('current_setting()'); RETURN current_setting(a, b); END $$;
CREATE FUNCTION hostile.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM hostile.hit('gen_random_uuid()'); RETURN gen_random_uuid(); END $$;

SET LOCAL search_path = hostile, pg_catalog;
SELECT now();
SELECT count(*) AS armed FROM hostile.calls \gset
TRUNCATE hostile.calls;

-- the story through the API, from this session (the test's own SQL qualifies its
-- operators: it is not what is tested)
SELECT extsvc.register_dpu('fm100ds5c50000000000000000000000000000100000000000000000000', 'fm100hs5c51000000000000000000000000000100000000000000000000', 'sp-dpu', 'sp-node', true);
SELECT extsvc.upsert_instance('5c520000-0000-0000-0000-000000000001', 'sp-t', 'fm100hs5c51000000000000000000000000000100000000000000000000');
SELECT extsvc.create_service('sp-t', 'sp-svc', 'DPF_HELM_CHART',
  '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}',
  dpu_target => 'PRIMARY', service_id => '5c530000-0000-0000-0000-000000000001');
SELECT extsvc.create_service('sp-t', 'sp-pod', 'KUBERNETES_POD', 'kind: Pod', service_id => '5c530000-0000-0000-0000-000000000002');
-- the worker's answer through its own entry points
SELECT c.id AS claimed_id, c.state_version AS sv, c.lease_token AS tok FROM extsvc.claim('service', 'tap', 10, 60) c \gset
SELECT extsvc.complete('service', :'claimed_id', :sv, :'tok',
  jsonb_build_object('outcome', 'transition', 'new_state', 'READY', 'reason', 'dpuservice_created', 'applied_revision', 1));
SELECT extsvc.update_service('5c530000-0000-0000-0000-000000000001', description => 'd');
SELECT extsvc.set_instance_extension_services('5c520000-0000-0000-0000-000000000001',
  (SELECT jsonb_build_array(jsonb_build_object('service_id', s.service_id, 'version', s.version))
     FROM extsvc.services s WHERE s.service_id OPERATOR(pg_catalog.=) '5c530000-0000-0000-0000-000000000001'));
-- a superuser's own DML fires the triggers, whose helpers run on the trigger's pinned path
UPDATE extsvc.dpf_extension_service_attachments SET deployment_state = deployment_state
 WHERE instance_id OPERATOR(pg_catalog.=) '5c520000-0000-0000-0000-000000000001'::uuid;
UPDATE extsvc.instances SET dpf_managed = dpf_managed
 WHERE instance_id OPERATOR(pg_catalog.=) '5c520000-0000-0000-0000-000000000001'::uuid;
SELECT * FROM extsvc.instance_extension_service_status('5c520000-0000-0000-0000-000000000001');
SELECT * FROM extsvc.instance_extension_services_summary('5c520000-0000-0000-0000-000000000001', 'sp-t');
SELECT extsvc.instance_extension_services_ready('5c520000-0000-0000-0000-000000000001');
SELECT * FROM extsvc.get_instance('5c520000-0000-0000-0000-000000000001');
SELECT * FROM extsvc.service_snapshots(ARRAY['5c530000-0000-0000-0000-000000000001'::uuid]);
SELECT extsvc.render_dpuservice('5c530000-0000-0000-0000-000000000001');
SELECT extsvc.set_instance_extension_services('5c520000-0000-0000-0000-000000000001', '[]');
SELECT extsvc.delete_instance('5c520000-0000-0000-0000-000000000001');
SELECT count(*) FROM extsvc.metrics();
SELECT extsvc.metrics_prometheus() IS NOT NULL;
SELECT extsvc.delete_service('5c530000-0000-0000-0000-000000000002');
SELECT pg_temp.try_pinned($$SELECT extsvc.delete_service('5c530000-0000-0000-0000-000000000001')$$);

-- refusals run through the same code
SELECT pg_temp.try_pinned($$SELECT extsvc.create_service('sp-t', 'sp-pod', 'KUBERNETES_POD', 'kind: Pod')$$);
SELECT pg_temp.try_pinned($$SELECT extsvc.retry_service('5c530000-0000-0000-0000-000000000001')$$);
SELECT pg_temp.try_pinned($$SELECT extsvc.upsert_instance('5c520000-0000-0000-0000-000000000002', 'sp t', 'fm100hs5c51000000000000000000000000000100000000000000000000')$$);

RESET search_path;
SELECT is(:armed::bigint, 1::bigint, 'the trap was armed: that session ran hostile.now()');
SELECT is(ARRAY(SELECT what FROM hostile.calls), ARRAY[]::text[], 'no hostile operator or function ran in the API calls');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = '5c530000-0000-0000-0000-000000000002'), 'DELETED',
          'the story ran');

SELECT * FROM finish();
ROLLBACK;
