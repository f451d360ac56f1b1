-- Issue 25: one writer per site. The database's identity (recorded at
-- install, dumped, confirmed by an admin after a restore), the registry of
-- placement keys (registered with the service's key, kept past purge_deleted
-- until no DPU carries the key), the orphan guard's pending list and its
-- confirmation, the label census, and who may call what.
BEGIN;
\ir helpers.psql
SELECT plan(60);

SET LOCAL extsvc.enforce_chart_allowlist = off;
SET LOCAL client_min_messages = warning;

\set chart '{"repoURL":"oci://registry.example.com/charts","chartName":"svc","chartVersion":"1.0.0","security":{"privileged":false}}'
\set S '''5a000000-0000-0000-0000-000000000001'''
\set P '''5a000000-0000-0000-0000-000000000002'''
\set D '''fm100ds00000000000000000000000000005de100000000000000000000'''
\set H '''fm100hs00000000000000000000000000005ce100000000000000000000'''
\set I '''51000000-0000-0000-0000-000000000001'''

CREATE ROLE extsvc_site_tenant LOGIN IN ROLE extsvc_api;
CREATE ROLE extsvc_site_operator LOGIN IN ROLE extsvc_admin;

------------------------------------------------------------------ database identity
SELECT is((SELECT count(*)::integer FROM extsvc.database_identity), 1, 'one identity recorded at install');
SELECT is((SELECT ARRAY[i.system_identifier::text, i.database_oid::text, i.database_name, i.origin]
             FROM extsvc.database_identity i),
          (SELECT ARRAY[c.system_identifier::text, d.oid::text, d.datname, 'install']
             FROM pg_control_system() c, pg_database d WHERE d.datname = current_database()),
          'it is this cluster''s system identifier and this database''s oid');
SELECT ok((SELECT matches FROM extsvc.database_identity_status()), 'the worker''s check: it matches');
SELECT ok(EXISTS (SELECT FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'nico_extsvc'
                   AND c = 'extsvc.database_identity'::regclass),
          'registered for pg_dump: a restored copy carries the original''s identity');
-- what pg_restore makes: the restore's own install row and the original's row
INSERT INTO extsvc.database_identity (system_identifier, database_oid, database_name, origin, recorded_at)
VALUES (1234567890123456789, 424242, 'nico_prod', 'install', now() - interval '1 year');
SELECT ok(NOT (SELECT matches FROM extsvc.database_identity_status()), 'a second identity: it does not match');
SELECT matches((SELECT recorded FROM extsvc.database_identity_status()),
               'system identifier 1234567890123456789, database nico_prod \(oid 424242, install',
               'the status names the recorded identity');
SELECT matches((SELECT current_identity FROM extsvc.database_identity_status()),
               '^system identifier -?[0-9]+, database ', 'and the current one');
SELECT is(pg_temp.diag_as('extsvc_site_tenant', 'SELECT extsvc.confirm_database_identity()', 'sqlstate'), '42501',
          'extsvc_api may not confirm the identity');
SELECT is(pg_temp.diag_as('extsvc_site_operator', 'SELECT extsvc.confirm_database_identity()', 'sqlstate'), 'ok',
          'extsvc_admin may');
SELECT ok((SELECT matches FROM extsvc.database_identity_status()), 'after the confirmation it matches');
SELECT is((SELECT array_agg(origin) FROM extsvc.database_identity), ARRAY['confirmed'],
          'only the current identity stays, marked confirmed');
SELECT is((SELECT recorded_by FROM extsvc.database_identity), 'extsvc_site_operator', 'recorded by the confirming role');
-- a database with nothing recorded (the table emptied by hand) does not match either
DELETE FROM extsvc.database_identity;
SELECT ok(NOT (SELECT matches FROM extsvc.database_identity_status()), 'nothing recorded: no match');
SELECT matches(extsvc.confirm_database_identity(), '^confirmed: .*; before: nothing recorded$',
               'confirm reports what was recorded before');

------------------------------------------------------------------ placement-key registry
-- the registry starts empty here: cas.sql commits services through dblink and
-- removes them at its end, and their keys stay registered (as they must: the
-- registry outlives purge); this transaction is rolled back
DELETE FROM extsvc.placement_keys;
SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'site-svc', 'DPF_HELM_CHART', %L, dpu_target => 'ALL',
                                                      service_id => %L)$$, :'chart', :S), 'fixture: a DPF service');
SELECT lives_ok($$SELECT extsvc.create_service('t1', 'site-pod', 'KUBERNETES_POD', 'kind: Pod')$$, 'and a pod service');
SELECT is((SELECT array_agg(label_key) FROM extsvc.placement_keys WHERE service_id = :S),
          (SELECT ARRAY[placement_label_key] FROM extsvc.service_records WHERE service_id = :S),
          'the DPF service''s key is registered in the transaction that gives it the key');
SELECT is((SELECT count(*)::integer FROM extsvc.placement_keys), 1, 'a pod service has no key');
SELECT ok(EXISTS (SELECT FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'nico_extsvc'
                   AND c = 'extsvc.placement_keys'::regclass), 'the registry is dumped');
SELECT is(extsvc.placement_key_registry_version() = extsvc.placement_key_registry_version(), true,
          'the fingerprint is stable');
SELECT is(ARRAY(SELECT extsvc.placement_key_registry()),
          ARRAY(SELECT label_key FROM extsvc.placement_keys ORDER BY 1), 'the worker reads every key');
-- deleted, then purged: the key stays registered (marked) until no DPU carries it
SELECT lives_ok(format($$SELECT extsvc.delete_service(%L)$$, :S), 'delete');
UPDATE extsvc.service_records SET lifecycle_state = 'DELETED', state_actor = 'worker',
       state_reason = 'dpuservice_deleted', deleted_at = now() - interval '2 days' WHERE service_id = :S;
CREATE TEMP TABLE v AS SELECT extsvc.placement_key_registry_version() AS before;
SELECT is((SELECT count(*)::integer FROM extsvc.purge_deleted(interval '1 day') p WHERE p.service_id = :S), 1, 'purged');
SELECT ok((SELECT service_purged_at IS NOT NULL FROM extsvc.placement_keys WHERE service_id = :S),
          'the purged service''s key stays registered, marked');
SELECT is(extsvc.forget_placement_keys((SELECT ARRAY[label_key] FROM extsvc.placement_keys WHERE service_id = :S)), 0,
          'a census that still saw it on a DPU keeps it');
SELECT is(extsvc.forget_placement_keys('{}'), 1, 'a census that saw it nowhere forgets it');
SELECT ok(extsvc.placement_key_registry_version() <> (SELECT before FROM v), 'and the fingerprint changes');

------------------------------------------------------------------ the label census
SELECT lives_ok(format($$SELECT extsvc.create_service('t1', 'site-att', 'DPF_HELM_CHART', %L, dpu_target => 'PRIMARY',
                                                      service_id => %L)$$, :'chart', :P), 'fixture: another service');
UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', state_reason = 'dpuservice_created',
       applied_revision = 1 WHERE service_id = :P;
SELECT lives_ok(format($$SELECT extsvc.register_dpu(%L, %L, 'site-dpu', 'site-node', true)$$, :D, :H), 'a DPU');
SELECT lives_ok(format($$SELECT extsvc.upsert_instance(%L, 't1', %L)$$, :I, :H), 'an instance');
SELECT lives_ok(format($$SELECT extsvc.set_instance_extension_services(%L, jsonb_build_array(jsonb_build_object(
                          'service_id', %L, 'version', (SELECT version FROM extsvc.services WHERE service_id = %L))))$$,
                       :I, :P, :P), 'attached');
CREATE TEMP TABLE k AS SELECT placement_label_key AS key FROM extsvc.service_records WHERE service_id = :P;
SELECT is((SELECT ARRAY[wanted, explained] FROM extsvc.dpu_label_census() WHERE device_name = 'site-dpu'),
          (SELECT ARRAY[ARRAY[key], ARRAY[key]] FROM k), 'attached: wanted and named');
SELECT lives_ok(format($$SELECT extsvc.set_instance_extension_services(%L, '[]')$$, :I), 'detached');
SELECT is((SELECT wanted FROM extsvc.dpu_label_census() WHERE device_name = 'site-dpu'), ARRAY[]::text[],
          'detached: no longer wanted');
SELECT is((SELECT explained FROM extsvc.dpu_label_census() WHERE device_name = 'site-dpu'),
          (SELECT ARRAY[key] FROM k),
          'still named (its removal is explicit, not derived from absence)');
SELECT is(extsvc.live_service_count(), 1::bigint, 'live DPF services: 1 (the purged and the pod service do not count)');

------------------------------------------------------------------ the orphan guard's pending list
SELECT is((SELECT count(*)::integer FROM extsvc.record_pending_orphans('dpuservice',
             '[{"name":"extsvc-a","uid":"u1","detail":"s1"},{"name":"extsvc-b","uid":"u2"}]')), 0,
          'a census holds two back: none confirmed yet');
SELECT is(pg_temp.diag_as('extsvc_site_tenant', 'SELECT extsvc.confirm_orphan_cleanup()', 'sqlstate'), '42501',
          'extsvc_api may not confirm');
SELECT is(extsvc.confirm_orphan_cleanup(), 2, 'an admin confirms both');
SELECT is(ARRAY(SELECT name || '/' || uid FROM extsvc.record_pending_orphans('dpuservice',
             '[{"name":"extsvc-a","uid":"u1"},{"name":"extsvc-b","uid":"u3"}]')),
          ARRAY['extsvc-a/u1'], 'the next census gets the confirmed one back; extsvc-b is another object now (uid)');
SELECT is((SELECT confirmed_at IS NULL FROM extsvc.pending_orphans WHERE name = 'extsvc-b'), true,
          'and its confirmation is gone');
SELECT is((SELECT count(*)::integer FROM extsvc.record_pending_orphans('dpuservice', '[]')), 0, 'a clean census');
SELECT is((SELECT count(*)::integer FROM extsvc.pending_orphans), 0, 'empties the list');
SELECT throws_ok($$SELECT extsvc.record_pending_orphans('widgets', '[]')$$, '22023', 'unknown kind of pending orphan',
                 'an unknown kind is refused');

------------------------------------------------------------------ keys of orphaned DPUServices of this site
-- A deposed primary's last window can leave a DPUService of this site and its
-- key on DPUs for a service this database never saw; deleting that orphan
-- registers its key (the same hash as its name), so the passes may remove it.
-- Another site's or an unlabelled object's key, a live service's, or a
-- malformed entry registers nothing.
\set O '''5a000000-0000-0000-0000-0000000000f1'''
\set X '''5a000000-0000-0000-0000-0000000000f2'''
\set V '''V1-T1700000000000000'''
CREATE TEMP TABLE o AS SELECT extsvc._dpf_service_name(:O, :V) AS name, extsvc.placement_label_key(:O, :V) AS key,
                              extsvc._dpf_service_name(:X, :V) AS xname, extsvc.placement_label_key(:X, :V) AS xkey;
SELECT is((SELECT 'nico/' || name FROM o), (SELECT key FROM o), 'an orphan''s key is nico/ and its DPUService name');
SELECT is(extsvc.register_orphan_placement_keys('site-a', (SELECT jsonb_build_array(
             jsonb_build_object('name', xname, 'service_id', :X, 'site', 'site-b'),
             jsonb_build_object('name', xname, 'service_id', :X)) FROM o)), 0,
          'an orphan of another site, or without the site label: nothing registered');
SELECT is((SELECT count(*)::integer FROM extsvc.placement_keys, o WHERE label_key = xkey), 0,
          'so its key stays unregistered (a pass never removes it)');
SELECT is(extsvc.register_orphan_placement_keys('site-a', (SELECT jsonb_build_array(
             jsonb_build_object('name', s.dpf_service_name, 'service_id', :P, 'site', 'site-a'))
             FROM extsvc.service_records s WHERE s.service_id = :P)), 0,
          'the DPUService of a live service is no orphan: nothing registered');
SELECT is((SELECT ARRAY[origin, (service_purged_at IS NULL)::text] FROM extsvc.placement_keys WHERE service_id = :P),
          ARRAY['service', 'true'], 'and its key stays as the service registered it');
SELECT is(extsvc.register_orphan_placement_keys('site-a', (SELECT jsonb_build_array(
             jsonb_build_object('name', 'extsvc-x', 'service_id', :O, 'site', 'site-a'),
             jsonb_build_object('name', name, 'service_id', 'not-a-uuid', 'site', 'site-a'),
             '"extsvc-abc"'::jsonb) FROM o)), 0,
          'a name that is not extsvc-<hash>, a service id that is not a UUID, a non-object: nothing registered');
SELECT is(extsvc.register_orphan_placement_keys('site-a', (SELECT jsonb_build_array(
             jsonb_build_object('name', name, 'service_id', :O, 'site', 'site-a')) FROM o)), 1,
          'an orphan of this site: its key is registered');
SELECT is((SELECT ARRAY[k.origin, k.service_id::text, (k.service_purged_at IS NOT NULL)::text]
             FROM extsvc.placement_keys k, o WHERE k.label_key = o.key),
          ARRAY['orphan', :O, 'true'], 'as an orphan''s, of its service id, purged (forgotten once on no DPU)');
SELECT ok((SELECT key FROM o) = ANY (ARRAY(SELECT extsvc.placement_key_registry())),
          'the worker''s passes read it as this site''s');
SELECT is((SELECT o.key = ANY (c.explained) FROM extsvc.dpu_label_census() c, o WHERE c.device_name = 'site-dpu'),
          false, 'nothing names it: on a DPU it is a derived removal (within the orphan guard)');
SELECT is(extsvc.register_orphan_placement_keys('site-a', (SELECT jsonb_build_array(
             jsonb_build_object('name', name, 'service_id', :O, 'site', 'site-a')) FROM o)), 0,
          'registering it again changes nothing');
SELECT is(extsvc.forget_placement_keys((SELECT ARRAY[key] FROM o)), 0, 'a census that saw it on a DPU keeps it');
SELECT is(extsvc.forget_placement_keys('{}'), 1, 'one that saw it nowhere forgets it');
SELECT throws_ok($$SELECT extsvc.register_orphan_placement_keys('site-a', '{}')$$, '22023',
                 'orphans must be a JSON array', 'orphans that are not an array are refused');
SELECT throws_ok($$SELECT extsvc.register_orphan_placement_keys('', '[]')$$, '22023',
                 'no site to register orphaned placement keys for', 'an empty site is refused');
SELECT is(split_part(pg_temp.as_user('extsvc_site_tenant', $$SELECT extsvc.register_orphan_placement_keys('site-a', '[]')$$), ':', 1),
          '42501', 'extsvc_api may not register keys');

SELECT * FROM finish();
ROLLBACK;
