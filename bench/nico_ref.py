"""The physical reference of bench/nico_handlers.py (issue 26, part 3): copies of the tables
NICo's handlers write (schema nicobench_ref, LIKE the extsvc tables with their indexes, data
copied; no triggers, checks or foreign keys) and the handlers' rows written into them by plain
statements of the superuser, one statement where the API makes one call."""
import json

import common as c  # bench/common.py
import sqlx_pg  # test/nico/sqlx_pg.py

REF = "nicobench_ref"

# --- the reference tables ---------------------------------------------------------------

REF_TABLES = ["instances", "instance_extension_services", "dpf_extension_service_attachments", "service_records",
              "service_versions", "helm_revisions", "dpf_extension_service_reconciliations", "dpu_state_history",
              "service_state_history", "dpu_reconciliations", "placement_keys"]


def make_ref(e):
    t0 = c.now()
    e.pg.sql(f"DROP SCHEMA IF EXISTS {REF} CASCADE; CREATE SCHEMA {REF}")
    for t in REF_TABLES:
        e.pg.sql(f"CREATE TABLE {REF}.{t} (LIKE extsvc.{t} INCLUDING DEFAULTS INCLUDING INDEXES INCLUDING IDENTITY)")
        e.pg.sql(f"INSERT INTO {REF}.{t} OVERRIDING SYSTEM VALUE SELECT * FROM extsvc.{t}")
    for t in ("dpu_state_history", "service_state_history"):
        e.pg.sql(f"SELECT setval(pg_get_serial_sequence('{REF}.{t}', 'id'), (SELECT max(id) FROM {REF}.{t}))")
    e.pg.sql(f"ANALYZE {', '.join(f'{REF}.{t}' for t in REF_TABLES)}")
    tpl = {}
    for t in ("service_records", "service_versions", "helm_revisions", "dpf_extension_service_reconciliations",
              "service_state_history"):
        tpl[t] = json.loads(e.pg.one(f"SELECT to_jsonb(x) FROM {REF}.{t} x LIMIT 1"))
        tpl[t].pop("id", None)
    return tpl, c.now() - t0


class RefHandlers:
    """The same rows by plain statements on the copies, one statement where the API makes one call."""

    def __init__(self, conn, tpl):
        self.conn, self.tpl = conn, tpl

    def q(self, sql, binds):
        return sqlx_pg.query(self.conn, sql.replace("R.", REF + "."), binds)

    def alloc(self, ten, allocs):
        with self.conn.transaction():
            for i, host, _, sid, ver, dpu in allocs:
                self.q("INSERT INTO R.instances (instance_id, tenant_organization_id, host_machine_id, "
                       "config_version_text) VALUES (%s, %s, %s, 'V1-T1')",
                       [("Uuid", i), ("String", ten), ("String", host)])
            for i, host, _, sid, ver, dpu in allocs:
                self.q("WITH e AS (INSERT INTO R.instance_extension_services (instance_id, service_id, version, "
                       "  attachment_id) VALUES (%s, %s, %s, gen_random_uuid())), "
                       "a AS (INSERT INTO R.dpf_extension_service_attachments (instance_id, dpu_machine_id, "
                       "  service_id, version) VALUES (%s, %s, %s, %s)), "
                       "h AS (INSERT INTO R.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, "
                       "  version, from_state, to_state, actor, reason) VALUES "
                       "  ('placement', %s, %s, %s, %s, NULL, 'ACTIVE', 'api', 'targeted'), "
                       "  ('deployment', %s, %s, %s, %s, NULL, 'PENDING', 'api', 'attached')), "
                       "q AS (UPDATE R.dpu_reconciliations SET state_version = state_version + 1, next_due_at = now(), "
                       "  attempts = 0 WHERE dpu_machine_id = %s) "
                       "UPDATE R.instances SET config_version = config_version + 1, config_version_text = 'V2-T2', "
                       "  updated_at = now() WHERE instance_id = %s RETURNING config_version",
                       [("Uuid", i), ("Uuid", sid), ("String", ver), ("Uuid", i), ("String", dpu), ("Uuid", sid),
                        ("String", ver), ("Uuid", i), ("String", dpu), ("Uuid", sid), ("String", ver),
                        ("Uuid", i), ("String", dpu), ("Uuid", sid), ("String", ver), ("String", dpu), ("Uuid", i)])

    def _service_rows(self, sid, name, ten, ver, n):
        t = self.tpl
        rec = dict(t["service_records"], service_id=str(sid), service_name=name, tenant_organization_id=ten,
                   dpf_service_name=f"ref-{sid}", placement_label_key=f"ref/{sid}", attachable_version=ver)
        return rec, dict(t["service_versions"], service_id=str(sid), version=ver, version_number=n), \
            dict(t["helm_revisions"], service_id=str(sid), revision=n), \
            dict(t["dpf_extension_service_reconciliations"], service_id=str(sid)), \
            dict(t["service_state_history"], service_id=str(sid))

    def create(self, sid, name, ten):
        rec, ver, rev, rec_q, hist = self._service_rows(sid, name, ten, "V1-T1", 1)
        with self.conn.transaction():
            self.q("WITH r AS (INSERT INTO R.service_records SELECT * FROM jsonb_populate_record(NULL::R.service_records, %s)), "
                   "v AS (INSERT INTO R.service_versions SELECT * FROM jsonb_populate_record(NULL::R.service_versions, %s)), "
                   "hr AS (INSERT INTO R.helm_revisions SELECT * FROM jsonb_populate_record(NULL::R.helm_revisions, %s)), "
                   "q AS (INSERT INTO R.dpf_extension_service_reconciliations SELECT * FROM "
                   "  jsonb_populate_record(NULL::R.dpf_extension_service_reconciliations, %s)), "
                   "k AS (INSERT INTO R.placement_keys (label_key, service_id) VALUES (%s, %s)) "
                   "INSERT INTO R.service_state_history (service_id, from_state, to_state, actor, reason) "
                   "SELECT service_id, from_state, to_state, actor, reason "
                   "  FROM jsonb_populate_record(NULL::R.service_state_history, %s)",
                   [("Json", rec), ("Json", ver), ("Json", rev), ("Json", rec_q),
                    ("String", rec["placement_label_key"]), ("Uuid", sid), ("Json", hist)])

    def update(self, sid, n):
        # a DPF chart's update is a new revision (no new version row); its lifecycle change makes
        # the work rows of the DPUs it is attached to due
        _, _, rev, _, hist = self._service_rows(sid, "", "", f"V{n}-T{n}", n)
        with self.conn.transaction():
            self.q("WITH hr AS (INSERT INTO R.helm_revisions SELECT * FROM jsonb_populate_record(NULL::R.helm_revisions, %s)), "
                   "q AS (UPDATE R.dpf_extension_service_reconciliations SET state_version = state_version + 1, "
                   "  next_due_at = now() WHERE service_id = %s), "
                   "d AS (UPDATE R.dpu_reconciliations SET state_version = state_version + 1, next_due_at = now(), "
                   "  attempts = 0 WHERE dpu_machine_id IN (SELECT dpu_machine_id FROM "
                   "  R.dpf_extension_service_attachments WHERE service_id = %s)), "
                   "h AS (INSERT INTO R.service_state_history (service_id, from_state, to_state, actor, reason) "
                   "  SELECT service_id, from_state, to_state, actor, reason "
                   "    FROM jsonb_populate_record(NULL::R.service_state_history, %s)) "
                   "UPDATE R.service_records SET version_ctr = version_ctr + 1, desired_revision = %s, "
                   "  updated_at = now() WHERE service_id = %s",
                   [("Json", rev), ("Uuid", sid), ("Uuid", sid), ("Json", hist), ("i64", n), ("Uuid", sid)])

    def _remove(self, i, reason, delete):
        self.q("WITH e AS (UPDATE R.instance_extension_services SET removed_at = now() "
               "  WHERE instance_id = %s AND removed_at IS NULL), "
               "a AS (UPDATE R.dpf_extension_service_attachments SET placement_state = 'REMOVING', "
               "  removing_since = now(), updated_at = now(), deployment_state = 'UNKNOWN', "
               "  status_message = 'removal requested; not yet observed' WHERE instance_id = %s RETURNING *), "
               "h AS (INSERT INTO R.dpu_state_history (machine, instance_id, dpu_machine_id, service_id, version, "
               "  from_state, to_state, actor, reason) SELECT m, instance_id, dpu_machine_id, service_id, "
               "  version, f, t, 'api', r FROM a, (VALUES ('placement', 'ACTIVE', 'REMOVING', %s), "
               "  ('deployment', 'RUNNING', 'UNKNOWN', 'removal_requested')) v(m, f, t, r)), "
               "q AS (UPDATE R.dpu_reconciliations SET state_version = state_version + 1, next_due_at = now(), "
               "  attempts = 0 WHERE dpu_machine_id IN (SELECT dpu_machine_id FROM a)) "
               "UPDATE R.instances SET config_version = config_version + 1, updated_at = now()"
               + (", delete_requested_at = now()" if delete else "") + " WHERE instance_id = %s",
               [("Uuid", i), ("Uuid", i), ("String", reason), ("Uuid", i)])

    def detach(self, i, ten):
        with self.conn.transaction():
            self.q("SELECT * FROM R.instances WHERE instance_id = %s", [("Uuid", i)])
            self._remove(i, "detached", False)
            self.q("SELECT * FROM R.instances WHERE instance_id = %s", [("Uuid", i)])

    def delete(self, i, ten):
        with self.conn.transaction():
            self._remove(i, "instance_deleted", True)

    def status(self, i, ten):
        with self.conn.transaction():
            self.q("SELECT bool_and(deployment_state = 'RUNNING') FROM R.dpf_extension_service_attachments "
                   "WHERE instance_id = %s", [("Uuid", i)])
            self.q("SELECT e.service_id, r.service_name, e.version, e.removed_at FROM R.instance_extension_services e "
                   "JOIN R.service_records r USING (service_id) WHERE e.instance_id = %s", [("Uuid", i)])
            self.q("SELECT a.*, d.dpu_device_name, d.dpu_node_name FROM R.dpf_extension_service_attachments a "
                   "JOIN extsvc.dpus d ON d.machine_id = a.dpu_machine_id WHERE a.instance_id = %s", [("Uuid", i)])
