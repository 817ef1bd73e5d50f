#!/usr/bin/env bash
# ctest (label bench): ferry-bench's progress line, --sweep and bench/plot.sh, for real:
#  1. a tcp target on 127.0.0.1 (P2PHANDSHAKE);
#  2. a short sweep against it (tcp, 2 block sizes, the raw tcp baseline before each point):
#     the CSV must have the header and one row per block size, each with ferry's GB/s, the
#     tcp-stream baseline's GB/s and their ratio, and no error;
#  3. bench/plot.sh on that CSV must exit 0 (gnuplot did) and write PNGs (PNG signature, more
#     than 5 KB: axes, lines and titles drawn);
#  4. a 1.3 s initiator on a pseudo-terminal (script(1)) must show the progress line (GB/s,
#     ops/s, errors) on it; the same run with --json must not, nor with stderr in a file.
#   sweep_plot_test.sh <ferry-bench> <folder of ferry-raw-tcp-baseline>
set -euo pipefail
bench=$1
raw_folder=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
target_pid=""
cleanup() {
  if [[ -n "$target_pid" ]] && kill -0 "$target_pid" 2>/dev/null; then
    kill -TERM "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$bench" --mode=target --protocol=tcp --buffer_size=4M >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
ready=""
for _ in $(seq 300); do  # bounded: 30 s
  ready=$(grep -m1 '^ready ' "$work/target.out" || true)
  [[ -n "$ready" ]] && break
  kill -0 "$target_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$ready" ]] || { cat "$work/target.err"; fail "target not ready"; }
segment=$(sed -n 's/.* segment=\([^ ]*\).*/\1/p' <<<"$ready")

timeout 120 "$bench" --mode=initiator --sweep --segment_id="$segment" --protocol=tcp \
  --sweep_block_sizes=4K,16K --batch_size=4 --duration=0.2 --raw_baselines="$raw_folder" \
  --csv="$work/sweep.csv" 2>"$work/sweep.err" || { cat "$work/sweep.err"; fail "sweep failed"; }
cat "$work/sweep.csv"
[[ "$(head -n1 "$work/sweep.csv")" == protocol,operation,block_size,threads,* ]] ||
  fail "no CSV header"
rows=$(awk -F, 'NR > 1 && $1 == "tcp" && $2 == "write" && $7 > 0 && $11 == "tcp-stream" &&
  $12 > 0 && $14 > 0 && $15 == "tcp" && $16 == 0 { print $3 }' "$work/sweep.csv" | tr '\n' ' ')
[[ "$rows" == "4096 16384 " ]] ||
  fail "want a complete tcp row for 4096 and 16384, got '$rows'; the sweep's stderr:
$(cat "$work/sweep.err")"
if grep -q $'\r' "$work/sweep.err"; then fail "progress written to a file (not a terminal)"; fi

"$root/bench/plot.sh" "$work/sweep.csv" "$work/charts" || fail "plot.sh exited $?"
for chart in gbps-write p99-write sweep-write; do
  png=$work/charts/$chart.png
  [[ -f "$png" ]] || fail "$chart.png missing"
  [[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "$chart.png is not a PNG"
  size=$(stat -c %s "$png")
  ((size > 5000)) || fail "$chart.png has only $size bytes"
  echo "$chart.png: $size bytes"
done
# A bad CSV is refused with a message, exit 2.
echo "not,a,sweep" >"$work/bad.csv"
status=0
"$root/bench/plot.sh" "$work/bad.csv" "$work/bad" 2>"$work/bad.err" || status=$?
if ((status != 2)) || ! grep -q "header" "$work/bad.err"; then
  fail "a bad CSV gave exit $status: $(cat "$work/bad.err")"
fi

# On a terminal: the progress line; with --json: none.
run_on_tty() {  # run_on_tty <extra flags...>: the run's terminal output in $work/tty.out
  script -qec "timeout 60 '$bench' --mode=initiator --segment_id='$segment' --block_size=4K \
    --batch_size=4 --duration=1.3 $*" /dev/null >"$work/tty.out" </dev/null ||
    fail "initiator on a terminal failed: $(cat "$work/tty.out")"
}
run_on_tty
grep -Eq $'\r\033\\[K  [0-9]+ s: [0-9.]+ GB/s, [0-9]+ ops/s, 0 error\\(s\\)' "$work/tty.out" ||
  fail "no progress line on a terminal: $(od -c "$work/tty.out" | head -20)"
run_on_tty --json
grep -q '"errors":0' "$work/tty.out" || fail "the --json run printed no JSON line"
if grep -q 'ops/s' "$work/tty.out"; then fail "progress line despite --json"; fi
run_on_tty "2>'$work/stderr.out'"  # stdout on the terminal, stderr into a file
grep -q 'GB/s' "$work/tty.out" || fail "no summary: $(cat "$work/tty.out")"
if grep -q 'ops/s, 0 error' "$work/tty.out" "$work/stderr.out"; then
  fail "progress line with stderr in a file"
fi
echo "sweep_plot_test: ok"
