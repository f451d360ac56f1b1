#!/usr/bin/env bash
# The PGXN source archive (issue 27): `make dist` writes nico_extsvc-<version>.zip
# of HEAD (committed files only; .gitattributes leaves out the simulator, the
# test kit, benchmarks and CI). Unpacks it, checks that it holds no left-out
# part and every shipped one, then builds and installs from the unpacked copy
# with plain `make && make install` into a staging root (DESTDIR), and compares
# what it installed with what the checkout's own `make install` would install:
# the same files, the SQL scripts byte for byte.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$ROOT/nico_extsvc.control")
name="nico_extsvc-$version"
# beside the checkout, so that a compiler cache sees the same relative paths
work="$(mktemp -d "$ROOT/build-dist.XXXXXX")"
trap 'rm -rf "$work"' EXIT

make -C "$ROOT" -s dist DIST="$work/$name.zip"
"$PY" - "$work/$name.zip" "$work" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
src="$work/$name"
fail=0
for gone in sim test bench python .ci; do
  if [ -e "$src/$gone" ]; then echo "FAILED the archive holds $gone/"; fail=1; fi
done
for kept in Makefile CMakeLists.txt META.json nico_extsvc.control README.md CHANGELOG.md \
            src/pg sql/parts sql/migrations tools/sql_upgrade.py regress expected; do
  if [ ! -e "$src/$kept" ]; then echo "FAILED the archive lacks $kept"; fail=1; fi
done
echo "archive: $(du -k "$work/$name.zip" | cut -f1) KiB, $(find "$src" -type f | wc -l) files"

log "make && make install from the unpacked archive"
# plain PGXS use: no BUILD_DIR, no extra flags (EXTSVC_TESTS is off without the simulator)
make -C "$src" -s -j2 PG_CONFIG="$PG_CONFIG"
make -C "$src" -s PG_CONFIG="$PG_CONFIG" install DESTDIR="$work/root"

# what the checkout's own build installs (already built by the test command: a copy only)
make -C "$ROOT" -s BUILD_DIR="$BUILD_DIR" PG_CONFIG="$PG_CONFIG" install DESTDIR="$work/ref"
pkglib=$("$PG_CONFIG" --pkglibdir)
share=$("$PG_CONFIG" --sharedir)/extension
[ -f "$work/root$pkglib/nico_extsvc.so" ] || { echo "FAILED no nico_extsvc.so installed"; fail=1; }
expected=$(cd "$work/ref" && find . -type f | sort)
got=$(cd "$work/root" && find . -type f | sort)
if [ "$expected" != "$got" ]; then
  echo "FAILED the archive installs other files than the checkout:"
  diff <(echo "$expected") <(echo "$got") || true
  fail=1
fi
n=0
for f in "$work/ref$share"/*; do
  n=$((n + 1))
  cmp -s "$f" "$work/root$share/$(basename "$f")" || { echo "FAILED $(basename "$f") differs"; fail=1; }
done
if [ "$fail" -eq 0 ]; then
  echo "dist: $name.zip builds and installs with make && make install: the module and $n control/SQL files, the same files as the checkout installs, SQL byte for byte"
fi
exit "$fail"
