#!/usr/bin/env python3
"""Two gateways side by side: what one change costs the gateway per query.

One local 18.16 server (`chstorm local up`) and two gateways in front of it, A and B: two
chstorm binaries (a build before and after a change), or one binary with two configs. Each
round runs `wrk -t1 -c8 -d4s` of `SELECT 1` through A and through B, A first in one round and
B first in the next (bench_gateway.round_order) (with --native,
`chstorm bench --url clickhouse://... -q 'SELECT 1' -c 8` on their native ports; --connections N
for N clients, `wrk -t2` from 64 on), and reads each
gateway's user+sys CPU from /proc/PID/stat before and after: CPU per query = CPU time /
queries. Alternating in one run on one server keeps the machine's drift out of the comparison,
which separate runs of bench_gateway_cpu.py do not (on 2 shared cores their medians move by
10 % from run to run).

  python3 scripts/bench_gateway_ab.py --a /tmp/chstorm-before --b target/release/chstorm
  python3 scripts/bench_gateway_ab.py --b-config bare          # what the functions cost
  python3 scripts/bench_gateway_ab.py --b-workers 1 --native
  python3 scripts/bench_gateway_ab.py --connections 256 --reps 9 --a /tmp/chstorm-before

Configs: `full` is bench_gateway_cpu.py's gateway with every function on, `bare` its least
configured one. Prints each round and the medians, and writes OUT/gateway_ab.json.
"""
import argparse, json, os, statistics, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import chstorm_bench, free_port, round_order, scratch_dir, sh, start_gateway  # noqa: E402
from bench_gateway_cpu import BARE, CONFIG, cpu_seconds, wrk_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="target/release/chstorm", help="gateway A's binary (default target/release/chstorm)")
    ap.add_argument("--b", default="target/release/chstorm", help="gateway B's binary (default target/release/chstorm)")
    ap.add_argument("--a-config", choices=["full", "bare"], default="full")
    ap.add_argument("--b-config", choices=["full", "bare"], default="full")
    ap.add_argument("--a-workers", type=int, help="gateway A's `workers` (default: its own default)")
    ap.add_argument("--b-workers", type=int, help="gateway B's `workers` (default: its own default)")
    ap.add_argument("--native", action="store_true", help="load the native ports instead of HTTP")
    ap.add_argument("--connections", type=int, default=8,
                    help="client connections (default 8; wrk -t1, or -t2 from 64 on, as bench_gateway_cpu.py's "
                         "many-clients rows run)")
    ap.add_argument("--reps", type=int, default=5, help="rounds, each A and B, in turn first (default 5; medians)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per run (default 4)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sides = [("A", os.path.abspath(args.a), args.a_config, args.a_workers),
             ("B", os.path.abspath(args.b), args.b_config, args.b_workers)]
    for name, binary, _, _ in sides:
        if not os.path.exists(binary):
            raise SystemExit(f"bench_gateway_ab: gateway {name}'s binary {binary} does not exist; "
                             "build it with `cargo build --release -p chstorm`")
    tmp = scratch_dir("chstorm-gwab-")
    sdir = os.path.join(tmp, "server")
    info = json.loads(sh([sides[0][1], "local", "up", "--dir", sdir, "--json"]))
    url, native = info["http_url"], info["native_url"].removeprefix("clickhouse://")
    gws = []
    try:
        sh(["curl", "-sf", url, "--data-binary", "CREATE TABLE t_local (id UInt64) ENGINE = Memory"])
        for name, binary, config, workers in sides:
            port, native_port = free_port(), free_port()
            cfg = os.path.join(tmp, f"gateway-{name}.yaml")
            text = (BARE if config == "bare" else CONFIG).format(port=port, url=url, native_port=native_port,
                                                                 native=native)
            open(cfg, "w").write((f"workers: {workers}\n" if workers else "") + text)
            proc, gw_url = start_gateway(binary, cfg, os.path.join(out, f"gateway-ab-{name}.log"))
            target = f"clickhouse://127.0.0.1:{native_port}" if args.native else gw_url
            gws.append((name, proc, target))
        def run(target, d):
            if args.native:
                return chstorm_bench(sides[0][1], target, ["-q", "SELECT 1", "-c", str(args.connections), "-d", f"{d}s"])
            return wrk_for(target, d, args.connections)

        for _, _, target in gws:
            run(target, 1)  # warm the pools
        rounds = {name: [] for name, _, _ in gws}
        for rnd in range(args.reps):
            for name, proc, target in round_order(gws, rnd):
                c0 = cpu_seconds(proc.pid)
                r = run(target, args.duration)
                queries = r["queries"] if args.native else r["requests"]
                cpu_us = (cpu_seconds(proc.pid) - c0) / max(1, queries) * 1e6
                rounds[name].append({"qps": r["qps"], "cpu_us_per_query": cpu_us})
                print(f"  {name} qps {r['qps']:9.1f}  cpu {cpu_us:.1f} us/query", file=sys.stderr)
        result = {"loadavg": os.getloadavg(), "native": args.native, "reps": args.reps,
                  "connections": args.connections, "sides": {}}
        for name, binary, config, workers in sides:
            qps = statistics.median(x["qps"] for x in rounds[name])
            cpu = statistics.median(x["cpu_us_per_query"] for x in rounds[name])
            result["sides"][name] = {"binary": binary, "config": config, "workers": workers, "median_qps": qps,
                                     "median_cpu_us_per_query": cpu, "rounds": rounds[name]}
            print(f"{name} ({binary}, {config}, workers {workers or 'default'}): "
                  f"median qps {qps:.0f}, cpu {cpu:.1f} us/query")
        a, b = (result["sides"][n]["median_cpu_us_per_query"] for n in "AB")
        paired = [rb["cpu_us_per_query"] / ra["cpu_us_per_query"] for ra, rb in zip(rounds["A"], rounds["B"])]
        result["paired_cpu_ratios"] = paired
        print(f"B / A cpu per query: {b / a:.3f} (the rounds' own ratios: median {statistics.median(paired):.3f}, "
              f"B lower in {sum(r < 1 for r in paired)} of {len(paired)})")
        json.dump(result, open(os.path.join(out, "gateway_ab.json"), "w"), indent=2)
    finally:
        for _, proc, _ in gws:
            proc.kill()
        sh([sides[0][1], "local", "down", "--dir", sdir])


if __name__ == "__main__":
    main()
