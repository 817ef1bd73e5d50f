#!/usr/bin/env bash
# ferry's file transport against a plain io_uring loop, measured in the same run.
#
# For each operation, block size and queue depth: ferry-raw-file-baseline (one ring, QD I/Os of
# the block size in flight at random block-aligned offsets, O_DIRECT) and ferry-file-bench (the
# same offsets through the facade: a file buffer of an engine whose file transport has that
# queue depth, requests kept in flight as four batches of QD), alternating REPEAT times, each run
# DURATION seconds; the best run of each is kept (this machine is shared and noisy). Prints a
# markdown table with the ratio ferry / raw. Aim (issue 14): >= 0.9x from 64 KiB.
#
# Then one more row per operation, two processes (skipped when ferry-bench is not built): a
# ferry-bench target registers the test file (--target_file) and a ferry-bench initiator on this
# host reads or writes it through the file transport (the path map: it opens the file itself),
# QD requests in flight as four batches of QD/4 (BENCH_BLOCK_SIZE, default 64K; BENCH_QD, default
# the last of QDS), cycling through the first BENCH_WORKING_SET bytes of the file (default 256M;
# the initiator holds as much memory); next to the raw loop at the same block size and QD,
# alternating REPEAT times. ferry-bench walks its working set in order, the raw loop at random
# offsets: that ratio compares access patterns as well as overheads (the table above is the
# like-for-like one).
#
# The file (FILE_SIZE bytes, real data written once, so reads hit the device and not unwritten
# extents) lives in BENCH_DIR (default: the system temp dir; a directory on the device to
# measure, e.g. an NVMe mount). O_DIRECT needs a file system that supports it (not tmpfs
# before Linux 6.6).
#
#   bench/file.sh
#   BENCH_DIR=/mnt/nvme DURATION=3 BLOCK_SIZES="4K 64K 1M" QDS="8 32" OPERATIONS="read write" \
#     REPEAT=3 BUILD_DIR=build bench/file.sh
#   SKIP_BUILD=1 bench/file.sh     # use the binaries already in $BUILD_DIR/bin
#
# Removes only the file it made; exits non-zero when a run failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

duration=${DURATION:-2}
read -r -a sizes <<<"${BLOCK_SIZES:-4K 64K 1M}"
read -r -a qds <<<"${QDS:-8 32}"
read -r -a operations <<<"${OPERATIONS:-read write}"
repeat=${REPEAT:-2}
file_size=${FILE_SIZE:-1G}
build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
bench_dir=${BENCH_DIR:-${TMPDIR:-/tmp}}
run_timeout=$(awk -v d="$duration" 'BEGIN { printf "%d", d + 60 }')

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  echo "==> build ($build_dir)"
  cmake -S . -B "$build_dir" -G Ninja >/dev/null
  cmake --build "$build_dir" --target ferry-file-bench ferry-raw-file-baseline ferry-bench
fi
for program in ferry-file-bench ferry-raw-file-baseline; do
  if [[ ! -x "$bin/$program" ]]; then
    echo "file.sh: $bin/$program is missing (build $build_dir first)" >&2
    exit 1
  fi
done

work=$(mktemp -d "$bench_dir/ferry-file-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
file=$work/data
echo "==> writing a $file_size test file in $bench_dir"
dd if=/dev/urandom of="$file" bs=1M count=$(( $(numfmt --from=iec "$file_size") >> 20 )) \
  conv=fsync status=none

gbps() { sed -n 's/.*"gbps":\([0-9.]*\).*/\1/p'; }
best() { sort -g | tail -1; }

echo
echo "| operation | block | QD | raw io_uring GB/s | ferry file GB/s | ferry / raw |"
echo "|---|---|---|---|---|---|"
status=0
for op in "${operations[@]}"; do
  for size in "${sizes[@]}"; do
    for qd in "${qds[@]}"; do
      raw_runs=()
      ferry_runs=()
      for ((i = 0; i < repeat; i++)); do
        args=(--file="$file" --operation="$op" --block_size="$size" --qd="$qd"
              --duration="$duration")
        if out=$(timeout "$run_timeout" "$bin/ferry-raw-file-baseline" "${args[@]}"); then
          raw_runs+=("$(gbps <<<"$out")")
        else
          echo "file.sh: raw $op $size QD $qd failed" >&2
          status=1
        fi
        if out=$(timeout "$run_timeout" "$bin/ferry-file-bench" "${args[@]}"); then
          ferry_runs+=("$(gbps <<<"$out")")
        else
          echo "file.sh: ferry $op $size QD $qd failed" >&2
          status=1
        fi
      done
      raw=$(printf '%s\n' "${raw_runs[@]:-0}" | best)
      ferry=$(printf '%s\n' "${ferry_runs[@]:-0}" | best)
      ratio=$(awk -v f="$ferry" -v r="$raw" 'BEGIN { if (r > 0) printf "%.2fx", f / r; else print "-" }')
      echo "| $op | $size | $qd | $raw | $ferry | $ratio |"
    done
  done
done

# ferry-bench --target_file: two processes, the initiator reaching the target's file buffer
# through the path map.
if [[ ! -x "$bin/ferry-bench" ]]; then
  echo
  echo "file.sh: $bin/ferry-bench is missing: no two-process row" >&2
  exit $status
fi
bench_size=${BENCH_BLOCK_SIZE:-64K}
bench_qd=${BENCH_QD:-${qds[-1]}}
bench_set=${BENCH_WORKING_SET:-256M}
batch=$(( bench_qd >= 4 ? bench_qd / 4 : 1 ))
inflight=$(( bench_qd / batch ))
target_out=$work/target.out
"$bin/ferry-bench" --mode=target --protocol=file --target_file="$file" --buffer_size="$file_size" \
  --file_queue_depth="$bench_qd" >"$target_out" 2>"$work/target.err" &
target_pid=$!
trap 'kill -TERM "$target_pid" 2>/dev/null || true; wait "$target_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
ready=""
for _ in $(seq 600); do
  ready=$(grep -m1 '^ready ' "$target_out" || true)
  [[ -n "$ready" ]] && break
  kill -0 "$target_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$ready" ]]; then
  echo "file.sh: the ferry-bench target did not start:" >&2
  cat "$work/target.err" >&2
  exit 1
fi
segment=$(sed -n 's/.* segment=\([^ ]*\).*/\1/p' <<<"$ready")
echo
echo "ferry-bench --target_file, two processes ($inflight batches of $batch in flight, in order" \
  "over $bench_set of the file; the raw loop at random offsets):"
echo
echo "| operation | block | QD | raw io_uring GB/s | ferry-bench file GB/s | ferry / raw | I/O |"
echo "|---|---|---|---|---|---|---|"
for op in "${operations[@]}"; do
  raw_runs=()
  ferry_runs=()
  io=""
  for ((i = 0; i < repeat; i++)); do
    if out=$(timeout "$run_timeout" "$bin/ferry-raw-file-baseline" --file="$file" \
      --operation="$op" --block_size="$bench_size" --qd="$bench_qd" --duration="$duration"); then
      raw_runs+=("$(gbps <<<"$out")")
    else
      echo "file.sh: raw $op $bench_size QD $bench_qd failed" >&2
      status=1
    fi
    if out=$(timeout "$run_timeout" "$bin/ferry-bench" --mode=initiator --json --protocol=file \
      --segment_id="$segment" --operation="$op" --block_size="$bench_size" --batch_size="$batch" \
      --inflight="$inflight" --working_set="$bench_set" --buffer_size="$bench_set" \
      --file_queue_depth="$bench_qd" --duration="$duration"); then
      ferry_runs+=("$(gbps <<<"$out")")
      io=$(sed -n 's/.*"file_io":"\([a-z+]*\)".*/\1/p' <<<"$out")
    else
      echo "file.sh: ferry-bench $op $bench_size QD $bench_qd failed" >&2
      status=1
    fi
  done
  raw=$(printf '%s\n' "${raw_runs[@]:-0}" | best)
  ferry=$(printf '%s\n' "${ferry_runs[@]:-0}" | best | awk '{ printf "%.4f", $1 }')
  ratio=$(awk -v f="$ferry" -v r="$raw" 'BEGIN { if (r > 0) printf "%.2fx", f / r; else print "-" }')
  echo "| $op | $bench_size | $bench_qd | $raw | $ferry | $ratio | ${io:--} |"
done
exit $status
