-- Issue 29, item 7: two service names that look identical cannot coexist in
-- one tenant. Names are stored in Unicode NFC (PostgreSQL's normalize(),
-- UTF-8 databases), and control, zero-width, bidirectional and other
-- invisible format characters, line and paragraph separators and the
-- look-alike spaces (every space separator but U+0020) are refused with
-- 22023 naming the character and its position. Before the fix "café"
-- written precomposed and decomposed, or "agent" and "agent" with a
-- zero-width space, were two services of one tenant.
BEGIN;
\ir helpers.psql
SELECT plan(22);

SET LOCAL client_min_messages = warning;

CREATE FUNCTION pg_temp.create(p_tenant text, p_name text) RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.diag(format($f$SELECT extsvc.create_service(%L, %L, 'KUBERNETES_POD', 'kind: Pod')$f$, p_tenant, p_name), 'sqlstate', 'message', 'detail')
$$;

SELECT is(getdatabaseencoding(), 'UTF8', 'the test database is UTF-8');

-- NFC
SELECT is(pg_temp.create('nm-t', 'cafe' || chr(769)), 'ok', 'a decomposed name is accepted ...');
SELECT is((SELECT service_name FROM extsvc.services WHERE tenant_organization_id = 'nm-t'), 'caf' || chr(233),
          '... and stored in NFC');
SELECT is(split_part(pg_temp.create('nm-t', 'caf' || chr(233)), ' | ', 1), '23505',
          'the precomposed spelling is the same name (23505)');
SELECT is(split_part(pg_temp.create('nm-t', 'CAFE' || chr(769)), ' | ', 1), '23505',
          'so is another case of the decomposed spelling');
SELECT is(pg_temp.create('nm-other', 'caf' || chr(233)), 'ok', 'another tenant may use the name');

-- refused characters, named with their position
SELECT is(pg_temp.create('nm-t', 'agent' || chr(8203)),
          '22023 | service_name contains an invisible or control character | field: service_name, character U+200B at position 6',
          'a zero-width space is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'age' || chr(8204) || 'nt'), ' | ', 3), 'field: service_name, character U+200C at position 4',
          'a zero-width non-joiner is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'age' || chr(8205) || 'nt'), ' | ', 3), 'field: service_name, character U+200D at position 4',
          'a zero-width joiner is refused');
SELECT is(split_part(pg_temp.create('nm-t', chr(65279) || 'agent'), ' | ', 3), 'field: service_name, character U+FEFF at position 1',
          'a byte-order mark is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'agent' || chr(8238) || 'txt.exe'), ' | ', 3), 'field: service_name, character U+202E at position 6',
          'a right-to-left override is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(8294) || 'b'), ' | ', 3), 'field: service_name, character U+2066 at position 2',
          'a left-to-right isolate is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(8207) || 'b'), ' | ', 3), 'field: service_name, character U+200F at position 2',
          'a right-to-left mark is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(7) || 'b'), ' | ', 3), 'field: service_name, character U+0007 at position 2',
          'a control character is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(10) || 'b'), ' | ', 3), 'field: service_name, character U+000A at position 2',
          'a newline inside is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(160) || 'b'), ' | ', 3), 'field: service_name, character U+00A0 at position 2',
          'a no-break space (looks like a space) is refused');
SELECT is(split_part(pg_temp.create('nm-t', 'a' || chr(8232) || 'b'), ' | ', 3), 'field: service_name, character U+2028 at position 2',
          'a line separator is refused');
SELECT is(pg_temp.create('nm-t', '  spaced name  '), 'ok', 'ordinary spaces are fine, the ends are trimmed as before');
SELECT is((SELECT count(*)::int FROM extsvc.services WHERE tenant_organization_id = 'nm-t'), 2, 'no refused name was stored');

-- update_service: the same rules
SELECT is(split_part(pg_temp.diag(format($f$SELECT extsvc.update_service(%L, service_name => %L)$f$,
            (SELECT service_id FROM extsvc.services WHERE service_name = 'spaced name'), 'CAF' || chr(201)), 'sqlstate', 'message', 'detail'), ' | ', 1), '23505',
          'a rename to another spelling of an existing name is refused');
SELECT is(split_part(pg_temp.diag(format($f$SELECT extsvc.update_service(%L, service_name => %L)$f$,
            (SELECT service_id FROM extsvc.services WHERE service_name = 'spaced name'), 'spaced' || chr(8203) || 'name'), 'sqlstate', 'message', 'detail'), ' | ', 1), '22023',
          'a rename to a name with a zero-width space is refused');
SELECT is(pg_temp.diag(format($f$SELECT extsvc.update_service(%L, service_name => %L)$f$,
            (SELECT service_id FROM extsvc.services WHERE service_name = 'caf' || chr(233) AND tenant_organization_id = 'nm-t'),
            'cafe' || chr(769)), 'sqlstate', 'message', 'detail'), 'ok', 'passing the own name in another spelling is no rename');

SELECT * FROM finish();
ROLLBACK;
