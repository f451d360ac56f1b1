#!/usr/bin/python3
"""End-to-end (issue 29, item 1): a hostile `public` schema never runs.

A non-superuser role that may create objects in schema `public` (an upgraded
cluster, or an explicit GRANT) defines look-alike operators on the state
domains and on text (`public.=`, `public.<>`) and look-alike functions
(`public.now()`, `public.lower()`, `public.jsonb_build_object(...)`, ...),
each of which records a row in `public.hostile_calls` when it runs and then
answers like the real one. The database's default search_path is set to
`public, pg_catalog` (a site misconfiguration: public before the catalog),
the server is restarted so that the workers connect with it, and the whole
story runs against dpfsim with NICo's calls made by an `extsvc_api` login
whose own session has that search_path: register DPUs, upsert an instance,
create a service (READY), attach it (RUNNING on the DPU), a full resync,
detach (TERMINATED), delete the service (DELETED), delete the instance,
another resync. Not one hostile object may have run: the workers pin
`search_path = pg_catalog, pg_temp` at connect and qualify the operators of
their kept plans, and every SQL function of the extension pins its own.

Before the fix the worker's resync statement (`lifecycle_state <> 'DELETED'`
in src/pg/queue_access.cpp) ran `public.<>` as the bootstrap superuser.

The harness's own connections (fixtures, polling) pin their search_path
with PGOPTIONS (libpq reads it); the trap is checked to be armed (a
hostile-path session's own `now()` is recorded) before the story starts.
"""
import json
import os
import sys
import uuid

from extsvc_testkit import db
from extsvc_testkit.harness import Env, device, dpu_id, helm_data, host_id, lit, node, run_tests, wait_until

# every connection of the harness (and of this file, unless it says otherwise)
os.environ["PGOPTIONS"] = "-c search_path=pg_catalog,pg_temp"

HOSTILE, NICO = "extsvc_hostile", "extsvc_nico"
HOST = host_id("e1")
TYPES = ("text", "name", "extsvc.lifecycle_state", "extsvc.deployment_state",
         "extsvc.placement_state", "extsvc.state_actor")
# name(args) -> the real function it answers with
FUNCTIONS = {
    "now()": ("timestamptz", "pg_catalog.now()"),
    "clock_timestamp()": ("timestamptz", "pg_catalog.clock_timestamp()"),
    "random()": ("double precision", "pg_catalog.random()"),
    "gen_random_uuid()": ("uuid", "pg_catalog.gen_random_uuid()"),
    "lower(a text)": ("text", "pg_catalog.lower(a)"),
    "upper(a text)": ("text", "pg_catalog.upper(a)"),
    "btrim(a text)": ("text", "pg_catalog.btrim(a)"),
    "length(a text)": ("integer", "pg_catalog.length(a)"),
    "octet_length(a text)": ("integer", "pg_catalog.octet_length(a)"),
    "format(a text)": ("text", "pg_catalog.format(a)"),
    "current_setting(a text)": ("text", "pg_catalog.current_setting(a)"),
    "current_setting(a text, b boolean)": ("text", "pg_catalog.current_setting(a, b)"),
    "jsonb_typeof(a jsonb)": ("text", "pg_catalog.jsonb_typeof(a)"),
    "jsonb_build_object(a text, b text)": ("jsonb", "pg_catalog.jsonb_build_object(a, b)"),
    "jsonb_build_object(a text, b uuid)": ("jsonb", "pg_catalog.jsonb_build_object(a, b)"),
    "jsonb_build_object(a text, b extsvc.lifecycle_state)": ("jsonb", "pg_catalog.jsonb_build_object(a, b)"),
    "pg_has_role(a name, b text, c text)": ("boolean", "pg_catalog.pg_has_role(a, b, c)"),
    "make_interval(secs double precision)": ("interval", "pg_catalog.make_interval(secs => secs)"),
}

ENV = None


def e():
    return ENV


CONNS = {}  # (user, hostile_path) -> a kept connection


def psql(sql, user, hostile_path=False, check=True):
    """One statement (or several) as a login role, on a kept connection;
    the answer as psql -A -t printed it. hostile_path: the session keeps the
    database's default search_path (public first) instead of the pinned one
    (options "" overrides PGOPTIONS)."""
    key = (user, hostile_path)
    if key not in CONNS:
        CONNS[key] = db.Conn(e().pg.dir, e().pg.port, user, "postgres", options="" if hostile_path else None)
    r = CONNS[key].sql(sql, check=check)
    if isinstance(r, str):
        return r
    return "\n".join("|".join("" if v is None else v for v in row) for row in r).strip()


def nico(sql):
    """A call of NICo's login role, in a session with the hostile search_path."""
    return psql(sql, NICO, hostile_path=True)


def hostile_objects():
    yield """
      CREATE TABLE public.hostile_calls (id bigserial PRIMARY KEY, what text, backend_type text,
                                         usr text, query text, at timestamptz DEFAULT pg_catalog.clock_timestamp());
      GRANT INSERT ON public.hostile_calls TO PUBLIC;
      GRANT USAGE ON SEQUENCE public.hostile_calls_id_seq TO PUBLIC;
      CREATE FUNCTION public.hostile_hit(p_what text) RETURNS void
      LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
      BEGIN
        INSERT INTO public.hostile_calls (what, backend_type, usr, query)
        SELECT p_what, a.backend_type, current_user, left(a.query, 300)
          FROM pg_stat_activity a WHERE a.pid = pg_backend_pid();
      END $$;"""
    for t in TYPES:
        for op, real in (("=", "="), ("<>", "<>")):
            fn = "hostile_" + ("eq" if op == "=" else "ne")
            yield f"""
              CREATE FUNCTION public.{fn}(a {t}, b {t}) RETURNS boolean
              LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
              BEGIN PERFORM public.hostile_hit('{op} on {t}'); RETURN a::text {real} b::text; END $$;
              CREATE OPERATOR public.{op} (LEFTARG = {t}, RIGHTARG = {t}, FUNCTION = public.{fn});"""
    for sig, (ret, real) in FUNCTIONS.items():
        yield f"""
          CREATE FUNCTION public.{sig} RETURNS {ret}
          LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
          BEGIN PERFORM public.hostile_hit({lit(sig)}); RETURN {real}; END $$;"""


def hits():
    return e().pg.sql("SELECT what, backend_type, usr, query FROM public.hostile_calls ORDER BY id")


def resync_lines():
    return e().pg.tail_log(100000).count("resync: labels of")


def full_resync():
    before = resync_lines()
    e().pg.sql("SELECT extsvc.request_resync()")
    wait_until(lambda: resync_lines() > before, timeout=60, interval=0.2, what="a full resync")


def summary():
    return nico(f"SELECT aggregate_state || '/' || removed FROM extsvc.instance_extension_services_summary("
                f"'{INSTANCE}')")


INSTANCE = str(uuid.uuid4())


def test_hostile_public_schema_never_runs():
    pg = e().pg
    pg.sql(f"CREATE ROLE {HOSTILE} LOGIN IN ROLE extsvc_api")
    pg.sql(f"CREATE ROLE {NICO} LOGIN IN ROLE extsvc_api")
    pg.sql(f"GRANT CREATE ON SCHEMA public TO {HOSTILE}")
    for stmt in hostile_objects():
        psql(stmt, HOSTILE)
    assert int(pg.one("SELECT count(*) FROM pg_operator WHERE oprnamespace = 'public'::regnamespace")) == 2 * len(TYPES)
    pg.sql("ALTER DATABASE postgres SET search_path = public, pg_catalog")
    pg.restart()  # the workers connect again, with the database's default search_path
    wait_until(lambda: len(pg.worker_pids()) == 2, timeout=30, what="two workers")

    # the trap is armed: a session with that search_path runs the look-alikes
    assert nico("SHOW search_path") == "public, pg_catalog"
    nico("SELECT now(), lower('X'), 'a'::text = 'a'::text")
    armed = {r[0] for r in hits()}
    assert {"now()", "lower(a text)", "= on text"} <= armed, armed
    pg.sql("TRUNCATE public.hostile_calls")
    full_resync()  # the workers' own statements ran at least once with the hostile path

    for i, primary in ((0, True), (1, False)):
        nico(f"SELECT extsvc.register_dpu('{dpu_id(i)}', '{HOST}', '{device(i)}', '{node(i)}', {str(primary).lower()})")
    nico(f"SELECT extsvc.upsert_instance('{INSTANCE}', 'tenant-a', '{HOST}', ARRAY['{dpu_id(0)}']::text[])")
    sid = nico("SELECT service_id FROM extsvc.create_service('tenant-a', 'hostile-agent', 'DPF_HELM_CHART', "
               f"{lit(json.dumps(helm_data(values={'v': 1})))}, dpu_target => 'PRIMARY')")
    e().wait_state(sid, "READY")
    version = nico(f"SELECT version FROM extsvc.services WHERE service_id = '{sid}'::uuid")
    cfg = json.dumps([{"service_id": sid, "version": version}])
    assert nico(f"SELECT extsvc.set_instance_extension_services('{INSTANCE}', {lit(cfg)})") == "2"
    wait_until(lambda: summary() == "RUNNING/false", timeout=60, interval=0.2, what="RUNNING on the DPU")
    assert nico(f"SELECT extsvc.instance_extension_services_ready('{INSTANCE}')") == "t"
    full_resync()
    assert nico(f"SELECT extsvc.set_instance_extension_services('{INSTANCE}', '[]')") == "3"
    wait_until(lambda: summary() == "", timeout=60, interval=0.2, what="detached and TERMINATED")
    assert nico(f"SELECT lifecycle_state FROM extsvc.delete_service('{sid}')") == "DELETING"
    e().wait_state(sid, "DELETED")
    assert e().sim.dpuservice(e().state(sid)[3]) is None
    nico(f"SELECT extsvc.delete_instance('{INSTANCE}')")
    wait_until(lambda: nico(f"SELECT extsvc.instance_extension_services_terminated('{INSTANCE}')") == "t",
               timeout=60, interval=0.2, what="instance gone")
    full_resync()

    found = hits()
    assert not found, "hostile objects ran:\n" + "\n".join(" | ".join(map(str, r)) for r in found)


def main():
    global ENV
    ENV = Env(dpus=2, workers=2)
    ok = False
    try:
        ok = run_tests([test_hostile_public_schema_never_runs], "# e2e: a hostile public schema")
    finally:
        ENV.close(keep=not ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
