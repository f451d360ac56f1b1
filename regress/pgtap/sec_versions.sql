-- Issue 29, item 2: extsvc.delete_service_versions with a NULL element
-- deleted the whole service (delete_service's "no version = every version")
-- and returned only the versions it was given, so NICo never cleaned the
-- credential of the others. NULL and empty elements are refused (22023
-- naming the position) and the result lists every version the call deleted.
BEGIN;
\ir helpers.psql
SELECT plan(15);

SET LOCAL client_min_messages = warning;

\set S '''5e000000-0000-0000-0000-000000000001'''

-- a KUBERNETES_POD service with three versions, V1 and V3 with a credential
SELECT lives_ok(format($$SELECT extsvc.create_service('sec-t', 'pod-three', 'KUBERNETES_POD', 'kind: Pod',
                          service_id => %L, has_credential => true)$$, :S), 'fixture: V1 (with a credential)');
SELECT lives_ok(format($$SELECT extsvc.update_service(%L, 'kind: Pod2')$$, :S), 'fixture: V2');
SELECT lives_ok(format($$SELECT extsvc.update_service(%L, 'kind: Pod3', has_credential => true)$$, :S), 'fixture: V3 (with a credential)');
CREATE TEMP TABLE v AS
  SELECT version_number AS n, version FROM extsvc.service_versions(:S) ORDER BY version_number;

-- NULL and empty elements are refused, with their position, and change nothing
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[%L, NULL])', :S,
                             (SELECT version FROM v WHERE n = 2))),
          '22023 | field: versions[2] is NULL',
          'a NULL element is refused with 22023 naming its position (it deleted every version)');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[NULL, %L])', :S,
                             (SELECT version FROM v WHERE n = 2))),
          '22023 | field: versions[1] is NULL', 'a NULL first element is refused too');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[%L, %L])', :S,
                             (SELECT version FROM v WHERE n = 2), '')),
          '22023 | field: versions[2] is empty', 'an empty element is refused with its position');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, ARRAY[%L, %L])', :S,
                             (SELECT version FROM v WHERE n = 2), '   ')),
          '22023 | field: versions[2] is empty', 'a blank element is refused as empty');
SELECT is(pg_temp.err(format('SELECT * FROM extsvc.delete_service_versions(%L, %L::text[])', :S, '{}')),
          '22023 | field: versions', 'an empty list is still refused');
SELECT is((SELECT array_agg(version_number ORDER BY version_number) FROM extsvc.service_versions(:S)), ARRAY[1, 2, 3],
          'the refused calls deleted no version');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :S), 'READY', 'the service is still READY');

-- the result lists exactly the versions the call deleted
SELECT is(ARRAY(SELECT row(version_number, had_credential)::text
                  FROM extsvc.delete_service_versions(:S, ARRAY[(SELECT version FROM v WHERE n = 2),
                                                                (SELECT version FROM v WHERE n = 2)])),
          ARRAY[row(2, false)::text], 'a version named twice is deleted and returned once');
SELECT is((SELECT array_agg(version_number ORDER BY version_number) FROM extsvc.service_versions(:S)), ARRAY[1, 3],
          'V1 and V3 remain');
SELECT is(ARRAY(SELECT row(version_number, had_credential)::text
                  FROM extsvc.delete_service_versions(:S, ARRAY(SELECT version FROM v WHERE n IN (1, 3)))),
          ARRAY[row(1, true)::text, row(3, true)::text],
          'deleting the last versions returns both, with their credentials');
SELECT is((SELECT lifecycle_state FROM extsvc.services WHERE service_id = :S), 'DELETED',
          'the service is DELETED once no version is left');
SELECT is((SELECT count(*)::int FROM extsvc.service_versions(:S, include_deleted => true) WHERE deleted_at IS NULL), 0,
          'every version is marked deleted');

SELECT * FROM finish();
ROLLBACK;
