#!/usr/bin/env bash
# Configures and builds one ferry build directory: scripts/build.sh <dir> [cmake -D options...]
# Shared by test.sh and demo.sh so both build the same way.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
cxx=${CXX:-clang++}
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DFERRY_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
