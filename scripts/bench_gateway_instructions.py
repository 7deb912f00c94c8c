#!/usr/bin/env python3
"""User-space instructions per proxied query: the gateway beside HAProxy, counted by callgrind.

CPU time per query moves by 10 to 25 % between runs on 2 shared cores; an instruction count does
not (two runs of the same binary agree within about 1 %). It leaves out what the kernel does
(about half of a proxy's CPU, and the same for the gateway and HAProxy, docs/PERFORMANCE.md) and
how fast the instructions run, so it is the measure of the proxy's own code, beside the CPU time
of bench_gateway_cpu.py, not instead of it.

One local 18.16 server (`chstorm local up`). Each subject runs under
`valgrind --tool=callgrind` in turn: the gateway with every function on (bench_gateway_cpu.py's
config, `workers: 1`), a second gateway binary with --b, and HAProxy 2.6 in HTTP mode
(`http-reuse always`, one thread). Each gets `wrk -t1 -c8` of `GET /?query=SELECT%201`
(--connections N for N clients, `wrk -t2` from 64 on) for --warm seconds, then callgrind's
counters are zeroed (`callgrind_control -z`), wrk runs --duration seconds more, and the counters
are dumped: instructions / queries answered in that window (the dump is kept as
OUT/callgrind-NAME.out, for `callgrind_annotate`). Every thread of the process counts (the
gateway's health checks too). --cache-sim adds callgrind's cache simulation and reports misses
per query: at the first level (the host's sizes), instruction fetches (I1) and data reads and
writes (D1); and at the second (the host's L2 as the last level callgrind simulates, from
`getconf`; callgrind's own choice would be the L3), the misses that leave the core's own caches.
They cost cycles an instruction count does not show, so they say why CPU time follows
instructions only in part, and why a proxy's cost grows with its clients: the more connections,
the less of each one's memory is still in the core's caches when its next request comes. With
256 clients the counts move more from run to run (about 5 %: the end of each `wrk` run cuts the
requests in flight, and their KILLs fall in the window). With --native, the gateway's native
port and HAProxy in TCP mode in front of the server's native port are measured the same way,
with `chstorm bench -c 8` (-c N).

  python3 scripts/bench_gateway_instructions.py
  python3 scripts/bench_gateway_instructions.py --a /tmp/chstorm-before --b target/release/chstorm
  python3 scripts/bench_gateway_instructions.py --cache-sim --connections 256

Needs valgrind (`EXTRA_PKGS=valgrind scripts/install-deps`). Writes OUT/gateway_instructions.json.
"""
import argparse, glob, json, os, re, shutil, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import need, scratch_dir, sh  # noqa: E402
from bench_gateway_cpu import native_bench, one_at_a_time, routed_server, wait_answering, wrk_for  # noqa: E402


def load(url, native, chstorm, duration, conns):
    """Queries answered in `duration` s: wrk over HTTP (-t2 from 64 clients on), or chstorm bench
    over the native port."""
    if native:
        return native_bench(chstorm, url, duration, conns)["requests"]
    return wrk_for(url, duration, conns)["requests"]


def second_level():
    """`--LL=size,assoc,line` for callgrind: the host's second-level cache (the core's own, as its
    last level), or None where getconf does not know it."""
    vals = []
    for key in ("LEVEL2_CACHE_SIZE", "LEVEL2_CACHE_ASSOC", "LEVEL2_CACHE_LINESIZE"):
        out = subprocess.run(["getconf", key], capture_output=True, text=True).stdout.strip()
        if not out.isdigit() or int(out) == 0:
            return None
        vals.append(out)
    return "--LL=" + ",".join(vals)


def counted(cmd, url, check_url, native, chstorm, args, tmp, name):
    """Runs `cmd` under callgrind: user-space instructions per query over the measured window."""
    out = os.path.join(tmp, f"cg-{name}")
    ll = second_level() if args.cache_sim else None
    sim = ["--cache-sim=yes"] + ([ll] if ll else []) if args.cache_sim else []
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"] + sim + cmd,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{name}.log"), "w"))
    try:
        wait_answering(check_url, proc, name, "bench_gateway_instructions")
        load(url, native, chstorm, args.warm, args.connections)
        sh(["callgrind_control", "-z", str(proc.pid)])
        queries = load(url, native, chstorm, args.duration, args.connections)
        sh(["callgrind_control", "-d", str(proc.pid)])
        dumps = sorted(glob.glob(out + "*"), key=os.path.getmtime)
        text = open(dumps[-1]).read()
        shutil.copyfile(dumps[-1], os.path.join(args.out, f"callgrind-{name}.out"))
        events = re.search(r"^events:\s+(.+)$", text, re.M).group(1).split()
        totals = [int(v) for v in re.search(r"^(?:summary|totals):\s+(.+)$", text, re.M).group(1).split()]
    finally:
        proc.kill()
        proc.wait()
    counts = dict(zip(events, totals))
    ir, n = counts["Ir"], max(queries, 1)
    row = {"queries": queries, "instructions": ir, "per_query": round(ir / n)}
    if args.cache_sim:
        # Misses per query, at the first level and the last: instruction fetches, data reads, data writes.
        row["misses_per_query"] = {e: round(counts[e] / n) for e in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")}
        # The last level callgrind simulated: the host's L2, or its own choice where getconf knows none.
        row["last_level"] = "L2" if ll else "last level"
    return row


def misses(row):
    """The cache misses of a row, as printed after its instructions ('' without --cache-sim)."""
    m = row.get("misses_per_query")
    if not m:
        return ""
    ll = row.get("last_level", "L2")
    return (f"; misses per query: I1 {m['I1mr']:,}, D1 read {m['D1mr']:,}, D1 write {m['D1mw']:,}; "
            f"{ll} instruction {m['ILmr']:,}, {ll} data read {m['DLmr']:,}, {ll} data write {m['DLmw']:,}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="target/release/chstorm", help="the gateway's binary (default target/release/chstorm)")
    ap.add_argument("--b", help="a second gateway binary, measured the same way")
    ap.add_argument("--native", action="store_true", help="the native ports, not HTTP")
    ap.add_argument("--no-peers", action="store_true", help="leave HAProxy out")
    ap.add_argument("--warm", type=int, default=3, help="seconds of load before counting (default 3)")
    ap.add_argument("--duration", type=int, default=6, help="seconds of load counted (default 6)")
    ap.add_argument("--connections", type=int, default=8,
                    help="client connections (default 8; wrk -t2 from 64 on, as bench_gateway_cpu.py's many-client rows)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="also count first-level cache misses per query (callgrind's cache simulation; slower)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    need("bench_gateway_instructions", ("valgrind", "callgrind_control", "wrk"), "EXTRA_PKGS=valgrind scripts/install-deps")
    chstorm = os.path.abspath(args.a)
    os.makedirs(args.out, exist_ok=True)
    tmp = scratch_dir("chstorm-instr-")
    rows = {}
    with routed_server(chstorm, tmp) as (http_url, native, _):
        binaries = [("gateway", chstorm)] + ([("gateway_b", os.path.abspath(args.b))] if args.b else [])
        for name, cmd, check_url, native_url in one_at_a_time(binaries, not args.no_peers, tmp, http_url, native,
                                                              "bench_gateway_instructions"):
            url = native_url if args.native else check_url
            rows[name] = counted(cmd, url, check_url, args.native, chstorm, args, tmp, name)
            if name != "haproxy":
                rows[name]["binary"] = cmd[0]
            print(f"  {name:10} {rows[name]['per_query']:>8,} instructions per query ({rows[name]['queries']} queries){misses(rows[name])}")
    c = args.connections
    mode = f"native, chstorm bench -c {c}" if args.native else f"HTTP, wrk -t{2 if c >= 64 else 1} -c{c} GET /?query=SELECT%201"
    res = {"mode": mode, "connections": c, "warm_s": args.warm, "duration_s": args.duration, "rows": rows}
    if "haproxy" in rows:
        for name in [n for n in rows if n != "haproxy"]:
            res[f"{name}_vs_haproxy"] = round(rows[name]["per_query"] / rows["haproxy"]["per_query"], 3)
            print(f"  {name} / HAProxy ({'TCP' if args.native else 'HTTP'} mode): {res[f'{name}_vs_haproxy']}")
    if "gateway_b" in rows:
        res["b_vs_a"] = round(rows["gateway_b"]["per_query"] / rows["gateway"]["per_query"], 3)
        print(f"  B / A: {res['b_vs_a']}")
    name = "gateway_instructions_native.json" if args.native else "gateway_instructions.json"
    json.dump(res, open(os.path.join(args.out, name), "w"), indent=2)


if __name__ == "__main__":
    main()
