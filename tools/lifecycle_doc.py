#!/usr/bin/python3
"""Keeps the state tables in docs/ true to the transition tables.

docs/lifecycle.md's table is generated from extsvc.lifecycle_transitions and
docs/placement.md's tables from extsvc.placement_transitions (one block per
state machine) -- the tables the triggers enforce. `--check` (used by the
test suite) fails when a block differs; `--write` regenerates the blocks.
Usage: lifecycle_doc.py [--check|--write] [DBNAME] [lifecycle|placement ...]
(default: lifecycle only). Connection: libpq's PG* variables, through the
test kit (PYTHONPATH=python; extsvc_testkit.db).
"""
import os
import sys

from extsvc_testkit import db

CONNS = db.Conns()
DOCS = os.path.join(os.path.dirname(__file__), "..", "docs")
LIFECYCLE_QUERY = (
    "SELECT coalesce(from_state, '(new)'), to_state, actor, reason, description "
    "FROM extsvc.lifecycle_transitions "
    "ORDER BY array_position(ARRAY['(new)','CREATING','READY','UPDATING','FAILED','DELETING','DELETED'], "
    "coalesce(from_state, '(new)')), to_state, actor, reason")
PLACEMENT_ORDER = ("ARRAY['(new)','ACTIVE','REMOVING','PENDING','RUNNING','TERMINATING','TERMINATED',"
                   "'ERROR','UNKNOWN','(removed)']")
# One row per (to, actor, reason, meaning): the from states are listed together.
PLACEMENT_QUERY = (
    "SELECT string_agg(coalesce(from_state, '(new)'), ', ' ORDER BY array_position({o}, "
    "coalesce(from_state, '(new)'))), coalesce(to_state, '(removed)'), actor, reason, description "
    "FROM extsvc.placement_transitions WHERE machine = '{m}' "
    "GROUP BY to_state, actor, reason, description "
    "ORDER BY array_position({o}, coalesce(to_state, '(removed)')), reason, actor, "
    "min(array_position({o}, coalesce(from_state, '(new)')))")


def psql(dbname, query):
    """The rows of query in dbname (NULL as '', as psql printed it)."""
    return [["" if v is None else v for v in r] for r in CONNS.sql(query, dbname)]


def render_lifecycle(dbname):
    lines = ["| from | to | actor | reason | meaning |", "|---|---|---|---|---|"]
    edges = []
    for f, t, a, r, d in psql(dbname, LIFECYCLE_QUERY):
        lines.append(f"| {f} | {t} | {a} | `{r}` | {d} |")
        edges.append((f, t, a, r))
    lines += ["", "```mermaid", "stateDiagram-v2"]
    seen = set()
    for f, t, a, r in edges:
        key = (f, t)
        if key in seen:
            continue
        seen.add(key)
        reasons = ", ".join(sorted({e[3] for e in edges if (e[0], e[1]) == key}))
        src = "[*]" if f == "(new)" else f
        lines.append(f"    {src} --> {t}: {reasons}")
    lines.append("```")
    return "\n".join(lines)


def render_placement(machine):
    def render(dbname):
        query = PLACEMENT_QUERY.format(o=PLACEMENT_ORDER, m=machine)
        lines = ["| from | to | actor | reason | why the move is allowed |", "|---|---|---|---|---|"]
        for f, t, a, r, d in psql(dbname, query):
            lines.append(f"| {f} | {t} | {a} | `{r}` | {d} |")
        return "\n".join(lines)
    return render


# (doc name, file, [(table name in the markers, renderer)])
DOCSETS = {
    "lifecycle": ("lifecycle.md", [("extsvc.lifecycle_transitions", render_lifecycle)]),
    "placement": ("placement.md", [
        (f"extsvc.placement_transitions {m}", render_placement(m))
        for m in ("placement", "deployment", "site_deployment")]),
}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    dbname = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("PGDATABASE", "postgres")
    names = sys.argv[3:] or ["lifecycle"]
    failed = passed = 0
    for name in names:
        fname, blocks = DOCSETS[name]
        path = os.path.join(DOCS, fname)
        with open(path) as f:
            doc = f.read()
        for table, render in blocks:
            begin, end = f"<!-- BEGIN generated: {table} -->", f"<!-- END generated: {table} -->"
            block = render(dbname)
            start, stop = doc.index(begin) + len(begin), doc.index(end)
            if mode == "--write":
                doc = doc[:start] + "\n" + block + "\n" + doc[stop:]
            elif doc[start:stop].strip() != block:
                print(f"docs/{fname} is out of date with {table}; "
                      f"run tools/lifecycle_doc.py --write DBNAME {name}")
                failed += 1
            else:
                passed += 1
        if mode == "--write":
            with open(path, "w") as f:
                f.write(doc)
            print(f"docs/{fname} regenerated")
    if mode == "--write":
        return 0
    print(f"{', '.join('docs/' + DOCSETS[n][0] for n in names)} match the transition tables: "
          f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
