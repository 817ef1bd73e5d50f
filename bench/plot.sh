#!/usr/bin/env bash
# Charts of a ferry-bench sweep (ferry-bench --sweep --csv=FILE, or bench/sweep.sh): PNGs made by
# gnuplot (Debian's gnuplot-nox; the pngcairo terminal, png where a build lacks it).
#
#   bench/plot.sh CSV OUTDIR
#
# For each operation in the CSV (write, read), in OUTDIR:
#   gbps-<op>.png    GB/s against block size (log x)
#   p99-<op>.png     p99 batch latency (us) against block size (log x and y)
#   sweep-<op>.png   both side by side (the README's chart)
# One solid line per transport (per transport and thread count when the sweep ran several), and
# a dashed line of the same colour for each raw baseline measured in the same run (its
# raw_baseline column: tcp-stream, shm-cma, shm-memcpy; the tcp stream has no latency, so it is
# only on the GB/s chart). The titles carry the batch size and batches in flight of the run.
#
# Exits 0 when every chart was written; 2 on a bad CSV or arguments; 1 when gnuplot failed (its
# messages are on stderr).
set -euo pipefail

if (($# != 2)); then
  echo "usage: bench/plot.sh CSV OUTDIR" >&2
  exit 2
fi
csv=$1
out=$2
want_header="protocol,operation,block_size,threads,batch_size,inflight,gbps,ops_per_s,p50_us,"
want_header+="p99_us,raw_baseline,raw_gbps,raw_p99_us,ratio,transport,errors"
if [[ ! -r "$csv" ]]; then
  echo "plot.sh: cannot read $csv" >&2
  exit 2
fi
if [[ "$(head -n1 "$csv" | tr -d '\r')" != "$want_header" ]]; then
  echo "plot.sh: $csv does not start with the header of ferry-bench --sweep:" >&2
  echo "  $want_header" >&2
  exit 2
fi
if (($(wc -l <"$csv") < 2)); then
  echo "plot.sh: $csv has no data rows" >&2
  exit 2
fi
if ! command -v gnuplot >/dev/null; then
  echo "plot.sh: gnuplot is missing (apt-get install gnuplot-nox)" >&2
  exit 1
fi
terminal=pngcairo
gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 || terminal=png
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One data file per operation and series ("<block> <GB/s> <p99 us>" lines, by block size), and
# per operation a list of the series: "<file> <solid|dashed> <colour index> <has p99> <title>".
awk -F, -v dir="$work" '
  NR == 1 { next }
  {
    op = $2; proto = $1; threads = $4
    if (!(op in seen_op)) { seen_op[op] = 1; ops[++nops] = op }
    if (!(proto in colour)) colour[proto] = ++ncolours
    if (!((op SUBSEP threads) in seen_threads)) { seen_threads[op, threads] = 1; nthreads[op]++ }
    rows[NR] = $0
    if (!((op) in setup)) setup[op] = "batch " $5 ", " $6 " in flight"
  }
  END {
    for (r = 2; r <= NR; ++r) {
      if (!(r in rows)) continue
      split(rows[r], f, ",")
      op = f[2]; proto = f[1]; threads = f[4]
      suffix = nthreads[op] > 1 ? " x" threads : ""
      add(op, "ferry " proto suffix, "solid", colour[proto], f[3], f[7], f[10])
      if (f[11] != "") {
        raw_suffix = f[11] == "tcp-stream" ? "" : suffix  # one stream whatever the threads
        add(op, "raw " f[11] raw_suffix, "dashed", colour[proto], f[3], f[12], f[13])
      }
    }
    for (i = 1; i <= nops; ++i) print setup[ops[i]] > (dir "/" ops[i] ".setup")
    for (k = 1; k <= nseries; ++k) {
      split(series[k], s, SUBSEP)
      print file[k], style[k], col[k], (p99[k] ? 1 : 0), s[2] >> (dir "/" s[1] ".series")
    }
    for (i = 1; i <= nops; ++i) print ops[i] > (dir "/ops")
  }
  function add(op, title, st, c, block, gbps, p, key) {
    key = op SUBSEP title
    if (!(key in index_of)) {
      index_of[key] = ++nseries; series[nseries] = key; style[nseries] = st; col[nseries] = c
      file[nseries] = dir "/s" nseries ".dat"
    }
    k = index_of[key]
    if ((k SUBSEP block) in point) return  # a raw point shared by two rows
    point[k, block] = 1
    if (p != "" && p > 0) p99[k] = 1
    print block, gbps, (p == "" ? "NaN" : p) >> file[k]
  }' "$csv"

# xtics: every block size of the sweep, spelled 4K, 64K, 1M.
tics=$(awk -F, 'NR > 1 { print $3 }' "$csv" | sort -n -u | awk '
  { b = $1; t = b
    if (b % 1073741824 == 0) t = b / 1073741824 "G"
    else if (b % 1048576 == 0) t = b / 1048576 "M"
    else if (b % 1024 == 0) t = b / 1024 "K"
    out = out (out == "" ? "" : ", ") "\"" t "\" " b }
  END { print out }')

# plot_lines <op> <column> <p99 only: 1|0>: the gnuplot "plot" arguments of <op>'s series.
plot_lines() {
  local op=$1 column=$2 need_p99=$3 line="" file style colour has_p99 title dash
  while read -r file style colour has_p99 title; do
    sort -n -o "$file" "$file"
    [[ "$need_p99" == 1 && "$has_p99" != 1 ]] && continue
    dash=1
    [[ "$style" == dashed ]] && dash=2
    line+="${line:+, }'$file' using 1:$column with linespoints linecolor $colour dashtype $dash"
    line+=" pointtype $((6 + dash)) linewidth 2 title '$title'"
  done <"$work/$op.series"
  echo "$line"
}

while read -r op; do
  setup=$(cat "$work/$op.setup")
  gbps_plot=$(plot_lines "$op" 2 0)
  p99_plot=$(plot_lines "$op" 3 1)
  common="set logscale x 2; set xtics ($tics); set xlabel 'block size'; set grid;
    set key top left; set offsets graph 0.03, graph 0.03, 0, 0"
  gbps_chart="set title '$op: GB/s by block size ($setup)'; set ylabel 'GB/s (10^9 bytes/s)';
    unset logscale y; set format y '%g'; set yrange [0:*]; plot $gbps_plot"
  p99_chart="set title '$op: p99 batch latency ($setup)'; set ylabel 'p99 latency (us)';
    set yrange [*:*]; set logscale y 10; set format y '%.0f'; plot $p99_plot"
  [[ -n "$p99_plot" ]] || p99_chart="set title '$op: no latency measured'; unset logscale y;
    set yrange [0:1]; plot NaN notitle"
  cat >"$work/$op.gp" <<EOF
set terminal $terminal size 900,560 noenhanced
$common
set output '$out/gbps-$op.png'
$gbps_chart
set output '$out/p99-$op.png'
$p99_chart
set terminal $terminal size 1500,560 noenhanced
set output '$out/sweep-$op.png'
set multiplot layout 1,2
$gbps_chart
$p99_chart
unset multiplot
set output
EOF
  if ! gnuplot "$work/$op.gp" </dev/null; then  # stdin: the loop's list of operations
    echo "plot.sh: gnuplot failed on the $op charts (its messages are above)" >&2
    exit 1
  fi
  echo "plot.sh: $out/gbps-$op.png $out/p99-$op.png $out/sweep-$op.png"
done <"$work/ops"
