#!/usr/bin/env bash
# The extension's version lives in nico_extsvc.control; META.json (PGXN
# meta-spec 1.0.0), CMake and the Debian packages (debian/changelog's version)
# must agree with it. And no source file is over 600 lines (issue 24).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" nico_extsvc.control)
python3 - "$version" <<'PY'
import json, re, sys
version = sys.argv[1]
meta = json.load(open("META.json"))
problems = []
# the first line of debian/changelog: "nico-extsvc (VERSION) DISTRIBUTION; urgency=..."
m = re.match(r"nico-extsvc \(([^)]+)\) ", open("debian/changelog").readline())
if not m:
    problems.append("debian/changelog does not start with an entry of nico-extsvc")
elif m.group(1) != version:
    problems.append(f"debian/changelog version {m.group(1)} != control {version}")
for key in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
    if key not in meta:
        problems.append(f"META.json lacks required key {key}")
if meta.get("meta-spec", {}).get("version") != "1.0.0":
    problems.append("META.json meta-spec version must be 1.0.0")
if meta.get("version") != version:
    problems.append(f"META.json version {meta.get('version')} != control {version}")
for ext, p in meta.get("provides", {}).items():
    if p.get("version") != version:
        problems.append(f"provides.{ext}.version {p.get('version')} != control {version}")
    if p.get("file") != f"sql/nico_extsvc--{version}.sql":
        problems.append(f"provides.{ext}.file does not name the {version} script")
for p in problems:
    print(p)
print(f"META.json and debian/changelog: {1 if not problems else 0} passed, {len(problems) and 1} failed")
sys.exit(1 if problems else 0)
PY

# Issue 24: no source file over 600 lines (the generated install script aside).
long=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.py' '*.sql' '*.sh' '*.psql' |
  grep -v '^sql/nico_extsvc--' | xargs wc -l | awk '$2 != "total" && $1 > 600 {print $2 " (" $1 " lines)"}')
if [ -n "$long" ]; then
  echo "source files over 600 lines: split them by what they do"; echo "$long"; exit 1
fi
echo "source files: none over 600 lines"
