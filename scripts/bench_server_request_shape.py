#!/usr/bin/env python3
"""What the shape of the gateway's requests costs the server: `SELECT 1` straight at one server,
as a client sends it and as the gateway sends it.

One local 18.16 server (`chstorm local up`), no proxy (HAProxy with --via-haproxy). `wrk -t2
-c256` (--connections; -t1 below 64) of `GET /?query=SELECT%201` for --duration seconds in the
shapes --shapes names (default the first four), alternated --reps times (each round in another
order, bench_gateway.round_order):

  plain     as a client sends it
  auth      with the `Authorization: Basic` header the gateway sends (user `default`, no password)
  params    with the parameters the gateway adds: `max_threads=1` (the thread budget's grant
            under a storm) and a new `query_id` on every request (a wrk Lua `request` function)
  both      the header and the parameters
  xuser     the same credentials in the `X-ClickHouse-User` header, which 18.16 and later
            releases accept in place of `Authorization` (no `X-ClickHouse-Key`: the password
            is empty)
  lua       the bare request, made by a wrk Lua `request` function doing the work params' does:
            the control for params and both, whose Lua costs wrk CPU the server shares cores with

The server's user+sys CPU is read from /proc/PID/stat around each run: CPU per query = CPU time
/ queries answered; and its threads' context switches per query (voluntary: a thread waited;
involuntary: it was preempted). Prints each shape's medians (server µs per query, switches, QPS)
and its rounds, each shape's rounds paired with its control's (the median of their own ratios
of the server's CPU per query, its 95 % interval and the sign test's p, as bench_gateway_cpu.py
pairs them; the control is `lua` for params and both when it runs, else plain), and writes OUT/server_request_shape.json (OUT/server_request_shape_haproxy.json
with --via-haproxy).

--via-haproxy sends the shapes through HAProxy in HTTP mode (`http-reuse always`, one
thread, as `bench_gateway_cpu.py` runs it), which passes each request on as it came: whether
the shape of the gateway's requests, rather than the way a proxy passes them on, changes what
the server spends behind a proxy.

  python3 scripts/bench_server_request_shape.py
  python3 scripts/bench_server_request_shape.py --connections 8 --reps 9
  python3 scripts/bench_server_request_shape.py --via-haproxy --reps 7
"""
import argparse, json, os, re, statistics, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import need, round_order, scratch_dir, sh  # noqa: E402
from bench_gateway_cpu import (cpu_seconds, one_at_a_time, paired, paired_text, routed_server,  # noqa: E402
                               thread_figures, threads_now, wait_answering)

WHO = "bench_server_request_shape"
AUTH = ["-H", "Authorization: Basic ZGVmYXVsdDo="]  # default:
XUSER = ["-H", "X-ClickHouse-User: default"]
SHAPES = ("plain", "auth", "params", "both", "xuser", "lua")
PARAMS_LUA = """local n = 0
local tag = math.random(1, 1000000000)
request = function()
  n = n + 1
  return wrk.format("GET", "/?query=SELECT%201&max_threads=1&query_id=shape-" .. tag .. "-" .. n)
end
"""
# The bare request through the same Lua work (the id is made and left out): wrk's own CPU as
# in `params`, which on shared cores the server's CPU per query also feels.
LUA_PLAIN = """local n = 0
local tag = math.random(1, 1000000000)
request = function()
  n = n + 1
  local id = "shape-" .. tag .. "-" .. n
  return wrk.format("GET", "/?query=SELECT%201")
end
"""


def control(shape, names):
    """The shape `shape` is paired with: `lua` for the shapes made by a Lua function (params,
    both) when it runs, else `plain`."""
    return "lua" if shape in ("params", "both") and "lua" in names else "plain"


def run(url, pid, extra, conns, duration):
    """(queries per second, server CPU µs per query, its voluntary and involuntary context
    switches per query) of one wrk run at `url` with `extra` arguments; pid is the server's."""
    threads = 2 if conns >= 64 else 1
    before, t0 = cpu_seconds(pid), threads_now(pid)
    out = sh(["wrk", f"-t{threads}", f"-c{conns}", f"-d{duration}s"] + extra + [f"{url}/?query=SELECT%201"])
    n = max(int(re.search(r"(\d+) requests in", out).group(1)), 1)
    f = thread_figures(t0, threads_now(pid), n)
    return (n / duration, (cpu_seconds(pid) - before) / n * 1e6, f["server_voluntary_switches_per_query"],
            f["server_involuntary_switches_per_query"])


def start_haproxy(tmp, url, native):
    """HAProxy in HTTP mode in front of the server (`one_at_a_time`'s, as bench_gateway_cpu.py runs
    it): (process, its URL)."""
    for name, cmd, proxied, _ in one_at_a_time([], True, tmp, url, native, WHO):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_answering(proxied, proc, name, WHO)
        return proc, proxied
    raise SystemExit(f"{WHO}: HAProxy did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chstorm", default="target/release/chstorm", help="chstorm, for `local up` (default target/release/chstorm)")
    ap.add_argument("--connections", type=int, default=256, help="wrk's clients (default 256)")
    ap.add_argument("--reps", type=int, default=6, help="rounds of the shapes (default 6)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per run (default 4)")
    ap.add_argument("--via-haproxy", action="store_true", help="send the shapes through HAProxy in HTTP mode")
    ap.add_argument("--shapes", default="plain,auth,params,both",
                    help=f"the shapes to alternate, of {', '.join(SHAPES)}; plain first (default plain,auth,params,both)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    if not 1 <= args.connections <= 10000 or not 1 <= args.reps <= 100 or not 1 <= args.duration <= 60:
        raise SystemExit(f"{WHO}: --connections 1 to 10000, --reps 1 to 100, --duration 1 to 60")
    names = [x.strip() for x in args.shapes.split(",") if x.strip()]
    if any(n not in SHAPES for n in names) or len(set(names)) != len(names) or names[:1] != ["plain"]:
        raise SystemExit(f"{WHO}: --shapes: plain first, then any of {', '.join(SHAPES[1:])}, each once "
                         f"(e.g. --shapes plain,auth,xuser)")
    need(WHO, ["wrk", "haproxy"] if args.via_haproxy else ["wrk"])
    chstorm = os.path.abspath(args.chstorm)
    os.makedirs(args.out, exist_ok=True)
    tmp = scratch_dir("chstorm-shape-")
    lua, lua_plain = os.path.join(tmp, "params.lua"), os.path.join(tmp, "plain.lua")
    open(lua, "w").write(PARAMS_LUA)
    open(lua_plain, "w").write(LUA_PLAIN)
    shapes = {"plain": [], "auth": AUTH, "params": ["-s", lua], "both": AUTH + ["-s", lua], "xuser": XUSER,
              "lua": ["-s", lua_plain]}
    rounds = {s: [] for s in names}
    with routed_server(chstorm, tmp) as (url, native, pid):
        haproxy = None
        try:
            if args.via_haproxy:
                haproxy, url = start_haproxy(tmp, url, native)
            for i in range(args.reps):
                for s in round_order(names, i):
                    rounds[s].append(run(url, pid, shapes[s], args.connections, args.duration))
        finally:
            if haproxy:
                haproxy.terminate()
                haproxy.wait()
    res = {"connections": args.connections, "duration_s": args.duration, "via_haproxy": args.via_haproxy, "shapes": {}}
    for s in names:
        med = [statistics.median(r[k] for r in rounds[s]) for k in range(4)]
        us = [round(r[1]) for r in rounds[s]]
        res["shapes"][s] = {"qps_median": round(med[0]), "server_us_per_query_median": round(med[1], 1),
                            "server_us_per_query_rounds": us, "voluntary_switches_per_query": round(med[2], 3),
                            "involuntary_switches_per_query": round(med[3], 3)}
        print(f"  {s:7} server {med[1]:6.1f} us/query  switches {med[2]:.2f} + {med[3]:.2f} preempted  qps {med[0]:7.0f}  rounds {us}")
    for s in names[1:]:
        # Round by round against its control: the server's CPU per query, each round's own ratio.
        against = control(s, names)
        p = paired([{"us": r[1]} for r in rounds[s]], [{"us": r[1]} for r in rounds[against]], "us")
        res["shapes"][s]["server_us_per_query_paired"] = dict(p, against=against)
        print(f"  paired rounds, {s} / {against}: the server's CPU per query, {paired_text(p, 3)}, "
              f"higher in {len(p['rounds']) - p['below_1']} of {len(p['rounds'])}")
    name = "server_request_shape_haproxy.json" if args.via_haproxy else "server_request_shape.json"
    json.dump(res, open(os.path.join(args.out, name), "w"), indent=2)


if __name__ == "__main__":
    main()
