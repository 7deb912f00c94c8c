#!/usr/bin/env python3
"""make bench (cache part): what merging identical reads and a 1 s result cache do to a storm of
point lookups with hot keys (docs/GATEWAY.md, "Cache and merging").

The Shopee point lookups on a local 2x2 cluster (`chstorm local up`, the items dataset):
`SELECT * FROM items FINAL WHERE shop_id = {s:zipf(SHOPS,1.1)} AND item_id = {i:uniform(1,ITEMS)}`
through one gateway whose three users differ only in `cache:`: `nocache` (none), `merge`
(`ttl: 0s`: identical reads in flight are merged, nothing is kept) and `cache1s` (`ttl: 1s`). Each
runs closed-loop at the same concurrency, alternating in a balanced order over --reps rounds.
For each run: QPS, P50 and P99 (chstorm bench), the servers' CPU per answered query (the four
clickhouse-server processes' utime + stime from /proc, around the run, over the queries
answered), and the gateway's own count of what reached the servers (its cache metrics: a MISS
is one server query; MERGED and HIT are not).

Everything (servers, gateway, load) runs on this machine. Writes OUT/gateway_cache.json and
prints one figure per line.
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import chstorm_bench, free_port, round_order, scratch_dir, sh, start_gateway  # noqa: E402
from bench_gateway_cpu import cpu_seconds  # noqa: E402

MODES = {"nocache": "", "merge": "    cache: {ttl: 0s}\n", "cache1s": "    cache: {ttl: 1s}\n"}


def server_cpu(pids):
    """utime + stime of the processes `pids`, all their threads, in seconds."""
    return sum(cpu_seconds(pid) for pid in pids)


def cache_counts(gw_url, user):
    """The gateway's (misses, merged, hits) for `user`, from /metrics."""
    text = subprocess.run(["curl", "-sf", "-H", f"X-ClickHouse-User: {user}", f"{gw_url}/metrics"],
                          capture_output=True, text=True, check=True).stdout
    def get(name):
        m = re.search(rf'^chstorm_gateway_cache_{name}_total\{{user="{user}"\}} (\S+)', text, re.M)
        return float(m.group(1)) if m else 0.0
    return get("misses"), get("merged"), get("hits")


def users_yaml(in_flight):
    """The three users, each as the cluster's login, `in_flight` queries of each at once (the rest
    wait in the gateway's queue)."""
    out = ""
    for name, cache in MODES.items():
        out += (f"  - name: {name}\n    password_sha256: \"\"\n    cluster: storm\n    max_concurrency: {in_flight}\n"
                f"    queue_size: 1024\n    queue_max_wait: 10s\n    metrics: true\n{cache}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of the three modes (default 3)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of items (default 1,000,000)")
    ap.add_argument("--shops", type=int, default=100_000, help="the Zipf's range of shop_id (default 100,000)")
    ap.add_argument("--items", type=int, default=100,
                    help="item_id is uniform over 1..ITEMS (default 100: a key space of SHOPS x 100 pairs)")
    ap.add_argument("--concurrency", type=int, default=256, help="clients (default 256)")
    ap.add_argument("--user-concurrency", type=int, default=32,
                    help="each user's max_concurrency: its queries in flight on the servers, the rest queued in the "
                         "gateway (default 32; a 1 s TTL counts from the query's send, so the servers must answer "
                         "within it)")
    ap.add_argument("--chstorm", default="target/release/chstorm")
    args = ap.parse_args()
    chstorm = os.path.abspath(args.chstorm)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = scratch_dir("chstorm-cachebench-")
    cdir = os.path.join(tmp, "cluster")
    procs, results = [], {}
    try:
        topo = json.loads(sh([chstorm, "local", "up", "--shards", "2", "--replicas", "2", "--dir", cdir, "--json"]))
        node = topo["nodes"][0]["http_url"]
        pids = [n["pid"] for n in topo["nodes"]]
        sh([chstorm, "dataset", "load", "items", "--url", node, "--cluster", "storm", "--topology", cdir,
            "--rows", str(args.rows)])
        text = open(topo["gateway_config"]).read()
        text = re.sub(r"listen: 127\.0\.0\.1:\d+", f"listen: 127.0.0.1:{free_port()}", text)
        text = re.sub(r"listen_native: 127\.0\.0\.1:\d+\n", "", text)
        text = text.replace("  max_concurrency: 256\n  queue_size: 1024\n", "  max_concurrency: 1024\n  queue_size: 4096\n", 1)
        text = text.replace("users:\n", "users:\n" + users_yaml(args.user_concurrency), 1)
        cfg = os.path.join(tmp, "gateway.yaml")
        open(cfg, "w").write(text)
        gw, gw_url = start_gateway(chstorm, cfg, os.path.join(out, "gw-cache.log"))
        procs.append(gw)
        base = gw_url.removeprefix("http://")
        q = (f"SELECT * FROM items FINAL WHERE shop_id = {{s:zipf({args.shops},1.1)}} "
             f"AND item_id = {{i:uniform(1,{args.items})}}")
        runs = {m: [] for m in MODES}
        for rnd in range(args.reps):
            for mode in round_order(list(MODES), rnd):
                url = f"http://{mode}:@{base}"
                c0, k0 = server_cpu(pids), cache_counts(gw_url, mode)
                r = chstorm_bench(chstorm, url, ["-q", q, "-c", str(args.concurrency), "-d", f"{args.duration}s"])
                c1, k1 = server_cpu(pids), cache_counts(gw_url, mode)
                misses, merged, hits = (b - a for a, b in zip(k0, k1))
                answered = r["queries"] - r["errors"]
                # What the gateway sent to the servers, of what it was asked in the run (a MISS is a
                # server query; MERGED and HIT are not).
                asked = misses + merged + hits
                server_queries = answered if mode == "nocache" else misses
                lat = r["latency_s"]
                row = {"qps": r["qps"], "queries": r["queries"], "errors": r["errors"], "p50": lat["p50"],
                       "p99": lat["p99"], "server_cpu_us_per_query": (c1 - c0) / max(answered, 1) * 1e6,
                       "server_queries": server_queries, "merged": merged, "hits": hits,
                       "server_share": 1.0 if mode == "nocache" else misses / max(asked, 1)}
                runs[mode].append(row)
                print(f"  {mode:<8} qps {row['qps']:8.1f}  p50 {row['p50']*1e3:7.2f} ms  p99 {row['p99']*1e3:7.2f} ms  "
                      f"server cpu {row['server_cpu_us_per_query']:7.1f} us/query  server queries {server_queries:.0f} "
                      f"({row['server_share']:.3f} of reads)  merged {merged:.0f}  hits {hits:.0f}  answered {answered}  "
                      f"errors {r['errors']}", file=sys.stderr)
        med = lambda m, k: statistics.median(x[k] for x in runs[m])
        share = lambda m: statistics.median(x["server_share"] for x in runs[m])
        results = {"query": q, "rows": args.rows, "concurrency": args.concurrency,
                   "user_concurrency": args.user_concurrency, "duration_s": args.duration,
                   "reps": args.reps, "runs": runs,
                   "summary": {m: {"qps": med(m, "qps"), "p50_ms": med(m, "p50") * 1e3, "p99_ms": med(m, "p99") * 1e3,
                                   "server_cpu_us_per_query": med(m, "server_cpu_us_per_query"),
                                   "server_queries_per_client_query": share(m)} for m in MODES}}
        s = results["summary"]
        lines = [f"cache qps cache1s / nocache = {s['cache1s']['qps'] / s['nocache']['qps']:.2f}",
                 f"cache qps merge / nocache = {s['merge']['qps'] / s['nocache']['qps']:.2f}",
                 f"cache p99_ms nocache {s['nocache']['p99_ms']:.2f} merge {s['merge']['p99_ms']:.2f} "
                 f"cache1s {s['cache1s']['p99_ms']:.2f}",
                 f"cache server_cpu_us_per_query nocache {s['nocache']['server_cpu_us_per_query']:.1f} "
                 f"merge {s['merge']['server_cpu_us_per_query']:.1f} cache1s {s['cache1s']['server_cpu_us_per_query']:.1f}",
                 f"cache server_queries_per_client_query merge {s['merge']['server_queries_per_client_query']:.3f} "
                 f"cache1s {s['cache1s']['server_queries_per_client_query']:.3f}"]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()
        subprocess.call([chstorm, "local", "down", "--dir", cdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    json.dump(results, open(os.path.join(out, "gateway_cache.json"), "w"), indent=2)
    print("\n".join(lines))
    print(f"figures written to {os.path.join(out, 'gateway_cache.json')}")


if __name__ == "__main__":
    main()
