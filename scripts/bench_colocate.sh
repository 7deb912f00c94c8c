#!/usr/bin/env bash
# The colocate benchmark: an online ClickHouse (a local server started by chstorm) running the
# seed's workload (SELECT * FROM system.numbers LIMIT 10000000 OFFSET 10000000, c=10, native
# protocol) alone, beside 2 offline CPU burners, and beside the same burners isolated with every
# mechanism this machine offers (one row each). Prints the seed's table and checks the targets:
# isolated QPS >= 0.90 x baseline and P99 <= 1.15 x baseline.
#
# The phase sequence runs ROUNDS times, interleaved, and each phase merges its runs, so that other
# work on a shared machine spreads evenly over the phases: 3 rounds x 5 s = 15 s per phase.
#
# Environment: CHSTORM (binary, default target/release/chstorm), OUT (default bench-results),
# DURATION (per phase and round, default 5s), ROUNDS (default 3), OFFLINE_CPUS (default 2).
# Writes OUT/colocate.json (chstorm.colocate.v1) and OUT/colocate.html.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CHSTORM:-target/release/chstorm}
OUT=${OUT:-bench-results}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
OFFLINE_CPUS=${OFFLINE_CPUS:-2}
if [ ! -x "$BIN" ]; then
    cargo build --release -p chstorm
fi
mkdir -p "$OUT"
echo "\$ $BIN colocate --offline-cpus $OFFLINE_CPUS --isolation all -d $DURATION --rounds $ROUNDS --json $OUT/colocate.json --quiet"
"$BIN" colocate --offline-cpus "$OFFLINE_CPUS" --isolation all -d "$DURATION" --rounds "$ROUNDS" --json "$OUT/colocate.json" --quiet
python3 - "$OUT/colocate.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
base = next(p for p in r["phases"] if p["name"] == "baseline")
auto = next((m["name"] for m in r["mechanisms"] if m["available"]), None)
print("targets: isolated QPS >= 0.90 x baseline, P99 <= 1.15 x baseline")
for p in r["phases"]:
    if p["name"] == "baseline":
        continue
    q = p["qps"] / base["qps"] if base["qps"] else float("nan")
    l = p["latency_s"]["p99"] / base["latency_s"]["p99"] if base["latency_s"]["p99"] else float("nan")
    if p["name"] == "isolated":
        verdict = "met" if q >= 0.90 and l <= 1.15 else "MISSED"
    else:
        verdict = "(no isolation: the damage)"
    mech = p["mechanism"] + (" (auto)" if p["mechanism"] == auto else "")
    print(f"  {p['name']:<8} {mech:<22} QPS {q:.2f} x  P99 {l:.2f} x  {verdict}")
EOF
echo "wrote $OUT/colocate.json and $OUT/colocate.html"
