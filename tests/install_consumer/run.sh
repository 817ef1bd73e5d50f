#!/usr/bin/env bash
# Installs the ferry build in $1 into the prefix $2, then builds and runs a program outside the
# tree against it, twice: with find_package(ferry) and with pkg-config.
set -euo pipefail
build=$1
prefix=$2
here=$(cd "$(dirname "$0")" && pwd)
cxx=${CXX:-c++}

rm -rf "$prefix" "$prefix-consumer"
cmake --install "$build" --prefix "$prefix" >/dev/null

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
