#!/usr/bin/env python3
"""What the shape of the gateway's requests costs the server: `SELECT 1` straight at one server,
as a client sends it and as the gateway sends it.

One local 18.16 server (`chstorm local up`), no proxy. `wrk -t2 -c256` (--connections; -t1 below
64) of `GET /?query=SELECT%201` for --duration seconds in four shapes, alternated --reps times
(each round starts at the next shape):

  plain     as a client sends it
  auth      with the `Authorization: Basic` header the gateway sends (user `default`, no password)
  params    with the parameters the gateway adds: `max_threads=2` and a new `query_id` on every
            request (a wrk Lua `request` function)
  both      the header and the parameters

The server's user+sys CPU is read from /proc/PID/stat around each run: CPU per query = CPU time
/ queries answered. Prints each shape's medians (server µs per query, QPS) and its rounds, and
writes OUT/server_request_shape.json.

  python3 scripts/bench_server_request_shape.py
  python3 scripts/bench_server_request_shape.py --connections 8 --reps 9
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import scratch_dir, sh  # noqa: E402
from bench_gateway_cpu import cpu_seconds  # noqa: E402

AUTH = ["-H", "Authorization: Basic ZGVmYXVsdDo="]  # default:
PARAMS_LUA = """local n = 0
local tag = math.random(1, 1000000000)
request = function()
  n = n + 1
  return wrk.format("GET", "/?query=SELECT%201&max_threads=2&query_id=shape-" .. tag .. "-" .. n)
end
"""


def run(url, pid, extra, conns, duration):
    """(queries per second, server CPU µs per query) of one wrk run with `extra` arguments."""
    threads = 2 if conns >= 64 else 1
    before = cpu_seconds(pid)
    out = sh(["wrk", f"-t{threads}", f"-c{conns}", f"-d{duration}s"] + extra + [f"{url}/?query=SELECT%201"])
    n = max(int(re.search(r"(\d+) requests in", out).group(1)), 1)
    return n / duration, (cpu_seconds(pid) - before) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chstorm", default="target/release/chstorm", help="chstorm, for `local up` (default target/release/chstorm)")
    ap.add_argument("--connections", type=int, default=256, help="wrk's clients (default 256)")
    ap.add_argument("--reps", type=int, default=6, help="rounds of the four shapes (default 6)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per run (default 4)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    if not 1 <= args.connections <= 10000 or not 1 <= args.reps <= 100 or not 1 <= args.duration <= 60:
        raise SystemExit("bench_server_request_shape: --connections 1 to 10000, --reps 1 to 100, --duration 1 to 60")
    if not shutil.which("wrk"):
        raise SystemExit("bench_server_request_shape: no wrk; run scripts/install-deps")
    chstorm = os.path.abspath(args.chstorm)
    os.makedirs(args.out, exist_ok=True)
    tmp = scratch_dir("chstorm-shape-")
    lua = os.path.join(tmp, "params.lua")
    open(lua, "w").write(PARAMS_LUA)
    shapes = {"plain": [], "auth": AUTH, "params": ["-s", lua], "both": AUTH + ["-s", lua]}
    names = list(shapes)
    rounds = {s: [] for s in names}
    sdir = os.path.join(tmp, "server")
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    try:
        for i in range(args.reps):
            for s in names[i % 4:] + names[:i % 4]:
                rounds[s].append(run(info["http_url"], info["pid"], shapes[s], args.connections, args.duration))
    finally:
        subprocess.run([chstorm, "local", "down", "--dir", sdir], capture_output=True)
    res = {"connections": args.connections, "duration_s": args.duration, "shapes": {}}
    for s in names:
        qps, us = [r[0] for r in rounds[s]], [r[1] for r in rounds[s]]
        res["shapes"][s] = {"qps_median": round(statistics.median(qps)), "server_us_per_query_median": round(statistics.median(us), 1),
                            "server_us_per_query_rounds": [round(u) for u in us]}
        print(f"  {s:7} server {statistics.median(us):6.1f} us/query  qps {statistics.median(qps):7.0f}  rounds {[round(u) for u in us]}")
    json.dump(res, open(os.path.join(args.out, "server_request_shape.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
