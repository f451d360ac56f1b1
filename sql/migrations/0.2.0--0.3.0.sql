-- Step 2 of the 0.2.0 -> 0.3.0 upgrade script (tools/sql_upgrade.py): the
-- hand-written changes of stored data between the two versions: tables,
-- columns, constraints, indexes, sequences and data migrations. Step 1
-- (sql/migrations/drop-definitions.sql) has dropped every function, view and
-- trigger; step 3 replays the definitions of sql/parts/*.sql.
--
-- Every change here must leave exactly the schema a fresh 0.3.0 install
-- creates (the suite `upgrade` compares pg_dump -s of both) and keep every
-- row. Statements run in ALTER EXTENSION's one transaction.

-- Issue 22: machine ids become NICo MachineIds, stored as text. The uuids of
-- 0.2.0 rows keep their text form (every row stays; extsvc._machine_id
-- accepts those ids for the rows that hold them). The foreign keys on
-- dpus.machine_id go while the types change and come back as they were.
ALTER TABLE extsvc.dpf_extension_service_attachments
  DROP CONSTRAINT dpf_extension_service_attachments_dpu_machine_id_fkey;
ALTER TABLE extsvc.dpu_reconciliations DROP CONSTRAINT dpu_reconciliations_dpu_machine_id_fkey;
ALTER TABLE extsvc.site_service_dpu_status DROP CONSTRAINT site_service_dpu_status_dpu_machine_id_fkey;
ALTER TABLE extsvc.dpus
  ALTER COLUMN machine_id TYPE text USING machine_id::text,
  ALTER COLUMN host_machine_id TYPE text USING host_machine_id::text,
  ADD CONSTRAINT dpus_machine_id_format
    CHECK (machine_id ~ '^fm100d[ts][0-9a-v]{51}[0g]$'
           OR machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
  ADD CONSTRAINT dpus_host_machine_id_format
    CHECK (host_machine_id ~ '^fm100[hp][ts][0-9a-v]{51}[0g]$'
           OR host_machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$');
ALTER TABLE extsvc.instances
  ALTER COLUMN host_machine_id TYPE text USING host_machine_id::text,
  ALTER COLUMN network_dpus DROP DEFAULT,
  ALTER COLUMN network_dpus TYPE text[] USING network_dpus::text[],
  ALTER COLUMN network_dpus SET DEFAULT '{}',
  ADD CONSTRAINT instances_host_machine_id_format
    CHECK (host_machine_id ~ '^fm100[hp][ts][0-9a-v]{51}[0g]$'
           OR host_machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$');
ALTER TABLE extsvc.dpf_extension_service_attachments
  ALTER COLUMN dpu_machine_id TYPE text USING dpu_machine_id::text,
  ADD CONSTRAINT dpf_extension_service_attachments_dpu_machine_id_fkey
    FOREIGN KEY (dpu_machine_id) REFERENCES extsvc.dpus;
ALTER TABLE extsvc.dpu_reconciliations
  ALTER COLUMN dpu_machine_id TYPE text USING dpu_machine_id::text,
  ADD CONSTRAINT dpu_reconciliations_dpu_machine_id_fkey
    FOREIGN KEY (dpu_machine_id) REFERENCES extsvc.dpus ON DELETE CASCADE;
ALTER TABLE extsvc.site_service_dpu_status
  ALTER COLUMN dpu_machine_id TYPE text USING dpu_machine_id::text,
  ADD CONSTRAINT site_service_dpu_status_dpu_machine_id_fkey
    FOREIGN KEY (dpu_machine_id) REFERENCES extsvc.dpus ON DELETE CASCADE;
ALTER TABLE extsvc.dpu_state_history
  ALTER COLUMN dpu_machine_id TYPE text USING dpu_machine_id::text;

-- Issue 22: NICo's attachment id and an attachment's own DPU target.
ALTER TABLE extsvc.instance_extension_services
  ADD COLUMN attachment_id uuid
    CONSTRAINT attachment_id_not_nil CHECK (attachment_id <> '00000000-0000-0000-0000-000000000000'),
  ADD COLUMN dpu_target text
    CONSTRAINT instance_extension_services_dpu_target_check CHECK (dpu_target IN ('PRIMARY', 'ALL_ACTIVE', 'ALL'));
CREATE UNIQUE INDEX instance_extension_services_attachment_id_key
  ON extsvc.instance_extension_services (attachment_id) WHERE attachment_id IS NOT NULL;

-- Issue 22: finished instance deletions, for the deletion probe.
CREATE TABLE extsvc.finished_instance_deletions (
  instance_id            uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL,
  host_machine_id        text NOT NULL,
  delete_requested_at    timestamptz,
  finished_at            timestamptz NOT NULL DEFAULT now()
);

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
  service_purged_at timestamptz,
  origin            text NOT NULL DEFAULT 'service' CHECK (origin IN ('service', 'orphan'))
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

-- Issue 29, item 7: service names are stored in Unicode NFC without
-- invisible, control or look-alike space characters (extsvc._service_name
-- refuses them in new names). Names stored before are brought to that form
-- here: NFC; controls, line and paragraph separators and look-alike spaces
-- become a blank, format characters (zero-width, bidirectional, ...),
-- fillers and variation selectors go; the ends are trimmed. The classes
-- are extsvc._service_name's. A live service keeps a name that other
-- services of its tenant could be confused with only if none could: when
-- two live names of one tenant become equal (case-insensitively, the rule
-- of service_records_tenant_name_key), or a name becomes empty, the upgrade
-- stops and changes nothing, naming them; rename one of each pair with
-- extsvc.update_service(service_id, service_name => ...) (still 0.2.0) and
-- run ALTER EXTENSION nico_extsvc UPDATE again. Names of DELETED services
-- are history and stay as they were. Nothing happens in a database whose
-- encoding is not UTF-8 (it cannot hold these characters).
DO $names$
DECLARE
  -- becomes a blank: controls, line and paragraph separators, look-alike spaces
  v_blank text := '[\u0001-\u001F\u007F-\u009F\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]';
  -- goes: format characters, fillers, the grapheme joiner, variation selectors
  v_gone text := '[\u00AD\u034F\u0600-\u0605\u061C\u06DD\u070F\u0890\u0891\u08E2\u115F\u1160\u180E\u200B-\u200F'
                 '\u202A-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF9-\uFFFB\U000110BD\U000110CD'
                 '\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001'
                 '\U000E0020-\U000E007F\U000E0100-\U000E01EF]';
  v_clash text;
BEGIN
  IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
    RETURN;
  END IF;
  SELECT pg_catalog.string_agg(pg_catalog.format('tenant %s: %s', x.tenant_organization_id, x.ids), '; ')
    INTO v_clash
    FROM (SELECT m.tenant_organization_id,
                 pg_catalog.string_agg(m.service_id::text, ' and ' ORDER BY m.service_id) AS ids
            FROM (SELECT s.service_id, s.tenant_organization_id,
                         pg_catalog.btrim(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
                           pg_catalog.normalize(s.service_name, 'NFC'), v_blank, ' ', 'g'), v_gone, '', 'g')) AS canon
                    FROM extsvc.service_records s
                   WHERE s.lifecycle_state <> 'DELETED') m
           GROUP BY m.tenant_organization_id, pg_catalog.lower(m.canon)
          HAVING pg_catalog.count(*) > 1 OR pg_catalog.lower(m.canon) = '') x;
  IF v_clash IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = '23505', CONSTRAINT = 'service_records_tenant_name_key',
      MESSAGE = 'service names that differ only by Unicode normalization or invisible characters',
      DETAIL = pg_catalog.format('services whose names become equal (or empty) in their normalized form: %s', v_clash),
      HINT = 'Rename one service of each group with extsvc.update_service(service_id, service_name => ...), then run ALTER EXTENSION nico_extsvc UPDATE again.';
  END IF;
  UPDATE extsvc.service_records s
     SET service_name = m.canon
    FROM (SELECT x.service_id,
                 pg_catalog.btrim(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
                   pg_catalog.normalize(x.service_name, 'NFC'), v_blank, ' ', 'g'), v_gone, '', 'g')) AS canon
            FROM extsvc.service_records x
           WHERE x.lifecycle_state <> 'DELETED') m
   WHERE s.service_id = m.service_id AND s.service_name <> m.canon;
END
$names$;

-- Issue 29, item 8: a host holds at most one live instance (one not being
-- deleted); 0.2.0 allowed several, of any tenants, so one tenant's service
-- could land on a DPU of another tenant's host. This runs after the machine
-- ids became text (issue 22, above): hosts are named in their text form and
-- the index is built on the text column. Existing data that breaks
-- the rule stops the upgrade, naming the hosts and their live instances:
-- which instance keeps a host is NICo's to say (delete the others with
-- extsvc.delete_instance, still 0.2.0, then update again).
DO $hosts$
DECLARE
  v_hosts text;
BEGIN
  SELECT pg_catalog.string_agg(pg_catalog.format('host %s: %s', x.host_machine_id, x.ids), '; ' ORDER BY x.host_machine_id)
    INTO v_hosts
    FROM (SELECT i.host_machine_id, pg_catalog.string_agg(i.instance_id::text, ', ' ORDER BY i.instance_id) AS ids
            FROM extsvc.instances i WHERE i.delete_requested_at IS NULL
           GROUP BY i.host_machine_id HAVING pg_catalog.count(*) > 1) x;
  IF v_hosts IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = '23505', CONSTRAINT = 'instances_one_live_per_host',
      MESSAGE = 'hosts with more than one live instance',
      DETAIL = pg_catalog.format('a host holds at most one live instance from 0.3.0 on; %s', v_hosts),
      HINT = 'Delete all but one live instance of each host with extsvc.delete_instance(instance_id), then run ALTER EXTENSION nico_extsvc UPDATE again.';
  END IF;
END
$hosts$;
CREATE UNIQUE INDEX instances_one_live_per_host ON extsvc.instances (host_machine_id)
  WHERE delete_requested_at IS NULL;
-- Issue 26: every placement call finds a host's instances, deleted ones
-- included (_lock_dpu_work, register_dpu, deregister_dpu); the partial index
-- above cannot answer that, and a 12,500-instance site scanned the table.
CREATE INDEX instances_host ON extsvc.instances (host_machine_id);

-- Issue 27: a plain pg_restore works. A service's pointers at its own
-- revisions and version were foreign keys that made the tables circular; the
-- constraint triggers of sql/parts/21_restored_rows.sql (replayed as
-- definitions) check the same rule at commit.
ALTER TABLE extsvc.service_records
  DROP CONSTRAINT desired_revision_exists,
  DROP CONSTRAINT applied_revision_exists,
  DROP CONSTRAINT attachable_version_exists;

-- Issue 23, part 2: stray workloads (pods of our services on DPUs without an
-- attachment), as the placement passes observe them.
CREATE TABLE extsvc.stray_pods (
  dpu_machine_id text NOT NULL REFERENCES extsvc.dpus ON DELETE CASCADE,
  pod            text NOT NULL,          -- "<namespace>/<name>"
  service_id     uuid,                   -- its nico/extension-service-id label, else by its release
  release        text,                   -- the DPUService whose Argo Application applied it
  reason         text NOT NULL CHECK (reason IN ('no_attachment', 'node_key_without_dpudevice')),
  first_seen     timestamptz NOT NULL DEFAULT now(),
  last_seen      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (dpu_machine_id, pod)
);
