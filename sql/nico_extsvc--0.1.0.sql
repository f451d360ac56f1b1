-- nico_extsvc 0.1.0: generated from sql/parts/*.sql by make; do not edit.
\echo Use "CREATE EXTENSION nico_extsvc" to load this file. \quit

-- ---- sql/parts/00_roles.sql
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

-- ---- sql/parts/10_tables.sql
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
  lifecycle_state        text NOT NULL
    CHECK (lifecycle_state IN ('CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED')),
  -- who made the last lifecycle change and why; checked by a trigger against
  -- extsvc.lifecycle_transitions and copied into the history
  state_actor            text NOT NULL CHECK (state_actor IN ('api', 'worker')),
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
  PRIMARY KEY (service_id, revision)
);

ALTER TABLE extsvc.service_records
  ADD CONSTRAINT desired_revision_exists FOREIGN KEY (service_id, desired_revision)
    REFERENCES extsvc.helm_revisions (service_id, revision) DEFERRABLE INITIALLY DEFERRED,
  ADD CONSTRAINT applied_revision_exists FOREIGN KEY (service_id, applied_revision)
    REFERENCES extsvc.helm_revisions (service_id, revision) DEFERRABLE INITIALLY DEFERRED,
  ADD CONSTRAINT attachable_version_exists FOREIGN KEY (service_id, attachable_version)
    REFERENCES extsvc.service_versions (service_id, version) DEFERRABLE INITIALLY DEFERRED;

-- Lifecycle vocabulary ------------------------------------------------------

CREATE TABLE extsvc.lifecycle_transitions (
  from_state  text CHECK (from_state IN ('CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED')),
  to_state    text NOT NULL CHECK (to_state IN ('CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED')),
  actor       text NOT NULL CHECK (actor IN ('api', 'worker')),
  reason      text NOT NULL,
  description text NOT NULL,
  UNIQUE NULLS NOT DISTINCT (from_state, to_state, actor, reason)
);
COMMENT ON TABLE extsvc.lifecycle_transitions IS
  'Every allowed service lifecycle change (from_state NULL = creation); a trigger refuses any other.';

CREATE TABLE extsvc.service_state_history (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  service_id  uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  from_state  text,
  to_state    text NOT NULL,
  actor       text NOT NULL,
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
  CONSTRAINT lease_complete CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL))
);
CREATE INDEX dpf_extension_service_reconciliations_due
  ON extsvc.dpf_extension_service_reconciliations (next_due_at)
  WHERE next_due_at IS NOT NULL;

-- Chart allow-list ----------------------------------------------------------

CREATE TABLE extsvc.chart_allowlist (
  repo_url    text NOT NULL,
  chart_name  text NOT NULL DEFAULT '',   -- '' = any chart from that repository
  added_at    timestamptz NOT NULL DEFAULT now(),
  added_by    text NOT NULL DEFAULT session_user,
  PRIMARY KEY (repo_url, chart_name)
);

-- DPUs, instances and attachments (SPEC 2.7) --------------------------------

CREATE TABLE extsvc.dpus (
  machine_id      uuid PRIMARY KEY,
  host_machine_id uuid NOT NULL,
  dpu_device_name text NOT NULL UNIQUE CHECK (dpu_device_name ~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' AND length(dpu_device_name) <= 253),
  dpu_node_name   text NOT NULL UNIQUE CHECK (dpu_node_name ~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' AND length(dpu_node_name) <= 253),
  is_primary      boolean NOT NULL DEFAULT false,
  registered_at   timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dpus_host ON extsvc.dpus (host_machine_id);
CREATE UNIQUE INDEX dpus_one_primary_per_host ON extsvc.dpus (host_machine_id) WHERE is_primary;

CREATE TABLE extsvc.instances (
  instance_id            uuid PRIMARY KEY,
  tenant_organization_id text NOT NULL CHECK (tenant_organization_id <> ''),
  host_machine_id        uuid NOT NULL,
  network_dpus           uuid[] NOT NULL DEFAULT '{}',
  dpf_managed            boolean NOT NULL DEFAULT true,
  config_version         integer NOT NULL DEFAULT 1,
  delete_requested_at    timestamptz,
  created_at             timestamptz NOT NULL DEFAULT now(),
  updated_at             timestamptz NOT NULL DEFAULT now()
);

-- An instance's extension-service configuration, with tombstones.
CREATE TABLE extsvc.instance_extension_services (
  instance_id    uuid NOT NULL REFERENCES extsvc.instances ON DELETE CASCADE,
  service_id     uuid NOT NULL,
  version        text NOT NULL,
  attached_at    timestamptz NOT NULL DEFAULT now(),
  removed_at     timestamptz,
  PRIMARY KEY (instance_id, service_id, version),
  FOREIGN KEY (service_id, version) REFERENCES extsvc.service_versions (service_id, version)
);
CREATE INDEX instance_extension_services_service ON extsvc.instance_extension_services (service_id);

CREATE TABLE extsvc.dpf_extension_service_attachments (
  instance_id      uuid NOT NULL REFERENCES extsvc.instances ON DELETE CASCADE,
  dpu_machine_id   uuid NOT NULL REFERENCES extsvc.dpus,
  service_id       uuid NOT NULL,
  version          text NOT NULL,
  placement_state  text NOT NULL DEFAULT 'ACTIVE' CHECK (placement_state IN ('ACTIVE', 'REMOVING')),
  deployment_state text NOT NULL DEFAULT 'PENDING'
    CHECK (deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN')),
  status_message   text,
  observed_at      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (instance_id, dpu_machine_id, service_id, version),
  FOREIGN KEY (service_id, version) REFERENCES extsvc.service_versions (service_id, version)
);
CREATE INDEX dpf_extension_service_attachments_dpu ON extsvc.dpf_extension_service_attachments (dpu_machine_id);
CREATE INDEX dpf_extension_service_attachments_service ON extsvc.dpf_extension_service_attachments (service_id);

-- ---- sql/parts/15_placement_tables.sql
-- Placement: per-DPU work rows and observations (SPEC 2.7, 2.8) -------------

ALTER TABLE extsvc.dpus ADD COLUMN deregistered_at timestamptz;
ALTER TABLE extsvc.dpf_extension_service_attachments
  ADD COLUMN observed_config_version integer,
  ADD COLUMN removing_since timestamptz;

-- One row per DPU: the worker's placement and observation work. Woken by
-- every change of the DPU's desired NICo-owned label set.
CREATE TABLE extsvc.dpu_reconciliations (
  dpu_machine_id    uuid PRIMARY KEY REFERENCES extsvc.dpus ON DELETE CASCADE,
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
CREATE INDEX dpu_reconciliations_due ON extsvc.dpu_reconciliations (next_due_at)
  WHERE next_due_at IS NOT NULL;

-- Per-DPU status of ALL_DPUS (site-wide) services, which have no attachments.
CREATE TABLE extsvc.site_service_dpu_status (
  service_id       uuid NOT NULL REFERENCES extsvc.service_records ON DELETE CASCADE,
  dpu_machine_id   uuid NOT NULL REFERENCES extsvc.dpus ON DELETE CASCADE,
  deployment_state text NOT NULL
    CHECK (deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN')),
  status_message   text,
  observed_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (service_id, dpu_machine_id)
);

-- ---- sql/parts/20_lifecycle.sql
-- The allowed service lifecycle changes. docs/lifecycle.md is generated from
-- this table (scripts/gen-lifecycle-doc.sh) and a test checks they agree.
INSERT INTO extsvc.lifecycle_transitions (from_state, to_state, actor, reason, description) VALUES
  (NULL,       'CREATING', 'api',    'create',              'DPF_HELM_CHART service created; intent persisted, no Kubernetes call yet'),
  (NULL,       'READY',    'api',    'create',              'KUBERNETES_POD service created (synchronous)'),
  ('CREATING', 'READY',    'worker', 'dpuservice_created',  'DPUService created by the worker'),
  ('CREATING', 'READY',    'worker', 'dpuservice_adopted',  'DPUService already existed with our ownership labels and identity'),
  ('CREATING', 'CREATING', 'api',    'superseded',          'data updated before the create was applied; the newest revision is created'),
  ('CREATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the DPUService (400/422 or similar)'),
  ('CREATING', 'FAILED',   'worker', 'ownership_conflict',  'an object with the generated name belongs to someone else'),
  ('CREATING', 'DELETING', 'api',    'delete',              'delete requested before the create finished; the delete wins'),
  ('READY',    'UPDATING', 'api',    'update',              'new Helm revision requested'),
  ('READY',    'READY',    'api',    'new_version',         'KUBERNETES_POD data changed: new version'),
  ('READY',    'READY',    'api',    'version_deleted',     'KUBERNETES_POD version deleted'),
  ('READY',    'READY',    'worker', 'drift_recreated',     'the DPUService was missing and was re-created'),
  ('READY',    'READY',    'worker', 'drift_patched',       'the DPUService spec had drifted and was patched back'),
  ('READY',    'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('READY',    'FAILED',   'worker', 'permanent_error',     'a drift repair was refused by the API'),
  ('READY',    'DELETING', 'api',    'delete',              'delete requested'),
  ('READY',    'DELETED',  'api',    'delete',              'KUBERNETES_POD service deleted (synchronous)'),
  ('UPDATING', 'READY',    'worker', 'revision_applied',    'DPF accepted the desired revision'),
  ('UPDATING', 'UPDATING', 'api',    'superseded',          'data updated again before the pending revision was applied'),
  ('UPDATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the patch (400/422 or similar)'),
  ('UPDATING', 'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('UPDATING', 'FAILED',   'worker', 'dpuservice_missing',  'the DPUService disappeared during an update'),
  ('UPDATING', 'DELETING', 'api',    'delete',              'delete requested during an update; the delete wins'),
  ('FAILED',   'CREATING', 'api',    'update',              'new definition for a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'update',              'new definition for a service that exists in DPF'),
  ('FAILED',   'CREATING', 'api',    'retry',               'operator retry of a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'retry',               'operator retry of a service that exists in DPF'),
  ('FAILED',   'DELETING', 'api',    'delete',              'delete requested'),
  ('DELETING', 'DELETED',  'worker', 'dpuservice_deleted',  'the API answered 404: the DPUService and its finalizers are gone'),
  ('DELETING', 'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name belongs to someone else; not deleted'),
  ('DELETING', 'FAILED',   'worker', 'permanent_error',     'the API refused the delete');

-- Refuses any lifecycle change not in extsvc.lifecycle_transitions; the
-- AFTER trigger below records every allowed one in the history.
CREATE FUNCTION extsvc._check_lifecycle_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_from text := CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.lifecycle_state END;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NEW;
  END IF;
  IF NOT EXISTS (
      SELECT FROM extsvc.lifecycle_transitions t
      WHERE t.from_state IS NOT DISTINCT FROM v_from
        AND t.to_state = NEW.lifecycle_state
        AND t.actor = NEW.state_actor
        AND t.reason = NEW.state_reason) THEN
    RAISE EXCEPTION 'lifecycle transition % -> % by % (%) is not allowed',
        coalesce(v_from, '(new)'), NEW.lifecycle_state, NEW.state_actor, NEW.state_reason
      USING ERRCODE = '55000',
            DETAIL = format('service_id: %s', NEW.service_id),
            HINT = 'See extsvc.lifecycle_transitions for the allowed changes.';
  END IF;
  RETURN NEW;
END
$fn$;

CREATE FUNCTION extsvc._record_lifecycle_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NULL;
  END IF;
  INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision)
  VALUES (NEW.service_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.lifecycle_state END, NEW.lifecycle_state,
          NEW.state_actor, NEW.state_reason, NEW.status_message, NEW.desired_revision);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER lifecycle_transition_check
  BEFORE INSERT OR UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_lifecycle_transition();

CREATE TRIGGER lifecycle_transition_history
  AFTER INSERT OR UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._record_lifecycle_transition();

-- Same-state events (supersede, drift repair, Pod versions) are checked
-- against the same table and recorded the same way.
CREATE FUNCTION extsvc._record_event(p_service_id uuid, p_state text, p_actor text, p_reason text,
                                     p_message text DEFAULT NULL, p_revision integer DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.lifecycle_transitions t
                 WHERE t.from_state = p_state AND t.to_state = p_state
                   AND t.actor = p_actor AND t.reason = p_reason) THEN
    RAISE EXCEPTION 'lifecycle event % on % by % is not allowed', p_reason, p_state, p_actor
      USING ERRCODE = '55000', HINT = 'See extsvc.lifecycle_transitions.';
  END IF;
  INSERT INTO extsvc.service_state_history (service_id, from_state, to_state, actor, reason, message, revision)
  VALUES (p_service_id, p_state, p_state, p_actor, p_reason, p_message, p_revision);
END
$fn$;

-- ---- sql/parts/30_native.sql
-- Native (C++) functions. The leading underscore marks internals; the public
-- API wraps them below.

CREATE FUNCTION extsvc._validate_helm_chart_data(data text) RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_validate_helm_chart_data';

CREATE FUNCTION extsvc._dpf_service_name(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_dpf_service_name';

CREATE FUNCTION extsvc._placement_label_key(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_placement_label_key';

CREATE FUNCTION extsvc._render_dpuservice(service_id uuid, version text, data jsonb, namespace text)
  RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_render_dpuservice';

CREATE FUNCTION extsvc.repo_url_matches(allowlist_entry text, repo_url text) RETURNS boolean
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_repo_url_matches';
COMMENT ON FUNCTION extsvc.repo_url_matches(text, text) IS
  'True when an allow-list entry admits a repoURL: same scheme, host and port, entry path a prefix at a segment boundary.';

CREATE FUNCTION extsvc.dpuservice_mutable_patch(live jsonb, desired jsonb) RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_mutable_patch';
COMMENT ON FUNCTION extsvc.dpuservice_mutable_patch(jsonb, jsonb) IS
  'The minimal JSON merge patch (RFC 7396) of the NICo-owned mutable DPUService fields that turns live into desired.';

CREATE FUNCTION extsvc.dpuservice_identity_mismatch(live jsonb, service_id uuid, version text, namespace text)
  RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_identity_mismatch';
COMMENT ON FUNCTION extsvc.dpuservice_identity_mismatch(jsonb, uuid, text, text) IS
  'Path of the first ownership or immutable-identity field of a live DPUService that is not ours; NULL when it is ours.';

CREATE FUNCTION extsvc._wake() RETURNS void
  LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_wake';

-- The namespace of the DPUService objects (GUC extsvc.namespace).
CREATE FUNCTION extsvc._namespace() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT coalesce(nullif(current_setting('extsvc.namespace', true), ''), 'dpf-operator-system')
$fn$;

-- Raises an error with SQLSTATE, one-line message, DETAIL and HINT.
CREATE FUNCTION extsvc._raise(p_sqlstate text, p_message text, p_detail text, p_hint text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message,
                        DETAIL = coalesce(p_detail, ''), HINT = coalesce(p_hint, '');
END
$fn$;

-- NICo ConfigVersion of version number n, stamped with the transaction time.
CREATE FUNCTION extsvc._config_version(n integer) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT format('V%s-T%s', n, (extract(epoch FROM now()) * 1000000)::bigint)
$fn$;

-- Is the session user a member of extsvc_admin? (Inside a SECURITY DEFINER
-- function current_user is the owner, so the caller is the session user.)
CREATE FUNCTION extsvc._caller_is_admin() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT pg_has_role(session_user, 'extsvc_admin', 'MEMBER')
$fn$;

-- ---- sql/parts/40_views.sql
-- The service view NICo reads. Column order of the leading columns is fixed
-- by the SQL API contract (SPEC 2.10); extras follow.
CREATE VIEW extsvc.services AS
SELECT s.service_id,
       s.tenant_organization_id,
       s.service_name,
       s.description,
       s.service_type,
       s.deployment_scope,
       s.dpu_target,
       s.lifecycle_state,
       CASE WHEN s.service_type = 'DPF_HELM_CHART' THEN s.attachable_version
            ELSE (SELECT v.version FROM extsvc.service_versions v
                  WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
                  ORDER BY v.version_number DESC LIMIT 1)
       END AS version,
       s.version_ctr,
       s.desired_revision,
       s.applied_revision,
       s.dpf_service_name,
       s.placement_label_key,
       s.status_message,
       s.created_at,
       s.updated_at,
       s.deleted_at,
       s.has_credential,
       s.observability
FROM extsvc.service_records s;
COMMENT ON VIEW extsvc.services IS 'One row per extension service (SPEC 2.10).';

-- Operators: the reconciliation queue with leases, attempts and last errors.
CREATE VIEW extsvc.reconciliation_queue AS
SELECT s.service_id, s.tenant_organization_id, s.service_name, s.dpf_service_name,
       s.lifecycle_state, s.desired_revision, s.applied_revision,
       r.state_version, r.attempts, r.next_due_at,
       r.next_due_at IS NOT NULL AND r.next_due_at <= now()
         AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now()) AS due,
       r.lease_owner, r.lease_expires_at, r.last_error, r.last_http_status, r.last_error_at,
       r.last_attempt_at, r.last_success_at, r.observed_generation
FROM extsvc.service_records s
JOIN extsvc.dpf_extension_service_reconciliations r USING (service_id);
COMMENT ON VIEW extsvc.reconciliation_queue IS
  'Per DPF service: what the worker has to do, when, who holds the lease and the last error.';

CREATE VIEW extsvc.service_history AS
SELECT h.id, h.service_id, s.service_name, h.from_state, h.to_state, h.actor, h.reason,
       h.message, h.revision, h.at
FROM extsvc.service_state_history h
JOIN extsvc.service_records s USING (service_id);
COMMENT ON VIEW extsvc.service_history IS 'Every lifecycle transition and event, oldest first by id.';

-- ---- sql/parts/50_services_api.sql
-- Service lifecycle API (SPEC 2.5, 2.9, 2.10). Every function only validates
-- and persists intent in the caller's transaction; none calls Kubernetes.

CREATE FUNCTION extsvc.validate_dpf_helm_chart_data(data text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._validate_helm_chart_data(data)
$fn$;
COMMENT ON FUNCTION extsvc.validate_dpf_helm_chart_data(text) IS
  'Parses DPF_HELM_CHART data strictly and returns its normalized form, or raises naming the JSON path.';

CREATE FUNCTION extsvc.dpf_service_name(service_id uuid, version text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._dpf_service_name(service_id, version)
$fn$;
COMMENT ON FUNCTION extsvc.dpf_service_name(uuid, text) IS
  'DPUService and Helm release name of a DPF service version: extsvc-<first 20 base32 chars of SHA-256(lower(uuid)/version)>.';

CREATE FUNCTION extsvc.placement_label_key(service_id uuid, version text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._placement_label_key(service_id, version)
$fn$;
COMMENT ON FUNCTION extsvc.placement_label_key(uuid, text) IS
  'Node label key that places a DPF service version on a DPU: nico/extsvc-<hash>, value enabled.';

-- The services row of one service (for return values).
CREATE FUNCTION extsvc._service_row(p_service_id uuid) RETURNS extsvc.services
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT * FROM extsvc.services s WHERE s.service_id = p_service_id
$fn$;

-- Refuses a chart that is not on the allow-list while enforcement is on.
CREATE FUNCTION extsvc._check_chart_allowed(p_data jsonb) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF coalesce(current_setting('extsvc.enforce_chart_allowlist', true), 'on') = 'off' THEN
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT FROM extsvc.chart_allowlist a
                 WHERE extsvc.repo_url_matches(a.repo_url, p_data->>'repoURL')
                   AND (a.chart_name = '' OR a.chart_name = p_data->>'chartName')) THEN
    PERFORM extsvc._raise('22023', 'chart is not on the chart allow-list',
      format('JSON path: $.repoURL (chart %s)', p_data->>'chartName'),
      'An operator (extsvc_admin) can allow it with extsvc.allow_chart(repo_url, chart_name).');
  END IF;
END
$fn$;

-- Refuses a display name that a live service of the tenant already uses.
CREATE FUNCTION extsvc._check_name_free(p_tenant text, p_name text, p_except uuid) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF EXISTS (SELECT FROM extsvc.service_records s
             WHERE s.tenant_organization_id = p_tenant AND lower(s.service_name) = lower(p_name)
               AND s.lifecycle_state <> 'DELETED' AND s.service_id IS DISTINCT FROM p_except) THEN
    PERFORM extsvc._raise('23505', 'service name is already in use by this tenant',
      format('service_name: %s', p_name),
      'Choose another name; a name becomes reusable once its service is DELETED.');
  END IF;
END
$fn$;

-- Marks a DPF service's reconciliation row as having new intent.
CREATE FUNCTION extsvc._intent_changed(p_service_id uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET state_version = r.state_version + 1, next_due_at = now(), attempts = 0,
         last_error = NULL, last_http_status = NULL, last_error_at = NULL
   WHERE r.service_id = p_service_id;
  PERFORM extsvc._wake();
END
$fn$;

CREATE FUNCTION extsvc.create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_id      uuid := coalesce(create_service.service_id, gen_random_uuid());
  v_type    text := upper(btrim(create_service.service_type));
  v_scope   text := coalesce(upper(btrim(create_service.deployment_scope)), 'INSTANCE_DPUS');
  v_target  text := upper(btrim(create_service.dpu_target));
  v_name    text := btrim(create_service.service_name);
  v_data    jsonb;
  v_version text := extsvc._config_version(1);
  v_existing extsvc.service_records;
BEGIN
  IF create_service.tenant_organization_id IS NULL OR btrim(create_service.tenant_organization_id) = '' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must not be empty', 'field: tenant_organization_id',
                          'Pass the tenant organization id of the service owner.');
  END IF;
  IF v_name IS NULL OR v_name = '' OR length(v_name) > 256 THEN
    PERFORM extsvc._raise('22023', 'service_name must be 1 to 256 characters', 'field: service_name',
                          'Pass a non-empty display name.');
  END IF;
  IF length(create_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;
  IF v_type IS NULL OR v_type NOT IN ('KUBERNETES_POD', 'DPF_HELM_CHART') THEN
    PERFORM extsvc._raise('22023', 'unknown service_type', format('field: service_type = %s', create_service.service_type),
                          'Use KUBERNETES_POD or DPF_HELM_CHART.');
  END IF;
  IF v_scope NOT IN ('INSTANCE_DPUS', 'ALL_DPUS') THEN
    PERFORM extsvc._raise('22023', 'unknown deployment_scope', format('field: deployment_scope = %s', create_service.deployment_scope),
                          'Use INSTANCE_DPUS (default) or ALL_DPUS.');
  END IF;
  IF v_target IS NOT NULL AND v_target NOT IN ('PRIMARY', 'ALL_ACTIVE', 'ALL') THEN
    PERFORM extsvc._raise('22023', 'unknown dpu_target', format('field: dpu_target = %s', create_service.dpu_target),
                          'Use PRIMARY, ALL_ACTIVE or ALL.');
  END IF;
  IF create_service.data IS NULL THEN
    PERFORM extsvc._raise('22023', 'data must not be NULL', 'field: data', 'Pass the service definition.');
  END IF;

  IF v_type = 'DPF_HELM_CHART' THEN
    IF coalesce(create_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF create_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF v_scope = 'ALL_DPUS' THEN
      IF NOT extsvc._caller_is_admin() THEN
        PERFORM extsvc._raise('42501', 'only extsvc_admin members may create ALL_DPUS services',
                              'field: deployment_scope = ALL_DPUS', 'Ask an operator to create site-wide services.');
      END IF;
      IF v_target IS NOT NULL THEN
        PERFORM extsvc._raise('22023', 'dpu_target must be NULL for ALL_DPUS services', 'field: dpu_target',
                              'Omit dpu_target: an ALL_DPUS service runs on every registered DPU.');
      END IF;
    ELSIF v_target IS NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target is required for INSTANCE_DPUS services', 'field: dpu_target',
                            'Use PRIMARY, ALL_ACTIVE or ALL.');
    END IF;
    v_data := extsvc._validate_helm_chart_data(create_service.data);
    PERFORM extsvc._check_chart_allowed(v_data);
  ELSE
    IF v_target IS NOT NULL THEN
      PERFORM extsvc._raise('22023', 'dpu_target applies only to DPF_HELM_CHART services', 'field: dpu_target',
                            'Omit dpu_target for KUBERNETES_POD services.');
    END IF;
    IF v_scope <> 'INSTANCE_DPUS' THEN
      PERFORM extsvc._raise('22023', 'ALL_DPUS applies only to DPF_HELM_CHART services', 'field: deployment_scope',
                            'Omit deployment_scope for KUBERNETES_POD services.');
    END IF;
    IF btrim(create_service.data) = '' OR octet_length(create_service.data) > 131072 THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data',
                            'Pass the pod definition.');
    END IF;
  END IF;

  -- A repeated create with the same id and the same request returns the
  -- existing service; anything else with that id is a conflict.
  SELECT * INTO v_existing FROM extsvc.service_records s WHERE s.service_id = v_id FOR UPDATE;
  IF FOUND THEN
    IF v_existing.tenant_organization_id = create_service.tenant_organization_id
       AND v_existing.service_name = v_name
       AND v_existing.service_type = v_type
       AND v_existing.deployment_scope = v_scope
       AND v_existing.dpu_target IS NOT DISTINCT FROM v_target
       AND v_existing.description IS NOT DISTINCT FROM create_service.description
       AND v_existing.lifecycle_state NOT IN ('DELETING', 'DELETED')
       AND ((v_type = 'DPF_HELM_CHART'
             AND (SELECT r.data FROM extsvc.helm_revisions r
                   WHERE r.service_id = v_id AND r.revision = v_existing.desired_revision) = v_data)
         OR (v_type = 'KUBERNETES_POD'
             AND (SELECT v.data FROM extsvc.service_versions v WHERE v.service_id = v_id
                   ORDER BY v.version_number DESC LIMIT 1) = create_service.data)) THEN
      RETURN extsvc._service_row(v_id);
    END IF;
    PERFORM extsvc._raise('23505', 'service_id already exists', format('service_id: %s', v_id),
                          'Repeat a create only with identical arguments, or omit service_id.');
  END IF;

  PERFORM extsvc._check_name_free(create_service.tenant_organization_id, v_name, NULL);

  IF v_type = 'DPF_HELM_CHART' THEN
    IF EXISTS (SELECT FROM extsvc.service_records s
               WHERE s.dpf_service_name = extsvc._dpf_service_name(v_id, v_version)) THEN
      PERFORM extsvc._raise('23505', 'generated DPUService name collides with another service',
        format('dpf_service_name: %s', extsvc._dpf_service_name(v_id, v_version)),
        'Retry the create with another service_id.');
    END IF;
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        attachable_version, desired_revision, dpf_service_name, placement_label_key, status_message)
    VALUES (v_id, create_service.tenant_organization_id, v_name, create_service.description,
        v_type, v_scope, v_target, 'CREATING', 'api', 'create',
        v_version, 1, extsvc._dpf_service_name(v_id, v_version), extsvc._placement_label_key(v_id, v_version),
        'waiting for the worker to create the DPUService');
    INSERT INTO extsvc.service_versions (service_id, version, version_number)
    VALUES (v_id, v_version, 1);
    INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (v_id, 1, v_data);
    INSERT INTO extsvc.dpf_extension_service_reconciliations (service_id, next_due_at) VALUES (v_id, now());
    PERFORM extsvc._wake();
  ELSE
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        has_credential, observability)
    VALUES (v_id, create_service.tenant_organization_id, v_name, create_service.description,
        v_type, v_scope, NULL, 'READY', 'api', 'create',
        coalesce(create_service.has_credential, false), create_service.observability);
    INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
    VALUES (v_id, v_version, 1, create_service.data, coalesce(create_service.has_credential, false),
            create_service.observability);
  END IF;
  RETURN extsvc._service_row(v_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Creates a service. DPF_HELM_CHART answers CREATING: the worker creates the DPUService later.';

CREATE FUNCTION extsvc.update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match integer DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s        extsvc.service_records;
  v_name   text := btrim(update_service.service_name);
  v_data   jsonb;
  v_cur    jsonb;
  v_rev    integer;
  v_next   text;
  v_vnum   integer;
BEGIN
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = update_service.service_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', update_service.service_id),
                          'Check the service id; deleted services stay visible in extsvc.services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    PERFORM extsvc._raise('55000', format('service is %s and cannot be updated', s.lifecycle_state),
                          format('service_id: %s, lifecycle_state: %s', s.service_id, s.lifecycle_state),
                          'Create a new service instead.');
  END IF;
  IF update_service.if_version_ctr_match IS NOT NULL AND update_service.if_version_ctr_match <> s.version_ctr THEN
    PERFORM extsvc._raise('55000', 'version_ctr does not match',
                          format('if_version_ctr_match: %s, version_ctr: %s', update_service.if_version_ctr_match, s.version_ctr),
                          'Re-read the service and retry with its current version_ctr.');
  END IF;
  IF update_service.service_name IS NOT NULL AND (v_name = '' OR length(v_name) > 256) THEN
    PERFORM extsvc._raise('22023', 'service_name must be 1 to 256 characters', 'field: service_name',
                          'Pass a non-empty display name.');
  END IF;
  IF length(update_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' THEN
    IF coalesce(update_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF update_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF update_service.data IS NOT NULL THEN
      v_data := extsvc._validate_helm_chart_data(update_service.data);
      PERFORM extsvc._check_chart_allowed(v_data);
    END IF;
  ELSIF update_service.data IS NOT NULL
        AND (btrim(update_service.data) = '' OR octet_length(update_service.data) > 131072) THEN
    PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data', 'Pass the pod definition.');
  END IF;

  IF v_name IS NOT NULL AND v_name <> s.service_name THEN
    PERFORM extsvc._check_name_free(s.tenant_organization_id, v_name, s.service_id);
    UPDATE extsvc.service_records r SET service_name = v_name, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;
  IF update_service.description IS NOT NULL AND update_service.description IS DISTINCT FROM s.description THEN
    UPDATE extsvc.service_records r SET description = update_service.description, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' AND v_data IS NOT NULL THEN
    SELECT r.data INTO v_cur FROM extsvc.helm_revisions r
     WHERE r.service_id = s.service_id AND r.revision = s.desired_revision;
    IF v_cur IS DISTINCT FROM v_data THEN
      v_rev := s.desired_revision + 1;
      INSERT INTO extsvc.helm_revisions (service_id, revision, data) VALUES (s.service_id, v_rev, v_data);
      -- a pending revision that never reached DPF is superseded, not lost
      UPDATE extsvc.helm_revisions r SET superseded_at = now()
       WHERE r.service_id = s.service_id AND r.revision = s.desired_revision AND r.applied_at IS NULL;
      v_next := CASE s.lifecycle_state
                  WHEN 'READY' THEN 'UPDATING'
                  WHEN 'FAILED' THEN CASE WHEN s.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END
                  ELSE s.lifecycle_state END;
      UPDATE extsvc.service_records r
         SET desired_revision = v_rev, version_ctr = r.version_ctr + 1, updated_at = now(),
             lifecycle_state = v_next, state_actor = 'api', state_reason = 'update',
             status_message = format('waiting for the worker to apply revision %s', v_rev)
       WHERE r.service_id = s.service_id;
      IF v_next = s.lifecycle_state THEN
        PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'api', 'superseded',
                                     format('revision %s supersedes revision %s', v_rev, s.desired_revision), v_rev);
      END IF;
      PERFORM extsvc._intent_changed(s.service_id);
    END IF;
  ELSIF s.service_type = 'KUBERNETES_POD' AND (update_service.data IS NOT NULL
        OR update_service.has_credential IS NOT NULL OR update_service.observability IS NOT NULL) THEN
    SELECT v.version_number INTO v_vnum FROM extsvc.service_versions v
     WHERE v.service_id = s.service_id ORDER BY v.version_number DESC LIMIT 1;
    IF update_service.data IS NOT NULL AND EXISTS (
         SELECT FROM extsvc.service_versions v WHERE v.service_id = s.service_id
            AND v.version_number = v_vnum AND v.deleted_at IS NULL AND v.data = update_service.data
            AND v.has_credential = coalesce(update_service.has_credential, v.has_credential)
            AND v.observability IS NOT DISTINCT FROM coalesce(update_service.observability, v.observability)) THEN
      NULL;  -- same definition: idempotent no-op
    ELSE
      INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
      SELECT s.service_id, extsvc._config_version(v_vnum + 1), v_vnum + 1,
             coalesce(update_service.data, v.data),
             coalesce(update_service.has_credential, v.has_credential),
             coalesce(update_service.observability, v.observability)
        FROM extsvc.service_versions v WHERE v.service_id = s.service_id AND v.version_number = v_vnum;
      UPDATE extsvc.service_records r
         SET version_ctr = r.version_ctr + 1, updated_at = now(),
             has_credential = coalesce(update_service.has_credential, r.has_credential),
             observability = coalesce(update_service.observability, r.observability)
       WHERE r.service_id = s.service_id;
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'new_version',
                                   format('version %s', extsvc._config_version(v_vnum + 1)), NULL);
    END IF;
  END IF;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.update_service(uuid, text, text, text, integer, boolean, jsonb) IS
  'Updates name, description or data. A DPF data change becomes a new Helm revision; the same data again is a no-op.';

-- Instances whose configuration or attachments still reference a service.
CREATE FUNCTION extsvc._blocking_instances(p_service_id uuid, p_version text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT string_agg(x.instance_id::text, ', ' ORDER BY x.instance_id::text)
  FROM (SELECT DISTINCT i.instance_id
          FROM extsvc.instance_extension_services i
         WHERE i.service_id = p_service_id AND (p_version IS NULL OR i.version = p_version)
        UNION
        SELECT DISTINCT a.instance_id
          FROM extsvc.dpf_extension_service_attachments a
         WHERE a.service_id = p_service_id AND (p_version IS NULL OR a.version = p_version)
         LIMIT 20) x
$fn$;

CREATE FUNCTION extsvc.delete_service(service_id uuid, version text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s          extsvc.service_records;
  v_blocking text;
BEGIN
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = delete_service.service_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', delete_service.service_id),
                          'Check the service id.');
  END IF;
  IF delete_service.version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v
        WHERE v.service_id = s.service_id AND v.version = delete_service.version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', s.service_id, delete_service.version),
                          'List the versions with SELECT version FROM extsvc.services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    RETURN extsvc._service_row(s.service_id);   -- idempotent
  END IF;

  IF s.service_type = 'KUBERNETES_POD' THEN
    SELECT string_agg(DISTINCT i.instance_id::text, ', ') INTO v_blocking
      FROM extsvc.instance_extension_services i
     WHERE i.service_id = s.service_id AND i.removed_at IS NULL
       AND (delete_service.version IS NULL OR i.version = delete_service.version);
    IF v_blocking IS NOT NULL THEN
      PERFORM extsvc._raise('55000', 'service is still attached to instances',
                            format('instances: %s', v_blocking),
                            'Detach the service from these instances first.');
    END IF;
    UPDATE extsvc.service_versions v SET deleted_at = now()
     WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
       AND (delete_service.version IS NULL OR v.version = delete_service.version);
    IF NOT EXISTS (SELECT FROM extsvc.service_versions v
                    WHERE v.service_id = s.service_id AND v.deleted_at IS NULL) THEN
      UPDATE extsvc.service_records r
         SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'delete',
             deleted_at = now(), delete_requested_at = now(), updated_at = now(), status_message = NULL
       WHERE r.service_id = s.service_id;
    ELSE
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'version_deleted',
                                   format('version %s', delete_service.version), NULL);
    END IF;
    RETURN extsvc._service_row(s.service_id);
  END IF;

  -- DPF_HELM_CHART: blocked while any attachment or tombstone references it.
  v_blocking := extsvc._blocking_instances(s.service_id, NULL);
  IF v_blocking IS NOT NULL THEN
    PERFORM extsvc._raise('55000', 'service still has active or removing attachments',
                          format('instances: %s', v_blocking),
                          'Detach the service from these instances and wait until their DPUs report TERMINATED.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = 'DELETING', state_actor = 'api', state_reason = 'delete',
         delete_requested_at = now(), updated_at = now(),
         status_message = 'waiting for the worker to delete the DPUService'
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service(uuid, text) IS
  'Deletes a service (or one KUBERNETES_POD version). DPF services go DELETING; the worker finishes the delete.';

CREATE FUNCTION extsvc.render_dpuservice(service_id uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  v_data jsonb;
BEGIN
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = render_dpuservice.service_id;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', render_dpuservice.service_id),
                          'Check the service id.');
  END IF;
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services have a DPUService',
                          format('service_type: %s', s.service_type), 'Pass the id of a DPF_HELM_CHART service.');
  END IF;
  SELECT r.data INTO v_data FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id AND r.revision = s.desired_revision;
  RETURN extsvc._render_dpuservice(s.service_id, s.attachable_version, v_data, extsvc._namespace());
END
$fn$;
COMMENT ON FUNCTION extsvc.render_dpuservice(uuid) IS
  'The DPUService object of the desired revision, as the worker sends it to the management cluster.';

CREATE FUNCTION extsvc.allow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_probe text;
BEGIN
  IF NOT extsvc._caller_is_admin() THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may change the chart allow-list',
                          'function: extsvc.allow_chart', 'Ask an operator.');
  END IF;
  -- The entry must itself be a valid repository URL.
  v_probe := format('{"repoURL":%s,"chartName":"probe","chartVersion":"1.0.0","security":{"privileged":false}}',
                    to_json(allow_chart.repo_url));
  PERFORM extsvc._validate_helm_chart_data(v_probe);
  INSERT INTO extsvc.chart_allowlist (repo_url, chart_name)
  VALUES (rtrim(allow_chart.repo_url, '/'), coalesce(allow_chart.chart_name, ''))
  ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION extsvc.allow_chart(text, text) IS
  'Admin: allow charts from a repository URL prefix (chart_name NULL = any chart).';

CREATE FUNCTION extsvc.disallow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT extsvc._caller_is_admin() THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may change the chart allow-list',
                          'function: extsvc.disallow_chart', 'Ask an operator.');
  END IF;
  DELETE FROM extsvc.chart_allowlist a
   WHERE a.repo_url = rtrim(disallow_chart.repo_url, '/')
     AND a.chart_name = coalesce(disallow_chart.chart_name, '');
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'allow-list entry not found',
                          format('repo_url: %s, chart_name: %s', disallow_chart.repo_url, coalesce(disallow_chart.chart_name, '(any)')),
                          'List entries with SELECT * FROM extsvc.chart_allowlist.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc.disallow_chart(text, text) IS 'Admin: remove an allow-list entry.';

-- ---- sql/parts/60_worker_api.sql
-- The worker's side of the queue. A worker claims due rows (stamping a lease),
-- commits, talks to Kubernetes outside any transaction, then records the
-- outcome with a compare-and-swap on (state_version, lease_token).

-- Exponential backoff with positive jitter, bounded by extsvc.retry_cap and
-- never shorter than the server's Retry-After.
CREATE FUNCTION extsvc._backoff(p_attempts integer, p_retry_after_s double precision DEFAULT NULL)
RETURNS interval LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  WITH cfg AS (
    SELECT coalesce(nullif(current_setting('extsvc.retry_base', true), ''), '500ms')::interval AS base,
           coalesce(nullif(current_setting('extsvc.retry_cap', true), ''), '300s')::interval AS cap)
  SELECT greatest(
           least(cfg.cap, cfg.base * power(2, least(greatest(p_attempts, 1) - 1, 30)))
             * (1 + 0.2 * random()),
           coalesce(p_retry_after_s, 0) * interval '1 second')
  FROM cfg
$fn$;

CREATE FUNCTION extsvc.claim_reconciliations(worker text, batch_size integer DEFAULT 32,
                                             lease_seconds integer DEFAULT 60)
RETURNS TABLE (service_id uuid, state_version bigint, lease_token uuid, lifecycle_state text,
               deployment_scope text, dpf_service_name text, attachable_version text,
               desired_revision integer, applied_revision integer, attempts integer,
               desired jsonb, placement_clear boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.service_id
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY r.next_due_at
     LIMIT greatest(claim_reconciliations.batch_size, 1)
       FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE extsvc.dpf_extension_service_reconciliations r
       SET lease_owner = claim_reconciliations.worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => claim_reconciliations.lease_seconds),
           last_attempt_at = now()
      FROM due
     WHERE r.service_id = due.service_id
    RETURNING r.service_id, r.state_version, r.lease_token, r.attempts
  )
  SELECT c.service_id, c.state_version, c.lease_token, s.lifecycle_state, s.deployment_scope,
         s.dpf_service_name, s.attachable_version, s.desired_revision, s.applied_revision, c.attempts,
         extsvc._render_dpuservice(s.service_id, s.attachable_version, h.data, extsvc._namespace()),
         -- an ALL_DPUS service is deleted only after its labels are gone everywhere
         CASE WHEN s.deployment_scope = 'ALL_DPUS' AND s.lifecycle_state = 'DELETING'
              THEN extsvc._site_service_cleared(s.service_id) ELSE true END
    FROM claimed c
    JOIN extsvc.service_records s ON s.service_id = c.service_id
    JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_reconciliations(text, integer, integer) IS
  'Worker: lease up to batch_size due DPF services (FOR UPDATE SKIP LOCKED) and return what to do for each.';

-- Records one outcome. outcome is one of
--   transition  lifecycle change to new_state for reason (READY, DELETED, FAILED)
--   event       same-state event (drift_recreated, drift_patched) and done
--   done        nothing changed; nothing more to do until new intent or drift
--   retry       transient failure: back off (attempts + 1), keep the error
--   poll        waiting on the cluster (finalizers): check again after a backoff
-- Returns 'applied', 'stale' (intent changed meanwhile: re-queued at once) or
-- 'lost' (the lease is gone; nothing written).
CREATE FUNCTION extsvc.complete_reconciliation(
    service_id uuid, state_version bigint, lease_token uuid, outcome text,
    new_state text DEFAULT NULL, reason text DEFAULT NULL, message text DEFAULT NULL,
    applied_revision integer DEFAULT NULL, http_status integer DEFAULT NULL,
    retry_after_s double precision DEFAULT NULL, observed_generation bigint DEFAULT NULL,
    observed_resource_version text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r extsvc.dpf_extension_service_reconciliations;
  s extsvc.service_records;
  o text := complete_reconciliation.outcome;
BEGIN
  SELECT * INTO r FROM extsvc.dpf_extension_service_reconciliations q
   WHERE q.service_id = complete_reconciliation.service_id FOR UPDATE;
  IF NOT FOUND OR r.lease_token IS DISTINCT FROM complete_reconciliation.lease_token THEN
    RETURN 'lost';
  END IF;
  IF r.state_version <> complete_reconciliation.state_version THEN
    -- newer intent arrived while the worker was talking to Kubernetes:
    -- drop this result and let the next pass work from the newest intent
    UPDATE extsvc.dpf_extension_service_reconciliations q
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
     WHERE q.service_id = r.service_id;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;
  SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = r.service_id FOR UPDATE;

  IF o = 'transition' THEN
    IF complete_reconciliation.new_state = 'READY' AND complete_reconciliation.applied_revision IS NOT NULL THEN
      UPDATE extsvc.helm_revisions h SET applied_at = now()
       WHERE h.service_id = s.service_id AND h.revision = complete_reconciliation.applied_revision
         AND h.applied_at IS NULL;
    END IF;
    UPDATE extsvc.service_records x
       SET lifecycle_state = complete_reconciliation.new_state, state_actor = 'worker',
           state_reason = complete_reconciliation.reason,
           applied_revision = CASE WHEN complete_reconciliation.new_state = 'READY'
                                   THEN coalesce(complete_reconciliation.applied_revision, x.applied_revision)
                                   ELSE x.applied_revision END,
           status_message = complete_reconciliation.message,
           deleted_at = CASE WHEN complete_reconciliation.new_state = 'DELETED' THEN now() END,
           updated_at = now()
     WHERE x.service_id = s.service_id;
    IF complete_reconciliation.new_state = 'DELETED' THEN
      UPDATE extsvc.service_versions v SET deleted_at = now()
       WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
    END IF;
  ELSIF o = 'event' THEN
    PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'worker', complete_reconciliation.reason,
                                 complete_reconciliation.message, s.applied_revision);
  ELSIF o NOT IN ('done', 'retry', 'poll') THEN
    PERFORM extsvc._raise('22023', 'unknown reconciliation outcome', format('outcome: %s', o),
                          'Use transition, event, done, retry or poll.');
  END IF;

  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN o = 'retry' THEN q.attempts + 1
                         WHEN o = 'poll' THEN q.attempts + 1 ELSE 0 END,
         next_due_at = CASE
           WHEN o IN ('retry', 'poll') THEN now() + extsvc._backoff(q.attempts + 1, complete_reconciliation.retry_after_s)
           ELSE NULL END,
         last_error = CASE WHEN o = 'retry' THEN complete_reconciliation.message
                           WHEN o = 'poll' THEN q.last_error ELSE NULL END,
         last_http_status = CASE WHEN o = 'retry' THEN complete_reconciliation.http_status
                                 WHEN o = 'poll' THEN q.last_http_status ELSE NULL END,
         last_error_at = CASE WHEN o = 'retry' THEN now() WHEN o = 'poll' THEN q.last_error_at ELSE NULL END,
         last_success_at = CASE WHEN o IN ('transition', 'event', 'done', 'poll') THEN now() ELSE q.last_success_at END,
         observed_generation = coalesce(complete_reconciliation.observed_generation, q.observed_generation),
         observed_resource_version = coalesce(complete_reconciliation.observed_resource_version, q.observed_resource_version)
   WHERE q.service_id = r.service_id;
  IF o = 'retry' THEN
    UPDATE extsvc.service_records x
       SET status_message = complete_reconciliation.message, updated_at = now()
     WHERE x.service_id = s.service_id AND x.status_message IS DISTINCT FROM complete_reconciliation.message;
  END IF;
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete_reconciliation(uuid, bigint, uuid, text, text, text, text, integer, integer, double precision, bigint, text) IS
  'Worker: record the outcome of a claimed reconciliation with compare-and-swap on state_version and lease_token.';

-- What the drift detector compares with the cluster: every DPF service that
-- should have a DPUService right now, with its desired object.
CREATE FUNCTION extsvc.resync_snapshot()
RETURNS TABLE (service_id uuid, dpf_service_name text, lifecycle_state text, desired jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, s.dpf_service_name, s.lifecycle_state,
         extsvc._render_dpuservice(s.service_id, s.attachable_version, h.data, extsvc._namespace())
    FROM extsvc.service_records s
    JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
   WHERE s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY'
$fn$;

-- Drift found: make a READY service due now (no-op if it is already due).
CREATE FUNCTION extsvc.mark_drift(service_id uuid, detail text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now(), last_error = coalesce(mark_drift.detail, q.last_error)
   WHERE q.service_id = mark_drift.service_id AND q.next_due_at IS NULL
     AND EXISTS (SELECT FROM extsvc.service_records s
                  WHERE s.service_id = q.service_id AND s.lifecycle_state = 'READY');
  RETURN FOUND;
END
$fn$;

-- Operators ------------------------------------------------------------------

CREATE FUNCTION extsvc.reconcile_now(service_id uuid DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now()
    FROM extsvc.service_records s
   WHERE s.service_id = q.service_id
     AND (reconcile_now.service_id IS NULL OR q.service_id = reconcile_now.service_id)
     AND s.lifecycle_state IN ('CREATING', 'READY', 'UPDATING', 'DELETING');
  GET DIAGNOSTICS n = ROW_COUNT;
  IF reconcile_now.service_id IS NOT NULL AND n = 0 THEN
    PERFORM extsvc._raise('P0002', 'no reconcilable DPF service with that id',
                          format('service_id: %s', reconcile_now.service_id),
                          'FAILED services need extsvc.retry_service; DELETED ones are final.');
  END IF;
  PERFORM extsvc._wake();
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.reconcile_now(uuid) IS
  'Operator: make one (or every) DPF service due now and wake the workers. Returns how many.';

CREATE FUNCTION extsvc.retry_service(service_id uuid) RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
BEGIN
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = retry_service.service_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', retry_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.lifecycle_state <> 'FAILED' THEN
    PERFORM extsvc._raise('55000', 'only FAILED services can be retried',
                          format('lifecycle_state: %s', s.lifecycle_state), 'Use extsvc.reconcile_now for other states.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = CASE WHEN r.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END,
         state_actor = 'api', state_reason = 'retry', updated_at = now(),
         status_message = 'retry requested by an operator'
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.retry_service(uuid) IS
  'Operator: retry a FAILED DPF service with its newest definition.';

CREATE FUNCTION extsvc.worker_status(
    OUT slot integer, OUT pid integer, OUT iterations bigint, OUT claimed bigint,
    OUT completed bigint, OUT stale bigint, OUT http_requests bigint, OUT http_errors bigint,
    OUT last_activity timestamptz)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_status';
COMMENT ON FUNCTION extsvc.worker_status() IS
  'Operator: one row per worker slot with counters since server start (needs shared_preload_libraries).';

CREATE FUNCTION extsvc.request_resync() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_request_resync';
COMMENT ON FUNCTION extsvc.request_resync() IS
  'Operator: run the drift-detecting resync pass now instead of at the next extsvc.resync_interval.';

-- ---- sql/parts/70_placement.sql
-- DPU and instance registry, attachments, per-DPU status (SPEC 2.4, 2.7, 2.8)

-- Wanted on every registered DPU: ALL_DPUS services that DPF has accepted and
-- that are not being deleted.
CREATE FUNCTION extsvc._site_service_wanted(p_state text, p_applied integer) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT p_state IN ('READY', 'UPDATING') OR (p_state = 'FAILED' AND p_applied IS NOT NULL)
$fn$;

-- The desired NICo-owned label set of every DPU, derived from the active
-- attachments and the ALL_DPUS services (reference-counted by construction:
-- a key is wanted while at least one reason exists).
CREATE VIEW extsvc.dpu_desired_labels AS
SELECT a.dpu_machine_id, s.placement_label_key AS label_key, s.service_id, a.version,
       'attachment'::text AS reason, a.instance_id
  FROM extsvc.dpf_extension_service_attachments a
  JOIN extsvc.service_records s USING (service_id)
 WHERE a.placement_state = 'ACTIVE'
UNION ALL
SELECT d.machine_id, s.placement_label_key, s.service_id, s.attachable_version, 'all_dpus', NULL
  FROM extsvc.dpus d
  CROSS JOIN extsvc.service_records s
 WHERE d.deregistered_at IS NULL
   AND s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
   AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision);
COMMENT ON VIEW extsvc.dpu_desired_labels IS
  'Per DPU: every NICo placement label it should carry and why (attachment or ALL_DPUS service).';

-- Marks a DPU's placement work as due now (its desired labels may have changed).
CREATE FUNCTION extsvc._touch_dpu(p_dpu uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  INSERT INTO extsvc.dpu_reconciliations AS q (dpu_machine_id, next_due_at)
  VALUES (p_dpu, now())
  ON CONFLICT (dpu_machine_id) DO UPDATE
    SET state_version = q.state_version + 1, next_due_at = now(), attempts = 0;
  PERFORM extsvc._wake();
END
$fn$;

CREATE FUNCTION extsvc._attachment_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM extsvc._touch_dpu(NEW.dpu_machine_id);
  ELSIF TG_OP = 'UPDATE' THEN
    IF NEW.placement_state IS DISTINCT FROM OLD.placement_state THEN
      PERFORM extsvc._touch_dpu(NEW.dpu_machine_id);
    END IF;
  ELSIF OLD.placement_state = 'ACTIVE' THEN
    PERFORM extsvc._touch_dpu(OLD.dpu_machine_id);
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER attachment_wakes_dpu
  AFTER INSERT OR DELETE OR UPDATE OF placement_state ON extsvc.dpf_extension_service_attachments
  FOR EACH ROW EXECUTE FUNCTION extsvc._attachment_changed();

-- A DPF service's lifecycle change alters what its DPUs should show (labels
-- for ALL_DPUS, pod revisions for everyone): observe them again.
CREATE FUNCTION extsvc._service_state_wakes_dpus() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  d uuid;
BEGIN
  IF NEW.service_type <> 'DPF_HELM_CHART' OR NEW.lifecycle_state = OLD.lifecycle_state THEN
    RETURN NULL;
  END IF;
  IF NEW.deployment_scope = 'ALL_DPUS' THEN
    FOR d IN SELECT machine_id FROM extsvc.dpus LOOP
      PERFORM extsvc._touch_dpu(d);
    END LOOP;
  ELSE
    FOR d IN SELECT DISTINCT dpu_machine_id FROM extsvc.dpf_extension_service_attachments
              WHERE service_id = NEW.service_id LOOP
      PERFORM extsvc._touch_dpu(d);
    END LOOP;
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER service_state_wakes_dpus
  AFTER UPDATE OF lifecycle_state ON extsvc.service_records
  FOR EACH ROW EXECUTE FUNCTION extsvc._service_state_wakes_dpus();

-- Target resolution (SPEC 2.4). NULL when unresolvable: callers never invent
-- an empty set (that would remove labels).
CREATE FUNCTION extsvc._resolve_targets(p_instance uuid, p_target text) RETURNS uuid[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  v uuid[];
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance;
  IF p_target = 'ALL' THEN
    SELECT array_agg(machine_id ORDER BY machine_id) INTO v FROM extsvc.dpus
     WHERE host_machine_id = i.host_machine_id AND deregistered_at IS NULL;
  ELSIF p_target = 'PRIMARY' THEN
    SELECT array_agg(machine_id) INTO v FROM extsvc.dpus
     WHERE host_machine_id = i.host_machine_id AND is_primary AND deregistered_at IS NULL;
  ELSIF p_target = 'ALL_ACTIVE' THEN
    IF EXISTS (SELECT FROM unnest(i.network_dpus) n(id)
                WHERE NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = n.id
                                    AND d.host_machine_id = i.host_machine_id AND d.deregistered_at IS NULL)) THEN
      RETURN NULL;  -- a network DPU that is not attached to the host
    END IF;
    SELECT array_agg(DISTINCT n.id ORDER BY n.id) INTO v FROM unnest(i.network_dpus) n(id);
  END IF;
  IF v IS NULL OR cardinality(v) = 0 THEN
    RETURN NULL;
  END IF;
  RETURN v;
END
$fn$;

-- Brings an instance's attachment rows in line with its configuration.
-- Rows are written before any label changes (the worker reads them).
-- p_strict: an unresolvable target of an active DPF entry is an error
-- (new attachments); otherwise the entry's rows are left untouched.
CREATE FUNCTION extsvc._materialize_instance(p_instance uuid, p_strict boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e record;
  v_targets uuid[];
  v_host uuid[];
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance FOR UPDATE;
  SELECT coalesce(array_agg(machine_id), '{}') INTO v_host FROM extsvc.dpus
   WHERE host_machine_id = i.host_machine_id AND deregistered_at IS NULL;
  FOR e IN
    SELECT c.service_id, c.version, c.removed_at, c.attached_at, s.dpu_target, s.service_name
      FROM extsvc.instance_extension_services c
      JOIN extsvc.service_records s USING (service_id)
     WHERE c.instance_id = p_instance AND s.service_type = 'DPF_HELM_CHART'
  LOOP
    IF e.removed_at IS NULL AND i.delete_requested_at IS NULL THEN
      v_targets := extsvc._resolve_targets(p_instance, e.dpu_target);
      IF v_targets IS NULL THEN
        -- only an entry attached by this very transaction is refused; an
        -- older one keeps its rows until its target resolves again
        IF p_strict AND e.attached_at = now() THEN
          PERFORM extsvc._raise('P0002', format('no DPU matches dpu_target %s for service %s', e.dpu_target, e.service_name),
            format('instance_id: %s, host_machine_id: %s, service_id: %s', p_instance, i.host_machine_id, e.service_id),
            'Register the host''s DPUs (extsvc.register_dpu) and its network DPUs (extsvc.upsert_instance) first.');
        END IF;
        CONTINUE;  -- keep whatever is there: never an invented empty set
      END IF;
      INSERT INTO extsvc.dpf_extension_service_attachments AS a
             (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state)
      SELECT p_instance, t.id, e.service_id, e.version, 'ACTIVE', 'PENDING' FROM unnest(v_targets) t(id)
      ON CONFLICT (instance_id, dpu_machine_id, service_id, version) DO UPDATE
        SET placement_state = 'ACTIVE', removing_since = NULL, updated_at = now(), status_message = NULL,
            deployment_state = CASE WHEN a.placement_state = 'ACTIVE' THEN a.deployment_state ELSE 'PENDING' END
        WHERE a.placement_state <> 'ACTIVE';
      UPDATE extsvc.dpf_extension_service_attachments a
         SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
       WHERE a.instance_id = p_instance AND a.service_id = e.service_id AND a.version = e.version
         AND a.placement_state = 'ACTIVE' AND NOT (a.dpu_machine_id = ANY (v_targets));
    ELSE
      -- detach or instance deletion: every DPU attached to the host must be
      -- observed TERMINATED before the tombstone goes away
      INSERT INTO extsvc.dpf_extension_service_attachments AS a
             (instance_id, dpu_machine_id, service_id, version, placement_state, deployment_state, removing_since)
      SELECT p_instance, h.id, e.service_id, e.version, 'REMOVING', 'UNKNOWN', now() FROM unnest(v_host) h(id)
      ON CONFLICT (instance_id, dpu_machine_id, service_id, version) DO UPDATE
        SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
        WHERE a.placement_state = 'ACTIVE';
      UPDATE extsvc.dpf_extension_service_attachments a
         SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
       WHERE a.instance_id = p_instance AND a.service_id = e.service_id AND a.version = e.version
         AND a.placement_state = 'ACTIVE';
    END IF;
  END LOOP;
END
$fn$;

-- Removes what has converged: REMOVING rows observed TERMINATED (or released
-- to another active reason on the same DPU), then tombstones without rows,
-- then deleted instances without entries.
CREATE FUNCTION extsvc._cleanup_instance(p_instance uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
BEGIN
  SELECT * INTO i FROM extsvc.instances WHERE instance_id = p_instance FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  DELETE FROM extsvc.dpf_extension_service_attachments a
   WHERE a.instance_id = p_instance AND a.placement_state = 'REMOVING'
     AND (a.deployment_state = 'TERMINATED'
          OR EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                      WHERE w.dpu_machine_id = a.dpu_machine_id AND w.service_id = a.service_id
                        AND w.version = a.version));
  -- a tombstone goes only when none of its rows remain
  DELETE FROM extsvc.instance_extension_services c
   WHERE c.instance_id = p_instance AND c.removed_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                        AND a.version = c.version)
     AND EXISTS (SELECT FROM extsvc.service_records s
                  WHERE s.service_id = c.service_id AND s.service_type = 'DPF_HELM_CHART');
  IF i.delete_requested_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a WHERE a.instance_id = p_instance) THEN
    DELETE FROM extsvc.instances WHERE instance_id = p_instance;
  END IF;
END
$fn$;

-- Registry ---------------------------------------------------------------------

CREATE FUNCTION extsvc.register_dpu(machine_id uuid, host_machine_id uuid, dpu_device_name text,
                                    dpu_node_name text, is_primary boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.dpus;
  inst uuid;
BEGIN
  IF register_dpu.machine_id IS NULL OR register_dpu.host_machine_id IS NULL THEN
    PERFORM extsvc._raise('22023', 'machine_id and host_machine_id are required', 'field: machine_id',
                          'Pass the DPU''s and the host''s machine ids.');
  END IF;
  IF register_dpu.dpu_device_name IS NULL OR register_dpu.dpu_device_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_device_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_device_name is not a Kubernetes object name',
                          format('field: dpu_device_name = %s', register_dpu.dpu_device_name),
                          'Use the name of the DPUDevice object (lowercase DNS subdomain).');
  END IF;
  IF register_dpu.dpu_node_name IS NULL OR register_dpu.dpu_node_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_node_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_node_name is not a Kubernetes node name',
                          format('field: dpu_node_name = %s', register_dpu.dpu_node_name),
                          'Use the name of the DPU-cluster Node (the DPU object''s name).');
  END IF;
  SELECT * INTO old FROM extsvc.dpus d WHERE d.machine_id = register_dpu.machine_id FOR UPDATE;
  IF EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id <> register_dpu.machine_id
               AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name)) THEN
    PERFORM extsvc._raise('23505', 'another DPU is registered with this DPUDevice or Node name',
      format('dpu_device_name: %s, dpu_node_name: %s, registered to: %s', register_dpu.dpu_device_name,
             register_dpu.dpu_node_name,
             (SELECT string_agg(d.machine_id::text, ', ') FROM extsvc.dpus d
               WHERE d.machine_id <> register_dpu.machine_id
                 AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name))),
      'Deregister or re-register the other DPU first; names identify cluster objects.');
  END IF;
  IF coalesce(register_dpu.is_primary, false) AND EXISTS (
       SELECT FROM extsvc.dpus d WHERE d.host_machine_id = register_dpu.host_machine_id AND d.is_primary
          AND d.machine_id <> register_dpu.machine_id AND d.deregistered_at IS NULL) THEN
    -- the host's primary DPU changes: the previous one stops being primary
    UPDATE extsvc.dpus d SET is_primary = false, updated_at = now()
     WHERE d.host_machine_id = register_dpu.host_machine_id AND d.is_primary
       AND d.machine_id <> register_dpu.machine_id;
  END IF;
  INSERT INTO extsvc.dpus AS d (machine_id, host_machine_id, dpu_device_name, dpu_node_name, is_primary)
  VALUES (register_dpu.machine_id, register_dpu.host_machine_id, register_dpu.dpu_device_name,
          register_dpu.dpu_node_name, coalesce(register_dpu.is_primary, false))
  ON CONFLICT ON CONSTRAINT dpus_pkey DO UPDATE
    SET host_machine_id = EXCLUDED.host_machine_id, dpu_device_name = EXCLUDED.dpu_device_name,
        dpu_node_name = EXCLUDED.dpu_node_name, is_primary = EXCLUDED.is_primary,
        deregistered_at = NULL, updated_at = now();
  PERFORM extsvc._touch_dpu(register_dpu.machine_id);
  -- instances on the old and new host see a changed DPU set
  FOR inst IN SELECT instance_id FROM extsvc.instances
               WHERE host_machine_id IN (register_dpu.host_machine_id, old.host_machine_id) LOOP
    PERFORM extsvc._materialize_instance(inst, false);
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc.register_dpu(uuid, uuid, text, text, boolean) IS
  'Registers (or updates) a DPU of a host with its DPUDevice and DPU-cluster Node names.';

CREATE FUNCTION extsvc.deregister_dpu(machine_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  d extsvc.dpus;
  inst uuid;
BEGIN
  SELECT * INTO d FROM extsvc.dpus x WHERE x.machine_id = deregister_dpu.machine_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', deregister_dpu.machine_id),
                          'Check the DPU machine id.');
  END IF;
  UPDATE extsvc.dpus x SET deregistered_at = coalesce(x.deregistered_at, now()), is_primary = false, updated_at = now()
   WHERE x.machine_id = d.machine_id;
  -- its attachments are never dropped silently: they go REMOVING and leave
  -- once the DPU is observed clean
  UPDATE extsvc.dpf_extension_service_attachments a
     SET placement_state = 'REMOVING', removing_since = now(), updated_at = now(),
             deployment_state = 'UNKNOWN', status_message = 'removal requested; not yet observed'
   WHERE a.dpu_machine_id = d.machine_id AND a.placement_state = 'ACTIVE';
  PERFORM extsvc._touch_dpu(d.machine_id);
  FOR inst IN SELECT instance_id FROM extsvc.instances WHERE host_machine_id = d.host_machine_id LOOP
    PERFORM extsvc._materialize_instance(inst, false);
  END LOOP;
  -- the DPU row stays (deregistered): the worker still removes its labels
END
$fn$;
COMMENT ON FUNCTION extsvc.deregister_dpu(uuid) IS
  'Deregisters a DPU; its attachments move to REMOVING and are removed once observed TERMINATED.';

CREATE FUNCTION extsvc.upsert_instance(instance_id uuid, tenant_organization_id text, host_machine_id uuid,
                                       network_dpus uuid[] DEFAULT NULL, dpf_managed boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.instances;
BEGIN
  IF upsert_instance.instance_id IS NULL OR upsert_instance.host_machine_id IS NULL THEN
    PERFORM extsvc._raise('22023', 'instance_id and host_machine_id are required', 'field: instance_id',
                          'Pass the instance id and its host''s machine id.');
  END IF;
  IF upsert_instance.tenant_organization_id IS NULL OR btrim(upsert_instance.tenant_organization_id) = '' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must not be empty', 'field: tenant_organization_id',
                          'Pass the tenant organization id of the instance.');
  END IF;
  SELECT * INTO old FROM extsvc.instances i WHERE i.instance_id = upsert_instance.instance_id FOR UPDATE;
  IF FOUND THEN
    IF old.delete_requested_at IS NOT NULL THEN
      PERFORM extsvc._raise('55000', 'instance is being deleted', format('instance_id: %s', old.instance_id),
                            'Wait until the deletion finished.');
    END IF;
    IF old.tenant_organization_id <> upsert_instance.tenant_organization_id THEN
      PERFORM extsvc._raise('42501', 'an instance cannot change its tenant',
                            format('instance_id: %s', old.instance_id), 'Create a new instance.');
    END IF;
  END IF;
  INSERT INTO extsvc.instances AS i (instance_id, tenant_organization_id, host_machine_id, network_dpus, dpf_managed)
  VALUES (upsert_instance.instance_id, upsert_instance.tenant_organization_id, upsert_instance.host_machine_id,
          coalesce(upsert_instance.network_dpus, '{}'), coalesce(upsert_instance.dpf_managed, true))
  ON CONFLICT ON CONSTRAINT instances_pkey DO UPDATE
    SET host_machine_id = EXCLUDED.host_machine_id,
        network_dpus = coalesce(upsert_instance.network_dpus, i.network_dpus),
        dpf_managed = EXCLUDED.dpf_managed, updated_at = now();
  PERFORM extsvc._materialize_instance(upsert_instance.instance_id, false);
END
$fn$;
COMMENT ON FUNCTION extsvc.upsert_instance(uuid, text, uuid, uuid[], boolean) IS
  'Registers or updates an instance (host, network DPUs, DPF-managed); re-resolves its DPU targets.';

CREATE FUNCTION extsvc.set_instance_extension_services(instance_id uuid, services jsonb,
                                                       if_config_version_match integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e jsonb;
  n integer := 0;
  v_sid uuid;
  v_ver text;
  s extsvc.service_records;
  v_types text[] := '{}';
  v_seen uuid[] := '{}';   -- requested service ids, in order
  v_vers text[] := '{}';   -- their versions
  v_changed boolean := false;
BEGIN
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = set_instance_extension_services.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', set_instance_extension_services.instance_id),
                          'Register it with extsvc.upsert_instance first.');
  END IF;
  IF i.delete_requested_at IS NOT NULL THEN
    PERFORM extsvc._raise('55000', 'instance is being deleted', format('instance_id: %s', i.instance_id),
                          'Its configuration can no longer change.');
  END IF;
  IF if_config_version_match IS NOT NULL AND if_config_version_match <> i.config_version THEN
    PERFORM extsvc._raise('55000', 'config_version does not match',
                          format('if_config_version_match: %s, config_version: %s', if_config_version_match, i.config_version),
                          'Re-read the instance and retry with its current config_version.');
  END IF;
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of {service_id, version}', 'JSON path: $',
                          'Pass e.g. [{"service_id": "...", "version": "V1-T..."}] or [] to detach all.');
  END IF;

  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    IF jsonb_typeof(e) <> 'object' OR EXISTS (SELECT FROM jsonb_object_keys(e) k WHERE k NOT IN ('service_id', 'version')) THEN
      PERFORM extsvc._raise('22023', 'each entry must be an object with service_id and version only',
                            format('JSON path: $[%s]', n), 'Pass {"service_id": "...", "version": "..."}.');
    END IF;
    IF jsonb_typeof(e->'service_id') IS DISTINCT FROM 'string' OR (e->>'service_id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
      PERFORM extsvc._raise('22023', 'service_id must be a UUID string', format('JSON path: $[%s].service_id', n),
                            'Pass the service id as returned by create_service.');
    END IF;
    IF jsonb_typeof(e->'version') IS DISTINCT FROM 'string' THEN
      PERFORM extsvc._raise('22023', 'version must be a string', format('JSON path: $[%s].version', n),
                            'Pass the exact version string, e.g. V1-T1700000000000000.');
    END IF;
    v_sid := (e->>'service_id')::uuid;
    v_ver := e->>'version';
    IF v_sid = ANY (v_seen) THEN
      PERFORM extsvc._raise('22023', 'a service appears twice', format('JSON path: $[%s].service_id', n),
                            'List each service once.');
    END IF;
    v_seen := v_seen || v_sid;
    SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = v_sid;
    IF NOT FOUND THEN
      PERFORM extsvc._raise('P0002', 'service not found', format('JSON path: $[%s].service_id = %s', n, v_sid),
                            'Check the service id.');
    END IF;
    IF s.tenant_organization_id <> i.tenant_organization_id THEN
      PERFORM extsvc._raise('42501', 'service belongs to another tenant', format('JSON path: $[%s].service_id = %s', n, v_sid),
                            'An instance can only use its own tenant''s services.');
    END IF;
    IF NOT EXISTS (SELECT FROM extsvc.service_versions v WHERE v.service_id = v_sid AND v.version = v_ver
                      AND (v.deleted_at IS NULL)) THEN
      PERFORM extsvc._raise('P0002', 'service version not found', format('JSON path: $[%s].version = %s', n, v_ver),
                            'Use the exact version string from extsvc.services.version.');
    END IF;
    IF s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS' THEN
      PERFORM extsvc._raise('22023', 'ALL_DPUS services run everywhere and cannot be attached',
                            format('JSON path: $[%s].service_id = %s', n, v_sid), 'Remove this entry.');
    END IF;
    IF s.service_type = 'DPF_HELM_CHART' AND NOT i.dpf_managed THEN
      PERFORM extsvc._raise('22023', 'DPF_HELM_CHART services need a DPF-managed host',
                            format('JSON path: $[%s].service_id = %s, instance_id: %s', n, v_sid, i.instance_id),
                            'Attach KUBERNETES_POD services to hosts that are not managed by DPF.');
    END IF;
    IF NOT EXISTS (SELECT FROM extsvc.instance_extension_services c
                    WHERE c.instance_id = i.instance_id AND c.service_id = v_sid AND c.version = v_ver
                      AND c.removed_at IS NULL)
       AND s.lifecycle_state <> 'READY' THEN
      PERFORM extsvc._raise('55000', format('service is %s; only READY services can be attached', s.lifecycle_state),
                            format('JSON path: $[%s].service_id = %s', n, v_sid),
                            'Wait until the service is READY.');
    END IF;
    v_types := v_types || s.service_type;
    v_vers := v_vers || v_ver;
    n := n + 1;
  END LOOP;
  IF 'KUBERNETES_POD' = ANY (v_types) AND 'DPF_HELM_CHART' = ANY (v_types) THEN
    PERFORM extsvc._raise('22023', 'KUBERNETES_POD and DPF_HELM_CHART services cannot be mixed on one instance',
                          'JSON path: $', 'Use one service type per instance.');
  END IF;

  -- removed entries become tombstones
  UPDATE extsvc.instance_extension_services c SET removed_at = now()
   WHERE c.instance_id = i.instance_id AND c.removed_at IS NULL
     AND NOT EXISTS (SELECT FROM unnest(v_seen, v_vers) w(service_id, version)
                      WHERE w.service_id = c.service_id AND w.version = c.version);
  v_changed := FOUND;
  -- new entries (a tombstone of the same service and version comes back to life)
  INSERT INTO extsvc.instance_extension_services AS c (instance_id, service_id, version)
  SELECT i.instance_id, w.service_id, w.version FROM unnest(v_seen, v_vers) w(service_id, version)
  ON CONFLICT ON CONSTRAINT instance_extension_services_pkey DO UPDATE
    SET removed_at = NULL, attached_at = now() WHERE c.removed_at IS NOT NULL;
  v_changed := v_changed OR FOUND;
  IF NOT v_changed THEN
    RETURN i.config_version;  -- the same configuration again: no new config_version
  END IF;
  UPDATE extsvc.instances x SET config_version = x.config_version + 1, updated_at = now()
   WHERE x.instance_id = i.instance_id;
  PERFORM extsvc._materialize_instance(i.instance_id, true);
  -- every DPU of the instance must be observed again for the new
  -- config_version (configs_synced), also those whose rows did not change
  PERFORM extsvc._touch_dpu(x.dpu_machine_id)
     FROM (SELECT DISTINCT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
            WHERE a.instance_id = i.instance_id) x;
  RETURN i.config_version + 1;
END
$fn$;
COMMENT ON FUNCTION extsvc.set_instance_extension_services(uuid, jsonb, integer) IS
  'Sets an instance''s extension services; removed entries stay as tombstones until their DPUs report TERMINATED. Returns the new config_version.';

CREATE FUNCTION extsvc.delete_instance(instance_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
BEGIN
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = delete_instance.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', delete_instance.instance_id),
                          'Check the instance id; a finished deletion removes the instance.');
  END IF;
  IF i.delete_requested_at IS NOT NULL THEN
    RETURN;  -- idempotent
  END IF;
  UPDATE extsvc.instances x SET delete_requested_at = now(), config_version = x.config_version + 1, updated_at = now()
   WHERE x.instance_id = i.instance_id;
  UPDATE extsvc.instance_extension_services c SET removed_at = coalesce(c.removed_at, now())
   WHERE c.instance_id = i.instance_id;
  PERFORM extsvc._materialize_instance(i.instance_id, false);
  PERFORM extsvc._cleanup_instance(i.instance_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_instance(uuid) IS
  'Deletes an instance: every attachment goes REMOVING on every DPU of the host; the instance disappears when all are TERMINATED.';

-- Status -------------------------------------------------------------------------

CREATE FUNCTION extsvc.instance_extension_service_status(instance_id uuid)
RETURNS TABLE (service_id uuid, service_name text, version text, dpu_machine_id uuid, dpu_device_name text,
               dpu_node_name text, placement_state text, deployment_state text, removed_at timestamptz,
               status_message text, observed_at timestamptz, config_version integer,
               observed_config_version integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT a.service_id, s.service_name, a.version, a.dpu_machine_id, d.dpu_device_name, d.dpu_node_name,
         a.placement_state, a.deployment_state, c.removed_at, a.status_message, a.observed_at,
         i.config_version, a.observed_config_version
    FROM extsvc.dpf_extension_service_attachments a
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = a.service_id
    JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id
    LEFT JOIN extsvc.instance_extension_services c
      ON c.instance_id = a.instance_id AND c.service_id = a.service_id AND c.version = a.version
   WHERE a.instance_id = instance_extension_service_status.instance_id
   ORDER BY s.service_name, a.version, d.dpu_device_name
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_service_status(uuid) IS
  'One row per (service, version, DPU) of an instance: placement and observed deployment state.';

-- Aggregate with the precedence of SPEC 2.8.
CREATE FUNCTION extsvc._aggregate_state(states text[]) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE
    WHEN states IS NULL OR cardinality(states) = 0 THEN 'UNKNOWN'
    WHEN 'ERROR' = ANY (states) THEN 'ERROR'
    WHEN 'UNKNOWN' = ANY (states) THEN 'UNKNOWN'
    WHEN 'PENDING' = ANY (states) THEN 'PENDING'
    WHEN 'RUNNING' = ALL (states) THEN 'RUNNING'
    WHEN 'TERMINATING' = ANY (states) THEN 'TERMINATING'
    WHEN 'TERMINATED' = ALL (states) THEN 'TERMINATED'
    ELSE 'UNKNOWN' END
$fn$;

CREATE FUNCTION extsvc.instance_extension_services_summary(instance_id uuid)
RETURNS TABLE (service_id uuid, service_name text, service_type text, version text, aggregate_state text,
               removed boolean, removed_at timestamptz, dpus integer, configs_synced boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT c.service_id, s.service_name, s.service_type, c.version,
         CASE WHEN s.service_type = 'KUBERNETES_POD' THEN NULL
              WHEN NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                                WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                                  AND a.version = c.version)
                   AND c.removed_at IS NOT NULL THEN 'TERMINATED'
              ELSE extsvc._aggregate_state(ARRAY(
                     SELECT a.deployment_state FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND (c.removed_at IS NOT NULL OR a.placement_state = 'ACTIVE')))
         END,
         c.removed_at IS NOT NULL, c.removed_at,
         (SELECT count(*)::int FROM extsvc.dpf_extension_service_attachments a
           WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version),
         NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND a.observed_config_version IS DISTINCT FROM i.config_version)
    FROM extsvc.instance_extension_services c
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = c.service_id
   WHERE c.instance_id = instance_extension_services_summary.instance_id
   ORDER BY s.service_name, c.version
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_summary(uuid) IS
  'One row per (service, version) of an instance: aggregate state (SPEC 2.8 precedence), removed, configs_synced.';

CREATE FUNCTION extsvc.instance_extension_services_ready(instance_id uuid) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.instances i WHERE i.instance_id = instance_extension_services_ready.instance_id) THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', instance_extension_services_ready.instance_id),
                          'Check the instance id.');
  END IF;
  RETURN NOT EXISTS (
    SELECT FROM extsvc.instance_extension_services_summary(instance_extension_services_ready.instance_id) x
     WHERE x.service_type = 'DPF_HELM_CHART'
       AND (NOT x.configs_synced
            OR (NOT x.removed AND x.aggregate_state <> 'RUNNING')
            OR (x.removed AND x.aggregate_state <> 'TERMINATED')));
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_ready(uuid) IS
  'True when every active DPF attachment is RUNNING and every removed one TERMINATED for the current config_version.';

CREATE FUNCTION extsvc.dpu_agent_extension_services(dpu_machine_id uuid)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, version text, data text,
               has_credential boolean, observability jsonb, removed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = dpu_agent_extension_services.dpu_machine_id) THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', dpu_agent_extension_services.dpu_machine_id),
                          'Check the DPU machine id.');
  END IF;
  -- The DPU agent's feed is unchanged: only KUBERNETES_POD entries.
  RETURN QUERY
  SELECT c.instance_id, c.service_id, s.service_name, c.version, v.data, v.has_credential, v.observability, c.removed_at
    FROM extsvc.dpus d
    JOIN extsvc.instances i ON i.host_machine_id = d.host_machine_id
    JOIN extsvc.instance_extension_services c ON c.instance_id = i.instance_id
    JOIN extsvc.service_records s ON s.service_id = c.service_id AND s.service_type = 'KUBERNETES_POD'
    JOIN extsvc.service_versions v ON v.service_id = c.service_id AND v.version = c.version
   WHERE d.machine_id = dpu_agent_extension_services.dpu_machine_id
   ORDER BY c.instance_id, s.service_name, c.version;
END
$fn$;
COMMENT ON FUNCTION extsvc.dpu_agent_extension_services(uuid) IS
  'The DPU agent''s feed: KUBERNETES_POD entries (including removed ones) of instances on the DPU''s host; never DPF services.';

-- Operators: one row per DPU with its placement work.
CREATE VIEW extsvc.dpu_placement AS
SELECT d.machine_id AS dpu_machine_id, d.host_machine_id, d.dpu_device_name, d.dpu_node_name, d.is_primary,
       d.deregistered_at,
       (SELECT array_agg(DISTINCT w.label_key ORDER BY w.label_key) FROM extsvc.dpu_desired_labels w
         WHERE w.dpu_machine_id = d.machine_id) AS desired_labels,
       q.state_version, q.attempts, q.next_due_at, q.lease_owner, q.last_error, q.last_observed_at, q.observation
  FROM extsvc.dpus d
  LEFT JOIN extsvc.dpu_reconciliations q ON q.dpu_machine_id = d.machine_id;
COMMENT ON VIEW extsvc.dpu_placement IS
  'Per DPU: desired NICo labels, placement work (due, lease, attempts, last error) and the last observation.';

-- ---- sql/parts/75_placement_worker.sql
-- The worker's side of placement: per-DPU claims and observations.

CREATE FUNCTION extsvc.claim_dpu_reconciliations(worker text, batch_size integer DEFAULT 32,
                                                 lease_seconds integer DEFAULT 60)
RETURNS TABLE (dpu_machine_id uuid, state_version bigint, lease_token uuid, dpu_device_name text,
               dpu_node_name text, deregistered boolean, attempts integer, wanted_keys text[], items jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT q.dpu_machine_id
      FROM extsvc.dpu_reconciliations q
     WHERE q.next_due_at <= now()
       AND (q.lease_expires_at IS NULL OR q.lease_expires_at < now())
     ORDER BY q.next_due_at
     LIMIT greatest(claim_dpu_reconciliations.batch_size, 1)
       FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE extsvc.dpu_reconciliations q
       SET lease_owner = claim_dpu_reconciliations.worker, lease_token = gen_random_uuid(),
           lease_expires_at = now() + make_interval(secs => claim_dpu_reconciliations.lease_seconds),
           last_attempt_at = now()
      FROM due
     WHERE q.dpu_machine_id = due.dpu_machine_id
    RETURNING q.dpu_machine_id, q.state_version, q.lease_token, q.attempts
  )
  SELECT c.dpu_machine_id, c.state_version, c.lease_token, d.dpu_device_name, d.dpu_node_name,
         d.deregistered_at IS NOT NULL, c.attempts,
         CASE WHEN d.deregistered_at IS NOT NULL THEN '{}'::text[]
              ELSE coalesce((SELECT array_agg(DISTINCT w.label_key ORDER BY w.label_key)
                               FROM extsvc.dpu_desired_labels w WHERE w.dpu_machine_id = c.dpu_machine_id),
                            '{}') END,
         coalesce((
           SELECT jsonb_agg(x) FROM (
             SELECT jsonb_build_object('kind', 'attachment', 'instance_id', a.instance_id,
                      'service_id', a.service_id, 'version', a.version, 'label_key', s.placement_label_key,
                      'dpf_service_name', s.dpf_service_name,
                      'wanted', a.placement_state = 'ACTIVE' AND d.deregistered_at IS NULL) AS x
               FROM extsvc.dpf_extension_service_attachments a
               JOIN extsvc.service_records s USING (service_id)
              WHERE a.dpu_machine_id = c.dpu_machine_id
             UNION ALL
             SELECT jsonb_build_object('kind', 'site', 'instance_id', NULL, 'service_id', s.service_id,
                      'version', s.attachable_version, 'label_key', s.placement_label_key,
                      'dpf_service_name', s.dpf_service_name,
                      'wanted', d.deregistered_at IS NULL
                                AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
               FROM extsvc.service_records s
              WHERE s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
                AND (extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                     OR s.lifecycle_state = 'DELETING'
                     OR EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                                 WHERE x.service_id = s.service_id AND x.dpu_machine_id = c.dpu_machine_id
                                   AND x.deployment_state <> 'TERMINATED'))
           ) items), '[]'::jsonb)
    FROM claimed c
    JOIN extsvc.dpus d ON d.machine_id = c.dpu_machine_id;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_dpu_reconciliations(text, integer, integer) IS
  'Worker: lease due DPUs (FOR UPDATE SKIP LOCKED) with their wanted label keys and every attachment or site service to observe.';

-- Records one DPU pass. outcome: 'observed' (results is an array of
-- {kind, instance_id, service_id, version, state, message}) or 'retry'.
CREATE FUNCTION extsvc.complete_dpu_reconciliation(
    dpu_machine_id uuid, state_version bigint, lease_token uuid, outcome text,
    results jsonb DEFAULT '[]', message text DEFAULT NULL, http_status integer DEFAULT NULL,
    retry_after_s double precision DEFAULT NULL, observation jsonb DEFAULT NULL,
    keep_polling boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  q extsvc.dpu_reconciliations;
  r jsonb;
  v_final boolean;
  v_inst uuid;
BEGIN
  SELECT * INTO q FROM extsvc.dpu_reconciliations x
   WHERE x.dpu_machine_id = complete_dpu_reconciliation.dpu_machine_id FOR UPDATE;
  IF NOT FOUND OR q.lease_token IS DISTINCT FROM complete_dpu_reconciliation.lease_token THEN
    RETURN 'lost';
  END IF;
  IF q.state_version <> complete_dpu_reconciliation.state_version THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_due_at = now()
     WHERE x.dpu_machine_id = q.dpu_machine_id;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;

  IF complete_dpu_reconciliation.outcome = 'retry' THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, attempts = x.attempts + 1,
           next_due_at = now() + extsvc._backoff(x.attempts + 1, complete_dpu_reconciliation.retry_after_s),
           last_error = complete_dpu_reconciliation.message, last_error_at = now(),
           last_http_status = complete_dpu_reconciliation.http_status
     WHERE x.dpu_machine_id = q.dpu_machine_id;
    RETURN 'applied';
  ELSIF complete_dpu_reconciliation.outcome <> 'observed' THEN
    PERFORM extsvc._raise('22023', 'unknown DPU reconciliation outcome',
                          format('outcome: %s', complete_dpu_reconciliation.outcome), 'Use observed or retry.');
  END IF;

  FOR r IN SELECT value FROM jsonb_array_elements(coalesce(results, '[]')) LOOP
    IF r->>'kind' = 'attachment' THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = r->>'state', status_message = r->>'message', observed_at = now(),
             observed_config_version = (SELECT i.config_version FROM extsvc.instances i WHERE i.instance_id = a.instance_id),
             updated_at = CASE WHEN a.deployment_state IS DISTINCT FROM r->>'state' THEN now() ELSE a.updated_at END
       WHERE a.instance_id = (r->>'instance_id')::uuid AND a.dpu_machine_id = q.dpu_machine_id
         AND a.service_id = (r->>'service_id')::uuid AND a.version = r->>'version';
    ELSIF r->>'kind' = 'site' THEN
      INSERT INTO extsvc.site_service_dpu_status AS x (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
      VALUES ((r->>'service_id')::uuid, q.dpu_machine_id, r->>'state', r->>'message', now())
      ON CONFLICT ON CONSTRAINT site_service_dpu_status_pkey DO UPDATE
        SET deployment_state = EXCLUDED.deployment_state, status_message = EXCLUDED.status_message,
            observed_at = now();
      -- a site service waiting to be deleted re-checks once a DPU is clean
      IF r->>'state' = 'TERMINATED' THEN
        UPDATE extsvc.dpf_extension_service_reconciliations x SET next_due_at = now()
         WHERE x.service_id = (r->>'service_id')::uuid AND x.lease_token IS NULL
           AND EXISTS (SELECT FROM extsvc.service_records s
                        WHERE s.service_id = x.service_id AND s.lifecycle_state = 'DELETING');
        PERFORM extsvc._wake();
      END IF;
    END IF;
  END LOOP;

  FOR v_inst IN SELECT DISTINCT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                 WHERE a.dpu_machine_id = q.dpu_machine_id AND a.placement_state = 'REMOVING' LOOP
    PERFORM extsvc._cleanup_instance(v_inst);
  END LOOP;

  -- converged: every wanted row RUNNING and nothing left to remove
  v_final := NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                          WHERE a.dpu_machine_id = q.dpu_machine_id
                            AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          JOIN extsvc.service_records s USING (service_id)
                          JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id
                          WHERE x.dpu_machine_id = q.dpu_machine_id
                            AND x.deployment_state <> CASE
                                  WHEN d.deregistered_at IS NULL
                                       AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                                  THEN 'RUNNING' ELSE 'TERMINATED' END);
  UPDATE extsvc.dpu_reconciliations x
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN v_final AND NOT coalesce(complete_dpu_reconciliation.keep_polling, false)
                         THEN 0 ELSE x.attempts + 1 END,
         -- not converged: look again soon; converged but a rollout of one of
         -- its services is still under way somewhere: look again, slower
         next_due_at = CASE
           -- rows in ERROR need a person; look again with the full backoff
           WHEN NOT v_final AND EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = q.dpu_machine_id AND a.deployment_state = 'ERROR')
                AND NOT EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = q.dpu_machine_id AND a.deployment_state <> 'ERROR'
                     AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
             THEN now() + extsvc._backoff(x.attempts + 1)
           -- converging (labels propagating, pods starting): poll briskly,
           -- 200 ms more per unchanged pass, at most every 5 s
           WHEN NOT v_final THEN now() + least(interval '200 milliseconds' * (x.attempts + 1), interval '5 seconds')
           WHEN coalesce(complete_dpu_reconciliation.keep_polling, false)
             THEN now() + least(extsvc._backoff(x.attempts + 1), interval '30 seconds')
           ELSE NULL END,
         last_error = complete_dpu_reconciliation.message,
         last_error_at = CASE WHEN complete_dpu_reconciliation.message IS NULL THEN NULL ELSE now() END,
         last_http_status = complete_dpu_reconciliation.http_status,
         last_observed_at = now(),
         observation = coalesce(complete_dpu_reconciliation.observation, x.observation)
   WHERE x.dpu_machine_id = q.dpu_machine_id;
  -- site statuses of DPUs that no longer exist in the desired set are moot
  DELETE FROM extsvc.site_service_dpu_status x
   USING extsvc.service_records s
   WHERE x.dpu_machine_id = q.dpu_machine_id AND s.service_id = x.service_id
     AND s.lifecycle_state = 'DELETED';
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete_dpu_reconciliation(uuid, bigint, uuid, text, jsonb, text, integer, double precision, jsonb, boolean) IS
  'Worker: record a DPU pass (per-attachment deployment states) with compare-and-swap on state_version and lease_token.';

-- Resync: every DPU is observed again (placement drift such as a label
-- removed by hand is repaired at that pass).
CREATE FUNCTION extsvc.mark_dpus_due() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  n integer;
BEGIN
  INSERT INTO extsvc.dpu_reconciliations (dpu_machine_id, next_due_at)
  SELECT d.machine_id, now() FROM extsvc.dpus d
  ON CONFLICT (dpu_machine_id) DO UPDATE SET next_due_at = coalesce(extsvc.dpu_reconciliations.next_due_at, now());
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- For ALL_DPUS deletion: true once every registered DPU was observed without
-- the service's label and pods after the delete was requested.
CREATE FUNCTION extsvc._site_service_cleared(p_service_id uuid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT NOT EXISTS (
    SELECT FROM extsvc.dpus d, extsvc.service_records s
     WHERE s.service_id = p_service_id AND d.deregistered_at IS NULL
       AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                        WHERE x.service_id = p_service_id AND x.dpu_machine_id = d.machine_id
                          AND x.deployment_state = 'TERMINATED'
                          AND x.observed_at >= s.delete_requested_at))
$fn$;

-- ---- sql/parts/90_privileges.sql
-- Privileges: nothing for PUBLIC; the API for extsvc_api and extsvc_admin;
-- operator functions for extsvc_admin; worker functions for the owner only.
REVOKE ALL ON ALL TABLES IN SCHEMA extsvc FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA extsvc FROM PUBLIC;

GRANT SELECT ON extsvc.services TO extsvc_api, extsvc_admin;
GRANT SELECT ON extsvc.reconciliation_queue, extsvc.service_history, extsvc.lifecycle_transitions,
                extsvc.chart_allowlist, extsvc.dpu_placement, extsvc.dpu_desired_labels
  TO extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc.update_service(uuid, text, text, text, integer, boolean, jsonb),
  extsvc.delete_service(uuid, text),
  extsvc.validate_dpf_helm_chart_data(text),
  extsvc.render_dpuservice(uuid),
  extsvc.dpf_service_name(uuid, text),
  extsvc.placement_label_key(uuid, text),
  extsvc.allow_chart(text, text),
  extsvc.disallow_chart(text, text),
  extsvc.register_dpu(uuid, uuid, text, text, boolean),
  extsvc.deregister_dpu(uuid),
  extsvc.upsert_instance(uuid, text, uuid, uuid[], boolean),
  extsvc.set_instance_extension_services(uuid, jsonb, integer),
  extsvc.delete_instance(uuid),
  extsvc.instance_extension_service_status(uuid),
  extsvc.instance_extension_services_summary(uuid),
  extsvc.instance_extension_services_ready(uuid),
  extsvc.dpu_agent_extension_services(uuid)
TO extsvc_api, extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.reconcile_now(uuid),
  extsvc.retry_service(uuid),
  extsvc.worker_status(),
  extsvc.request_resync(),
  extsvc.repo_url_matches(text, text),
  extsvc.dpuservice_mutable_patch(jsonb, jsonb),
  extsvc.dpuservice_identity_mismatch(jsonb, uuid, text, text)
TO extsvc_admin;
