#!/usr/bin/env bash
# The whole suite: installs what is missing, builds, and runs every test with ctest, then again
# under ASan+UBSan and under TSan, then a short run of every fuzz harness. Non-zero on any
# failure.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    the main build only, no sanitizer builds and no fuzzing
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh
jobs=$(nproc)
start=$SECONDS

run_suite() {  # run_suite <build dir> <label> [ctest args...]
  local dir=$1 label=$2
  shift 2
  echo "==> tests: $label"
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" "$@"
}

# The three builds are unity builds (CMAKE_UNITY_BUILD: up to 8 files of a target compiled as one
# translation unit), for CI time: most of a clean build is the back end emitting the same inline
# gtest / nlohmann::json / cpp-httplib / std code once per file (a clean ASan build: about 1,070 s
# of CPU against 1,400 per file). Developers' own builds (scripts/build.sh, demo.sh) stay
# per-file unless asked; CMake keeps the setting in each directory's cache.
# scripts/check-unity-names.sh lists same-named file-local functions a unity build could confuse.
unity=-DCMAKE_UNITY_BUILD=ON

echo "==> build: main (RelWithDebInfo)"
scripts/build.sh build "$unity"
run_suite build "main"

if [[ $quick -eq 0 ]]; then
  # Sanitizer builds skip benchmarks, the packaging test and the Python module (an
  # uninstrumented interpreter cannot load an instrumented extension); TSan's runtime needs a
  # fixed address-space layout on kernels with large mmap randomisation, hence setarch -R.
  echo "==> build: address,undefined"
  scripts/build.sh build-asan "$unity" -DFERRY_SANITIZE=address,undefined \
    -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_PYTHON=OFF
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp" \
    run_suite build-asan "address,undefined" -LE install

  echo "==> build: thread"
  scripts/build.sh build-tsan "$unity" -DFERRY_SANITIZE=thread -DFERRY_BUILD_BENCH=OFF \
    -DFERRY_BUILD_PYTHON=OFF
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    setarch "$(uname -m)" -R ctest --test-dir build-tsan --output-on-failure --no-tests=error \
    -j "$jobs" -LE install

  # Every libFuzzer harness of fuzz/ for a few seconds from its seeds (README.md, "Fuzzing"),
  # in build-fuzz (only the harnesses and what they exercise are built).
  echo "==> fuzz smoke"
  scripts/fuzz.sh --smoke 4
fi
echo "==> all suites passed in $((SECONDS - start)) s"
