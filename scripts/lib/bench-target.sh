# Shared by scripts/demo.sh and bench/*.sh (sourced, not run): a ferry-bench target in the
# background, killed by PID on exit, a tiny JSON field reader and block-size arithmetic.
# Needs: $bin (the build's bin folder). Provides: $work, start_target, json_field, to_bytes,
# target_buffer_bytes.

work=$(mktemp -d)
target_pid=""
cleanup() {
  if [[ -n "$target_pid" ]] && kill -0 "$target_pid" 2>/dev/null; then
    kill -TERM "$target_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$target_pid" 2>/dev/null || true
    wait "$target_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The value of "key" in a flat one-line JSON object: json_field <json> <key>.
json_field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }

# start_target [ferry-bench target flags...]: starts a P2PHANDSHAKE tcp target on 127.0.0.1 and
# waits (bounded, 30 s) for its ready line; sets target_pid, ready, segment and target_addr.
start_target() {
  # Emptied here: the background job truncates its redirections only once it runs, and until
  # then the file could still show a previous target's ready line.
  : >"$work/target.out"
  "$bin/ferry-bench" --mode=target --protocol=tcp --metadata_server=P2PHANDSHAKE \
    --host=127.0.0.1 "$@" >"$work/target.out" 2>"$work/target.err" &
  target_pid=$!
  ready=""
  for _ in $(seq 300); do
    ready=$(grep -m1 '^ready ' "$work/target.out" || true)
    [[ -n "$ready" ]] && break
    kill -0 "$target_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$ready" ]]; then
    echo "$(basename "$0"): the target did not become ready:" >&2
    cat "$work/target.err" >&2
    exit 1
  fi
  segment=$(sed -n 's/.* segment=\([^ ]*\).*/\1/p' <<<"$ready")
  target_addr=$(sed -n 's/.* addr=\([^ ]*\).*/\1/p' <<<"$ready")
}

# "4K" -> 4096 (K/M/G binary multiples, as ferry-bench reads them).
to_bytes() {
  local n=${1%[KkMmGg]}
  case $1 in
    *[Kk]) echo $((n << 10)) ;;
    *[Mm]) echo $((n << 20)) ;;
    *[Gg]) echo $((n << 30)) ;;
    *) echo "$n" ;;
  esac
}

# The target's buffer for $sizes, $batch, $threads and $inflight (1 when unset): every
# initiator thread's slices of the largest point, one per batch in flight, at least 256 MiB.
target_buffer_bytes() {
  local buffer=$((256 << 20)) size need
  for size in "${sizes[@]}"; do
    need=$(($(to_bytes "$size") * batch * threads * ${inflight:-1}))
    ((need > buffer)) && buffer=$need
  done
  echo "$buffer"
}
