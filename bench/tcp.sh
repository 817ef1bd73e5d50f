#!/usr/bin/env bash
# ferry over TCP against raw loopback TCP, measured in the same run.
#
# For each block size: ferry-raw-tcp-baseline (one blocking send/recv stream, TCP_NODELAY), then
# ferry-bench write and read (a target in the background on 127.0.0.1 with P2PHANDSHAKE, an
# initiator with --json, batches of BATCH_SIZE blocks), drained (--inflight=1: submit, wait for
# the whole batch) and pipelined (--inflight=INFLIGHT batches in flight, as the raw stream keeps
# its bytes in flight). Then the latency rows: one LATENCY_BLOCK write and read
# (--batch_size=1 --inflight=1) against the raw ping-pong (ferry-raw-tcp-baseline --pingpong:
# send the block, wait for a 1-byte answer; for a read, the other way round). Prints markdown
# tables; exits non-zero when a run failed. Aims (issue 13): pipelined >= 1.0x raw at every
# size, latency p50 <= 1.5x the raw round trip.
#
#   bench/tcp.sh
#   DURATION=3 BLOCK_SIZES="4K 64K 1M 4M" BATCH_SIZE=32 THREADS=1 BUILD_DIR=build bench/tcp.sh
#   INFLIGHT=4 LATENCY_BLOCK=4K LATENCY_DURATION=1 bench/tcp.sh
#   INITIATOR_FLAGS="--tcp_payload_checksum=false" bench/tcp.sh   (extra ferry-bench flags)
#   SKIP_BUILD=1 bench/tcp.sh      # use the binaries already in $BUILD_DIR/bin
#   BENCH_ROWS=rows.jsonl bench/tcp.sh   # also append the rows there (bench/all.sh does)
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
bin=$build_dir/bin
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')  # a hung run is a failure

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"
# shellcheck source=bench-rows.sh
source "$root/bench/bench-rows.sh"

# One initiator run against the target (see bench-rows.sh).
run_initiator() {
  # shellcheck disable=SC2086  # INITIATOR_FLAGS is a list of flags
  timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json --protocol=tcp \
    --metadata_server=P2PHANDSHAKE --segment_id="$segment" --target_addr="$target_addr" \
    --batch_size="$batch" --threads="$threads" --duration="$duration" "$@" \
    ${INITIATOR_FLAGS:-} 2>"$work/initiator.err"
}

target_buffer=$(target_buffer_bytes)

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  echo "==> build ($build_dir)"
  scripts/build.sh "$build_dir"
fi
for program in ferry-bench ferry-raw-tcp-baseline; do
  if [[ ! -x "$bin/$program" ]]; then
    echo "tcp.sh: $bin/$program is missing (build $build_dir first, e.g. scripts/demo.sh)" >&2
    exit 1
  fi
done
start_target --buffer_size="$target_buffer"
echo "==> target ready: segment $segment, buffer at $target_addr"
echo "==> $duration s per point, batch $batch, inflight 1 and $inflight, $threads thread(s)"

status=0
for size in "${sizes[@]}"; do
  raw_json=$("$bin/ferry-raw-tcp-baseline" --block_size="$size" --duration="$duration") || {
    echo "tcp.sh: raw baseline failed for $size" >&2
    status=1
    raw_json='{"gbps":0}'
  }
  for op in write read; do
    aim=1.0
    aim_text=">= 1.0"
    [[ "$size" == 4[Kk] || "$size" == 4096 ]] && aim_text=">= 1.0, >= 150,000 ops/s"
    throughput_row tcp "$size" "$op" 1 "$raw_json" "" ""
    if [[ "$inflight" != 1 ]]; then
      throughput_row tcp "$size" "$op" "$inflight" "$raw_json" "$aim" "$aim_text"
    fi
    echo "    $size $op done"
  done
done
if [[ -n "$latency_block" ]]; then
  for op in write read; do
    raw_json=$("$bin/ferry-raw-tcp-baseline" --pingpong --operation="$op" \
      --block_size="$latency_block" --duration="$latency_duration") || {
      echo "tcp.sh: raw ping-pong failed for $latency_block $op" >&2
      status=1
      raw_json='{"p50_us":0}'
    }
    latency_row tcp "$latency_block" "$op" "$raw_json" ratio:1.5 "p50 <= 1.5x raw" \
      --duration="$latency_duration"
    echo "    latency $latency_block $op done"
  done
fi
((bench_failed == 0)) || status=1

print_tables
echo
echo "(GB/s = 10^9 bytes/s; raw = one TCP stream of back-to-back blocks; latency per batch of"
echo " $batch, submit until the initiator saw every task done; * = aim missed. Latency rows:"
echo " raw = send the block, wait for a 1-byte answer (read: the other way round).)"
exit $status
