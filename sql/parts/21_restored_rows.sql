-- Restorable by construction (issue 27) ---------------------------------------
--
-- pg_dump writes the extension's rows as COPY, and a plain pg_restore (or
-- psql replaying a --data-only dump into a fresh install) loads them table by
-- table, one transaction each, into tables that CREATE EXTENSION made with
-- their triggers. Those rows are history already: the lifecycle and placement
-- triggers take them as they are (no transition check, no second history row,
-- no wake, no new registration), and the pointers of a service at its own
-- revisions are checked at commit by the constraint triggers below rather
-- than by foreign keys, which made service_records and its revisions
-- circular. What the API may do is unchanged: no function of the extension
-- runs COPY, and only the tables' owner or a superuser may COPY into them
-- (NICo's roles hold no table privilege).

CREATE FUNCTION extsvc._restoring() RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  -- the client's statement, comments and blanks before it skipped; a trigger
  -- fired by another trigger is never a restore's own row
  RETURN pg_catalog.pg_trigger_depth() = 1
     AND pg_catalog.current_query() ~* '^(\s|--[^\n]*\n|/\*([^*]|\*+[^*/])*\*+/)*copy\s';
END
$fn$;
COMMENT ON FUNCTION extsvc._restoring() IS
  'Internal: true in a trigger fired by a row that a COPY loads (pg_restore, a --data-only dump): such a row is taken as history.';

-- SECURITY DEFINER: a deferred check runs at COMMIT as the session's role
-- (NICo's login role, which may read none of these tables), not inside the
-- API function that made the change; a foreign key's check ran as the owner.
CREATE FUNCTION extsvc._check_service_pointers() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
BEGIN
  IF extsvc._restoring() THEN RETURN NULL; END IF;
  -- checked at commit, on the row as it is then (a later statement of the
  -- transaction may have moved the pointers again); one statement, as it
  -- runs at every commit that creates or updates a service (issue 26, part 3)
  SELECT s.service_id, s.desired_revision, s.applied_revision, s.attachable_version,
         s.desired_revision IS NULL OR EXISTS (
           SELECT FROM extsvc.helm_revisions h
            WHERE h.service_id = s.service_id AND h.revision = s.desired_revision) AS desired_ok,
         s.applied_revision IS NULL OR EXISTS (
           SELECT FROM extsvc.helm_revisions h
            WHERE h.service_id = s.service_id AND h.revision = s.applied_revision) AS applied_ok,
         s.attachable_version IS NULL OR EXISTS (
           SELECT FROM extsvc.service_versions v
            WHERE v.service_id = s.service_id AND v.version = s.attachable_version) AS attachable_ok
    INTO r
    FROM extsvc.service_records s WHERE s.service_id = NEW.service_id;
  IF NOT FOUND OR (r.desired_ok AND r.applied_ok AND r.attachable_ok) THEN RETURN NULL; END IF;
  IF NOT r.desired_ok THEN
    RAISE EXCEPTION 'service % points at a desired revision that does not exist', r.service_id
      USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'desired_revision_exists',
            DETAIL = format('desired_revision = %s; extsvc.helm_revisions has no such row.', r.desired_revision),
            HINT = 'Change services through the extsvc API functions, which write the revision or version first.';
  END IF;
  IF NOT r.applied_ok THEN
    RAISE EXCEPTION 'service % points at an applied revision that does not exist', r.service_id
      USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'applied_revision_exists',
            DETAIL = format('applied_revision = %s; extsvc.helm_revisions has no such row.', r.applied_revision),
            HINT = 'Change services through the extsvc API functions, which write the revision or version first.';
  END IF;
  RAISE EXCEPTION 'service % points at an attachable version that does not exist', r.service_id
    USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'attachable_version_exists',
          DETAIL = format('attachable_version = %s; extsvc.service_versions has no such row.', r.attachable_version),
          HINT = 'Change services through the extsvc API functions, which write the revision or version first.';
END
$fn$;
COMMENT ON FUNCTION extsvc._check_service_pointers() IS
  'Internal constraint trigger: a service''s desired and applied revisions and its attachable version exist (checked at commit).';

CREATE CONSTRAINT TRIGGER service_pointers_exist
  AFTER INSERT OR UPDATE OF desired_revision, applied_revision, attachable_version
  ON extsvc.service_records DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_service_pointers();

-- The other side of the same rule: a revision or version a live service
-- points at is not removed (a cascade from the service's own deletion is:
-- the service row is gone by then).
CREATE FUNCTION extsvc._check_pointed_at() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF TG_TABLE_NAME = 'helm_revisions' THEN
    IF EXISTS (SELECT FROM extsvc.service_records s
               WHERE s.service_id = OLD.service_id
                 AND OLD.revision IN (s.desired_revision, s.applied_revision)
                 AND NOT EXISTS (SELECT FROM extsvc.helm_revisions h
                                 WHERE h.service_id = OLD.service_id AND h.revision = OLD.revision)) THEN
      RAISE EXCEPTION 'revision % of service % is still pointed at', OLD.revision, OLD.service_id
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'desired_revision_exists',
              DETAIL = format('service_id: %s, revision: %s (its desired or applied revision)', OLD.service_id, OLD.revision),
              HINT = 'A service''s desired and applied revisions stay while the service exists.';
    END IF;
  ELSIF EXISTS (SELECT FROM extsvc.service_records s
                WHERE s.service_id = OLD.service_id AND s.attachable_version = OLD.version
                  AND NOT EXISTS (SELECT FROM extsvc.service_versions v
                                  WHERE v.service_id = OLD.service_id AND v.version = OLD.version)) THEN
    RAISE EXCEPTION 'version % of service % is its attachable version', OLD.version, OLD.service_id
      USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'attachable_version_exists',
            DETAIL = format('service_id: %s, version: %s', OLD.service_id, OLD.version),
            HINT = 'The attachable version stays while the service exists.';
  END IF;
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_pointed_at() IS
  'Internal constraint trigger: a Helm revision or version that a service points at is not deleted while the service exists.';

CREATE CONSTRAINT TRIGGER helm_revision_pointed_at
  AFTER DELETE OR UPDATE OF service_id, revision ON extsvc.helm_revisions
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_pointed_at();
CREATE CONSTRAINT TRIGGER service_version_pointed_at
  AFTER DELETE OR UPDATE OF service_id, version ON extsvc.service_versions
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_pointed_at();
