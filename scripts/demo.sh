#!/usr/bin/env bash
# Installs what is missing, builds ferry, and runs the example program.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
scripts/build.sh build
echo
build/bin/ferry-example
