-- One writer per site (issue 25; SPEC 7): what the database knows about
-- itself and about what it wrote, so that a copy of it, a second site on the
-- same management cluster or a half-restored database never deletes or
-- relabels what is not its own.
--   extsvc.database_identity   the PostgreSQL system identifier and database
--                              oid recorded at install (dumped: a restored
--                              copy carries the original's and pauses)
--   extsvc.placement_keys      every placement label key this database ever
--                              wrote (only those are ever removed from a DPU)
--   extsvc.pending_orphans     deletions and label removals the orphan guard
--                              holds back until an admin confirms them
-- The worker side is src/pg/site_*.cpp and src/controller/site_lease.cpp;
-- docs/operator-guide.md, "High availability".

-- Database identity -------------------------------------------------------

-- One row per identity this database was confirmed under. A fresh install
-- records its own; pg_restore runs CREATE EXTENSION (which records the new
-- server's identity) and then restores the dumped rows (the original's):
-- two identities, so the worker pauses until an admin confirms the copy
-- (extsvc.confirm_database_identity). A promoted standby keeps the system
-- identifier and the database oid, and matches.
CREATE TABLE extsvc.database_identity (
  system_identifier bigint NOT NULL,
  database_oid      oid NOT NULL,
  database_name     text NOT NULL,
  origin            text NOT NULL CHECK (origin IN ('install', 'upgrade', 'confirmed')),
  recorded_at       timestamptz NOT NULL DEFAULT now(),
  recorded_by       text NOT NULL DEFAULT session_user,
  PRIMARY KEY (system_identifier, database_oid)
);
COMMENT ON TABLE extsvc.database_identity IS
  'The PostgreSQL system identifier and database oid this database was installed or confirmed under; any other identity makes the worker pause its writes (extsvc.confirm_database_identity).';
SELECT pg_catalog.pg_extension_config_dump('extsvc.database_identity', '');

-- upgrade: install-only
INSERT INTO extsvc.database_identity (system_identifier, database_oid, database_name, origin)
SELECT c.system_identifier, d.oid, d.datname, 'install'
  FROM pg_catalog.pg_control_system() c, pg_catalog.pg_database d
 WHERE d.datname = pg_catalog.current_database();

CREATE FUNCTION extsvc.database_identity_status(
    OUT matches boolean, OUT current_identity text, OUT recorded text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH cur AS (
    SELECT c.system_identifier, d.oid, d.datname
      FROM pg_catalog.pg_control_system() c, pg_catalog.pg_database d
     WHERE d.datname = pg_catalog.current_database())
  SELECT coalesce(bool_and(i.system_identifier = cur.system_identifier AND i.database_oid = cur.oid), false)
           AND count(i.system_identifier) > 0,
         format('system identifier %s, database %s (oid %s)', min(cur.system_identifier), min(cur.datname),
                min(cur.oid::bigint)),
         coalesce(string_agg(format('system identifier %s, database %s (oid %s, %s %s)', i.system_identifier,
                                    i.database_name, i.database_oid, i.origin,
                                    to_char(i.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                             '; ' ORDER BY i.recorded_at) FILTER (WHERE i.system_identifier IS NOT NULL),
                  'nothing recorded')
    FROM cur LEFT JOIN extsvc.database_identity i ON true
$fn$;
COMMENT ON FUNCTION extsvc.database_identity_status() IS
  'Whether this database runs under the identity it recorded (system identifier and database oid); the worker writes nothing while it does not (a restored copy, a clone, extsvc.database pointed elsewhere).';

CREATE FUNCTION extsvc.confirm_database_identity() RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_before text;
  v_sys bigint;
  v_oid oid;
  v_name text;
BEGIN
  SELECT s.recorded INTO v_before FROM extsvc.database_identity_status() s;
  SELECT c.system_identifier, d.oid, d.datname INTO v_sys, v_oid, v_name
    FROM pg_catalog.pg_control_system() c, pg_catalog.pg_database d
   WHERE d.datname = pg_catalog.current_database();
  LOCK TABLE extsvc.database_identity IN EXCLUSIVE MODE;
  DELETE FROM extsvc.database_identity i WHERE (i.system_identifier, i.database_oid) <> (v_sys, v_oid);
  INSERT INTO extsvc.database_identity AS i (system_identifier, database_oid, database_name, origin)
  VALUES (v_sys, v_oid, v_name, 'confirmed')
  ON CONFLICT (system_identifier, database_oid) DO UPDATE
     SET origin = 'confirmed', database_name = EXCLUDED.database_name, recorded_at = now(),
         recorded_by = session_user;
  PERFORM extsvc._site_wake();
  RETURN format('confirmed: system identifier %s, database %s (oid %s); before: %s', v_sys, v_name, v_oid,
                v_before);
END
$fn$;
COMMENT ON FUNCTION extsvc.confirm_database_identity() IS
  'Operator (extsvc_admin): this database is the site''s (a copy that is to take over, after a pg_upgrade or a move): records the current system identifier and database oid as its identity and lets the worker write again. Returns what was recorded before.';

-- The worker's wake for the operator functions below: sets every worker's
-- latch and asks for a resync (no-op without shared_preload_libraries).
CREATE FUNCTION extsvc._site_wake() RETURNS void
  LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_site_wake';
COMMENT ON FUNCTION extsvc._site_wake() IS
  'Internal: wakes the workers and the lease process and asks for a resync (after a confirmation).';

-- Placement-key registry -------------------------------------------------

-- Every placement label key this database ever wrote, registered in the
-- transaction that gives a service its key (before any DPU can carry it).
-- A pass removes only registered keys; a nico/extsvc-* key it never wrote
-- (another site's, a hand-made one) is left alone and reported. A key stays
-- registered past extsvc.purge_deleted (service_purged_at) until a resync
-- has seen it on no DPU.
CREATE TABLE extsvc.placement_keys (
  label_key         text PRIMARY KEY CHECK (label_key ~ '^nico/extsvc-[a-z2-7]{20}$'),
  service_id        uuid NOT NULL,
  registered_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  service_purged_at timestamptz
);
CREATE INDEX placement_keys_service ON extsvc.placement_keys (service_id);
COMMENT ON TABLE extsvc.placement_keys IS
  'Every placement label key this database wrote; only these are ever removed from a DPU. Kept past extsvc.purge_deleted until a resync saw the key on no DPU.';
SELECT pg_catalog.pg_extension_config_dump('extsvc.placement_keys', '');

CREATE FUNCTION extsvc._register_placement_key() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NEW.placement_label_key IS NOT NULL THEN
    INSERT INTO extsvc.placement_keys (label_key, service_id)
    VALUES (NEW.placement_label_key, NEW.service_id)
    ON CONFLICT (label_key) DO UPDATE SET service_purged_at = NULL
      WHERE extsvc.placement_keys.service_purged_at IS NOT NULL;
  END IF;
  RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION extsvc._register_placement_key() IS
  'Internal trigger: registers a service''s placement label key in extsvc.placement_keys.';
CREATE TRIGGER service_records_register_placement_key
  AFTER INSERT OR UPDATE OF placement_label_key ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._register_placement_key();

-- purge_deleted removes the service row; its key stays registered (marked)
-- until no DPU carries it.
CREATE FUNCTION extsvc._placement_key_purged() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.placement_keys k SET service_purged_at = now()
   WHERE k.service_id = OLD.service_id AND k.service_purged_at IS NULL;
  RETURN OLD;
END
$fn$;
COMMENT ON FUNCTION extsvc._placement_key_purged() IS
  'Internal trigger: a purged service''s placement key stays registered, marked, until no DPU carries it.';
CREATE TRIGGER service_records_placement_key_purged
  AFTER DELETE ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._placement_key_purged();

-- What the worker reads before a DPU batch: a cheap fingerprint of the
-- registry (it refetches the keys only when it changed) and the keys.
CREATE FUNCTION extsvc.placement_key_registry_version() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT count(*) || '/' || coalesce(max(k.registered_at)::text, '-') FROM extsvc.placement_keys k
$fn$;
COMMENT ON FUNCTION extsvc.placement_key_registry_version() IS
  'Worker: a fingerprint of extsvc.placement_keys that changes whenever a key is registered or forgotten.';

CREATE FUNCTION extsvc.placement_key_registry() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT k.label_key FROM extsvc.placement_keys k ORDER BY 1
$fn$;
COMMENT ON FUNCTION extsvc.placement_key_registry() IS
  'Worker: every registered placement key (the keys a DPU pass may remove).';

-- After a complete label census (every DPUDevice of this site's DPUs read):
-- a purged service's key that no DPU carries any more is forgotten.
CREATE FUNCTION extsvc.forget_placement_keys(present text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  DELETE FROM extsvc.placement_keys k
   WHERE k.service_purged_at IS NOT NULL AND NOT (k.label_key = ANY (coalesce(present, '{}')));
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.forget_placement_keys(text[]) IS
  'Worker: forgets the keys of purged services that a complete census found on no DPU; returns how many.';

-- The label census of a resync: per DPU of this database, the keys it must
-- carry and every key an item of its work names (the same items as
-- extsvc._dpu_work): a present registered key named by none is a derived
-- removal, held back by the orphan guard when too many DPUs have one.
CREATE FUNCTION extsvc.dpu_label_census()
RETURNS TABLE (device_name text, wanted text[], explained text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH site AS (
    SELECT s.service_id, s.placement_label_key, s.lifecycle_state, s.applied_revision
      FROM extsvc.service_records s
     WHERE s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
       AND s.lifecycle_state <> 'DELETED')
  SELECT d.dpu_device_name,
         coalesce((SELECT array_agg(DISTINCT w.label_key ORDER BY w.label_key) FROM extsvc.dpu_desired_labels w
                    WHERE w.dpu_machine_id = d.machine_id AND d.deregistered_at IS NULL), '{}'),
         coalesce((SELECT array_agg(DISTINCT k ORDER BY k) FROM (
                     SELECT s.placement_label_key AS k
                       FROM extsvc.dpf_extension_service_attachments a
                       JOIN extsvc.service_records s USING (service_id)
                      WHERE a.dpu_machine_id = d.machine_id
                     UNION ALL
                     SELECT x.placement_label_key FROM site x
                     UNION ALL
                     SELECT s.placement_label_key
                       FROM extsvc.site_service_dpu_status st
                       JOIN extsvc.service_records s USING (service_id)
                      WHERE st.dpu_machine_id = d.machine_id AND st.deployment_state <> 'TERMINATED') e), '{}')
    FROM extsvc.dpus d
$fn$;
COMMENT ON FUNCTION extsvc.dpu_label_census() IS
  'Worker: per DPU, the placement keys it must carry and every key its items name (for the orphan guard on label re-derivation).';

-- How many DPF services are live (not DELETED): a database with none while
-- the cluster holds this site's objects deletes nothing (a half-restored
-- database looks exactly like that).
CREATE FUNCTION extsvc.live_service_count() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT count(*) FROM extsvc.service_records s
   WHERE s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state <> 'DELETED'
$fn$;
COMMENT ON FUNCTION extsvc.live_service_count() IS
  'Worker: the number of DPF services that are not DELETED (the orphan guard deletes nothing while it is 0 and the cluster holds objects of this site).';

-- The orphan guard's pending list ----------------------------------------

-- What the guard holds back: DPUServices of this site that belong to no live
-- service, and DPUs whose labels re-derivation would remove, when there are
-- more than extsvc.orphan_cleanup_max at once (or the database holds no live
-- service). Rewritten by each resync; an admin confirms with
-- extsvc.confirm_orphan_cleanup(). Not dumped: a restored copy decides anew.
CREATE TABLE extsvc.pending_orphans (
  kind          text NOT NULL CHECK (kind IN ('dpuservice', 'placement_labels')),
  name          text NOT NULL,
  uid           text,
  detail        text,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at  timestamptz NOT NULL DEFAULT now(),
  confirmed_at  timestamptz,
  confirmed_by  text,
  PRIMARY KEY (kind, name)
);
COMMENT ON TABLE extsvc.pending_orphans IS
  'Deletions (kind dpuservice: name, uid, its service id) and label removals (kind placement_labels: the DPUDevice, its keys) the orphan guard holds back; confirm with extsvc.confirm_orphan_cleanup().';

-- The resync's census of one kind: entries [{name, uid, detail}] replace the
-- pending list of that kind (a confirmation stays while the uid is the same);
-- returns the confirmed entries, which the worker may now carry out.
CREATE FUNCTION extsvc.record_pending_orphans(kind text, entries jsonb)
RETURNS TABLE (name text, uid text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_kind text := record_pending_orphans.kind;
BEGIN
  IF v_kind IS NULL OR v_kind NOT IN ('dpuservice', 'placement_labels') THEN
    PERFORM extsvc._raise('22023', 'unknown kind of pending orphan', format('kind: %s', extsvc._token(v_kind)),
                          'Use dpuservice or placement_labels.');
  END IF;
  DELETE FROM extsvc.pending_orphans p
   WHERE p.kind = v_kind
     AND NOT EXISTS (SELECT FROM jsonb_array_elements(coalesce(entries, '[]')) e WHERE e->>'name' = p.name);
  INSERT INTO extsvc.pending_orphans AS p (kind, name, uid, detail)
  SELECT DISTINCT ON (e->>'name') v_kind, e->>'name', e->>'uid', e->>'detail'
    FROM jsonb_array_elements(coalesce(entries, '[]')) e
   WHERE e->>'name' IS NOT NULL
  ON CONFLICT ON CONSTRAINT pending_orphans_pkey DO UPDATE
     SET last_seen_at = now(), detail = EXCLUDED.detail, uid = EXCLUDED.uid,
         confirmed_at = CASE WHEN p.uid IS NOT DISTINCT FROM EXCLUDED.uid THEN p.confirmed_at END,
         confirmed_by = CASE WHEN p.uid IS NOT DISTINCT FROM EXCLUDED.uid THEN p.confirmed_by END;
  RETURN QUERY SELECT p.name, p.uid FROM extsvc.pending_orphans p
                WHERE p.kind = v_kind AND p.confirmed_at IS NOT NULL ORDER BY p.name;
END
$fn$;
COMMENT ON FUNCTION extsvc.record_pending_orphans(text, jsonb) IS
  'Worker: replaces the pending list of one kind with the resync''s census and returns the entries an admin confirmed.';

CREATE FUNCTION extsvc.confirm_orphan_cleanup() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE extsvc.pending_orphans p SET confirmed_at = now(), confirmed_by = session_user
   WHERE p.confirmed_at IS NULL;
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM extsvc._site_wake();
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.confirm_orphan_cleanup() IS
  'Operator (extsvc_admin): allows the deletions and label removals listed in extsvc.pending_orphans (each as listed: a DPUService only with the uid seen); the worker carries them out at the resync it is woken for. Returns how many were confirmed.';

-- Site state for monitoring: the C side (lease, pause, foreign objects from
-- the last resync) as metric rows; nothing without shared_preload_libraries.
CREATE FUNCTION extsvc._site_metrics(OUT metric text, OUT labels jsonb, OUT value double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_site_metrics';
COMMENT ON FUNCTION extsvc._site_metrics() IS
  'Internal: the site Lease, the write pause and the foreign objects of the last resync as metric rows (shared memory). Read extsvc.metrics() instead.';

GRANT SELECT ON extsvc.database_identity, extsvc.placement_keys, extsvc.pending_orphans TO extsvc_admin;
GRANT EXECUTE ON FUNCTION extsvc.database_identity_status(), extsvc.confirm_database_identity(),
                          extsvc.confirm_orphan_cleanup()
  TO extsvc_admin;
