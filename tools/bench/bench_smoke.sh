#!/usr/bin/env bash
# ctest smoke run of ferry-bench: a target and two short initiators (read, then write) on
# 127.0.0.1 with P2PHANDSHAKE and --check, so the tool and its ready-line protocol cannot rot.
#   bench_smoke.sh <path to ferry-bench>
set -euo pipefail
bench=$1
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

"$bench" --mode=target --check --buffer_size=4M --protocol=tcp >"$work/out" 2>"$work/err" &
target_pid=$!
ready=""
for _ in $(seq 300); do
  ready=$(grep -m1 '^ready ' "$work/out" || true)
  [[ -n "$ready" ]] && break
  kill -0 "$target_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$ready" ]] || { echo "target not ready"; cat "$work/err"; exit 1; }
segment=$(sed -n 's/.* segment=\([^ ]*\).*/\1/p' <<<"$ready")
addr=$(sed -n 's/.* addr=\([^ ]*\).*/\1/p' <<<"$ready")

for op in read write; do
  json=$(timeout 60 "$bench" --mode=initiator --check --json --protocol=tcp \
    --segment_id="$segment" --target_addr="$addr" --operation="$op" --block_size=16K \
    --batch_size=8 --threads=2 --duration=0.3)
  echo "$json"
  grep -q '"errors":0' <<<"$json"
done

# The target exits 0 on SIGTERM.
kill -TERM "$target_pid"
wait "$target_pid"
target_pid=""
echo "smoke: ok"
