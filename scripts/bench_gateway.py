#!/usr/bin/env python3
"""make bench (gateway part): what the gateway costs and what shard routing gains.

1. SELECT 1 at c=8 against one local server, direct and through the gateway, alternating
   (A B A B): the gateway's QPS as a fraction of direct QPS, and the P50/P99 it adds.
2. Shopee point lookups on a local 2x2 cluster: the same lookups sent through the Distributed
   table (direct to a node), through the gateway without routing (fan-out), and through the
   gateway's shard routing, at the same concurrency: QPS and P50/P90/P99 for each.

Everything runs on this machine (servers, gateway and load), so the figures are for 2 shared
cores. Writes OUT/gateway.json and prints one ratio per line.
"""
import argparse, atexit, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time


def scratch_dir(prefix):
    """A new temporary folder for one benchmark's servers, configs and logs, removed when the
    script exits: normally, by an error, by Ctrl-C or by SIGTERM (which this turns into an exit, so
    that the script's `finally` blocks stop its servers first). Only SIGKILL leaves it behind."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    return path


def round_order(rows, rnd):
    """`rows` in round `rnd`'s order: a balanced Latin square (Williams' design). Every row runs
    in every place, and right after every other row, equally often: over len(rows) rounds when
    the rows are even in number, over twice that when odd. What a row leaves behind (the KILLs
    of the queries cut when `wrk` stops, connections still closing, the server's log flushes) so
    lands on each other row alike; a rotation of one fixed order would leave it on the same
    successor in every round but one in len(rows)."""
    n = len(rows)
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    if n % 2 == 0:
        return [rows[(b + rnd) % n] for b in base]
    seq = [rows[(b + rnd // 2) % n] for b in base]
    return seq if rnd % 2 == 0 else seq[::-1]


def need(who, tools, how="scripts/install-deps"):
    """Exits, as `who`, naming the first of `tools` not on PATH and `how` to install it."""
    for tool in tools:
        if not shutil.which(tool):
            raise SystemExit(f"{who}: no {tool}; run {how}")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def chstorm_bench(chstorm, url, args):
    """Runs `chstorm bench --quiet --url URL ARGS --json FILE` and returns its JSON report (the
    one wrapper of `chstorm bench` for every benchmark script)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        sh([chstorm, "bench", "--quiet", "--url", url] + list(args) + ["--json", f.name])
        return json.load(open(f.name))


def bench(chstorm, url, extra, duration, tmp):
    r = chstorm_bench(chstorm, url, ["-d", f"{duration}s"] + extra)
    l = r["latency_s"]
    return {"qps": r["qps"], "queries": r["queries"], "errors": r["errors"], "p50": l["p50"], "p90": l["p90"], "p99": l["p99"]}


def start_gateway(chstorm, config, log):
    """Starts `chstorm gateway --config config` and waits for its /ping; returns (process, URL)."""
    p = subprocess.Popen([chstorm, "gateway", "--config", config], stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    port = int(re.search(r"listen: 127\.0\.0\.1:(\d+)", open(config).read()).group(1))
    for _ in range(100):
        try:
            if subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/ping"], capture_output=True).returncode == 0:
                return p, f"http://127.0.0.1:{port}"
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"bench: the gateway did not start; see {log}")


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chstorm", default="target/release/chstorm")
    args = ap.parse_args()
    chstorm = os.path.abspath(args.chstorm)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = scratch_dir("chstorm-gwbench-")
    results, lines, procs, dirs = {}, [], [], []
    try:
        # 1. SELECT 1, direct vs through the gateway.
        single = os.path.join(tmp, "gw-single")
        info = json.loads(sh([chstorm, "local", "up", "--dir", single, "--json"]))
        dirs.append(single)
        cfg = os.path.join(tmp, "single.yaml")
        with open(cfg, "w") as f:
            f.write(f"listen: 127.0.0.1:{free_port()}\nclusters:\n  one:\n    shards:\n      - replicas: [{info['http_url']}]\n"
                    "users:\n  - name: default\n    cluster: one\n    max_concurrency: 256\n")
        gw, gw_url = start_gateway(chstorm, cfg, os.path.join(out, "gw-single.log"))
        procs.append(gw)
        runs = {"direct": [], "gateway": []}
        for rnd in range(args.reps):
            for name, url in round_order((("direct", info["http_url"]), ("gateway", gw_url)), rnd):
                r = bench(chstorm, url, ["-q", "SELECT 1", "-c", "8", "--threads", "1"], args.duration, tmp)
                runs[name].append(r)
                print(f"  select1_c8 {name:<8} qps {r['qps']:9.1f}  p50 {r['p50']*1e3:.3f} ms  p99 {r['p99']*1e3:.3f} ms  errors {r['errors']}", file=sys.stderr)
        med = lambda who, k: statistics.median(x[k] for x in runs[who])
        s1 = {"runs": runs, "qps_fraction": med("gateway", "qps") / med("direct", "qps"),
              "added_p50_ms": (med("gateway", "p50") - med("direct", "p50")) * 1e3,
              "added_p99_ms": (med("gateway", "p99") - med("direct", "p99")) * 1e3}
        results["select1_c8"] = s1
        lines += [f"select1_c8 gateway_qps / direct_qps = {s1['qps_fraction']:.3f}",
                  f"select1_c8 added_p50_ms = {s1['added_p50_ms']:.3f}", f"select1_c8 added_p99_ms = {s1['added_p99_ms']:.3f}"]
        gw.terminate(); gw.wait(); procs.remove(gw)

        # 2. Point lookups on a 2x2 cluster.
        cdir = os.path.join(tmp, "gw-cluster")
        topo = json.loads(sh([chstorm, "local", "up", "--shards", "2", "--replicas", "2", "--dir", cdir, "--json"]))
        dirs.append(cdir)
        node = topo["nodes"][0]["http_url"]
        sh([chstorm, "dataset", "load", "items", "--url", node, "--cluster", "storm", "--topology", cdir, "--rows", str(args.rows)])
        shops = max(1, args.rows // 100)
        q = f"SELECT * FROM items FINAL WHERE shop_id = {{s:zipf({shops},1.1)}} AND item_id = {{i:uniform(1,{args.rows})}}"
        routed_cfg = topo["gateway_config"]
        fanout_cfg = os.path.join(tmp, "fanout.yaml")
        text = open(routed_cfg).read()
        # The same gateway without its routing section: every lookup goes through Distributed.
        text = re.sub(r"\n    routing:\n(      .*\n)+", "\n", text)
        text = re.sub(r"listen: 127\.0\.0\.1:\d+", f"listen: 127.0.0.1:{free_port()}", text)
        open(fanout_cfg, "w").write(text)
        gw_r, url_r = start_gateway(chstorm, routed_cfg, os.path.join(out, "gw-routed.log"))
        procs.append(gw_r)
        gw_f, url_f = start_gateway(chstorm, fanout_cfg, os.path.join(out, "gw-fanout.log"))
        procs.append(gw_f)
        c = "16"
        runs = {"distributed_direct": [], "gateway_fanout": [], "gateway_routed": []}
        for rnd in range(args.reps):
            for name, url in round_order((("distributed_direct", node), ("gateway_fanout", url_f), ("gateway_routed", url_r)), rnd):
                r = bench(chstorm, url, ["-q", q, "-c", c], args.duration, tmp)
                runs[name].append(r)
                print(f"  lookups_c{c} {name:<18} qps {r['qps']:8.1f}  p50 {r['p50']*1e3:.2f} ms  p90 {r['p90']*1e3:.2f} ms  "
                      f"p99 {r['p99']*1e3:.2f} ms  errors {r['errors']}", file=sys.stderr)
        med = lambda who, k: statistics.median(x[k] for x in runs[who])
        s2 = {"runs": runs, "concurrency": int(c), "rows": args.rows, "query": q,
              "routed_vs_distributed": med("gateway_routed", "qps") / med("distributed_direct", "qps"),
              "routed_vs_fanout": med("gateway_routed", "qps") / med("gateway_fanout", "qps")}
        results["point_lookups_2x2"] = s2
        lines += [f"point_lookups_2x2 routed_qps / distributed_qps = {s2['routed_vs_distributed']:.2f}",
                  f"point_lookups_2x2 routed_qps / gateway_fanout_qps = {s2['routed_vs_fanout']:.2f}"]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()
        for d in dirs:
            subprocess.call([chstorm, "local", "down", "--dir", d], stdout=subprocess.DEVNULL)
    json.dump(results, open(os.path.join(out, "gateway.json"), "w"), indent=2)
    print("\n".join(lines))
    print(f"figures written to {os.path.join(out, 'gateway.json')}")


if __name__ == "__main__":
    main()
