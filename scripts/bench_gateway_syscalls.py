#!/usr/bin/env python3
"""System calls and readiness events per proxied query: the gateway beside HAProxy, counted by strace.

About half of a proxy's CPU per query is the kernel's (docs/PERFORMANCE.md), and what the kernel
does for a proxy follows the system calls it makes and the readiness events it is handed. This
counts them. One local 18.16 server (`chstorm local up`). Each subject runs in turn: the gateway
with every function on (bench_gateway_cpu.py's config, `workers: 1`), a second gateway binary with
--b, and HAProxy 2.6 in HTTP mode (`http-reuse always`, one thread). Each gets `wrk -c8` (-t1; -t2
from 64 clients on, --connections N) of `GET /?query=SELECT%201` for 2 s, then strace attaches
(`strace -f -e trace=...` of every thread), `wrk` runs --duration seconds more, and strace
detaches. Printed per query answered in that run: each system call's count, and the events
`epoll_wait` returned. wrk's connections are opened and closed within the run, so their calls
are counted in: `accept4` says how many per query (0.05 with 256 clients), and each brings its
`close`s and `epoll_ctl`s, and the kills of the queries still running when wrk stops. strace
slows every call down, so the time per query here means nothing; the counts are what the proxy
asked of the kernel.

  python3 scripts/bench_gateway_syscalls.py
  python3 scripts/bench_gateway_syscalls.py --connections 256 --a /tmp/chstorm-before --b target/release/chstorm

Needs strace (`EXTRA_PKGS=strace scripts/install-deps`). Writes OUT/gateway_syscalls.json.
"""
import argparse, collections, json, os, re, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import need, scratch_dir  # noqa: E402
from bench_gateway_cpu import one_at_a_time, routed_server, wait_answering, wrk_for  # noqa: E402

# The calls a proxy's request path makes, and its connections' setup and teardown; no other call
# is traced (a health check's `connect`, for one).
TRACED = "read,recvfrom,write,sendto,writev,sendmsg,recvmsg,epoll_wait,epoll_pwait,epoll_ctl,accept4,close"


def load(url, conns, duration):
    """Queries answered in `duration` s of `wrk` (-t2 from 64 clients on)."""
    return wrk_for(url, duration, conns)["requests"]


def counted(cmd, url, args, tmp, name):
    """Runs `cmd`, loads it, and counts its system calls over --duration seconds of load: a row."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{name}.log"), "w"))
    trace = os.path.join(tmp, f"{name}.strace")
    try:
        wait_answering(url, proc, name, "bench_gateway_syscalls", tries=100, pause=0.1)
        load(url, args.connections, 2)
        st = subprocess.Popen(["strace", "-f", "-qq", "-e", f"trace={TRACED}", "-o", trace, "-p", str(proc.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached to every thread
        answered = load(url, args.connections, args.duration)
        st.terminate()
        st.wait()
    finally:
        proc.kill()
        proc.wait()
    calls, events = collections.Counter(), 0
    for line in open(trace):
        m = re.search(r"(?:^|\s)(\w+)\(.*\)\s+=\s+(-?\d+)", line)
        if not m:
            continue
        calls[m.group(1)] += 1
        if m.group(1) in ("epoll_wait", "epoll_pwait") and int(m.group(2)) > 0:
            events += int(m.group(2))
    n = max(answered, 1)
    return {"queries": answered, "per_query": {k: round(v / n, 2) for k, v in sorted(calls.items())},
            "epoll_events_per_query": round(events / n, 2)}


def show(name, row):
    calls = ", ".join(f"{k} {v}" for k, v in row["per_query"].items() if v >= 0.01)
    print(f"  {name:10} per query: {calls}; epoll events {row['epoll_events_per_query']} ({row['queries']} queries)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="target/release/chstorm", help="the gateway's binary (default target/release/chstorm)")
    ap.add_argument("--b", help="a second gateway binary, measured the same way")
    ap.add_argument("--no-peers", action="store_true", help="leave HAProxy out")
    ap.add_argument("--connections", type=int, default=8, help="wrk's clients (default 8)")
    ap.add_argument("--duration", type=int, default=3, help="seconds of load counted per subject (default 3, 1 to 60)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    if not 1 <= args.connections <= 10000 or not 1 <= args.duration <= 60:
        raise SystemExit("bench_gateway_syscalls: --connections must be 1 to 10000 and --duration 1 to 60")
    need("bench_gateway_syscalls", ("strace", "wrk"), "EXTRA_PKGS=strace scripts/install-deps")
    chstorm = os.path.abspath(args.a)
    os.makedirs(args.out, exist_ok=True)
    tmp = scratch_dir("chstorm-syscalls-")
    rows = {}
    with routed_server(chstorm, tmp) as (http_url, native, _):
        binaries = [("gateway", chstorm)] + ([("gateway_b", os.path.abspath(args.b))] if args.b else [])
        for name, cmd, url, _ in one_at_a_time(binaries, not args.no_peers, tmp, http_url, native, "bench_gateway_syscalls"):
            rows[name] = counted(cmd, url, args, tmp, name)
            if name != "haproxy":
                rows[name]["binary"] = cmd[0]
            show(name, rows[name])
    res = {"mode": f"HTTP, wrk -c{args.connections} GET /?query=SELECT%201", "duration_s": args.duration, "rows": rows}
    json.dump(res, open(os.path.join(args.out, "gateway_syscalls.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
