# shellcheck shell=bash disable=SC2034  # bench_failed is read by the scripts sourcing this file
# Shared by bench/tcp.sh, shm.sh, rdma.sh and all.sh (sourced, not run): result rows as flat
# one-line JSON objects, and the markdown tables printed from them.
#
# A row is one measured point, ferry against its raw baseline from the same run:
#   kind        "throughput" (GB/s at --batch_size blocks per batch) or "latency" (one block,
#               --batch_size=1 --inflight=1, against the raw round trip)
#   path        tcp | shm-cma | shm-managed | rdma
#   block op inflight batch
#   raw_gbps ferry_gbps
#   ratio       throughput: ferry_gbps / raw_gbps (higher is better);
#               latency: ferry p50 / raw p50 (lower is better)
#   ops_per_s p50_us p99_us mean_us      ferry's (per batch; per block in a latency row)
#   raw_p50_us raw_p99_us                the raw round trip's (latency rows)
#   aim         the issue's aim for this point, as text ("" when it has none)
#   met         "yes" | "no" | "" (no aim)
#   transport   what carried ferry's tasks; status "ok" or "failed: <why>"
#
# Needs: $work (a scratch folder), json_field (scripts/lib/bench-target.sh), and for
# throughput_row / latency_row a function run_initiator <ferry-bench flags...> that runs one
# ferry-bench initiator with --json, prints its JSON line and leaves its stderr in
# $work/initiator.err. Provides: rows_file, add_row, throughput_row, latency_row, print_tables,
# rows_json. BENCH_ROWS names the file rows go to (all.sh sets it so that one file collects
# every script's rows); default $work/rows.jsonl. Each *_row sets bench_failed=1 when its ferry
# run failed.

rows_file=${BENCH_ROWS:-$work/rows.jsonl}
touch "$rows_file"
bench_failed=0

# add_row key=value...: appends one row to $rows_file. Values that read as numbers are written
# as numbers, the rest as strings (quotes and backslashes in them become ').
add_row() {
  local out="" kv key value
  for kv in "$@"; do
    key=${kv%%=*}
    value=${kv#*=}
    if [[ "$value" =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then
      out+="${out:+,}\"$key\":$value"
    else
      value=${value//\\/\'}
      value=${value//\"/\'}
      out+="${out:+,}\"$key\":\"$value\""
    fi
  done
  echo "{$out}" >>"$rows_file"
}

# aim_met <ratio> <aim ratio> <higher|lower>: "yes" or "no".
aim_met() {
  awk -v r="$1" -v a="$2" -v d="$3" 'BEGIN {
    ok = (d == "higher") ? (r >= a) : (r <= a); print (ok ? "yes" : "no") }'
}

# throughput_row <path> <block> <op> <inflight> <raw JSON> <aim ratio or ""> <aim text>
#   [ferry-bench flags...]: one ferry-bench run (--operation, --block_size, --inflight added)
#   against the raw baseline's JSON line; adds the row.
throughput_row() {
  local path=$1 size=$2 op=$3 inflight=$4 raw_json=$5 aim=$6 aim_text=$7 json
  shift 7
  local raw_gbps
  raw_gbps=$(json_field "$raw_json" gbps)
  raw_gbps=${raw_gbps:-0}
  if ! json=$(run_initiator --operation="$op" --block_size="$size" --inflight="$inflight" "$@");
  then
    bench_failed=1
    add_row kind=throughput path="$path" block="$size" op="$op" inflight="$inflight" \
      raw_gbps="$raw_gbps" aim="$aim_text" status="failed: $(tail -n1 "$work/initiator.err")"
    return 0
  fi
  local gbps ratio met=""
  gbps=$(json_field "$json" gbps)
  ratio=$(awk -v r="$raw_gbps" -v f="$gbps" 'BEGIN { printf "%.4f", (r > 0 ? f / r : 0) }')
  [[ -n "$aim" ]] && met=$(aim_met "$ratio" "$aim" higher)
  add_row kind=throughput path="$path" block="$size" op="$op" inflight="$inflight" \
    batch="$(json_field "$json" batch_size)" raw_gbps="$raw_gbps" ferry_gbps="$gbps" \
    ratio="$ratio" ops_per_s="$(json_field "$json" ops_per_s)" \
    p50_us="$(json_field "$json" p50_us)" p99_us="$(json_field "$json" p99_us)" \
    mean_us="$(json_field "$json" mean_us)" aim="$aim_text" met="$met" \
    transport="$(json_field "$json" transport)" status=ok
}

# latency_row <path> <block> <op> <raw JSON> <aim: "ratio:<max>", "p50_us:<max>" or "">
#   <aim text> [ferry-bench flags...]: one ferry-bench run in the latency mode (--batch_size=1
#   --inflight=1) against the raw round trip's JSON line (p50_us, p99_us); adds the row.
latency_row() {
  local path=$1 size=$2 op=$3 raw_json=$4 aim=$5 aim_text=$6 json
  shift 6
  local raw_p50 raw_p99
  raw_p50=$(json_field "$raw_json" p50_us)
  raw_p99=$(json_field "$raw_json" p99_us)
  if ! json=$(run_initiator --operation="$op" --block_size="$size" --batch_size=1 --inflight=1 \
      "$@"); then
    bench_failed=1
    add_row kind=latency path="$path" block="$size" op="$op" inflight=1 \
      raw_p50_us="${raw_p50:-0}" aim="$aim_text" status="failed: $(tail -n1 "$work/initiator.err")"
    return 0
  fi
  local p50 ratio met=""
  p50=$(json_field "$json" p50_us)
  ratio=$(awk -v r="${raw_p50:-0}" -v f="$p50" 'BEGIN { printf "%.4f", (r > 0 ? f / r : 0) }')
  case $aim in
    ratio:*) met=$(aim_met "$ratio" "${aim#ratio:}" lower) ;;
    p50_us:*) met=$(aim_met "$p50" "${aim#p50_us:}" lower) ;;
  esac
  add_row kind=latency path="$path" block="$size" op="$op" inflight=1 batch=1 \
    raw_gbps="$(json_field "$raw_json" gbps)" ferry_gbps="$(json_field "$json" gbps)" \
    ratio="$ratio" ops_per_s="$(json_field "$json" ops_per_s)" p50_us="$p50" \
    p99_us="$(json_field "$json" p99_us)" mean_us="$(json_field "$json" mean_us)" \
    raw_p50_us="${raw_p50:-0}" raw_p99_us="${raw_p99:-0}" raw_mean_us="$(json_field "$raw_json" mean_us)" \
    aim="$aim_text" met="$met" transport="$(json_field "$json" transport)" status=ok
}

# print_tables [rows file]: the markdown tables of the rows, one throughput table per path
# and one latency table, in the order the rows came. A row whose aim was missed is marked *.
print_tables() {
  awk '
    function get(line, key,    re, v) {
      re = "\"" key "\":(\"[^\"]*\"|[^,}]*)"
      if (!match(line, re)) return ""
      v = substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
      gsub(/^"|"$/, "", v)
      return v
    }
    function num(v, digits) { return v == "" ? "-" : sprintf("%." digits "f", v) }
    function grouped(v,    s, out) {  # 1234567 -> 1,234,567
      if (v == "") return "-"
      s = sprintf("%.0f", v); out = ""
      while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
      return s out
    }
    {
      kind = get($0, "kind"); path = get($0, "path")
      mark = get($0, "met") == "no" ? " *" : ""
      st = get($0, "status")
      if (kind == "latency") {
        if (st != "ok") {
          lat[++nlat] = sprintf("| %s | %s | %s | %s | %s |", path, get($0, "block"), get($0, "op"), num(get($0, "raw_p50_us"), 1), st)
          next
        }
        lat[++nlat] = sprintf("| %s | %s | %s | %s | %s | %s%s | %s | %s | %s | %s |",
          path, get($0, "block"), get($0, "op"), num(get($0, "raw_p50_us"), 1),
          num(get($0, "p50_us"), 1), num(get($0, "ratio"), 2), mark,
          num(get($0, "raw_p99_us"), 1), num(get($0, "p99_us"), 1), num(get($0, "mean_us"), 1),
          get($0, "aim") == "" ? "-" : get($0, "aim"))
        next
      }
      if (!(path in seen)) { seen[path] = 1; order[++npaths] = path }
      if (st != "ok") {
        line = sprintf("| %s | %s | %s | %s | %s |", get($0, "block"), get($0, "op"), get($0, "inflight"), num(get($0, "raw_gbps"), 3), st)
      } else {
        line = sprintf("| %s | %s | %s | %s | %s | %s%s | %s | %s | %s | %s |",
          get($0, "block"), get($0, "op"), get($0, "inflight"), num(get($0, "raw_gbps"), 3),
          num(get($0, "ferry_gbps"), 3), num(get($0, "ratio"), 2), mark,
          get($0, "aim") == "" ? "-" : get($0, "aim"), grouped(get($0, "ops_per_s")),
          num(get($0, "p50_us"), 1), num(get($0, "p99_us"), 1))
      }
      body[path] = body[path] line "\n"
    }
    END {
      for (i = 1; i <= npaths; ++i) {
        p = order[i]
        printf "\n**%s** (throughput; batches of blocks, inflight = batches in flight per thread)\n\n", p
        print "| block | op | inflight | raw GB/s | ferry GB/s | ratio | aim | ferry ops/s | p50 us | p99 us |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        printf "%s", body[p]
      }
      if (nlat > 0) {
        print "\n**latency** (one block: ferry-bench --batch_size=1 --inflight=1 against the raw round trip)\n"
        print "| path | block | op | raw p50 us | ferry p50 us | p50 ratio | raw p99 us | ferry p99 us | ferry mean us | aim |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        for (i = 1; i <= nlat; ++i) print lat[i]
      }
    }' "${1:-$rows_file}"
}

# rows_json [rows file]: the rows as one JSON array, a row per line.
rows_json() {
  awk 'BEGIN { print "[" } { printf "%s%s", (NR > 1 ? ",\n" : ""), $0 } END { print "\n]" }' \
    "${1:-$rows_file}"
}
