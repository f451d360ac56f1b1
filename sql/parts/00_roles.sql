-- Install preamble: refuse a schema extsvc that someone else prepared.
-- CREATE EXTENSION creates the schema of the control file only when it is
-- missing; an existing one owned by another role (or where another role may
-- create objects) could hold objects that shadow or replace ours. An upgrade
-- runs in the extension's own schema, so it skips this check:
-- upgrade: install-only
DO $preamble$
DECLARE
  v_owner name;
  v_creators text;
BEGIN
  SELECT n.nspowner::regrole::name INTO v_owner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'extsvc';
  IF v_owner IS DISTINCT FROM current_user THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = 'schema extsvc already exists and is owned by another role',
      DETAIL = format('schema extsvc is owned by role %s; the installing role is %s.', v_owner, current_user),
      HINT = 'Drop or rename that schema (or ALTER SCHEMA extsvc OWNER TO the installing role after checking its contents), then run CREATE EXTENSION nico_extsvc again.';
  END IF;
  SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ', ')
    INTO v_creators
    FROM pg_catalog.pg_namespace n, aclexplode(n.nspacl) a
   WHERE n.nspname = 'extsvc' AND a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner;
  IF v_creators IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = 'schema extsvc already exists and other roles may create objects in it',
      DETAIL = format('CREATE on schema extsvc is granted to: %s.', v_creators),
      HINT = 'REVOKE CREATE ON SCHEMA extsvc from those roles, or drop the schema, then run CREATE EXTENSION nico_extsvc again.';
  END IF;
  IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace = 'extsvc'::regnamespace)
     OR EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'extsvc'::regnamespace)
     OR EXISTS (SELECT FROM pg_catalog.pg_type t WHERE t.typnamespace = 'extsvc'::regnamespace) THEN
    RAISE EXCEPTION USING ERRCODE = '42P06',
      MESSAGE = 'schema extsvc already exists and is not empty',
      DETAIL = 'nico_extsvc installs into a schema of its own.',
      HINT = 'Move the objects out of schema extsvc or drop it, then run CREATE EXTENSION nico_extsvc again.';
  END IF;
END
$preamble$;

-- Roles. NICo's database layer is a member of extsvc_api; operators of
-- extsvc_admin. Roles are cluster-wide, so they may already exist.
DO $roles$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'extsvc_api') THEN
    CREATE ROLE extsvc_api NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'extsvc_admin') THEN
    CREATE ROLE extsvc_admin NOLOGIN;
  END IF;
END
$roles$;

REVOKE ALL ON SCHEMA extsvc FROM PUBLIC;
GRANT USAGE ON SCHEMA extsvc TO extsvc_api, extsvc_admin;
