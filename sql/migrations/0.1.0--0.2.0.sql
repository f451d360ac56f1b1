-- Step 2 of nico_extsvc--0.1.0--0.2.0.sql (tools/sql_upgrade.py): the
-- stored-data changes from 0.1.0 to 0.2.0. Every function, view and trigger
-- is gone at this point (step 1) and is created again from sql/parts after
-- this file (step 3), together with every COMMENT, GRANT, seed row and
-- pg_extension_config_dump registration of the parts. What belongs here:
-- CREATE/ALTER TABLE, indexes, sequences and data migrations, written so
-- that the result equals a fresh 0.2.0 install (test/upgrade checks it).

-- 05_states.sql: each state vocabulary is one domain, used by every column
-- that holds one of its states (the 0.1.0 columns had their own CHECKs).
CREATE DOMAIN extsvc.lifecycle_state AS text
  CONSTRAINT lifecycle_state_values
  CHECK (VALUE IN ('CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED'));
CREATE DOMAIN extsvc.placement_state AS text
  CONSTRAINT placement_state_values CHECK (VALUE IN ('ACTIVE', 'REMOVING'));
CREATE DOMAIN extsvc.deployment_state AS text
  CONSTRAINT deployment_state_values
  CHECK (VALUE IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN'));
CREATE DOMAIN extsvc.state_actor AS text
  CONSTRAINT state_actor_values CHECK (VALUE IN ('api', 'worker'));
CREATE DOMAIN extsvc.placement_machine AS text
  CONSTRAINT placement_machine_values CHECK (VALUE IN ('placement', 'deployment', 'site_deployment'));
ALTER TABLE extsvc.service_records
  DROP CONSTRAINT service_records_lifecycle_state_check,
  DROP CONSTRAINT service_records_state_actor_check,
  ALTER COLUMN lifecycle_state TYPE extsvc.lifecycle_state,
  ALTER COLUMN state_actor TYPE extsvc.state_actor;
ALTER TABLE extsvc.lifecycle_transitions
  DROP CONSTRAINT lifecycle_transitions_from_state_check,
  DROP CONSTRAINT lifecycle_transitions_to_state_check,
  DROP CONSTRAINT lifecycle_transitions_actor_check,
  ALTER COLUMN from_state TYPE extsvc.lifecycle_state,
  ALTER COLUMN to_state TYPE extsvc.lifecycle_state,
  ALTER COLUMN actor TYPE extsvc.state_actor;
ALTER TABLE extsvc.service_state_history
  ALTER COLUMN from_state TYPE extsvc.lifecycle_state,
  ALTER COLUMN to_state TYPE extsvc.lifecycle_state,
  ALTER COLUMN actor TYPE extsvc.state_actor;
ALTER TABLE extsvc.dpf_extension_service_attachments
  DROP CONSTRAINT dpf_extension_service_attachments_placement_state_check,
  DROP CONSTRAINT dpf_extension_service_attachments_deployment_state_check,
  ALTER COLUMN placement_state TYPE extsvc.placement_state,
  ALTER COLUMN deployment_state TYPE extsvc.deployment_state;
ALTER TABLE extsvc.site_service_dpu_status
  DROP CONSTRAINT site_service_dpu_status_deployment_state_check,
  ALTER COLUMN deployment_state TYPE extsvc.deployment_state;

-- 10_tables.sql: DPF's own Ready condition of the DPUService as last observed.
ALTER TABLE extsvc.dpf_extension_service_reconciliations
  ADD COLUMN dpf_ready boolean,
  ADD COLUMN dpf_reason text,
  ADD COLUMN dpf_message text,
  ADD COLUMN dpf_observed_at timestamptz;

-- 10_tables.sql, 15_placement_tables.sql: the queue indexes of issue 11. A
-- row is claimable from greatest(next_due_at, lease_expires_at) on; claim
-- and next_due_in read the _claimable index in that order, renew_leases and
-- release_leases the _lease index, and each claimed DPU's work finds the
-- site-wide services through service_records_site_wide (docs/worker.md,
-- "The queue's indexes").
CREATE INDEX service_records_site_wide ON extsvc.service_records (service_id)
  WHERE deployment_scope = 'ALL_DPUS';
DROP INDEX extsvc.dpf_extension_service_reconciliations_due;
DROP INDEX extsvc.dpu_reconciliations_due;
CREATE INDEX dpf_extension_service_reconciliations_claimable
  ON extsvc.dpf_extension_service_reconciliations ((greatest(next_due_at, lease_expires_at)))
  WHERE next_due_at IS NOT NULL;
CREATE INDEX dpf_extension_service_reconciliations_lease
  ON extsvc.dpf_extension_service_reconciliations (lease_owner, lease_token)
  WHERE lease_owner IS NOT NULL;
CREATE INDEX dpu_reconciliations_claimable ON extsvc.dpu_reconciliations ((greatest(next_due_at, lease_expires_at)))
  WHERE next_due_at IS NOT NULL;
CREATE INDEX dpu_reconciliations_lease ON extsvc.dpu_reconciliations (lease_owner, lease_token)
  WHERE lease_owner IS NOT NULL;

-- 15_placement_tables.sql: NICo's config version string of config_version.
-- Fresh rows get it from a trigger (80_nico_reads.sql) at every change;
-- existing instances get the string of their current config_version, stamped
-- with the time of their last change.
ALTER TABLE extsvc.instances ADD COLUMN config_version_text text;
UPDATE extsvc.instances
   SET config_version_text = format('V%s-T%s', config_version, (extract(epoch FROM updated_at) * 1000000)::bigint);

-- 78_placement_transitions.sql: the per-DPU transition table (its rows are
-- the parts' seed, inserted in step 3) and the per-DPU history.
CREATE TABLE extsvc.placement_transitions (
  machine     extsvc.placement_machine NOT NULL,
  from_state  text,   -- NULL: the row is created
  to_state    text,   -- NULL: the row is removed
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  description text NOT NULL,
  CONSTRAINT placement_transition_states CHECK (
    CASE WHEN machine = 'placement'
         THEN (from_state::extsvc.placement_state, to_state::extsvc.placement_state) IS NOT DISTINCT FROM (from_state, to_state)
         ELSE (from_state::extsvc.deployment_state, to_state::extsvc.deployment_state) IS NOT DISTINCT FROM (from_state, to_state) END),
  CONSTRAINT placement_transition_moves CHECK (from_state IS DISTINCT FROM to_state),
  UNIQUE NULLS NOT DISTINCT (machine, from_state, to_state, actor, reason)
);

CREATE TABLE extsvc.dpu_state_history (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  machine        extsvc.placement_machine NOT NULL,
  instance_id    uuid,          -- NULL for ALL_DPUS rows
  dpu_machine_id uuid NOT NULL,
  service_id     uuid NOT NULL,
  version        text,
  from_state     text,
  to_state       text,
  actor          extsvc.state_actor NOT NULL,
  reason         text NOT NULL,
  message        text,          -- status_message at the change: the evidence
  observed_at    timestamptz,
  at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX dpu_state_history_instance ON extsvc.dpu_state_history (instance_id, id) WHERE instance_id IS NOT NULL;
CREATE INDEX dpu_state_history_row ON extsvc.dpu_state_history (service_id, dpu_machine_id, instance_id, id);
CREATE INDEX dpu_state_history_at ON extsvc.dpu_state_history (at);

-- 82_revisions.sql: rollback_of, and the audit tables of purge_deleted.
ALTER TABLE extsvc.helm_revisions ADD COLUMN rollback_of integer;

CREATE TABLE extsvc.purged_services (
  service_id             uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL,
  service_name           text NOT NULL,
  service_type           text NOT NULL,
  deployment_scope       text NOT NULL,
  dpf_service_name       text,
  created_at             timestamptz NOT NULL,
  delete_requested_at    timestamptz,
  deleted_at             timestamptz NOT NULL,
  final_reason           text NOT NULL,
  revisions              jsonb NOT NULL DEFAULT '[]',   -- [{revision, created_at, created_by, applied_at, rollback_of}]
  versions               jsonb NOT NULL DEFAULT '[]',   -- [{version, created_at, deleted_at, has_credential}]
  purged_at              timestamptz NOT NULL DEFAULT now(),
  purged_by              text NOT NULL DEFAULT session_user
);

CREATE TABLE extsvc.purged_service_history (
  id          bigint PRIMARY KEY,        -- the id it had in extsvc.service_state_history
  service_id  uuid NOT NULL REFERENCES extsvc.purged_services,
  from_state  extsvc.lifecycle_state,
  to_state    extsvc.lifecycle_state NOT NULL,
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  message     text,
  revision    integer,
  at          timestamptz NOT NULL
);
CREATE INDEX purged_service_history_service ON extsvc.purged_service_history (service_id, id);
