-- Schema contract: tables, keys, indexes, foreign keys, the services view
-- (SPEC 2.10) and the roles.
BEGIN;
\ir helpers.psql
SELECT plan(76);

SELECT has_schema('extsvc');
SELECT has_extension('nico_extsvc');

-- tables
SELECT has_table('extsvc', t, 'table extsvc.' || t || ' exists')
  FROM unnest(ARRAY['service_records', 'service_versions', 'helm_revisions', 'lifecycle_transitions',
                    'service_state_history', 'dpf_extension_service_reconciliations', 'chart_allowlist',
                    'dpus', 'instances', 'instance_extension_services',
                    'dpf_extension_service_attachments']) t;
SELECT has_view('extsvc', v, 'view extsvc.' || v || ' exists')
  FROM unnest(ARRAY['services', 'reconciliation_queue', 'service_history']) v;

-- primary keys
SELECT col_is_pk('extsvc', 'service_records', ARRAY['service_id'], 'service_records PK');
SELECT col_is_pk('extsvc', 'service_versions', ARRAY['service_id', 'version'], 'service_versions PK');
SELECT col_is_pk('extsvc', 'helm_revisions', ARRAY['service_id', 'revision'], 'helm_revisions PK');
SELECT col_is_pk('extsvc', 'service_state_history', ARRAY['id'], 'service_state_history PK');
SELECT col_is_pk('extsvc', 'dpf_extension_service_reconciliations', ARRAY['service_id'], 'one reconciliation row per service');
SELECT col_is_pk('extsvc', 'chart_allowlist', ARRAY['repo_url', 'chart_name'], 'chart_allowlist PK');
SELECT col_is_pk('extsvc', 'dpus', ARRAY['machine_id'], 'dpus PK');
SELECT col_is_pk('extsvc', 'instances', ARRAY['instance_id'], 'instances PK');
SELECT col_is_pk('extsvc', 'instance_extension_services', ARRAY['instance_id', 'service_id', 'version'],
                 'instance_extension_services PK');
SELECT col_is_pk('extsvc', 'dpf_extension_service_attachments',
                 ARRAY['instance_id', 'dpu_machine_id', 'service_id', 'version'],
                 'attachments PK over (instance, DPU, service, version) (SPEC 2.7)');
SELECT hasnt_pk('extsvc', 'lifecycle_transitions', 'lifecycle_transitions has no PK (from_state may be NULL)');

-- unique and partial indexes
SELECT col_is_unique('extsvc', 'service_records', ARRAY['dpf_service_name'], 'dpf_service_name is UNIQUE (SPEC 2.2)');
SELECT col_is_unique('extsvc', 'service_records', ARRAY['placement_label_key'], 'placement_label_key is UNIQUE');
SELECT col_is_unique('extsvc', 'service_versions', ARRAY['service_id', 'version_number'], 'version numbers unique per service');
SELECT has_index('extsvc', 'service_records', 'service_records_tenant_name_key', 'display-name index exists');
SELECT index_is_unique('extsvc', 'service_records', 'service_records_tenant_name_key', 'display-name index is unique');
SELECT is(pg_get_indexdef('extsvc.service_records_tenant_name_key'::regclass),
          'CREATE UNIQUE INDEX service_records_tenant_name_key ON extsvc.service_records USING btree (tenant_organization_id, lower(service_name)) WHERE ((lifecycle_state)::text <> ''DELETED''::text)',
          'display name unique per tenant, case-insensitively, while not DELETED');
SELECT has_index('extsvc', 'dpus', 'dpus_one_primary_per_host', 'one-primary index exists');
SELECT ok((SELECT indisunique AND indpred IS NOT NULL FROM pg_index
            WHERE indexrelid = 'extsvc.dpus_one_primary_per_host'::regclass),
          'at most one primary DPU per host (unique partial index)');
SELECT col_is_unique('extsvc', 'dpus', ARRAY['dpu_device_name'], 'DPUDevice names unique');
SELECT col_is_unique('extsvc', 'dpus', ARRAY['dpu_node_name'], 'DPU Node names unique');
-- the worker's queue lookups (issue 11; docs/worker.md, "The queue's indexes")
SELECT is(ARRAY(SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
                 WHERE i.indrelid = 'extsvc.dpf_extension_service_reconciliations'::regclass AND NOT i.indisprimary
                 ORDER BY 1),
          ARRAY['CREATE INDEX dpf_extension_service_reconciliations_claimable ON extsvc.dpf_extension_service_reconciliations USING btree (GREATEST(next_due_at, lease_expires_at)) WHERE (next_due_at IS NOT NULL)',
                'CREATE INDEX dpf_extension_service_reconciliations_lease ON extsvc.dpf_extension_service_reconciliations USING btree (lease_owner, lease_token) WHERE (lease_owner IS NOT NULL)'],
          'service queue: rows with work in claimable order (greatest of next_due_at and the lease expiry), leases by owner and token');
SELECT is(ARRAY(SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
                 WHERE i.indrelid = 'extsvc.dpu_reconciliations'::regclass AND NOT i.indisprimary
                 ORDER BY 1),
          ARRAY['CREATE INDEX dpu_reconciliations_claimable ON extsvc.dpu_reconciliations USING btree (GREATEST(next_due_at, lease_expires_at)) WHERE (next_due_at IS NOT NULL)',
                'CREATE INDEX dpu_reconciliations_lease ON extsvc.dpu_reconciliations USING btree (lease_owner, lease_token) WHERE (lease_owner IS NOT NULL)'],
          'DPU queue: the same two indexes');
SELECT is(pg_get_indexdef('extsvc.service_records_site_wide'::regclass),
          'CREATE INDEX service_records_site_wide ON extsvc.service_records USING btree (service_id) WHERE (deployment_scope = ''ALL_DPUS''::text)',
          'site-wide services are found without reading every service (each DPU''s work lists them)');
SELECT is_indexed('extsvc', 'dpf_extension_service_attachments', ARRAY['service_id'], 'attachments by service indexed');
SELECT is_indexed('extsvc', 'dpf_extension_service_attachments', ARRAY['dpu_machine_id'], 'attachments by DPU indexed');
SELECT is_indexed('extsvc', 'instance_extension_services', ARRAY['service_id'], 'instance configs by service indexed');
SELECT ok(EXISTS (SELECT FROM pg_constraint WHERE conrelid = 'extsvc.lifecycle_transitions'::regclass
                   AND contype = 'u' AND pg_get_constraintdef(oid) LIKE 'UNIQUE NULLS NOT DISTINCT (from_state, to_state, actor, reason)'),
          'transitions unique over (from, to, actor, reason), NULL creation rows included');

-- foreign keys
SELECT fk_ok('extsvc', 'service_versions', ARRAY['service_id'], 'extsvc', 'service_records', ARRAY['service_id']);
SELECT fk_ok('extsvc', 'helm_revisions', ARRAY['service_id'], 'extsvc', 'service_records', ARRAY['service_id']);
SELECT fk_ok('extsvc', 'service_state_history', ARRAY['service_id'], 'extsvc', 'service_records', ARRAY['service_id']);
SELECT fk_ok('extsvc', 'dpf_extension_service_reconciliations', ARRAY['service_id'], 'extsvc', 'service_records', ARRAY['service_id']);
-- a service's pointers at its own revisions and version: constraint triggers (issue 27: as
-- foreign keys they made the tables circular; regress/pgtap/restore.sql checks what they refuse)
SELECT trigger_is('extsvc', 'service_records', 'service_pointers_exist', 'extsvc', '_check_service_pointers');
SELECT trigger_is('extsvc', 'helm_revisions', 'helm_revision_pointed_at', 'extsvc', '_check_pointed_at');
SELECT trigger_is('extsvc', 'service_versions', 'service_version_pointed_at', 'extsvc', '_check_pointed_at');
SELECT fk_ok('extsvc', 'instance_extension_services', ARRAY['instance_id'], 'extsvc', 'instances', ARRAY['instance_id']);
SELECT fk_ok('extsvc', 'instance_extension_services', ARRAY['service_id', 'version'], 'extsvc', 'service_versions', ARRAY['service_id', 'version']);
SELECT fk_ok('extsvc', 'dpf_extension_service_attachments', ARRAY['instance_id'], 'extsvc', 'instances', ARRAY['instance_id']);
SELECT fk_ok('extsvc', 'dpf_extension_service_attachments', ARRAY['dpu_machine_id'], 'extsvc', 'dpus', ARRAY['machine_id']);
SELECT fk_ok('extsvc', 'dpf_extension_service_attachments', ARRAY['service_id', 'version'], 'extsvc', 'service_versions', ARRAY['service_id', 'version']);

-- the services view: exactly these leading columns, in this order (SPEC 2.10)
SELECT is((SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
            WHERE attrelid = 'extsvc.services'::regclass AND attnum BETWEEN 1 AND 18),
          ARRAY['service_id', 'tenant_organization_id', 'service_name', 'description', 'service_type',
                'deployment_scope', 'dpu_target', 'lifecycle_state', 'version', 'version_ctr',
                'desired_revision', 'applied_revision', 'dpf_service_name', 'placement_label_key',
                'status_message', 'created_at', 'updated_at', 'deleted_at'],
          'extsvc.services leading columns in contract order');
SELECT col_type_is('extsvc', 'services', 'service_id', 'uuid', 'services.service_id is uuid');
SELECT col_type_is('extsvc', 'services', 'version_ctr', 'integer', 'services.version_ctr is integer');
SELECT col_type_is('extsvc', 'services', 'created_at', 'timestamp with time zone', 'services.created_at is timestamptz');

-- lifecycle vocabulary and the transition trigger
SELECT is((SELECT array_agg(DISTINCT s::text ORDER BY s::text) FROM extsvc.lifecycle_transitions t,
                  LATERAL (VALUES (t.from_state), (t.to_state)) v(s) WHERE s IS NOT NULL),
          ARRAY['CREATING', 'DELETED', 'DELETING', 'FAILED', 'READY', 'UPDATING'],
          'the transition table uses exactly the six lifecycle states');
SELECT has_trigger('extsvc', 'service_records', 'lifecycle_transition_check', 'transition check trigger');
SELECT has_trigger('extsvc', 'service_records', 'lifecycle_transition_history', 'transition history trigger');

-- roles
SELECT has_role('extsvc_api');
SELECT has_role('extsvc_admin');
SELECT ok(NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'extsvc_api'), 'extsvc_api is NOLOGIN');
SELECT ok(NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'extsvc_admin'), 'extsvc_admin is NOLOGIN');

-- every table, view and function of the schema is described (psql \d+, \df+)
SELECT is_empty($$
  SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'extsvc' AND c.relkind IN ('r', 'v', 'p')
     AND obj_description(c.oid, 'pg_class') IS NULL$$,
  'every table and view of extsvc has a COMMENT');
SELECT is_empty($$
  SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname = 'extsvc' AND obj_description(p.oid, 'pg_proc') IS NULL$$,
  'every function of extsvc has a COMMENT');


-- each state vocabulary is one domain (sql/parts/05_states.sql), used by
-- every table column that holds one of its states
SELECT is((SELECT array_agg(format('%s.%s: %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod))
                            ORDER BY c.relname, a.attname)
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'extsvc'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
              AND a.attname IN ('lifecycle_state', 'deployment_state', 'placement_state', 'state_actor', 'actor', 'machine')
              AND format_type(a.atttypid, a.atttypmod) NOT IN ('extsvc.lifecycle_state', 'extsvc.deployment_state',
                  'extsvc.placement_state', 'extsvc.state_actor', 'extsvc.placement_machine')),
          NULL, 'every state, actor and machine column has its domain');
SELECT is((SELECT count(*)::integer FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'extsvc'::regnamespace AND c.relkind = 'r' AND a.attnum > 0
              AND a.atttypid = 'extsvc.lifecycle_state'::regtype), 7,
          'lifecycle_state: service_records, and from/to of lifecycle_transitions, service_state_history, purged_service_history');
SELECT is((SELECT array_agg(conname ORDER BY conname) FROM pg_constraint
            WHERE connamespace = 'extsvc'::regnamespace AND contype = 'c' AND conrelid <> 0
              AND pg_get_constraintdef(oid) ~ '''(CREATING|READY|PENDING|RUNNING|ACTIVE|REMOVING|api|worker)'''),
          NULL, 'no table CHECK spells out a state vocabulary again');
SELECT throws_ok($$SELECT 'BOGUS'::extsvc.lifecycle_state$$, '23514', NULL, 'the lifecycle domain refuses an unknown state');
SELECT throws_ok($$SELECT 'GONE'::extsvc.deployment_state$$, '23514', NULL, 'the deployment domain refuses an unknown state');

-- the deployment states have one home each: the domain says which exist, the precedence in which
-- order they aggregate (sql/parts/05_states.sql); a state added to one and not the other fails here
SELECT is((SELECT array_agg(m[1] ORDER BY m[1])
             FROM pg_constraint c, regexp_matches(pg_get_constraintdef(c.oid), '''([^'']+)''', 'g') m
            WHERE c.contypid = 'extsvc.deployment_state'::regtype AND c.conname = 'deployment_state_values'),
          (SELECT array_agg(s ORDER BY s) FROM unnest(extsvc._deployment_state_precedence()) s),
          'deployment_state: its CHECK and _deployment_state_precedence() name the same states');
SELECT is((SELECT count(DISTINCT s)::integer FROM unnest(extsvc._deployment_state_precedence()) s),
          cardinality(extsvc._deployment_state_precedence()),
          '_deployment_state_precedence(): each state once');

SELECT * FROM finish();
ROLLBACK;
