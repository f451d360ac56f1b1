-- Step 2 of the 0.2.0 -> 0.3.0 upgrade script (tools/sql_upgrade.py): the
-- hand-written changes of stored data between the two versions: tables,
-- columns, constraints, indexes, sequences and data migrations. Step 1
-- (sql/migrations/drop-definitions.sql) has dropped every function, view and
-- trigger; step 3 replays the definitions of sql/parts/*.sql.
--
-- Every change here must leave exactly the schema a fresh 0.3.0 install
-- creates (the suite `upgrade` compares pg_dump -s of both) and keep every
-- row. Statements run in ALTER EXTENSION's one transaction.

-- Issue 25 (one writer per site): the database's identity, the registry of
-- the placement keys it wrote, and the orphan guard's pending list
-- (sql/parts/74_site.sql has the same tables for a fresh install).
CREATE TABLE extsvc.database_identity (
  system_identifier bigint NOT NULL,
  database_oid      oid NOT NULL,
  database_name     text NOT NULL,
  origin            text NOT NULL CHECK (origin IN ('install', 'upgrade', 'confirmed')),
  recorded_at       timestamptz NOT NULL DEFAULT now(),
  recorded_by       text NOT NULL DEFAULT session_user,
  PRIMARY KEY (system_identifier, database_oid)
);
-- the database being upgraded is the site's: its identity is recorded now
INSERT INTO extsvc.database_identity (system_identifier, database_oid, database_name, origin)
SELECT c.system_identifier, d.oid, d.datname, 'upgrade'
  FROM pg_catalog.pg_control_system() c, pg_catalog.pg_database d
 WHERE d.datname = pg_catalog.current_database();

CREATE TABLE extsvc.placement_keys (
  label_key         text PRIMARY KEY CHECK (label_key ~ '^nico/extsvc-[a-z2-7]{20}$'),
  service_id        uuid NOT NULL,
  registered_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  service_purged_at timestamptz
);
CREATE INDEX placement_keys_service ON extsvc.placement_keys (service_id);
-- Backfill: the 0.2.0 worker wrote the key of every DPF service it knew (a
-- DELETED one's key may still sit on a DPU after a late patch), and of the
-- services purge_deleted already removed: their DPUService name is
-- extsvc-<hash> and the key nico/extsvc-<hash> (the same hash, SPEC 2.2).
INSERT INTO extsvc.placement_keys (label_key, service_id, registered_at)
SELECT s.placement_label_key, s.service_id, s.created_at
  FROM extsvc.service_records s
 WHERE s.placement_label_key IS NOT NULL
ON CONFLICT (label_key) DO NOTHING;
INSERT INTO extsvc.placement_keys (label_key, service_id, registered_at, service_purged_at)
SELECT 'nico/' || p.dpf_service_name, p.service_id, p.created_at, p.purged_at
  FROM extsvc.purged_services p
 WHERE p.dpf_service_name ~ '^extsvc-[a-z2-7]{20}$'
ON CONFLICT (label_key) DO NOTHING;

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
