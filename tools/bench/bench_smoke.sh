#!/usr/bin/env bash
# ctest smoke run of ferry-bench, so the tool and its ready-line protocol cannot rot:
#  1. a tcp target and two short tcp initiators (read, then write) on 127.0.0.1 with
#     P2PHANDSHAKE and --check: the read names the target's buffer (--target_addr, from its
#     ready line), the write lets the initiator take the segment's first buffer;
#     Then the pipelined loop: a read with --inflight=3 (each batch position its own slices,
#     every block checked) and a write with --inflight=3 --working_set (the batches cycle
#     through more slices than positions; every byte read back and compared); and the latency
#     mode (--batch_size=1 --inflight=1) once, which must report its latency percentiles. The
#     pipelined runs use one thread: under TSan, two-thread tcp runs stall for io_timeout
#     (tools/bench/CMakeLists.txt).
#  2. a --protocol=auto --managed target: an auto initiator reading (--check) must be carried
#     by shm (two engines on one host), then an shm initiator with its own --managed buffer
#     writing (--check), the latter pipelined (--inflight=2).
#  3. a --target_file target (a file in the temporary directory): file initiators read (--check:
#     the pattern the target wrote into the file) and write (--check: read back and compared),
#     the write pipelined, each carried by file and reporting the file target and its I/O path.
#   bench_smoke.sh <path to ferry-bench>
set -euo pipefail
bench=$1
work=$(mktemp -d)
target_pid=""
stop_target() {
  if [[ -n "$target_pid" ]] && kill -0 "$target_pid" 2>/dev/null; then
    kill -TERM "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
  fi
  target_pid=""
}
cleanup() {
  stop_target
  rm -rf "$work"
}
trap cleanup EXIT

# start_target <flags...>: sets target_pid, segment and addr (for --target_addr) once the ready
# line is there.
# Each target writes files of its own: the shell opens (and truncates) a background job's
# redirections only once the job runs, so a shared file could still show the previous target's
# ready line.
targets=0
start_target() {
  targets=$((targets + 1))
  local out="$work/out.$targets" err="$work/err.$targets"
  "$bench" --mode=target --check --buffer_size=4M "$@" >"$out" 2>"$err" &
  target_pid=$!
  ready=""
  for _ in $(seq 300); do
    ready=$(grep -m1 '^ready ' "$out" 2>/dev/null || true)
    [[ -n "$ready" ]] && break
    kill -0 "$target_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$ready" ]] || { echo "target not ready"; cat "$err"; exit 1; }
  segment=$(sed -n 's/.* segment=\([^ ]*\).*/\1/p' <<<"$ready")
  addr=$(sed -n 's/.* addr=\([^ ]*\).*/\1/p' <<<"$ready")
}

# run_initiator <want transport> <flags...>: one short --check run that must end without errors
# and be carried by <want>; leaves its JSON line in $json. Without --target_addr among the
# flags it writes to / reads from the first buffer the target's segment publishes.
run_initiator() {
  local want=$1
  shift
  json=$(timeout 60 "$bench" --mode=initiator --check --json --segment_id="$segment" \
    --block_size=16K --batch_size=8 --threads=2 --duration=0.3 "$@")
  echo "$json"
  grep -q '"errors":0' <<<"$json"
  grep -q "\"transport\":\"$want\"" <<<"$json" || { echo "want transport $want"; exit 1; }
}

start_target --protocol=tcp
run_initiator tcp --protocol=tcp --operation=read --target_addr="$addr"
run_initiator tcp --protocol=tcp --operation=read --inflight=3 --threads=1 --target_addr="$addr"
run_initiator tcp --protocol=tcp --operation=write
# 1 thread * 3 positions * 8 blocks of 16K = 384K a round; 2M rounds down to five rounds.
run_initiator tcp --protocol=tcp --operation=write --inflight=3 --threads=1 --working_set=2M
grep -q '"inflight":3,"working_set":1966080,' <<<"$json" || { echo "want working_set 1966080"; exit 1; }
run_initiator tcp --protocol=tcp --operation=write --batch_size=1 --inflight=1 --threads=1
grep -Eq '"batch_size":1,.*"inflight":1,.*"p50_us":[1-9][0-9.]*,"p99_us":[1-9][0-9.]*,"mean_us":[1-9]' \
  <<<"$json" || { echo "want latency percentiles"; exit 1; }
# The target exits 0 on SIGTERM.
kill -TERM "$target_pid"
wait "$target_pid"
target_pid=""

start_target --protocol=auto --managed
run_initiator shm --protocol=auto --operation=read
run_initiator shm --protocol=shm --managed --operation=write --inflight=2 --threads=1
kill -TERM "$target_pid"
wait "$target_pid"
target_pid=""

start_target --protocol=tcp --target_file="$work/target.bin"
grep -q " file=$work/target.bin" <<<"$ready" || { echo "want file= in the ready line"; exit 1; }
run_initiator file --protocol=file --operation=read
grep -Eq '"target":"file","file_io":"[a-z+]+"' <<<"$json" || { echo "want a file target"; exit 1; }
run_initiator file --protocol=file --operation=write --inflight=2 --threads=1
grep -Eq '"target":"file","file_io":"[a-z+]+"' <<<"$json" || { echo "want a file target"; exit 1; }
kill -TERM "$target_pid"
wait "$target_pid"
target_pid=""
echo "smoke: ok"
