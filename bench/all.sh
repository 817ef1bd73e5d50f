#!/usr/bin/env bash
# Every ferry-against-raw table in one run: bench/tcp.sh, bench/shm.sh (CMA and managed) and
# bench/rdma.sh (when the build has ferry-raw-fabric-baseline, i.e. libfabric was found), each
# against its raw baseline measured in the same minutes. Prints every table (markdown, as in the
# README) and writes every row to one JSON file, so that a regression is one diff away:
#
#   {"date":"...","duration_s":3,"batch":32,"inflight":4,"threads":1,"rows":[
#   {"kind":"throughput","path":"tcp","block":"4K","op":"write","inflight":1,...},
#   ...]}
#
# (row fields: bench/bench-rows.sh). Uses the binaries of an existing build (scripts/demo.sh
# builds build/) and fails, naming it, when one is missing. Exits non-zero when a script failed.
# About 5 minutes with DURATION=3 on the 2-core development VM.
#
#   bench/all.sh
#   DURATION=3 BUILD_DIR=build BENCH_JSON=build/bench-results.json bench/all.sh
#   PATHS="tcp shm" INFLIGHT=4 BLOCK_SIZES="4K 64K 1M 4M" bench/all.sh
#
# DURATION, BLOCK_SIZES, BATCH_SIZE, THREADS, INFLIGHT, LATENCY_BLOCK, LATENCY_DURATION,
# SLICE_SIZE and INITIATOR_FLAGS (tcp) pass through to the scripts; rdma.sh keeps its own
# default sizes (64K 1M 4M) unless RDMA_BLOCK_SIZES is set. PATHS chooses scripts (default
# "tcp shm rdma"). Starts and stops only its own processes, by PID (each script cleans up its own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
json_out=${BENCH_JSON:-$build_dir/bench-results.json}
read -r -a paths <<<"${PATHS:-tcp shm rdma}"
export DURATION=${DURATION:-3} INFLIGHT=${INFLIGHT:-4} BATCH_SIZE=${BATCH_SIZE:-32}
export THREADS=${THREADS:-1} BUILD_DIR=$build_dir SKIP_BUILD=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export BENCH_ROWS=$work/rows.jsonl
# shellcheck source=bench-rows.sh
source "$root/bench/bench-rows.sh"

for program in ferry-bench ferry-raw-tcp-baseline ferry-raw-shm-baseline; do
  if [[ ! -x "$bin/$program" ]]; then
    echo "all.sh: $bin/$program is missing: build $build_dir first (scripts/demo.sh does)," \
      "or set BUILD_DIR" >&2
    exit 1
  fi
done

status=0
notes=()
started=$(date +%s)
for path in "${paths[@]}"; do
  case $path in
    tcp | shm) ;;
    rdma)
      if [[ ! -x "$bin/ferry-raw-fabric-baseline" ]]; then
        notes+=("rdma: skipped ($bin/ferry-raw-fabric-baseline is missing: libfabric was not found at build time)")
        continue
      fi
      ;;
    *)
      echo "all.sh: unknown path '$path' in PATHS (tcp, shm, rdma)" >&2
      exit 2
      ;;
  esac
  echo "==> bench/$path.sh (log: $work/$path.log while it runs)"
  t0=$(date +%s)
  env_sizes=()
  if [[ "$path" == rdma && -n "${RDMA_BLOCK_SIZES:-}" ]]; then
    env_sizes=(BLOCK_SIZES="$RDMA_BLOCK_SIZES")
  elif [[ "$path" == rdma ]]; then
    env_sizes=(-u BLOCK_SIZES)
  fi
  if env "${env_sizes[@]}" "bench/$path.sh" >"$work/$path.log" 2>&1; then
    notes+=("$path: ok in $(($(date +%s) - t0)) s")
  else
    status=1
    notes+=("$path: FAILED after $(($(date +%s) - t0)) s (its last lines are above)")
    echo "all.sh: bench/$path.sh failed; its last lines:" >&2
    tail -n 15 "$work/$path.log" >&2
  fi
  grep -h '^selection: ' "$work/$path.log" >>"$work/selection.txt" || true
done

print_tables
echo
[[ -s "$work/selection.txt" ]] && cat "$work/selection.txt"
printf '%s\n' "${notes[@]}"
echo "total $(($(date +%s) - started)) s; DURATION=$DURATION s per point, batch $BATCH_SIZE," \
  "inflight 1 and $INFLIGHT, $THREADS thread(s); * = aim missed"

mkdir -p "$(dirname "$json_out")"
{
  printf '{"date":"%s","duration_s":%s,"batch":%s,"inflight":%s,"threads":%s,"rows":' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$DURATION" "$BATCH_SIZE" "$INFLIGHT" "$THREADS"
  rows_json
  echo "}"
} >"$json_out"
echo "rows: $json_out"
exit $status
