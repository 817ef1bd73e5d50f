#!/usr/bin/env bash
# The libFuzzer harnesses of fuzz/ (README.md, "Fuzzing"). Builds build-fuzz (clang, only the fuzz
# targets and the libraries they exercise), then:
#   scripts/fuzz.sh [target] [seconds]   a long run of one target (default: every target in turn)
#                                        for `seconds` each (default 600); the corpus grows in
#                                        build-fuzz/corpus/<target>, seeded from fuzz/corpus/<target>
#   scripts/fuzz.sh --smoke [seconds]    every target for `seconds` (default 4) from a temporary
#                                        copy of its seeds; what scripts/test.sh runs
#   scripts/fuzz.sh --seeds              rewrites fuzz/corpus/<target>/seed-* from the encoders
#                                        (after a wire format changed)
#   scripts/fuzz.sh --list               the targets
# Extra libFuzzer flags go in FUZZ_FLAGS (e.g. FUZZ_FLAGS="-jobs=4 -workers=4"). A crash leaves
# its input in build-fuzz/artifacts/<target>/ and exits non-zero; once fixed, copy the input to
# fuzz/corpus/<target>/ (any name not starting with "seed-") so it stays a regression seed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

targets=(segment_desc rpc_frame tcp_header grant_frame rdma_wire store_address metadata_http)
build=$root/build-fuzz

usage() {
  echo "usage: scripts/fuzz.sh [target] [seconds] | --smoke [seconds] | --seeds | --list" >&2
  echo "targets: ${targets[*]}" >&2
  exit 2
}

build_fuzzers() {
  local start=$SECONDS
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DFERRY_WERROR=ON \
    -DFERRY_BUILD_FUZZERS=ON -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target ferry_fuzzers
  echo "==> fuzz build: $((SECONDS - start)) s"
}

# run_target <target> <seconds> <corpus dir> <artifact dir>: prints the run's first and last
# status lines, or on a failure the end of its log (the report).
run_target() {
  local target=$1 seconds=$2 corpus=$3 artifacts=$4
  mkdir -p "$artifacts"
  local log=$artifacts/$target.log
  echo "==> fuzz: $target for ${seconds} s"
  # No input is more than a few KiB, so a harness that allocates 128 MiB trusts a length it read.
  local rc=0
  # Run from the artifact folder: with -jobs, libFuzzer writes its fuzz-<n>.log files there.
  # shellcheck disable=SC2086
  (cd "$artifacts" &&
    "$build/bin/${target}_fuzzer" -max_total_time="$seconds" -error_exitcode=77 -timeout=30 \
      -rss_limit_mb=2048 -malloc_limit_mb=128 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} "$corpus") >"$log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 60 "$log" >&2
    echo "fuzz: $target failed (exit $rc); its input and log are in $artifacts/" >&2
    return 1
  fi
  grep -E '(INITED|DONE) |stat::number_of_executed_units' "$log" || true
}

is_target() {
  local t
  for t in "${targets[@]}"; do [[ "$t" == "$1" ]] && return 0; done
  return 1
}

case "${1:-}" in
  --list)
    printf '%s\n' "${targets[@]}"
    ;;
  --seeds)
    [[ $# -eq 1 ]] || usage
    build_fuzzers
    "$build/bin/ferry_fuzz_seeds" "$root/fuzz/corpus"
    ;;
  --smoke)
    [[ $# -le 2 ]] || usage
    seconds=${2:-4}
    build_fuzzers
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    failed=0
    for t in "${targets[@]}"; do
      # A copy: the run adds what it finds to its corpus, and the tree's seeds stay as they are.
      mkdir -p "$work/corpus/$t"
      cp "$root/fuzz/corpus/$t/"* "$work/corpus/$t/"
      run_target "$t" "$seconds" "$work/corpus/$t" "$work/artifacts/$t" || {
        failed=1
        mkdir -p "$build/artifacts/$t"
        cp "$work/artifacts/$t/"* "$build/artifacts/$t/" 2>/dev/null || true
        echo "fuzz: kept in $build/artifacts/$t/" >&2
      }
    done
    exit $failed
    ;;
  -*)
    usage
    ;;
  *)
    [[ $# -le 2 ]] || usage
    selected=("${targets[@]}")
    if [[ $# -ge 1 ]]; then
      is_target "$1" || usage
      selected=("$1")
    fi
    seconds=${2:-600}
    build_fuzzers
    for t in "${selected[@]}"; do
      mkdir -p "$build/corpus/$t"
      cp -n "$root/fuzz/corpus/$t/"* "$build/corpus/$t/"
      run_target "$t" "$seconds" "$build/corpus/$t" "$build/artifacts/$t"
    done
    ;;
esac
