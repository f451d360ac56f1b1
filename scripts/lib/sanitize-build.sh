# The clang build with ASan+UBSan and libFuzzer instrumentation shared by
# scripts/sanitize-tests.sh and scripts/fuzz.sh.
# shellcheck shell=bash

SANITIZE_BUILD="${SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"
# -O1, as usual for sanitizer builds; line tables keep file:line in reports.
# (Compile time is dominated by parsing nlohmann/json and GoogleTest, so the
# flags change little there.)
SANITIZE_CXX_FLAGS="${SANITIZE_CXX_FLAGS:--O1 -gline-tables-only -DNDEBUG}"
# The client tests' own code at -O0 (the libraries they test stay at -O1;
# cmake/extsvc_targets.cmake says which targets and why).
SANITIZE_TEST_FLAGS="${SANITIZE_TEST_FLAGS:--O0}"

# sanitize_build TARGET...: configures the directory once, then builds.
sanitize_build() {
  if [ ! -f "$SANITIZE_BUILD/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$SANITIZE_BUILD" -DCMAKE_CXX_COMPILER=clang++ -DEXTSVC_FUZZ=ON \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$SANITIZE_CXX_FLAGS" \
      -DEXTSVC_SANITIZE_TEST_FLAGS="$SANITIZE_TEST_FLAGS" \
      >/dev/null || return 1
  fi
  cmake --build "$SANITIZE_BUILD" -j "${JOBS:-2}" --target "$@" >/dev/null ||
    cmake --build "$SANITIZE_BUILD" -j 1 --target "$@"
}
