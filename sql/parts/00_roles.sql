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
