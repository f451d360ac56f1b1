#!/usr/bin/python3
"""Assembles an upgrade script of nico_extsvc (make runs it; see
docs/operator-guide.md, "Appendix: how upgrade scripts are made").

    sql_upgrade.py FROM TO MIGRATION PART...  > sql/nico_extsvc--FROM--TO.sql

The script is, in this order:
  1. sql/migrations/drop-definitions.sql: drops every function, view and
     trigger of the extension (no CASCADE: anything else that depends on one
     stops the upgrade with PostgreSQL's own message);
  2. MIGRATION (hand-written, sql/migrations/FROM--TO.sql): tables, columns,
     constraints, indexes, sequences and data migrations;
  3. the definitions of sql/parts/*.sql, replayed: every statement of the
     parts except the stored-data DDL of step 2 (CREATE/ALTER TABLE, CREATE
     INDEX, sequences, types, DROP) and statements marked
     "-- upgrade: install-only". Seed tables (the targets of the parts'
     INSERTs) are emptied right before their first INSERT and refilled.

A statement whose kind this tool does not know stops make with a message, so
a new kind of statement gets a decision rather than a silent omission.
"""
import re
import sys

SCHEMA = re.compile(
    r"^(CREATE\s+(UNLOGGED\s+|TEMP(ORARY)?\s+)?TABLE|ALTER\s+TABLE|CREATE\s+(UNIQUE\s+)?INDEX|"
    r"(CREATE|ALTER)\s+SEQUENCE|CREATE\s+TYPE|CREATE\s+DOMAIN|ALTER\s+TYPE|DROP\s)", re.I)
REPLAY = re.compile(
    r"^(CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW|MATERIALIZED\s+VIEW|(CONSTRAINT\s+)?TRIGGER)|ALTER\s+(FUNCTION|PROCEDURE|VIEW)|"
    r"COMMENT\s+ON|GRANT|REVOKE|SELECT|DO)\b", re.I)
INSERT = re.compile(r"^INSERT\s+INTO\s+([\w.\"]+)", re.I)
MARKER = "-- upgrade: install-only"


def statements(text, path):
    """Yields (leading comments + statement text, statement text without
    leading comments) for each top-level statement of text."""
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                sys.exit(f"{path}: unterminated comment")
            i = j + 2
        elif c == "'" or c == '"':
            escapes = (c == "'" and i > 0 and text[i - 1] in "eE"
                       and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_")))
            j = i + 1
            while True:
                if j >= n:
                    sys.exit(f"{path}: unterminated quote at offset {i}")
                if escapes and text[j] == "\\":
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
        elif c == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", text[i:])
            if m and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
                tag = m.group(0)
                j = text.find(tag, i + len(tag))
                if j < 0:
                    sys.exit(f"{path}: unterminated {tag} quote")
                i = j + len(tag)
            else:
                i += 1
        elif c == ";":
            yield text[start:i + 1]
            i += 1
            start = i
        else:
            i += 1
    if text[start:].strip() and strip_comments(text[start:]).strip():
        sys.exit(f"{path}: text after the last ';': {text[start:].strip()[:60]!r}")


def strip_comments(stmt):
    """The statement without its leading whitespace and comments."""
    s = stmt
    while True:
        s = s.lstrip()
        if s.startswith("--"):
            j = s.find("\n")
            s = "" if j < 0 else s[j + 1:]
        elif s.startswith("/*"):
            s = s[s.find("*/") + 2:]
        else:
            return s


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    frm, to, drop, migration, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    out = sys.stdout
    out.write(f"-- nico_extsvc {frm} -> {to}: assembled by make (tools/sql_upgrade.py) from\n"
              f"-- {drop}, {migration} and the definitions of sql/parts/*.sql; do not edit.\n")
    out.write(f'\\echo Use "ALTER EXTENSION nico_extsvc UPDATE TO \'{to}\'" to load this file. \\quit\n')
    for path in (drop, migration):
        out.write(f"\n-- ---- {path}\n")
        out.write(open(path, encoding="utf-8").read())
    emptied = set()
    for path in parts:
        text = open(path, encoding="utf-8").read()
        out.write(f"\n-- ---- {path} (definitions)\n")
        for stmt in statements(text, path):
            body = strip_comments(stmt)
            leading = stmt[:len(stmt) - len(body)]
            if MARKER in leading:
                continue
            if SCHEMA.match(body):
                continue
            m = INSERT.match(body)
            if m:
                table = m.group(1)
                if table not in emptied:
                    emptied.add(table)
                    out.write(f"\n-- seed table: emptied and refilled from {path}\nDELETE FROM {table};\n")
                out.write(stmt)
                continue
            if REPLAY.match(body):
                out.write(stmt)
                continue
            sys.exit(f"{path}: tools/sql_upgrade.py does not know whether to replay this statement "
                     f"in an upgrade: {body[:80]!r}. Extend SCHEMA or REPLAY in the tool, or mark it "
                     f"'{MARKER}'.")
        out.write("\n")


if __name__ == "__main__":
    main()
