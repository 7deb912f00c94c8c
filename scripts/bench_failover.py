#!/usr/bin/env python3
"""make bench (failover part): what a hung or restarting replica costs a client of the gateway.

A local 2x2 cluster (`chstorm local up --shards 2 --replicas 2`) with the items dataset, and the
gateway that `local up` generates (its gateway_config) as a process. Routed point lookups (the
query of bench_gateway.py) go through the gateway in an OPEN loop (`chstorm bench --rate R -c 64
--timeout 5s`), so a stall shows in the latencies instead of slowing the sender. After a 3 s
unmeasured warm-up (the gateway's per-try deadline follows observed latencies), three runs:

  steady   12 s, nothing happens: the reference.
  hang     12 s; 3 s in, replica 1.1's clickhouse-server gets SIGSTOP, and SIGCONT 3 s later
           (a frozen VM, a stalled disk: the replica accepts and says nothing).
  restart  a rolling restart of all four replicas, one at a time: SIGTERM, up to 3 s to exit,
           SIGKILL, start again as chstorm-local does, wait for its /ping and for the gateway to
           see it up, next node. The run ends (SIGINT to bench) 2 s after the last one is back.

For each run: queries, errors (by kind), P99, P99.9, max, late and dropped sends, the deltas of
the gateway's hedge/retry/kill counters, and its warn/error and replica-up log lines (the whole
gateway log is OUT/failover-gateway.log).
Prints hang and restart P99.9 / steady P99.9 and each max; the target is within 2x
the steady P99.9 with the slowest query well under 1 s. Writes OUT/failover.json. Servers,
gateway and load share this machine's cores: on a busy machine the figures are noisy.
"""
import argparse, json, os, re, shutil, signal, subprocess, sys, time, urllib.request
from datetime import datetime, timezone

sys.dont_write_bytecode = True  # no scripts/__pycache__ in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import scratch_dir, sh, start_gateway  # noqa: E402

COUNTERS = ("hedges", "hedge_wins", "per_try_timeouts", "retries", "retry_budget_exhausted", "killed_queries")
TARGET_RATIO, TARGET_MAX_S = 2.0, 1.0


def http_get(url, timeout=1.0):
    """The body of GET url, or None on any failure."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


def scrape(gw):
    """The gateway's failover counters, summed over labels, except killed_queries: one per reason."""
    text = http_get(f"{gw}/metrics", timeout=5)
    if text is None:
        raise SystemExit(f"bench_failover: the gateway's {gw}/metrics did not answer within 5 s")
    out = {c: 0.0 for c in COUNTERS if c != "killed_queries"}
    for name, labels, value in re.findall(r"^chstorm_gateway_(\w+?)_total(?:\{([^}]*)\})? (\S+)$", text, re.M):
        if name == "killed_queries":
            name = "killed_" + re.sub(r'.*reason="([^"]*)".*', r"\1", labels)
        if name in COUNTERS or name.startswith("killed_"):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def replica_up(gw, label):
    m = re.search(rf'^chstorm_gateway_replica_up\{{[^}}]*replica="{re.escape(label)}"[^}}]*\}} (\S+)$',
                  http_get(f"{gw}/metrics") or "", re.M)
    return m is not None and float(m.group(1)) == 1


def wait_until(what, limit, f, fail=True):
    """Polls f every 50 ms for up to limit seconds: True when it held; False or exit when not."""
    t = time.time()
    while not f():
        if time.time() - t > limit:
            if fail:
                raise SystemExit(f"bench_failover: {what} did not happen within {limit} s")
            return False
        time.sleep(0.05)
    return True


def gone(pid):
    """True once every thread of pid has exited. A zombie leader counts as gone (it is not our
    child to reap) only when it is the last task: after SIGKILL the leader can be a zombie while
    other threads still exit and hold the server's lock on data/status."""
    try:
        zombie = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        return zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (OSError, IndexError):
        return True


class Phase:
    """One bench run against the gateway, with the counters and log lines around it."""

    def __init__(self, ctx, name, duration):
        self.ctx, self.name, self.events = ctx, name, []
        self.json = os.path.join(ctx["tmp"], f"{name}.json")
        self.before, self.log_at = scrape(ctx["gw"]), os.path.getsize(ctx["gw_log"])
        cmd = [ctx["chstorm"], "bench", "--quiet", "--url", ctx["gw"], "-q", ctx["query"], "--rate", str(ctx["rate"]),
               "-c", "64", "--timeout", "5s", "-d", f"{duration}s", "--json", self.json]
        self.err = open(os.path.join(ctx["tmp"], f"{name}.err"), "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err)
        self.t0, self.started_at = time.time(), datetime.now(timezone.utc).isoformat(timespec="milliseconds")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):  # on an error, no bench left behind
        if exc_type is not None and self.proc.poll() is None:
            self.proc.kill(), self.proc.wait()

    def event(self, what):
        self.events.append((round(time.time() - self.t0, 2), what))

    def finish(self, interrupt=False):
        if interrupt:
            self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=60)
        if rc not in (0, 130):
            self.err.seek(0)
            raise SystemExit(f"bench_failover: bench failed in phase {self.name} (exit {rc}): {self.err.read().strip()}")
        r = json.load(open(self.json))
        with open(self.ctx["gw_log"]) as f:
            f.seek(self.log_at)
            logs = [l.strip() for l in f if re.search(r'"level":"(warn|error)"|"msg":"replica up"', l)]
        l = r["latency_s"]
        return {"started_at": self.started_at, "duration_s": r["duration_s"], "queries": r["queries"], "errors": r["errors"],
                "errors_by_kind": r["errors_by_kind"], "p50_ms": l["p50"] * 1e3, "p99_ms": l["p99"] * 1e3,
                "p99_9_ms": l["p99.9"] * 1e3, "max_ms": l["max"] * 1e3, "late": r["late"], "dropped": r["dropped"],
                "gateway": {k: v - self.before.get(k, 0) for k, v in scrape(self.ctx["gw"]).items()}, "events": self.events,
                "gateway_log": logs, "per_second": r["per_second"]}


def hang(ctx, node):
    with Phase(ctx, "hang", 12) as ph:
        time.sleep(3)
        os.kill(node["pid"], signal.SIGSTOP)
        ph.event(f"SIGSTOP {node['label']}")
        try:
            time.sleep(3)
        finally:
            os.kill(node["pid"], signal.SIGCONT)
            ph.event(f"SIGCONT {node['label']}")
        return ph.finish()


def restart_node(ctx, node, ph):
    """SIGTERM, up to 3 s, SIGKILL, start as chstorm-local does (process.rs: server_command)."""
    pid, label, ndir = node["pid"], node["label"], node["dir"]
    argv = open(f"/proc/{pid}/cmdline").read().rstrip("\0").split("\0")  # the exact command line
    os.kill(pid, signal.SIGTERM)
    ph.event(f"SIGTERM {label}")
    if not wait_until(f"{label} exit after SIGTERM", 3, lambda: gone(pid), fail=False):
        os.kill(pid, signal.SIGKILL)
        ph.event(f"SIGKILL {label}")
        wait_until(f"{label} (pid {pid}) exit after SIGKILL", 15, lambda: gone(pid))
    ph.event(f"exited {label}")
    log = open(os.path.join(ndir, "log", "stdout.log"), "a")
    p = subprocess.Popen(argv, cwd=ndir, stdin=subprocess.DEVNULL, stdout=log, stderr=log, process_group=0)
    ctx["started"].append(p)
    node["pid"] = p.pid
    ph.event(f"started {label} pid {p.pid}")

    def ping():
        if p.poll() is not None:
            raise SystemExit(f"bench_failover: {label} exited ({p.returncode}) on start; see {ndir}/log/server.err.log")
        return http_get(f"{node['http_url']}/ping") is not None

    wait_until(f"{label} /ping", 30, ping)
    ph.event(f"ping {label}")
    wait_until(f"gateway sees {label} up", 30, lambda: replica_up(ctx["gw"], label))
    ph.event(f"gateway up {label}")
    # Record the new pid, so that `chstorm local down` stops it should this script die.
    topo_file = os.path.join(ctx["cdir"], "cluster.json")
    topo = json.load(open(topo_file))
    for n in topo["nodes"]:
        if f"{n['shard']}.{n['replica']}" == label:
            n["pid"] = p.pid
    json.dump(topo, open(topo_file, "w"), indent=2)


def rolling_restart(ctx, nodes):
    with Phase(ctx, "restart", 300) as ph:
        time.sleep(1)
        for node in nodes:
            restart_node(ctx, node, ph)
        time.sleep(2)
        return ph.finish(interrupt=True)


def line(name, r):
    g = r["gateway"]
    killed = ", ".join(f"{k[7:]} {v:.0f}" for k, v in sorted(g.items()) if k.startswith("killed_") and v) or "none"
    return (f"  {name:<8} queries {r['queries']:6d}  errors {r['errors']} {r['errors_by_kind'] or ''}  p99 {r['p99_ms']:7.1f} ms  "
            f"p99.9 {r['p99_9_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms  late {r['late']} dropped {r['dropped']} | hedges "
            f"{g['hedges']:.0f} wins {g['hedge_wins']:.0f} per-try timeouts {g['per_try_timeouts']:.0f} retries "
            f"{g['retries']:.0f} budget exhausted {g['retry_budget_exhausted']:.0f} killed: {killed}")


def summary(results, rate):
    """The ratio lines; marks each phase against the target and the steady run as saturated or not."""
    phases = results["phases"]
    steady = phases["steady"]
    lines = []
    for name in ("hang", "restart"):
        r = phases[name]
        r["p99_9_over_steady"] = r["p99_9_ms"] / steady["p99_9_ms"]
        r["meets_target"] = r["errors"] == 0 and r["p99_9_over_steady"] <= TARGET_RATIO and r["max_ms"] < TARGET_MAX_S * 1e3
        lines.append(f"failover {name} p99.9 / steady p99.9 = {r['p99_9_over_steady']:.2f}")
    lines.append("failover max_ms steady / hang / restart = " + " / ".join(f"{phases[n]['max_ms']:.1f}" for n in phases))
    lines.append(f"failover target (0 errors, <= {TARGET_RATIO:g}x steady p99.9, max < {TARGET_MAX_S * 1e3:.0f} ms): "
                 + ", ".join(f"{n} {'met' if phases[n]['meets_target'] else 'MISSED'}" for n in ("hang", "restart")))
    # An open loop the machine cannot follow measures its queue, not the failover.
    results["saturated"] = steady["dropped"] > 0 or steady["queries"] < 0.95 * rate * steady["duration_s"]
    if results["saturated"]:
        lines.append(f"WARNING: the steady run served {steady['queries'] / steady['duration_s']:.0f} of {rate:g} lookups/s "
                     f"(dropped {steady['dropped']}): this machine cannot keep up with --rate, so every phase measures "
                     "queueing; lower --rate")
    n = steady["queries"]
    if n < 10_000:
        lines.append(f"note: over {n} queries, P99.9 is about the {max(1, round(n / 1000))}-th slowest")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results", help="where failover.json and the logs go (default bench-results)")
    ap.add_argument("--rate", type=float, default=60, help="open-loop lookups per second (default 60: a FINAL lookup costs 18.16 4 to 8 ms of CPU, so 60/s keeps the 4 servers near a quarter of 2 cores and the phases measure failover, not queueing; at 150/s they take over 60%% and every phase shows the machine's queueing)")
    ap.add_argument("--rows", type=int, default=200_000, help="rows of items (default 200,000)")
    ap.add_argument("--index-granularity", type=int, default=256,
                    help="items' index_granularity (default 256, a point-lookup table's: with 8192 a FINAL lookup "
                    "costs 18.16 about 9 ms of CPU, and 2 cores cannot serve 150/s beside the gateway and the load)")
    ap.add_argument("--chstorm", default="target/release/chstorm")
    args = ap.parse_args()
    chstorm, out = os.path.abspath(args.chstorm), os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    # A fresh cluster every run: a reused one carries old system.query_log parts that slow restarts.
    tmp = scratch_dir("chstorm-failover-")
    cdir, gw_log = os.path.join(tmp, "cluster"), os.path.join(out, "failover-gateway.log")
    open(gw_log, "w").close()
    ctx = {"chstorm": chstorm, "rate": args.rate, "tmp": tmp, "cdir": cdir, "gw_log": gw_log, "started": []}
    topo = json.loads(sh([chstorm, "local", "up", "--shards", "2", "--replicas", "2", "--dir", cdir, "--json"]))
    nodes, gw, ok = [], None, False
    results = {"rate": args.rate, "rows": args.rows, "index_granularity": args.index_granularity, "concurrency": 64, "timeout_s": 5, "loadavg_before": os.getloadavg()}
    try:
        sh([chstorm, "dataset", "load", "items", "--url", topo["nodes"][0]["http_url"], "--cluster", "storm",
            "--topology", cdir, "--rows", str(args.rows), "--index-granularity", str(args.index_granularity)])
        # The load leaves merges running for a while; a steady phase measured beside them is no
        # reference. Wait (up to 120 s) until no node merges.
        def merging():
            q = urllib.request.quote("SELECT count() FROM system.merges")
            return any((http_get(f"{n['http_url']}/?query={q}", timeout=5) or "1").strip() != "0" for n in topo["nodes"])
        wait_until("background merges after the load to finish", 120, lambda: not merging())
        shops = max(1, args.rows // 100)
        ctx["query"] = results["query"] = (f"SELECT * FROM items FINAL WHERE shop_id = {{s:zipf({shops},1.1)}} "
                                           f"AND item_id = {{i:uniform(1,{args.rows})}}")
        gw, ctx["gw"] = start_gateway(chstorm, topo["gateway_config"], gw_log)
        status = json.loads(sh([chstorm, "local", "status", "--dir", cdir, "--json"]))
        nodes = [dict(n, label=f"{n['shard']}.{n['replica']}") for n in status["nodes"]]
        with Phase(ctx, "warmup", 3) as ph:
            ph.finish()
        with Phase(ctx, "steady", 12) as ph:
            phases = {"steady": ph.finish()}
        print(line("steady", phases["steady"]), file=sys.stderr)
        phases["hang"] = hang(ctx, nodes[0])
        print(line("hang", phases["hang"]), file=sys.stderr)
        phases["restart"] = rolling_restart(ctx, nodes)
        print(line("restart", phases["restart"]), file=sys.stderr)
        ok = True
    finally:
        for n in nodes:  # never leave a server stopped
            if not gone(n["pid"]):
                os.kill(n["pid"], signal.SIGCONT)
        for p in ctx["started"] + ([gw] if gw else []):  # the servers this script started, the gateway
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        subprocess.call([chstorm, "local", "down", "--dir", cdir], stdout=subprocess.DEVNULL)
        if not ok:  # the folder goes at exit; its error logs are worth keeping
            kept = os.path.join(out, "failover-logs")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(tmp, kept, ignore=lambda d, names: [n for n in names if not os.path.isdir(os.path.join(d, n))
                                                                 and not n.endswith((".err", ".err.log"))])
            print(f"bench_failover: the servers' error logs and each phase's stderr are in {kept}", file=sys.stderr)
    results["loadavg_after"] = os.getloadavg()
    results["phases"] = phases
    lines = summary(results, args.rate)
    json.dump(results, open(os.path.join(out, "failover.json"), "w"), indent=2)
    print("\n".join(lines))
    print(f"figures written to {os.path.join(out, 'failover.json')} (load average {results['loadavg_before'][0]:.1f} before, "
          f"{results['loadavg_after'][0]:.1f} after: a busy machine makes them noisy)")

if __name__ == "__main__":
    main()
