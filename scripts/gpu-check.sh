#!/usr/bin/env bash
# The GPU tests (ctest label "gpu", tests/gpu) on a machine with a CUDA device, built here.
#
#   scripts/gpu-check.sh pack [BUILD_DIR] [PACK_DIR]
#       here (the build machine): copies the executables of every test labelled "gpu" in
#       BUILD_DIR (default: build), the helper programs they start (ferry-gpu-test-*), the
#       benchmarks ferry-cuda-ipc-bench, ferry-bench and ferry-raw-tcp-baseline when built, and
#       every shared library `ldd` lists for them
#       except the C library's own and the CUDA driver
#       (libcuda, which comes with the GPU machine's driver) into PACK_DIR (default:
#       build-gpupack, ignored by git), debug info stripped. Fails when the pack would exceed
#       64 MiB.
#   scripts/gpu-check.sh run [PACK_DIR]
#       there (the GPU machine: CUDA driver, no ferry dependencies needed): runs each packed test
#       binary with LD_LIBRARY_PATH=PACK_DIR/lib, bounded, and fails on any failure, and on any
#       skipped test (a skip there means the device was not usable: the reason is printed). Set
#       FERRY_GPU_CHECK_ALLOW_SKIP=1 to accept skips (to try the script on a machine without a
#       GPU). Then, when packed, ferry-cuda-ipc-bench (bench/cuda_ipc_bench.cc) prints ferry's
#       throughput over cuda-ipc, then over tcp (device memory staged on both sides), next to
#       raw cudaMemcpy through an IPC handle, and ferry-bench --location=cuda:0 sweeps tcp with
#       device buffers on both sides next to the raw loopback tcp baseline
#       (FERRY_GPU_CHECK_BENCH=0 skips both).
#
# Bounds: each test binary FERRY_GPU_CHECK_TIMEOUT seconds (default 150), each benchmark run 120 s,
# so that a hang still ends well inside one 10-minute device command with its output.
#
# With the device tool: pack here, then run with the pack carried, e.g.
#   scripts/gpu-check.sh pack build-cuda build-gpupack
#   run(command="scripts/gpu-check.sh run build-gpupack", carry=["build-gpupack"])
# The tests need nothing else: their engines use peer-to-peer metadata on 127.0.0.1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

limit_bytes=$((64 << 20))

usage() {
  echo "usage: scripts/gpu-check.sh pack [BUILD_DIR] [PACK_DIR] | run [PACK_DIR]" >&2
  exit 2
}

pack() {
  local build=${1:-build} out=${2:-build-gpupack}
  [[ -d "$build/bin" ]] || { echo "gpu-check: no build in '$build' (build it first)" >&2; exit 1; }
  command -v python3 >/dev/null || { echo "gpu-check: pack needs python3" >&2; exit 1; }
  # The executables of the tests labelled exactly "gpu".
  local tests
  tests=$(ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 | python3 -c '
import json, sys
for path in sorted({t["command"][0] for t in json.load(sys.stdin).get("tests", [])}):
    print(path)')
  if [[ -z "$tests" ]]; then
    echo "gpu-check: '$build' has no test labelled gpu (configured without CUDA? see" \
         "FERRY_WITH_CUDA)" >&2
    exit 1
  fi
  rm -rf "$out"
  mkdir -p "$out/bin" "$out/lib"
  local programs=() t
  while IFS= read -r t; do programs+=("$t"); done <<<"$tests"
  for t in "$build"/bin/ferry-gpu-test-* "$build"/bin/ferry-cuda-ipc-bench \
           "$build"/bin/ferry-bench "$build"/bin/ferry-raw-tcp-baseline; do
    [[ -x "$t" ]] && programs+=("$t")
  done
  : >"$out/tests.txt"
  while IFS= read -r t; do basename "$t" >>"$out/tests.txt"; done <<<"$tests"
  local p lib
  for p in "${programs[@]}"; do
    objcopy --strip-debug "$p" "$out/bin/$(basename "$p")"
    # Every resolved library but the loader, the C library's own parts and the CUDA driver.
    while IFS= read -r lib; do
      case "$(basename "$lib")" in
        ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libcuda.so*) continue ;;
      esac
      [[ -e "$out/lib/$(basename "$lib")" ]] || objcopy --strip-debug "$lib" "$out/lib/$(basename "$lib")"
    done < <(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
    if ldd "$p" | grep -q "not found"; then
      echo "gpu-check: $p has unresolved libraries here:" >&2
      ldd "$p" | grep "not found" >&2
      exit 1
    fi
  done
  local size
  size=$(du -sb "$out" | cut -f1)
  echo "gpu-check: packed $(wc -l <"$out/tests.txt") test binaries, $(ls "$out/bin" | wc -l)" \
       "programs and $(ls "$out/lib" | wc -l) libraries into $out ($((size >> 20)) MiB)"
  if (( size > limit_bytes )); then
    echo "gpu-check: the pack is over 64 MiB" >&2
    exit 1
  fi
}

run() {
  local pack=${1:-build-gpupack}
  [[ -f "$pack/tests.txt" ]] || { echo "gpu-check: no pack in '$pack' (gpu-check.sh pack)" >&2; exit 1; }
  pack=$(cd "$pack" && pwd)
  export LD_LIBRARY_PATH="$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: $(uname -srm)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  fi
  local status=0 t log
  while IFS= read -r t; do
    if ldd "$pack/bin/$t" | grep -q "not found"; then
      echo "gpu-check: $t: libraries not found:" >&2
      ldd "$pack/bin/$t" | grep "not found" >&2
      status=1
      continue
    fi
    echo "==> $t"
    log=$(mktemp)
    # pipefail: the test's exit status (a timeout: 124) fails the run.
    if ! timeout "${FERRY_GPU_CHECK_TIMEOUT:-150}" "$pack/bin/$t" 2>&1 | tee "$log"; then
      echo "gpu-check: $t failed" >&2
      status=1
    fi
    if grep -q '^\[  SKIPPED \]' "$log" && [[ "${FERRY_GPU_CHECK_ALLOW_SKIP:-0}" != 1 ]]; then
      echo "gpu-check: $t skipped tests (no usable device?); see the reason above" >&2
      status=1
    fi
    rm -f "$log"
  done <"$pack/tests.txt"
  if [[ $status -eq 0 ]]; then
    if [[ "${FERRY_GPU_CHECK_ALLOW_SKIP:-0}" == 1 ]]; then
      echo "gpu-check: no gpu test failed (skips allowed: FERRY_GPU_CHECK_ALLOW_SKIP=1)"
    else
      echo "gpu-check: all gpu tests passed"
    fi
  else
    echo "gpu-check: FAILED (a failed, timed-out or skipped gpu test: see above)" >&2
  fi
  # The benchmark (when packed): ferry's cuda-ipc against raw cudaMemcpy through an IPC handle,
  # in the same run. Its numbers are printed, not judged; a failed transfer fails the check.
  # Then tcp with device memory on both sides (staged through host memory), same raw column.
  if [[ -x "$pack/bin/ferry-cuda-ipc-bench" && "${FERRY_GPU_CHECK_BENCH:-1}" == 1 ]]; then
    for transport in cuda-ipc tcp; do
      echo "==> ferry-cuda-ipc-bench --transport=$transport"
      if ! timeout 120 "$pack/bin/ferry-cuda-ipc-bench" --transport="$transport"; then
        echo "gpu-check: ferry-cuda-ipc-bench --transport=$transport failed" >&2
        status=1
      fi
    done
  fi
  # ferry-bench with both buffers in device memory (--location=cuda:0) over tcp, a sweep next to
  # the raw loopback tcp baseline of host memory in the same run: what staging costs.
  if [[ -x "$pack/bin/ferry-bench" && -x "$pack/bin/ferry-raw-tcp-baseline" &&
        "${FERRY_GPU_CHECK_BENCH:-1}" == 1 ]]; then
    echo "==> ferry-bench --location=cuda:0 --protocol=tcp --sweep"
    if ! (
      bin="$pack/bin"
      source "$root/scripts/lib/bench-target.sh"
      start_target --location=cuda:0 --buffer_size=256M
      timeout 120 "$bin/ferry-bench" --mode=initiator --metadata_server=P2PHANDSHAKE \
        --host=127.0.0.1 --segment_id="$segment" --target_addr="$target_addr" \
        --location=cuda:0 --protocol=tcp --sweep --sweep_block_sizes=64K,1M,4M \
        --sweep_operations=write,read --batch_size=16 --duration=2 --buffer_size=256M \
        --raw_baselines="$bin"
    ); then
      echo "gpu-check: ferry-bench --location=cuda:0 failed" >&2
      status=1
    fi
  fi
  return $status
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
