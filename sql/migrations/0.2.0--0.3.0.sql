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
