#!/usr/bin/env bash
# ferry's same-host transport against raw same-host copies, measured in the same run.
#
#  cma     ferry-bench --protocol=shm, plain registered memory on both sides (the shm transport
#          moves it with process_vm_writev/readv) vs ferry-raw-shm-baseline --kind=cma (one
#          process_vm_writev/readv per block into a forked target). Aim: ratio >= 0.9.
#  managed the same with the target's buffer from allocateManagedBuffer (target --managed; the
#          transport maps the memfd and copies with memcpy) vs --kind=memcpy (memcpy into a
#          memfd both processes map). Both cycle through the same working set, larger than the
#          last-level cache (the baseline's default, twice the LLC; ferry-bench gets the same
#          --working_set), so neither copies between cache-hot slices. Aim: ratio >= 0.85 from
#          64K, and >= 1,000,000 ops/s at 4K.
#  latency one LATENCY_BLOCK write and read, ferry-bench --batch_size=1 --inflight=1, on both
#          paths, against the baseline's --batch_size=1 (one process_vm_writev/readv call, which
#          returns once the bytes are in the other process: the whole raw round trip; or one
#          memcpy). Aim: ferry p50 <= 10 us.
#  select  --protocol=auto on both sides of one host must be carried by shm; with a different
#          --host_id on each side, by tcp (EXPECT_OTHER_HOST overrides, e.g. rdma on a host
#          with an RDMA NIC). A wrong choice fails the run.
#
# Every point: a write and a read of BATCH_SIZE blocks per batch, DURATION seconds, initiator
# with --json, drained (--inflight=1) and pipelined (--inflight=INFLIGHT); the baseline runs the
# same loop (THREADS threads, batches of BATCH_SIZE, one copy after the other) for the same
# time. Prints markdown tables; exits non-zero when a run failed or the selection was wrong
# (ratios below their aim are marked, not failed: a shared VM is too noisy for that).
#
#   bench/shm.sh
#   DURATION=3 BLOCK_SIZES="4K 64K 1M 4M" BATCH_SIZE=32 THREADS=1 BUILD_DIR=build bench/shm.sh
#   INFLIGHT=4 LATENCY_BLOCK=4K LATENCY_DURATION=1 bench/shm.sh
#   SKIP_BUILD=1 BUILD_DIR=build bench/shm.sh    # use the binaries already in $BUILD_DIR/bin
#   BENCH_ROWS=rows.jsonl bench/shm.sh   # also append the rows there (bench/all.sh does)
#
# Starts and stops only its own processes, by PID; the trap cleans up on any exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

duration=${DURATION:-3}
read -r -a sizes <<<"${BLOCK_SIZES:-4K 64K 1M 4M}"
batch=${BATCH_SIZE:-32}
threads=${THREADS:-1}
inflight=${INFLIGHT:-4}
latency_block=${LATENCY_BLOCK:-4K}
latency_duration=${LATENCY_DURATION:-$(awk -v d="$duration" 'BEGIN { print (d < 1 ? d : 1) }')}
build_dir=${BUILD_DIR:-build}
expect_other_host=${EXPECT_OTHER_HOST:-tcp}
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"
# shellcheck source=bench-rows.sh
source "$root/bench/bench-rows.sh"

# Stops the running target by PID (SIGTERM, then SIGKILL after 5 s).
stop_target() {
  [[ -n "$target_pid" ]] || return 0
  kill -TERM "$target_pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$target_pid" 2>/dev/null || true
  wait "$target_pid" 2>/dev/null || true
  target_pid=""
}

# One initiator run against the current target: initiator <flags...>; prints its JSON line.
initiator() {
  timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json \
    --metadata_server=P2PHANDSHAKE --segment_id="$segment" --target_addr="$target_addr" \
    --batch_size="$batch" --threads="$threads" "$@" 2>"$work/initiator.err"
}
# What bench-rows.sh runs: a --protocol=shm initiator, with $ferry_flags of the current point.
run_initiator() { initiator --protocol=shm --duration="$duration" "${ferry_flags[@]}" "$@"; }

target_buffer=$(target_buffer_bytes)

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  echo "==> build ($build_dir: ferry-bench, ferry-raw-shm-baseline)"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
    -DFERRY_WERROR=ON >/dev/null
  cmake --build "$build_dir" --target ferry-bench ferry-raw-shm-baseline -j "${JOBS:-$(nproc)}"
fi
for program in ferry-bench ferry-raw-shm-baseline; do
  if [[ ! -x "$bin/$program" ]]; then
    echo "shm.sh: $bin/$program is missing (build $build_dir first, e.g. scripts/demo.sh)" >&2
    exit 1
  fi
done
echo "==> $duration s per point, batch $batch, inflight 1 and $inflight, $threads thread(s)"

status=0
ferry_flags=()

# measure <path> <raw kind> <aim> <target flags...>: one target, then per size and op the raw
# baseline and ferry-bench --protocol=shm drained and pipelined, then the latency rows; adds
# rows. For memcpy, ferry-bench gets the working set the baseline reports.
measure() {
  local path=$1 kind=$2 aim=$3
  shift 3
  start_target --protocol=shm --buffer_size="$target_buffer" "$@"
  echo "==> $path: target ready ($ready)"
  local size op raw_json working_set point_aim aim_text
  for size in "${sizes[@]}"; do
    for op in write read; do
      raw_json=$(timeout "$run_timeout" "$bin/ferry-raw-shm-baseline" --kind="$kind" \
        --operation="$op" --block_size="$size" --batch_size="$batch" --threads="$threads" \
        --duration="$duration") || {
        echo "shm.sh: raw $kind baseline failed for $size $op" >&2
        status=1
        raw_json='{"gbps":0}'
      }
      ferry_flags=()
      working_set=$(json_field "$raw_json" working_set)
      [[ "$kind" == memcpy && -n "$working_set" ]] && ferry_flags=(--working_set="$working_set")
      point_aim=$aim
      aim_text=">= $aim"
      if [[ "$kind" == memcpy ]] && [[ "$size" == 4[Kk] || "$size" == 4096 ]]; then
        point_aim=""
        aim_text=">= 1,000,000 ops/s"
      fi
      throughput_row "$path" "$size" "$op" 1 "$raw_json" "" ""
      if [[ "$inflight" != 1 ]]; then
        throughput_row "$path" "$size" "$op" "$inflight" "$raw_json" "$point_aim" "$aim_text"
      fi
      echo "    $path $size $op done"
    done
  done
  if [[ -n "$latency_block" ]]; then
    for op in write read; do
      raw_json=$(timeout "$run_timeout" "$bin/ferry-raw-shm-baseline" --kind="$kind" \
        --operation="$op" --block_size="$latency_block" --batch_size=1 --threads=1 \
        --duration="$latency_duration") || {
        echo "shm.sh: raw $kind round trip failed for $latency_block $op" >&2
        status=1
        raw_json='{"p50_us":0}'
      }
      ferry_flags=()
      working_set=$(json_field "$raw_json" working_set)
      [[ "$kind" == memcpy && -n "$working_set" ]] && ferry_flags=(--working_set="$working_set")
      latency_row "$path" "$latency_block" "$op" "$raw_json" p50_us:10 "p50 <= 10 us" \
        --threads=1 --duration="$latency_duration"
      echo "    $path latency $latency_block $op done"
    done
  fi
  stop_target
}

# select_check <want> <target flags...> -- <initiator flags...>: a short --protocol=auto run;
# fails the script unless <want> carried it.
select_lines=()
select_check() {
  local want=$1 flags=() json got
  shift
  while [[ $# -gt 0 && "$1" != "--" ]]; do flags+=("$1"); shift; done
  shift
  start_target --protocol=auto "${flags[@]}"
  if json=$(initiator --protocol=auto --operation=write --block_size=64K --duration=0.5 "$@"); then
    got=$(json_field "$json" transport)
  else
    got="FAILED: $(tail -n1 "$work/initiator.err")"
  fi
  stop_target
  local what="auto, target ${flags[*]:-(detected host)}, initiator ${*:-(detected host)}"
  if [[ "$got" == "$want" ]]; then
    select_lines+=("ok    $what -> $got")
  else
    select_lines+=("WRONG $what -> $got (want $want)")
    status=1
  fi
  echo "    selection: $what -> $got"
}

measure shm-cma cma 0.9
measure shm-managed memcpy 0.85 --managed
echo "==> selection"
select_check shm --
select_check "$expect_other_host" --host_id=bench-host-a -- --host_id=bench-host-b

((bench_failed == 0)) || status=1

print_tables
echo
printf 'selection: %s\n' "${select_lines[@]}"
echo "(GB/s = 10^9 bytes/s; * = aim missed; latency per batch of $batch, submit until the"
echo " initiator saw every task done; raw: shm-cma = process_vm_writev/readv, shm-managed ="
echo " memcpy into a shared memfd over a working set past the last-level cache, which ferry-bench"
echo " cycles through too. Latency rows: raw = one such call for one block.)"
exit $status
