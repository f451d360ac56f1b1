-- nico_extsvc 0.1.0 -> 0.2.0 upgrade script as released (frozen; assembled at 0.2.0 by tools/sql_upgrade.py from
-- sql/migrations/drop-definitions.sql, the 0.1.0--0.2.0 migration and the definitions of sql/parts at 0.2.0).
\echo Use "ALTER EXTENSION nico_extsvc UPDATE TO '0.2.0'" to load this file. \quit

-- ---- sql/migrations/drop-definitions.sql
-- Step 1 of every upgrade script (tools/sql_upgrade.py): drop every trigger
-- on the extension's tables and every view and function of the extension,
-- so that the definitions of sql/parts/*.sql are created again exactly as a
-- fresh install creates them (step 3). Tables, their rows, sequences and
-- the schema are kept; the hand-written migration (step 2) changes them.
-- Nothing is dropped with CASCADE: an object outside the extension that
-- depends on one of these (a view of your own over extsvc.services, a table
-- default calling an extsvc function) stops the upgrade with PostgreSQL's
-- own message, and the transaction changes nothing.
DO $drop_definitions$
DECLARE
  v_ext oid := (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'nico_extsvc');
  r record;
  v_pending text[];
  v_failed text[];
  v_cmd text;
  v_progress boolean;
  v_error text;
  v_detail text;
BEGIN
  FOR r IN SELECT format('DROP TRIGGER %I ON %I.%I', t.tgname, n.nspname, c.relname) AS cmd
             FROM pg_catalog.pg_trigger t
             JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                                        AND d.refclassid = 'pg_catalog.pg_extension'::regclass
                                        AND d.refobjid = v_ext AND d.deptype = 'e'
            WHERE NOT t.tgisinternal
            ORDER BY 1 LOOP
    EXECUTE r.cmd;
  END LOOP;

  SELECT coalesce(array_agg(cmd ORDER BY cmd), '{}') INTO v_pending FROM (
    SELECT format('DROP %s %I.%I', CASE c.relkind WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'VIEW' END,
                  n.nspname, c.relname) AS cmd
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_class c ON c.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = v_ext AND d.deptype = 'e' AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT format('DROP %s %I.%I(%s)', CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END,
                  n.nspname, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid))
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_proc p ON p.oid = d.objid
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
     WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = v_ext AND d.deptype = 'e') s;

  -- Views and functions depend on each other (a function returning a view's
  -- row type, a view calling a function): drop what can be dropped, repeat.
  LOOP
    v_failed := '{}';
    v_progress := false;
    FOREACH v_cmd IN ARRAY v_pending LOOP
      BEGIN
        EXECUTE v_cmd;
        v_progress := true;
      EXCEPTION WHEN dependent_objects_still_exist THEN
        GET STACKED DIAGNOSTICS v_error = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
        v_failed := v_failed || v_cmd;
      END;
    END LOOP;
    EXIT WHEN cardinality(v_failed) = 0;
    IF NOT v_progress THEN
      RAISE EXCEPTION USING ERRCODE = '2BP01',
        MESSAGE = 'nico_extsvc upgrade: objects outside the extension depend on its views or functions',
        DETAIL = format('%s: %s (still to drop: %s)', v_error, v_detail, array_to_string(v_failed, '; ')),
        HINT = 'Drop those objects (and create them again after ALTER EXTENSION nico_extsvc UPDATE).';
    END IF;
    v_pending := v_failed;
  END LOOP;
END
$drop_definitions$;

-- ---- sql/migrations/0.1.0--0.2.0.sql
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

-- ---- sql/parts/00_roles.sql (definitions)


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

-- ---- sql/parts/05_states.sql (definitions)

COMMENT ON DOMAIN extsvc.lifecycle_state IS
  'A service''s lifecycle state (SPEC 2.5); the allowed moves are extsvc.lifecycle_transitions.';
COMMENT ON DOMAIN extsvc.placement_state IS
  'An attachment row''s placement: ACTIVE (its label is wanted) or REMOVING (until its DPU is observed clean).';
COMMENT ON DOMAIN extsvc.deployment_state IS
  'A service''s observed state on one DPU (SPEC 2.8); the allowed moves are extsvc.placement_transitions.';
COMMENT ON DOMAIN extsvc.state_actor IS
  'Who made a state change: api (a SQL API call) or worker (a background worker''s completion).';
COMMENT ON DOMAIN extsvc.placement_machine IS
  'The per-DPU state machines: an attachment''s placement, its deployment, and an ALL_DPUS service''s deployment on a DPU.';

-- ---- sql/parts/10_tables.sql (definitions)


COMMENT ON TABLE extsvc.service_records IS
  'One row per extension service; read it through the extsvc.services view.';
COMMENT ON TABLE extsvc.lifecycle_transitions IS
  'Every allowed service lifecycle change (from_state NULL = creation); a trigger refuses any other.';

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

-- ---- sql/parts/15_placement_tables.sql (definitions)


-- pg_dump / pg_restore: per-DPU work rows and observations are dumped like
-- the reconciliation rows (10_tables.sql); observations older than the
-- staleness bound read UNKNOWN after a restore until observed again.
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_reconciliations', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.site_service_dpu_status', '');

-- ---- sql/parts/20_lifecycle.sql (definitions)

-- seed table: emptied and refilled from sql/parts/20_lifecycle.sql
DELETE FROM extsvc.lifecycle_transitions;
-- The allowed service lifecycle changes. docs/lifecycle.md is generated from
-- this table (tools/lifecycle_doc.py --write) and a test (--check) keeps them equal.
INSERT INTO extsvc.lifecycle_transitions (from_state, to_state, actor, reason, description) VALUES
  (NULL,       'CREATING', 'api',    'create',              'DPF_HELM_CHART service created; intent persisted, no Kubernetes call yet'),
  (NULL,       'READY',    'api',    'create',              'KUBERNETES_POD service created (synchronous)'),
  ('CREATING', 'READY',    'worker', 'dpuservice_created',  'DPUService created by the worker'),
  ('CREATING', 'READY',    'worker', 'dpuservice_adopted',  'DPUService already existed with our ownership labels and identity'),
  ('CREATING', 'CREATING', 'api',    'superseded',          'data updated before the create was applied; the newest revision is created'),
  ('CREATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the DPUService (400/422 or similar)'),
  ('CREATING', 'FAILED',   'worker', 'ownership_conflict',  'an object with the generated name belongs to someone else'),
  ('CREATING', 'FAILED',   'worker', 'unknown_fields',      'the DPF API refused (fieldValidation=Strict) or dropped fields its CRD does not define: the DPF release is too old'),
  ('CREATING', 'FAILED',   'worker', 'namespace_missing',   'the create answered 404: extsvc.namespace names a namespace that does not exist'),
  ('CREATING', 'DELETING', 'api',    'delete',              'delete requested before the create finished; the delete wins'),
  ('READY',    'UPDATING', 'api',    'update',              'new Helm revision requested'),
  ('READY',    'READY',    'api',    'new_version',         'KUBERNETES_POD data changed: new version'),
  ('READY',    'READY',    'api',    'version_deleted',     'KUBERNETES_POD version deleted'),
  ('READY',    'READY',    'worker', 'drift_recreated',     'the DPUService was missing and was re-created'),
  ('READY',    'READY',    'worker', 'drift_patched',       'the DPUService spec had drifted and was patched back'),
  ('READY',    'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('READY',    'FAILED',   'worker', 'permanent_error',     'a drift repair was refused by the API'),
  ('READY',    'FAILED',   'worker', 'unknown_fields',      'a drift repair was refused or pruned: the DPF CRD no longer defines a field (DPF downgraded)'),
  ('READY',    'DELETING', 'api',    'delete',              'delete requested'),
  ('READY',    'DELETED',  'api',    'delete',              'KUBERNETES_POD service deleted (synchronous)'),
  ('UPDATING', 'READY',    'worker', 'revision_applied',    'DPF accepted the desired revision'),
  ('UPDATING', 'UPDATING', 'api',    'superseded',          'data updated again before the pending revision was applied'),
  ('UPDATING', 'FAILED',   'worker', 'permanent_error',     'the API refused the patch (400/422 or similar)'),
  ('UPDATING', 'FAILED',   'worker', 'unknown_fields',      'the DPF API refused (fieldValidation=Strict) or dropped fields its CRD does not define: the DPF release is too old'),
  ('UPDATING', 'FAILED',   'worker', 'ownership_conflict',  'the object with the generated name no longer carries our identity'),
  ('UPDATING', 'FAILED',   'worker', 'dpuservice_missing',  'the DPUService disappeared during an update'),
  ('UPDATING', 'DELETING', 'api',    'delete',              'delete requested during an update; the delete wins'),
  ('FAILED',   'CREATING', 'api',    'update',              'new definition for a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'update',              'new definition for a service that exists in DPF'),
  ('FAILED',   'CREATING', 'api',    'retry',               'operator retry of a service that was never created'),
  ('FAILED',   'UPDATING', 'api',    'retry',               'operator retry of a service that exists in DPF'),
  ('FAILED',   'DELETING', 'api',    'delete',              'delete requested'),
  ('FAILED',   'DELETING', 'api',    'retry',               'retry of a failed delete: the delete is requested again'),
  ('FAILED',   'DELETED',  'api',    'abandoned',           'operator abandoned a delete that failed on an ownership conflict; the foreign object is left alone'),
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
      USING ERRCODE = '55000', CONSTRAINT = 'lifecycle_transition',
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

-- ---- sql/parts/30_native.sql (definitions)
-- Native (C++) functions. The leading underscore marks internals; the public
-- API wraps them below.

CREATE FUNCTION extsvc._validate_helm_chart_data(data text) RETURNS jsonb
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_validate_helm_chart_data';

CREATE FUNCTION extsvc._dpf_service_name(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_dpf_service_name';

CREATE FUNCTION extsvc._placement_label_key(service_id uuid, version text) RETURNS text
  LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'nico_extsvc_placement_label_key';

CREATE FUNCTION extsvc._render_dpuservice(service_id uuid, version text, revision integer, data jsonb,
                                          namespace text)
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

-- A caller's value as quoted in an error's DETAIL (issue #10): at most 64
-- characters, so an error never echoes a long (or hostile) value whole.
CREATE FUNCTION extsvc._token(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN p_value IS NULL THEN 'NULL'
              WHEN length(p_value) <= 64 THEN p_value
              ELSE left(p_value, 48) || format('... (%s characters)', length(p_value)) END
$fn$;
COMMENT ON FUNCTION extsvc._token(text) IS
  'Internal: a caller''s value for an error DETAIL, cut to 48 characters plus its length when longer than 64. No grants.';

-- Raises an error with SQLSTATE, one-line message, DETAIL and HINT.
CREATE FUNCTION extsvc._raise(p_sqlstate text, p_message text, p_detail text, p_hint text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message,
                        DETAIL = coalesce(p_detail, ''), HINT = coalesce(p_hint, '');
END
$fn$;

-- _raise with the error's CONSTRAINT field set (issue #14 P1-12): sqlx
-- exposes it, so NICo can tell a concurrent modification from a failed
-- precondition without parsing messages. Real constraint names where a
-- constraint exists; otherwise the stable names listed in docs/sql-api.md.
CREATE FUNCTION extsvc._raise_c(p_constraint text, p_sqlstate text, p_message text, p_detail text, p_hint text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message, CONSTRAINT = p_constraint,
                        DETAIL = coalesce(p_detail, ''), HINT = coalesce(p_hint, '');
END
$fn$;
COMMENT ON FUNCTION extsvc._raise_c(text, text, text, text, text) IS
  'Internal: raises like extsvc._raise with the CONSTRAINT field set (names in docs/sql-api.md). No grants.';

-- NICo ConfigVersion of version number n, stamped with the transaction time.
CREATE FUNCTION extsvc._config_version(n integer) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT format('V%s-T%s', n, (extract(epoch FROM now()) * 1000000)::bigint)
$fn$;

-- Admin rights follow the calling role, the way PostgreSQL privileges do
-- (SET ROLE included), never session_user. Inside a SECURITY DEFINER function
-- current_user is the owner, so no definer body can ask who called it. The
-- role-dependent API functions (create_service, update_service,
-- delete_service, allow_chart, disallow_chart) are therefore SECURITY INVOKER
-- entries that pick one of two SECURITY DEFINER gates: *_as_admin, executable
-- by extsvc_admin only, or *_as_api. PostgreSQL's own EXECUTE check on the
-- gate decides; a caller cannot claim admin rights it does not have.
CREATE FUNCTION extsvc._tenant_denied(p_what text, p_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- One answer for "does not exist" and "belongs to another tenant".
  PERFORM extsvc._raise('42501', format('%s is not accessible to this tenant', p_what),
    format('%s_id: %s, tenant_organization_id: %s', p_what, p_id, extsvc._token(p_tenant)),
    format('Pass the id of one of this tenant''s %ss; an unknown id and another tenant''s id get this same answer.', p_what));
END
$fn$;

-- Raises the tenant refusal when a tenant is given and the service is not one
-- of its services (unknown or another tenant's).
CREATE FUNCTION extsvc._check_service_tenant(p_service_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF p_tenant IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_records s
        WHERE s.service_id = p_service_id AND s.tenant_organization_id = p_tenant) THEN
    PERFORM extsvc._tenant_denied('service', p_service_id, p_tenant);
  END IF;
END
$fn$;

-- The same for an instance.
CREATE FUNCTION extsvc._check_instance_tenant(p_instance_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF p_tenant IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.instances i
        WHERE i.instance_id = p_instance_id AND i.tenant_organization_id = p_tenant) THEN
    PERFORM extsvc._tenant_denied('instance', p_instance_id, p_tenant);
  END IF;
END
$fn$;

-- The tenant check, then P0002 for an unknown instance (issue #12: every
-- instance status function answers an unknown instance the same way).
CREATE FUNCTION extsvc._require_instance(p_instance_id uuid, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM extsvc._check_instance_tenant(p_instance_id, p_tenant);
  IF NOT EXISTS (SELECT FROM extsvc.instances i WHERE i.instance_id = p_instance_id) THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', p_instance_id),
                          'Check the instance id; a finished deletion removes the instance.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_instance(uuid, text) IS
  'Internal: the tenant check, then P0002 for an unknown instance (every instance status function). No grants.';

-- ---- sql/parts/40_views.sql (definitions)
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
       -- a DPUService someone paused is not fought (issue 9): a READY
       -- service says so where NICo and operators look first; the text is
       -- the worker's (core/dpf_status.cpp), recorded as DPF's message
       CASE WHEN s.lifecycle_state = 'READY' AND r.dpf_message LIKE 'spec.paused is true:%'
            THEN coalesce(s.status_message || '; ', '') || split_part(r.dpf_message, ';', 1)
            ELSE s.status_message END AS status_message,
       s.created_at,
       s.updated_at,
       s.deleted_at,
       s.has_credential,
       s.observability,
       r.dpf_ready,
       r.dpf_reason,
       r.dpf_message
FROM extsvc.service_records s
LEFT JOIN extsvc.dpf_extension_service_reconciliations r USING (service_id);
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

-- ---- sql/parts/50_services_api.sql (definitions)
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
    PERFORM extsvc._raise_c('service_records_tenant_name_key', '23505', 'service name is already in use by this tenant',
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

-- The body of create_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_id      uuid := coalesce(_create_service.service_id, gen_random_uuid());
  v_type    text := upper(btrim(_create_service.service_type));
  v_scope   text := coalesce(upper(btrim(_create_service.deployment_scope)), 'INSTANCE_DPUS');
  v_target  text := upper(btrim(_create_service.dpu_target));
  v_name    text := btrim(_create_service.service_name);
  v_data    jsonb;
  v_version text := extsvc._config_version(1);
  v_existing extsvc.service_records;
BEGIN
  IF _create_service.tenant_organization_id IS NULL OR btrim(_create_service.tenant_organization_id) = '' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must not be empty', 'field: tenant_organization_id',
                          'Pass the tenant organization id of the service owner.');
  END IF;
  IF v_name IS NULL OR v_name = '' OR length(v_name) > 256 THEN
    PERFORM extsvc._raise('22023', 'service_name must be 1 to 256 characters', 'field: service_name',
                          'Pass a non-empty display name.');
  END IF;
  IF length(_create_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;
  IF v_type IS NULL OR v_type NOT IN ('KUBERNETES_POD', 'DPF_HELM_CHART') THEN
    PERFORM extsvc._raise('22023', 'unknown service_type', format('field: service_type = %s', extsvc._token(_create_service.service_type)),
                          'Use KUBERNETES_POD or DPF_HELM_CHART.');
  END IF;
  IF v_scope NOT IN ('INSTANCE_DPUS', 'ALL_DPUS') THEN
    PERFORM extsvc._raise('22023', 'unknown deployment_scope', format('field: deployment_scope = %s', extsvc._token(_create_service.deployment_scope)),
                          'Use INSTANCE_DPUS (default) or ALL_DPUS.');
  END IF;
  IF v_target IS NOT NULL AND v_target NOT IN ('PRIMARY', 'ALL_ACTIVE', 'ALL') THEN
    PERFORM extsvc._raise('22023', 'unknown dpu_target', format('field: dpu_target = %s', extsvc._token(_create_service.dpu_target)),
                          'Use PRIMARY, ALL_ACTIVE or ALL.');
  END IF;
  IF _create_service.data IS NULL THEN
    PERFORM extsvc._raise('22023', 'data must not be NULL', 'field: data', 'Pass the service definition.');
  END IF;

  IF v_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_create_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _create_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF v_scope = 'ALL_DPUS' THEN
      IF NOT p_admin THEN
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
    v_data := extsvc._validate_helm_chart_data(_create_service.data);
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
    IF btrim(_create_service.data) = '' OR octet_length(_create_service.data) > 131072 THEN
      PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data',
                            'Pass the pod definition.');
    END IF;
  END IF;

  -- A repeated create with the same id and the same request returns the
  -- existing service; anything else with that id is a conflict.
  SELECT * INTO v_existing FROM extsvc.service_records s WHERE s.service_id = v_id FOR UPDATE;
  IF FOUND THEN
    IF v_existing.tenant_organization_id <> _create_service.tenant_organization_id THEN
      -- never confirm another tenant's service (nor return its row)
      PERFORM extsvc._raise('42501', 'service_id is not available to this tenant',
        format('service_id: %s, tenant_organization_id: %s', v_id, _create_service.tenant_organization_id),
        'Omit service_id to get a fresh one, or pass the id of one of this tenant''s services.');
    END IF;
    IF v_existing.tenant_organization_id = _create_service.tenant_organization_id
       AND v_existing.service_name = v_name
       AND v_existing.service_type = v_type
       AND v_existing.deployment_scope = v_scope
       AND v_existing.dpu_target IS NOT DISTINCT FROM v_target
       AND v_existing.description IS NOT DISTINCT FROM _create_service.description
       AND v_existing.lifecycle_state NOT IN ('DELETING', 'DELETED')
       AND ((v_type = 'DPF_HELM_CHART'
             AND (SELECT r.data FROM extsvc.helm_revisions r
                   WHERE r.service_id = v_id AND r.revision = v_existing.desired_revision) = v_data)
         OR (v_type = 'KUBERNETES_POD'
             AND (SELECT v.data FROM extsvc.service_versions v WHERE v.service_id = v_id
                   ORDER BY v.version_number DESC LIMIT 1) = _create_service.data)) THEN
      RETURN extsvc._service_row(v_id);
    END IF;
    PERFORM extsvc._raise_c('service_records_pkey', '23505', 'service_id already exists', format('service_id: %s', v_id),
                          'Repeat a create only with identical arguments, or omit service_id.');
  END IF;

  PERFORM extsvc._check_name_free(_create_service.tenant_organization_id, v_name, NULL);

  IF v_type = 'DPF_HELM_CHART' THEN
    IF EXISTS (SELECT FROM extsvc.service_records s
               WHERE s.dpf_service_name = extsvc._dpf_service_name(v_id, v_version)) THEN
      PERFORM extsvc._raise_c('service_records_dpf_service_name_key', '23505', 'generated DPUService name collides with another service',
        format('dpf_service_name: %s', extsvc._dpf_service_name(v_id, v_version)),
        'Retry the create with another service_id.');
    END IF;
    INSERT INTO extsvc.service_records (service_id, tenant_organization_id, service_name, description,
        service_type, deployment_scope, dpu_target, lifecycle_state, state_actor, state_reason,
        attachable_version, desired_revision, dpf_service_name, placement_label_key, status_message)
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
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
    VALUES (v_id, _create_service.tenant_organization_id, v_name, _create_service.description,
        v_type, v_scope, NULL, 'READY', 'api', 'create',
        coalesce(_create_service.has_credential, false), _create_service.observability);
    INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
    VALUES (v_id, v_version, 1, _create_service.data, coalesce(_create_service.has_credential, false),
            _create_service.observability);
  END IF;
  RETURN extsvc._service_row(v_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb, boolean) IS
  'Internal: body of extsvc.create_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

-- The gates: SECURITY DEFINER; the admin one is executable by extsvc_admin only.
CREATE FUNCTION extsvc._create_service_as_admin(
    tenant_organization_id text, service_name text, service_type text, data text, description text,
    dpu_target text, deployment_scope text, service_id uuid, has_credential boolean, observability jsonb)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._create_service($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, true)
$fn$;
COMMENT ON FUNCTION extsvc._create_service_as_admin(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Internal gate of extsvc.create_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._create_service_as_api(
    tenant_organization_id text, service_name text, service_type text, data text, description text,
    dpu_target text, deployment_scope text, service_id uuid, has_credential boolean, observability jsonb)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._create_service($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, false)
$fn$;
COMMENT ON FUNCTION extsvc._create_service_as_api(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Internal gate of extsvc.create_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.create_service(
    tenant_organization_id text, service_name text, service_type text, data text,
    description text DEFAULT NULL, dpu_target text DEFAULT NULL,
    deployment_scope text DEFAULT NULL, service_id uuid DEFAULT NULL,
    has_credential boolean DEFAULT false, observability jsonb DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._create_service_as_admin(create_service.tenant_organization_id, create_service.service_name,
      create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
      create_service.deployment_scope, create_service.service_id, create_service.has_credential,
      create_service.observability);
  END IF;
  RETURN extsvc._create_service_as_api(create_service.tenant_organization_id, create_service.service_name,
    create_service.service_type, create_service.data, create_service.description, create_service.dpu_target,
    create_service.deployment_scope, create_service.service_id, create_service.has_credential,
    create_service.observability);
END
$fn$;
COMMENT ON FUNCTION extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb) IS
  'Creates a service. DPF_HELM_CHART answers CREATING: the worker creates the DPUService later. ALL_DPUS needs extsvc_admin rights of the calling role (SET ROLE included); another tenant''s service_id is refused (42501).';

-- The body of update_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match integer DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s        extsvc.service_records;
  v_name   text := btrim(_update_service.service_name);
  v_data   jsonb;
  v_cur    jsonb;
  v_rev    integer;
  v_next   text;
  v_vnum   integer;
BEGIN
  PERFORM extsvc._check_service_tenant(_update_service.service_id, _update_service.tenant_organization_id);
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _update_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _update_service.service_id),
                          'Check the service id; deleted services stay visible in extsvc.services.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may update ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to change site-wide services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', format('service is %s and cannot be updated', s.lifecycle_state),
                          format('service_id: %s, lifecycle_state: %s', s.service_id, s.lifecycle_state),
                          'Create a new service instead.');
  END IF;
  IF _update_service.if_version_ctr_match IS NOT NULL AND _update_service.if_version_ctr_match <> s.version_ctr THEN
    PERFORM extsvc._raise_c('version_ctr_match', '55000', 'version_ctr does not match',
                          format('if_version_ctr_match: %s, version_ctr: %s', _update_service.if_version_ctr_match, s.version_ctr),
                          'Re-read the service and retry with its current version_ctr.');
  END IF;
  IF _update_service.service_name IS NOT NULL AND (v_name = '' OR length(v_name) > 256) THEN
    PERFORM extsvc._raise('22023', 'service_name must be 1 to 256 characters', 'field: service_name',
                          'Pass a non-empty display name.');
  END IF;
  IF length(_update_service.description) > 4096 THEN
    PERFORM extsvc._raise('22023', 'description is longer than 4096 characters', 'field: description',
                          'Shorten the description.');
  END IF;

  IF s.service_type = 'DPF_HELM_CHART' THEN
    IF coalesce(_update_service.has_credential, false) THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not accept credentials', 'field: has_credential',
        'Provision an Argo CD repository Secret or a labelled image-pull Secret in the management namespace instead.');
    END IF;
    IF _update_service.observability IS NOT NULL THEN
      PERFORM extsvc._raise('0A000', 'DPF_HELM_CHART services do not support observability configuration',
                            'field: observability', 'Omit observability for DPF_HELM_CHART services.');
    END IF;
    IF _update_service.data IS NOT NULL THEN
      v_data := extsvc._validate_helm_chart_data(_update_service.data);
      PERFORM extsvc._check_chart_allowed(v_data);
    END IF;
  ELSIF _update_service.data IS NOT NULL
        AND (btrim(_update_service.data) = '' OR octet_length(_update_service.data) > 131072) THEN
    PERFORM extsvc._raise('22023', 'data must be 1 to 131072 bytes', 'field: data', 'Pass the pod definition.');
  END IF;

  IF v_name IS NOT NULL AND v_name <> s.service_name THEN
    PERFORM extsvc._check_name_free(s.tenant_organization_id, v_name, s.service_id);
    UPDATE extsvc.service_records r SET service_name = v_name, updated_at = now()
     WHERE r.service_id = s.service_id;
  END IF;
  IF _update_service.description IS NOT NULL AND _update_service.description IS DISTINCT FROM s.description THEN
    UPDATE extsvc.service_records r SET description = _update_service.description, updated_at = now()
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
      -- an update of a FAILED service replaces a delete that failed before:
      -- a later retry_service retries this definition, not the delete (issue #13)
      UPDATE extsvc.service_records r
         SET desired_revision = v_rev, version_ctr = r.version_ctr + 1, updated_at = now(),
             delete_requested_at = CASE WHEN s.lifecycle_state = 'FAILED' THEN NULL ELSE r.delete_requested_at END,
             lifecycle_state = v_next, state_actor = 'api', state_reason = 'update',
             status_message = format('waiting for the worker to apply revision %s', v_rev)
       WHERE r.service_id = s.service_id;
      IF v_next = s.lifecycle_state THEN
        PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'api', 'superseded',
                                     format('revision %s supersedes revision %s', v_rev, s.desired_revision), v_rev);
      END IF;
      PERFORM extsvc._intent_changed(s.service_id);
    END IF;
  ELSIF s.service_type = 'KUBERNETES_POD' AND (_update_service.data IS NOT NULL
        OR _update_service.has_credential IS NOT NULL OR _update_service.observability IS NOT NULL) THEN
    SELECT v.version_number INTO v_vnum FROM extsvc.service_versions v
     WHERE v.service_id = s.service_id ORDER BY v.version_number DESC LIMIT 1;
    -- A version with data is a full spec, as in NICo (issue #14 P1-10): an
    -- omitted has_credential / observability means none. has_credential =>
    -- true says NICo stored a (rotated) credential: always a new version,
    -- numbered version_ctr + 1, NICo's Vault key (issue #14 P0-5).
    IF _update_service.data IS NOT NULL AND NOT coalesce(_update_service.has_credential, false) AND EXISTS (
         SELECT FROM extsvc.service_versions v WHERE v.service_id = s.service_id
            AND v.version_number = v_vnum AND v.deleted_at IS NULL AND v.data = _update_service.data
            AND NOT v.has_credential
            AND v.observability IS NOT DISTINCT FROM _update_service.observability) THEN
      NULL;  -- same definition: idempotent no-op
    ELSE
      INSERT INTO extsvc.service_versions (service_id, version, version_number, data, has_credential, observability)
      SELECT s.service_id, extsvc._config_version(v_vnum + 1), v_vnum + 1,
             coalesce(_update_service.data, v.data),
             CASE WHEN _update_service.data IS NOT NULL THEN coalesce(_update_service.has_credential, false)
                  ELSE coalesce(_update_service.has_credential, v.has_credential) END,
             CASE WHEN _update_service.data IS NOT NULL THEN _update_service.observability
                  ELSE coalesce(_update_service.observability, v.observability) END
        FROM extsvc.service_versions v WHERE v.service_id = s.service_id AND v.version_number = v_vnum;
      UPDATE extsvc.service_records r
         SET version_ctr = r.version_ctr + 1, updated_at = now(),
             has_credential = v.has_credential, observability = v.observability
        FROM extsvc.service_versions v
       WHERE r.service_id = s.service_id AND v.service_id = s.service_id AND v.version_number = v_vnum + 1;
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'new_version',
                                   format('version %s%s', extsvc._config_version(v_vnum + 1),
                                          CASE WHEN coalesce(_update_service.has_credential, false)
                                               THEN ' (credential provided)' ELSE '' END), NULL);
    END IF;
  END IF;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._update_service(uuid, text, text, text, integer, boolean, jsonb, text, boolean) IS
  'Internal: body of extsvc.update_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc._update_service_as_admin(
    service_id uuid, data text, service_name text, description text, if_version_ctr_match integer,
    has_credential boolean, observability jsonb, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._update_service($1, $2, $3, $4, $5, $6, $7, $8, true)
$fn$;
COMMENT ON FUNCTION extsvc._update_service_as_admin(uuid, text, text, text, integer, boolean, jsonb, text) IS
  'Internal gate of extsvc.update_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._update_service_as_api(
    service_id uuid, data text, service_name text, description text, if_version_ctr_match integer,
    has_credential boolean, observability jsonb, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._update_service($1, $2, $3, $4, $5, $6, $7, $8, false)
$fn$;
COMMENT ON FUNCTION extsvc._update_service_as_api(uuid, text, text, text, integer, boolean, jsonb, text) IS
  'Internal gate of extsvc.update_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.update_service(
    service_id uuid, data text DEFAULT NULL, service_name text DEFAULT NULL,
    description text DEFAULT NULL, if_version_ctr_match integer DEFAULT NULL,
    has_credential boolean DEFAULT NULL, observability jsonb DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._update_service_as_admin(update_service.service_id, update_service.data,
      update_service.service_name, update_service.description, update_service.if_version_ctr_match,
      update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
  END IF;
  RETURN extsvc._update_service_as_api(update_service.service_id, update_service.data,
    update_service.service_name, update_service.description, update_service.if_version_ctr_match,
    update_service.has_credential, update_service.observability, update_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.update_service(uuid, text, text, text, integer, boolean, jsonb, text) IS
  'Updates name, description or data. A DPF data change becomes a new Helm revision; the same data again is a no-op. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';

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

-- The body of delete_service; p_admin comes from the gate that called it.
CREATE FUNCTION extsvc._delete_service(service_id uuid, version text DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL, p_admin boolean DEFAULT false)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s          extsvc.service_records;
  v_blocking text;
BEGIN
  PERFORM extsvc._check_service_tenant(_delete_service.service_id, _delete_service.tenant_organization_id);
  -- FOR NO KEY UPDATE, not FOR UPDATE (issue 13): the key never changes, and
  -- the worker's DPU completion, holding a DPU's work row, takes KEY SHARE on
  -- the service (the foreign key of the site_service_dpu_status row it
  -- inserts). FOR UPDATE made it wait for this call while the lifecycle
  -- trigger (_service_state_wakes_dpus) made this call wait for that work
  -- row: a deadlock (test/nico/race_dpu_completion.py). An attach's FOR SHARE
  -- still waits for this lock (race_attach_delete.py).
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _delete_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _delete_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may delete ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to delete site-wide services.');
  END IF;
  IF _delete_service.version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v
        WHERE v.service_id = s.service_id AND v.version = _delete_service.version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', s.service_id, _delete_service.version),
                          'List the versions with SELECT version FROM extsvc.services.');
  END IF;
  IF s.lifecycle_state IN ('DELETING', 'DELETED') THEN
    RETURN extsvc._service_row(s.service_id);   -- idempotent
  END IF;

  IF s.service_type = 'KUBERNETES_POD' THEN
    -- in use (issue #14 P0-6, as in NICo): active entries, tombstones whose
    -- termination NICo has not confirmed yet (extsvc.remove_terminated_services),
    -- and entries of instances being deleted
    SELECT string_agg(DISTINCT i.instance_id::text, ', ') INTO v_blocking
      FROM extsvc.instance_extension_services i
     WHERE i.service_id = s.service_id
       AND (_delete_service.version IS NULL OR i.version = _delete_service.version);
    IF v_blocking IS NOT NULL THEN
      PERFORM extsvc._raise_c('service_in_use', '55000', 'service is still attached to instances',
                            format('instances: %s', v_blocking),
                            'Detach the service from these instances and confirm termination (extsvc.remove_terminated_services) first.');
    END IF;
    UPDATE extsvc.service_versions v SET deleted_at = now()
     WHERE v.service_id = s.service_id AND v.deleted_at IS NULL
       AND (_delete_service.version IS NULL OR v.version = _delete_service.version);
    IF NOT EXISTS (SELECT FROM extsvc.service_versions v
                    WHERE v.service_id = s.service_id AND v.deleted_at IS NULL) THEN
      UPDATE extsvc.service_records r
         SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'delete',
             deleted_at = now(), delete_requested_at = now(), updated_at = now(), status_message = NULL
       WHERE r.service_id = s.service_id;
    ELSE
      UPDATE extsvc.service_records r SET updated_at = now() WHERE r.service_id = s.service_id;  -- issue #14 P1-11
      PERFORM extsvc._record_event(s.service_id, 'READY', 'api', 'version_deleted',
                                   format('version %s', _delete_service.version), NULL);
    END IF;
    RETURN extsvc._service_row(s.service_id);
  END IF;

  -- DPF_HELM_CHART: blocked while any attachment or tombstone references it.
  v_blocking := extsvc._blocking_instances(s.service_id, NULL);
  IF v_blocking IS NOT NULL THEN
    PERFORM extsvc._raise_c('service_in_use', '55000', 'service still has active or removing attachments',
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
COMMENT ON FUNCTION extsvc._delete_service(uuid, text, text, boolean) IS
  'Internal: body of extsvc.delete_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc._delete_service_as_admin(service_id uuid, version text, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._delete_service($1, $2, $3, true)
$fn$;
COMMENT ON FUNCTION extsvc._delete_service_as_admin(uuid, text, text) IS
  'Internal gate of extsvc.delete_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._delete_service_as_api(service_id uuid, version text, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._delete_service($1, $2, $3, false)
$fn$;
COMMENT ON FUNCTION extsvc._delete_service_as_api(uuid, text, text) IS
  'Internal gate of extsvc.delete_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.delete_service(service_id uuid, version text DEFAULT NULL,
                                      tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._delete_service_as_admin(delete_service.service_id, delete_service.version,
                                           delete_service.tenant_organization_id);
  END IF;
  RETURN extsvc._delete_service_as_api(delete_service.service_id, delete_service.version,
                                       delete_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service(uuid, text, text) IS
  'Deletes a service (or one KUBERNETES_POD version). DPF services go DELETING; the worker finishes the delete. ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, a service of another tenant is refused (42501) exactly like an unknown one.';

-- ---- sql/parts/52_render_and_charts.sql (definitions)
-- The operator's rendering of a service's DPUService, and the chart
-- allow-list (SPEC 2.2).

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
  RETURN extsvc._render_dpuservice(s.service_id, s.attachable_version, s.desired_revision, v_data,
                                   extsvc._namespace());
END
$fn$;
COMMENT ON FUNCTION extsvc.render_dpuservice(uuid) IS
  'The DPUService object of the desired revision, as the worker sends it to the management cluster.';

-- The body of allow_chart: reached only through its admin gate.
CREATE FUNCTION extsvc._allow_chart(repo_url text, chart_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_probe text;
BEGIN
  -- The entry must itself be a valid repository URL.
  v_probe := format('{"repoURL":%s,"chartName":"probe","chartVersion":"1.0.0","security":{"privileged":false}}',
                    to_json(_allow_chart.repo_url));
  PERFORM extsvc._validate_helm_chart_data(v_probe);
  INSERT INTO extsvc.chart_allowlist (repo_url, chart_name)
  VALUES (rtrim(_allow_chart.repo_url, '/'), coalesce(_allow_chart.chart_name, ''))
  ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION extsvc._allow_chart(text, text) IS 'Internal: body of extsvc.allow_chart. No grants.';

CREATE FUNCTION extsvc._allow_chart_as_admin(repo_url text, chart_name text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._allow_chart($1, $2)
$fn$;
COMMENT ON FUNCTION extsvc._allow_chart_as_admin(text, text) IS
  'Internal gate of extsvc.allow_chart (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc.allow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF NOT pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'only extsvc_admin members may change the chart allow-list',
                          DETAIL = 'function: extsvc.allow_chart', HINT = 'Ask an operator.';
  END IF;
  PERFORM extsvc._allow_chart_as_admin(allow_chart.repo_url, allow_chart.chart_name);
END
$fn$;
COMMENT ON FUNCTION extsvc.allow_chart(text, text) IS
  'Admin: allow charts from a repository URL prefix (chart_name NULL = any chart). Needs extsvc_admin rights of the calling role (SET ROLE included).';

-- The body of disallow_chart: reached only through its admin gate.
CREATE FUNCTION extsvc._disallow_chart(repo_url text, chart_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  DELETE FROM extsvc.chart_allowlist a
   WHERE a.repo_url = rtrim(_disallow_chart.repo_url, '/')
     AND a.chart_name = coalesce(_disallow_chart.chart_name, '');
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'allow-list entry not found',
                          format('repo_url: %s, chart_name: %s', _disallow_chart.repo_url, coalesce(_disallow_chart.chart_name, '(any)')),
                          'List entries with SELECT * FROM extsvc.chart_allowlist.');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._disallow_chart(text, text) IS 'Internal: body of extsvc.disallow_chart. No grants.';

CREATE FUNCTION extsvc._disallow_chart_as_admin(repo_url text, chart_name text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._disallow_chart($1, $2)
$fn$;
COMMENT ON FUNCTION extsvc._disallow_chart_as_admin(text, text) IS
  'Internal gate of extsvc.disallow_chart (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc.disallow_chart(repo_url text, chart_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF NOT pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = 'only extsvc_admin members may change the chart allow-list',
                          DETAIL = 'function: extsvc.disallow_chart', HINT = 'Ask an operator.';
  END IF;
  PERFORM extsvc._disallow_chart_as_admin(disallow_chart.repo_url, disallow_chart.chart_name);
END
$fn$;
COMMENT ON FUNCTION extsvc.disallow_chart(text, text) IS
  'Admin: remove an allow-list entry. Needs extsvc_admin rights of the calling role (SET ROLE included).';

-- ---- sql/parts/60_worker_operator.sql (definitions)
-- The operator's handles on the workers: make work due now, the per-slot
-- counters, a resync on demand. The queue itself is sql/parts/76_worker_queue.sql.

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

-- extsvc.retry_service: sql/parts/82_revisions.sql (for extsvc_api too, issue #12).

CREATE FUNCTION extsvc.worker_status(
    OUT slot integer, OUT pid integer, OUT iterations bigint, OUT claimed bigint,
    OUT completed bigint, OUT stale bigint, OUT http_requests bigint, OUT http_errors bigint,
    OUT last_activity timestamptz, OUT fenced bigint, OUT lease_renewals bigint,
    OUT orphans_deleted bigint, OUT dpus_rederived bigint, OUT leases_released bigint,
    OUT watch_wakes bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_status';
COMMENT ON FUNCTION extsvc.worker_status() IS
  'Operator: one row per worker slot with counters since server start (needs shared_preload_libraries).';

CREATE FUNCTION extsvc.watch_status(
    OUT resource text, OUT cluster text, OUT watcher_pid integer, OUT synced boolean,
    OUT current boolean, OUT current_at timestamptz, OUT objects bigint, OUT lists bigint,
    OUT watches bigint, OUT events bigint, OUT bookmarks bigint, OUT expired bigint,
    OUT errors bigint, OUT last_error text)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_watch_status';
COMMENT ON FUNCTION extsvc.watch_status() IS
  'Operator: one row per informer of the watcher (worker 0 with extsvc.watch on): listed (synced), stream open (current), when last current, cached objects, and counters since the watcher started; no rows when nothing is watched.';

CREATE FUNCTION extsvc.request_resync() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_request_resync';
COMMENT ON FUNCTION extsvc.request_resync() IS
  'Operator: run the drift-detecting resync pass now instead of at the next extsvc.resync_interval.';

-- ---- sql/parts/70_placement_internals.sql (definitions)
-- Placement internals: the desired labels of every DPU, the triggers that
-- make DPUs due when they change, target resolution and the attachment rows
-- of an instance (SPEC 2.4, 2.7). The API is sql/parts/72_placement_api.sql.

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

-- Lock order of placement changes (issue 13; docs/reliability.md). The
-- worker's DPU completion, extsvc.complete('dpu', d), locks d's
-- dpu_reconciliations row first, then writes d's attachment rows and locks
-- the instances it cleans up (_cleanup_instance). An API call that changes
-- placement locks an instance or DPU row and writes attachment rows, whose
-- trigger then locks their DPUs' dpu_reconciliations rows (_touch_dpu): the
-- other order, and the two deadlocked. So such a call first locks every
-- dpu_reconciliations row it may touch, in dpu_machine_id order, and only
-- then its instance or DPU row; once it holds that row it calls this again
-- for rows a concurrent call added meanwhile. The rows: every DPU of p_hosts
-- and of the instances' hosts, and every DPU with an attachment row of the
-- instances; p_instances NULL means the instances on p_hosts.
CREATE FUNCTION extsvc._lock_dpu_work(p_hosts uuid[], p_instances uuid[] DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_instances uuid[] := coalesce(p_instances, ARRAY(SELECT i.instance_id FROM extsvc.instances i
                                                     WHERE i.host_machine_id = ANY (p_hosts)));
  v_hosts uuid[] := p_hosts || ARRAY(SELECT i.host_machine_id FROM extsvc.instances i
                                      WHERE i.instance_id = ANY (p_instances));
BEGIN
  PERFORM FROM extsvc.dpu_reconciliations q
   WHERE q.dpu_machine_id IN (SELECT d.machine_id FROM extsvc.dpus d WHERE d.host_machine_id = ANY (v_hosts)
                              UNION
                              SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
                               WHERE a.instance_id = ANY (v_instances))
   ORDER BY q.dpu_machine_id
   FOR NO KEY UPDATE OF q;
END
$fn$;
COMMENT ON FUNCTION extsvc._lock_dpu_work(uuid[], uuid[]) IS
  'Internal: locks, in dpu_machine_id order, the DPU work rows a placement change of these hosts or instances may touch; API calls take them before their instance or DPU row, the order of the worker''s DPU completion.';

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
  -- in dpu_machine_id order, the order of _lock_dpu_work (issue 13)
  IF NEW.deployment_scope = 'ALL_DPUS' THEN
    FOR d IN SELECT machine_id FROM extsvc.dpus ORDER BY machine_id LOOP
      PERFORM extsvc._touch_dpu(d);
    END LOOP;
  ELSE
    FOR d IN SELECT DISTINCT dpu_machine_id FROM extsvc.dpf_extension_service_attachments
              WHERE service_id = NEW.service_id ORDER BY dpu_machine_id LOOP
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
  -- KUBERNETES_POD entries stay until NICo confirms their termination
  -- (extsvc.remove_terminated_services; issue #14 P1-8): the DPU agent must
  -- see them removed
  IF i.delete_requested_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a WHERE a.instance_id = p_instance)
     AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services c WHERE c.instance_id = p_instance) THEN
    DELETE FROM extsvc.instances WHERE instance_id = p_instance;
  END IF;
END
$fn$;

-- ---- sql/parts/72_placement_api.sql (definitions)
-- The placement API: DPU and instance registry, attachments, per-DPU status
-- (SPEC 2.4, 2.7, 2.8). Internals: sql/parts/70_placement_internals.sql.

-- Registry ---------------------------------------------------------------------

CREATE FUNCTION extsvc.register_dpu(machine_id uuid, host_machine_id uuid, dpu_device_name text,
                                    dpu_node_name text, is_primary boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.dpus;
  inst uuid;
  v_primary boolean;
BEGIN
  IF register_dpu.machine_id IS NULL OR register_dpu.host_machine_id IS NULL THEN
    PERFORM extsvc._raise('22023', 'machine_id and host_machine_id are required', 'field: machine_id',
                          'Pass the DPU''s and the host''s machine ids.');
  END IF;
  IF register_dpu.dpu_device_name IS NULL OR register_dpu.dpu_device_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_device_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_device_name is not a Kubernetes object name',
                          format('field: dpu_device_name = %s', extsvc._token(register_dpu.dpu_device_name)),
                          'Use the name of the DPUDevice object (lowercase DNS subdomain).');
  END IF;
  IF register_dpu.dpu_node_name IS NULL OR register_dpu.dpu_node_name !~ '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'
     OR length(register_dpu.dpu_node_name) > 253 THEN
    PERFORM extsvc._raise('22023', 'dpu_node_name is not a Kubernetes node name',
                          format('field: dpu_node_name = %s', extsvc._token(register_dpu.dpu_node_name)),
                          'Use the name of the DPU-cluster Node (the DPU object''s name).');
  END IF;
  -- lock order (issue 13, _lock_dpu_work): the work rows of the DPUs of the
  -- old and new host and of their instances before the DPU row
  PERFORM extsvc._lock_dpu_work(ARRAY[register_dpu.host_machine_id,
                                      (SELECT d.host_machine_id FROM extsvc.dpus d WHERE d.machine_id = register_dpu.machine_id)]);
  SELECT * INTO old FROM extsvc.dpus d WHERE d.machine_id = register_dpu.machine_id FOR UPDATE;
  PERFORM extsvc._lock_dpu_work(ARRAY[register_dpu.host_machine_id, old.host_machine_id]);
  IF EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id <> register_dpu.machine_id
               AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name)) THEN
    PERFORM extsvc._raise_c(CASE WHEN EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id <> register_dpu.machine_id
                                                 AND d.dpu_device_name = register_dpu.dpu_device_name)
                                 THEN 'dpus_dpu_device_name_key' ELSE 'dpus_dpu_node_name_key' END,
                            '23505', 'another DPU is registered with this DPUDevice or Node name',
      format('dpu_device_name: %s, dpu_node_name: %s, registered to: %s', register_dpu.dpu_device_name,
             register_dpu.dpu_node_name,
             (SELECT string_agg(d.machine_id::text, ', ') FROM extsvc.dpus d
               WHERE d.machine_id <> register_dpu.machine_id
                 AND (d.dpu_device_name = register_dpu.dpu_device_name OR d.dpu_node_name = register_dpu.dpu_node_name))),
      'Deregister or re-register the other DPU first; names identify cluster objects.');
  END IF;
  -- an omitted is_primary keeps the flag of a DPU that stays on its host
  -- (issue #12); a DPU registered to another host without it is not that
  -- host's primary (it never demotes the DPU that is; issue #13)
  v_primary := coalesce(register_dpu.is_primary,
                        CASE WHEN old.host_machine_id = register_dpu.host_machine_id THEN old.is_primary END, false);
  IF v_primary AND EXISTS (
       SELECT FROM extsvc.dpus d WHERE d.host_machine_id = register_dpu.host_machine_id AND d.is_primary
          AND d.machine_id <> register_dpu.machine_id AND d.deregistered_at IS NULL) THEN
    -- the host's primary DPU changes: the previous one stops being primary
    UPDATE extsvc.dpus d SET is_primary = false, updated_at = now()
     WHERE d.host_machine_id = register_dpu.host_machine_id AND d.is_primary
       AND d.machine_id <> register_dpu.machine_id;
  END IF;
  INSERT INTO extsvc.dpus AS d (machine_id, host_machine_id, dpu_device_name, dpu_node_name, is_primary)
  VALUES (register_dpu.machine_id, register_dpu.host_machine_id, register_dpu.dpu_device_name,
          register_dpu.dpu_node_name, v_primary)
  ON CONFLICT ON CONSTRAINT dpus_pkey DO UPDATE
    SET host_machine_id = EXCLUDED.host_machine_id, dpu_device_name = EXCLUDED.dpu_device_name,
        dpu_node_name = EXCLUDED.dpu_node_name,
        is_primary = EXCLUDED.is_primary,
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
  'Registers (or updates) a DPU of a host with its DPUDevice and DPU-cluster Node names. is_primary omitted or NULL: false for a new DPU or one registered to another host, the current flag for a DPU that stays on its host; true makes it the host''s primary DPU.';

CREATE FUNCTION extsvc.deregister_dpu(machine_id uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  d extsvc.dpus;
  inst uuid;
BEGIN
  -- lock order (issue 13, _lock_dpu_work): the work rows of the host's DPUs
  -- and of its instances before the DPU row
  PERFORM extsvc._lock_dpu_work(ARRAY(SELECT x.host_machine_id FROM extsvc.dpus x
                                       WHERE x.machine_id = deregister_dpu.machine_id));
  SELECT * INTO d FROM extsvc.dpus x WHERE x.machine_id = deregister_dpu.machine_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', deregister_dpu.machine_id),
                          'Check the DPU machine id.');
  END IF;
  PERFORM extsvc._lock_dpu_work(ARRAY[d.host_machine_id]);
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
                                       network_dpus uuid[] DEFAULT NULL, dpf_managed boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  old extsvc.instances;
  v_bad text;
BEGIN
  IF upsert_instance.instance_id IS NULL OR upsert_instance.host_machine_id IS NULL THEN
    PERFORM extsvc._raise('22023', 'instance_id and host_machine_id are required', 'field: instance_id',
                          'Pass the instance id and its host''s machine id.');
  END IF;
  IF upsert_instance.tenant_organization_id IS NULL OR btrim(upsert_instance.tenant_organization_id) = '' THEN
    PERFORM extsvc._raise('22023', 'tenant_organization_id must not be empty', 'field: tenant_organization_id',
                          'Pass the tenant organization id of the instance.');
  END IF;
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows (old and new
  -- host) before the instance
  PERFORM extsvc._lock_dpu_work(ARRAY[upsert_instance.host_machine_id], ARRAY[upsert_instance.instance_id]);
  SELECT * INTO old FROM extsvc.instances i WHERE i.instance_id = upsert_instance.instance_id FOR UPDATE;
  PERFORM extsvc._lock_dpu_work(ARRAY[upsert_instance.host_machine_id], ARRAY[upsert_instance.instance_id]);
  IF old.instance_id IS NOT NULL THEN
    IF old.delete_requested_at IS NOT NULL THEN
      PERFORM extsvc._raise_c('instance_deleting', '55000', 'instance is being deleted', format('instance_id: %s', old.instance_id),
                            'Wait until the deletion finished.');
    END IF;
    IF old.tenant_organization_id <> upsert_instance.tenant_organization_id THEN
      -- an instance never changes its tenant; the answer names nothing of the row
      PERFORM extsvc._raise('42501', 'instance_id is not available to this tenant',
                            format('instance_id: %s, tenant_organization_id: %s', old.instance_id,
                                   upsert_instance.tenant_organization_id),
                            'An instance keeps the tenant it was registered with; use another instance_id.');
    END IF;
  END IF;
  -- network_dpus must be registered DPUs of this host (issue #12: otherwise
  -- the placement silently froze on the old DPU, which still read ready)
  SELECT string_agg(format('%s (%s)', n.id,
                           CASE WHEN d.machine_id IS NULL THEN 'not registered'
                                WHEN d.host_machine_id <> upsert_instance.host_machine_id
                                  THEN format('registered to host %s', d.host_machine_id)
                                ELSE 'deregistered' END), ', ' ORDER BY n.o)
    INTO v_bad
    FROM unnest(upsert_instance.network_dpus) WITH ORDINALITY n(id, o)
    LEFT JOIN extsvc.dpus d ON d.machine_id = n.id
   WHERE d.machine_id IS NULL OR d.host_machine_id <> upsert_instance.host_machine_id
      OR d.deregistered_at IS NOT NULL;
  IF v_bad IS NOT NULL THEN
    PERFORM extsvc._raise('22023', 'network_dpus names DPUs that are not registered to the instance''s host',
                          format('field: network_dpus; host_machine_id: %s; %s', upsert_instance.host_machine_id, v_bad),
                          'Register the host''s DPUs with extsvc.register_dpu first, and list only DPUs of host_machine_id.');
  END IF;
  -- an instance with DPF services cannot leave DPF while any remain
  IF old.instance_id IS NOT NULL AND old.dpf_managed AND upsert_instance.dpf_managed IS NOT NULL AND NOT upsert_instance.dpf_managed THEN
    SELECT string_agg(DISTINCT s.service_id::text, ', ') INTO v_bad
      FROM extsvc.service_records s
     WHERE s.service_type = 'DPF_HELM_CHART'
       AND (EXISTS (SELECT FROM extsvc.instance_extension_services c
                     WHERE c.instance_id = old.instance_id AND c.service_id = s.service_id)
            OR EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                        WHERE a.instance_id = old.instance_id AND a.service_id = s.service_id));
    IF v_bad IS NOT NULL THEN
      PERFORM extsvc._raise_c('instance_dpf_attachments', '55000', 'instance still has DPF_HELM_CHART attachments; dpf_managed cannot become false',
                            format('field: dpf_managed; instance_id: %s; services: %s', old.instance_id, v_bad),
                            'Detach its DPF services and wait until their DPUs report TERMINATED, then retry.');
    END IF;
  END IF;
  INSERT INTO extsvc.instances AS i (instance_id, tenant_organization_id, host_machine_id, network_dpus, dpf_managed)
  VALUES (upsert_instance.instance_id, upsert_instance.tenant_organization_id, upsert_instance.host_machine_id,
          coalesce(upsert_instance.network_dpus, '{}'), coalesce(upsert_instance.dpf_managed, true))
  ON CONFLICT ON CONSTRAINT instances_pkey DO UPDATE
    SET host_machine_id = EXCLUDED.host_machine_id,
        network_dpus = coalesce(upsert_instance.network_dpus, i.network_dpus),
        -- an omitted dpf_managed (NULL) keeps the current value (issue #12)
        dpf_managed = coalesce(upsert_instance.dpf_managed, i.dpf_managed), updated_at = now();
  PERFORM extsvc._materialize_instance(upsert_instance.instance_id, false);
END
$fn$;
COMMENT ON FUNCTION extsvc.upsert_instance(uuid, text, uuid, uuid[], boolean) IS
  'Registers or updates an instance (host, network DPUs, DPF-managed); re-resolves its DPU targets. network_dpus must be registered DPUs of the host (22023 naming the others); NULL keeps the current list. dpf_managed NULL: true for a new instance, the current value otherwise; false is refused while DPF attachments or tombstones remain (55000). Another tenant''s instance_id is refused (42501).';

CREATE FUNCTION extsvc.set_instance_extension_services(instance_id uuid, services jsonb,
                                                       if_config_version_match integer DEFAULT NULL,
                                                       tenant_organization_id text DEFAULT NULL)
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
  PERFORM extsvc._check_instance_tenant(set_instance_extension_services.instance_id,
                                        set_instance_extension_services.tenant_organization_id);
  -- Lock the referenced services FOR SHARE, in id order, before checking
  -- them (issue #14 P0-4): a concurrent delete_service (FOR NO KEY UPDATE)
  -- either waits for this transaction and then sees its entries, or commits
  -- first and this call sees DELETING. test/nico/race_attach_delete.py proves
  -- it. They come first (issue 13): a service call holds its service row
  -- while its lifecycle trigger locks the work rows of the service's DPUs.
  PERFORM FROM extsvc.service_records r
   WHERE r.service_id IN (
           SELECT (x->>'service_id')::uuid
             FROM jsonb_array_elements(CASE WHEN jsonb_typeof(services) = 'array' THEN services END) x
            WHERE jsonb_typeof(x) = 'object' AND jsonb_typeof(x->'service_id') = 'string'
              AND (x->>'service_id') ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
   ORDER BY r.service_id
   FOR SHARE OF r;
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows before the instance
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[set_instance_extension_services.instance_id]);
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = set_instance_extension_services.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', set_instance_extension_services.instance_id),
                          'Register it with extsvc.upsert_instance first.');
  END IF;
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[i.instance_id]);
  IF i.delete_requested_at IS NOT NULL THEN
    PERFORM extsvc._raise_c('instance_deleting', '55000', 'instance is being deleted', format('instance_id: %s', i.instance_id),
                          'Its configuration can no longer change.');
  END IF;
  IF if_config_version_match IS NOT NULL AND if_config_version_match <> i.config_version THEN
    PERFORM extsvc._raise_c('config_version_match', '55000', 'config_version does not match',
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
    IF set_instance_extension_services.tenant_organization_id IS NOT NULL
       AND (NOT FOUND OR s.tenant_organization_id <> set_instance_extension_services.tenant_organization_id) THEN
      -- with a tenant given: one answer for unknown and foreign services
      PERFORM extsvc._raise('42501', 'service is not accessible to this tenant',
        format('JSON path: $[%s].service_id = %s, tenant_organization_id: %s', n, v_sid,
               set_instance_extension_services.tenant_organization_id),
        'Pass the id of one of this tenant''s services; an unknown id and another tenant''s id get this same answer.');
    END IF;
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
      PERFORM extsvc._raise('P0002', 'service version not found', format('JSON path: $[%s].version = %s', n, extsvc._token(v_ver)),
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
    -- NICo's rule (issue #14 P1-14), opt-in: DPF-managed hosts run tenant
    -- workloads through DPF only; entries already attached stay allowed
    IF s.service_type = 'KUBERNETES_POD' AND i.dpf_managed
       AND coalesce(nullif(current_setting('extsvc.refuse_pod_services_on_dpf_hosts', true), ''), 'off')::boolean
       AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services c
                        WHERE c.instance_id = i.instance_id AND c.service_id = v_sid AND c.version = v_ver
                          AND c.removed_at IS NULL) THEN
      PERFORM extsvc._raise('22023', 'KUBERNETES_POD services are refused on DPF-managed hosts',
                            format('JSON path: $[%s].service_id = %s, instance_id: %s', n, v_sid, i.instance_id),
                            'Use a DPF_HELM_CHART service, or turn off extsvc.refuse_pod_services_on_dpf_hosts.');
    END IF;
    IF NOT EXISTS (SELECT FROM extsvc.instance_extension_services c
                    WHERE c.instance_id = i.instance_id AND c.service_id = v_sid AND c.version = v_ver
                      AND c.removed_at IS NULL)
       AND s.lifecycle_state <> 'READY' THEN
      PERFORM extsvc._raise_c('service_not_ready', '55000', format('service is %s; only READY services can be attached', s.lifecycle_state),
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
  -- a removed DPF entry with no row left to observe (its host has no
  -- registered DPU any more) has nothing to wait for: it goes now
  DELETE FROM extsvc.instance_extension_services c
   WHERE c.instance_id = i.instance_id AND c.removed_at IS NOT NULL
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                        AND a.version = c.version)
     AND EXISTS (SELECT FROM extsvc.service_records s
                  WHERE s.service_id = c.service_id AND s.service_type = 'DPF_HELM_CHART');
  -- every DPU of the instance must be observed again for the new
  -- config_version (configs_synced), also those whose rows did not change
  PERFORM extsvc._touch_dpu(x.dpu_machine_id)
     FROM (SELECT DISTINCT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
            WHERE a.instance_id = i.instance_id) x;
  RETURN i.config_version + 1;
END
$fn$;
COMMENT ON FUNCTION extsvc.set_instance_extension_services(uuid, jsonb, integer, text) IS
  'Sets an instance''s extension services; removed entries stay as tombstones until their DPUs report TERMINATED. Returns the new config_version. With tenant_organization_id, an instance or service of another tenant is refused (42501) exactly like an unknown one.';

CREATE FUNCTION extsvc.delete_instance(instance_id uuid, tenant_organization_id text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
BEGIN
  PERFORM extsvc._check_instance_tenant(delete_instance.instance_id, delete_instance.tenant_organization_id);
  -- lock order (issue 13, _lock_dpu_work): the DPUs' work rows before the instance
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[delete_instance.instance_id]);
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = delete_instance.instance_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'instance not found', format('instance_id: %s', delete_instance.instance_id),
                          'Check the instance id; a finished deletion removes the instance.');
  END IF;
  PERFORM extsvc._lock_dpu_work('{}', ARRAY[i.instance_id]);
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
COMMENT ON FUNCTION extsvc.delete_instance(uuid, text) IS
  'Deletes an instance: every attachment goes REMOVING on every DPU of the host; the instance disappears when all are TERMINATED. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

-- Status -------------------------------------------------------------------------

CREATE FUNCTION extsvc.instance_extension_service_status(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, service_name text, version text, dpu_machine_id uuid, dpu_device_name text,
               dpu_node_name text, placement_state text, deployment_state text, removed_at timestamptz,
               status_message text, observed_at timestamptz, config_version integer,
               observed_config_version integer, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_instance(instance_extension_service_status.instance_id,
                                       instance_extension_service_status.tenant_organization_id);
  SELECT a.service_id, s.service_name, a.version, a.dpu_machine_id, d.dpu_device_name, d.dpu_node_name,
         a.placement_state, extsvc._effective_deployment_state(a.deployment_state, a.observed_at),
         c.removed_at, a.status_message, a.observed_at,
         i.config_version, a.observed_config_version, i.config_version_text
    FROM extsvc.dpf_extension_service_attachments a
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = a.service_id
    JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id
    LEFT JOIN extsvc.instance_extension_services c
      ON c.instance_id = a.instance_id AND c.service_id = a.service_id AND c.version = a.version
   WHERE a.instance_id = instance_extension_service_status.instance_id
   ORDER BY s.service_name, a.version, d.dpu_device_name
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_service_status(uuid, text) IS
  'One row per (service, version, DPU) of an instance: placement and observed deployment state (UNKNOWN once older than extsvc.observation_max_age). With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

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

CREATE FUNCTION extsvc.instance_extension_services_summary(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, service_name text, service_type text, version text, aggregate_state text,
               removed boolean, removed_at timestamptz, dpus integer, configs_synced boolean,
               config_version integer, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_instance(instance_extension_services_summary.instance_id,
                                       instance_extension_services_summary.tenant_organization_id);
  SELECT c.service_id, s.service_name, s.service_type, c.version,
         CASE WHEN s.service_type = 'KUBERNETES_POD' THEN NULL
              WHEN NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                                WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                                  AND a.version = c.version)
                   AND c.removed_at IS NOT NULL THEN 'TERMINATED'
              ELSE extsvc._aggregate_state(ARRAY(
                     SELECT extsvc._effective_deployment_state(a.deployment_state, a.observed_at)
                       FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND (c.removed_at IS NOT NULL OR a.placement_state = 'ACTIVE')))
         END,
         c.removed_at IS NOT NULL, c.removed_at,
         (SELECT count(*)::int FROM extsvc.dpf_extension_service_attachments a
           WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version),
         NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                      WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id AND a.version = c.version
                        AND a.observed_config_version IS DISTINCT FROM i.config_version)
         -- an active DPF entry with no attachment rows yet is not synced (issue #14 P1-13)
         AND NOT (s.service_type = 'DPF_HELM_CHART' AND c.removed_at IS NULL
                  AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                                   WHERE a.instance_id = c.instance_id AND a.service_id = c.service_id
                                     AND a.version = c.version)),
         i.config_version, i.config_version_text
    FROM extsvc.instance_extension_services c
    JOIN extsvc.instances i USING (instance_id)
    JOIN extsvc.service_records s ON s.service_id = c.service_id
   WHERE c.instance_id = instance_extension_services_summary.instance_id
   ORDER BY s.service_name, c.version
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_summary(uuid, text) IS
  'One row per (service, version) of an instance: aggregate state (SPEC 2.8 precedence), removed, configs_synced. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

CREATE FUNCTION extsvc.instance_extension_services_ready(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM extsvc._require_instance(instance_extension_services_ready.instance_id,
                                   instance_extension_services_ready.tenant_organization_id);
  RETURN NOT EXISTS (
    SELECT FROM extsvc.instance_extension_services_summary(instance_extension_services_ready.instance_id) x
     WHERE x.service_type = 'DPF_HELM_CHART'
       AND (NOT x.configs_synced
            OR (NOT x.removed AND x.aggregate_state <> 'RUNNING')
            OR (x.removed AND x.aggregate_state <> 'TERMINATED')));
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_ready(uuid, text) IS
  'True when every active DPF attachment is RUNNING and every removed one TERMINATED for the current config_version. With tenant_organization_id, another tenant''s instance is refused (42501) exactly like an unknown one.';

CREATE FUNCTION extsvc.dpu_agent_extension_services(dpu_machine_id uuid)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, version text, data text,
               has_credential boolean, observability jsonb, removed_at timestamptz,
               config_version integer, config_version_text text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = dpu_agent_extension_services.dpu_machine_id) THEN
    PERFORM extsvc._raise('P0002', 'DPU not found', format('machine_id: %s', dpu_agent_extension_services.dpu_machine_id),
                          'Check the DPU machine id.');
  END IF;
  -- The DPU agent's feed is unchanged: only KUBERNETES_POD entries.
  RETURN QUERY
  SELECT c.instance_id, c.service_id, s.service_name, c.version, v.data, v.has_credential, v.observability, c.removed_at,
         i.config_version, i.config_version_text
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
  'The DPU agent''s feed: KUBERNETES_POD entries (including removed ones) of instances on the DPU''s host, with the instance''s config_version and its string (which the agent echoes); never DPF services.';

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

-- ---- sql/parts/76_worker_queue.sql (definitions)
-- The worker's queue: due rows of two tables (one per DPF service, one per
-- DPU) behind one shape. A worker claims due rows (stamping a lease) and
-- commits, talks to Kubernetes outside any transaction, then records the
-- outcome with a compare-and-swap on (state_version, lease_token):
--   extsvc.claim(queue, worker, batch_size, lease_seconds)
--     -> (id, state_version, lease_token, work jsonb)
--   extsvc.complete(queue, id, state_version, lease_token, outcome jsonb)
--     -> 'applied' | 'stale' | 'lost'
-- The JSON of work and outcome is the worker's wire schema, defined once on
-- the C++ side in src/controller/wire.hpp and described in docs/worker.md.

-- Exponential backoff with positive jitter, bounded by extsvc.retry_cap and
-- never shorter than the server's Retry-After, which is itself honoured only up
-- to extsvc.retry_cap (clamped as a number first: 1e13 s must not overflow the
-- interval and lose the outcome).
CREATE FUNCTION extsvc._backoff(p_attempts integer, p_retry_after_s double precision DEFAULT NULL)
RETURNS interval LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  WITH cfg AS (
    SELECT coalesce(nullif(current_setting('extsvc.retry_base', true), ''), '500ms')::interval AS base,
           coalesce(nullif(current_setting('extsvc.retry_cap', true), ''), '300s')::interval AS cap)
  SELECT greatest(
           least(cfg.cap, cfg.base * power(2, least(greatest(p_attempts, 1) - 1, 30)))
             * (1 + 0.2 * random()),
           least(coalesce(p_retry_after_s, 0), extract(epoch FROM cfg.cap)::double precision)
             * interval '1 second')
  FROM cfg
$fn$;

-- The queues by name: their table, key column and the functions that claim
-- due rows, build a claimed row's work and apply an outcome. The one place
-- that knows them.
CREATE FUNCTION extsvc._worker_queues()
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  VALUES ('service', 'dpf_extension_service_reconciliations', 'service_id', '_service_work', '_complete_service',
          '_claim_service'),
         ('dpu', 'dpu_reconciliations', 'dpu_machine_id', '_dpu_work', '_complete_dpu', '_claim_dpu')
$fn$;

CREATE FUNCTION extsvc._worker_queue(p_queue text)
RETURNS TABLE (queue text, queue_table text, key_column text, work_function text, complete_function text,
               claim_function text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM extsvc._worker_queues() w WHERE w.queue = p_queue;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('22023', 'unknown worker queue', format('queue: %s', extsvc._token(p_queue)),
                          'Use service or dpu.');
  END IF;
END
$fn$;

-- The queue's claim function (_claim_service, _claim_dpu below) leases the
-- rows with one static statement, whose plan PL/pgSQL keeps for the session;
-- only this dispatch by name, which adds each row's work, is planned at each
-- call.
CREATE FUNCTION extsvc.claim(queue text, worker text, batch_size integer DEFAULT 32,
                             lease_seconds integer DEFAULT 60)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, work jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
BEGIN
  SELECT * INTO q FROM extsvc._worker_queue(claim.queue);
  RETURN QUERY EXECUTE format('SELECT c.id, c.state_version, c.lease_token, extsvc.%I(c.id, c.attempts) '
                              'FROM extsvc.%I($1, $2, $3) c', q.work_function, q.claim_function)
    USING claim.worker, claim.batch_size, claim.lease_seconds;
END
$fn$;
COMMENT ON FUNCTION extsvc.claim(text, text, integer, integer) IS
  'Worker: lease up to batch_size due rows of a queue (service or dpu) with FOR UPDATE SKIP LOCKED; returns each row''s id, state_version, lease_token and its work (docs/worker.md, wire schema).';

-- The claim of one queue: leases up to batch_size due rows and returns them
-- with their attempts (extsvc.claim adds the work). A row is claimable once
-- next_due_at has passed and no lease runs, i.e. from greatest(next_due_at,
-- lease_expires_at) on (greatest ignores a NULL lease). The queue's
-- _claimable index is in that order: the scan starts at the row claimable
-- longest and stops after batch_size rows it could lock, and rows under a
-- running lease sort after now() and are never read, however many there are
-- (docs/worker.md, "The queue's indexes"). The second and third conditions
-- are the definition of due; the first bounds the index scan. enable_sort is
-- off so that the plan is that ordered scan whatever the statistics say: the
-- number of due rows swings from none to all (a resync marks every DPU due)
-- faster than ANALYZE follows, and a plan made when few were due (all of
-- them fetched, then sorted) would be kept for the session.
CREATE FUNCTION extsvc._claim_service(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET enable_sort = off AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.service_id
      FROM extsvc.dpf_extension_service_reconciliations r
     WHERE greatest(r.next_due_at, r.lease_expires_at) <= now()
       AND r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY greatest(r.next_due_at, r.lease_expires_at)
     LIMIT greatest(p_batch_size, 1)
       FOR UPDATE SKIP LOCKED
  )
  UPDATE extsvc.dpf_extension_service_reconciliations r
     SET lease_owner = p_worker, lease_token = gen_random_uuid(),
         lease_expires_at = now() + make_interval(secs => p_lease_seconds), last_attempt_at = now()
    FROM due
   WHERE r.service_id = due.service_id
  RETURNING r.service_id, r.state_version, r.lease_token, r.attempts;
END
$fn$;

CREATE FUNCTION extsvc._claim_dpu(p_worker text, p_batch_size integer, p_lease_seconds integer)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, attempts integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET enable_sort = off AS $fn$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT r.dpu_machine_id
      FROM extsvc.dpu_reconciliations r
     WHERE greatest(r.next_due_at, r.lease_expires_at) <= now()
       AND r.next_due_at <= now()
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
     ORDER BY greatest(r.next_due_at, r.lease_expires_at)
     LIMIT greatest(p_batch_size, 1)
       FOR UPDATE SKIP LOCKED
  )
  UPDATE extsvc.dpu_reconciliations r
     SET lease_owner = p_worker, lease_token = gen_random_uuid(),
         lease_expires_at = now() + make_interval(secs => p_lease_seconds), last_attempt_at = now()
    FROM due
   WHERE r.dpu_machine_id = due.dpu_machine_id
  RETURNING r.dpu_machine_id, r.state_version, r.lease_token, r.attempts;
END
$fn$;

-- Records one outcome (a JSON object of the wire schema) with a
-- compare-and-swap. Returns 'applied', 'stale' (intent changed meanwhile:
-- the row is due again at once and the result dropped) or 'lost' (the lease
-- is gone; nothing written).
CREATE FUNCTION extsvc.complete(queue text, id uuid, state_version bigint, lease_token uuid, outcome jsonb)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
  v_token uuid;
  v_version bigint;
  n integer;
BEGIN
  SELECT * INTO q FROM extsvc._worker_queue(complete.queue);
  IF jsonb_typeof(complete.outcome) IS DISTINCT FROM 'object' THEN
    PERFORM extsvc._raise('22023', 'a worker outcome must be a JSON object', 'argument: outcome',
                          'See the wire schema in docs/worker.md.');
  END IF;
  EXECUTE format('SELECT r.lease_token, r.state_version FROM extsvc.%I r WHERE r.%I = $1 FOR UPDATE',
                 q.queue_table, q.key_column)
     INTO v_token, v_version USING complete.id;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n = 0 OR v_token IS DISTINCT FROM complete.lease_token THEN
    RETURN 'lost';
  END IF;
  IF v_version <> complete.state_version THEN
    -- newer intent arrived while the worker was talking to Kubernetes:
    -- drop this result and let the next pass work from the newest intent
    EXECUTE format('UPDATE extsvc.%I r SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, '
                   'next_due_at = now() WHERE r.%I = $1', q.queue_table, q.key_column)
      USING complete.id;
    PERFORM extsvc._wake();
    RETURN 'stale';
  END IF;
  EXECUTE format('SELECT extsvc.%I($1, $2)', q.complete_function) USING complete.id, complete.outcome;
  RETURN 'applied';
END
$fn$;
COMMENT ON FUNCTION extsvc.complete(text, uuid, bigint, uuid, jsonb) IS
  'Worker: record the outcome of a claimed row (wire schema, docs/worker.md) with compare-and-swap on state_version and lease_token; applied, stale or lost.';

-- The service queue --------------------------------------------------------

-- What a worker needs for one DPF service: its identity and lifecycle, and
-- the normalized Helm data of the desired revision, from which the worker
-- renders the DPUService (core::render_dpuservice, the function
-- extsvc.render_dpuservice calls too). An ALL_DPUS service being deleted is
-- deleted only after its labels are gone everywhere (placement_clear).
CREATE FUNCTION extsvc._service_work(p_id uuid, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'service_id', s.service_id, 'lifecycle_state', s.lifecycle_state,
           'deployment_scope', s.deployment_scope, 'dpf_service_name', s.dpf_service_name,
           'attachable_version', s.attachable_version, 'desired_revision', s.desired_revision,
           'applied_revision', s.applied_revision, 'attempts', p_attempts,
           'placement_clear', CASE WHEN s.deployment_scope = 'ALL_DPUS' AND s.lifecycle_state = 'DELETING'
                                   THEN extsvc._site_service_cleared(s.service_id) ELSE true END,
           'namespace', extsvc._namespace(), 'helm_data', h.data)
    INTO v_work
    FROM extsvc.service_records s
    LEFT JOIN extsvc.helm_revisions h ON h.service_id = s.service_id AND h.revision = s.desired_revision
   WHERE s.service_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a service outcome. outcome.outcome is one of
--   transition  lifecycle change to new_state for reason (READY, DELETED, FAILED)
--   event       same-state event (drift_recreated, drift_patched) and done
--   done        nothing changed; nothing more to do until new intent or drift
--   retry       transient failure: back off (attempts + 1), keep the error
--   poll        waiting on the cluster (finalizers): check again after a backoff
CREATE FUNCTION extsvc._complete_service(p_id uuid, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  o text := p_outcome->>'outcome';
  v_new_state text := p_outcome->>'new_state';
  v_reason text := p_outcome->>'reason';
  v_message text := p_outcome->>'message';
  v_applied integer := (p_outcome->>'applied_revision')::integer;
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_generation bigint := (p_outcome->>'observed_generation')::bigint;
  v_resource_version text := p_outcome->>'observed_resource_version';
BEGIN
  -- FOR NO KEY UPDATE (issue 13): a DPU completion holding a DPU's work row takes
  -- KEY SHARE on the service (site status rows); FOR UPDATE made the two wait
  -- on each other (a worker-against-worker 40P01 seen while fixing the API's
  -- lock order, docs/reliability.md)
  SELECT * INTO s FROM extsvc.service_records x WHERE x.service_id = p_id FOR NO KEY UPDATE;

  IF o = 'transition' THEN
    IF v_new_state = 'READY' AND v_applied IS NOT NULL THEN
      UPDATE extsvc.helm_revisions h SET applied_at = now()
       WHERE h.service_id = s.service_id AND h.revision = v_applied
         AND h.applied_at IS NULL;
    END IF;
    UPDATE extsvc.service_records x
       SET lifecycle_state = v_new_state, state_actor = 'worker',
           state_reason = v_reason,
           applied_revision = CASE WHEN v_new_state = 'READY'
                                   THEN coalesce(v_applied, x.applied_revision)
                                   ELSE x.applied_revision END,
           status_message = v_message,
           deleted_at = CASE WHEN v_new_state = 'DELETED' THEN now() END,
           updated_at = now()
     WHERE x.service_id = s.service_id;
    -- A newly applied revision needs new evidence: a RUNNING observed for the
    -- previous revision no longer proves anything (SPEC 2.8).
    IF v_new_state = 'READY'
       AND v_applied IS DISTINCT FROM s.applied_revision THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = 'PENDING', updated_at = now(),
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE a.service_id = s.service_id AND a.deployment_state = 'RUNNING';
      UPDATE extsvc.site_service_dpu_status x
         SET deployment_state = 'PENDING',
             status_message = format('revision %s applied; waiting for a Ready pod of it',
                                     v_applied)
       WHERE x.service_id = s.service_id AND x.deployment_state = 'RUNNING';
    END IF;
    IF v_new_state = 'DELETED' THEN
      UPDATE extsvc.service_versions v SET deleted_at = now()
       WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
    END IF;
  ELSIF o = 'event' THEN
    PERFORM extsvc._record_event(s.service_id, s.lifecycle_state, 'worker', v_reason,
                                 v_message, s.applied_revision);
  ELSIF o NOT IN ('done', 'retry', 'poll') THEN
    PERFORM extsvc._raise('22023', 'unknown reconciliation outcome', format('outcome.outcome: %s', extsvc._token(o)),
                          'Use transition, event, done, retry or poll.');
  END IF;

  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN o = 'retry' THEN q.attempts + 1
                         WHEN o = 'poll' THEN q.attempts + 1 ELSE 0 END,
         next_due_at = CASE
           WHEN o IN ('retry', 'poll') THEN now() + extsvc._backoff(q.attempts + 1, v_retry_after)
           ELSE NULL END,
         last_error = CASE WHEN o = 'retry' THEN v_message
                           WHEN o = 'poll' THEN q.last_error ELSE NULL END,
         last_http_status = CASE WHEN o = 'retry' THEN v_http_status
                                 WHEN o = 'poll' THEN q.last_http_status ELSE NULL END,
         last_error_at = CASE WHEN o = 'retry' THEN now() WHEN o = 'poll' THEN q.last_error_at ELSE NULL END,
         last_success_at = CASE WHEN o IN ('transition', 'event', 'done', 'poll') THEN now() ELSE q.last_success_at END,
         observed_generation = coalesce(v_generation, q.observed_generation),
         observed_resource_version = coalesce(v_resource_version, q.observed_resource_version)
   WHERE q.service_id = p_id;
  -- what the worker waits for (finalizers, a paused DPUService) or last failed
  -- on is shown to operators; written only when it changed
  IF o = 'retry' OR (o = 'poll' AND v_message IS NOT NULL) THEN
    UPDATE extsvc.service_records x
       SET status_message = v_message, updated_at = now()
     WHERE x.service_id = s.service_id AND x.status_message IS DISTINCT FROM v_message;
  END IF;
END
$fn$;

-- The DPU queue ------------------------------------------------------------

-- What a worker needs for one DPU: its names, the label keys it should carry
-- and every attachment or site-wide service to observe on it (items; each
-- {kind, instance_id, service_id, version, label_key, dpf_service_name,
-- applied_revision, wanted}).
CREATE FUNCTION extsvc._dpu_work(p_id uuid, p_attempts integer) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_work jsonb;
BEGIN
  SELECT jsonb_build_object(
           'dpu_machine_id', d.machine_id, 'device_name', d.dpu_device_name,
           'node_name', d.dpu_node_name, 'deregistered', d.deregistered_at IS NOT NULL,
           'attempts', p_attempts,
           'wanted_keys', CASE WHEN d.deregistered_at IS NOT NULL THEN '[]'::jsonb
             ELSE coalesce((SELECT jsonb_agg(DISTINCT w.label_key ORDER BY w.label_key)
                              FROM extsvc.dpu_desired_labels w WHERE w.dpu_machine_id = p_id),
                           '[]'::jsonb) END,
           'items', coalesce((
             SELECT jsonb_agg(x) FROM (
               SELECT jsonb_build_object('kind', 'attachment', 'instance_id', a.instance_id,
                        'service_id', a.service_id, 'version', a.version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', a.placement_state = 'ACTIVE' AND d.deregistered_at IS NULL) AS x
                 FROM extsvc.dpf_extension_service_attachments a
                 JOIN extsvc.service_records s USING (service_id)
                WHERE a.dpu_machine_id = p_id
               UNION ALL
               SELECT jsonb_build_object('kind', 'site', 'instance_id', NULL, 'service_id', s.service_id,
                        'version', s.attachable_version, 'label_key', s.placement_label_key,
                        'dpf_service_name', s.dpf_service_name, 'applied_revision', s.applied_revision,
                        'wanted', d.deregistered_at IS NULL
                                  AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
                 FROM extsvc.service_records s
                WHERE s.service_type = 'DPF_HELM_CHART' AND s.deployment_scope = 'ALL_DPUS'
                  AND (extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                       OR s.lifecycle_state = 'DELETING'
                       OR EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                                   WHERE x.service_id = s.service_id AND x.dpu_machine_id = p_id
                                     AND x.deployment_state <> 'TERMINATED'))
             ) items), '[]'::jsonb))
    INTO v_work
    FROM extsvc.dpus d
   WHERE d.machine_id = p_id;
  RETURN v_work;
END
$fn$;

-- Applies a DPU outcome: outcome.outcome 'observed' (results is an array of
-- {kind, instance_id, service_id, version, state, message}) or 'retry'.
CREATE FUNCTION extsvc._complete_dpu(p_id uuid, p_outcome jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r jsonb;
  v_final boolean;
  v_inst uuid;
  v_outcome text := p_outcome->>'outcome';
  v_results jsonb := coalesce(nullif(p_outcome->'results', 'null'::jsonb), '[]'::jsonb);
  v_message text := p_outcome->>'message';
  v_http_status integer := (p_outcome->>'http_status')::integer;
  v_retry_after double precision := (p_outcome->>'retry_after_s')::double precision;
  v_observation jsonb := nullif(p_outcome->'observation', 'null'::jsonb);
  v_keep_polling boolean := coalesce((p_outcome->>'keep_polling')::boolean, false);
  -- when the evidence was observed: now, or the moment a watch cache that has
  -- lost its stream was last current (issue 11)
  v_observed_at timestamptz := coalesce(to_timestamp((p_outcome->>'observed_at')::double precision), now());
  -- from the watch caches: a change wakes the DPU, no polling while converging
  v_watched boolean := coalesce((p_outcome->>'watched')::boolean, false);
BEGIN
  IF v_outcome = 'retry' THEN
    UPDATE extsvc.dpu_reconciliations x
       SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, attempts = x.attempts + 1,
           next_due_at = now() + extsvc._backoff(x.attempts + 1, v_retry_after),
           last_error = v_message, last_error_at = now(),
           last_http_status = v_http_status
     WHERE x.dpu_machine_id = p_id;
    RETURN;
  ELSIF v_outcome <> 'observed' THEN
    PERFORM extsvc._raise('22023', 'unknown DPU reconciliation outcome',
                          format('outcome.outcome: %s', extsvc._token(v_outcome)), 'Use observed or retry.');
  END IF;

  -- evidence older than the staleness bound proves nothing: the rows keep
  -- their older observation, which readers already see as UNKNOWN
  IF v_observed_at < now() - extsvc._observation_max_age() THEN
    v_results := '[]'::jsonb;
  END IF;

  FOR r IN SELECT value FROM jsonb_array_elements(v_results) LOOP
    IF r->>'kind' = 'attachment' THEN
      UPDATE extsvc.dpf_extension_service_attachments a
         SET deployment_state = r->>'state', status_message = r->>'message', observed_at = v_observed_at,
             observed_config_version = (SELECT i.config_version FROM extsvc.instances i WHERE i.instance_id = a.instance_id),
             updated_at = CASE WHEN a.deployment_state IS DISTINCT FROM r->>'state' THEN now() ELSE a.updated_at END
       WHERE a.instance_id = (r->>'instance_id')::uuid AND a.dpu_machine_id = p_id
         AND a.service_id = (r->>'service_id')::uuid AND a.version = r->>'version';
    ELSIF r->>'kind' = 'site' THEN
      INSERT INTO extsvc.site_service_dpu_status AS x (service_id, dpu_machine_id, deployment_state, status_message, observed_at)
      VALUES ((r->>'service_id')::uuid, p_id, r->>'state', r->>'message', v_observed_at)
      ON CONFLICT ON CONSTRAINT site_service_dpu_status_pkey DO UPDATE
        SET deployment_state = EXCLUDED.deployment_state, status_message = EXCLUDED.status_message,
            observed_at = EXCLUDED.observed_at;
      -- a site service waiting to be deleted re-checks once a DPU is clean.
      -- The report is new evidence, not a failed attempt: the backoff starts
      -- over (else every DPU's report adds a poll to attempts, and the wait
      -- for DPF's finalizers after the DELETE grows to retry_cap), and a pass
      -- in flight, whose placement_clear was computed before this report,
      -- ends stale and the row is due again at once (else its poll outcome
      -- would overwrite this wake with a backoff).
      IF r->>'state' = 'TERMINATED' THEN
        UPDATE extsvc.dpf_extension_service_reconciliations x
           SET next_due_at = now(), attempts = 0, state_version = x.state_version + 1
         WHERE x.service_id = (r->>'service_id')::uuid
           AND EXISTS (SELECT FROM extsvc.service_records s
                        WHERE s.service_id = x.service_id AND s.lifecycle_state = 'DELETING');
        PERFORM extsvc._wake();
      END IF;
    END IF;
  END LOOP;

  FOR v_inst IN SELECT DISTINCT a.instance_id FROM extsvc.dpf_extension_service_attachments a
                 WHERE a.dpu_machine_id = p_id AND a.placement_state = 'REMOVING' LOOP
    PERFORM extsvc._cleanup_instance(v_inst);
  END LOOP;

  -- converged: every wanted row RUNNING and nothing left to remove
  v_final := NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a
                          WHERE a.dpu_machine_id = p_id
                            AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
         AND NOT EXISTS (SELECT FROM extsvc.site_service_dpu_status x
                          JOIN extsvc.service_records s USING (service_id)
                          JOIN extsvc.dpus d ON d.machine_id = x.dpu_machine_id
                          WHERE x.dpu_machine_id = p_id
                            AND x.deployment_state <> CASE
                                  WHEN d.deregistered_at IS NULL
                                       AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                                  THEN 'RUNNING' ELSE 'TERMINATED' END);
  UPDATE extsvc.dpu_reconciliations x
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
         attempts = CASE WHEN v_final AND NOT v_keep_polling
                         THEN 0 ELSE x.attempts + 1 END,
         -- not converged: look again soon; converged but a rollout of one of
         -- its services is still under way somewhere: look again, slower
         next_due_at = CASE
           -- rows in ERROR need a person; look again with the full backoff
           WHEN NOT v_final AND EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state = 'ERROR')
                AND NOT EXISTS (
                  SELECT FROM extsvc.dpf_extension_service_attachments a
                   WHERE a.dpu_machine_id = p_id AND a.deployment_state <> 'ERROR'
                     AND NOT (a.placement_state = 'ACTIVE' AND a.deployment_state = 'RUNNING'))
             THEN now() + extsvc._backoff(x.attempts + 1)
           -- converging with the watch caches: the next change wakes it
           -- (mark_dpus_due_by_names); a slow look is only a safety net
           -- (unless the pass could not conclude: keep_polling)
           WHEN NOT v_final AND v_watched AND NOT v_keep_polling THEN now() + interval '60 seconds'
           -- converging (labels propagating, pods starting): poll briskly,
           -- 200 ms more per unchanged pass, at most every 5 s
           WHEN NOT v_final THEN now() + least(interval '200 milliseconds' * (x.attempts + 1), interval '5 seconds')
           WHEN v_keep_polling
             THEN now() + least(extsvc._backoff(x.attempts + 1), interval '30 seconds')
           ELSE NULL END,
         last_error = v_message,
         last_error_at = CASE WHEN v_message IS NULL THEN NULL ELSE now() END,
         last_http_status = v_http_status,
         last_observed_at = v_observed_at,
         observation = coalesce(v_observation, x.observation)
   WHERE x.dpu_machine_id = p_id;
  -- site statuses of DPUs that no longer exist in the desired set are moot
  DELETE FROM extsvc.site_service_dpu_status x
   USING extsvc.service_records s
   WHERE x.dpu_machine_id = p_id AND s.service_id = x.service_id
     AND s.lifecycle_state = 'DELETED';
END
$fn$;

-- Leases -------------------------------------------------------------------

-- Extends the leases a worker still holds (compare-and-swap on lease_token and
-- lease_owner) by lease_seconds from now; returns the tokens it renewed. A
-- token missing from the result belongs to someone else by now: the worker
-- must not call Kubernetes for that row.
CREATE FUNCTION extsvc.renew_leases(worker text, lease_tokens uuid[], lease_seconds integer DEFAULT 60)
RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
BEGIN
  FOR q IN SELECT * FROM extsvc._worker_queues() LOOP
    RETURN QUERY EXECUTE format(
      'UPDATE extsvc.%I r SET lease_expires_at = now() + make_interval(secs => $3) '
      'WHERE r.lease_token = ANY ($2) AND r.lease_owner = $1 RETURNING r.lease_token', q.queue_table)
    USING renew_leases.worker, renew_leases.lease_tokens, renew_leases.lease_seconds;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION extsvc.renew_leases(text, uuid[], integer) IS
  'Worker: extend the leases it still holds (CAS on lease_token and lease_owner); returns the renewed tokens.';

-- A worker slot runs one process at a time: at start, leases held under its
-- name belong to its previous process (killed or crashed) and are freed, so
-- the rows are claimable at once instead of after extsvc.lease_time.
CREATE FUNCTION extsvc.release_leases(worker text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
  n integer;
  total integer := 0;
BEGIN
  FOR q IN SELECT * FROM extsvc._worker_queues() LOOP
    EXECUTE format('UPDATE extsvc.%I r SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL '
                   'WHERE r.lease_owner = $1', q.queue_table)
      USING release_leases.worker;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
  END LOOP;
  RETURN total;
END
$fn$;
COMMENT ON FUNCTION extsvc.release_leases(text) IS
  'Worker: at start, free the leases its slot''s previous process held. Returns how many.';

-- Seconds until the earliest row of any queue becomes claimable (negative when
-- one is overdue; NULL when none is due at all): how long the worker sleeps.
-- The minimum is the first entry of each queue's _claimable index.
CREATE FUNCTION extsvc.next_due_in(queue text DEFAULT NULL) RETURNS double precision
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
  t timestamptz;
  earliest timestamptz;
BEGIN
  -- one queue: a worker that does not work the DPU queue (the watch mode
  -- leaves it to the watcher) sleeps by the service queue alone
  FOR q IN SELECT * FROM extsvc._worker_queues() w WHERE next_due_in.queue IS NULL OR w.queue = next_due_in.queue LOOP
    EXECUTE format('SELECT min(greatest(r.next_due_at, r.lease_expires_at)) '
                   'FROM extsvc.%I r WHERE r.next_due_at IS NOT NULL', q.queue_table) INTO t;
    earliest := least(earliest, t);
  END LOOP;
  RETURN extract(epoch FROM earliest - now())::double precision;
END
$fn$;
COMMENT ON FUNCTION extsvc.next_due_in(text) IS
  'Worker: seconds until the earliest row of a queue (service or dpu; NULL: any) becomes claimable (negative when overdue, NULL when none is due).';

-- ---- sql/parts/77_worker_observe.sql (definitions)
-- What the worker observes besides its queue: the resync's snapshot and
-- drift marks, DPF's view of each service, the orphan check and the
-- placement resync.

-- What the drift detector compares with the cluster: every READY DPF service,
-- with the same work object a claim returns (the worker renders the desired
-- DPUService from it; a service whose data no longer renders is left out of
-- the comparison and marked FAILED by its next pass).
CREATE FUNCTION extsvc.resync_snapshot()
RETURNS TABLE (service_id uuid, work jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, extsvc._service_work(s.service_id, 0)
    FROM extsvc.service_records s
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

-- DPF's Ready condition as observed by any pass (create/patch responses, the
-- resync LIST, a DPU pass): statuses is a JSON array of
-- {service_id, ready (boolean or null), reason, message}. Writes only rows
-- whose recorded status differs; returns how many changed.
CREATE FUNCTION extsvc.record_dpf_status(statuses jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET dpf_ready = x.ready, dpf_reason = x.reason, dpf_message = x.message, dpf_observed_at = now()
    FROM jsonb_to_recordset(coalesce(record_dpf_status.statuses, '[]')) AS x(service_id uuid, ready boolean,
                                                                             reason text, message text)
   WHERE q.service_id = x.service_id
     AND (q.dpf_ready, q.dpf_reason, q.dpf_message) IS DISTINCT FROM (x.ready, x.reason, x.message);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.record_dpf_status(jsonb) IS
  'Worker: record DPF''s Ready condition (ready, reason, message) per service as last observed; writes only differences.';

-- The resync's cleanup: of the DPUService names listed with our ownership
-- label, those that belong to no live service version (the service is
-- DELETED, unknown, or has another current DPUService name). Called after
-- the LIST, so a service committed before its DPUService was created is seen.
CREATE FUNCTION extsvc.orphaned_dpuservices(names text[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT n FROM unnest(orphaned_dpuservices.names) AS n
   WHERE NOT EXISTS (SELECT FROM extsvc.service_records s
                      WHERE s.dpf_service_name = n AND s.service_type = 'DPF_HELM_CHART'
                        AND s.lifecycle_state <> 'DELETED')
$fn$;
COMMENT ON FUNCTION extsvc.orphaned_dpuservices(text[]) IS
  'Worker: which listed DPUService names belong to no live DPF service version (to be deleted by the resync).';

-- Resync: every DPU is observed again (placement drift such as a label
-- removed by hand is repaired at that pass).
CREATE FUNCTION extsvc.mark_dpus_due() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  n integer;
BEGIN
  -- in dpu_machine_id order, the order of _lock_dpu_work (issue 13)
  INSERT INTO extsvc.dpu_reconciliations (dpu_machine_id, next_due_at)
  SELECT d.machine_id, now() FROM extsvc.dpus d ORDER BY d.machine_id
  -- due now: a row waiting for its next change (the watch mode's 60 s look)
  -- or backing off is derived again too
  ON CONFLICT (dpu_machine_id) DO UPDATE SET next_due_at = least(extsvc.dpu_reconciliations.next_due_at, now());
  GET DIAGNOSTICS n = ROW_COUNT;
  -- observations nobody renewed within extsvc.observation_max_age: UNKNOWN
  PERFORM extsvc.expire_stale_observations();
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

-- ---- sql/parts/78_placement_transitions.sql (definitions)

COMMENT ON TABLE extsvc.placement_transitions IS
  'Every allowed change of an attachment''s placement_state and of a per-DPU deployment_state (attachments and ALL_DPUS rows), with actor and reason; triggers refuse any other.';
-- seed table: emptied and refilled from sql/parts/78_placement_transitions.sql
DELETE FROM extsvc.placement_transitions;


-- placement_state of an attachment row
INSERT INTO extsvc.placement_transitions (machine, from_state, to_state, actor, reason, description) VALUES
  ('placement', NULL,       'ACTIVE',   'api', 'targeted',         'the DPU is in the target set of an active entry of a live instance (attach, network change, DPU registered or made primary): its label becomes wanted'),
  ('placement', NULL,       'REMOVING', 'api', 'detached',         'a detach writes a REMOVING row on every registered DPU of the host, so a label left outside the last target set is found too'),
  ('placement', NULL,       'REMOVING', 'api', 'instance_deleted', 'instance deletion writes a REMOVING row on every registered DPU of the host'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'detached',         'the entry was removed from the instance''s configuration (it stays as a tombstone)'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'instance_deleted', 'the instance is being deleted'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'dpu_deregistered', 'the DPU was deregistered; its rows are never dropped silently'),
  ('placement', 'ACTIVE',   'REMOVING', 'api', 'untargeted',       'the DPU left the entry''s target set (network DPUs changed, another DPU became primary)'),
  ('placement', 'REMOVING', 'ACTIVE',   'api', 'retargeted',       'the entry is active again and the DPU back in its target set before the removal finished'),
  ('placement', 'REMOVING', NULL,       'api', 'terminated_observed', 'observed TERMINATED after the removal was requested (the move to REMOVING reset the state to UNKNOWN); cleanup at deletion'),
  ('placement', 'REMOVING', NULL,       'worker', 'terminated_observed', 'observed TERMINATED after the removal was requested (the move to REMOVING reset the state to UNKNOWN)'),
  ('placement', 'REMOVING', NULL,       'api', 'released',         'another active reason (an ACTIVE row of another instance, an ALL_DPUS service) wants the same label on this DPU: the row is released to it'),
  ('placement', 'REMOVING', NULL,       'worker', 'released',      'another active reason (an ACTIVE row of another instance, an ALL_DPUS service) wants the same label on this DPU: the row is released to it');

-- deployment_state: what the API writes when placement changes, what the
-- worker may record from an observation (SPEC 2.8 evidence rules; a worker
-- observation may jump from any state, e.g. RUNNING -> TERMINATED when the
-- pod is already gone when the detach is first observed), and staleness.
INSERT INTO extsvc.placement_transitions (machine, from_state, to_state, actor, reason, description)
SELECT m.machine, nullif(f.s, 'NEW'), nullif(r.to_state, 'REMOVED'), r.actor, r.reason, r.description
  FROM (VALUES
    ('{deployment}'::text[], '{NEW}'::text[], 'PENDING', 'api', 'attached',
     'a row is created ACTIVE: wanted, nothing observed yet'),
    ('{deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,ERROR}', 'UNKNOWN', 'api', 'removal_requested',
     'the row is created or moved REMOVING: an observation made while it was wanted proves nothing about the removal, which must be observed'),
    ('{deployment}', '{RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'api', 'reattached',
     'a REMOVING row becomes ACTIVE again: RUNNING must be observed anew'),
    ('{deployment,site_deployment}', '{NEW,PENDING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'RUNNING', 'worker', 'running_observed',
     'wanted; in one pass: the DPUDevice and the Node carry the label, and a pod on that Node carries the service label (nico/extension-service-id) and the revision annotation equal to the applied revision, phase Running, Ready=True, no deletionTimestamp (DPF''s Ready is context, never proof)'),
    ('{deployment,site_deployment}', '{NEW,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'worker', 'not_running_observed',
     'wanted, but some RUNNING evidence is missing; status_message says which (label, no pod, pod of the previous revision, container waiting such as ImagePullBackOff or CrashLoopBackOff); also when a new revision is applied, since a pod of the previous one proves nothing'),
    ('{deployment}', '{PENDING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'RUNNING', 'worker', 'label_held_by_other',
     'not wanted for this row, but another active reason (an instance taking over, an ALL_DPUS service) keeps the same label on this DPU: the pod seen is theirs; the row is released at cleanup'),
    ('{deployment}', '{RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'PENDING', 'worker', 'label_held_by_other',
     'not wanted for this row, but another active reason keeps the same label on this DPU, whose pod is not yet Ready; the row is released at cleanup'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATED,ERROR,UNKNOWN}', 'TERMINATING', 'worker', 'remnant_observed',
     'not wanted, but the label (DPUDevice or Node) or any pod carrying the service label (terminating included) remains on the Node'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,ERROR,UNKNOWN}', 'TERMINATED', 'worker', 'absence_observed',
     'not wanted; in one pass: the label absent on the DPUDevice and the Node and no pod carrying the service label on the Node, terminating ones included (a jump from RUNNING is legal: the pod may be gone before the detach is first observed)'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,ERROR,UNKNOWN}', 'TERMINATED', 'worker', 'dpu_gone',
     'wanted, but the DPU itself is gone (DPUDevice and Node both answer 404), recorded as such; never counts as RUNNING'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,UNKNOWN}', 'ERROR', 'worker', 'non_transient_failure',
     'a non-transient failure (DPUDevice missing, label patch refused): needs a person'),
    ('{deployment,site_deployment}', '{NEW,PENDING,RUNNING,TERMINATING,TERMINATED,ERROR}', 'UNKNOWN', 'worker', 'not_observable',
     'the pass could not observe: DPU cluster unreachable or not configured, Node unmapped, revisions unreadable; never counts as RUNNING or TERMINATED'),
    ('{deployment,site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED}', 'UNKNOWN', 'worker', 'observation_stale',
     'the last observation is older than extsvc.observation_max_age (default 15min): readers already see UNKNOWN, the resync persists it'),
    ('{deployment,site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED}', 'UNKNOWN', 'api', 'observation_stale',
     'the same, persisted by an operator calling extsvc.expire_stale_observations()'),
    ('{site_deployment}', '{PENDING,RUNNING,TERMINATING,TERMINATED,ERROR,UNKNOWN}', 'REMOVED', 'worker', 'service_deleted',
     'the ALL_DPUS service is DELETED: its per-DPU rows are moot and go at the DPU''s next pass')
  ) r(machines, froms, to_state, actor, reason, description)
  CROSS JOIN LATERAL unnest(r.machines) m(machine)
  CROSS JOIN LATERAL unnest(r.froms) f(s)
 -- the worker never creates attachment rows (only ALL_DPUS rows)
 WHERE NOT (m.machine = 'deployment' AND f.s = 'NEW' AND r.actor = 'worker');

-- Who is changing the row: 'worker' inside the worker's entry points (they
-- carry SET nico_extsvc.actor = 'worker'; the workers connect as a
-- superuser), 'api' otherwise. A tenant session setting the variable itself
-- stays 'api'.
CREATE FUNCTION extsvc._transition_actor() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN current_setting('nico_extsvc.actor', true) = 'worker'
                   AND coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user), false)
              THEN 'worker' ELSE 'api' END
$fn$;
COMMENT ON FUNCTION extsvc._transition_actor() IS
  'Actor of a per-DPU state change: worker inside the worker''s entry points (nico_extsvc.actor), api otherwise.';

-- Staleness bound (SPEC 2.8): extsvc.observation_max_age, 15 min when the
-- library is not loaded (missing_ok gives NULL), but never less than twice
-- extsvc.resync_interval: a converged DPU is observed again only at the
-- resync, so a smaller bound would turn healthy rows UNKNOWN between passes.
CREATE FUNCTION extsvc._observation_max_age() RETURNS interval
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT greatest(coalesce(nullif(current_setting('extsvc.observation_max_age', true), '')::interval, interval '15 min'),
                  2 * coalesce(nullif(current_setting('extsvc.resync_interval', true), '')::interval, interval '5 min'))
$fn$;
COMMENT ON FUNCTION extsvc._observation_max_age() IS
  'The staleness bound of per-DPU observations: extsvc.observation_max_age (default 15min), at least twice extsvc.resync_interval.';

-- A state read from an observation older than the bound reads as UNKNOWN.
-- ERROR stays (it needs a person and outranks UNKNOWN anyway); rows never
-- observed (observed_at NULL) keep the state the API gave them.
CREATE FUNCTION extsvc._effective_deployment_state(p_state text, p_observed_at timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN p_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
                   AND p_observed_at < now() - extsvc._observation_max_age()
              THEN 'UNKNOWN' ELSE p_state END
$fn$;
COMMENT ON FUNCTION extsvc._effective_deployment_state(text, timestamptz) IS
  'The deployment_state readers see: UNKNOWN once the observation is older than extsvc.observation_max_age.';

-- A change that keeps an observation older than the bound (nobody looked
-- again): the staleness transition, as opposed to a fresh observation.
CREATE FUNCTION extsvc._went_stale(p_old_observed_at timestamptz, p_new_observed_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT coalesce(p_new_observed_at IS NOT DISTINCT FROM p_old_observed_at
                  AND p_old_observed_at < now() - extsvc._observation_max_age(), false)
$fn$;
COMMENT ON FUNCTION extsvc._went_stale(timestamptz, timestamptz) IS
  'True when a state change keeps an observation older than extsvc.observation_max_age (the staleness transition).';

CREATE FUNCTION extsvc._refuse_transition(p_machine text, p_from text, p_to text, p_actor text, p_reason text,
                                          p_row text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (SELECT FROM extsvc.placement_transitions t
                  WHERE t.machine = p_machine AND t.from_state IS NOT DISTINCT FROM p_from
                    AND t.to_state IS NOT DISTINCT FROM p_to AND t.actor = p_actor AND t.reason = p_reason) THEN
    RAISE EXCEPTION '% transition % -> % by % (%) is not allowed', p_machine,
        coalesce(p_from, '(new)'), coalesce(p_to, '(removed)'), p_actor, p_reason
      USING ERRCODE = '55000', CONSTRAINT = p_machine || '_transition',
            DETAIL = format('machine: %s, from: %s, to: %s, actor: %s, reason: %s, %s', p_machine,
                            coalesce(p_from, '(new)'), coalesce(p_to, '(removed)'), p_actor, p_reason, p_row),
            HINT = 'See extsvc.placement_transitions for the allowed changes.';
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._refuse_transition(text, text, text, text, text, text) IS
  'Raises 55000 unless the per-DPU state change is listed in extsvc.placement_transitions.';

-- Reason of a placement change, derived from the instance, its entry and
-- the DPU (the order matters: deletion explains more than a detach).
CREATE FUNCTION extsvc._placement_reason(p_old extsvc.dpf_extension_service_attachments,
                                         p_new extsvc.dpf_extension_service_attachments) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r extsvc.dpf_extension_service_attachments := CASE WHEN p_new IS NULL THEN p_old ELSE p_new END;
  v_deleting boolean;
  v_entry_active boolean;
  v_deregistered boolean;
BEGIN
  IF p_new IS NULL THEN  -- row removed
    IF p_old.placement_state <> 'REMOVING' THEN
      RETURN 'still_active';
    ELSIF p_old.deployment_state = 'TERMINATED' THEN
      RETURN 'terminated_observed';
    ELSIF EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                   WHERE w.dpu_machine_id = p_old.dpu_machine_id AND w.service_id = p_old.service_id
                     AND w.version = p_old.version) THEN
      RETURN 'released';
    END IF;
    RETURN 'not_terminated';
  END IF;
  SELECT i.delete_requested_at IS NOT NULL INTO v_deleting FROM extsvc.instances i WHERE i.instance_id = r.instance_id;
  SELECT c.removed_at IS NULL INTO v_entry_active FROM extsvc.instance_extension_services c
   WHERE c.instance_id = r.instance_id AND c.service_id = r.service_id AND c.version = r.version;
  SELECT d.deregistered_at IS NOT NULL INTO v_deregistered FROM extsvc.dpus d WHERE d.machine_id = r.dpu_machine_id;
  IF p_new.placement_state = 'ACTIVE' THEN
    IF coalesce(v_deleting, true) OR NOT coalesce(v_entry_active, false) OR coalesce(v_deregistered, true) THEN
      RETURN 'not_targeted';
    END IF;
    RETURN CASE WHEN p_old IS NULL THEN 'targeted' ELSE 'retargeted' END;
  END IF;
  RETURN CASE WHEN coalesce(v_deleting, false) THEN 'instance_deleted'
              WHEN NOT coalesce(v_entry_active, false) THEN 'detached'
              WHEN v_deregistered THEN 'dpu_deregistered'
              ELSE 'untargeted' END;
END
$fn$;
COMMENT ON FUNCTION extsvc._placement_reason(extsvc.dpf_extension_service_attachments, extsvc.dpf_extension_service_attachments) IS
  'Reason of an attachment placement change (NULL old: created, NULL new: removed), derived from instance, entry and DPU.';

-- Reason of a deployment_state change (SPEC 2.8): an API write that comes
-- with a placement change, staleness (state changed to UNKNOWN while the
-- observation, not renewed, is older than the bound), or an
-- observation, whose evidence class follows from the state and whether the
-- row is wanted.
CREATE FUNCTION extsvc._deployment_reason(p_created boolean, p_placement_changed boolean, p_placement text,
                                          p_to text, p_stale boolean, p_wanted boolean,
                                          p_shared boolean DEFAULT false) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE
    WHEN p_placement_changed AND p_placement = 'REMOVING' AND p_to = 'UNKNOWN' THEN 'removal_requested'
    WHEN p_placement_changed AND p_placement = 'ACTIVE' AND p_to = 'PENDING'
      THEN CASE WHEN p_created THEN 'attached' ELSE 'reattached' END
    WHEN p_placement_changed THEN 'placement_' || lower(p_placement) || '_with_' || lower(p_to)
    WHEN p_to = 'UNKNOWN' AND p_stale THEN 'observation_stale'
    WHEN p_to = 'UNKNOWN' THEN 'not_observable'
    WHEN p_to = 'ERROR' THEN 'non_transient_failure'
    WHEN p_to IN ('RUNNING', 'PENDING') AND NOT p_wanted AND p_shared THEN 'label_held_by_other'
    WHEN p_to = 'RUNNING' THEN CASE WHEN p_wanted THEN 'running_observed' ELSE 'running_unwanted' END
    WHEN p_to = 'PENDING' THEN CASE WHEN p_wanted THEN 'not_running_observed' ELSE 'pending_unwanted' END
    WHEN p_to = 'TERMINATING' THEN CASE WHEN p_wanted THEN 'terminating_wanted' ELSE 'remnant_observed' END
    WHEN p_to = 'TERMINATED' THEN CASE WHEN p_wanted THEN 'dpu_gone' ELSE 'absence_observed' END
  END
$fn$;
COMMENT ON FUNCTION extsvc._deployment_reason(boolean, boolean, text, text, boolean, boolean, boolean) IS
  'Reason of a per-DPU deployment_state change: API write with a placement change, staleness, or the SPEC 2.8 evidence class of an observation.';

CREATE FUNCTION extsvc._attachment_wanted(p_row extsvc.dpf_extension_service_attachments) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT p_row.placement_state = 'ACTIVE'
     AND EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = p_row.dpu_machine_id AND d.deregistered_at IS NULL)
$fn$;
COMMENT ON FUNCTION extsvc._attachment_wanted(extsvc.dpf_extension_service_attachments) IS
  'Whether an attachment row''s label is wanted (ACTIVE on a registered DPU), as the worker''s claim computes it.';

-- A hand-over: another active reason wants the same label on the same DPU.
CREATE FUNCTION extsvc._attachment_shared(p_row extsvc.dpf_extension_service_attachments) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT EXISTS (SELECT FROM extsvc.dpu_desired_labels w
                  WHERE w.dpu_machine_id = p_row.dpu_machine_id AND w.service_id = p_row.service_id
                    AND w.version = p_row.version AND w.instance_id IS DISTINCT FROM p_row.instance_id)
$fn$;
COMMENT ON FUNCTION extsvc._attachment_shared(extsvc.dpf_extension_service_attachments) IS
  'Whether another active reason (another instance''s ACTIVE row, an ALL_DPUS service) wants the same label on the row''s DPU.';

CREATE FUNCTION extsvc._site_row_wanted(p_service uuid, p_dpu uuid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT coalesce((SELECT extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision)
                     FROM extsvc.service_records s WHERE s.service_id = p_service), false)
     AND EXISTS (SELECT FROM extsvc.dpus d WHERE d.machine_id = p_dpu AND d.deregistered_at IS NULL)
$fn$;
COMMENT ON FUNCTION extsvc._site_row_wanted(uuid, uuid) IS
  'Whether an ALL_DPUS service is wanted on a DPU (service accepted and not being deleted, DPU registered).';
COMMENT ON TABLE extsvc.dpu_state_history IS
  'Per-DPU state changes (placement, deployment, ALL_DPUS) with actor, reason and evidence; at most 32 per row, 30 days.';
-- pg_dump keeps the history and its id sequence; extsvc.placement_transitions
-- holds only the install script's seed rows and is not dumped.
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_state_history', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.dpu_state_history_id_seq', '');

CREATE FUNCTION extsvc._record_dpu_state(p_machine text, p_instance uuid, p_dpu uuid, p_service uuid, p_version text,
                                         p_from text, p_to text, p_actor text, p_reason text, p_message text,
                                         p_observed_at timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_cut bigint;
BEGIN
  INSERT INTO extsvc.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version, from_state, to_state,
                                        actor, reason, message, observed_at)
  VALUES (p_machine, p_instance, p_dpu, p_service, p_version, p_from, p_to, p_actor, p_reason, p_message, p_observed_at);
  SELECT h.id INTO v_cut FROM extsvc.dpu_state_history h
   WHERE h.service_id = p_service AND h.dpu_machine_id = p_dpu AND h.instance_id IS NOT DISTINCT FROM p_instance
   ORDER BY h.id DESC OFFSET 32 LIMIT 1;
  IF v_cut IS NOT NULL THEN
    DELETE FROM extsvc.dpu_state_history h
     WHERE h.service_id = p_service AND h.dpu_machine_id = p_dpu AND h.instance_id IS NOT DISTINCT FROM p_instance
       AND h.id <= v_cut;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._record_dpu_state(text, uuid, uuid, uuid, text, text, text, text, text, text, timestamptz) IS
  'Appends one per-DPU state change to extsvc.dpu_state_history and keeps the newest 32 of the row.';

-- Attachments: BEFORE refuses, AFTER records (an INSERT ... ON CONFLICT that
-- updates fires the BEFORE INSERT check for the proposed row but records
-- only what happened).
CREATE FUNCTION extsvc._check_attachment_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_actor text := extsvc._transition_actor();
  v_row text;
  v_old extsvc.dpf_extension_service_attachments;
  v_new extsvc.dpf_extension_service_attachments;
  r extsvc.dpf_extension_service_attachments;
  v_placement_changed boolean;
  v_wanted boolean;
BEGIN
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  r := CASE WHEN TG_OP = 'DELETE' THEN v_old ELSE v_new END;
  v_row := format('instance_id: %s, dpu_machine_id: %s, service_id: %s, version: %s',
                  r.instance_id, r.dpu_machine_id, r.service_id, r.version);
  v_placement_changed := TG_OP <> 'UPDATE' OR NEW.placement_state <> OLD.placement_state;
  IF v_placement_changed THEN
    PERFORM extsvc._refuse_transition('placement', v_old.placement_state, v_new.placement_state, v_actor,
                                      extsvc._placement_reason(v_old, v_new), v_row);
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  IF TG_OP = 'INSERT' OR NEW.deployment_state <> OLD.deployment_state THEN
    v_wanted := extsvc._attachment_wanted(NEW);
    PERFORM extsvc._refuse_transition('deployment', v_old.deployment_state, NEW.deployment_state, v_actor,
      extsvc._deployment_reason(TG_OP = 'INSERT', v_placement_changed, NEW.placement_state, NEW.deployment_state,
                                extsvc._went_stale(v_old.observed_at, NEW.observed_at), v_wanted,
                                NOT v_wanted AND NEW.deployment_state IN ('RUNNING', 'PENDING')
                                AND extsvc._attachment_shared(NEW)),
      v_row);
  END IF;
  RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_attachment_transition() IS
  'Trigger: refuses attachment placement and deployment changes not listed in extsvc.placement_transitions (55000).';

CREATE FUNCTION extsvc._record_attachment_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_actor text := extsvc._transition_actor();
  v_old extsvc.dpf_extension_service_attachments;
  v_new extsvc.dpf_extension_service_attachments;
  r extsvc.dpf_extension_service_attachments;
  v_placement_changed boolean;
  v_wanted boolean;
BEGIN
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  r := CASE WHEN TG_OP = 'DELETE' THEN v_old ELSE v_new END;
  v_placement_changed := TG_OP <> 'UPDATE' OR NEW.placement_state <> OLD.placement_state;
  IF v_placement_changed THEN
    PERFORM extsvc._record_dpu_state('placement', r.instance_id, r.dpu_machine_id, r.service_id, r.version,
                                     v_old.placement_state, v_new.placement_state, v_actor,
                                     extsvc._placement_reason(v_old, v_new), r.status_message, r.observed_at);
  END IF;
  IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.deployment_state <> OLD.deployment_state) THEN
    v_wanted := extsvc._attachment_wanted(NEW);
    PERFORM extsvc._record_dpu_state('deployment', r.instance_id, r.dpu_machine_id, r.service_id, r.version,
      v_old.deployment_state, NEW.deployment_state, v_actor,
      extsvc._deployment_reason(TG_OP = 'INSERT', v_placement_changed, NEW.placement_state, NEW.deployment_state,
                                extsvc._went_stale(v_old.observed_at, NEW.observed_at), v_wanted,
                                NOT v_wanted AND NEW.deployment_state IN ('RUNNING', 'PENDING')
                                AND extsvc._attachment_shared(NEW)),
      NEW.status_message, NEW.observed_at);
  END IF;
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._record_attachment_transition() IS
  'Trigger: records every attachment placement and deployment change in extsvc.dpu_state_history.';

CREATE TRIGGER attachment_transition_check
  BEFORE INSERT OR DELETE OR UPDATE OF placement_state, deployment_state ON extsvc.dpf_extension_service_attachments
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_attachment_transition();
CREATE TRIGGER attachment_transition_history
  AFTER INSERT OR DELETE OR UPDATE OF placement_state, deployment_state ON extsvc.dpf_extension_service_attachments
  FOR EACH ROW EXECUTE FUNCTION extsvc._record_attachment_transition();

-- ALL_DPUS per-DPU rows
CREATE FUNCTION extsvc._site_transition_reason(p_op text, p_old extsvc.site_service_dpu_status,
                                               p_new extsvc.site_service_dpu_status) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE
    WHEN p_op = 'DELETE' THEN
      CASE WHEN EXISTS (SELECT FROM extsvc.service_records s
                         WHERE s.service_id = p_old.service_id AND s.lifecycle_state = 'DELETED')
           THEN 'service_deleted' ELSE 'service_not_deleted' END
    ELSE extsvc._deployment_reason(p_op = 'INSERT', false, NULL, p_new.deployment_state,
                                   extsvc._went_stale(p_old.observed_at, p_new.observed_at),
                                   extsvc._site_row_wanted(p_new.service_id, p_new.dpu_machine_id))
  END
$fn$;
COMMENT ON FUNCTION extsvc._site_transition_reason(text, extsvc.site_service_dpu_status, extsvc.site_service_dpu_status) IS
  'Reason of a change of an ALL_DPUS per-DPU row (deletion: the service is DELETED; otherwise the evidence class).';

CREATE FUNCTION extsvc._check_site_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_old extsvc.site_service_dpu_status;
  v_new extsvc.site_service_dpu_status;
BEGIN
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  IF TG_OP = 'UPDATE' AND NEW.deployment_state = OLD.deployment_state THEN
    RETURN NEW;
  END IF;
  PERFORM extsvc._refuse_transition('site_deployment', v_old.deployment_state, v_new.deployment_state,
    extsvc._transition_actor(), extsvc._site_transition_reason(TG_OP, v_old, v_new),
    format('service_id: %s, dpu_machine_id: %s', CASE WHEN TG_OP = 'DELETE' THEN OLD.service_id ELSE NEW.service_id END,
           CASE WHEN TG_OP = 'DELETE' THEN OLD.dpu_machine_id ELSE NEW.dpu_machine_id END));
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION extsvc._check_site_transition() IS
  'Trigger: refuses ALL_DPUS per-DPU state changes not listed in extsvc.placement_transitions (55000).';

CREATE FUNCTION extsvc._record_site_transition() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_old extsvc.site_service_dpu_status;
  v_new extsvc.site_service_dpu_status;
  r extsvc.site_service_dpu_status;
BEGIN
  IF TG_OP <> 'INSERT' THEN v_old := OLD; END IF;
  IF TG_OP <> 'DELETE' THEN v_new := NEW; END IF;
  IF TG_OP = 'UPDATE' AND NEW.deployment_state = OLD.deployment_state THEN
    RETURN NULL;
  END IF;
  r := CASE WHEN TG_OP = 'DELETE' THEN v_old ELSE v_new END;
  PERFORM extsvc._record_dpu_state('site_deployment', NULL, r.dpu_machine_id, r.service_id, NULL,
    v_old.deployment_state, v_new.deployment_state, extsvc._transition_actor(),
    extsvc._site_transition_reason(TG_OP, v_old, v_new), r.status_message, r.observed_at);
  RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION extsvc._record_site_transition() IS
  'Trigger: records every ALL_DPUS per-DPU state change in extsvc.dpu_state_history.';

CREATE TRIGGER site_transition_check
  BEFORE INSERT OR DELETE OR UPDATE OF deployment_state ON extsvc.site_service_dpu_status
  FOR EACH ROW EXECUTE FUNCTION extsvc._check_site_transition();
CREATE TRIGGER site_transition_history
  AFTER INSERT OR DELETE OR UPDATE OF deployment_state ON extsvc.site_service_dpu_status
  FOR EACH ROW EXECUTE FUNCTION extsvc._record_site_transition();

-- Persists staleness: observed states older than the bound become UNKNOWN
-- (readers already see that through extsvc._effective_deployment_state), and
-- prunes history older than 30 days. Run by the resync (mark_dpus_due).
CREATE FUNCTION extsvc.expire_stale_observations() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, extsvc, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_bound interval := extsvc._observation_max_age();
  n integer;
  m integer;
BEGIN
  UPDATE extsvc.dpf_extension_service_attachments a
     SET deployment_state = 'UNKNOWN', updated_at = now(),
         status_message = format('last observation at %s is older than extsvc.observation_max_age (%s)',
                                 a.observed_at, v_bound)
   WHERE a.deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
     AND a.observed_at < now() - v_bound;
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE extsvc.site_service_dpu_status x
     SET deployment_state = 'UNKNOWN',
         status_message = format('last observation at %s is older than extsvc.observation_max_age (%s)',
                                 x.observed_at, v_bound)
   WHERE x.deployment_state IN ('PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED')
     AND x.observed_at < now() - v_bound;
  GET DIAGNOSTICS m = ROW_COUNT;
  DELETE FROM extsvc.dpu_state_history h WHERE h.at < now() - interval '30 days';
  RETURN n + m;
END
$fn$;
COMMENT ON FUNCTION extsvc.expire_stale_observations() IS
  'Marks per-DPU states observed longer ago than extsvc.observation_max_age UNKNOWN (reason observation_stale); prunes history older than 30 days. Returns the rows marked.';

CREATE FUNCTION extsvc.instance_dpu_state_history(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (at timestamptz, service_id uuid, service_name text, version text, dpu_machine_id uuid,
               dpu_node_name text, machine text, from_state text, to_state text, actor text, reason text,
               message text, observed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, extsvc, pg_temp AS $fn$
BEGIN
  -- the tenant check of every instance function (a deleted instance has no
  -- tenant left to compare, so with the argument it is refused like a
  -- foreign one); without it, a deleted instance's history stays readable
  -- until retention removes it, and only an id with neither is unknown
  PERFORM extsvc._check_instance_tenant(instance_dpu_state_history.instance_id,
                                        instance_dpu_state_history.tenant_organization_id);
  IF NOT EXISTS (SELECT FROM extsvc.instances i WHERE i.instance_id = instance_dpu_state_history.instance_id)
     AND NOT EXISTS (SELECT FROM extsvc.dpu_state_history h
                      WHERE h.instance_id = instance_dpu_state_history.instance_id) THEN
    PERFORM extsvc._raise('P0002', 'instance not found',
                          format('instance_id: %s', instance_dpu_state_history.instance_id),
                          'Check the instance id; history of a deleted instance is kept 30 days.');
  END IF;
  RETURN QUERY
  SELECT h.at, h.service_id, s.service_name, h.version, h.dpu_machine_id, d.dpu_node_name, h.machine::text,
         h.from_state, h.to_state, h.actor::text, h.reason, h.message, h.observed_at
    FROM extsvc.dpu_state_history h
    LEFT JOIN extsvc.service_records s ON s.service_id = h.service_id
    LEFT JOIN extsvc.dpus d ON d.machine_id = h.dpu_machine_id
   WHERE h.instance_id = instance_dpu_state_history.instance_id
   ORDER BY h.id;
END
$fn$;
COMMENT ON FUNCTION extsvc.instance_dpu_state_history(uuid, text) IS
  'Per-DPU state changes of one instance''s attachments (placement and deployment), oldest first, with the evidence in message; kept 30 days, at most 32 per row; a deleted instance''s history stays readable. P0002 for an id with neither instance nor history; with tenant_organization_id, 42501 for another tenant''s, a deleted or an unknown instance alike.';

-- The worker's entry points run as actor 'worker' (function-scoped setting,
-- looked up by name so a changed signature does not break the install).
DO $do$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'extsvc'::regnamespace
              AND p.proname IN ('complete', 'mark_dpus_due') LOOP
    EXECUTE format('ALTER FUNCTION %s SET nico_extsvc.actor = %L', f, 'worker');
  END LOOP;
END
$do$;

-- ---- sql/parts/79_worker_watch.sql (definitions)
-- What the watcher (the worker that holds the LIST+WATCH caches, issue 11)
-- asks of the database: wake exactly the rows an event concerns, and claim
-- the DPU rows it woke before the queue's backlog. Rows are locked in key
-- order (the order every writer of these tables uses), and a row leased at
-- the moment gets its state_version bumped, so the pass in flight, which
-- decided from older evidence, ends stale and runs again instead of
-- dropping the wake.

-- Makes the given DPUs due now and tells which of them this call woke (the
-- others were due already); rows in key order (ON CONFLICT DO UPDATE locks
-- them in the SELECT's order, the order of every writer of these rows). A
-- row leased at the moment gets its state_version bumped, so the pass in
-- flight, which decided from older evidence, ends stale and runs again.
CREATE FUNCTION extsvc._wake_dpus(p_ids uuid[]) RETURNS TABLE (dpu_machine_id uuid, woken boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
  WITH hit AS (
    SELECT DISTINCT unnest(coalesce(p_ids, '{}')) AS machine_id
  ), marked AS (
    INSERT INTO extsvc.dpu_reconciliations AS r (dpu_machine_id, next_due_at)
    SELECT h.machine_id, now() FROM hit h ORDER BY h.machine_id
    ON CONFLICT (dpu_machine_id) DO UPDATE
       SET next_due_at = now(),
           state_version = r.state_version + CASE WHEN r.lease_token IS NOT NULL THEN 1 ELSE 0 END
     WHERE r.next_due_at IS NULL OR r.next_due_at > now() OR r.lease_token IS NOT NULL
    RETURNING r.dpu_machine_id
  )
  SELECT h.machine_id, EXISTS (SELECT FROM marked m WHERE m.dpu_machine_id = h.machine_id) FROM hit h
$fn$;
COMMENT ON FUNCTION extsvc._wake_dpus(uuid[]) IS
  'Internal: makes these DPUs due now (in key order; a leased one gets its state_version bumped); returns each and whether this call woke it.';

-- DPUs whose DPUDevice (by name) or DPU-cluster Node (by name: its labels or
-- the service pods on it) changed.
CREATE FUNCTION extsvc.mark_dpus_due_by_names(device_names text[], node_names text[])
RETURNS TABLE (dpu_machine_id uuid, woken boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  -- every DPU the names concern, for the watcher to work them before the
  -- backlog (no wake: the watcher, the only worker of the DPU queue in watch
  -- mode, works them right after this call)
  SELECT w.dpu_machine_id, w.woken FROM extsvc._wake_dpus(ARRAY(
    SELECT d.machine_id FROM extsvc.dpus d WHERE d.dpu_device_name = ANY (coalesce(device_names, '{}'))
    UNION
    SELECT d.machine_id FROM extsvc.dpus d WHERE d.dpu_node_name = ANY (coalesce(node_names, '{}')))) w
$fn$;
COMMENT ON FUNCTION extsvc.mark_dpus_due_by_names(text[], text[]) IS
  'Worker (watcher): makes the DPUs due whose DPUDevice or Node (by name) changed in the watch caches; returns every DPU concerned and whether this call made it due.';

-- Services whose DPUService changed: a DELETING one waits for DPF's
-- finalizers, and the watch says when the object went.
CREATE FUNCTION extsvc.wake_services(service_ids uuid[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n integer;
BEGIN
  WITH locked AS (
    SELECT q.service_id FROM extsvc.dpf_extension_service_reconciliations q
      JOIN extsvc.service_records s USING (service_id)
     WHERE q.service_id = ANY (coalesce(service_ids, '{}')) AND s.lifecycle_state = 'DELETING'
     ORDER BY q.service_id
       FOR UPDATE OF q
  )
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET next_due_at = now(),
         state_version = q.state_version + CASE WHEN q.lease_token IS NOT NULL THEN 1 ELSE 0 END
    FROM locked
   WHERE q.service_id = locked.service_id
     AND (q.next_due_at IS NULL OR q.next_due_at > now() OR q.lease_token IS NOT NULL);
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM extsvc._wake();
  END IF;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION extsvc.wake_services(uuid[]) IS
  'Worker (watcher): makes DELETING services due whose DPUService changed (finalizers removed, object gone); returns how many.';

-- The drift check of the services a watch event concerned: their work
-- objects, as resync_snapshot gives every READY service's.
CREATE FUNCTION extsvc.resync_snapshot_of(service_ids uuid[])
RETURNS TABLE (service_id uuid, work jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, extsvc._service_work(s.service_id, 0)
    FROM extsvc.service_records s
   WHERE s.service_id = ANY (coalesce(service_ids, '{}'))
     AND s.service_type = 'DPF_HELM_CHART' AND s.lifecycle_state = 'READY'
$fn$;
COMMENT ON FUNCTION extsvc.resync_snapshot_of(uuid[]) IS
  'Worker (watcher): the READY DPF services among service_ids with their work objects, for the drift check of what a watch event changed.';

-- DPUs still converging towards a service whose context changed (a
-- DaemonSet FailedCreate event, DPF's Ready condition): their PENDING
-- messages say more now.
CREATE FUNCTION extsvc.mark_service_dpus_due(service_ids uuid[])
RETURNS TABLE (dpu_machine_id uuid, woken boolean)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT w.dpu_machine_id, w.woken FROM extsvc._wake_dpus(ARRAY(
    SELECT a.dpu_machine_id FROM extsvc.dpf_extension_service_attachments a
     WHERE a.service_id = ANY (coalesce(service_ids, '{}')) AND a.deployment_state <> 'RUNNING'
    UNION
    SELECT x.dpu_machine_id FROM extsvc.site_service_dpu_status x
     WHERE x.service_id = ANY (coalesce(service_ids, '{}')) AND x.deployment_state <> 'RUNNING')) w
$fn$;
COMMENT ON FUNCTION extsvc.mark_service_dpus_due(uuid[]) IS
  'Worker (watcher): makes due the DPUs not yet RUNNING for these services, whose context (a FailedCreate event, DPF''s Ready condition) changed; returns every DPU concerned and whether this call made it due.';

-- The rows a watch event just woke, claimed by id before the queue's backlog:
-- their passes read the watch caches and make no call, so they must not wait
-- behind label patches paced by the client's rate limit (a fleet attach
-- showed no RUNNING before the last of 1000 patches). Same shape and lease as
-- extsvc.claim; only due, unleased rows among ids, in key order, SKIP LOCKED.
CREATE FUNCTION extsvc.claim_ids(queue text, worker text, ids uuid[], lease_seconds integer DEFAULT 60)
RETURNS TABLE (id uuid, state_version bigint, lease_token uuid, work jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  q record;
BEGIN
  SELECT * INTO q FROM extsvc._worker_queue(claim_ids.queue);
  RETURN QUERY EXECUTE format($q$
    WITH due AS (
      SELECT r.%2$I AS id
        FROM extsvc.%1$I r
       WHERE r.%2$I = ANY ($3)
         AND r.next_due_at <= now()
         AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())
       ORDER BY r.%2$I
         FOR UPDATE SKIP LOCKED
    ), claimed AS (
      UPDATE extsvc.%1$I r
         SET lease_owner = $1, lease_token = gen_random_uuid(),
             lease_expires_at = now() + make_interval(secs => $2), last_attempt_at = now()
        FROM due
       WHERE r.%2$I = due.id
      RETURNING r.%2$I AS id, r.state_version, r.lease_token, r.attempts
    )
    SELECT c.id, c.state_version, c.lease_token, extsvc.%3$I(c.id, c.attempts) FROM claimed c$q$,
    q.queue_table, q.key_column, q.work_function)
  USING claim_ids.worker, claim_ids.lease_seconds, coalesce(claim_ids.ids, '{}');
END
$fn$;
COMMENT ON FUNCTION extsvc.claim_ids(text, text, uuid[], integer) IS
  'Worker (watcher): lease the due, unleased rows among ids (those a watch event just woke), before the queue''s backlog; same result as extsvc.claim.';

-- ---- sql/parts/80_nico_reads.sql (definitions)
-- Reads for NICo's database layer and operators (issues #12 and #14):
-- versions, snapshots for FindByIds, instances, the instances of a service,
-- and the per-DPU status of site-wide services. All STABLE SECURITY DEFINER;
-- the optional trailing tenant_organization_id works as in the mutating API
-- (issue #10): with it, another tenant's row and an unknown id get the same
-- 42501 answer, so a caller cannot probe for existence.

-- NICo's instance config version is a string V<n>-T<micros> that the DPU
-- agent echoes and NICo compares byte for byte (issue #14 P1-7): stamped
-- whenever config_version changes, stable until the next change.
CREATE FUNCTION extsvc._stamp_config_version() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.config_version IS DISTINCT FROM OLD.config_version
     OR NEW.config_version_text IS NULL THEN
    NEW.config_version_text := extsvc._config_version(NEW.config_version);
  END IF;
  RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION extsvc._stamp_config_version() IS
  'Trigger: instances.config_version_text = V<config_version>-T<transaction time in microseconds>.';
CREATE TRIGGER instances_config_version_text
  BEFORE INSERT OR UPDATE ON extsvc.instances
  FOR EACH ROW EXECUTE FUNCTION extsvc._stamp_config_version();

-- The service row, or P0002 (after the tenant check).
CREATE FUNCTION extsvc._require_service(p_service_id uuid, p_tenant text) RETURNS extsvc.service_records
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
BEGIN
  PERFORM extsvc._check_service_tenant(p_service_id, p_tenant);
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = p_service_id;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', p_service_id),
                          'Check the service id; deleted services stay readable until purged.');
  END IF;
  RETURN s;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_service(uuid, text) IS
  'Internal: the service row after the tenant check; P0002 when unknown. No grants.';

CREATE FUNCTION extsvc.service_versions(service_id uuid, versions text[] DEFAULT NULL,
                                        include_deleted boolean DEFAULT false,
                                        tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (version text, version_number integer, data text, has_credential boolean,
               observability jsonb, created_at timestamptz, deleted_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(service_versions.service_id, service_versions.tenant_organization_id);
  RETURN QUERY
  SELECT v.version, v.version_number,
         -- DPF: the one attachable version carries the desired revision's definition
         CASE WHEN s.service_type = 'DPF_HELM_CHART'
              THEN (SELECT r.data::text FROM extsvc.helm_revisions r
                     WHERE r.service_id = s.service_id AND r.revision = s.desired_revision)
              ELSE v.data END,
         v.has_credential, v.observability, v.created_at, v.deleted_at
    FROM extsvc.service_versions v
   WHERE v.service_id = s.service_id
     AND (service_versions.versions IS NULL OR v.version = ANY (service_versions.versions))
     AND (coalesce(service_versions.include_deleted, false) OR v.deleted_at IS NULL)
   ORDER BY v.version_number DESC;
END
$fn$;
COMMENT ON FUNCTION extsvc.service_versions(uuid, text[], boolean, text) IS
  'One row per version of a service, newest first (GetDpuExtensionServiceVersionsInfo): version string and number, data as text (DPF: the desired revision''s normalized definition), has_credential, observability, created_at, deleted_at. versions filters (unknown strings are simply absent); deleted versions only with include_deleted. P0002 for an unknown service; with tenant_organization_id, 42501 for unknown and foreign alike.';

CREATE FUNCTION extsvc.service_snapshots(service_ids uuid[], tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (service_id uuid, tenant_organization_id text, service_name text, description text,
               service_type text, deployment_scope text, dpu_target text, lifecycle_state text,
               version text, version_ctr integer, desired_revision integer, applied_revision integer,
               dpf_service_name text, placement_label_key text, status_message text,
               created_at timestamptz, updated_at timestamptz, deleted_at timestamptz,
               delete_requested_at timestamptz, active_versions text[],
               latest_data text, latest_has_credential boolean, latest_observability jsonb,
               latest_created_at timestamptz,
               lifecycle_version bigint, state_reason text, state_actor text, state_changed_at timestamptz,
               last_error text, last_error_at timestamptz, next_due_at timestamptz,
               state_since timestamptz, attempts integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT s.service_id, s.tenant_organization_id, s.service_name, s.description, s.service_type,
         s.deployment_scope, s.dpu_target, s.lifecycle_state, s.version, s.version_ctr,
         s.desired_revision, s.applied_revision, s.dpf_service_name, s.placement_label_key,
         s.status_message, s.created_at, s.updated_at, s.deleted_at, r.delete_requested_at,
         ARRAY(SELECT x.version FROM extsvc.service_versions x
                WHERE x.service_id = s.service_id AND x.deleted_at IS NULL
                ORDER BY x.version_number DESC),
         l.data, l.has_credential, l.observability, l.created_at,
         h.n, r.state_reason, r.state_actor, h.at,
         q.last_error, q.last_error_at, q.next_due_at, h.since, q.attempts
    FROM unnest(service_snapshots.service_ids) WITH ORDINALITY u(id, o)
    JOIN extsvc.services s ON s.service_id = u.id
    JOIN extsvc.service_records r ON r.service_id = u.id
    LEFT JOIN extsvc.dpf_extension_service_reconciliations q ON q.service_id = u.id
    LEFT JOIN LATERAL (SELECT count(*) AS n, max(hh.at) AS at,
                              max(hh.at) FILTER (WHERE hh.from_state IS DISTINCT FROM hh.to_state) AS since
                         FROM extsvc.service_state_history hh
                        WHERE hh.service_id = u.id) h ON true
    LEFT JOIN LATERAL (
      SELECT x.has_credential, x.observability, x.created_at,
             CASE WHEN r.service_type = 'DPF_HELM_CHART'
                  THEN (SELECT hr.data::text FROM extsvc.helm_revisions hr
                         WHERE hr.service_id = u.id AND hr.revision = r.desired_revision)
                  ELSE x.data END AS data
        FROM extsvc.service_versions x
       WHERE x.service_id = u.id AND x.deleted_at IS NULL
       ORDER BY x.version_number DESC LIMIT 1) l ON true
   WHERE service_snapshots.tenant_organization_id IS NULL
      OR s.tenant_organization_id = service_snapshots.tenant_organization_id
   ORDER BY u.o
$fn$;
COMMENT ON FUNCTION extsvc.service_snapshots(uuid[], text) IS
  'FindByIds: one row per known id, in the order given (unknown ids, and with tenant_organization_id other tenants'' ids, are absent): the service fields, delete_requested_at, active_versions (newest first), the latest active version''s data / has_credential / observability / created_at, and lifecycle_version (history rows so far: grows with every transition and event) with the last state_reason, actor and time (state_changed_at), state_since (when lifecycle_state was entered: time in state = now() - state_since), and the worker''s last_error, last_error_at, next_due_at and attempts (messages never carry secrets, SPEC 2.6).';

CREATE FUNCTION extsvc.get_instance(instance_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, tenant_organization_id text, host_machine_id uuid, network_dpus uuid[],
               dpf_managed boolean, config_version integer, delete_requested_at timestamptz,
               created_at timestamptz, updated_at timestamptz, services jsonb, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_instance(get_instance.instance_id, get_instance.tenant_organization_id);
  SELECT i.instance_id, i.tenant_organization_id, i.host_machine_id, i.network_dpus, i.dpf_managed,
         i.config_version, i.delete_requested_at, i.created_at, i.updated_at,
         coalesce((SELECT jsonb_agg(jsonb_build_object(
                            'service_id', c.service_id, 'service_name', s.service_name,
                            'service_type', s.service_type, 'version', c.version,
                            'attached_at', c.attached_at, 'removed_at', c.removed_at)
                          ORDER BY c.removed_at IS NOT NULL, s.service_name, c.version)
                     FROM extsvc.instance_extension_services c
                     JOIN extsvc.service_records s ON s.service_id = c.service_id
                    WHERE c.instance_id = i.instance_id), '[]'::jsonb),
         i.config_version_text
    FROM extsvc.instances i
   WHERE i.instance_id = get_instance.instance_id
$fn$;
COMMENT ON FUNCTION extsvc.get_instance(uuid, text) IS
  'One instance as NICo stores it: tenant, host, network_dpus, dpf_managed, config_version, delete_requested_at, and services = every configured entry [{service_id, service_name, service_type, version, attached_at, removed_at}], tombstones (removed_at set) included, active ones first. P0002 for an unknown instance; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- NICo's instance config update in one call (issue #14 P1-7): the integer
-- config_version of extsvc.set_instance_extension_services (whose signature
-- SPEC 6 fixes) together with the string NICo hands to the DPU agent.
CREATE FUNCTION extsvc.set_instance_extension_services_versioned(
    instance_id uuid, services jsonb, if_config_version_match integer DEFAULT NULL,
    tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (config_version integer, config_version_text text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  config_version := extsvc.set_instance_extension_services(
      set_instance_extension_services_versioned.instance_id, set_instance_extension_services_versioned.services,
      set_instance_extension_services_versioned.if_config_version_match,
      set_instance_extension_services_versioned.tenant_organization_id);
  SELECT i.config_version_text INTO config_version_text
    FROM extsvc.instances i WHERE i.instance_id = set_instance_extension_services_versioned.instance_id;
  RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION extsvc.set_instance_extension_services_versioned(uuid, jsonb, integer, text) IS
  'extsvc.set_instance_extension_services, returning the new config_version and its string V<n>-T<micros> (NICo''s config version, echoed by the DPU agent; stable until the next change). Same arguments, rules and errors.';

-- P0002 for a version the service never had (deleted ones are known).
CREATE FUNCTION extsvc._require_service_version(p_service_id uuid, p_version text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM extsvc._require_service(p_service_id, p_tenant);
  IF p_version IS NOT NULL AND NOT EXISTS (
       SELECT FROM extsvc.service_versions v WHERE v.service_id = p_service_id AND v.version = p_version) THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, version: %s', p_service_id, p_version),
                          'List the versions with extsvc.service_versions(service_id).');
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._require_service_version(uuid, text, text) IS
  'Internal: tenant check, then P0002 for an unknown service or version. No grants.';

-- LANGUAGE sql: the input and the output column are both named version.
CREATE FUNCTION extsvc.service_instances(service_id uuid, version text DEFAULT NULL,
                                         tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (instance_id uuid, version text, attached_at timestamptz, removed_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._require_service_version(service_instances.service_id, service_instances.version,
                                         service_instances.tenant_organization_id);
  SELECT c.instance_id, c.version, c.attached_at, c.removed_at
    FROM extsvc.instance_extension_services c
   WHERE c.service_id = service_instances.service_id
     AND (service_instances.version IS NULL OR c.version = service_instances.version)
   ORDER BY c.instance_id, c.version
$fn$;
COMMENT ON FUNCTION extsvc.service_instances(uuid, text, text) IS
  'FindInstancesByDpuExtensionService: (instance_id, version, attached_at, removed_at) of every instance configured with the service (or one version of it), tombstones included. P0002 for an unknown service or version; with tenant_organization_id, 42501 for an unknown or foreign service alike.';

CREATE FUNCTION extsvc.site_service_status(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (dpu_machine_id uuid, dpu_device_name text, deployment_state text, status_message text,
               observed_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(site_service_status.service_id, site_service_status.tenant_organization_id);
  IF s.deployment_scope <> 'ALL_DPUS' THEN
    PERFORM extsvc._raise('22023', 'only ALL_DPUS services have site-wide status',
                          format('service_id: %s, deployment_scope: %s', s.service_id, s.deployment_scope),
                          'Read an instance''s status with extsvc.instance_extension_service_status(instance_id).');
  END IF;
  -- every observed DPU, plus every registered DPU not observed yet (UNKNOWN:
  -- nothing is claimed that was not observed)
  RETURN QUERY
  SELECT d.machine_id, d.dpu_device_name,
         coalesce(extsvc._effective_deployment_state(t.deployment_state, t.observed_at), 'UNKNOWN'),
         CASE WHEN t.service_id IS NULL THEN 'not observed yet' ELSE t.status_message END,
         t.observed_at
    FROM extsvc.dpus d
    LEFT JOIN extsvc.site_service_dpu_status t ON t.dpu_machine_id = d.machine_id AND t.service_id = s.service_id
   WHERE t.service_id IS NOT NULL
      OR (d.deregistered_at IS NULL AND extsvc._site_service_wanted(s.lifecycle_state, s.applied_revision))
   ORDER BY d.dpu_device_name;
END
$fn$;
COMMENT ON FUNCTION extsvc.site_service_status(uuid, text) IS
  'Per-DPU status of an ALL_DPUS service (rows of extsvc.site_service_dpu_status): dpu_machine_id, dpu_device_name, deployment_state (UNKNOWN once older than extsvc.observation_max_age), status_message, observed_at; a registered DPU not observed yet reads UNKNOWN. P0002 for an unknown service, 22023 for an INSTANCE_DPUS one; with tenant_organization_id, 42501 for unknown and foreign alike.';

REVOKE ALL ON FUNCTION
  extsvc.set_instance_extension_services_versioned(uuid, jsonb, integer, text),
  extsvc._require_service(uuid, text),
  extsvc._require_service_version(uuid, text, text),
  extsvc.service_versions(uuid, text[], boolean, text),
  extsvc.service_snapshots(uuid[], text),
  extsvc.get_instance(uuid, text),
  extsvc.service_instances(uuid, text, text),
  extsvc.site_service_status(uuid, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.set_instance_extension_services_versioned(uuid, jsonb, integer, text),
  extsvc.service_versions(uuid, text[], boolean, text),
  extsvc.service_snapshots(uuid[], text),
  extsvc.get_instance(uuid, text),
  extsvc.service_instances(uuid, text, text),
  extsvc.site_service_status(uuid, text)
TO extsvc_api, extsvc_admin;

-- ---- sql/parts/82_revisions.sql (definitions)
-- Revisions, rollback, retry, retention and abandoning a blocked delete
-- (issue #12). rollback_service and retry_service are role-dependent like
-- update_service: SECURITY INVOKER entries (admin rights follow the calling
-- role, issue #10); purge_deleted and abandon_service are for extsvc_admin
-- only (EXECUTE granted to extsvc_admin, checked for the calling role).

-- The Helm revisions of a DPF service, newest first.
CREATE FUNCTION extsvc.service_revisions(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (revision integer, data text, is_desired boolean, is_applied boolean, created_at timestamptz,
               created_by text, applied_at timestamptz, superseded_at timestamptz, rollback_of integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
BEGIN
  s := extsvc._require_service(service_revisions.service_id, service_revisions.tenant_organization_id);
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services have Helm revisions',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Read a KUBERNETES_POD service''s versions with extsvc.service_versions(service_id).');
  END IF;
  RETURN QUERY
  SELECT r.revision, r.data::text, r.revision = s.desired_revision, r.revision IS NOT DISTINCT FROM s.applied_revision,
         r.created_at, r.created_by, r.applied_at, r.superseded_at, r.rollback_of
    FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id
   ORDER BY r.revision DESC;
END
$fn$;
COMMENT ON FUNCTION extsvc.service_revisions(uuid, text) IS
  'The Helm revisions of a DPF service, newest first: revision, normalized data, is_desired, is_applied, created_at/by, applied_at, superseded_at, rollback_of. P0002 for an unknown service, 22023 for a KUBERNETES_POD one; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- rollback_service, step 1 (SECURITY DEFINER): the definition of an old
-- revision, after the tenant and existence checks.
CREATE FUNCTION extsvc._revision_data(p_service_id uuid, p_revision integer, p_tenant text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  v_data text;
BEGIN
  s := extsvc._require_service(p_service_id, p_tenant);
  IF s.service_type <> 'DPF_HELM_CHART' THEN
    PERFORM extsvc._raise('22023', 'only DPF_HELM_CHART services can be rolled back',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Update a KUBERNETES_POD service with the data of the version you want.');
  END IF;
  SELECT r.data::text INTO v_data FROM extsvc.helm_revisions r
   WHERE r.service_id = s.service_id AND r.revision = p_revision;
  IF v_data IS NULL THEN
    PERFORM extsvc._raise('P0002', 'revision not found',
                          format('service_id: %s, revision: %s', s.service_id, p_revision),
                          'List the revisions with extsvc.service_revisions(service_id).');
  END IF;
  RETURN v_data;
END
$fn$;
COMMENT ON FUNCTION extsvc._revision_data(uuid, integer, text) IS
  'Internal step of extsvc.rollback_service: the normalized data of a revision (tenant check, P0002/22023).';

-- rollback_service, step 3 (SECURITY DEFINER): marks the revision that this
-- transaction's update created as a rollback of p_revision. Only a revision
-- created now, newer than p_revision and with its data, is marked.
CREATE FUNCTION extsvc._mark_rollback(p_service_id uuid, p_revision integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  UPDATE extsvc.helm_revisions r
     SET rollback_of = p_revision
    FROM extsvc.service_records s, extsvc.helm_revisions o
   WHERE s.service_id = p_service_id AND r.service_id = s.service_id AND r.revision = s.desired_revision
     AND o.service_id = s.service_id AND o.revision = p_revision
     AND r.revision > p_revision AND r.created_at = now() AND r.data = o.data AND r.rollback_of IS NULL;
  IF FOUND THEN
    UPDATE extsvc.service_records s
       SET status_message = format('rollback to revision %s: waiting for the worker to apply revision %s',
                                   p_revision, s.desired_revision)
     WHERE s.service_id = p_service_id;
  END IF;
END
$fn$;
COMMENT ON FUNCTION extsvc._mark_rollback(uuid, integer) IS
  'Internal step of extsvc.rollback_service: records rollback_of on the revision the update just created.';

CREATE FUNCTION extsvc.rollback_service(service_id uuid, revision integer, if_version_ctr_match integer DEFAULT NULL,
                                        tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_data text;
  r extsvc.services;
BEGIN
  -- SECURITY INVOKER: the update below runs through update_service's own
  -- role gates (ALL_DPUS needs extsvc_admin rights of the calling role)
  v_data := extsvc._revision_data(rollback_service.service_id, rollback_service.revision,
                                  rollback_service.tenant_organization_id);
  r := extsvc.update_service(rollback_service.service_id, v_data, NULL, NULL, rollback_service.if_version_ctr_match,
                             NULL, NULL, rollback_service.tenant_organization_id);
  PERFORM extsvc._mark_rollback(rollback_service.service_id, rollback_service.revision);
  SELECT * INTO r FROM extsvc.services s WHERE s.service_id = rollback_service.service_id;
  RETURN r;
END
$fn$;
COMMENT ON FUNCTION extsvc.rollback_service(uuid, integer, integer, text) IS
  'Rolls a DPF service back to an older revision: a new revision with that revision''s definition, through the normal update path (allow-list, version_ctr guard, supersede rules, ALL_DPUS for extsvc_admin only); rollback_of records the origin. Rolling back to the current desired definition is a no-op. P0002 unknown service or revision, 22023 KUBERNETES_POD, 55000 DELETING/DELETED or version_ctr mismatch.';

-- retry_service -----------------------------------------------------------------

CREATE FUNCTION extsvc._retry_service(service_id uuid, tenant_organization_id text, p_admin boolean)
RETURNS extsvc.services
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
BEGIN
  PERFORM extsvc._check_service_tenant(_retry_service.service_id, _retry_service.tenant_organization_id);
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = _retry_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', _retry_service.service_id),
                          'Check the service id.');
  END IF;
  IF s.deployment_scope = 'ALL_DPUS' AND NOT p_admin THEN
    PERFORM extsvc._raise('42501', 'only extsvc_admin members may retry ALL_DPUS services',
                          format('service_id: %s, deployment_scope: ALL_DPUS', s.service_id),
                          'Ask an operator to retry site-wide services.');
  END IF;
  IF s.lifecycle_state <> 'FAILED' THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', 'only FAILED services can be retried',
                          format('lifecycle_state: %s', s.lifecycle_state), 'Use extsvc.reconcile_now for other states.');
  END IF;
  -- a failed delete is requested again; otherwise the newest definition
  -- is created or applied again
  UPDATE extsvc.service_records r
     SET lifecycle_state = CASE WHEN r.delete_requested_at IS NOT NULL THEN 'DELETING'
                                WHEN r.applied_revision IS NULL THEN 'CREATING' ELSE 'UPDATING' END,
         state_actor = 'api', state_reason = 'retry', updated_at = now(),
         status_message = CASE WHEN p_admin THEN 'retry requested by an operator' ELSE 'retry requested' END
   WHERE r.service_id = s.service_id;
  PERFORM extsvc._intent_changed(s.service_id);
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc._retry_service(uuid, text, boolean) IS
  'Internal: body of extsvc.retry_service; p_admin says whether the caller has extsvc_admin rights. No grants.';

CREATE FUNCTION extsvc._retry_service_as_admin(service_id uuid, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._retry_service($1, $2, true)
$fn$;
COMMENT ON FUNCTION extsvc._retry_service_as_admin(uuid, text) IS
  'Internal gate of extsvc.retry_service for callers with extsvc_admin rights (EXECUTE for extsvc_admin only).';

CREATE FUNCTION extsvc._retry_service_as_api(service_id uuid, tenant_organization_id text)
RETURNS extsvc.services
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT extsvc._retry_service($1, $2, false)
$fn$;
COMMENT ON FUNCTION extsvc._retry_service_as_api(uuid, text) IS
  'Internal gate of extsvc.retry_service for callers without extsvc_admin rights.';

CREATE FUNCTION extsvc.retry_service(service_id uuid, tenant_organization_id text DEFAULT NULL)
RETURNS extsvc.services
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  -- SECURITY INVOKER: current_user is the calling role, SET ROLE included
  IF pg_has_role(current_user, 'extsvc_admin', 'USAGE') THEN
    RETURN extsvc._retry_service_as_admin(retry_service.service_id, retry_service.tenant_organization_id);
  END IF;
  RETURN extsvc._retry_service_as_api(retry_service.service_id, retry_service.tenant_organization_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.retry_service(uuid, text) IS
  'Retries a FAILED DPF service without changing its definition: CREATING (never applied), UPDATING (applied before) or DELETING (a failed delete). For extsvc_api and extsvc_admin; ALL_DPUS services need extsvc_admin rights of the calling role; with tenant_organization_id, another tenant''s service is refused (42501) exactly like an unknown one.';
COMMENT ON TABLE extsvc.purged_services IS
  'Audit record of every service removed by extsvc.purge_deleted (definitions and pod specs are not kept).';
COMMENT ON TABLE extsvc.purged_service_history IS
  'The lifecycle history rows of purged services, kept for audit by extsvc.purge_deleted.';

SELECT pg_catalog.pg_extension_config_dump('extsvc.purged_services', '');
SELECT pg_catalog.pg_extension_config_dump('extsvc.purged_service_history', '');

CREATE FUNCTION extsvc.purge_deleted(older_than interval)
RETURNS TABLE (service_id uuid, tenant_organization_id text, service_name text, deleted_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids uuid[];
BEGIN
  IF purge_deleted.older_than IS NULL OR purge_deleted.older_than < interval '0' THEN
    PERFORM extsvc._raise('22023', 'older_than must be a non-negative interval',
                          format('field: older_than = %s', coalesce(purge_deleted.older_than::text, 'NULL')),
                          'Pass e.g. interval ''90 days''.');
  END IF;
  -- DELETED long enough, and no instance configuration (a KUBERNETES_POD
  -- tombstone still seen by a DPU agent) or attachment refers to it
  SELECT array_agg(s.service_id ORDER BY s.service_id) INTO v_ids
    FROM extsvc.service_records s
   WHERE s.lifecycle_state = 'DELETED' AND s.deleted_at <= now() - purge_deleted.older_than
     AND NOT EXISTS (SELECT FROM extsvc.instance_extension_services c WHERE c.service_id = s.service_id)
     AND NOT EXISTS (SELECT FROM extsvc.dpf_extension_service_attachments a WHERE a.service_id = s.service_id);
  IF v_ids IS NULL THEN
    RETURN;
  END IF;
  PERFORM FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids) ORDER BY s.service_id FOR UPDATE;
  INSERT INTO extsvc.purged_services (service_id, tenant_organization_id, service_name, service_type,
      deployment_scope, dpf_service_name, created_at, delete_requested_at, deleted_at, final_reason,
      revisions, versions)
  SELECT s.service_id, s.tenant_organization_id, s.service_name, s.service_type, s.deployment_scope,
         s.dpf_service_name, s.created_at, s.delete_requested_at, s.deleted_at, s.state_reason,
         coalesce((SELECT jsonb_agg(jsonb_build_object('revision', r.revision, 'created_at', r.created_at,
                                                       'created_by', r.created_by, 'applied_at', r.applied_at,
                                                       'rollback_of', r.rollback_of) ORDER BY r.revision)
                     FROM extsvc.helm_revisions r WHERE r.service_id = s.service_id), '[]'),
         coalesce((SELECT jsonb_agg(jsonb_build_object('version', v.version, 'created_at', v.created_at,
                                                       'deleted_at', v.deleted_at, 'has_credential', v.has_credential)
                                    ORDER BY v.version_number)
                     FROM extsvc.service_versions v WHERE v.service_id = s.service_id), '[]')
    FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids);
  INSERT INTO extsvc.purged_service_history (id, service_id, from_state, to_state, actor, reason, message, revision, at)
  SELECT h.id, h.service_id, h.from_state, h.to_state, h.actor, h.reason, h.message, h.revision, h.at
    FROM extsvc.service_state_history h WHERE h.service_id = ANY (v_ids);
  -- the service row goes; versions, revisions, history, reconciliation and
  -- site status rows follow by ON DELETE CASCADE
  RETURN QUERY
  DELETE FROM extsvc.service_records s WHERE s.service_id = ANY (v_ids)
  RETURNING s.service_id, s.tenant_organization_id, s.service_name, s.deleted_at;
END
$fn$;
COMMENT ON FUNCTION extsvc.purge_deleted(interval) IS
  'Operator (extsvc_admin): removes services DELETED at least older_than ago that no instance configuration or attachment refers to, and returns them. Kept for audit: extsvc.purged_services (identity, tenant, lifetime, final reason, revision and version metadata, who purged it when) and extsvc.purged_service_history (every lifecycle history row). Dropped: pod specs, Helm definitions, reconciliation and status rows.';

-- Abandoning a delete blocked by a foreign object ----------------------------------

CREATE FUNCTION extsvc.abandon_service(service_id uuid) RETURNS extsvc.services
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s extsvc.service_records;
  h extsvc.service_state_history;
BEGIN
  -- FOR NO KEY UPDATE (issue 13): see _delete_service
  SELECT * INTO s FROM extsvc.service_records r WHERE r.service_id = abandon_service.service_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM extsvc._raise('P0002', 'service not found', format('service_id: %s', abandon_service.service_id),
                          'Check the service id.');
  END IF;
  SELECT * INTO h FROM extsvc.service_state_history x
   WHERE x.service_id = s.service_id AND x.to_state = 'FAILED' ORDER BY x.id DESC LIMIT 1;
  IF s.lifecycle_state <> 'FAILED' OR h.from_state IS DISTINCT FROM 'DELETING'
     OR h.reason IS DISTINCT FROM 'ownership_conflict' THEN
    PERFORM extsvc._raise_c('service_lifecycle_state', '55000', 'only a delete that FAILED on an ownership conflict can be abandoned',
                          format('service_id: %s, lifecycle_state: %s, last failure: %s', s.service_id, s.lifecycle_state,
                                 coalesce(h.from_state || ' -> FAILED (' || h.reason || ')', 'none')),
                          'Retry the delete with extsvc.retry_service, or fix the cause of the failure.');
  END IF;
  UPDATE extsvc.service_records r
     SET lifecycle_state = 'DELETED', state_actor = 'api', state_reason = 'abandoned',
         deleted_at = now(), updated_at = now(),
         status_message = format('delete abandoned by %s: the object named %s belongs to someone else and was left alone',
                                 session_user, s.dpf_service_name)
   WHERE r.service_id = s.service_id;
  UPDATE extsvc.service_versions v SET deleted_at = now()
   WHERE v.service_id = s.service_id AND v.deleted_at IS NULL;
  -- nothing left to do; a stale worker result fails its compare-and-swap
  UPDATE extsvc.dpf_extension_service_reconciliations q
     SET state_version = q.state_version + 1, next_due_at = NULL, attempts = 0,
         lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
   WHERE q.service_id = s.service_id;
  RETURN extsvc._service_row(s.service_id);
END
$fn$;
COMMENT ON FUNCTION extsvc.abandon_service(uuid) IS
  'Operator (extsvc_admin): a delete that FAILED because the object with the generated name belongs to someone else becomes DELETED (reason abandoned, recorded in the history with who did it); the foreign object is never touched. 55000 for any other state or failure, P0002 when unknown.';

-- Privileges ----------------------------------------------------------------------
REVOKE ALL ON FUNCTION
  extsvc.service_revisions(uuid, text),
  extsvc._revision_data(uuid, integer, text),
  extsvc._mark_rollback(uuid, integer),
  extsvc.rollback_service(uuid, integer, integer, text),
  extsvc._retry_service(uuid, text, boolean),
  extsvc._retry_service_as_admin(uuid, text),
  extsvc._retry_service_as_api(uuid, text),
  extsvc.retry_service(uuid, text),
  extsvc.purge_deleted(interval),
  extsvc.abandon_service(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.service_revisions(uuid, text),
  extsvc._revision_data(uuid, integer, text),
  extsvc._mark_rollback(uuid, integer),
  extsvc.rollback_service(uuid, integer, integer, text),
  extsvc._retry_service_as_api(uuid, text),
  extsvc.retry_service(uuid, text)
TO extsvc_api, extsvc_admin;
GRANT EXECUTE ON FUNCTION
  extsvc._retry_service_as_admin(uuid, text),
  extsvc.purge_deleted(interval),
  extsvc.abandon_service(uuid)
TO extsvc_admin;
GRANT SELECT ON extsvc.purged_services, extsvc.purged_service_history TO extsvc_admin;

-- ---- sql/parts/84_kp_rules.sql (definitions)
-- KUBERNETES_POD tombstones and the instance deletion probe (issue #14 P1-8,
-- P1-13). The DPU agent runs KUBERNETES_POD services; NICo learns from its
-- reports when a removed entry has terminated and confirms it here.

CREATE FUNCTION extsvc.remove_terminated_services(instance_id uuid, services jsonb,
                                                  tenant_organization_id text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  i extsvc.instances;
  e jsonb;
  n integer := 0;
  v_bad text;
  v_removed integer;
BEGIN
  PERFORM extsvc._require_instance(remove_terminated_services.instance_id,
                                   remove_terminated_services.tenant_organization_id);
  SELECT * INTO i FROM extsvc.instances x WHERE x.instance_id = remove_terminated_services.instance_id FOR UPDATE;
  IF services IS NULL OR jsonb_typeof(services) <> 'array' THEN
    PERFORM extsvc._raise('22023', 'services must be a JSON array of {service_id, version}', 'JSON path: $',
                          'Pass the removed KUBERNETES_POD entries the DPU agent reported terminated.');
  END IF;
  FOR e IN SELECT value FROM jsonb_array_elements(services) LOOP
    IF jsonb_typeof(e) <> 'object' OR EXISTS (SELECT FROM jsonb_object_keys(e) k WHERE k NOT IN ('service_id', 'version'))
       OR jsonb_typeof(e->'service_id') IS DISTINCT FROM 'string'
       OR (e->>'service_id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR jsonb_typeof(e->'version') IS DISTINCT FROM 'string' THEN
      PERFORM extsvc._raise('22023', 'each entry must be an object with a UUID service_id and a version string',
                            format('JSON path: $[%s]', n), 'Pass {"service_id": "...", "version": "V1-T..."}.');
    END IF;
    n := n + 1;
  END LOOP;
  -- only removed KUBERNETES_POD entries may go: an active one, or a DPF
  -- one (whose removal the worker observes), is refused
  SELECT string_agg(format('%s/%s (%s)', w.sid, w.ver,
                           CASE WHEN c.instance_id IS NULL THEN 'not configured'
                                WHEN sr.service_type <> 'KUBERNETES_POD' THEN 'DPF_HELM_CHART: removed by the worker'
                                ELSE 'still active' END), ', ')
    INTO v_bad
    FROM (SELECT (x->>'service_id')::uuid AS sid, x->>'version' AS ver FROM jsonb_array_elements(services) x) w
    LEFT JOIN extsvc.instance_extension_services c
      ON c.instance_id = i.instance_id AND c.service_id = w.sid AND c.version = w.ver
    LEFT JOIN extsvc.service_records sr ON sr.service_id = c.service_id
   WHERE c.instance_id IS NULL OR sr.service_type <> 'KUBERNETES_POD' OR c.removed_at IS NULL;
  IF v_bad IS NOT NULL THEN
    PERFORM extsvc._raise_c('entry_not_removed', '55000', 'only removed KUBERNETES_POD entries can be confirmed terminated',
                          format('instance_id: %s; entries: %s', i.instance_id, v_bad),
                          'Detach the entry first (extsvc.set_instance_extension_services) and confirm it once the DPU agent reports it terminated.');
  END IF;
  DELETE FROM extsvc.instance_extension_services c
   USING (SELECT (x->>'service_id')::uuid AS sid, x->>'version' AS ver FROM jsonb_array_elements(services) x) w
   WHERE c.instance_id = i.instance_id AND c.service_id = w.sid AND c.version = w.ver;
  GET DIAGNOSTICS v_removed = ROW_COUNT;
  -- no config_version bump (as in NICo); a deleted instance goes once empty
  PERFORM extsvc._cleanup_instance(i.instance_id);
  RETURN v_removed;
END
$fn$;
COMMENT ON FUNCTION extsvc.remove_terminated_services(uuid, jsonb, text) IS
  'NICo confirms that removed KUBERNETES_POD entries [{service_id, version}] terminated on the DPU: their tombstones go (no config_version bump), and an instance being deleted disappears once nothing remains. Returns the number removed. 22023 bad shape, 55000 for an active, unknown or DPF entry, P0002 unknown instance; with tenant_organization_id, 42501 for unknown and foreign alike.';

CREATE FUNCTION extsvc.instance_extension_services_terminated(instance_id uuid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT NOT EXISTS (SELECT FROM extsvc.instances i
                      WHERE i.instance_id = instance_extension_services_terminated.instance_id)
$fn$;
COMMENT ON FUNCTION extsvc.instance_extension_services_terminated(uuid) IS
  'Instance deletion probe: true once the instance is gone (its deletion finished: every DPF attachment observed TERMINATED and every KUBERNETES_POD entry confirmed with extsvc.remove_terminated_services), false while it exists. An id that never existed also answers true; there is no tenant argument, since false would confirm another tenant''s instance.';

-- Several KUBERNETES_POD versions at once (issue #14 P1-11), all or none:
-- NICo learns which versions had credentials so it can clean Vault after
-- the commit.
CREATE FUNCTION extsvc.delete_service_versions(service_id uuid, versions text[],
                                               tenant_organization_id text DEFAULT NULL)
RETURNS TABLE (version text, version_number integer, had_credential boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s extsvc.service_records;
  v_missing text;
  v text;
BEGIN
  s := extsvc._require_service(delete_service_versions.service_id, delete_service_versions.tenant_organization_id);
  IF s.service_type <> 'KUBERNETES_POD' THEN
    PERFORM extsvc._raise('22023', 'only KUBERNETES_POD services have several versions to delete',
                          format('service_id: %s, service_type: %s', s.service_id, s.service_type),
                          'Delete a DPF_HELM_CHART service with extsvc.delete_service(service_id).');
  END IF;
  IF delete_service_versions.versions IS NULL OR cardinality(delete_service_versions.versions) = 0 THEN
    PERFORM extsvc._raise('22023', 'versions must name at least one version', 'field: versions',
                          'Pass the version strings to delete, or use extsvc.delete_service(service_id) for all.');
  END IF;
  SELECT string_agg(w.v, ', ' ORDER BY w.o) INTO v_missing
    FROM unnest(delete_service_versions.versions) WITH ORDINALITY w(v, o)
   WHERE NOT EXISTS (SELECT FROM extsvc.service_versions x
                      WHERE x.service_id = s.service_id AND x.version = w.v AND x.deleted_at IS NULL);
  IF v_missing IS NOT NULL THEN
    PERFORM extsvc._raise('P0002', 'service version not found',
                          format('service_id: %s, versions: %s', s.service_id, v_missing),
                          'List the versions with extsvc.service_versions(service_id).');
  END IF;
  -- one version at a time through delete_service's body: the in-use rule,
  -- the history event, DELETED when the last one goes (a raise undoes all)
  FOR v IN SELECT DISTINCT u.v FROM unnest(delete_service_versions.versions) u(v) ORDER BY 1 LOOP
    PERFORM extsvc._delete_service(s.service_id, v, delete_service_versions.tenant_organization_id, false);
  END LOOP;
  RETURN QUERY
  SELECT x.version, x.version_number, x.has_credential FROM extsvc.service_versions x
   WHERE x.service_id = s.service_id AND x.version = ANY (delete_service_versions.versions)
   ORDER BY x.version_number;
END
$fn$;
COMMENT ON FUNCTION extsvc.delete_service_versions(uuid, text[], text) IS
  'Deletes several KUBERNETES_POD versions in one call, all or none, and returns them with had_credential so NICo can clean its secrets after the commit; the service is DELETED when no version is left, otherwise updated_at moves. P0002 unknown service or versions (named), 22023 DPF service or empty list, 55000 (service_in_use) when any is in use; with tenant_organization_id, 42501 for unknown and foreign alike.';

-- The DPU agent's feed keyed by host (issue #14 P1-9): hosts that are not
-- DPF-managed need no DPUDevice / Node names, so NICo never invents them.
CREATE FUNCTION extsvc.host_agent_extension_services(host_machine_id uuid)
RETURNS TABLE (instance_id uuid, service_id uuid, service_name text, version text, data text,
               has_credential boolean, observability jsonb, removed_at timestamptz,
               config_version integer, config_version_text text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT c.instance_id, c.service_id, s.service_name, c.version, v.data, v.has_credential, v.observability, c.removed_at,
         i.config_version, i.config_version_text
    FROM extsvc.instances i
    JOIN extsvc.instance_extension_services c ON c.instance_id = i.instance_id
    JOIN extsvc.service_records s ON s.service_id = c.service_id AND s.service_type = 'KUBERNETES_POD'
    JOIN extsvc.service_versions v ON v.service_id = c.service_id AND v.version = c.version
   WHERE i.host_machine_id = host_agent_extension_services.host_machine_id
   ORDER BY c.instance_id, s.service_name, c.version
$fn$;
COMMENT ON FUNCTION extsvc.host_agent_extension_services(uuid) IS
  'The DPU agent''s feed keyed by host: KUBERNETES_POD entries (including removed ones) of the host''s instances, with the instance''s config_version and its string; never DPF services. Needs no registered DPU (hosts without DPF have no DPUDevice or Node names); no rows for an unknown host.';

REVOKE ALL ON FUNCTION
  extsvc.delete_service_versions(uuid, text[], text),
  extsvc.host_agent_extension_services(uuid),
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  extsvc.delete_service_versions(uuid, text[], text),
  extsvc.host_agent_extension_services(uuid),
  extsvc.remove_terminated_services(uuid, jsonb, text),
  extsvc.instance_extension_services_terminated(uuid)
TO extsvc_api, extsvc_admin;

-- ---- sql/parts/90_metrics.sql (definitions)
-- Metrics (issue 12, SPEC 6, docs/metrics.md): extsvc.metrics() (and the view
-- of the same name) returns one row per sample, (metric, labels, value), with
-- Prometheus-style names prefixed extsvc_; extsvc.metrics_prometheus() renders
-- them in the Prometheus text exposition format (version 0.0.4).
--
-- Gauges about services, queues, attachments and DPUs are computed from the
-- tables at query time. Event counters of the workers (Kubernetes requests,
-- latency histogram, retries, restarts, resyncs) live in shared memory
-- (src/pg/metrics.cpp): they survive a worker restart and reset when shared
-- memory is reinitialised (server restart, crash restart). Without
-- shared_preload_libraries there is no shared memory: the worker part is the
-- single sample extsvc_worker_up 0 (no labels) and extsvc_workers_configured 0.
--
-- This file is self-contained (functions, view, grants, comments) so that the
-- 0.1.0 -> 0.2.0 upgrade script can include it as it is.

-- Worker counters from shared memory (owner only; read through extsvc.metrics()).
CREATE FUNCTION extsvc._worker_metrics(OUT metric text, OUT labels jsonb, OUT value double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'nico_extsvc_worker_metrics';
COMMENT ON FUNCTION extsvc._worker_metrics() IS
  'Internal: the workers'' event counters from shared memory as metric rows; extsvc_worker_up 0 without shared_preload_libraries. Read extsvc.metrics() instead.';

-- Every metric family: name, Prometheus type, help text (docs/metrics.md).
CREATE FUNCTION extsvc._metric_families(OUT family text, OUT type text, OUT help text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  VALUES
    ('extsvc_services', 'gauge', 'Extension services by service type and lifecycle state.'),
    ('extsvc_queue_due', 'gauge', 'Work rows due now and not leased, by queue (service: DPF services, dpu: per-DPU placement).'),
    ('extsvc_queue_leased', 'gauge', 'Work rows under a live worker lease, by queue.'),
    ('extsvc_queue_retrying', 'gauge', 'Work rows whose last pass failed and that wait for a retry (attempts > 0), by queue.'),
    ('extsvc_queue_oldest_due_age_seconds', 'gauge', 'Seconds since the oldest due, unleased row became due (0 when none is due), by queue.'),
    ('extsvc_placement_attachments', 'gauge', 'Per-DPU attachment rows by placement state and deployment state (UNKNOWN once the observation is older than extsvc.observation_max_age).'),
    ('extsvc_site_service_dpus', 'gauge', 'Per-DPU rows of ALL_DPUS services by deployment state (UNKNOWN once stale).'),
    ('extsvc_dpu_states', 'gauge', 'Registered DPUs by state: DEREGISTERED, else the worst deployment state of their rows (ERROR > UNKNOWN > PENDING > TERMINATING > RUNNING > TERMINATED), IDLE without rows.'),
    ('extsvc_kube_requests_total', 'counter', 'Kubernetes API requests by cluster, verb and HTTP code ("error": no HTTP response; "other": the series table was full).'),
    ('extsvc_kube_request_duration_seconds', 'histogram', 'Duration of Kubernetes API requests by cluster and verb.'),
    ('extsvc_retries_total', 'counter', 'Reconciliation passes that ended in a retry with backoff, by queue and reason.'),
    ('extsvc_resyncs_total', 'counter', 'Drift-detecting resyncs by result (failed: the snapshot or the LIST failed).'),
    ('extsvc_last_resync_age_seconds', 'gauge', 'Seconds since the last successful resync ended (absent before the first one).'),
    ('extsvc_last_resync_duration_seconds', 'gauge', 'Duration of the last successful resync in seconds.'),
    ('extsvc_orphans_deleted_total', 'counter', 'DPUServices with our ownership label and no live service version deleted by the resync.'),
    ('extsvc_dpus_rederived_total', 'counter', 'DPUs made due by the resync so that their labels are derived again.'),
    ('extsvc_wakes_requested_total', 'counter', 'Commits that asked the workers to wake up.'),
    ('extsvc_workers_configured', 'gauge', 'Configured background workers (extsvc.workers); 0 without shared_preload_libraries.'),
    ('extsvc_worker_up', 'gauge', '1 while a worker process runs in the slot; a single unlabelled 0 without shared_preload_libraries.'),
    ('extsvc_worker_restarts_total', 'counter', 'Worker process starts in the slot after the first one since shared memory was initialised.'),
    ('extsvc_worker_last_iteration_age_seconds', 'gauge', 'Seconds since the worker last started a loop iteration (it sleeps at most 10 s when enabled and configured, 60 s otherwise).'),
    ('extsvc_worker_iterations_total', 'counter', 'Worker loop iterations.'),
    ('extsvc_worker_claimed_total', 'counter', 'Rows (services and DPUs) claimed by the worker.'),
    ('extsvc_worker_completed_total', 'counter', 'Claimed rows whose outcome was recorded.'),
    ('extsvc_worker_stale_results_total', 'counter', 'Outcomes discarded by compare-and-swap (intent changed or lease lost meanwhile).'),
    ('extsvc_lease_fenced_total', 'counter', 'Passes stopped by the lease fence before a Kubernetes call, and rows skipped because their lease was taken over.'),
    ('extsvc_lease_renewals_total', 'counter', 'Lease renewals (one UPDATE each).'),
    ('extsvc_leases_released_total', 'counter', 'Leases of the slot''s previous process freed when the worker started.'),
    ('extsvc_watch_wakes_total', 'counter', 'DPU rows made due by watch events (the watcher, extsvc.watch on).'),
    ('extsvc_watch_synced', 'gauge', '1 once the informer listed since the watcher started (extsvc.watch_status()).'),
    ('extsvc_watch_current', 'gauge', '1 while the informer''s watch stream is open: its cache is the server''s state.'),
    ('extsvc_watch_objects', 'gauge', 'Objects in the informer''s cache.'),
    ('extsvc_watch_events_total', 'counter', 'Watch events (ADDED, MODIFIED, DELETED) the informer received since the watcher started.'),
    ('extsvc_watch_lists_total', 'counter', 'Completed LISTs of the informer since the watcher started (the first, after 410 Gone, the resync''s).'),
    ('extsvc_watch_expired_total', 'counter', '410 Gone answers (an expired resourceVersion or continue token) since the watcher started.'),
    ('extsvc_watch_errors_total', 'counter', 'Failed LISTs and broken watch streams of the informer since the watcher started.'),
    ('extsvc_watch_current_age_seconds', 'gauge', 'Seconds since the informer''s cache was last known current (0 while its stream is open).')
$fn$;
COMMENT ON FUNCTION extsvc._metric_families() IS
  'Internal: name, Prometheus type and help text of every metric family of extsvc.metrics().';

CREATE FUNCTION extsvc.metrics()
RETURNS TABLE (metric text, labels jsonb, value double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH
  svc_n AS (
    SELECT s.service_type, s.lifecycle_state, count(*) AS n FROM extsvc.service_records s GROUP BY 1, 2),
  svc AS (
    SELECT 'extsvc_services'::text AS metric, jsonb_build_object('type', t.type, 'state', st.state) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['DPF_HELM_CHART', 'KUBERNETES_POD']) t(type)
     CROSS JOIN unnest(ARRAY['CREATING', 'READY', 'UPDATING', 'DELETING', 'DELETED', 'FAILED']) st(state)
      LEFT JOIN svc_n n ON n.service_type = t.type AND n.lifecycle_state = st.state),
  q_rows AS (
    SELECT 'service'::text AS queue, r.next_due_at, r.lease_expires_at, r.attempts
      FROM extsvc.dpf_extension_service_reconciliations r
    UNION ALL
    SELECT 'dpu', d.next_due_at, d.lease_expires_at, d.attempts
      FROM extsvc.dpu_reconciliations d),
  q_n AS (
    SELECT r.queue,
           count(*) FILTER (WHERE r.next_due_at <= now()
                              AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())) AS due,
           count(*) FILTER (WHERE r.lease_expires_at >= now()) AS leased,
           count(*) FILTER (WHERE r.attempts > 0) AS retrying,
           extract(epoch FROM now() - min(r.next_due_at) FILTER (
                     WHERE r.next_due_at <= now()
                       AND (r.lease_expires_at IS NULL OR r.lease_expires_at < now())))::double precision AS oldest
      FROM q_rows r
     GROUP BY 1),
  q AS (
    SELECT n.queue, coalesce(x.due, 0)::double precision AS due, coalesce(x.leased, 0)::double precision AS leased,
           coalesce(x.retrying, 0)::double precision AS retrying, coalesce(x.oldest, 0) AS oldest
      FROM unnest(ARRAY['service', 'dpu']) n(queue)
      LEFT JOIN q_n x ON x.queue = n.queue),
  att_n AS (
    SELECT a.placement_state AS p, extsvc._effective_deployment_state(a.deployment_state, a.observed_at) AS s,
           count(*) AS n
      FROM extsvc.dpf_extension_service_attachments a
     GROUP BY 1, 2),
  att AS (
    SELECT 'extsvc_placement_attachments'::text AS metric,
           jsonb_build_object('placement_state', p.s, 'deployment_state', ds.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['ACTIVE', 'REMOVING']) p(s)
     CROSS JOIN unnest(ARRAY['PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN']) ds(s)
      LEFT JOIN att_n n ON n.p = p.s AND n.s = ds.s),
  site_n AS (
    SELECT extsvc._effective_deployment_state(x.deployment_state, x.observed_at) AS s, count(*) AS n
      FROM extsvc.site_service_dpu_status x
     GROUP BY 1),
  site AS (
    SELECT 'extsvc_site_service_dpus'::text AS metric, jsonb_build_object('deployment_state', ds.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['PENDING', 'RUNNING', 'TERMINATING', 'TERMINATED', 'ERROR', 'UNKNOWN']) ds(s)
      LEFT JOIN site_n n ON n.s = ds.s),
  -- a DPU's state: the worst of its rows, by this precedence
  dpu_worst AS (
    SELECT r.dpu_machine_id,
           min(array_position(ARRAY['ERROR', 'UNKNOWN', 'PENDING', 'TERMINATING', 'RUNNING', 'TERMINATED'],
                              extsvc._effective_deployment_state(r.deployment_state, r.observed_at))) AS rank
      FROM (SELECT a.dpu_machine_id, a.deployment_state, a.observed_at
              FROM extsvc.dpf_extension_service_attachments a
            UNION ALL
            SELECT x.dpu_machine_id, x.deployment_state, x.observed_at
              FROM extsvc.site_service_dpu_status x) r
     GROUP BY 1),
  dpu_n AS (
    SELECT CASE WHEN d.deregistered_at IS NOT NULL THEN 'DEREGISTERED'
                ELSE coalesce((ARRAY['ERROR', 'UNKNOWN', 'PENDING', 'TERMINATING', 'RUNNING',
                                     'TERMINATED'])[w.rank], 'IDLE') END AS s,
           count(*) AS n
      FROM extsvc.dpus d
      LEFT JOIN dpu_worst w ON w.dpu_machine_id = d.machine_id
     GROUP BY 1),
  dpus AS (
    SELECT 'extsvc_dpu_states'::text AS metric, jsonb_build_object('state', st.s) AS labels,
           coalesce(n.n, 0)::double precision AS value
      FROM unnest(ARRAY['ERROR', 'UNKNOWN', 'PENDING', 'TERMINATING', 'RUNNING', 'TERMINATED', 'IDLE',
                        'DEREGISTERED']) st(s)
      LEFT JOIN dpu_n n ON n.s = st.s)
  SELECT * FROM (
    SELECT * FROM svc
    UNION ALL SELECT 'extsvc_queue_due', jsonb_build_object('queue', queue), due FROM q
    UNION ALL SELECT 'extsvc_queue_leased', jsonb_build_object('queue', queue), leased FROM q
    UNION ALL SELECT 'extsvc_queue_retrying', jsonb_build_object('queue', queue), retrying FROM q
    UNION ALL SELECT 'extsvc_queue_oldest_due_age_seconds', jsonb_build_object('queue', queue), oldest FROM q
    UNION ALL SELECT * FROM att
    UNION ALL SELECT * FROM site
    UNION ALL SELECT * FROM dpus
    UNION ALL SELECT w.metric, w.labels, w.value FROM extsvc._worker_metrics() w
  ) m
  ORDER BY 1, 2
$fn$;
COMMENT ON FUNCTION extsvc.metrics() IS
  'Monitoring: one row per metric sample (metric, labels, value), Prometheus-style names prefixed extsvc_ (docs/metrics.md). Gauges are computed from the tables now; worker counters come from shared memory and reset at a server restart.';

CREATE VIEW extsvc.metrics AS SELECT m.metric, m.labels, m.value FROM extsvc.metrics() m;
COMMENT ON VIEW extsvc.metrics IS
  'Monitoring: the rows of extsvc.metrics() (SPEC 6 names both); readers need EXECUTE on the function too.';

-- One sample line of the text format: name{k="v",...} value, label values
-- escaped (\\, \", \n), le last, +Inf/-Inf/NaN, integers without exponent.
CREATE FUNCTION extsvc._prometheus_line(metric text, labels jsonb, value double precision) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT _prometheus_line.metric
         || CASE WHEN _prometheus_line.labels IS NULL OR _prometheus_line.labels = '{}'::jsonb THEN ''
                 ELSE '{' || (SELECT string_agg(format('%s="%s"', l.key,
                                                      replace(replace(replace(l.value, '\', '\\'), '"', '\"'),
                                                              E'\n', '\n')),
                                                ',' ORDER BY l.key = 'le', l.key)
                                FROM jsonb_each_text(_prometheus_line.labels) l) || '}' END
         || ' '
         || CASE WHEN _prometheus_line.value = 'Infinity'::double precision THEN '+Inf'
                 WHEN _prometheus_line.value = '-Infinity'::double precision THEN '-Inf'
                 WHEN _prometheus_line.value = 'NaN'::double precision THEN 'NaN'
                 WHEN _prometheus_line.value = trunc(_prometheus_line.value) AND abs(_prometheus_line.value) < 1e15
                   THEN trunc(_prometheus_line.value)::bigint::text
                 ELSE _prometheus_line.value::text END
$fn$;
COMMENT ON FUNCTION extsvc._prometheus_line(text, jsonb, double precision) IS
  'Internal: one sample line of the Prometheus text format (escaped label values, le last, +Inf/-Inf/NaN).';

-- Prometheus text exposition format 0.0.4: # HELP and # TYPE per family,
-- label values escaped (\\, \", \n), +Inf/-Inf/NaN spelled the Prometheus way,
-- a histogram's _bucket (le last, ascending, +Inf included), _sum and _count.
CREATE FUNCTION extsvc.metrics_prometheus() RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  WITH
  fam AS (SELECT f.family, f.type, f.help FROM extsvc._metric_families() f),
  samples AS (
    SELECT m.metric, m.labels, m.value,
           coalesce(f.family, m.metric) AS family, coalesce(f.type, 'untyped') AS type,
           coalesce(f.help, m.metric) AS help,
           CASE WHEN m.metric LIKE '%\_bucket' THEN 0 WHEN m.metric LIKE '%\_sum' THEN 1
                WHEN m.metric LIKE '%\_count' THEN 2 ELSE 0 END AS part,
           CASE WHEN m.labels ? 'le' THEN
                  CASE WHEN m.labels->>'le' = '+Inf' THEN 'Infinity'::double precision
                       ELSE (m.labels->>'le')::double precision END END AS le
      FROM extsvc.metrics() m
      LEFT JOIN fam f ON f.family = m.metric
                      OR (f.type = 'histogram' AND m.metric IN (f.family || '_bucket', f.family || '_sum',
                                                                 f.family || '_count'))),
  lines AS (
    SELECT s.family, s.type, s.help, extsvc._prometheus_line(s.metric, s.labels, s.value) AS line,
           s.labels - 'le' AS series, s.part, s.le, s.labels
      FROM samples s),
  blocks AS (
    SELECT family,
           format(E'# HELP %s %s\n# TYPE %s %s\n', family,
                  replace(replace(min(help), '\', '\\'), E'\n', '\n'), family, min(type))
             || string_agg(line || E'\n', '' ORDER BY series, part, le, labels) AS block
      FROM lines
     GROUP BY family)
  SELECT coalesce(string_agg(block, '' ORDER BY family), '') FROM blocks
$fn$;
COMMENT ON FUNCTION extsvc.metrics_prometheus() IS
  'Monitoring: extsvc.metrics() in the Prometheus text exposition format (version 0.0.4), for a scrape endpoint or a textfile collector.';

REVOKE ALL ON FUNCTION extsvc._worker_metrics(), extsvc._metric_families(),
                       extsvc._prometheus_line(text, jsonb, double precision), extsvc.metrics(),
                       extsvc.metrics_prometheus() FROM PUBLIC;
REVOKE ALL ON extsvc.metrics FROM PUBLIC;
-- Readers of the metrics: NICo's role, operators, and PostgreSQL's predefined
-- monitoring role (postgres_exporter usually runs as a pg_monitor member).
-- The samples are aggregates: no tenant, service or instance id is a label.
GRANT USAGE ON SCHEMA extsvc TO pg_monitor;
GRANT EXECUTE ON FUNCTION extsvc.metrics(), extsvc.metrics_prometheus() TO extsvc_api, extsvc_admin, pg_monitor;
GRANT SELECT ON extsvc.metrics TO extsvc_api, extsvc_admin, pg_monitor;
-- A read-only role extsvc_reader, where the installation has one, reads them too.
DO $grant$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'extsvc_reader') THEN
    GRANT USAGE ON SCHEMA extsvc TO extsvc_reader;
    GRANT EXECUTE ON FUNCTION extsvc.metrics(), extsvc.metrics_prometheus() TO extsvc_reader;
    GRANT SELECT ON extsvc.metrics TO extsvc_reader;
  END IF;
END
$grant$;

-- ---- sql/parts/90_privileges.sql (definitions)
-- Privileges: nothing for PUBLIC; the API for extsvc_api and extsvc_admin;
-- operator functions for extsvc_admin; worker functions for the owner only.
REVOKE ALL ON ALL TABLES IN SCHEMA extsvc FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA extsvc FROM PUBLIC;

GRANT SELECT ON extsvc.services TO extsvc_api, extsvc_admin;
GRANT SELECT ON extsvc.reconciliation_queue, extsvc.service_history, extsvc.lifecycle_transitions,
                extsvc.placement_transitions, extsvc.dpu_state_history,
                extsvc.chart_allowlist, extsvc.dpu_placement, extsvc.dpu_desired_labels
  TO extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.create_service(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc.update_service(uuid, text, text, text, integer, boolean, jsonb, text),
  extsvc.delete_service(uuid, text, text),
  extsvc.validate_dpf_helm_chart_data(text),
  extsvc.render_dpuservice(uuid),
  extsvc.dpf_service_name(uuid, text),
  extsvc.placement_label_key(uuid, text),
  extsvc.allow_chart(text, text),
  extsvc.disallow_chart(text, text),
  extsvc.register_dpu(uuid, uuid, text, text, boolean),
  extsvc.deregister_dpu(uuid),
  extsvc.upsert_instance(uuid, text, uuid, uuid[], boolean),
  extsvc.set_instance_extension_services(uuid, jsonb, integer, text),
  extsvc.delete_instance(uuid, text),
  extsvc.instance_extension_service_status(uuid, text),
  extsvc.instance_extension_services_summary(uuid, text),
  extsvc.instance_extension_services_ready(uuid, text),
  extsvc.instance_dpu_state_history(uuid, text),
  extsvc.dpu_agent_extension_services(uuid),
  -- the non-admin gates of the role-dependent SECURITY INVOKER entries
  extsvc._create_service_as_api(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc._update_service_as_api(uuid, text, text, text, integer, boolean, jsonb, text),
  extsvc._delete_service_as_api(uuid, text, text)
TO extsvc_api, extsvc_admin;

-- The admin gates: PostgreSQL's EXECUTE check on these (made as the calling
-- role, SET ROLE included) is what grants admin rights.
GRANT EXECUTE ON FUNCTION
  extsvc._create_service_as_admin(text, text, text, text, text, text, text, uuid, boolean, jsonb),
  extsvc._update_service_as_admin(uuid, text, text, text, integer, boolean, jsonb, text),
  extsvc._delete_service_as_admin(uuid, text, text),
  extsvc._allow_chart_as_admin(text, text),
  extsvc._disallow_chart_as_admin(text, text)
TO extsvc_admin;

GRANT EXECUTE ON FUNCTION
  extsvc.reconcile_now(uuid),
  extsvc.worker_status(),
  extsvc.watch_status(),
  extsvc.request_resync(),
  extsvc.expire_stale_observations(),
  extsvc.repo_url_matches(text, text),
  extsvc.dpuservice_mutable_patch(jsonb, jsonb),
  extsvc.dpuservice_identity_mismatch(jsonb, uuid, text, text)
TO extsvc_admin;

-- ---- sql/parts/95_comments.sql (definitions)
-- Descriptions of the tables and internal functions that have none next to
-- their definition (psql's \d+ and \df+ show them; regress/pgtap/schema.sql
-- checks that every table, view and function of the schema has one).

COMMENT ON TABLE extsvc.chart_allowlist IS
  'Chart repositories (and optionally chart names) that DPF_HELM_CHART services may use while extsvc.enforce_chart_allowlist is on; maintained with allow_chart/disallow_chart.';
COMMENT ON TABLE extsvc.service_versions IS
  'Every version of every service (NICo''s version string and number); KUBERNETES_POD definitions live here, DPF_HELM_CHART definitions in helm_revisions.';
COMMENT ON TABLE extsvc.helm_revisions IS
  'Every Helm definition of a DPF_HELM_CHART service, normalized; desired and applied revisions of service_records point here.';
COMMENT ON TABLE extsvc.service_state_history IS
  'Every lifecycle transition and same-state event of every service, checked against lifecycle_transitions; read through the service_history view.';
COMMENT ON TABLE extsvc.dpf_extension_service_reconciliations IS
  'The service queue: one row per DPF_HELM_CHART service with its due time, lease and attempts, claimed by the workers with FOR UPDATE SKIP LOCKED.';
COMMENT ON TABLE extsvc.dpus IS
  'DPU registry (SPEC 2.7): each DPU with its host, DPUDevice and DPU-cluster node name; registered and deregistered by NICo.';
COMMENT ON TABLE extsvc.instances IS
  'Instances (SPEC 2.7) with their network DPUs, dpf_managed flag and NICo config version.';
COMMENT ON TABLE extsvc.instance_extension_services IS
  'An instance''s configured extension services, with tombstones (removed_at) kept until the removal is confirmed.';
COMMENT ON TABLE extsvc.dpf_extension_service_attachments IS
  'Per-DPU placement of an instance''s DPF service (ACTIVE or REMOVING) with the observed deployment state; transitions follow placement_transitions.';
COMMENT ON TABLE extsvc.dpu_reconciliations IS
  'The placement queue: one row per DPU with its due time, lease and last observation, claimed by the workers to set labels and observe pods.';
COMMENT ON TABLE extsvc.site_service_dpu_status IS
  'Per-DPU observed state of ALL_DPUS (site-wide) services, which have no attachments; read with site_service_status.';

COMMENT ON FUNCTION extsvc._aggregate_state IS
  'Internal: aggregates per-DPU deployment states with the precedence of SPEC 2.8.';
COMMENT ON FUNCTION extsvc._attachment_changed IS
  'Internal trigger: wakes the DPUs whose desired labels an attachment change alters.';
COMMENT ON FUNCTION extsvc._backoff IS
  'Internal: the retry delay after a failed attempt (exponential from extsvc.retry_base up to extsvc.retry_cap, never shorter than a clamped Retry-After).';
COMMENT ON FUNCTION extsvc._blocking_instances IS
  'Internal: instances whose configuration or attachments still reference a service.';
COMMENT ON FUNCTION extsvc._check_chart_allowed IS
  'Internal: refuses a chart that is not on the allow-list while enforcement is on.';
COMMENT ON FUNCTION extsvc._check_instance_tenant IS
  'Internal: refuses (42501, without revealing existence) an instance of another tenant when a tenant is given.';
COMMENT ON FUNCTION extsvc._check_lifecycle_transition IS
  'Internal trigger: refuses any lifecycle change not in lifecycle_transitions.';
COMMENT ON FUNCTION extsvc._check_name_free IS
  'Internal: refuses a display name that a live service of the tenant already uses.';
COMMENT ON FUNCTION extsvc._check_service_tenant IS
  'Internal: refuses (42501, without revealing existence) a service of another tenant when a tenant is given.';
COMMENT ON FUNCTION extsvc._cleanup_instance IS
  'Internal: removes converged REMOVING rows, then tombstones without rows, then deleted instances without entries.';
COMMENT ON FUNCTION extsvc._config_version IS
  'Internal: NICo''s ConfigVersion string V<n>-T<micros> of version number n, stamped with the transaction time.';
COMMENT ON FUNCTION extsvc._dpf_service_name IS
  'Internal (C): the generated DPUService name of a service (SPEC 2.2).';
COMMENT ON FUNCTION extsvc._intent_changed IS
  'Internal: marks a DPF service''s queue row as having new intent and due now.';
COMMENT ON FUNCTION extsvc._materialize_instance IS
  'Internal: writes an instance''s per-DPU attachment rows from its configuration and target resolution.';
COMMENT ON FUNCTION extsvc._namespace IS
  'Internal: the namespace of the DPUService objects (extsvc.namespace).';
COMMENT ON FUNCTION extsvc._placement_label_key IS
  'Internal (C): the generated nico/extsvc-* node label key of a service (SPEC 2.2).';
COMMENT ON FUNCTION extsvc._raise IS
  'Internal: raises an error with SQLSTATE, one-line message, DETAIL and HINT.';
COMMENT ON FUNCTION extsvc._record_event IS
  'Internal: records a same-state event (supersede, drift repair, Pod version) after checking it against lifecycle_transitions.';
COMMENT ON FUNCTION extsvc._record_lifecycle_transition IS
  'Internal trigger: records every allowed lifecycle change in service_state_history.';
COMMENT ON FUNCTION extsvc._render_dpuservice IS
  'Internal (C): renders the DPUService object of a service revision; render_dpuservice is the operator''s entry.';
COMMENT ON FUNCTION extsvc._resolve_targets IS
  'Internal: resolves an attachment''s DPU targets (SPEC 2.4); NULL when unresolvable, never an invented empty set.';
COMMENT ON FUNCTION extsvc._service_row IS
  'Internal: the services-view row of one service, for return values.';
COMMENT ON FUNCTION extsvc._service_state_wakes_dpus IS
  'Internal trigger: a DPF service''s lifecycle change makes its DPUs due for observation.';
COMMENT ON FUNCTION extsvc._site_service_cleared IS
  'Internal: true once every registered DPU was observed without an ALL_DPUS service''s label and pods after its delete was requested.';
COMMENT ON FUNCTION extsvc._site_service_wanted IS
  'Internal: whether an ALL_DPUS service is wanted on every registered DPU (accepted by DPF and not being deleted).';
COMMENT ON FUNCTION extsvc._tenant_denied IS
  'Internal: the tenant refusal (42501) that does not reveal whether the row exists.';
COMMENT ON FUNCTION extsvc._touch_dpu IS
  'Internal: makes a DPU''s placement work due now.';
COMMENT ON FUNCTION extsvc._validate_helm_chart_data IS
  'Internal (C): validates and normalizes DPF_HELM_CHART data; validate_dpf_helm_chart_data is the public entry.';
COMMENT ON FUNCTION extsvc._wake IS
  'Internal (C): wakes the workers when the transaction commits.';
COMMENT ON FUNCTION extsvc.mark_dpus_due IS
  'Worker: makes every DPU due for observation (the resync of placement).';
COMMENT ON FUNCTION extsvc.mark_drift IS
  'Worker: makes a READY service due now because its DPUService drifted.';
COMMENT ON FUNCTION extsvc.resync_snapshot IS
  'Worker: every READY DPF service with its work object (as claim returns it), for the drift detector.';
COMMENT ON FUNCTION extsvc._worker_queues IS
  'Internal: the worker queues by name (service, dpu) with their table, key column, work, completion and claim functions.';
COMMENT ON FUNCTION extsvc._claim_service IS
  'Internal: leases due rows of the service queue for extsvc.claim(''service'', ...): one static statement over the _claimable index.';
COMMENT ON FUNCTION extsvc._claim_dpu IS
  'Internal: leases due rows of the DPU queue for extsvc.claim(''dpu'', ...): one static statement over the _claimable index.';
COMMENT ON FUNCTION extsvc._worker_queue IS
  'Internal: one worker queue of _worker_queues by name; 22023 for an unknown one.';
COMMENT ON FUNCTION extsvc._service_work IS
  'Internal: the work object of a claimed DPF service (wire schema, docs/worker.md).';
COMMENT ON FUNCTION extsvc._dpu_work IS
  'Internal: the work object of a claimed DPU (wire schema, docs/worker.md).';
COMMENT ON FUNCTION extsvc._complete_service IS
  'Internal: applies a service outcome after complete''s compare-and-swap.';
COMMENT ON FUNCTION extsvc._complete_dpu IS
  'Internal: applies a DPU outcome (per-DPU states, convergence, next due time) after complete''s compare-and-swap.';
