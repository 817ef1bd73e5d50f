#!/usr/bin/env bash
# ferry over TCP against raw loopback TCP, measured in the same run.
#
# For each block size: ferry-raw-tcp-baseline (one blocking send/recv stream, TCP_NODELAY), then
# ferry-bench write and read (a target in the background on 127.0.0.1 with P2PHANDSHAKE, an
# initiator with --json, batches of BATCH_SIZE blocks). Prints one table; exits non-zero when a
# run failed.
#
#   bench/tcp.sh
#   DURATION=3 BLOCK_SIZES="4K 64K 1M 4M" BATCH_SIZE=32 THREADS=1 BUILD_DIR=build bench/tcp.sh
#   INITIATOR_FLAGS="--tcp_payload_checksum=false" bench/tcp.sh   (extra ferry-bench flags)
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
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"

target_buffer=$(target_buffer_bytes)

echo "==> build ($build_dir)"
scripts/build.sh "$build_dir"
start_target --buffer_size="$target_buffer"
echo "==> target ready: segment $segment, buffer at $target_addr"
echo "==> $duration s per point, batch $batch, $threads thread(s)"

status=0
rows=()
ops_4k=()
for size in "${sizes[@]}"; do
  raw_json=$("$bin/ferry-raw-tcp-baseline" --block_size="$size" --duration="$duration") || {
    echo "tcp.sh: raw baseline failed for $size" >&2
    status=1
    raw_json='{"gbps":0}'
  }
  raw_gbps=$(json_field "$raw_json" gbps)
  for op in write read; do
    if json=$(timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json --protocol=tcp \
        --metadata_server=P2PHANDSHAKE --segment_id="$segment" --target_addr="$target_addr" \
        --operation="$op" --block_size="$size" --batch_size="$batch" --threads="$threads" \
        --duration="$duration" ${INITIATOR_FLAGS:-} 2>"$work/initiator.err"); then
      gbps=$(json_field "$json" gbps)
      rows+=("$(awk -v s="$size" -v op="$op" -v raw="$raw_gbps" -v f="$gbps" \
        -v ops="$(json_field "$json" ops_per_s)" -v p50="$(json_field "$json" p50_us)" \
        -v p99="$(json_field "$json" p99_us)" 'BEGIN {
          printf "%-6s %-5s %9.3f %10.3f %6.2f %12.0f %10.1f %10.1f",
                 s, op, raw, f, (raw > 0 ? f / raw : 0), ops, p50, p99 }')")
      if [[ "$size" == 4[Kk] || "$size" == 4096 ]]; then
        ops_4k+=("$(awk -v op="$op" -v ops="$(json_field "$json" ops_per_s)" \
          'BEGIN { printf "%s %.0f ops/s", op, ops }')")
      fi
    else
      status=1
      rows+=("$(printf '%-6s %-5s %9.3f  FAILED: %s' "$size" "$op" "$raw_gbps" \
        "$(tail -n1 "$work/initiator.err")")")
    fi
    echo "    $size $op done"
  done
done

echo
printf '%-6s %-5s %9s %10s %6s %12s %10s %10s\n' block op "raw GB/s" "ferry GB/s" ratio \
  "ferry ops/s" "p50 us" "p99 us"
printf '%s\n' "${rows[@]}"
if [[ ${#ops_4k[@]} -gt 0 ]]; then
  echo
  echo "4 KiB, batch $batch -> $(printf '%s, ' "${ops_4k[@]}" | sed 's/, $//')"
fi
echo "(GB/s = 10^9 bytes/s; latency per batch of $batch, submit to all tasks done)"
exit $status
