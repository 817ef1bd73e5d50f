#!/usr/bin/env bash
# ferry over rdma (libfabric one-sided RMA) against raw libfabric, measured in the same run.
#
# Two targets in the background on 127.0.0.1: ferry-bench (--protocol=rdma, P2PHANDSHAKE) and
# ferry-raw-fabric-baseline (plain fi_write/fi_read target, same provider). For each block size
# and for write and read: the raw initiator keeps BATCH_SIZE operations in flight, then the
# ferry-bench initiator submits batches of BATCH_SIZE blocks. Prints one table of GB/s and
# ferry/raw ratios; exits non-zero when a run failed.
#
#   bench/rdma.sh
#   PROVIDER="verbs;ofi_rxm" HOST=10.0.0.1 DURATION=5 BLOCK_SIZES="64K 1M 4M" bench/rdma.sh
#   SLICE_SIZE=4M bench/rdma.sh      # the engine's slice size (ferry-bench --slice_size)
#   SKIP_BUILD=1 BUILD_DIR=build bench/rdma.sh        (use an existing build)
#
# HOST is where both targets listen and is used for IP-addressed providers (tcp); it defaults to
# 127.0.0.1. Starts and stops only its own processes, by PID; the trap cleans up on any exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

duration=${DURATION:-3}
read -r -a sizes <<<"${BLOCK_SIZES:-64K 1M 4M}"
batch=${BATCH_SIZE:-32}
threads=${THREADS:-1}
provider=${PROVIDER:-tcp;ofi_rxm}
host=${HOST:-127.0.0.1}
build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"

raw_pid=""
stop_raw() {
  if [[ -n "$raw_pid" ]] && kill -0 "$raw_pid" 2>/dev/null; then
    kill -TERM "$raw_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$raw_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$raw_pid" 2>/dev/null || true
    wait "$raw_pid" 2>/dev/null || true
  fi
}
trap 'stop_raw; cleanup' EXIT

target_buffer=$(target_buffer_bytes)

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  echo "==> build ($build_dir)"
  scripts/build.sh "$build_dir"
fi
if [[ ! -x "$bin/ferry-raw-fabric-baseline" ]]; then
  echo "rdma.sh: $bin/ferry-raw-fabric-baseline is missing (libfabric not found at build time?)" >&2
  exit 1
fi

# The raw target: its ready line carries the flags its initiator needs.
"$bin/ferry-raw-fabric-baseline" --mode=target --provider="$provider" --host="$host" \
  --buffer_size="$target_buffer" >"$work/raw.out" 2>"$work/raw.err" &
raw_pid=$!
raw_ready=""
for _ in $(seq 300); do
  raw_ready=$(grep -m1 '^ready ' "$work/raw.out" || true)
  [[ -n "$raw_ready" ]] && break
  kill -0 "$raw_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$raw_ready" ]]; then
  echo "rdma.sh: the raw libfabric target did not become ready:" >&2
  cat "$work/raw.err" >&2
  exit 1
fi
read -r -a raw_target <<<"${raw_ready#ready }"

start_target --protocol=rdma --rdma_provider="$provider" --host="$host" \
  --buffer_size="$target_buffer"
echo "==> provider $provider on $host; ferry target $segment, buffer at $target_addr"
echo "==> $duration s per point, batch (= raw operations in flight) $batch, $threads thread(s)"

status=0
rows=()
for size in "${sizes[@]}"; do
  for op in write read; do
    raw_json=$(timeout "$run_timeout" "$bin/ferry-raw-fabric-baseline" --mode=initiator \
      "${raw_target[@]}" --provider="$provider" --host="$host" --operation="$op" \
      --block_size="$size" --inflight="$batch" --duration="$duration" 2>"$work/raw_init.err") || {
      echo "rdma.sh: raw baseline failed for $size $op: $(tail -n1 "$work/raw_init.err")" >&2
      status=1
      raw_json='{"gbps":0}'
    }
    raw_gbps=$(json_field "$raw_json" gbps)
    if json=$(timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json --protocol=rdma \
        --rdma_provider="$provider" --host="$host" --metadata_server=P2PHANDSHAKE \
        --segment_id="$segment" --target_addr="$target_addr" --operation="$op" \
        --block_size="$size" --batch_size="$batch" --threads="$threads" \
        --duration="$duration" ${SLICE_SIZE:+--slice_size="$SLICE_SIZE"} \
        2>"$work/initiator.err"); then
      rows+=("$(awk -v s="$size" -v op="$op" -v raw="$raw_gbps" -v f="$(json_field "$json" gbps)" \
        -v p50="$(json_field "$json" p50_us)" -v p99="$(json_field "$json" p99_us)" \
        -v via="$(json_field "$json" transport)" 'BEGIN {
          printf "%-6s %-5s %9.3f %10.3f %6.2f %10.1f %10.1f  %s",
                 s, op, raw, f, (raw > 0 ? f / raw : 0), p50, p99, via }')")
    else
      status=1
      rows+=("$(printf '%-6s %-5s %9.3f  FAILED: %s' "$size" "$op" "$raw_gbps" \
        "$(tail -n1 "$work/initiator.err")")")
    fi
    echo "    $size $op done"
  done
done

echo
printf '%-6s %-5s %9s %10s %6s %10s %10s  %s\n' block op "raw GB/s" "ferry GB/s" ratio \
  "p50 us" "p99 us" via
printf '%s\n' "${rows[@]}"
echo "(GB/s = 10^9 bytes/s; raw keeps $batch operations in flight, ferry submits batches of" \
  "$batch and waits for each; latency per ferry batch)"
exit $status
