#!/usr/bin/env python3
"""Keeps docs/lifecycle.md true to extsvc.lifecycle_transitions.

The transition table in the doc is generated from the database table (the
one the trigger enforces). `--check` (used by the test suite) fails when they
differ; `--write` regenerates the block. Connection: psql's PG* variables.
"""
import os
import subprocess
import sys

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "lifecycle.md")
BEGIN = "<!-- BEGIN generated: extsvc.lifecycle_transitions -->"
END = "<!-- END generated: extsvc.lifecycle_transitions -->"
QUERY = ("SELECT coalesce(from_state, '(new)'), to_state, actor, reason, description "
         "FROM extsvc.lifecycle_transitions "
         "ORDER BY array_position(ARRAY['(new)','CREATING','READY','UPDATING','FAILED','DELETING','DELETED'], "
         "coalesce(from_state, '(new)')), to_state, actor, reason")


def render(dbname):
    out = subprocess.run(["psql", "-X", "-A", "-t", "-F", "\t", "-d", dbname, "-c", QUERY],
                         capture_output=True, text=True, check=True).stdout
    lines = ["| from | to | actor | reason | meaning |", "|---|---|---|---|---|"]
    edges = []
    for row in out.strip().splitlines():
        f, t, a, r, d = row.split("\t")
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


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    dbname = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("PGDATABASE", "postgres")
    block = render(dbname)
    with open(DOC) as f:
        doc = f.read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    current = doc[start:end].strip()
    if mode == "--write":
        with open(DOC, "w") as f:
            f.write(doc[:start] + "\n" + block + "\n" + doc[end:])
        print("docs/lifecycle.md regenerated")
        return 0
    if current != block:
        print("docs/lifecycle.md is out of date with extsvc.lifecycle_transitions; "
              "run tools/lifecycle_doc.py --write")
        return 1
    print("docs/lifecycle.md matches extsvc.lifecycle_transitions: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
