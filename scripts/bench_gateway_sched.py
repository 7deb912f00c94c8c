#!/usr/bin/env python3
"""Who wakes and who preempts the server's threads behind a proxy: the gateway and HAProxy in
front of one 18.16 server under many keep-alive clients, with the scheduler's events recorded.

One local server (`chstorm local up`), the gateway (--gateway, `workers: 1`, the config of
bench_gateway_cpu.py) and HAProxy in HTTP mode, each in turn under `wrk -t2 -c256 -d3s` of
`SELECT 1` (--connections, --duration), alternated --reps times, each round in another order
(bench_gateway.round_order). During each run `perf record -a -e sched:sched_switch -e
sched:sched_wakeup` records every switch and wake-up on the machine. Per query answered:

  woken by server   a server thread woken by another server thread (work handed over inside it)
  woken by proxy    a server thread woken by the proxy (a request written to its connection)
  preempted         a server thread switched out while it could still run
  by server         ... in favour of another server thread
  by proxy          ... in favour of the proxy's thread
  by log flush      ... in favour of one of its log-flushing threads (named SystemLogFlush)
  log flush woken   a log-flushing thread woken (a waiting one is woken by the next row a
                    finished query leaves for query_log or query_thread_log)

18.16 serves each HTTP connection on a thread of its own, so these say how a proxy's way of
handing requests on makes the server's threads take turns. Prints each row's medians and the
gateway's rounds against HAProxy's, and writes OUT/gateway_sched.json. Needs perf (Debian's
linux-perf: `EXTRA_PKGS=linux-perf scripts/install-deps`) and the right to trace the whole
machine (root, or kernel.perf_event_paranoid <= -1).

  python3 scripts/bench_gateway_sched.py --gateway target/pgo/release/chstorm
"""
import argparse, collections, json, os, re, statistics, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import need, round_order, scratch_dir  # noqa: E402
from bench_gateway_cpu import (LOG_FLUSH_THREAD, one_at_a_time, paired, routed_server,  # noqa: E402
                               wait_answering, wrk_many)

EVENT = re.compile(r"\s*(.+?)\s+(\d+)\s+sched:(sched_\w+):\s+(.*)")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.+?) next_pid=(\d+)")
WAKEUP = re.compile(r"comm=(.+?) pid=(\d+)")
KEYS = ("woken_by_server", "woken_by_proxy", "preempted", "preempted_by_server", "preempted_by_proxy",
        "preempted_by_log_flush", "log_flush_woken")


def tids(pid):
    return set(os.listdir(f"/proc/{pid}/task")) if pid else set()


def count(trace, server, proxy, requests):
    """KEYS per query from `perf script` output, for the server's and the proxy's thread ids."""
    n = collections.Counter()
    for line in trace.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        _, tid, event, rest = m.groups()
        if event == "sched_wakeup":
            woken = WAKEUP.search(rest)
            if woken and woken.group(2) in server:
                n["woken_by_server" if tid in server else "woken_by_proxy" if tid in proxy else "woken_by_other"] += 1
                n["log_flush_woken"] += woken.group(1) == LOG_FLUSH_THREAD
        elif event == "sched_switch":
            s = SWITCH.search(rest)
            if s and s.group(1) in server and s.group(2).startswith("R"):
                n["preempted"] += 1
                nxt = s.group(4)
                n["preempted_by_server" if nxt in server else "preempted_by_proxy" if nxt in proxy else "preempted_by_other"] += 1
                n["preempted_by_log_flush"] += nxt in server and s.group(3) == LOG_FLUSH_THREAD
    return {k: n[k] / max(1, requests) for k in KEYS}


def run(url, server_pid, proxy_pid, conns, duration, data):
    """One wrk run at url under `perf record`: KEYS per query, and the QPS."""
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup",
                             "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # perf is recording
    try:
        r = wrk_many(url, duration, conns)
    finally:
        perf.send_signal(2)
        err = perf.communicate(timeout=60)[1]
    if perf.returncode not in (0, -2, 130):
        raise SystemExit(f"bench_gateway_sched: perf record failed ({perf.returncode}): {err.decode(errors='replace')[:300]}")
    trace = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,event,trace"], capture_output=True,
                           text=True, timeout=300).stdout
    os.remove(data)
    return {"qps": r["qps"], **count(trace, tids(server_pid), tids(proxy_pid), r["requests"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", default="target/release/chstorm", help="the gateway's chstorm (default target/release/chstorm)")
    ap.add_argument("--chstorm", default="target/release/chstorm", help="chstorm, for `local up` (default target/release/chstorm)")
    ap.add_argument("--connections", type=int, default=256, help="wrk's keep-alive clients (default 256)")
    ap.add_argument("--reps", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--duration", type=int, default=3, help="seconds per run (default 3)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    if not 2 <= args.connections <= 10000 or not 1 <= args.reps <= 50 or not 1 <= args.duration <= 30:
        raise SystemExit("bench_gateway_sched: --connections 2 to 10000, --reps 1 to 50, --duration 1 to 30")
    need("bench_gateway_sched", ["perf"], "EXTRA_PKGS=linux-perf scripts/install-deps")
    need("bench_gateway_sched", ["wrk", "haproxy"])
    os.makedirs(args.out, exist_ok=True)
    tmp = scratch_dir("chstorm-sched-")
    procs, rows, runs = [], [], {}
    with routed_server(os.path.abspath(args.chstorm), tmp) as (url, native, server):
        try:
            binaries = [("gateway", os.path.abspath(args.gateway))]
            for name, cmd, u, _ in one_at_a_time(binaries, True, tmp, url, native, "bench_gateway_sched"):
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(p)
                wait_answering(u, p, name, "bench_gateway_sched")
                wrk_many(u, 1, args.connections)
                rows.append((name, u, p.pid))
            rows.append(("direct", url, None))
            runs = {name: [] for name, _, _ in rows}
            for rnd in range(args.reps):
                for name, u, pid in round_order(rows, rnd):
                    r = run(u, server, pid, args.connections, args.duration, os.path.join(tmp, "perf.data"))
                    runs[name].append(r)
                    print(f"  {name:<8} qps {r['qps']:7.0f}  " + "  ".join(f"{k} {r[k]:.3f}" for k in KEYS), file=sys.stderr)
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    res = {"wrk": f"wrk -t2 -c{args.connections} -d{args.duration}s", "reps": args.reps, "runs": runs,
           "rows": {n: {k: statistics.median(r[k] for r in rs) for k in ("qps",) + KEYS} for n, rs in runs.items()}}
    if "haproxy" in runs:
        # Pairs only what happens at least once per 100 queries behind HAProxy: rarer, a ratio says nothing.
        res["paired"] = {k: paired(runs["gateway"], runs["haproxy"], k) for k in KEYS
                         if all(r[k] >= 0.01 for r in runs["haproxy"])}
    json.dump(res, open(os.path.join(args.out, "gateway_sched.json"), "w"), indent=2)
    print("per query (medians):")
    for n, r in res["rows"].items():
        print(f"  {n:<8} qps {r['qps']:7.0f}  " + "  ".join(f"{k} {r[k]:.3f}" for k in KEYS))
    for k, p in res.get("paired", {}).items():
        print(f"paired rounds, the gateway / HAProxy, {k}: median {p['median']:.2f}, lower in {p['below_1']} of "
              f"{len(p['rounds'])}")
    print(f"figures written to {os.path.join(args.out, 'gateway_sched.json')}")


if __name__ == "__main__":
    main()
