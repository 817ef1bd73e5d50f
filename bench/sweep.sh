#!/usr/bin/env bash
# A block-size sweep on one host, as CSV and charts: one ferry-bench target (every transport of
# PROTOCOLS installed, P2PHANDSHAKE, 127.0.0.1) and one ferry-bench --sweep initiator, which for
# each point runs the transport's raw baseline (ferry-raw-tcp-baseline: one loopback stream;
# ferry-raw-shm-baseline --kind=cma: process_vm_writev/readv) and then ferry's run, and writes one
# CSV row; then bench/plot.sh draws the charts.
#
#   bench/sweep.sh [CSV [OUTDIR]]          (default build/sweep.csv, build/sweep)
#   PROTOCOLS=tcp,shm BLOCK_SIZES=4K,16K,64K,256K,1M,4M THREADS=1 OPERATIONS=write \
#     DURATION=1 BATCH_SIZE=32 INFLIGHT=4 BUILD_DIR=build bench/sweep.sh
#   THREADS=1,2 OPERATIONS=write,read bench/sweep.sh   (more points: one line per thread count)
#   PLOT=0 bench/sweep.sh                  (the CSV only)
#
# Uses the binaries of an existing build (ferry-bench and the raw baselines in $BUILD_DIR/bin)
# and fails, naming it, when one is missing. Each point takes about 2 * DURATION seconds plus
# its warm-up. Starts and stops only its own processes, by PID (the trap cleans up on any exit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

csv=${1:-build/sweep.csv}
outdir=${2:-build/sweep}
protocols=${PROTOCOLS:-tcp,shm}
block_list=${BLOCK_SIZES:-4K,16K,64K,256K,1M,4M}
thread_list=${THREADS:-1}
operations=${OPERATIONS:-write}
duration=${DURATION:-1}
batch=${BATCH_SIZE:-32}
inflight=${INFLIGHT:-4}
build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin

for program in ferry-bench ferry-raw-tcp-baseline ferry-raw-shm-baseline; do
  if [[ ! -x "$bin/$program" ]]; then
    echo "sweep.sh: $bin/$program is missing: build $build_dir first (scripts/demo.sh does)," \
      "or set BUILD_DIR" >&2
    exit 1
  fi
done

# shellcheck source=../scripts/lib/bench-target.sh
source "$root/scripts/lib/bench-target.sh"
IFS=, read -r -a sizes <<<"$block_list"
# shellcheck disable=SC2034  # read by target_buffer_bytes: the largest count sizes the buffer
threads=$(tr , '\n' <<<"$thread_list" | sort -n | tail -n1)
start_target --protocol="$protocols" --buffer_size="$(target_buffer_bytes)"
echo "==> target ready: segment $segment ($protocols), buffer at $target_addr"

count() { tr , '\n' <<<"$1" | wc -l; }  # items of a comma list
points=$(($(count "$protocols") * ${#sizes[@]} * $(count "$thread_list") * $(count "$operations")))
sweep_timeout=$(awk -v p="$points" -v d="$duration" 'BEGIN { printf "%d", p * (2 * d + 30) + 60 }')
echo "==> $points point(s), $duration s each (plus the raw baseline's), batch $batch," \
  "$inflight in flight"
mkdir -p "$(dirname "$csv")"
timeout "$sweep_timeout" "$bin/ferry-bench" --mode=initiator --sweep \
  --metadata_server=P2PHANDSHAKE --segment_id="$segment" --target_addr="$target_addr" \
  --sweep_protocols="$protocols" --sweep_block_sizes="$block_list" \
  --sweep_threads="$thread_list" --sweep_operations="$operations" --batch_size="$batch" \
  --inflight="$inflight" --duration="$duration" --raw_baselines="$bin" --csv="$csv"
echo "==> $csv"
if [[ "${PLOT:-1}" != 0 ]]; then
  bench/plot.sh "$csv" "$outdir"
fi
