#!/usr/bin/env bash
# The two-process transfer demo: installs what is missing, builds, starts a ferry-bench target
# and runs initiators against it on 127.0.0.1 over TCP, with the P2PHANDSHAKE metadata mode (no
# metadata server). Reads and writes blocks of 4 KiB, 64 KiB, 1 MiB and 4 MiB with --check (every
# byte verified) for DURATION seconds each (default 2), then prints GB/s and batch latency.
#
#   scripts/demo.sh
#   DURATION=5 BUILD_DIR=build scripts/demo.sh
#
# Reads run before writes: a read check compares with the pattern the target filled its buffer
# with, which the writes (a fresh pattern per run, read back and compared) replace.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

duration=${DURATION:-2}
build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
sizes=(4K 64K 1M 4M)
batch=32
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')

# shellcheck source=lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"

scripts/install-deps.sh
scripts/build.sh "$build_dir"
echo

echo "==> target: ferry-bench --mode=target --check (P2PHANDSHAKE, tcp, 127.0.0.1)"
start_target --check
echo "    $ready"

status=0
declare -A row
for op in read write; do
  for size in "${sizes[@]}"; do
    echo "==> initiator: $op $size blocks, batch $batch, ${duration} s, --check"
    if json=$(timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --check --json \
        --protocol=tcp --metadata_server=P2PHANDSHAKE --segment_id="$segment" \
        --target_addr="$target_addr" --operation="$op" --block_size="$size" \
        --batch_size="$batch" --duration="$duration" 2>"$work/initiator.err"); then
      row[$size/$op]=$(awk -v s="$size" -v op="$op" -v gbps="$(json_field "$json" gbps)" \
        -v ops="$(json_field "$json" ops_per_s)" -v p50="$(json_field "$json" p50_us)" \
        -v p99="$(json_field "$json" p99_us)" 'BEGIN {
          printf "%-6s %-5s %8.3f %11.0f %10.1f %10.1f  ok", s, op, gbps, ops, p50, p99 }')
    else
      status=1
      row[$size/$op]=$(printf '%-6s %-5s FAILED: %s' "$size" "$op" \
        "$(tail -n1 "$work/initiator.err")")
    fi
  done
done

echo
printf '%-6s %-5s %8s %11s %10s %10s  %s\n' block op GB/s ops/s "p50 us" "p99 us" check
for size in "${sizes[@]}"; do
  for op in write read; do echo "${row[$size/$op]}"; done
done
echo "(GB/s = 10^9 bytes/s; latency per batch of $batch blocks, submit to all tasks done)"
exit $status
