#!/usr/bin/env bash
# The two-process transfer demo: installs what is missing, builds, starts a ferry-bench target
# and runs initiators against it on 127.0.0.1 over TCP and over same-host shared memory (shm),
# with the P2PHANDSHAKE metadata mode (no metadata server). Reads and writes blocks of 4 KiB,
# 64 KiB, 1 MiB and 4 MiB with --check (every byte verified) for DURATION seconds each (default
# 2), then prints GB/s, batch latency and the transport that carried the transfers.
#
#   scripts/demo.sh
#   DURATION=5 BUILD_DIR=build PROTOCOLS="tcp" scripts/demo.sh
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
read -r -a protocols <<<"${PROTOCOLS:-tcp shm}"
batch=32
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')

# shellcheck source=lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"

scripts/install-deps.sh
scripts/build.sh "$build_dir"
echo

target_protocols=$(IFS=,; echo "${protocols[*]}")
echo "==> target: ferry-bench --mode=target --check (P2PHANDSHAKE, $target_protocols, 127.0.0.1)"
start_target --check --protocol="$target_protocols"
echo "    $ready"

status=0
declare -A row
for op in read write; do  # every read before any write (see above)
  for proto in "${protocols[@]}"; do
    for size in "${sizes[@]}"; do
      echo "==> initiator: $op $size blocks over $proto, batch $batch, ${duration} s, --check"
      if json=$(timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --check --json \
          --protocol="$proto" --metadata_server=P2PHANDSHAKE --segment_id="$segment" \
          --target_addr="$target_addr" --operation="$op" --block_size="$size" \
          --batch_size="$batch" --duration="$duration" 2>"$work/initiator.err"); then
        row[$proto/$size/$op]=$(awk -v p="$proto" -v s="$size" -v op="$op" \
          -v gbps="$(json_field "$json" gbps)" -v ops="$(json_field "$json" ops_per_s)" \
          -v p50="$(json_field "$json" p50_us)" -v p99="$(json_field "$json" p99_us)" \
          -v via="$(json_field "$json" transport)" 'BEGIN {
            printf "%-5s %-6s %-5s %8.3f %11.0f %10.1f %10.1f  %-7s ok", p, s, op, gbps, ops, p50,
              p99, via }')
      else
        status=1
        row[$proto/$size/$op]=$(printf '%-5s %-6s %-5s FAILED: %s' "$proto" "$size" "$op" \
          "$(tail -n1 "$work/initiator.err")")
      fi
    done
  done
done

echo
printf '%-5s %-6s %-5s %8s %11s %10s %10s  %-7s %s\n' proto block op GB/s ops/s "p50 us" \
  "p99 us" carrier check
for proto in "${protocols[@]}"; do
  for size in "${sizes[@]}"; do
    for op in write read; do echo "${row[$proto/$size/$op]}"; done
  done
done
echo "(GB/s = 10^9 bytes/s; latency per batch of $batch blocks, submit to all tasks done)"
exit $status
