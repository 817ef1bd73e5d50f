#!/usr/bin/env bash
# The control plane at scale (issue 17): ferry-scale-sim's simulated engines against each real
# metadata store, started here on 127.0.0.1 on free ports and stopped by PID.
#
# For every store (etcd, redis, ferry-metadata-server) and every N in ENGINES (B = BUFFERS
# buffers each, fan-out FANOUT, PROCS worker processes), a fresh store runs one simulation:
# setup (publish), cold openSegment (store fetch), warm openSegment (cache), a steady window
# (STEADY_S; the store's own request count per engine per second, its CPU), register/unregister
# churn (CHURN_S), a restart storm (10% of engines restart at once: time until every engine
# with the segment open sees the new incarnation; requests planned against old incarnations
# refused), and the store's RSS. Then one engine with BIG_BUFFERS buffers, opened by one peer
# (etcd started with --max-request-bytes=8MiB for it: see start_store).
# SHARE=engine (the default) gives each engine its own store client and directory, as
# TransferEngine does (the etcd clients of a process still share one lease and their
# connections, and etcd/redis clients one watch stream, as every process does); SHARE=process
# shares one client and directory per worker process; SHARE="engine process" runs both.
#
# Prints one markdown table per store and writes every row to CSV (default scale.csv).
#
#   bench/scale.sh
#   SCALE_QUICK=1 bench/scale.sh            # a smoke: N=20, short windows (seconds)
#   STORES="etcd" ENGINES="100 1000" SHARE="engine process" bench/scale.sh
#   BUILD_DIR=build CSV=/tmp/scale.csv bench/scale.sh
#
# Exits non-zero when a run failed or counted errors, when an engine did not see a restarted
# peer's new incarnation within the storm's bound, or when a request planned against an old
# incarnation was applied. Aims (issue 17) are marked in the tables, not failed: a shared VM is too noisy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build_dir=${BUILD_DIR:-build}
bin=$build_dir/bin
quick=${SCALE_QUICK:-0}
if [[ "$quick" == 1 ]]; then
  engines=${ENGINES:-20}
  big=${BIG_BUFFERS:-0}
  steady=${STEADY_S:-2}
  churn=${CHURN_S:-1}
else
  engines=${ENGINES:-100 300 1000}
  big=${BIG_BUFFERS:-10000}
  steady=${STEADY_S:-10}
  churn=${CHURN_S:-4}
fi
read -r -a engine_counts <<<"$engines"
read -r -a stores <<<"${STORES:-etcd redis http}"
read -r -a shares <<<"${SHARE:-engine}"
buffers=${BUFFERS:-10}
keys=${KEYS:-2}  # transport keys per buffer (tcp and rdma, as on an RDMA cluster)
fanout=${FANOUT:-8}
procs=${PROCS:-4}
csv=${CSV:-scale.csv}
sim=$bin/ferry-scale-sim
metadata_server=$bin/ferry-metadata-server
for b in "$sim" "$metadata_server"; do
  [[ -x "$b" ]] || { echo "scale.sh: $b is missing; build it first (cmake --build $build_dir)" >&2; exit 1; }
done

# 1,000 engines hold a few thousand connections and threads.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-scale.XXXXXX")
store_pid=""
stop_store() {
  [[ -n "$store_pid" ]] || return 0
  kill -TERM "$store_pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$store_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$store_pid" 2>/dev/null || true
  wait "$store_pid" 2>/dev/null || true
  store_pid=""
}
cleanup() { stop_store; rm -rf "$work"; }
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() {  # port, pid, log
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  echo "scale.sh: the store did not come up on port $1; its log ($3):" >&2
  tail -20 "$3" >&2
  return 1
}

# Starts $1 on a fresh data dir and a free port; sets store_pid, conn, stats_cmd. $2 = "big":
# etcd takes requests up to 8 MiB (--max-request-bytes; its default 1.5 MiB refuses a
# 10,000-buffer descriptor, and the store client says so, naming the flag).
start_store() {
  local kind=$1 dir port log
  local etcd_big=()
  [[ "${2:-}" == big ]] && etcd_big=(--max-request-bytes=$((8 << 20)))
  dir=$(mktemp -d "$work/$kind.XXXX")
  log=$dir/log
  case $kind in
    etcd)
      port=$(free_port)
      local peer
      peer=$(free_port)
      /usr/bin/etcd --name=ferry-scale --data-dir="$dir/data" \
        --listen-client-urls="http://127.0.0.1:$port" --advertise-client-urls="http://127.0.0.1:$port" \
        --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
        --initial-cluster="ferry-scale=http://127.0.0.1:$peer" --log-level=warn --logger=zap "${etcd_big[@]}" \
        >"$log" 2>&1 &
      store_pid=$!
      wait_port "$port" "$store_pid" "$log"
      for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
      conn="etcd://127.0.0.1:$port"
      # Every client request etcd served, unary calls and streams (keep-alives, watches).
      stats_cmd="curl -sf http://127.0.0.1:$port/metrics | awk '/^etcd_server_client_requests_total/ {s += \$2} END {printf \"%d\\n\", s}'"
      ;;
    redis)
      port=$(free_port)
      /usr/bin/redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save "" \
        --appendonly no --daemonize no --maxclients 16000 >"$log" 2>&1 &
      store_pid=$!
      wait_port "$port" "$store_pid" "$log"
      conn="redis://127.0.0.1:$port"
      stats_cmd="redis-cli -p $port info stats | awk -F: '/^total_commands_processed/ {print \$2+0}'"
      ;;
    http)
      # HTTP_DATA=1 gives the server a data file (a journal append and a shared fdatasync per
      # write). Off by default: the tables measure the store's protocol, not this VM's disk.
      local data=()
      [[ "${HTTP_DATA:-0}" == 1 ]] && data=(--data "$dir/metadata.json")
      "$metadata_server" --bind 127.0.0.1 --port 0 "${data[@]}" >"$log" 2>&1 &
      store_pid=$!
      port=""
      for _ in $(seq 200); do
        port=$(sed -n 's/^ready port=\([0-9]*\).*/\1/p' "$log")
        [[ -n "$port" ]] && break
        sleep 0.05
      done
      [[ -n "$port" ]] || { echo "scale.sh: ferry-metadata-server did not start:" >&2; tail "$log" >&2; return 1; }
      conn="http://127.0.0.1:$port/metadata"
      stats_cmd=""  # it keeps no request counter: client-side counts only
      ;;
  esac
}

header_done=0
run_sim() {  # kind share n big
  local kind=$1 share=$2 n=$3 big_n=$4 out
  if [[ "$big_n" -gt 0 ]]; then start_store "$kind" big; else start_store "$kind"; fi
  local p=$procs f=$fanout c=$churn
  local args=(--store "$conn" --engines "$n" --buffers "$buffers" --keys "$keys" --share "$share"
              --steady-s "$steady" --store-pid "$store_pid" --store-stats-cmd "$stats_cmd"
              --label "$kind")
  if [[ "$big_n" -gt 0 ]]; then
    # Engine 0 publishes big_n buffers; engine 1 opens it; engine 0 restarts in the storm.
    p=1 f=1 c=0
    args+=(--big-buffers "$big_n" --storm-fraction 0.5 --request-timeout-ms 20000)
  fi
  args+=(--procs "$p" --fanout "$f" --churn-s "$c")
  [[ $header_done == 0 ]] && args+=(--csv-header)
  if ! out=$(timeout 600 "$sim" "${args[@]}" 2>"$work/sim.log"); then
    echo "scale.sh: ferry-scale-sim failed ($kind, share=$share, N=$n):" >&2
    tail -20 "$work/sim.log" >&2
    stop_store
    return 1
  fi
  stop_store
  if [[ $header_done == 0 ]]; then
    printf '%s\n' "$out" >"$csv"
    header_done=1
  else
    printf '%s\n' "$out" | tail -n 1 >>"$csv"
  fi
}

failed=0
for kind in "${stores[@]}"; do
  for share in "${shares[@]}"; do
    for n in "${engine_counts[@]}"; do
      echo "scale.sh: $kind share=$share N=$n ..." >&2
      run_sim "$kind" "$share" "$n" 0 || failed=1
    done
  done
  if [[ "$big" -gt 0 ]]; then
    echo "scale.sh: $kind one engine with $big buffers ..." >&2
    run_sim "$kind" engine 2 "$big" || failed=1
  fi
done

[[ -f "$csv" ]] || { echo "scale.sh: no run finished" >&2; exit 1; }

# One table per store. Aims: 1,000 engines on etcd: cold p99 <= 20 ms, warm p99 <= 1 us,
# steady <= 1 store request/s per engine; storm: every incarnation seen within 2 s (watching
# stores) or the cache TTL + 2 s (http), 0 applied against an old incarnation.
awk -F, -v failed_file="$work/applied" '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  function v(name) { return $(col[name]) }
  function mark(x, limit) { return (x == "" || x + 0 <= limit) ? x : x " !" }
  {
    store = v("label")
    if (!(store in seen)) { seen[store] = 1; order[++stores] = store }
    big = v("big_buffers") + 0
    lag_limit = (store == "http") ? 7000 : 2000
    steady = v("steady_store_rps_per_engine")
    if (steady + 0 < 0) steady = "n/a"
    line = sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s | %s/%s/%s | %s | %s | %s |",
      (big > 0 ? "1 (+1 with B=" big ")" : v("engines")), v("share"), v("publish_p99_ms"),
      v("cold_p50_ms"), mark(v("cold_p99_ms"), 20), v("warm_p50_us"), mark(v("warm_p99_us"), 1),
      mark(steady, 1), v("steady_client_rps_per_engine"), v("churn_publish_p99_ms"),
      v("storm_pairs_seen"), v("storm_pairs"), mark(v("storm_lag_max_ms"), lag_limit),
      v("storm_planned_old"), v("storm_refused_old"), v("storm_applied_old"),
      v("steady_store_cpu_pct") "/" v("storm_store_cpu_pct"), v("store_rss_peak_mb"),
      v("errors") (v("first_error") == "" ? "" : " (" substr(v("first_error"), 1, 120) ")"))
    rows[store] = rows[store] line "\n"
    if (v("storm_applied_old") + 0 > 0) print "a request planned against an old incarnation was applied (" store ")" > failed_file
    if (v("storm_pairs_seen") + 0 < v("storm_pairs") + 0) print "an engine never saw a new incarnation (" store ")" > failed_file
    if (v("errors") + 0 > 0) print "a run had errors (" store "): " v("first_error") > failed_file
  }
  END {
    for (s = 1; s <= stores; s++) {
      st = order[s]
      printf "\n### %s\n\n", st
      print "| engines | share | publish p99 ms | cold p50 ms | cold p99 ms | warm p50 us | warm p99 us | steady store req/s/engine | steady client req/s/engine | churn publish p99 ms | storm seen/pairs | storm lag max ms | planned old/refused/applied | store CPU % steady/storm | store RSS peak MB | errors |"
      print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      printf "%s", rows[st]
    }
    print "\n(\"!\": misses the aim of issue 17; n/a: the store keeps no request counter)"
  }' "$csv"
echo "scale.sh: rows written to $csv" >&2
if [[ -f "$work/applied" ]]; then
  sed 's/^/scale.sh: /' "$work/applied" >&2
  failed=1
fi
exit "$failed"
