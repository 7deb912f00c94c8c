#!/usr/bin/env python3
"""make bench (thread budget part): the seed's total_max_threads table, through the gateway.

One local ClickHouse server with the `hits` dataset; the seed's query
  SELECT count(ClientIP) AS total, ResolutionWidth FROM hits GROUP BY ResolutionWidth ORDER BY total DESC LIMIT 100
sent through a chstorm gateway by `chstorm bench`, first by 1 client for N1 queries, then by 20
clients for N20 queries (fixed counts, the same for every row). Rows:
  * static max_threads 1, 2, 4 (and 8, 16 with --all-rows; the client's max_threads setting,
    passed through);
  * the gateway's thread budget, `threads: {total: T, max_per_query: 16, mode: M, max_wait: W}`
    for T in 2, 4 (8, 16), auto and M in grant, queue (W = --max-wait);
  * `default`: the gateway's defaults, a `threads: {}` section with nothing set;
  * `adaptive`: `threads: {total: adaptive}`, everything else default.
Every row runs on a fresh gateway process. The rows are run --reps times, in passes whose order
alternates (forward, backward, ...) so that a slow drift of the shared machine hits every row
alike; each row's times are the median over the passes.

Prints the table in the seed's layout (QPS and time for 1 client, for 20 clients, their total)
and the verdicts `best budget total / best static total`, `default / best static` and
`adaptive / best static` (of the medians, and pass by pass); writes OUT/threads.json.
Everything (server, gateway, load) shares this machine's cores.
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import chstorm_bench, free_port, scratch_dir, sh, start_gateway as start_gateway_with  # noqa: E402

QUERY = "SELECT count(ClientIP) AS total, ResolutionWidth FROM hits GROUP BY ResolutionWidth ORDER BY total DESC LIMIT 100"


def start_gateway(chstorm, server_url, threads, tmp, log):
    """A gateway in front of one server, with a `threads:` section when `threads` is given."""
    cfg = os.path.join(tmp, "gw.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: 127.0.0.1:{free_port()}\nlimits:\n  max_concurrency: 256\nclusters:\n  one:\n"
                f"    shards:\n      - replicas: [{server_url}]\n")
        if threads is not None:
            f.write("    threads:" + ("".join(f"\n      {k}: {v}" for k, v in threads.items()) if threads else " {}") + "\n")
        f.write("users:\n  - name: default\n    cluster: one\n    max_concurrency: 64\n    metrics: true\n")
    return start_gateway_with(chstorm, cfg, log)


def metric(url, name):
    try:
        text = sh(["curl", "-sf", f"{url}/metrics"])
    except subprocess.CalledProcessError:
        return None
    m = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def cpu_times():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def process_cpu_s(pid):
    """CPU seconds (user + system) used so far by process `pid`, or None."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def bench(chstorm, url, clients, n, settings, server_pid=None):
    args = ["-q", QUERY, "-c", str(clients), "-n", str(n), "--warmup", "300ms", "--timeout", "60s"]
    for s in settings:
        args += ["--setting", s]
    b0 = cpu_times()
    s0 = process_cpu_s(server_pid) if server_pid else None
    r = chstorm_bench(chstorm, url, args)
    b1 = cpu_times()
    if r["errors"]:
        raise SystemExit(f"bench_threads: {r['errors']} errors at c={clients} on {url}: {r.get('errors_by_kind')}")
    # Time for exactly n queries (a closed loop may finish a few more than n).
    t = r["duration_s"] * n / max(1, r["queries"])
    busy = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
    s1 = process_cpu_s(server_pid) if server_pid else None
    # The server's CPU time per query: what a setting costs, whatever else the machine runs
    # (the wall times move with the shared machine's load; this moves much less).
    server_cpu_ms = 1000 * (s1 - s0) / max(1, r["queries"]) if s0 is not None and s1 is not None else None
    return {"qps": r["qps"], "time_s": t, "queries": r["queries"], "p50_s": r["latency_s"]["p50"], "p99_s": r["latency_s"]["p99"],
            "machine_cpu_busy": busy, "server_cpu_ms_per_query": server_cpu_ms}


def fmt_ms(v):
    return "-" if v is None else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--rows", type=int, default=3_000_000, help="rows of hits (default 3,000,000)")
    ap.add_argument("--n1", type=int, default=160,
                    help="queries sent by 1 client, per row (default 160: with fewer, two rows of one configuration differ by up to 7 %%)")
    ap.add_argument("--n20", type=int, default=320, help="queries sent by 20 clients, per row (default 320)")
    ap.add_argument("--reps", type=int, default=5, help="passes over all rows (median per row; default 5)")
    ap.add_argument("--all-rows", action="store_true",
                    help="also the rows with 8 and 16 threads or totals (slower than 4 in every run on 2 cores; left out by default to spend the time on passes)")
    ap.add_argument("--max-per-query", type=int, default=16)
    ap.add_argument("--max-wait", default="100ms", help="queue mode's max_wait")
    ap.add_argument("--chstorm", default="target/release/chstorm")
    args = ap.parse_args()
    chstorm = os.path.abspath(args.chstorm)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = scratch_dir("chstorm-threads-")
    sdir = os.path.join(tmp, "server")
    log = os.path.join(out, "threads-gateway.log")
    open(log, "w").close()
    started = time.time()

    sizes = (1, 2, 4, 8, 16) if args.all_rows else (1, 2, 4)
    rows = [{"name": f"max_threads={m}", "kind": "static", "max_threads": m} for m in sizes]
    for mode in ("grant", "queue"):
        for total in [t for t in sizes if t > 1] + ["auto"]:
            rows.append({"name": f"budget {total} {mode}", "kind": "budget", "total": total, "mode": mode})
    # The gateway's defaults (nothing set) and the adaptive total (only it set).
    rows.append({"name": "default", "kind": "default", "threads": {}})
    rows.append({"name": "adaptive", "kind": "adaptive", "threads": {"total": "adaptive"}})
    runs = {r["name"]: [] for r in rows}
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    try:
        server = info["http_url"]
        try:
            server_pid = int(open(os.path.join(sdir, "clickhouse-server.pid")).read().strip())
        except (OSError, ValueError):
            server_pid = None
        sh([chstorm, "dataset", "load", "hits", "--url", server, "--rows", str(args.rows)])
        # Merge the freshly loaded parts now: left to the background, their merges take the
        # cores at random moments of the passes (one such pass ran its last rows 20 % slower).
        sh(["curl", "-sS", "--fail", "--max-time", "600", "--data-binary", "OPTIMIZE TABLE hits FINAL", server])
        parts = sh(["curl", "-sS", "--data-binary", "SELECT count() FROM system.parts WHERE table = 'hits' AND active", server]).strip()
        cores = int(sh(["curl", "-sS", "--data-binary", "SELECT value FROM system.settings WHERE name = 'max_threads'", server]).strip())
        # Warm the caches: a few queries straight to the server.
        sh([chstorm, "bench", "--quiet", "--url", server, "-q", QUERY, "-c", "2", "-n", "40"])
        load_before = os.getloadavg()
        print(f"hits: {parts} active part(s) after OPTIMIZE FINAL; load average {load_before[0]:.1f}", file=sys.stderr)
        for rep in range(args.reps):
            order = rows if rep % 2 == 0 else list(reversed(rows))
            for row in order:
                if row["kind"] == "static":
                    threads, settings = None, [f"max_threads={row['max_threads']}"]
                elif "threads" in row:
                    threads, settings = row["threads"], []
                else:
                    threads = {"total": row["total"], "max_per_query": args.max_per_query, "mode": row["mode"], "max_wait": args.max_wait}
                    settings = []
                gw, url = start_gateway(chstorm, server, threads, tmp, log)
                try:
                    one = bench(chstorm, url, 1, args.n1, settings, server_pid)
                    twenty = bench(chstorm, url, 20, args.n20, settings, server_pid)
                    total_threads = metric(url, "chstorm_gateway_threads_budget")
                finally:
                    gw.send_signal(signal.SIGTERM)
                    gw.wait()
                run = {"c1": one, "c20": twenty, "total_s": one["time_s"] + twenty["time_s"], "budget_total": total_threads}
                runs[row["name"]].append(run)
                print(f"  pass {rep + 1} {row['name']:<22} 1 client {one['qps']:7.1f} qps {one['time_s']:6.2f} s | "
                      f"20 clients {twenty['qps']:7.1f} qps {twenty['time_s']:6.2f} s | total {run['total_s']:6.2f} s | "
                      f"machine busy {one['machine_cpu_busy']:.0%} / {twenty['machine_cpu_busy']:.0%} | server CPU ms/query "
                      f"{fmt_ms(one['server_cpu_ms_per_query'])} / {fmt_ms(twenty['server_cpu_ms_per_query'])}", file=sys.stderr)
        load_after = os.getloadavg()
    finally:
        subprocess.call([chstorm, "local", "down", "--dir", sdir], stdout=subprocess.DEVNULL)

    med = statistics.median
    table = []
    for row in rows:
        rs = runs[row["name"]]
        t1, t20 = med(r["c1"]["time_s"] for r in rs), med(r["c20"]["time_s"] for r in rs)
        entry = dict(row)
        cpu20 = [r["c20"]["server_cpu_ms_per_query"] for r in rs if r["c20"]["server_cpu_ms_per_query"] is not None]
        entry.update({"qps_c1": args.n1 / t1, "time_c1_s": t1, "qps_c20": args.n20 / t20, "time_c20_s": t20, "total_s": t1 + t20,
                      "server_cpu_ms_per_query_c20": med(cpu20) if cpu20 else None,
                      "budget_total": rs[0]["budget_total"], "runs": rs})
        table.append(entry)
    static = [e for e in table if e["kind"] == "static"]
    budget = [e for e in table if e["kind"] in ("budget", "default", "adaptive")]
    by_mode = [e for e in table if e["kind"] == "budget"]
    best_static = min(static, key=lambda e: e["total_s"])
    best_budget = min(budget, key=lambda e: e["total_s"])
    best_by_mode = {m: min((e for e in by_mode if e["mode"] == m), key=lambda e: e["total_s"]) for m in ("grant", "queue")}
    ratio = best_budget["total_s"] / best_static["total_s"]
    default = next(e for e in table if e["kind"] == "default")
    adaptive = next(e for e in table if e["kind"] == "adaptive")
    default_ratio = default["total_s"] / best_static["total_s"]
    adaptive_ratio = adaptive["total_s"] / best_static["total_s"]
    # Pass by pass: each pass's default and adaptive against that pass's best static row.
    passes = []
    for i in range(args.reps):
        bs = min((e for e in static), key=lambda e: e["runs"][i]["total_s"])
        b1 = min((e for e in static), key=lambda e: e["runs"][i]["c1"]["time_s"])
        passes.append({"pass": i + 1, "best_static": bs["name"], "best_static_s": bs["runs"][i]["total_s"],
                       "default_s": default["runs"][i]["total_s"], "adaptive_s": adaptive["runs"][i]["total_s"],
                       "default_over_best_static": default["runs"][i]["total_s"] / bs["runs"][i]["total_s"],
                       "adaptive_over_best_static": adaptive["runs"][i]["total_s"] / bs["runs"][i]["total_s"],
                       "best_static_c1": b1["name"], "best_static_c1_s": b1["runs"][i]["c1"]["time_s"],
                       "default_c1_s": default["runs"][i]["c1"]["time_s"], "adaptive_c1_s": adaptive["runs"][i]["c1"]["time_s"],
                       "default_total_threads": default["runs"][i]["budget_total"],
                       "adaptive_total_threads": adaptive["runs"][i]["budget_total"]})
    # The best any policy that picks one of the static max_threads per load could do: the best
    # static row for 1 client plus the best static row for 20 clients, known after the fact.
    best1 = min(static, key=lambda e: e["time_c1_s"])
    default_c1_ratio = default["time_c1_s"] / best1["time_c1_s"]
    adaptive_c1_ratio = adaptive["time_c1_s"] / best1["time_c1_s"]
    best20 = min(static, key=lambda e: e["time_c20_s"])
    per_load = best1["time_c1_s"] + best20["time_c20_s"]

    lines = [f"hits: {args.rows} rows; 1 client x {args.n1} queries, 20 clients x {args.n20} queries; median of {args.reps} passes; "
             f"server max_threads default {cores} (its cores); budget rows: max_per_query {args.max_per_query}, queue max_wait {args.max_wait}; "
             f"default and adaptive rows: the gateway's defaults",
             "",
             f"{'row':<22} {'QPS 1 client':>12} {'time':>7} {'QPS 20 clients':>15} {'time':>7} {'total time':>11} {'server CPU ms/q (20)':>21}"]
    for e in table:
        lines.append(f"{e['name']:<22} {e['qps_c1']:>12.1f} {e['time_c1_s']:>7.2f} {e['qps_c20']:>15.1f} {e['time_c20_s']:>7.2f} {e['total_s']:>11.2f} "
                     f"{fmt_ms(e['server_cpu_ms_per_query_c20']):>21}")
    lines += ["",
              f"best static: {best_static['name']} {best_static['total_s']:.2f} s; best budget: {best_budget['name']} {best_budget['total_s']:.2f} s; "
              f"best grant: {best_by_mode['grant']['name']} {best_by_mode['grant']['total_s']:.2f} s; best queue: {best_by_mode['queue']['name']} {best_by_mode['queue']['total_s']:.2f} s",
              f"per-load best static: {best1['name']} for 1 client + {best20['name']} for 20 clients = {per_load:.2f} s "
              f"(= {per_load / best_static['total_s']:.3f} x best static: the most a per-load choice among the static rows could gain)",
              f"best budget total / best static total = {ratio:.3f}",
              f"default / best static = {default_ratio:.3f} (1 client: default {default['time_c1_s']:.2f} s / best static {best1['name']} "
              f"{best1['time_c1_s']:.2f} s = {default_c1_ratio:.3f})",
              f"adaptive / best static = {adaptive_ratio:.3f} (1 client: {adaptive_c1_ratio:.3f}; totals at the end of the rows: "
              f"{[r['budget_total'] for r in adaptive['runs']]})"]
    for p in passes:
        lines.append(f"  pass {p['pass']}: best static {p['best_static']} {p['best_static_s']:.2f} s; default {p['default_s']:.2f} s "
                     f"= {p['default_over_best_static']:.3f}; adaptive {p['adaptive_s']:.2f} s = {p['adaptive_over_best_static']:.3f}; "
                     f"1 client: best static {p['best_static_c1']} {p['best_static_c1_s']:.2f} s, default {p['default_c1_s']:.2f} s, "
                     f"adaptive {p['adaptive_c1_s']:.2f} s")
    lines.append(f"machine load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    result = {"query": QUERY, "rows": args.rows, "n1": args.n1, "n20": args.n20, "reps": args.reps, "server_max_threads": cores,
              "max_per_query": args.max_per_query, "max_wait": args.max_wait, "loadavg_before": load_before, "loadavg_after": load_after,
              "elapsed_s": time.time() - started, "table": table, "best_static": best_static["name"], "best_budget": best_budget["name"],
              "best_grant": best_by_mode["grant"]["name"], "best_queue": best_by_mode["queue"]["name"],
              "best_budget_over_best_static": ratio, "per_load_best_static_s": per_load,
              "default_over_best_static": default_ratio, "adaptive_over_best_static": adaptive_ratio,
              "default_c1_over_best_static_c1": default_c1_ratio, "adaptive_c1_over_best_static_c1": adaptive_c1_ratio,
              "passes": passes,
              "per_load_best_static_over_best_static": per_load / best_static["total_s"],
              "best_static_c1": best1["name"], "best_static_c20": best20["name"]}
    json.dump(result, open(os.path.join(out, "threads.json"), "w"), indent=2)
    print("\n".join(lines))
    print(f"figures written to {os.path.join(out, 'threads.json')} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
