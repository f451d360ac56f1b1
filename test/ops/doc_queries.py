#!/usr/bin/python3
"""Every ```sql block of the operator's docs runs as an extsvc_admin member
(issue 28, part 4).

docs/operator-guide.md and docs/runbook.md are what an operator pastes into
psql. This extracts every ```sql block, splits it into statements and runs
each as a fresh login role that is only a member of extsvc_admin, against a
seeded database (a DPU, an instance with a DPF service attached, an ALL_DPUS
service, work in backoff). Each statement runs in its own transaction,
rolled back, so statements that change state (update_service,
confirm_orphan_cleanup, ...) leave nothing behind and one failure does not
hide the next.

A statement whose lines say `superuser` (in its comment) is documented as
needing a superuser: it is not run as the admin member; it must fail as one
(else the note is wrong and the doc should drop it). Placeholders are
filled from the seeded database: '<service_id>', '<instance_id>',
'<machine_id>', '<another name>'; any other '<...>' in a statement is a
failure (a doc query nobody can paste).

The inline `SELECT ...` spans of the same docs (the actions tables, the runbook's "Look" and
"Act" lines) run too: each may be refused by the seeded rows' state (retry_service of a READY
service), never by the role, a missing object or its syntax; a span whose line says `superuser`
is skipped.

Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_docq and the role extsvc_docq_admin. Exit status 0 when
every statement passed.
"""
import os
import re
import sys
import uuid

import psycopg

from extsvc_testkit.machine_ids import dpu_machine_id, host_machine_id

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["docs/operator-guide.md", "docs/runbook.md"]
DB = "extsvc_docq"
ROLE = "extsvc_docq_admin"
CHART = ('{"repoURL":"oci://registry.example.com/charts","chartName":"svc",'
         '"chartVersion":"1.0.0","security":{"privileged":false}}')


def sql_blocks(path):
    """(first line number, text) of every ```sql block of a Markdown file;
    blocks inside list items are indented, the indentation is dropped."""
    blocks, cur, start, indent = [], None, 0, ""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^(\s*)```(\w*)\s*$", line)
            if cur is None and m and m.group(2) == "sql":
                cur, start, indent = [], n + 1, m.group(1)
            elif cur is not None and m:
                blocks.append((start, "".join(cur)))
                cur = None
            elif cur is not None:
                cur.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
    return blocks


def statements(block):
    """(statement text without comments, the whole lines it spans) of a
    block: split at ';' outside quotes and comments."""
    out, buf, lines_from = [], [], 0
    lines = block.splitlines()
    text = "\n".join(lines)
    i, n, line_no, q = 0, len(text), 0, None
    while i < n:
        c = text[i]
        if q:
            buf.append(c)
            if c == q:
                q = None
        elif c in "'\"":
            q = c
            buf.append(c)
        elif text.startswith("--", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append((stmt, "\n".join(lines[lines_from:line_no + 1])))
            buf, lines_from = [], line_no
        else:
            buf.append(c)
        if c == "\n":
            line_no += 1
            if not "".join(buf).strip():
                lines_from = line_no
        i += 1
    if "".join(buf).strip():
        out.append(("".join(buf).strip(), "\n".join(lines[lines_from:])))
    return out


def inline_selects(path):
    """(line number, statement, the whole line) of every `SELECT ...` code span of a Markdown
    file outside its code blocks (the actions tables, the runbook's "Look" lines)."""
    out, fenced = [], False
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if re.match(r"^\s*```", line):
                fenced = not fenced
                continue
            if not fenced:
                for m in re.finditer(r"`(SELECT [^`]*)`", line):
                    out.append((n, m.group(1).strip().rstrip(";"), line))
    return out


# What a statement that is merely not applicable to the seeded rows answers (a FAILED-only
# verb on a READY service, ...): fine. Privilege, missing objects and syntax are not.
NOT_RUNNABLE = {"42501", "42883", "42P01", "42703", "42601", "42704", "42P02"}


def connect(user=None, dbname=DB):
    kw = {"dbname": dbname, "autocommit": True}
    if user:
        kw["user"] = user
    return psycopg.connect(**kw)


def seed(conn):
    """A DPU of a host, an instance with a DPF service attached, an ALL_DPUS
    service, work in backoff; returns the placeholders' values."""
    sid, site, inst = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    host, dpu = host_machine_id(uuid.uuid4()), dpu_machine_id(uuid.uuid4())
    with conn.transaction():
        conn.execute("SET LOCAL extsvc.enforce_chart_allowlist = off")
        conn.execute("SELECT extsvc.register_dpu(%s, %s, 'docq-dpu', 'docq-node', true)", (dpu, host))
        conn.execute("SELECT extsvc.create_service('docq-t', 'docq-svc', 'DPF_HELM_CHART', %s, "
                     "dpu_target => 'PRIMARY', service_id => %s)", (CHART, sid))
        conn.execute("SELECT extsvc.create_service('docq-t', 'docq-site', 'DPF_HELM_CHART', %s, "
                     "deployment_scope => 'ALL_DPUS', service_id => %s)", (CHART, site))
        # what the worker would have recorded: both services READY
        conn.execute("SET LOCAL nico_extsvc.actor = 'worker'")
        conn.execute("UPDATE extsvc.service_records SET lifecycle_state = 'READY', state_actor = 'worker', "
                     "state_reason = 'dpuservice_created', applied_revision = desired_revision "
                     "WHERE service_id IN (%s, %s)", (sid, site))
        conn.execute("SET LOCAL nico_extsvc.actor = ''")
        conn.execute("SELECT extsvc.upsert_instance(%s, 'docq-t', %s, ARRAY[%s]::text[], true)", (inst, host, dpu))
        conn.execute("SELECT extsvc.set_instance_extension_services(%s, jsonb_build_array(jsonb_build_object("
                     "'service_id', %s::text, 'version', (SELECT version FROM extsvc.services WHERE service_id = %s))))",
                     (inst, sid, sid))
        # work in backoff after an error, as the runbook's queue queries expect
        conn.execute("UPDATE extsvc.dpu_reconciliations SET attempts = 3, next_due_at = now() + interval '5 min', "
                     "last_error = 'Forbidden (HTTP 403): dpudevices is forbidden', last_error_at = now() "
                     "WHERE dpu_machine_id = %s", (dpu,))
    return {"'<service_id>'": f"'{sid}'", "'<instance_id>'": f"'{inst}'",
            "'<machine_id>'": f"'{dpu}'", "'<another name>'": "'docq-renamed'"}


def main():
    failures = passes = 0

    def check(cond, what):
        nonlocal failures, passes
        print(("ok     " if cond else "FAILED ") + what)
        if cond:
            passes += 1
        else:
            failures += 1

    with connect(dbname="postgres") as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB}")
        c.execute(f"DROP ROLE IF EXISTS {ROLE}")
        c.execute(f"CREATE DATABASE {DB}")
    try:
        with connect() as su:
            su.execute("CREATE EXTENSION nico_extsvc")  # creates extsvc_admin on a new cluster
            su.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE extsvc_admin")
            values = seed(su)
        # the role is a member of extsvc_admin and of nothing else
        with connect() as su:
            member_of = [r[0] for r in su.execute(
                "SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid "
                "JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = %s", (ROLE,))]
            attrs = su.execute("SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls "
                               "FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()[0]
        check(member_of == ["extsvc_admin"] and not attrs,
              f"{ROLE} is a plain login role, a member of extsvc_admin only ({member_of})")

        total = 0
        with connect(user=ROLE) as admin:
            for doc in DOCS:
                for start, block in sql_blocks(doc):
                    for stmt, lines in statements(block):
                        total += 1
                        where = f"{doc}:{start}: {' '.join(stmt.split())[:90]}"
                        filled = stmt
                        for k, v in values.items():
                            filled = filled.replace(k, v)
                        unknown = re.findall(r"'<[^'>]*>'|'\.\.\.'", filled)
                        if unknown:
                            check(False, f"{where}: placeholder {unknown[0]} is not one of {sorted(values)}")
                            continue
                        superuser = re.search(r"\bsuperuser\b", lines) is not None
                        err = None
                        try:
                            if superuser and re.match(r"ALTER\s+SYSTEM\b", filled, re.I):
                                admin.execute(filled)  # not allowed in a transaction block
                            else:
                                with admin.transaction():
                                    admin.execute(filled)
                                    raise psycopg.Rollback()  # rolled back, not an error
                        except psycopg.Error as e:
                            err = f"{e.sqlstate}: {str(e).splitlines()[0]}"
                        if superuser:
                            check(err is not None, f"{where}: documented as superuser; as extsvc_admin: {err}")
                        else:
                            check(err is None, f"{where}" + (f": {err}" if err else ""))
            # the inline SELECTs: each may refuse the seeded rows' state, never the role
            spans = 0
            for doc in DOCS:
                for n, stmt, line in inline_selects(doc):
                    spans += 1
                    where = f"{doc}:{n}: {stmt[:90]}"
                    filled = stmt
                    for k, v in dict(values, **{"'<id>'": values["'<service_id>'"]}).items():
                        filled = filled.replace(k, v)
                    filled = re.sub(r",\s*N\)", ", 1)", filled)  # rollback_service('<id>', N)
                    unknown = re.findall(r"'<[^'>]*>'|<[a-z_]+>", filled)
                    superuser = re.search(r"\bsuperuser\b", line) is not None
                    if unknown and not superuser:
                        check(False, f"{where}: placeholder {unknown[0]} is not one of {sorted(values)}")
                        continue
                    if superuser:
                        continue  # the doc says who may run it
                    state = None
                    try:
                        with admin.transaction():
                            admin.execute(filled)
                            raise psycopg.Rollback()
                    except psycopg.Error as e:
                        state = e.sqlstate
                        err = f"{e.sqlstate}: {str(e).splitlines()[0]}"
                    check(state not in NOT_RUNNABLE,
                          f"{where} (inline)" + (f": {err}" if state else ""))
        check(total >= 30, f"{total} statements found in the docs' sql blocks")
        check(spans >= 30, f"{spans} inline SELECTs found in the docs")
    finally:
        with connect(dbname="postgres") as c:
            c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            c.execute(f"DROP ROLE IF EXISTS {ROLE}")
    print(f"{passes} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
