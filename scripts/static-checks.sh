#!/usr/bin/env bash
# Static checks that need no build: formatting of every C++ file the repo tracks.
# (Compiler warnings are errors in the build itself: -Wall -Wextra -Werror.)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cpp' '*.hpp')
if [ ${#files[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${files[@]}"
fi
echo "static checks: ${#files[@]} C++ files formatted"
