#!/usr/bin/env python3
"""make release-pgo: a profile-guided release build of chstorm, trained on the gateway's hot path.

Profile-guided optimisation lays the code a query runs out together and moves what it does not
run out of the way, so a query's code takes fewer instruction-cache lines. That is where the
gateway's per-query cost against HAProxy goes (docs/PERFORMANCE.md, "In cache misses").

1. An instrumented build (`-Cprofile-generate`) in target/pgo-generate.
2. Training, on this machine's loopback only: one local 18.16 server (`chstorm local up`), the
   instrumented gateway in front of it with every function on (bench_gateway_cpu.py's config:
   shard routing, users and limits, metrics, the KILL guard, hedged reads, the thread budget),
   and the load the gateway is for: `SELECT 1` and routed point lookups over HTTP (wrk, and the
   instrumented `chstorm bench`, which trains the load generator too) and over the native port;
   POST bodies, gzip bodies, a syntax error, `/ping`, `/metrics`. The gateway is stopped with
   SIGTERM, so it writes its profile as it exits.
3. `llvm-profdata merge` (rustup's `llvm-tools`, which the script adds when missing).
4. The release build with `-Cprofile-use` in target/pgo: target/pgo/release/chstorm, linked
   with its relocations kept (`--emit-relocs`) for step 5.
5. BOLT, LLVM's post-link optimiser (Debian's `bolt-N`; `make release-pgo` installs it): the
   binary instrumented, the same training run through it, and the binary laid out again by that
   profile: functions ordered so the hot ones sit together (hfsort+), blocks by ext-TSP, cold
   code split off. It works on the machine code the compiler left, where profile-guided
   optimisation cannot reach (the order of functions across the binary, the code inlined into
   them). The debug information is rewritten to match. Without an `llvm-bolt`,
   with --no-bolt, or when a BOLT step fails, the build stays profile-guided only, with a note.
6. A differential check of that binary: 60 generated queries (sizes, formats) straight to a new
   local server and through its gateway, the same bytes over HTTP and the same rows over the
   native port (clickhouse-client); any difference fails the build and removes its binary.

Every path still works in the built binary; the ones training did not run are only laid out as
cold. A clean run takes about three release builds' time (20 minutes on 2 cores).

  python3 scripts/build_pgo.py                 # target/pgo/release/chstorm
  python3 scripts/build_pgo.py --seconds 20    # longer training (default 8 s per load)
  python3 scripts/build_pgo.py --no-bolt       # profile-guided only
"""
import argparse, contextlib, glob, json, os, random, re, shutil, signal, subprocess, sys, types

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import chstorm_bench, free_port, scratch_dir, sh, start_gateway  # noqa: E402
from bench_gateway_cpu import CONFIG, wrk  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cargo_build(target_dir, rustflags):
    env = dict(os.environ, CARGO_TARGET_DIR=target_dir,
               RUSTFLAGS=(os.environ.get("RUSTFLAGS", "") + " " + rustflags).strip())
    subprocess.run(["cargo", "build", "--release", "-p", "chstorm"], check=True, cwd=ROOT, env=env)
    return os.path.join(target_dir, "release", "chstorm")


def llvm_profdata():
    """rustup's llvm-profdata, which matches rustc's LLVM (a system one may not read its files)."""
    sysroot = sh(["rustc", "--print", "sysroot"]).strip()
    host = next(l.split()[1] for l in sh(["rustc", "-vV"]).splitlines() if l.startswith("host:"))
    tool = os.path.join(sysroot, "lib", "rustlib", host, "bin", "llvm-profdata")
    if not os.path.exists(tool):
        subprocess.run(["rustup", "component", "add", "llvm-tools"], check=True)
    if not os.path.exists(tool):
        raise SystemExit(f"build_pgo: {tool} is missing after `rustup component add llvm-tools`; "
                         "install that component by hand")
    return tool


def curl(url, *args):
    """One request; its status is not checked (an error answer is part of the training)."""
    subprocess.run(["curl", "-s", "-m", "10", "-o", "/dev/null", *args, url], check=False)


@contextlib.contextmanager
def server_and_gateway(chstorm, tmp, name, rows=0):
    """A new local server with `t_local` (`rows` rows) and a gateway of `chstorm` in front of it
    with every function on (bench_gateway_cpu.py's config): yields a namespace with `url`,
    `native` (the server's), `gw` (the process), `gw_url` and `gw_native` (the gateway's). Both
    are stopped at the end; a gateway the caller stopped itself is left as it is."""
    sdir = os.path.join(tmp, f"{name}-server")
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    url, native = info["http_url"], info["native_url"].removeprefix("clickhouse://")
    run = types.SimpleNamespace(url=url, native=native, gw=None)
    try:
        sh(["curl", "-sf", url, "--data-binary", "CREATE TABLE t_local (id UInt64) ENGINE = Memory"])
        if rows:
            sh(["curl", "-sf", url, "--data-binary", f"INSERT INTO t_local SELECT number FROM system.numbers LIMIT {rows}"])
        port, native_port = free_port(), free_port()
        cfg = os.path.join(tmp, f"{name}.yaml")
        open(cfg, "w").write(CONFIG.format(port=port, url=url, native_port=native_port, native=native))
        run.gw, run.gw_url = start_gateway(chstorm, cfg, os.path.join(tmp, f"{name}.log"))
        run.gw_native = native_port
        yield run
    finally:
        if run.gw is not None and run.gw.poll() is None:
            run.gw.kill()
        sh([chstorm, "local", "down", "--dir", sdir])


def train(chstorm, seconds, tmp, name="train"):
    """Runs the training load through the instrumented gateway and stops it with SIGTERM (its
    server and log named `name` in `tmp`)."""
    with server_and_gateway(chstorm, tmp, name, rows=1000) as run:
        gw_url, nat = run.gw_url, f"clickhouse://127.0.0.1:{run.gw_native}"
        point = "SELECT id FROM t WHERE id = {k:uniform(1,1000)}"
        for c in (8, 64):
            wrk(gw_url, seconds, c)
        for target in (gw_url, nat):
            chstorm_bench(chstorm, target, ["-q", "SELECT 1", "-c", "8", "-d", f"{seconds}s"])
            chstorm_bench(chstorm, target, ["-q", point, "-c", "8", "-d", f"{seconds // 2 or 1}s"])
        for _ in range(50):
            curl(f"{gw_url}/", "--data-binary", "SELECT number FROM system.numbers LIMIT 100")
            curl(f"{gw_url}/?query=INSERT%20INTO%20t%20FORMAT%20TSV", "--data-binary", "1\n2\n3\n")
            curl(f"{gw_url}/", "-H", "Content-Encoding: gzip", "--data-binary", "@" + gzipped(tmp))
            curl(f"{gw_url}/?query=SELEC%201")
            curl(f"{gw_url}/ping")
            curl(f"{gw_url}/metrics")
        run.gw.send_signal(signal.SIGTERM)
        if run.gw.wait(timeout=60) != 0:
            raise SystemExit(f"build_pgo: the instrumented gateway exited with {run.gw.returncode}; "
                             f"see {tmp}/{name}.log")


#: BOLT's layout: functions by hfsort+ (cdsort from LLVM 18, which takes the old name), blocks by
#: ext-TSP, cold blocks and functions split off, identical functions folded, the debug information
#: rewritten to match. The same options work with Debian's bolt-16 and bolt-22.
BOLT_OPTIONS = ["-reorder-blocks=ext-tsp", "-reorder-functions=hfsort+", "-split-functions", "-split-all-cold",
                "-split-eh", "-icf=1", "-use-gnu-stack", "-update-debug-sections"]


def bolt_tools():
    """(llvm-bolt, merge-fdata) of the newest LLVM that has them (/usr/lib/llvm-N/bin, where
    llvm-bolt finds its instrumentation runtime in ../lib), or None."""
    def version(path):
        m = re.search(r"llvm-(\d+)/", path)
        return int(m.group(1)) if m else 0
    for bolt in sorted(glob.glob("/usr/lib/llvm-*/bin/llvm-bolt"), key=version, reverse=True):
        merge = os.path.join(os.path.dirname(bolt), "merge-fdata")
        if os.access(bolt, os.X_OK) and os.access(merge, os.X_OK):
            return bolt, merge
    return None


def bolt(binary, tools, seconds, tmp):
    """Lays `binary` out again by BOLT (step 5 of the module doc), in place. False, with the
    binary as it was, when a step fails."""
    llvm_bolt, merge_fdata = tools
    prof = os.path.join(tmp, "bolt-profile")
    os.makedirs(prof, exist_ok=True)
    instrumented, merged, out = (os.path.join(tmp, n) for n in ("chstorm-bolt-instrumented", "bolt.fdata", "chstorm-bolt"))
    try:
        sh([llvm_bolt, binary, "-instrument", "-o", instrumented, f"-instrumentation-file={prof}/prof",
            "-instrumentation-file-append-pid"])
        train(instrumented, seconds, tmp, name="bolt-train")
        files = glob.glob(os.path.join(prof, "prof.*.fdata"))
        if not files:
            raise RuntimeError(f"the instrumented gateway left no profile in {prof}")
        with open(merged, "w") as f:
            subprocess.run([merge_fdata, *files], check=True, stdout=f, stderr=subprocess.DEVNULL)
        sh([llvm_bolt, binary, "-o", out, f"-data={merged}", *BOLT_OPTIONS])
    except (subprocess.CalledProcessError, RuntimeError, SystemExit) as e:
        why = e.stderr.strip().splitlines()[-1] if getattr(e, "stderr", None) else str(e)
        print(f"build_pgo: BOLT failed ({why}); {binary} stays profile-guided only", file=sys.stderr)
        return False
    os.replace(out, binary)
    return True


def verify(chstorm, tmp, queries=60):
    """The optimised binary's gateway against the server it fronts, on `queries` generated
    queries: the same bytes over HTTP and the same rows over the native port (clickhouse-client),
    else an exit."""
    with server_and_gateway(chstorm, tmp, "verify") as run:
        rng = random.Random(20261126)
        formats = ["TabSeparated", "CSV", "JSONEachRow", "JSON", "Pretty", "RowBinary", "Values"]
        for _ in range(queries):
            n, k, fmt = rng.randrange(0, 3000), rng.randrange(1, 10**6), rng.choice(formats)
            q = f"SELECT number, number * {k} AS x, toString(number % {k}) AS s FROM numbers({n}) FORMAT {fmt}"
            # JSON's statistics (elapsed time) differ from run to run: compared without them.
            strip = (lambda b: b.split(b'"statistics"')[0]) if fmt == "JSON" else (lambda b: b)
            direct = subprocess.run(["curl", "-s", "-m", "10", run.url, "--data-binary", q], capture_output=True).stdout
            through = subprocess.run(["curl", "-s", "-m", "10", run.gw_url, "--data-binary", q],
                                     capture_output=True).stdout
            if strip(direct) != strip(through) or not direct:
                raise SystemExit(f"build_pgo: the optimised gateway answered `{q}` differently from the server "
                                 f"({len(through)} against {len(direct)} bytes); do not use this build")
            cq = q.rsplit(" FORMAT ", 1)[0] + " FORMAT TabSeparated"
            rows = [sh(["clickhouse-client", "--host", "127.0.0.1", "--port", str(p), "--query", cq])
                    for p in (run.native.split(":")[1], run.gw_native)]
            if rows[0] != rows[1]:
                raise SystemExit(f"build_pgo: the optimised gateway's native port answered `{cq}` differently "
                                 "from the server's; do not use this build")


def keep_if_verified(binary, tmp, queries=60):
    """`verify`, and the binary removed when it fails: nothing installs a build that answered
    otherwise."""
    try:
        verify(binary, tmp, queries)
    except SystemExit:
        os.remove(binary)
        raise


def gzipped(tmp):
    import gzip
    path = os.path.join(tmp, "query.gz")
    if not os.path.exists(path):
        open(path, "wb").write(gzip.compress(b"SELECT count() FROM numbers(10)"))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=8, help="seconds per training load (default 8)")
    ap.add_argument("--target-dir", default=os.path.join(ROOT, "target", "pgo"),
                    help="where the optimised build goes (default target/pgo; the binary is release/chstorm in it)")
    ap.add_argument("--no-bolt", action="store_true", help="leave out BOLT (step 5): profile-guided only")
    args = ap.parse_args()
    if args.seconds < 1:
        raise SystemExit("build_pgo: --seconds must be at least 1")
    profdata = llvm_profdata()
    tools = None if args.no_bolt else bolt_tools()
    if tools is None and not args.no_bolt:
        print("build_pgo: no llvm-bolt (Debian: `EXTRA_PKGS=bolt scripts/install-deps`); the build is "
              "profile-guided only", file=sys.stderr)
    tmp = scratch_dir("chstorm-pgo-")
    # A fixed folder: the path is part of RUSTFLAGS, so a new one would rebuild every crate. The
    # instrumented binary writes one file per process into it.
    raw = os.path.join(ROOT, "target", "pgo-profiles")
    shutil.rmtree(raw, ignore_errors=True)
    os.makedirs(raw)
    instrumented = cargo_build(os.path.join(ROOT, "target", "pgo-generate"), f"-Cprofile-generate={raw}")
    train(instrumented, args.seconds, tmp)
    files = glob.glob(os.path.join(raw, "*.profraw"))
    if not files:
        raise SystemExit(f"build_pgo: training left no profile in {raw}; the gateway did not exit cleanly")
    merged = os.path.join(ROOT, "target", "pgo-merged.profdata")
    subprocess.run([profdata, "merge", "-o", merged, *files], check=True)
    # BOLT reorders functions only in a binary that kept its relocations.
    relocs = " -Clink-arg=-Wl,--emit-relocs" if tools else ""
    binary = cargo_build(os.path.abspath(args.target_dir), f"-Cprofile-use={merged}{relocs}")
    shutil.rmtree(raw, ignore_errors=True)
    bolted = bool(tools) and bolt(binary, tools, args.seconds, tmp)
    keep_if_verified(binary, tmp)
    print(f"build_pgo: {binary} (profile {merged}, {len(files)} training processes"
          f"{', laid out by BOLT' if bolted else ''})")


if __name__ == "__main__":
    main()
