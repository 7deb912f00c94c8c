#!/bin/bash
# make profile: a CPU flamegraph of the gateway proxying SELECT 1 (wrk -t1 -c8), as in
# scripts/bench_gateway_cpu.py. Needs perf (Debian's linux-perf, installed by scripts/install-deps)
# and inferno's collapse/flamegraph tools; both are installed here when missing (they are only for
# profiling, so scripts/install-deps leaves them out).
# Usage: scripts/profile_gateway.sh [OUT.svg] [TITLE]
set -euo pipefail
out=${1:-bench-results/gateway-cpu.svg}
title=${2:-"chstorm gateway: SELECT 1 through the gateway, wrk -t1 -c8"}
if ! command -v inferno-collapse-perf >/dev/null; then
  cargo install inferno --version '^0.12' --locked -q
fi
if ! command -v perf >/dev/null; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -q linux-perf >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/bench_gateway_cpu.py --out "$tmp" --reps 1 --duration 10 --idle 10 --no-floors --no-peers --many 0 \
  --gateway-pid-file "$tmp/pid" > "$tmp/bench.out" 2>&1 &
bench=$!
for _ in $(seq 1 300); do [ -s "$tmp/pid" ] && break; sleep 0.1; done
[ -s "$tmp/pid" ] || { echo "profile_gateway: the gateway did not start; see $tmp/bench.out" >&2; exit 1; }
# The script warms up 2 s, runs 10 s direct, then 10 s through the gateway: record 8 s of the latter.
sleep 13.5
perf record -F 1999 --call-graph dwarf,16384 -p "$(cat "$tmp/pid")" -o "$tmp/perf.data" -- sleep 8 2> "$tmp/perf.err"
wait $bench || { cat "$tmp/bench.out" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
perf script -i "$tmp/perf.data" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph --title "$title" > "$out"
grep -E 'us_per_query|qps /' "$tmp/bench.out"
echo "flamegraph written to $out"
