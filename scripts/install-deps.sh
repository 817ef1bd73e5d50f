#!/usr/bin/env bash
# Installs the Debian packages ferry builds and tests with, only those missing. Idempotent and
# non-interactive; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build clang libclang-rt-14-dev pkg-config make
  # libraries
  nlohmann-json3-dev libcpp-httplib-dev libhiredis-dev
  # libcrypto (HMAC-SHA256, random nonces) for the peer authentication
  libssl-dev
  # servers the tests start on 127.0.0.1 (metadata stores)
  etcd-server redis-server
  # tests and benchmarks (iproute2: network namespaces for the locality and fault tests;
  # iptables: the fault tests' partitions, resets and packet loss)
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 iptables
  # the rdma transport (libfabric; its tcp;ofi_rxm provider runs the tests without a NIC)
  libfabric-dev libfabric-bin
  # the file transport (io_uring)
  liburing-dev
  # operations: metrics (prometheus-cpp; Debian's prometheus and promtool check them in the
  # tests), the ferry command's argument parsing, bench/plot.sh's charts
  prometheus-cpp-dev prometheus libcli11-dev gnuplot-nox
  # the Python module (python/) and its tests, for Debian's /usr/bin/python3; venv, pip,
  # setuptools and wheel for the offline `pip install --no-build-isolation ./python`
  pybind11-dev python3-dev python3-pytest python3-numpy python3-torch
  python3-venv python3-pip python3-setuptools python3-wheel
)

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
