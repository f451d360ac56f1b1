-- Placement: per-DPU work rows and observations (SPEC 2.7, 2.8) -------------

-- One row per DPU: the worker's placement and observation work. Woken by
-- every change of the DPU's desired NICo-owned label set.
CREATE TABLE extsvc.dpu_reconciliations (
  dpu_machine_id    text PRIMARY KEY REFERENCES extsvc.dpus ON DELETE CASCADE,
  state_version     bigint NOT NULL DEFAULT 1,
  lease_owner       text,
  lease_token       uuid,
  lease_expires_at  timestamptz,
  attempts          integer NOT NULL DEFAULT 0,
  next_due_at       timestamptz,
  last_error        text,
  last_http_status  integer,
  last_error_at     timestamptz,
  last_attempt_at   timestamptz,
  last_observed_at  timestamptz,
  observation       jsonb,          -- what the last pass saw (labels, pods), for operators
  CONSTRAINT lease_complete CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
);
-- the worker's lookups, as for the service queue (10_tables.sql)
CREATE INDEX dpu_reconciliations_claimable ON extsvc.dpu_reconciliations ((greatest(next_due_at, lease_expires_at)))
  WHERE next_due_at IS NOT NULL;
CREATE INDEX dpu_reconciliations_lease ON extsvc.dpu_reconciliations (lease_owner, lease_token)
  WHERE lease_owner IS NOT NULL;

-- Per-DPU status of ALL_DPUS (site-wide) services, which have no attachments.
CREATE TABLE extsvc.site_service_dpu_status (
  service_id       uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  dpu_machine_id   text NOT NULL REFERENCES extsvc.dpus ON DELETE CASCADE,
  deployment_state extsvc.deployment_state NOT NULL,
  status_message   text,
  observed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (service_id, dpu_machine_id)
);

-- pg_dump / pg_restore: per-DPU work rows and observations are dumped like
-- the reconciliation rows (10_tables.sql); observations older than the
-- staleness bound read UNKNOWN after a restore until observed again.
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_reconciliations', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.site_service_dpu_status', '');
