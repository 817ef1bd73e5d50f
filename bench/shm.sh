#!/usr/bin/env bash
# ferry's same-host transport against raw same-host copies, measured in the same run.
#
#  cma     ferry-bench --protocol=shm, plain registered memory on both sides (the shm transport
#          moves it with process_vm_writev/readv) vs ferry-raw-shm-baseline --kind=cma (one
#          process_vm_writev/readv per block into a forked target). Aim: ratio >= 0.9.
#  mapped  the same with the target's buffer from allocateManagedBuffer (target --managed; the
#          transport maps the memfd and copies with memcpy) vs --kind=memcpy (memcpy into a
#          memfd both processes map). Aim: ratio >= 0.85.
#  select  --protocol=auto on both sides of one host must be carried by shm; with a different
#          --host_id on each side, by tcp (EXPECT_OTHER_HOST overrides, e.g. rdma on a host
#          with an RDMA NIC). A wrong choice fails the run.
#
# Every point: a write and a read of BATCH_SIZE blocks per batch, DURATION seconds, initiator
# with --json; the baseline runs the same loop (THREADS threads, batches of BATCH_SIZE) for the
# same time. Prints one table; exits non-zero when a run failed or the selection was wrong
# (ratios below their aim are marked, not failed: a shared VM is too noisy for that).
#
#   bench/shm.sh
#   DURATION=3 BLOCK_SIZES="4K 64K 1M 4M" BATCH_SIZE=32 THREADS=1 BUILD_DIR=build bench/shm.sh
#   SKIP_BUILD=1 BUILD_DIR=build bench/shm.sh    # use the binaries already in $BUILD_DIR/bin
#
# Starts and stops only its own processes, by PID; the trap cleans up on any exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

duration=${DURATION:-3}
read -r -a sizes <<<"${BLOCK_SIZES:-4K 64K 1M 4M}"
batch=${BATCH_SIZE:-32}
threads=${THREADS:-1}
build_dir=${BUILD_DIR:-build}
expect_other_host=${EXPECT_OTHER_HOST:-tcp}
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"

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

target_buffer=$(target_buffer_bytes)

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  echo "==> build ($build_dir: ferry-bench, ferry-raw-shm-baseline)"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
    -DFERRY_WERROR=ON >/dev/null
  cmake --build "$build_dir" --target ferry-bench ferry-raw-shm-baseline -j "${JOBS:-$(nproc)}"
fi
echo "==> $duration s per point, batch $batch, $threads thread(s)"

status=0
rows=()
ops_4k=()

# measure <path> <raw kind> <aim> <target flags...>: one target, then per size and op the raw
# baseline and ferry-bench --protocol=shm; appends to rows.
measure() {
  local path=$1 kind=$2 aim=$3
  shift 3
  start_target --protocol=shm --buffer_size="$target_buffer" "$@"
  echo "==> $path: target ready ($ready)"
  local size op raw_json raw_gbps json
  for size in "${sizes[@]}"; do
    for op in write read; do
      raw_json=$(timeout "$run_timeout" "$bin/ferry-raw-shm-baseline" --kind="$kind" \
        --operation="$op" --block_size="$size" --batch_size="$batch" --threads="$threads" \
        --duration="$duration") || {
        echo "shm.sh: raw $kind baseline failed for $size $op" >&2
        status=1
        raw_json='{"gbps":0}'
      }
      raw_gbps=$(json_field "$raw_json" gbps)
      if json=$(initiator --protocol=shm --operation="$op" --block_size="$size" \
          --duration="$duration"); then
        rows+=("$(awk -v p="$path" -v s="$size" -v op="$op" -v raw="$raw_gbps" \
          -v f="$(json_field "$json" gbps)" -v aim="$aim" -v t="$(json_field "$json" transport)" \
          -v ops="$(json_field "$json" ops_per_s)" -v p50="$(json_field "$json" p50_us)" \
          -v p99="$(json_field "$json" p99_us)" 'BEGIN {
            r = raw > 0 ? f / raw : 0
            printf "%-6s %-6s %-5s %9.3f %10.3f %6.2f%-1s %5.2f %-9s %12.0f %9.1f %9.1f",
                   p, s, op, raw, f, r, (r < aim ? "*" : " "), aim, t, ops, p50, p99 }')")
        if [[ "$size" == 4[Kk] || "$size" == 4096 ]]; then
          ops_4k+=("$(awk -v p="$path" -v op="$op" -v ops="$(json_field "$json" ops_per_s)" \
            'BEGIN { printf "%s %s %.0f ops/s", p, op, ops }')")
        fi
      else
        status=1
        rows+=("$(printf '%-6s %-6s %-5s %9.3f  FAILED: %s' "$path" "$size" "$op" "$raw_gbps" \
          "$(tail -n1 "$work/initiator.err")")")
      fi
      echo "    $path $size $op done"
    done
  done
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

measure cma cma 0.90
measure mapped memcpy 0.85 --managed
echo "==> selection"
select_check shm --
select_check "$expect_other_host" --host_id=bench-host-a -- --host_id=bench-host-b

echo
printf '%-6s %-6s %-5s %9s %10s %7s %5s %-9s %12s %9s %9s\n' path block op "raw GB/s" \
  "ferry GB/s" ratio aim carried "ferry ops/s" "p50 us" "p99 us"
printf '%s\n' "${rows[@]}"
echo
if [[ ${#ops_4k[@]} -gt 0 ]]; then
  echo "4 KiB, batch $batch -> $(printf '%s, ' "${ops_4k[@]}" | sed 's/, $//')"
fi
printf 'selection: %s\n' "${select_lines[@]}"
echo "(GB/s = 10^9 bytes/s; * = ratio below its aim; latency per batch of $batch, submit to all"
echo " tasks done; raw: cma = process_vm_writev/readv, mapped = memcpy into a shared memfd)"
exit $status
