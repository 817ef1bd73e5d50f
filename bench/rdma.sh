#!/usr/bin/env bash
# ferry over rdma (libfabric one-sided RMA) against raw libfabric, measured in the same run.
#
# Two targets in the background on 127.0.0.1: ferry-bench (--protocol=rdma, P2PHANDSHAKE) and
# ferry-raw-fabric-baseline (plain fi_write/fi_read target, same provider). For each block size
# and for write and read: the raw initiator keeps BATCH_SIZE operations in flight, then the
# ferry-bench initiator submits batches of BATCH_SIZE blocks, drained (--inflight=1: waits for
# each batch) and pipelined (--inflight=INFLIGHT batches in flight). Then the latency rows: one
# LATENCY_BLOCK write and read (--batch_size=1 --inflight=1) against the raw --inflight=1 (one
# fi_write/fi_read, then wait for its completion). Prints markdown tables of GB/s and ferry/raw
# ratios; exits non-zero when a run failed. Aim (issue 13): pipelined >= 0.9x raw from 64K.
#
#   bench/rdma.sh
#   INFLIGHT=4 LATENCY_BLOCK=4K LATENCY_DURATION=1 bench/rdma.sh
#   BENCH_ROWS=rows.jsonl bench/rdma.sh   # also append the rows there (bench/all.sh does)
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
inflight=${INFLIGHT:-4}
latency_block=${LATENCY_BLOCK:-4K}
latency_duration=${LATENCY_DURATION:-$(awk -v d="$duration" 'BEGIN { print (d < 1 ? d : 1) }')}
provider=${PROVIDER:-tcp;ofi_rxm}
host=${HOST:-127.0.0.1}
build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"
# shellcheck source=bench-rows.sh
source "$root/bench/bench-rows.sh"

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
if [[ ! -x "$bin/ferry-bench" ]]; then
  echo "rdma.sh: $bin/ferry-bench is missing (build $build_dir first, e.g. scripts/demo.sh)" >&2
  exit 1
fi

# One ferry-bench initiator against the ferry target (see bench-rows.sh).
run_initiator() {
  timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json --protocol=rdma \
    --rdma_provider="$provider" --host="$host" --metadata_server=P2PHANDSHAKE \
    --segment_id="$segment" --target_addr="$target_addr" --batch_size="$batch" \
    --threads="$threads" --duration="$duration" ${SLICE_SIZE:+--slice_size="$SLICE_SIZE"} \
    "$@" 2>"$work/initiator.err"
}
# One raw initiator against the raw target: raw_initiator <flags...>; prints its JSON line.
raw_initiator() {
  timeout "$run_timeout" "$bin/ferry-raw-fabric-baseline" --mode=initiator "${raw_target[@]}" \
    --provider="$provider" --host="$host" "$@" 2>"$work/raw_init.err"
}

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
echo "==> $duration s per point, batch (= raw operations in flight) $batch, inflight 1 and" \
  "$inflight, $threads thread(s)"

status=0
for size in "${sizes[@]}"; do
  for op in write read; do
    raw_json=$(raw_initiator --operation="$op" --block_size="$size" --inflight="$batch" \
      --duration="$duration") || {
      echo "rdma.sh: raw baseline failed for $size $op: $(tail -n1 "$work/raw_init.err")" >&2
      status=1
      raw_json='{"gbps":0}'
    }
    throughput_row rdma "$size" "$op" 1 "$raw_json" "" ""
    if [[ "$inflight" != 1 ]]; then
      aim=""
      aim_text=""
      if (($(to_bytes "$size") >= 65536)); then
        aim=0.9
        aim_text=">= 0.9"
      fi
      throughput_row rdma "$size" "$op" "$inflight" "$raw_json" "$aim" "$aim_text"
    fi
    echo "    $size $op done"
  done
done
if [[ -n "$latency_block" ]]; then
  for op in write read; do
    raw_json=$(raw_initiator --operation="$op" --block_size="$latency_block" --inflight=1 \
      --duration="$latency_duration") || {
      echo "rdma.sh: raw round trip failed for $latency_block $op: $(tail -n1 "$work/raw_init.err")" >&2
      status=1
      raw_json='{"p50_us":0}'
    }
    latency_row rdma "$latency_block" "$op" "$raw_json" "" "" --duration="$latency_duration"
    echo "    latency $latency_block $op done"
  done
fi
((bench_failed == 0)) || status=1

print_tables
echo
echo "(GB/s = 10^9 bytes/s; * = aim missed; raw keeps $batch operations in flight, ferry keeps"
echo " 1 or $inflight batches of $batch in flight; latency per ferry batch, submit until the"
echo " initiator saw every task done. Latency rows: raw = one fi_write/fi_read, then its"
echo " completion.)"
exit $status
