#!/usr/bin/env python3
"""make bench: chstorm against wrk (HTTP) and clickhouse-benchmark (native), in one run.

Starts a local ClickHouse with `chstorm local up`, then for each scenario runs the peer and
chstorm alternately (A B A B ...) at the same concurrency and duration. Client CPU is read from
/proc/PID/stat (utime + stime, all threads) while the finished process is a zombie, just before
it is reaped. Prints each ratio on its own line and writes every figure to OUT/peers.json.

Agreement with wrk: wrk 4 does not report raw latencies. After each run it re-weights them for
coordinated omission (stats_correct, expected interval = runtime / (requests / connections)), which
lifts its P90 and P99. chstorm keeps raw samples, so the agreement ratios compare wrk with
chstorm's run passed through `chstorm merge --correct-omission auto`, the same rule; the raw
ratios are written too. A third clock settles who is right: with tcpdump (root), the answers are
timed on the loopback wire, once with both tools sharing the cores with the server and once with
the server on CPU 0 and the client on CPU 1 (scripts/wire_latency.py).

Both load generators get one client thread (wrk -t1, chstorm --threads 1), because on a 2-core
machine the server needs the other core; clickhouse-benchmark always uses one thread per
connection, which is its design.
"""
import argparse, json, os, platform, re, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire_latency  # noqa: E402
from bench_gateway import scratch_dir  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def run_measured(cmd, stdin=None):
    """Runs cmd, returns (stdout, stderr, wall_s, cpu_s) with CPU from /proc at exit."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=fo, stderr=fe, text=True)
        if stdin:
            p.stdin.write(stdin)
            p.stdin.close()
        # Wait for the exit without reaping, so /proc/PID/stat still holds the final CPU times.
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        wall = time.monotonic() - t0
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)
        # Reap it ourselves to get its peak memory (ru_maxrss, KiB).
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        run_measured.last_maxrss_kib = usage.ru_maxrss
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {p.returncode}: {err.strip()[-400:]}")
    return out, err, wall, cpu


def wrk_unit(v):
    m = re.match(r"([\d.]+)(us|ms|s)$", v)
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def parse_wrk(out):
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    qps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {m.group(1): wrk_unit(m.group(2)) for m in re.finditer(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M)}
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return {"queries": reqs, "qps": qps, "p50": pct.get("50"), "p99": pct.get("99"), "errors": errors}


def capture(port, path):
    """Starts tcpdump on lo for PORT and waits until it listens; returns the process."""
    p = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "128", "-B", "65536", "--time-stamp-precision=nano",
                          "-w", path, f"tcp port {port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()  # "listening on lo, ..." once it captures, or an error and EOF
    if "listening" not in line:
        p.kill()
        raise SystemExit(f"bench: tcpdump did not start: {line.strip()}")
    return p


def stop_capture(p):
    """Stops tcpdump; returns the packets it says the kernel dropped."""
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=30)[1]
    m = re.search(r"(\d+) packets? dropped by kernel", err)
    return int(m.group(1)) if m else 0


def wire_check(chstorm_run, wrk_run, http, post_lua, port, server_pid, d, tmp, reps=2, c=8):
    """SELECT 1 at c=8, each run timed by its tool and on the wire. Returns figures and lines."""
    out = {"lines": []}
    if shutil.which("tcpdump") is None or os.geteuid() != 0:
        out["skipped"] = "needs tcpdump and root (scripts/install-deps installs tcpdump)"
        out["lines"].append(f"wire check skipped: {out['skipped']}")
        return out
    ncpu = os.cpu_count() or 1
    variants = [("shared", None)] + ([("pinned", "1")] if ncpu >= 2 else [])
    for variant, client_cpu in variants:
        prefix = ("taskset", "-c", client_cpu) if client_cpu else ()
        if client_cpu:
            # Server threads on CPU 0 only; the client alone on CPU 1.
            subprocess.check_call(["taskset", "-a", "-p", "1", str(server_pid)], stdout=subprocess.DEVNULL)
        try:
            runs = {"wrk": [], "chstorm": []}
            for rep in range(reps):
                for who in ("wrk", "chstorm"):
                    pcap = os.path.join(tmp, f"{who}.pcap")
                    cap = capture(port, pcap)
                    if who == "wrk":
                        cmd, r = wrk_run(c, f"{http}/", post_lua, prefix=prefix)
                    else:
                        cmd, r = chstorm_run(["--url", http, "-q", "SELECT 1", "-c", str(c)], prefix=prefix)
                    dropped = stop_capture(cap)
                    xs = wire_latency.request_latencies_us(pcap, port)
                    os.unlink(pcap)
                    interval_us = int(d * 1e6 / max(len(xs) // c, 1))
                    xc = wire_latency.wrk_corrected(xs, interval_us)
                    r.update(wire_requests=len(xs), capture_dropped=dropped,
                             wire_p50=wire_latency.percentile(xs, 50), wire_p99=wire_latency.percentile(xs, 99),
                             wire_p50_wrk_rule=wire_latency.percentile(xc, 50), wire_p99_wrk_rule=wire_latency.percentile(xc, 99))
                    runs[who].append(r)
                    print(f"  wire_{variant:<13} {who:<20} rep {rep + 1}: tool p50 {r['p50'] * 1e3:.3f} p99 {r['p99'] * 1e3:.3f} ms;"
                          f" wire p50 {r['wire_p50'] * 1e3:.3f} p99 {r['wire_p99'] * 1e3:.3f} ms"
                          f" (wrk rule: {r['wire_p50_wrk_rule'] * 1e3:.3f} / {r['wire_p99_wrk_rule'] * 1e3:.3f});"
                          f" {len(xs)} requests on the wire, {dropped} dropped by the capture", file=sys.stderr)
        finally:
            if client_cpu:
                subprocess.call(["taskset", "-a", "-p", format((1 << ncpu) - 1, "x"), str(server_pid)], stdout=subprocess.DEVNULL)
        med = lambda who, k: statistics.median(x[k] for x in runs[who])
        # chstorm reports raw latencies: compare them with the raw wire. wrk reports its
        # corrected ones: compare them with the wire under the same rule.
        ratios = {
            "chstorm_p50_vs_wire": med("chstorm", "p50") / med("chstorm", "wire_p50"),
            "chstorm_p99_vs_wire": med("chstorm", "p99") / med("chstorm", "wire_p99"),
            "wrk_p50_vs_wire": med("wrk", "p50") / med("wrk", "wire_p50_wrk_rule"),
            "wrk_p99_vs_wire": med("wrk", "p99") / med("wrk", "wire_p99_wrk_rule"),
        }
        out[variant] = {"client_cpu": client_cpu, "server_cpus": "0" if client_cpu else "all", "runs": runs, "ratios": ratios}
        for k, v in ratios.items():
            out["lines"].append(f"wire_{variant}_select1_c8 {k} = {v:.3f}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--duration", type=int, default=5, help="seconds per run (default 5)")
    ap.add_argument("--reps", type=int, default=3, help="runs per tool and scenario (default 3; medians are reported)")
    ap.add_argument("--agreement-reps", type=int, default=4,
                    help="runs per tool for SELECT 1 over HTTP, whose percentiles are compared (default 4)")
    ap.add_argument("--chstorm", default="target/release/chstorm")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    d = args.duration
    chstorm = os.path.abspath(args.chstorm)
    server_dir = os.path.join(args.out, "server")
    info = json.loads(subprocess.check_output([chstorm, "local", "up", "--dir", server_dir, "--json"]))
    http, native, tcp_port = info["http_url"], info["native_url"], info["tcp_port"]
    http_port, server_pid = info["http_port"], info["pid"]
    post_lua = os.path.join(args.out, "post_select1.lua")
    with open(post_lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.body = "SELECT 1"\n')
    tmp = scratch_dir("chstorm-bench-")

    def chstorm_run(extra, duration=None, like_wrk=False, prefix=()):
        j = os.path.join(tmp, "c.json")
        cmd = [chstorm, "bench", "--quiet", "--threads", "1", "-d", f"{duration or d}s", "--json", j] + extra
        _, _, wall, cpu = run_measured(list(prefix) + cmd)
        r = json.load(open(j))
        out = {"queries": r["queries"], "qps": r["qps"], "p50": r["latency_s"]["p50"],
               "p99": r["latency_s"]["p99"], "errors": r["errors"], "cpu_s": cpu, "wall_s": wall,
               "max_rss_mib": run_measured.last_maxrss_kib / 1024}
        if like_wrk:
            # The same run with wrk's coordinated-omission rule applied (wrk reports only that).
            jc = os.path.join(tmp, "c_corrected.json")
            subprocess.check_call([chstorm, "merge", j, "--correct-omission", "auto", "--json", jc], stdout=subprocess.DEVNULL)
            rc = json.load(open(jc))
            out.update(p50_wrk_rule=rc["latency_s"]["p50"], p99_wrk_rule=rc["latency_s"]["p99"],
                       wrk_rule_interval_s=rc["co_correction_interval_s"])
        return cmd, out

    def wrk_run(c, url, script=None, prefix=()):
        cmd = list(prefix) + ["wrk", "-t1", f"-c{c}", f"-d{d}s", "--latency"] + (["-s", script] if script else []) + [url]
        out, _, wall, cpu = run_measured(cmd)
        r = parse_wrk(out)
        r.update(cpu_s=cpu, wall_s=wall)
        return cmd, r

    def chb_run(c, query):
        j = os.path.join(tmp, "b.json")
        cmd = ["clickhouse-benchmark", "--host", "127.0.0.1", "--port", str(tcp_port), "-c", str(c), "-t", str(d), "-d", "0", "--json", j]
        _, _, wall, cpu = run_measured(cmd, stdin=query + "\n")
        s = json.load(open(j))
        st = s.get("statistics", s)
        pct = s.get("query_time_percentiles", {})
        r = {"queries": st["num_queries"], "qps": st["QPS"], "p50": pct.get("50"), "p99": pct.get("99"), "errors": 0,
             "cpu_s": cpu, "wall_s": wall}
        return cmd, r

    scenarios = [
        ("http_ping_c16", "wrk", lambda: wrk_run(16, f"{http}/ping"),
         lambda: chstorm_run(["--url", http, "--ping", "-c", "16"])),
        ("http_select1_c8", "wrk", lambda: wrk_run(8, f"{http}/", post_lua),
         lambda: chstorm_run(["--url", http, "-q", "SELECT 1", "-c", "8"], like_wrk=True)),
        ("native_select1_c8", "clickhouse-benchmark", lambda: chb_run(8, "SELECT 1"),
         lambda: chstorm_run(["--url", native, "-q", "SELECT 1", "-c", "8"])),
    ]
    results = {"machine": {"nproc": os.cpu_count(), "kernel": platform.release()},
               "server_version": subprocess.check_output(["clickhouse-client", "--port", str(tcp_port), "-q", "SELECT version()"], text=True).strip(),
               "duration_s": d, "reps": args.reps, "scenarios": {}}
    lines = []
    try:
        for name, peer, peer_fn, ours_fn in scenarios:
            runs = {"peer": [], "chstorm": []}
            cmds = {}
            agreement = peer == "wrk" and "select1" in name
            for rep in range(max(args.reps, args.agreement_reps) if agreement else args.reps):
                for who, fn in (("peer", peer_fn), ("chstorm", ours_fn)):
                    cmd, r = fn()
                    r["cpu_per_query_us"] = r["cpu_s"] / max(r["queries"], 1) * 1e6
                    runs[who].append(r)
                    cmds[who] = " ".join(cmd)
                    print(f"  {name:<18} {who if who == 'chstorm' else peer:<20} rep {rep + 1}: "
                          f"qps {r['qps']:9.1f}  cpu/query {r['cpu_per_query_us']:6.2f} us  "
                          f"p50 {r['p50'] * 1e3 if r['p50'] else float('nan'):.3f} ms  p99 {r['p99'] * 1e3 if r['p99'] else float('nan'):.3f} ms  errors {r['errors']}",
                          file=sys.stderr)
            med = lambda who, k: statistics.median(x[k] for x in runs[who])
            ratios = {
                "qps_ratio": med("chstorm", "qps") / med("peer", "qps"),
                "cpu_per_query_ratio": med("chstorm", "cpu_per_query_us") / med("peer", "cpu_per_query_us"),
            }
            if agreement:
                # Like for like: wrk's figures carry its coordinated-omission rule, so chstorm's do too.
                ratios["p50_agreement"] = med("chstorm", "p50_wrk_rule") / med("peer", "p50")
                ratios["p99_agreement"] = med("chstorm", "p99_wrk_rule") / med("peer", "p99")
                ratios["p50_raw_vs_wrk"] = med("chstorm", "p50") / med("peer", "p50")
                ratios["p99_raw_vs_wrk"] = med("chstorm", "p99") / med("peer", "p99")
            results["scenarios"][name] = {"peer": peer, "commands": cmds, "runs": runs, "ratios": ratios}
            for k, v in ratios.items():
                lines.append(f"{name} {k} (chstorm / {peer}) = {v:.3f}")
        wire = wire_check(chstorm_run, wrk_run, http, post_lua, http_port, server_pid, d, tmp)
        results["wire"] = wire
        lines.extend(wire.pop("lines"))
    finally:
        subprocess.call([chstorm, "local", "down", "--dir", server_dir], stdout=subprocess.DEVNULL)
    # Scale: 10,000 connections on one client thread, against a minimal Rust ping server (a
    # 2-core ClickHouse can't hold that many); memory must not grow with the run's length.
    ping_server = os.path.join(os.path.dirname(chstorm), "examples", "ping_server")
    if os.path.exists(ping_server):
        srv = subprocess.Popen([ping_server, "0", "1"], stdout=subprocess.PIPE, text=True)
        try:
            port = int(srv.stdout.readline())
            scale = {}
            for secs in (5, 20):
                cmd, r = chstorm_run(["--url", f"http://127.0.0.1:{port}", "--ping", "-c", "10000"], duration=secs)
                r["client_cores_used"] = r["cpu_s"] / r["wall_s"]
                scale[f"{secs}s"] = r
                print(f"  scale_10k_conns    chstorm {secs:>2}s: qps {r['qps']:9.1f}  client cores used {r['client_cores_used']:.2f}  "
                      f"peak RSS {r['max_rss_mib']:.1f} MiB  errors {r['errors']}", file=sys.stderr)
            scale["command"] = " ".join(cmd)
            results["scale_10k_connections"] = scale
            lines.append(f"scale_10k_conns client_cores_used = {scale['20s']['client_cores_used']:.2f}")
            lines.append(f"scale_10k_conns peak_rss_ratio (20 s run / 5 s run) = {scale['20s']['max_rss_mib'] / scale['5s']['max_rss_mib']:.3f}")
        finally:
            srv.kill()
            srv.wait()
    else:
        lines.append(f"scale_10k_conns skipped: {ping_server} not built (make bench builds it)")
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("\n".join(lines))
    print(f"figures written to {os.path.join(args.out, 'peers.json')}")


if __name__ == "__main__":
    main()
