#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: installs, builds and runs sluice-agent on examples/ with two
# local backends, shows what it programmed, then serves until Ctrl-C, which removes
# everything this script and the agent created.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh --build-only
command -v python3 >/dev/null || apt-get install -y -qq python3 >/dev/null
cmake -S . -B build -G Ninja >/dev/null
cmake --build build --target sluice-agent

work=$(mktemp -d /tmp/sluice-example-XXXXXX)
pids=()
cleanup() {
  trap - EXIT INT TERM
  [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
  echo "example stopped; backends, agent and temp files removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two "pods": HTTP on 127.0.0.2:8080 and 127.0.0.3:8080 (all of 127/8 is local on lo).
for i in 2 3; do
  mkdir -p "$work/pod$i"
  echo "hello from backend 127.0.0.$i" >"$work/pod$i/index.html"
  python3 -m http.server --bind "127.0.0.$i" --directory "$work/pod$i" 8080 >/dev/null 2>&1 &
  pids+=($!)
done

./build/agent/sluice-agent --source=file:examples/ --hostname-override=local \
  --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 &
agent=$!
pids+=("$agent")

for _ in $(seq 100); do
  curl -fs http://127.0.0.1:10256/healthz >/dev/null 2>&1 && break
  kill -0 "$agent" 2>/dev/null || { echo "sluice-agent exited" >&2; exit 1; }
  sleep 0.1
done
echo
echo "== /healthz";         curl -s http://127.0.0.1:10256/healthz; echo
echo "== /proxyMode";       mode=$(curl -s http://127.0.0.1:10249/proxyMode); echo "$mode"
echo "== /debug/services";  curl -s http://127.0.0.1:10249/debug/services
if [[ "$mode" != none ]]; then
  echo "== four requests to the service VIP http://10.96.0.10/"
  for _ in 1 2 3 4; do curl -s --max-time 2 http://10.96.0.10/; done
fi
echo
echo "sluice-agent is running (edit examples/*.yaml to see it follow); Ctrl-C stops and cleans up."
wait "$agent"
