#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages sluice builds and tests with. Idempotent: installs only what is
# missing and runs `apt-get update` only when something must be installed.
set -euo pipefail

# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtimes, which clang only recommends.
build=(build-essential cmake ninja-build pkg-config clang llvm libclang-rt-14-dev libbpf-dev
  bpftool libelf-dev zlib1g-dev libnl-3-dev libnl-route-3-dev libgrpc++-dev protobuf-compiler-grpc
  libprotobuf-dev protobuf-compiler libabsl-dev libgtest-dev libgmock-dev libcurl4-openssl-dev
  libssl-dev libsimdjson-dev libyaml-cpp-dev libcpp-httplib-dev libcap-dev)
tests=(clang-format clang-tidy iproute2 socat curl iperf3 python3 python3-grpcio python3-yaml etcd-server etcd-client openssl procps
  util-linux libcap2-bin)

want=("${build[@]}")
[[ "${1:-}" == "--build-only" ]] || want+=("${tests[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
