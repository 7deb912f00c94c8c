#!/usr/bin/env python3
"""make bench (compare part): does `chstorm compare`, with its default settings, find a server 10 %
slower, and stay quiet when nothing changed?

Two local 18.16 servers (`chstorm local up`), the same data on both (the queries read
`numbers()`, generated alike by each), and the right server's process in a cgroup of its own. In
the **slowed** case that cgroup has a CPU quota of 9091 µs every 10,000 µs (cgroup v2 `cpu.max`
where the v2 hierarchy has the cpu controller, else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`):
the right server gets at most 0.909 of a CPU, so a single-threaded CPU-bound query takes 10 %
longer. In the **A/A** case the quota is lifted (`max`, `-1`) and nothing else changes: the same
servers, the same cgroup. The queries (QUERIES, or --queries FILE) are single-threaded
(`?max_threads=1` on both URLs), CPU-bound and take 0.1 to 0.3 s each.

--server-cpus LIST binds both servers to the same CPUs (`taskset -a -p`: every thread, and the
threads each starts later) and --client-cpus LIST binds compare, as ClickHouse's own performance
comparison binds both of its servers to one NUMA node; by default nothing is bound and the
scheduler places all three, as it would for a user running compare.

For every seed 1..--seeds (default 20), `chstorm compare --left L --right R --queries Q --seed N --json ...`
runs once slowed and once A/A, in alternating order (slowed first for odd seeds), with no other
flag: compare's defaults. The quota is checked to act: the cgroup's `nr_throttled` must grow
during every slowed run and stay put during the A/A ones. The machine is shared: before each
run the script waits (at most --max-wait, default 10 minutes) until the CPU is busy less than
--quiet (default 25 %) of 5 s, and records how busy it was, and the load average, either way.

Prints, and writes to OUT/compare.json: every run's verdicts, ratios, runs and time; the share
of slowed query-runs called `slower` and of A/A query-runs flagged (slower or faster), each with
its exact (Clopper-Pearson) 95 % interval; the
machine (cores, CPU, kernel), the load average and CPU steal around every run, the date and
the commit. `--concurrency N` passes `--concurrency N` to every compare (the throughput check).

    python3 scripts/bench_compare.py --out bench-results            # 20 seeds: 40 runs, about 100 s each on a busy host
    python3 scripts/bench_compare.py --seeds 3 --out /tmp/cmp        # a quick look

Needs root (cgroup writes) and a release build (`make release`, or --chstorm PATH).
"""
import argparse, json, math, os, platform, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import scratch_dir, sh  # noqa: E402

QUERIES = [
    "SELECT sum(cityHash64(number)) FROM numbers(36000000)",
    "SELECT count() FROM numbers(100000000) WHERE number % 7 = 3",
    "SELECT uniqExact(number) FROM numbers(2000000)",
    "SELECT avg(sipHash64(toString(number))) FROM numbers(8000000)",
]

# The slowed server's quota: 9091 µs of CPU time every 10,000 µs.
QUOTA_US, PERIOD_US = 9091, 10000


def cpu_hierarchy(mountinfo):
    """Where to make a cgroup with a CPU quota, from the text of /proc/self/mountinfo: ("v2", mount
    point) when the unified hierarchy offers the cpu controller, else ("v1", mount point of the
    v1 hierarchy with the cpu controller), else None."""
    v1 = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point, fstype, options = fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup2":
            try:
                controllers = open(os.path.join(point, "cgroup.controllers")).read().split()
            except OSError:
                controllers = []
            if "cpu" in controllers:
                return ("v2", point)
        elif fstype == "cgroup" and "cpu" in options and v1 is None:
            v1 = ("v1", point)
    return v1


class Quota:
    """A cgroup of its own for one process, whose CPU quota can be set and lifted."""

    def __init__(self, hierarchy, name):
        self.kind, root = hierarchy
        self.dir = os.path.join(root, name)
        self.root = root
        if self.kind == "v2":
            controls = open(os.path.join(root, "cgroup.subtree_control")).read().split()
            if "cpu" not in controls:
                open(os.path.join(root, "cgroup.subtree_control"), "w").write("+cpu")
        os.mkdir(self.dir)
        if self.kind == "v1":
            self.write("cpu.cfs_period_us", str(PERIOD_US))
        self.lift()

    def write(self, name, value):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(value)

    def read(self, name):
        return open(os.path.join(self.dir, name)).read()

    def add(self, pid):
        """Moves every thread of process `pid` into the cgroup."""
        self.write("cgroup.procs", str(pid))
        if str(pid) not in self.read("cgroup.procs").split():
            raise SystemExit(f"bench_compare: pid {pid} is not in {self.dir} after moving it")

    def set(self):
        if self.kind == "v2":
            self.write("cpu.max", f"{QUOTA_US} {PERIOD_US}")
        else:
            self.write("cpu.cfs_quota_us", str(QUOTA_US))

    def lift(self):
        if self.kind == "v2":
            self.write("cpu.max", f"max {PERIOD_US}")
        else:
            self.write("cpu.cfs_quota_us", "-1")

    def setting(self):
        return self.read("cpu.max").strip() if self.kind == "v2" else \
            f"cfs_quota_us {self.read('cpu.cfs_quota_us').strip()}, cfs_period_us {self.read('cpu.cfs_period_us').strip()}"

    def throttled(self):
        """How many periods the cgroup was throttled in so far (cpu.stat nr_throttled)."""
        for line in self.read("cpu.stat").splitlines():
            k, _, v = line.partition(" ")
            if k == "nr_throttled":
                return int(v)
        return 0

    def remove(self, pid):
        """Moves `pid` back to the root cgroup (when it still runs) and removes the cgroup."""
        try:
            if pid and os.path.exists(f"/proc/{pid}"):
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            os.rmdir(self.dir)
        except OSError as e:
            print(f"bench_compare: cannot remove {self.dir}: {e}", file=sys.stderr)


def host_cpu():
    """(total, steal) jiffies of the machine, from /proc/stat."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v), v[7]


def busy_share(seconds=5.0):
    """The share of the machine's CPU time that was busy over the next `seconds`."""
    def busy():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
        return sum(v) - v[3] - v[4], sum(v)
    b0 = busy()
    time.sleep(seconds)
    b1 = busy()
    return (b1[0] - b0[0]) / max(1, b1[1] - b0[1])


def wait_quiet(quiet, max_wait):
    """Waits until the CPU is busy less than `quiet` of 5 s, at most `max_wait` s; returns the
    last share seen and the seconds waited."""
    t0 = time.time()
    while True:
        b = busy_share()
        if b < quiet or time.time() - t0 >= max_wait:
            return b, time.time() - t0
        time.sleep(10)


def load_avg():
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return {"cores": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}


def commit():
    try:
        return sh(["git", "rev-parse", "--short", "HEAD"]).strip()
    except (subprocess.CalledProcessError, OSError):
        return "?"


def pin(pid, cpus):
    """Binds every thread of process `pid` (and the threads it starts later) to the CPUs `cpus`
    (a taskset list such as `1` or `0-1`)."""
    sh(["taskset", "-a", "-p", "-c", cpus, str(pid)])


def compare(chstorm, left, right, queries, seed, json_path, extra, client_cpus=None):
    """One `chstorm compare` with its defaults; returns its exit code, wall time and JSON."""
    cmd = (["taskset", "-c", client_cpus] if client_cpus else []) + [
        chstorm, "compare", "--left", left, "--right", right, "--queries", queries, "--seed", str(seed),
        "--json", json_path, "--quiet"] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    took = time.time() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"bench_compare: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return p.returncode, took, json.load(open(json_path))


def binom_cdf(k, n, p):
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p)**(n - i) for i in range(k + 1))


def interval(k, n, level=0.95):
    """The exact (Clopper-Pearson) interval of a share of k in n, by bisection on the binomial."""
    if n == 0:
        return (None, None)
    a = (1 - level) / 2

    def solve(f):
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) else (lo, mid)
        return (lo + hi) / 2
    low = 0.0 if k == 0 else solve(lambda p: 1 - binom_cdf(k - 1, n, p) < a)
    high = 1.0 if k == n else solve(lambda p: binom_cdf(k, n, p) > a)
    return (low, high)


def summarize(runs):
    """Totals of a list of runs of one case: query-runs by verdict, the slower and flagged shares."""
    verdicts = {}
    for r in runs:
        for q in r["queries"]:
            verdicts[q["verdict"]] = verdicts.get(q["verdict"], 0) + 1
    n = sum(verdicts.values())
    slower, faster = verdicts.get("slower", 0), verdicts.get("faster", 0)
    return {"query_runs": n, "verdicts": verdicts, "slower": slower, "flagged": slower + faster,
            "slower_share": slower / n if n else None, "flagged_share": (slower + faster) / n if n else None,
            "slower_interval": interval(slower, n), "flagged_interval": interval(slower + faster, n),
            "exit_1": sum(1 for r in runs if r["exit"] == 1),
            "busy_before": spread([r["busy_before"] for r in runs]), "load_before": spread([r["load_before"][0] for r in runs]),
            "steal": spread([r["steal"] for r in runs])}


def spread(values):
    """min, median and max of `values`, or None."""
    return [min(values), statistics.median(values), max(values)] if values else None


def per_query(runs):
    """Per query over the runs of one case: median ratio, runs per side, seconds per side."""
    out = {}
    for r in runs:
        for q in r["queries"]:
            e = out.setdefault(q["query"], {"ratios": [], "runs": [], "old_s": [], "verdicts": {}})
            if q["ratio"] is not None:
                e["ratios"].append(q["ratio"])
            e["runs"].append(min(q["runs"]["left"], q["runs"]["right"]))
            if q["old_s"] is not None:
                e["old_s"].append(q["old_s"])
            e["verdicts"][q["verdict"]] = e["verdicts"].get(q["verdict"], 0) + 1
    return {k: {"median_ratio": statistics.median(v["ratios"]) if v["ratios"] else None,
                "mean_runs": statistics.mean(v["runs"]), "median_old_s": statistics.median(v["old_s"]) if v["old_s"] else None,
                "verdicts": v["verdicts"]} for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chstorm", default="target/release/chstorm")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 1..N, each run slowed and A/A (default 20: 80 "
                    "query-runs a case, so that 1.5 %% is more than one of them)")
    ap.add_argument("--queries", help="a query file instead of the four built-in queries")
    ap.add_argument("--concurrency", type=int, default=1, help="pass --concurrency N to every compare (default 1: none)")
    ap.add_argument("--quiet", type=float, default=0.25, help="wait before each run until the CPU is busy less than "
                    "this share of 5 s (default 0.25)")
    ap.add_argument("--max-wait", type=float, default=600, help="wait at most this many seconds (default 600)")
    ap.add_argument("--server-cpus", help="bind both servers to these CPUs, a taskset list such as 1 (default: "
                    "no binding)")
    ap.add_argument("--client-cpus", help="bind chstorm compare to these CPUs, such as 0 (default: no binding)")
    ap.add_argument("--out", default="bench-results")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_compare: needs root to make a cgroup with a CPU quota")
    hierarchy = cpu_hierarchy(open("/proc/self/mountinfo").read())
    if hierarchy is None:
        raise SystemExit("bench_compare: no cgroup hierarchy with the cpu controller is mounted")
    tmp = scratch_dir("chstorm-bench-compare-")
    queries = a.queries or os.path.join(tmp, "queries.sql")
    if not a.queries:
        open(queries, "w").write("\n".join(QUERIES) + "\n")
    os.makedirs(a.out, exist_ok=True)
    extra = ["--concurrency", str(a.concurrency)] if a.concurrency > 1 else []
    servers, quota, right_pid = {}, None, None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for side in ("left", "right"):
            servers[side] = json.loads(sh([a.chstorm, "local", "up", "--dir", os.path.join(tmp, side), "--json"]))
        right_pid = servers["right"]["pid"]
        if a.server_cpus:
            for side in servers:
                pin(servers[side]["pid"], a.server_cpus)
        quota = Quota(hierarchy, f"chstorm-bench-compare-{os.getpid()}")
        quota.add(right_pid)
        left, right = (f"{servers[s]['http_url']}/?max_threads=1" for s in ("left", "right"))
        placed = (f"both servers on CPU {a.server_cpus}, compare on {a.client_cpus or 'any'}" if a.server_cpus
                  else "no CPU binding")
        print(f"bench_compare: right server (pid {right_pid}) in {quota.dir} ({hierarchy[0]}); {placed}; "
              f"{a.seeds} seeds, load average {load_avg()}", flush=True)
        cases = {"slowed": [], "aa": []}
        for seed in range(1, a.seeds + 1):
            for case in (("slowed", "aa") if seed % 2 else ("aa", "slowed")):
                busy, waited = wait_quiet(a.quiet, a.max_wait)
                quota.set() if case == "slowed" else quota.lift()
                setting = quota.setting()
                load0, cpu0, thr0 = load_avg(), host_cpu(), quota.throttled()
                code, took, r = compare(a.chstorm, left, right, queries, seed, os.path.join(tmp, f"{case}-{seed}.json"), extra,
                                       a.client_cpus)
                load1, cpu1, thr1 = load_avg(), host_cpu(), quota.throttled()
                throttled = thr1 - thr0
                if (case == "slowed") != (throttled > 0):
                    raise SystemExit(f"bench_compare: {case} run of seed {seed}: the cgroup was throttled {throttled} "
                                     f"times ({setting}); the quota does not act as set")
                steal = (cpu1[1] - cpu0[1]) / max(1, cpu1[0] - cpu0[0])
                run = {"seed": seed, "exit": code, "seconds": round(took, 1), "quota": setting, "throttled": throttled,
                       "busy_before": round(busy, 3), "waited_s": round(waited), "load_before": load0,
                       "load_after": load1, "steal": round(steal, 4),
                       "queries": [{k: q[k] for k in ("query", "verdict", "old_s", "new_s", "ratio", "diff", "threshold",
                                                      "runs", "stop", "qps", "note")} for q in r["queries"]]}
                cases[case].append(run)
                vs = " ".join(q["verdict"] for q in run["queries"])
                print(f"  seed {seed:2} {case:6} exit {code} {took:5.0f} s busy before {busy:.2f} (waited {waited:.0f} s) "
                      f"load {load0[0]:5.2f} steal {steal:.3f}: {vs}", flush=True)
    finally:
        if quota:
            quota.remove(right_pid)
        for side in servers:
            subprocess.run([a.chstorm, "local", "down", "--dir", os.path.join(tmp, side)], capture_output=True)
    result = {
        "benchmark": "compare", "date": started, "commit": commit(), "machine": machine(),
        "command": " ".join([sys.argv[0]] + sys.argv[1:]),
        "compare": f"{a.chstorm} compare --left L/?max_threads=1 --right R/?max_threads=1 --queries Q --seed N"
                   + (" " + " ".join(extra) if extra else ""),
        "server_cpus": a.server_cpus, "client_cpus": a.client_cpus,
        "queries": open(queries).read().split("\n")[:-1], "quota_us": [QUOTA_US, PERIOD_US], "cgroup": hierarchy[0],
        "slowed": {"summary": summarize(cases["slowed"]), "per_query": per_query(cases["slowed"]), "runs": cases["slowed"]},
        "aa": {"summary": summarize(cases["aa"]), "per_query": per_query(cases["aa"]), "runs": cases["aa"]},
    }
    name = "compare.json" if a.concurrency <= 1 else f"compare_c{a.concurrency}.json"
    json.dump(result, open(os.path.join(a.out, name), "w"), indent=1)
    for case, title in (("slowed", "right 10 % slower (CPU quota)"), ("aa", "A/A (no quota)")):
        s = result[case]["summary"]
        pct = lambda v: f"{100 * v:.1f}" if v is not None else "-"
        (sl, sh_), (fl, fh) = s["slower_interval"], s["flagged_interval"]
        print(f"{title}: {s['slower']} of {s['query_runs']} query-runs slower ({pct(s['slower_share'])} %, 95 % "
              f"interval {pct(sl)} to {pct(sh_)}), {s['flagged']} flagged ({pct(s['flagged_share'])} %, {pct(fl)} to "
              f"{pct(fh)}), {s['exit_1']} of {a.seeds} runs exited 1; {s['verdicts']}; before the runs the CPU was busy "
              f"{s['busy_before']} (min, median, max), load average {s['load_before']}; steal {s['steal']}")
        for q, e in result[case]["per_query"].items():
            print(f"    {q[:60]:60} median {e['median_old_s'] or 0:.3f} s, ratio {e['median_ratio'] or 0:.3f}, "
                  f"{e['mean_runs']:.1f} runs a side, {e['verdicts']}")
    print(f"bench_compare: {os.path.join(a.out, name)}")


if __name__ == "__main__":
    main()
