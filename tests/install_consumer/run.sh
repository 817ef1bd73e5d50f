#!/usr/bin/env bash
# Installs the ferry build in $1 into the prefix $2, runs the installed tools from the prefix
# without LD_LIBRARY_PATH (their RPATH finds libferry), then builds and runs a program outside
# the tree against it, twice: with find_package(ferry) and with pkg-config.
set -euo pipefail
build=$1
prefix=$2
here=$(cd "$(dirname "$0")" && pwd)
cxx=${CXX:-c++}

rm -rf "$prefix" "$prefix-consumer"
cmake --install "$build" --prefix "$prefix" >/dev/null

# The installed tools start from the prefix alone. ldd names any library the loader cannot find.
for tool in ferry ferry-bench ferry-metadata-server; do
  # grep reads all of ldd's output (no -q: under pipefail an early exit would SIGPIPE ldd and
  # turn a found "not found" into a failed pipeline).
  if ldd "$prefix/bin/$tool" | grep "not found" >&2; then
    echo "install_consumer: $prefix/bin/$tool misses a library" >&2
    exit 1
  fi
  env -u LD_LIBRARY_PATH "$prefix/bin/$tool" --help >/dev/null
done
env -u LD_LIBRARY_PATH "$prefix/bin/ferry" --version
# ...and work: the installed ferry lists the (empty) store of the installed metadata server.
# The server's ready line names its port; it is stopped by its PID.
fifo=$(mktemp -u)
mkfifo "$fifo"
env -u LD_LIBRARY_PATH "$prefix/bin/ferry-metadata-server" --port 0 >"$fifo" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$fifo"' EXIT
read -r -t 20 ready <"$fifo"
port=${ready#ready port=}
listing=$(env -u LD_LIBRARY_PATH "$prefix/bin/ferry" segments \
  --metadata_server="http://127.0.0.1:$port/metadata")
grep -q '^NAME' <<<"$listing"
kill "$server"
wait "$server" || true

cmake -S "$here" -B "$prefix-consumer" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix"
cmake --build "$prefix-consumer"
"$prefix-consumer/consumer"

pcdir=$(dirname "$(find "$prefix" -name ferry.pc | head -n1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs ferry)
# shellcheck disable=SC2086
"$cxx" "$here/main.cc" $flags -o "$prefix-consumer/consumer-pc"
libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=libdir ferry)
LD_LIBRARY_PATH="$libdir" "$prefix-consumer/consumer-pc"
echo "install_consumer: find_package and pkg-config builds both ran"
