-- Services, their versions and Helm revisions -------------------------------

CREATE TABLE extsvc.service_records (
  service_id             uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL
    CHECK (tenant_organization_id <> '' AND length(tenant_organization_id) <= 256),
  service_name           text NOT NULL
    CHECK (btrim(service_name) <> '' AND length(service_name) <= 256),
  description            text CHECK (length(description) <= 4096),
  service_type           text NOT NULL CHECK (service_type IN ('KUBERNETES_POD', 'DPF_HELM_CHART')),
  deployment_scope       text NOT NULL DEFAULT 'INSTANCE_DPUS'
    CHECK (deployment_scope IN ('INSTANCE_DPUS', 'ALL_DPUS')),
  dpu_target             text CHECK (dpu_target IN ('PRIMARY', 'ALL_ACTIVE', 'ALL')),
  lifecycle_state        extsvc.lifecycle_state NOT NULL,
  -- who made the last lifecycle change and why; checked by a trigger against
  -- extsvc.lifecycle_transitions and copied into the history
  state_actor            extsvc.state_actor NOT NULL,
  state_reason           text NOT NULL,
  version_ctr            integer NOT NULL DEFAULT 1 CHECK (version_ctr >= 1),
  -- DPF_HELM_CHART: the one attachable version, stable for the service's life
  attachable_version     text CHECK (attachable_version ~ '^V[1-9][0-9]*-T[0-9]+$'),
  desired_revision       integer CHECK (desired_revision >= 1),
  applied_revision       integer CHECK (applied_revision >= 1 AND applied_revision <= desired_revision),
  dpf_service_name       text UNIQUE,
  placement_label_key    text UNIQUE,
  status_message         text,
  has_credential         boolean NOT NULL DEFAULT false,
  observability          jsonb,
  created_at             timestamptz NOT NULL DEFAULT now(),
  updated_at             timestamptz NOT NULL DEFAULT now(),
  delete_requested_at    timestamptz,
  deleted_at             timestamptz,
  CONSTRAINT dpf_identity_present CHECK (
    (service_type = 'DPF_HELM_CHART') = (dpf_service_name IS NOT NULL)
    AND (service_type = 'DPF_HELM_CHART') = (placement_label_key IS NOT NULL)
    AND (service_type = 'DPF_HELM_CHART') = (attachable_version IS NOT NULL)
    AND (service_type = 'DPF_HELM_CHART') = (desired_revision IS NOT NULL)),
  CONSTRAINT dpf_no_credentials CHECK (
    service_type = 'KUBERNETES_POD' OR (NOT has_credential AND observability IS NULL)),
  CONSTRAINT scope_and_target CHECK (
    CASE
      WHEN service_type = 'KUBERNETES_POD' THEN deployment_scope = 'INSTANCE_DPUS' AND dpu_target IS NULL
      WHEN deployment_scope = 'ALL_DPUS' THEN dpu_target IS NULL
      ELSE dpu_target IS NOT NULL
    END),
  CONSTRAINT deleted_at_iff_deleted CHECK ((lifecycle_state = 'DELETED') = (deleted_at IS NOT NULL))
);

COMMENT ON TABLE extsvc.service_records IS
  'One row per extension service; read it through the extsvc.services view.';

-- A display name is unique per tenant, case-insensitively, until DELETED.
CREATE UNIQUE INDEX service_records_tenant_name_key
  ON extsvc.service_records (tenant_organization_id, lower(service_name))
  WHERE lifecycle_state <> 'DELETED';

-- The few site-wide (ALL_DPUS) services among all: every DPU's work object
-- (extsvc._dpu_work, the dpu_desired_labels view) lists them, once per
-- claimed DPU, and must not read every service to find them.
CREATE INDEX service_records_site_wide ON extsvc.service_records (service_id)
  WHERE deployment_scope = 'ALL_DPUS';

CREATE TABLE extsvc.service_versions (
  service_id     uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  version        text NOT NULL CHECK (version ~ '^V[1-9][0-9]*-T[0-9]+$'),
  version_number integer NOT NULL CHECK (version_number >= 1),
  -- KUBERNETES_POD: the pod definition as given. DPF_HELM_CHART: NULL; the
  -- definition lives in extsvc.helm_revisions.
  data           text,
  has_credential boolean NOT NULL DEFAULT false,
  observability  jsonb,
  created_at     timestamptz NOT NULL DEFAULT now(),
  deleted_at     timestamptz,
  PRIMARY KEY (service_id, version),
  UNIQUE (service_id, version_number)
);

CREATE TABLE extsvc.helm_revisions (
  service_id    uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  revision      integer NOT NULL CHECK (revision >= 1),
  data          jsonb NOT NULL,          -- normalized by validate_dpf_helm_chart_data
  created_at    timestamptz NOT NULL DEFAULT now(),
  created_by    text NOT NULL DEFAULT session_user,
  applied_at    timestamptz,             -- DPF accepted this definition
  superseded_at timestamptz,             -- a newer revision was requested first
  -- a rollback creates a new revision whose definition equals an older one;
  -- rollback_of names that older revision (NULL for ordinary updates)
  rollback_of   integer,
  PRIMARY KEY (service_id, revision)
);

-- A service's pointers at its own revisions and version (desired_revision,
-- applied_revision, attachable_version) are checked by constraint triggers
-- (21_restored_rows.sql), not foreign keys: as foreign keys they made the
-- tables circular, and a plain pg_restore failed on the first service row.

-- Lifecycle vocabulary ------------------------------------------------------

CREATE TABLE extsvc.lifecycle_transitions (
  from_state  extsvc.lifecycle_state,
  to_state    extsvc.lifecycle_state NOT NULL,
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  description text NOT NULL,
  UNIQUE NULLS NOT DISTINCT (from_state, to_state, actor, reason)
);
COMMENT ON TABLE extsvc.lifecycle_transitions IS
  'Every allowed service lifecycle change (from_state NULL = creation); a trigger refuses any other.';

CREATE TABLE extsvc.service_state_history (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  service_id  uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  from_state  extsvc.lifecycle_state,
  to_state    extsvc.lifecycle_state NOT NULL,
  actor       extsvc.state_actor NOT NULL,
  reason      text NOT NULL,
  message     text,
  revision    integer,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX service_state_history_service ON extsvc.service_state_history (service_id, id);

-- Reconciliation work (one row per DPF service) ----------------------------

CREATE TABLE extsvc.dpf_extension_service_reconciliations (
  service_id        uuid PRIMARY KEY REFERENCES extsvc.service_records ON DELETE CASCADE,
  -- bumped by every change of intent; a worker result is written only when
  -- the version it claimed is still current (compare-and-swap)
  state_version     bigint NOT NULL DEFAULT 1,
  lease_owner       text,
  lease_token       uuid,
  lease_expires_at  timestamptz,
  attempts          integer NOT NULL DEFAULT 0,
  next_due_at       timestamptz,         -- NULL: nothing to do until intent or drift
  last_error        text,
  last_http_status  integer,
  last_error_at     timestamptz,
  last_attempt_at   timestamptz,
  last_success_at   timestamptz,
  observed_resource_version text,
  observed_generation bigint,
  -- DPF's own view of the DPUService (its Ready condition) as last observed:
  -- context for operators, never proof of a rollout (SPEC 2.8)
  dpf_ready         boolean,
  dpf_reason        text,
  dpf_message       text,
  dpf_observed_at   timestamptz,
  CONSTRAINT lease_complete CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
);
-- The worker's lookups (sql/parts/76_worker_queue.sql, docs/worker.md "The
-- queue's indexes"): a row is claimable from greatest(next_due_at,
-- lease_expires_at) on (greatest ignores a NULL lease), so one index in that
-- order gives claim its next rows without reading the leased ones and
-- next_due_in its minimum; renew_leases and release_leases find a worker's
-- leases by owner and token. Both hold only rows with work or a lease.
CREATE INDEX dpf_extension_service_reconciliations_claimable
  ON extsvc.dpf_extension_service_reconciliations ((greatest(next_due_at, lease_expires_at)))
  WHERE next_due_at IS NOT NULL;
CREATE INDEX dpf_extension_service_reconciliations_lease
  ON extsvc.dpf_extension_service_reconciliations (lease_owner, lease_token)
  WHERE lease_owner IS NOT NULL;

-- Chart allow-list ----------------------------------------------------------

CREATE TABLE extsvc.chart_allowlist (
  repo_url    text NOT NULL,
  chart_name  text NOT NULL DEFAULT '',   -- '' = any chart from that repository
  added_at    timestamptz NOT NULL DEFAULT now(),
  added_by    text NOT NULL DEFAULT session_user,
  PRIMARY KEY (repo_url, chart_name)
);

-- DPUs, instances and attachments (SPEC 2.7) --------------------------------

-- Machine ids are NICo MachineIds in their canonical text (SPEC 7;
-- sql/parts/32_machine_ids.sql): fm100 + type + source + 52 base32
-- characters. A database upgraded from 0.2.0 keeps the uuid ids it had, as
-- their text.
CREATE TABLE extsvc.dpus (
  machine_id      text PRIMARY KEY
    CONSTRAINT dpus_machine_id_format
    CHECK (machine_id ~ '^fm100d[ts][0-9a-v]{51}[0g]$'
           OR machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
  host_machine_id text NOT NULL
    CONSTRAINT dpus_host_machine_id_format
    CHECK (host_machine_id ~ '^fm100[hp][ts][0-9a-v]{51}[0g]$'
           OR host_machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
  dpu_device_name text NOT NULL UNIQUE CHECK (dpu_device_name ~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' AND length(dpu_device_name) <= 253),
  dpu_node_name   text NOT NULL UNIQUE CHECK (dpu_node_name ~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' AND length(dpu_node_name) <= 253),
  is_primary      boolean NOT NULL DEFAULT false,
  registered_at   timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  deregistered_at timestamptz
);
CREATE INDEX dpus_host ON extsvc.dpus (host_machine_id);
CREATE UNIQUE INDEX dpus_one_primary_per_host ON extsvc.dpus (host_machine_id) WHERE is_primary;

CREATE TABLE extsvc.instances (
  instance_id            uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL CHECK (tenant_organization_id <> ''),
  host_machine_id        text NOT NULL
    CONSTRAINT instances_host_machine_id_format
    CHECK (host_machine_id ~ '^fm100[hp][ts][0-9a-v]{51}[0g]$'
           OR host_machine_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
  network_dpus           text[] NOT NULL DEFAULT '{}',
  dpf_managed            boolean NOT NULL DEFAULT true,
  config_version         integer NOT NULL DEFAULT 1,
  delete_requested_at    timestamptz,
  created_at             timestamptz NOT NULL DEFAULT now(),
  updated_at             timestamptz NOT NULL DEFAULT now(),
  -- NICo's config version string V<n>-T<micros> of config_version, stamped by
  -- a trigger at every change (issue #14 P1-7; sql/parts/80_nico_reads.sql)
  config_version_text    text
);

-- A host holds at most one live instance (issue 29): NICo allocates a
-- machine to one instance at a time, and a second one (of another tenant,
-- above all) would put its services on the DPUs of the first. Live = not
-- being deleted: once delete_instance ran (delete_requested_at set) the
-- host may take the next instance while the old one's attachments are
-- still observed away (a hand-over).
CREATE UNIQUE INDEX instances_one_live_per_host ON extsvc.instances (host_machine_id)
  WHERE delete_requested_at IS NULL;
-- Issue 26: every placement call finds a host's instances, deleted ones
-- included (_lock_dpu_work, register_dpu, deregister_dpu); the partial index
-- above cannot answer that, and a 12,500-instance site scanned the table.
CREATE INDEX instances_host ON extsvc.instances (host_machine_id);

-- An instance's extension-service configuration, with tombstones.
CREATE TABLE extsvc.instance_extension_services (
  instance_id    uuid NOT NULL REFERENCES extsvc.instances ON DELETE CASCADE,
  service_id     uuid NOT NULL,
  version        text NOT NULL,
  attached_at    timestamptz NOT NULL DEFAULT now(),
  removed_at     timestamptz,
  -- NICo's attachment id (its DSX line's InstanceExtensionServiceConfig.id):
  -- kept from the first request that names the pair; NULL for entries
  -- stored before 0.3.0 (issue 22)
  attachment_id  uuid CONSTRAINT attachment_id_not_nil CHECK (attachment_id <> '00000000-0000-0000-0000-000000000000'),
  -- this attachment's DPU target; NULL: the service's dpu_target
  dpu_target     text CONSTRAINT instance_extension_services_dpu_target_check
                   CHECK (dpu_target IN ('PRIMARY', 'ALL_ACTIVE', 'ALL')),
  PRIMARY KEY (instance_id, service_id, version),
  FOREIGN KEY (service_id, version) REFERENCES extsvc.service_versions (service_id, version)
);
CREATE INDEX instance_extension_services_service ON extsvc.instance_extension_services (service_id);
CREATE UNIQUE INDEX instance_extension_services_attachment_id_key
  ON extsvc.instance_extension_services (attachment_id) WHERE attachment_id IS NOT NULL;

-- Instances whose deletion finished (the last attachment observed
-- TERMINATED, the last KUBERNETES_POD tombstone confirmed): the deletion
-- probe (instance_extension_services_terminated) answers true for them and
-- P0002 for an id that never existed (issue 22). extsvc.purge_deleted
-- removes them with the deleted services.
CREATE TABLE extsvc.finished_instance_deletions (
  instance_id            uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL,
  host_machine_id        text NOT NULL,
  delete_requested_at    timestamptz,
  finished_at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE extsvc.finished_instance_deletions IS
  'Instances whose deletion finished, for the deletion probe (extsvc.instance_extension_services_terminated); purged by extsvc.purge_deleted.';

CREATE TABLE extsvc.dpf_extension_service_attachments (
  instance_id      uuid NOT NULL REFERENCES extsvc.instances ON DELETE CASCADE,
  dpu_machine_id   text NOT NULL REFERENCES extsvc.dpus,
  service_id       uuid NOT NULL,
  version          text NOT NULL,
  placement_state  extsvc.placement_state NOT NULL DEFAULT 'ACTIVE',
  deployment_state extsvc.deployment_state NOT NULL DEFAULT 'PENDING',
  status_message   text,
  observed_at      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  observed_config_version integer,
  removing_since   timestamptz,
  PRIMARY KEY (instance_id, dpu_machine_id, service_id, version),
  FOREIGN KEY (service_id, version) REFERENCES extsvc.service_versions (service_id, version)
);
CREATE INDEX dpf_extension_service_attachments_dpu ON extsvc.dpf_extension_service_attachments (dpu_machine_id);
CREATE INDEX dpf_extension_service_attachments_service ON extsvc.dpf_extension_service_attachments (service_id);

-- pg_dump / pg_restore (issue #12): the rows of every table above except the
-- seed table extsvc.lifecycle_transitions (the install script's own rows) are
-- user data and are dumped; so is the history's identity sequence, or restored
-- history ids would be handed out again. The reconciliation rows (work state,
-- leases included) are dumped too: without them the worker would never see a
-- restored service. A lease of the old server's worker ends by itself
-- (lease_expires_at) or when the worker of that slot name starts and frees its
-- previous process's leases (docs/operator-guide.md, "Backup and restore").
SELECT pg_catalog.pg_extension_config_dump('extsvc.service_records', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.service_versions', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.helm_revisions', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.service_state_history', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.service_state_history_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpf_extension_service_reconciliations', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.chart_allowlist', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpus', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.instances', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.instance_extension_services', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpf_extension_service_attachments', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.finished_instance_deletions', '');
