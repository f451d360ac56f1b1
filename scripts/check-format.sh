#!/usr/bin/env bash
# Fails when a C++ source differs from the committed clang-format style.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h')
clang-format --dry-run --Werror "${files[@]}"
echo "clang-format: ${#files[@]} files checked: 1 passed, 0 failed"
