#!/usr/bin/env python3
"""make bench (gateway CPU part): what one proxied query costs the gateway, beside the ratio to direct.

One local 18.16 server (`chstorm local up`) and a gateway in front of it with every function on
(shard routing of a table, user limits, metrics, the KILL guard, hedged reads, the thread
budget). `wrk -t1 -c8 -d4s` of `SELECT 1` (GET /?query=SELECT%201) straight to the server and
through the gateway, alternated --reps times. For each gateway run the gateway's user+sys CPU is
read from /proc/PID/stat before and after: CPU per proxied query = CPU time / requests. The
gateway's CPU is taken from the server on the same cores, so the QPS ratio is what a client of
a 2-core box sees.

Then 10,000 idle client connections are opened to the gateway and held: its RSS
(/proc/PID/status VmRSS) with them open, and the time of 50 `/ping`s on a fresh connection each
while they are held (median and max), each beside one straight to the server: the machine's own
noise in the same seconds.

Then the native port: `chstorm bench --url clickhouse://... -q 'SELECT 1' -c 8` straight
to the server's native port and through the gateway's `listen_native`, alternated --reps times,
with the gateway's CPU per native query read the same way, beside HAProxy in TCP mode relaying to
the server's native port (its CPU per query read the same way).

Then many keep-alive clients (--many, default 256; `wrk -t2 -c256 --latency`), alternated --reps
times: direct, HAProxy in HTTP mode, the gateway above (limits raised so that nothing is
refused), and a gateway with the default limits (routing and the thread budget on): QPS, P50, P99
and refused requests. --cap N adds the gateway (the --pgo build when given) with its user's
`max_concurrency: N` (queue 1024, 5 s: nothing refused) and HAProxy with `maxconn N` on its
server line: each proxy holding the server to N queries at once. Each of these rows also has the
server's CPU per query, and each proxy's, user and system time apart (from /proc, around the run);
so do the 8-client rows. And the server's context switches per query (voluntary: a thread waited;
involuntary: it was preempted), and the share of its CPU done by its 50 busiest threads (18.16
serves each connection on a thread of its own: how evenly the proxy spreads its queries). And the
connections accepted on the machine during the run beyond the clients' own (`PassiveOpens` of
/proc/net/snmp): those the server took from the proxy, whose pool starts each run cold (the rows
between let its idle connections time out); and the most connections the server held during the
run beyond those it held before it (its open sockets, sampled every 250 ms; each one a thread
of 18.16's); and the queries the server was running, on average (`Query` of system.metrics,
sampled every 250 ms): of the clients' requests, those not waiting in front of the server.

Each round of an alternation runs its rows in another order, a balanced Latin square
(bench_gateway.round_order): every row runs right after every other row equally often.

Prints `gateway_cpu_us_per_query`, `gateway_qps / direct_qps`, each peer's figures and the
ratios to HAProxy, the idle-connection figures, and writes OUT/gateway_cpu.json. Every round runs
each row once, so the rounds pair up: for each gateway against HAProxy it also prints the rounds'
own ratios, which separate a difference from the machine's drift better than the ratio of
medians does ("paired" in the JSON): their median; its 95 % interval, the rounds' ratios that
cover the median whatever their distribution (order statistics of the binomial sign
distribution; from 6 rounds on: 11 rounds give the 2nd and 10th smallest, 31 the 10th and 22nd);
the sign test's p, the chance that rounds of two equal proxies would split above and below 1 at
least this unevenly; and in how many rounds the gateway did better. A target is met beyond the
machine's noise when the interval lies on its side of 1. Targets: no
more CPU per query than HAProxy in HTTP mode and at least its share of direct QPS; on the native
port no more CPU per query than HAProxy in TCP mode; with many clients at least HAProxy's QPS and
no worse P99; 10,000 idle connections in <= 100 MB RSS with /ping under 1 ms.

The 8-client rows also have the server's CPU per query (from /proc, around each run): on 2
shared cores the share of direct QPS follows the CPU the server spends behind each proxy at
least as much as the proxy's own.

--phases runs some of the four parts alone (http: the 8-client rows; native; many; idle), so
that one target can get more rounds in the same time: `--phases http --reps 31`. --pool A.json
B.json runs nothing and prints the paired verdicts over the rounds of several runs together
(each JSON records the sha256 of the binaries it measured; runs of other builds are pointed out).

The floor: in the same alternation, four relays with nothing of the gateway in them
(crates/chstorm-gateway/examples/floor_relay.rs, one current-thread runtime like `workers: 1`):
`l4` copies bytes between a client connection and its own backend connection, `http` is a bare
hyper server in front of a pooled hyper client, `h1` frames requests and answers with httparse
and does the backend exchange in the client connection's own task, `hfront` is hyper's server in
front of h1's backend exchange. Their CPU per query is what any proxy, any hyper-based proxy, and
an HTTP/1 path without hyper (or without hyper's client) cost on this machine; the gateway's
figure is printed beside them.
--no-floors leaves them out.

The peers: in the same alternation, HAProxy and nginx in front of the same server, each one
process with one thread (one worker): HAProxy in HTTP mode with `http-reuse always` (kept-alive
server connections shared between clients) and in TCP mode (a byte relay with one server
connection per client), nginx `proxy_pass` to an upstream with a `keepalive` pool (HTTP/1.1,
idle upstream connections closed after 2 s, before 18.16's 3 s), and chproxy (one user, one
cluster, no cache, GOMAXPROCS=1; built by `chproxy_binary` from its sources beside the
repository, or $CHPROXY). Their CPU per query is read from /proc the same way. --no-peers leaves them out (they need `haproxy` and `nginx`, which
scripts/install-deps installs).

--pgo BINARY adds a profile-guided build of chstorm (`make release-pgo`, scripts/build_pgo.py:
target/pgo/release/chstorm) as one more gateway with the same config, in every alternation (HTTP,
native, many clients), printed beside HAProxy.

--log-queries 0 sets the server's `log_queries` to 0 (`chstorm local up` sets 1): no figure then
counts what the server spends logging each query, which with 256 clients differs behind each
proxy (docs/PERFORMANCE.md, "The server's query log with 256 clients").

--nice N runs every proxy (each gateway, HAProxy, nginx and its worker, the floor relays) at nice
N, the server and wrk at 0. On 2 cores shared with a server that runs each connection on a thread
of its own, a proxy's one thread gets what the scheduler gives any one thread; with 256 clients
that share decides how many of their requests reach the server at once (the same section).

--bare measures a gateway with the least configured (no routing section, no thread budget, no
user limits, hedging off), to show what those functions cost.
"""
import argparse, contextlib, hashlib, json, math, os, re, resource, shutil, socket, statistics, subprocess, sys, threading, time
import http.client, urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import chstorm_bench, free_port, round_order, scratch_dir, sh, start_gateway  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

CONFIG = """listen: 127.0.0.1:{port}
listen_native: 127.0.0.1:{native_port}
limits:
  max_concurrency: 1024
  queue_size: 1024
  queue_max_wait: 1s
clusters:
  one:
    shards:
      - replicas: [{url}]
        native: [{native}]
    routing:
      sharding_key: cityHash64(id)
      tables:
        t: t_local
      where_column: id
    threads: {{}}
users:
  - name: default
    cluster: one
    networks: [127.0.0.0/8]
    max_concurrency: 512
    requests_per_second: 1000000
    metrics: true
"""


BARE = """listen: 127.0.0.1:{port}
listen_native: 127.0.0.1:{native_port}
hedging:
  delay: off
clusters:
  one:
    shards:
      - replicas: [{url}]
        native: [{native}]
users:
  - name: default
    cluster: one
"""


def defaults_config(**kw):
    """CONFIG without its limits: the gateway as shipped, with routing, the thread budget and the
    default limits (global and per user)."""
    drop = ("limits:", "  max_concurrency:", "  queue_size:", "  queue_max_wait:", "    max_concurrency:",
            "    requests_per_second:")
    return "".join(l for l in CONFIG.format(**kw).splitlines(True) if not l.startswith(drop))


# HAProxy as every run here starts it: one process with one thread; its timeouts (a wait in a server's queue too).
HAPROXY_HEAD = """global
    nbthread 1
    maxconn 4096
defaults
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout queue 30s
"""

HAPROXY = HAPROXY_HEAD + """listen http
    mode http
    bind 127.0.0.1:{http_port}
    http-reuse always
    server ch {backend}
listen tcp
    mode tcp
    bind 127.0.0.1:{tcp_port}
    server ch {backend}
listen native
    mode tcp
    bind 127.0.0.1:{native_port}
    server ch {native_backend}
"""

NGINX = """daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream ch {{
        server {backend};
        keepalive 64;
        keepalive_timeout 2s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://ch;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


CHPROXY = """log_debug: false
hack_me_please: true
server:
  http:
    listen_addr: "127.0.0.1:{port}"
    allowed_networks: ["127.0.0.0/8"]
users:
  - name: "default"
    to_cluster: "ch"
    to_user: "default"
clusters:
  - name: "ch"
    nodes: ["{backend}"]
    users:
      - name: "default"
"""


def chproxy_binary(who):
    """chproxy, the HTTP proxy for ClickHouse: $CHPROXY, else target/tools/bin/chproxy, else built
    there with the Go toolchain from its sources beside the repository (../shared/peers/chproxy,
    or $CHPROXY_SRC; its Go module is not served as a module, so `go install` cannot fetch it).
    None, said on stderr as `who`, when there is neither a binary nor a way to build one."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("CHPROXY"):
        return os.environ["CHPROXY"]
    binary = os.path.join(root, "target", "tools", "bin", "chproxy")
    if os.access(binary, os.X_OK):
        return binary
    src = os.environ.get("CHPROXY_SRC") or os.path.join(os.path.dirname(root), "shared", "peers", "chproxy")
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not (go and os.path.exists(os.path.join(src, "go.mod"))):
        print(f"{who}: no chproxy (set CHPROXY to its binary, or CHPROXY_SRC to its sources and have Go); "
              "its row is left out", file=sys.stderr)
        return None
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    print(f"{who}: building chproxy from {src} into {binary}", file=sys.stderr)
    r = subprocess.run([go, "build", "-o", binary, "."], cwd=src, capture_output=True, text=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false"})
    if r.returncode != 0:
        print(f"{who}: chproxy did not build ({r.stderr.strip()[-300:]}); its row is left out", file=sys.stderr)
        return None
    return binary


HAPROXY_CAPPED = HAPROXY_HEAD + """listen http
    mode http
    bind 127.0.0.1:{port}
    http-reuse always
    server ch {backend} maxconn {cap}
"""


def capped_config(cap, **kw):
    """CONFIG with its user held to `cap` queries at once, queued (1024, 5 s) rather than refused."""
    return CONFIG.format(**kw).replace("    max_concurrency: 512\n",
                                       f"    max_concurrency: {cap}\n    queue_size: 1024\n    queue_max_wait: 5s\n")


@contextlib.contextmanager
def routed_server(chstorm, tmp):
    """One local 18.16 server in tmp/server (`chstorm local up`) with the table CONFIG routes
    (`t_local`): yields (http_url, native HOST:PORT, its pid), and stops the server at the end."""
    sdir = os.path.join(tmp, "server")
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    try:
        sh(["curl", "-sf", info["http_url"], "--data-binary", "CREATE TABLE t_local (id UInt64) ENGINE = Memory"])
        yield info["http_url"], info["native_url"].removeprefix("clickhouse://"), info["pid"]
    finally:
        subprocess.run([chstorm, "local", "down", "--dir", sdir], capture_output=True)


def wait_answering(url, proc, what, who, tries=300, pause=0.2):
    """Waits until `url` answers SELECT 1 (`tries` times, `pause` s apart: 60 s by default, for
    valgrind's slow start); exits the script, as `who`, when `what` (`proc`) exits or never answers."""
    for _ in range(tries):
        if proc.poll() is not None:
            raise SystemExit(f"{who}: {what} exited ({proc.returncode})")
        if subprocess.run(["curl", "-sf", "-m", "2", f"{url}/?query=SELECT%201"], capture_output=True).returncode == 0:
            return
        time.sleep(pause)
    raise SystemExit(f"{who}: {what} did not answer at {url}")


def one_at_a_time(binaries, peers, tmp, http_url, native, who):
    """The proxies measured one at a time in front of one server (http_url, and native: its native
    HOST:PORT): each of `binaries` ([(name, path)]) as a gateway with CONFIG and `workers: 1`,
    then HAProxy when `peers` (HTTP mode, and TCP mode on the native port; one config). Yields
    (name, command, http_url, native_url); a missing haproxy is said on stderr, as `who`."""
    for name, binary in binaries:
        port, native_port = free_port(), free_port()
        cfg = os.path.join(tmp, f"{name}.yaml")
        open(cfg, "w").write("workers: 1\n" + CONFIG.format(port=port, url=http_url, native_port=native_port, native=native))
        yield name, [binary, "gateway", "--config", cfg], f"http://127.0.0.1:{port}", f"clickhouse://127.0.0.1:{native_port}"
    if peers and shutil.which("haproxy"):
        hp, tp, np_ = free_port(), free_port(), free_port()
        cfg = os.path.join(tmp, "haproxy.cfg")
        open(cfg, "w").write(HAPROXY.format(http_port=hp, tcp_port=tp, backend=http_url.removeprefix("http://"),
                                            native_port=np_, native_backend=native))
        yield "haproxy", ["haproxy", "-db", "-f", cfg], f"http://127.0.0.1:{hp}", f"clickhouse://127.0.0.1:{np_}"
    elif peers:
        print(f"{who}: no haproxy (scripts/install-deps installs it); its row is left out", file=sys.stderr)


def start_peers(tmp, backend, native_backend):
    """HAProxy (HTTP and TCP mode, one process) and nginx in front of backend (HOST:PORT), and
    HAProxy's TCP mode in front of native_backend (the server's native port, HOST:PORT):
    {mode: (process, url)}; a mode whose binary is missing is left out, with a note."""
    peers = {}
    if shutil.which("haproxy"):
        http_port, tcp_port, native_port = free_port(), free_port(), free_port()
        cfg = os.path.join(tmp, "haproxy.cfg")
        open(cfg, "w").write(HAPROXY.format(http_port=http_port, tcp_port=tcp_port, backend=backend,
                                            native_port=native_port, native_backend=native_backend))
        proc = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peers["haproxy_http"] = (proc, f"http://127.0.0.1:{http_port}")
        peers["haproxy_tcp"] = (proc, f"http://127.0.0.1:{tcp_port}")
        peers["haproxy_native"] = (proc, f"clickhouse://127.0.0.1:{native_port}")
    else:
        print("bench_gateway_cpu: no haproxy (scripts/install-deps installs it); its rows are left out", file=sys.stderr)
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx:
        port = free_port()
        cfg = os.path.join(tmp, "nginx.conf")
        open(cfg, "w").write(NGINX.format(tmp=tmp, port=port, backend=backend))
        proc = subprocess.Popen([nginx, "-e", os.path.join(tmp, "nginx-error.log"), "-p", tmp, "-c", cfg],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peers["nginx"] = (proc, f"http://127.0.0.1:{port}")
    else:
        print("bench_gateway_cpu: no nginx (scripts/install-deps installs nginx-light); its row is left out", file=sys.stderr)
    chproxy = chproxy_binary("bench_gateway_cpu")
    if chproxy:
        # One OS thread running Go code (GOMAXPROCS=1), as the other proxies get one thread.
        port = free_port()
        cfg = os.path.join(tmp, "chproxy.yml")
        open(cfg, "w").write(CHPROXY.format(port=port, backend=backend))
        proc = subprocess.Popen([chproxy, "-config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "GOMAXPROCS": "1"})
        peers["chproxy"] = (proc, f"http://127.0.0.1:{port}")
    return peers


def stat_fields(path):
    """The fields of a /proc stat file after the command name: its third field is the first."""
    return open(path).read().rsplit(")", 1)[1].split()


def cpu_times(pid):
    """(user, system) CPU seconds of process pid, all its threads."""
    f = stat_fields(f"/proc/{pid}/stat")
    return int(f[11]) / TICK, int(f[12]) / TICK  # utime, stime (fields 14 and 15)


def cpu_seconds(pid):
    return sum(cpu_times(pid))


def split_cpu(pid, before, requests, who):
    """The CPU per query of pid since `before` (cpu_times): WHO_cpu_us_per_query, and its user
    and system parts."""
    after = cpu_times(pid)
    user, system = ((a - b) / max(1, requests) * 1e6 for a, b in zip(after, before))
    return {f"{who}_cpu_us_per_query": user + system, f"{who}_user_us_per_query": user,
            f"{who}_sys_us_per_query": system}


def threads_now(pid):
    """{thread id: (CPU ticks, voluntary, involuntary context switches, name)} of process pid's
    threads; a thread that ends while it is read is left out."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = stat_fields(f"/proc/{pid}/task/{tid}/stat")
            status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/task/{tid}/status").read().splitlines() if ":" in l)
        except OSError:
            continue
        out[tid] = (int(stat[11]) + int(stat[12]), int(status["voluntary_ctxt_switches"]),
                    int(status["nonvoluntary_ctxt_switches"]), status["Name"].strip())
    return out


# The server's threads by name (18.16 names them so; figures of a name no thread has are 0): those
# that serve HTTP connections, one per connection (18.16), and those that flush the system logs
# (query_log, query_thread_log), which take the rows that queries leave when they finish.
HANDLER_THREAD, LOG_FLUSH_THREAD = "HTTPHandler", "SystemLogFlush"


def thread_figures(before, after, requests, busiest=50):
    """From two threads_now: the context switches per query of the process's threads (voluntary:
    a thread waited; involuntary: it was preempted), and the share of its CPU done by its
    `busiest` threads (how evenly its connections' threads shared the work). Apart: the
    connection threads' CPU and preemptions per query, and the log-flushing threads' CPU and
    waits per query: a flushing thread that waits is woken by the next row a finished query
    leaves, so the fewer queries finish together, the more often it waits (docs/PERFORMANCE.md,
    "The server's query log with 256 clients")."""
    zero = (0, 0, 0, "")
    d = [(tuple(a - b for a, b in zip(after[t][:3], before.get(t, zero)[:3])), after[t][3]) for t in after]
    ticks = sorted((x[0] for x, _ in d), reverse=True)
    per = lambda v: v / max(1, requests)
    of = lambda name, i: per(sum(x[i] for x, n in d if n == name))
    return {"server_voluntary_switches_per_query": per(sum(x[1] for x, _ in d)),
            "server_involuntary_switches_per_query": per(sum(x[2] for x, _ in d)),
            "server_busiest_threads_share": sum(ticks[:busiest]) / max(1, sum(ticks)),
            "server_handler_cpu_us_per_query": of(HANDLER_THREAD, 0) / TICK * 1e6,
            "server_handler_preempted_per_query": of(HANDLER_THREAD, 2),
            "server_log_flush_cpu_us_per_query": of(LOG_FLUSH_THREAD, 0) / TICK * 1e6,
            "server_log_flush_waits_per_query": of(LOG_FLUSH_THREAD, 1)}


def accepts_now():
    """The machine's accepted TCP connections so far (`PassiveOpens` of /proc/net/snmp)."""
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    return int(dict(zip(lines[0][1:], lines[1][1:]))["PassiveOpens"])


def sockets(pid):
    """How many sockets process pid has open."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return n


def running_queries(conn):
    """The queries the server is running now (`Query` of system.metrics), this one left out, asked
    on `conn` (an http.client connection to the server, kept alive between asks)."""
    sql = urllib.parse.quote("SELECT value - 1 FROM system.metrics WHERE metric = 'Query'")
    conn.request("GET", f"/?query={sql}")
    with conn.getresponse() as r:
        return int(r.read())


@contextlib.contextmanager
def server_samples(pid, server_url, every=0.25):
    """Samples the server while the block runs, every `every` seconds: process pid's open sockets
    and the queries it is running (one small query of its own each time, on one connection made
    before the block, so the block sees no connect of it). Yields a dict: `peak`, the most
    sockets seen beyond the count at the start (its connections: 18.16 serves each on a thread of
    its own), and `running`, the samples of queries running."""
    host, port = server_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    conn.connect()
    base, out, done = sockets(pid), {"peak": 0, "running": []}, threading.Event()

    def sample():
        while not done.wait(every):
            out["peak"] = max(out["peak"], sockets(pid) - base)
            try:
                out["running"].append(running_queries(conn))
            except (OSError, ValueError, http.client.HTTPException):
                conn.close()  # the next ask connects again
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield out
    finally:
        done.set()
        t.join()
        conn.close()


def timed_many(url, duration, conns, proxy_pid, server_pid, server_url):
    """wrk_many, with the CPU per query of the proxy (user and system apart; none when
    proxy_pid is None) and of the server, read from /proc around the run, the server's
    thread_figures, the connections accepted on the machine beyond the clients' own (by the
    server, from the proxy: its pool's connects and any probe's), and the queries the server
    (at server_url) was running, on average over the run's samples (server_samples): where the
    clients' requests wait, at the server or before it."""
    p0 = cpu_times(proxy_pid) if proxy_pid else None
    s0, t0 = cpu_times(server_pid), threads_now(server_pid)
    with server_samples(server_pid, server_url) as seen:
        a0 = accepts_now()
        r = wrk_many(url, duration, conns)
    r["accepts_beyond_clients"] = accepts_now() - a0 - conns
    r["server_connections_peak"] = seen["peak"]
    r["server_queries_running"] = statistics.mean(seen["running"]) if seen["running"] else float("nan")
    r.update(split_cpu(server_pid, s0, r["requests"], "server"))
    r.update(thread_figures(t0, threads_now(server_pid), r["requests"]))
    if p0:
        r.update(split_cpu(proxy_pid, p0, r["requests"], "proxy"))
    return r


def rss_mb(pid):
    m = re.search(r"^VmRSS:\s+(\d+) kB", open(f"/proc/{pid}/status").read(), re.M)
    return int(m.group(1)) / 1024


def wrk(url, duration, conns):
    out = sh(["wrk", "-t1", f"-c{conns}", f"-d{duration}s", f"{url}/?query=SELECT%201"])
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    qps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return {"requests": reqs, "qps": qps, "errors": errors}


def wrk_many(url, duration, conns):
    """wrk -t2 with --latency: requests, qps, errors, p50_ms, p99_ms."""
    out = sh(["wrk", "-t2", f"-c{conns}", f"-d{duration}s", "--latency", f"{url}/?query=SELECT%201"])
    r = {"requests": int(re.search(r"(\d+) requests in", out).group(1)),
         "qps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    r["errors"] = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["errors"] += sum(int(x) for x in m.groups())
    unit = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        v, u = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M).groups()
        r[key] = float(v) * unit[u]
    return r


def wrk_for(url, duration, conns):
    """wrk as the rows here run it for `conns` clients: wrk (-t1) below 64, wrk_many (-t2,
    --latency) from 64 on."""
    return (wrk_many if conns >= 64 else wrk)(url, duration, conns)


def native_bench(chstorm, target, duration, conns):
    """chstorm bench over the native protocol: requests, qps, errors."""
    r = chstorm_bench(chstorm, target, ["-q", "SELECT 1", "-c", str(conns), "-d", f"{duration}s"])
    return {"requests": r["queries"], "qps": r["qps"], "errors": r["errors"]}


def ping_ms(port):
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while b"Ok." not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    if b"Ok." not in data:
        raise SystemExit(f"bench_gateway_cpu: /ping answered {data[:200]!r}")
    return (time.perf_counter() - t) * 1e3


def idle_connections(pid, port, n, server_port):
    """Opens n idle connections, then measures RSS and /ping; closes them. Each /ping of the
    gateway alternates with one straight to the server (server_port), the same way: the
    machine's own noise, beside the gateway's."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 1000)), hard))
    before = rss_mb(pid)
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(1.0)  # let the gateway accept them all
        held = rss_mb(pid)
        pings, server = [], []
        for _ in range(50):
            pings.append(ping_ms(port))
            server.append(ping_ms(server_port))
    finally:
        for s in socks:
            s.close()
    return {"connections": n, "rss_mb_before": before, "rss_mb_held": held,
            "ping_ms_median": statistics.median(pings), "ping_ms_max": max(pings),
            "server_ping_ms_median": statistics.median(server), "server_ping_ms_max": max(server)}


def start_capped(args, chstorm, tmp, out, url, native):
    """The --cap rows' gateway and HAProxy: {name: (URL, pid)}; their processes are killed at exit."""
    binary = os.path.abspath(args.pgo) if args.pgo else chstorm
    cfg = os.path.join(tmp, "gateway-capped.yaml")
    open(cfg, "w").write(capped_config(args.cap, port=free_port(), url=url, native_port=free_port(), native=native))
    proc, gw_url = start_gateway(binary, cfg, os.path.join(out, "gateway-cpu-capped.log"))
    CAPPED.append(proc)
    rows = {f"gateway_cap{args.cap}": (gw_url, proc.pid)}
    if shutil.which("haproxy"):
        port = free_port()
        hcfg = os.path.join(tmp, "haproxy-capped.cfg")
        open(hcfg, "w").write(HAPROXY_CAPPED.format(port=port, backend=url.removeprefix("http://"), cap=args.cap))
        CAPPED.append(subprocess.Popen(["haproxy", "-db", "-f", hcfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.3)
        rows[f"haproxy_maxconn{args.cap}"] = (f"http://127.0.0.1:{port}", CAPPED[-1].pid)
    return rows


CAPPED = []


def median_interval(x, level=0.95):
    """A distribution-free interval for the median of x: (low, high), the order statistics that
    cover it with at least `level` probability (1 - 2 P(B <= k) for B ~ Binomial(n, 1/2), k left
    out at each end); None below 6 values, where no such pair reaches 0.95."""
    s, n = sorted(x), len(x)
    below = lambda k: sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n  # P(B <= k)
    if 2 * below(0) > 1 - level:
        return None
    k = 0
    while k + 1 < n // 2 and 2 * below(k + 1) <= 1 - level:
        k += 1
    return s[k], s[n - 1 - k]


def sign_p(x):
    """The two-sided sign test of x against 1: the chance that a coin would split the rounds above
    and below 1 at least this unevenly (rounds at exactly 1 left out)."""
    a, b = sum(v > 1 for v in x), sum(v < 1 for v in x)
    m = a + b
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(min(a, b) + 1)) / 2 ** m) if m else 1.0


def paired(a, b, key_a, key_b=None):
    """The rounds' own ratios a / b of `key_a` (`key_b` in b's runs): their verdict()."""
    return verdict([p[key_a] / q[key_b or key_a] for p, q in zip(a, b)])


def verdict(x):
    """Of rounds' ratios x: their median, its 95 % interval (median_interval), the sign test's p
    (sign_p), the count of rounds below 1, and each round's ratio."""
    iv = median_interval(x)
    return {"median": statistics.median(x), "interval": [round(v, 3) for v in iv] if iv else None,
            "sign_p": sign_p(x), "below_1": sum(v < 1 for v in x), "rounds": [round(v, 3) for v in x]}


def paired_text(p, digits=2):
    """A paired verdict as one phrase: `median M (95 % interval L to H, sign test p P)`."""
    iv = f"95 % interval {p['interval'][0]:.{digits}f} to {p['interval'][1]:.{digits}f}, " if p["interval"] else ""
    return f"median {p['median']:.{digits}f} ({iv}sign test p {p['sign_p']:.2f})"


def paired_rows(runs, many):
    """Each gateway against HAProxy, round by round: {row: paired(...)} for the rows both ran."""
    out, cpu = {}, "relay_cpu_us_per_query"
    gateways = (("gateway", "gateway_cpu_us_per_query", "native_gateway"),
                ("floor_peer_gateway_pgo", cpu, "native_gateway_pgo"))
    for http_row, key, native_row in gateways:
        name = http_row.removeprefix("floor_peer_")
        if http_row in runs and "floor_peer_haproxy_http" in runs:
            out[f"{name} http cpu"] = paired(runs[http_row], runs["floor_peer_haproxy_http"], key, cpu)
            out[f"{name} http qps"] = paired(runs[http_row], runs["floor_peer_haproxy_http"], "qps")
            out[f"{name} http server cpu"] = paired(runs[http_row], runs["floor_peer_haproxy_http"],
                                                    "server_cpu_us_per_query")
        if native_row in runs and "native_haproxy_native" in runs:
            out[f"{name} native cpu"] = paired(runs[native_row], runs["native_haproxy_native"], key, cpu)
    for name in ("gateway", "gateway_pgo", "gateway_default_limits"):
        if name in many and "haproxy_http" in many:
            out[f"{name} many qps"] = paired(many[name], many["haproxy_http"], "qps")
            out[f"{name} many p99"] = paired(many[name], many["haproxy_http"], "p99_ms")
            out[f"{name} many server cpu"] = paired(many[name], many["haproxy_http"], "server_cpu_us_per_query")
            out[f"{name} many server handler cpu"] = paired(many[name], many["haproxy_http"],
                                                            "server_handler_cpu_us_per_query")
            out[f"{name} many server log flush waits"] = paired(many[name], many["haproxy_http"],
                                                                "server_log_flush_waits_per_query")
    return out


# What the many-clients rows keep (medians of the runs); the proxy's CPU only where there is a proxy.
MANY_KEYS = ("qps", "p50_ms", "p99_ms", "errors", "server_cpu_us_per_query", "proxy_user_us_per_query",
             "proxy_sys_us_per_query", "server_voluntary_switches_per_query", "server_involuntary_switches_per_query",
             "server_busiest_threads_share", "server_handler_cpu_us_per_query", "server_handler_preempted_per_query",
             "server_log_flush_cpu_us_per_query", "server_log_flush_waits_per_query", "accepts_beyond_clients",
             "server_connections_peak", "server_queries_running")


PHASES = ("http", "native", "many", "idle")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--duration", type=int, default=4, help="seconds per wrk run (default 4)")
    ap.add_argument("--reps", type=int, default=3, help="rounds of each alternation (default 3; medians)")
    ap.add_argument("--connections", type=int, default=8, help="wrk connections (default 8)")
    ap.add_argument("--idle", type=int, default=10_000, help="idle client connections to hold (default 10,000)")
    ap.add_argument("--chstorm", default="target/release/chstorm")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help="the alternations to run, of http (8 clients), native, many, idle "
                         "(default all; e.g. --phases http --reps 31 for one target's verdict)")
    ap.add_argument("--bare", action="store_true", help="the least configured gateway (no routing, budget, limits, hedging)")
    ap.add_argument("--workers", help="the gateway's `workers` (default: its own default, auto = cores)")
    ap.add_argument("--pgo", help="also measure this profile-guided build of chstorm (make release-pgo: "
                                   "target/pgo/release/chstorm) as one more gateway, same config, same alternation")
    ap.add_argument("--log-queries", type=int, choices=(0, 1), default=1,
                    help="the server's log_queries (default 1, as `chstorm local up` sets it; 0: no figure counts "
                         "what the server spends logging each query)")
    ap.add_argument("--nice", type=int, default=0,
                    help="run every proxy (each gateway, HAProxy, nginx, the floor relays) at this nice value, "
                         "-20 to 19 (default 0; below 0 needs root or CAP_SYS_NICE): the share of the CPU a proxy "
                         "beside the server gets (docs/PERFORMANCE.md, \"The server's query log with 256 clients\")")
    ap.add_argument("--pool", nargs="+", metavar="JSON",
                    help="run nothing: print the paired verdicts over the rounds of these runs' gateway_cpu.json "
                         "together (runs of the same builds and phases; more rounds than one run has time for)")
    ap.add_argument("--gateway-pid-file", help="also write the gateway's pid here (for perf record)")
    ap.add_argument("--no-floors", action="store_true", help="leave out the floor relays (l4, bare hyper, httparse, hyper front)")
    ap.add_argument("--no-peers", action="store_true", help="leave out HAProxy (HTTP and TCP mode) and nginx")
    ap.add_argument("--many", type=int, default=256,
                    help="keep-alive clients of the many-connections rows (wrk -t2; default 256; 0 leaves them out)")
    ap.add_argument("--cap", type=int, default=0,
                    help="also run the many-clients rows with the gateway's user at max_concurrency N and HAProxy "
                         "with maxconn N on its server (default 0: not)")
    ap.add_argument("--floor-relay", default="target/release/examples/floor_relay",
                    help="the floor relays' binary (built by `cargo build --release -p chstorm-gateway --example floor_relay` when missing)")
    args = ap.parse_args()
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    bad = [x for x in args.phases if x not in PHASES]
    if bad or not args.phases:
        ap.error(f"--phases: {', '.join(bad) or 'none given'} is not one of {', '.join(PHASES)}")
    if args.many == 0 and "many" in args.phases:
        args.phases.remove("many")
    if not -20 <= args.nice <= 19:
        ap.error(f"--nice: {args.nice} is not a nice value; give -20 to 19")
    return args


def children(pids):
    """The processes whose parent is one of pids; one that ends while /proc is read is left out."""
    out = set()
    for pid in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            if pid.isdigit() and int(stat_fields(f"/proc/{pid}/stat")[1]) in pids:
                out.add(int(pid))
    return out


def renice(procs, value):
    """Sets the nice value of every thread of each of procs (Popen) and of their child processes
    (nginx's worker) to value; nothing when value is 0."""
    if not value:
        return
    pids = {p.pid for p in procs}
    for pid in pids | children(pids):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:  # it ended meanwhile
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), value)
            except PermissionError:
                raise SystemExit(f"bench_gateway_cpu: --nice {value}: not permitted; a nice value below 0 "
                                 "needs root or CAP_SYS_NICE") from None
            except ProcessLookupError:
                pass


def set_log_queries(sdir, url, value):
    """Sets the local server's `log_queries` profile setting (in SDIR/users.xml, which the server
    reads again by itself) and waits until the server has it (at most 30 s)."""
    path = os.path.join(sdir, "users.xml")
    text = open(path).read()
    if "<log_queries>1</log_queries>" not in text:
        raise SystemExit(f"bench_gateway_cpu: --log-queries: {path} has no <log_queries>1</log_queries> to change")
    was = os.stat(path).st_mtime
    open(path, "w").write(text.replace("<log_queries>1</log_queries>", f"<log_queries>{value}</log_queries>"))
    # The server reloads the file when its modification time changes, in whole seconds: a file
    # rewritten in the second it was made would look unchanged.
    os.utime(path, (was + 2, was + 2))
    ask = "SELECT value FROM system.settings WHERE name = 'log_queries'"
    for _ in range(150):
        if sh(["curl", "-sf", url, "--data-binary", ask]).strip() == str(value):
            return
        time.sleep(0.2)
    raise SystemExit(f"bench_gateway_cpu: --log-queries: the server did not take log_queries={value} from {path} in 30 s")


def start_floors(args, url):
    """The floor relays (unless --no-floors): {mode: (process, url)}."""
    floors = {}
    if args.no_floors:
        return floors
    relay = os.path.abspath(args.floor_relay)
    if not os.path.exists(relay):
        sh(["cargo", "build", "--release", "-p", "chstorm-gateway", "--example", "floor_relay"])
    for mode in ("l4", "http", "h1", "hfront"):
        p = free_port()
        proc = subprocess.Popen([relay, mode, f"127.0.0.1:{p}", url.removeprefix("http://")], stderr=subprocess.DEVNULL)
        floors[mode] = (proc, f"http://127.0.0.1:{p}")
    time.sleep(0.3)
    for proc, _ in floors.values():
        if proc.poll() is not None:
            raise SystemExit(f"bench_gateway_cpu: the floor relay exited ({proc.returncode}); run {relay} by hand to see why")
    return floors


def measured(proc, who, server_pid, run):
    """run(), with the server's CPU per query (server_pid) and, when proc is a proxy, its own
    (WHO_cpu_us_per_query), read from /proc around it."""
    s0, c0 = cpu_times(server_pid), cpu_times(proc.pid) if proc else None
    r = run()
    r.update(split_cpu(server_pid, s0, r["requests"], "server"))
    if proc:
        r.update(split_cpu(proc.pid, c0, r["requests"], who))
    return r


def http_rounds(args, rows, server_pid):
    """The HTTP alternation of rows [(name, process or None, url)]: {name: [runs]}."""
    for _, _, u in rows:
        wrk(u, 1, args.connections)  # warm the pools
    runs = {name: [] for name, _, _ in rows}
    for rnd in range(args.reps):
        for name, proc, u in round_order(rows, rnd):
            who = "gateway" if name == "gateway" else "relay"
            r = measured(proc, who, server_pid, lambda: wrk(u, args.duration, args.connections))
            runs[name].append(r)
            cpu = (f"  cpu {r[f'{who}_cpu_us_per_query']:.1f} us/query (user {r[f'{who}_user_us_per_query']:.1f}, "
                   f"sys {r[f'{who}_sys_us_per_query']:.1f})" if proc else "")
            print(f"  {name.removeprefix('floor_'):<18} qps {r['qps']:9.1f}{cpu}  server {r['server_cpu_us_per_query']:.0f} us/query",
                  file=sys.stderr)
    return runs


def native_rounds(args, chstorm, rows, server_pid):
    """The native-port alternation of rows [(name, process or None, clickhouse:// url)]: {name: [runs]}."""
    for _, _, u in rows:
        native_bench(chstorm, u, 1, args.connections)
    runs = {name: [] for name, _, _ in rows}
    for rnd in range(args.reps):
        for name, proc, u in round_order(rows, rnd):
            who = "gateway" if name == "native_gateway" else "relay"
            r = measured(proc, who, server_pid, lambda: native_bench(chstorm, u, args.duration, args.connections))
            runs[name].append(r)
            cpu = f"  cpu {r[f'{who}_cpu_us_per_query']:.1f} us/query" if proc else ""
            print(f"  {name:<18} qps {r['qps']:9.1f}{cpu}", file=sys.stderr)
    return runs


def server_threads(r):
    """The server's connection and log-flushing threads in a many-clients row, as one phrase."""
    return (f"connection threads {r['server_handler_cpu_us_per_query']:.0f} us and "
            f"{r['server_handler_preempted_per_query']:.2f} preempted, log flushing "
            f"{r['server_log_flush_cpu_us_per_query']:.0f} us and {r['server_log_flush_waits_per_query']:.2f} waits")


def many_rounds(args, who, server_pid, server_url):
    """The many-clients alternation of who {name: (url, the proxy's pid or None)}: {name: [runs]}."""
    for u, _ in who.values():
        wrk_many(u, 1, args.many)
    many = {name: [] for name in who}
    for rnd in range(args.reps):
        for name, (u, pid) in round_order(list(who.items()), rnd):
            r = timed_many(u, args.duration, args.many, pid, server_pid, server_url)
            many[name].append(r)
            cpu = f"  cpu user {r['proxy_user_us_per_query']:.1f} sys {r['proxy_sys_us_per_query']:.1f} us/query" if pid else ""
            print(f"  c{args.many} {name:<22} qps {r['qps']:9.1f}  p50 {r['p50_ms']:.1f} ms  p99 {r['p99_ms']:.1f} ms  "
                  f"errors {r['errors']}{cpu}  server {r['server_cpu_us_per_query']:.0f} us/query, switches "
                  f"{r['server_voluntary_switches_per_query']:.2f} + {r['server_involuntary_switches_per_query']:.2f} "
                  f"preempted ({server_threads(r)}), busiest 50 threads {r['server_busiest_threads_share']:.2f}, accepted "
                  f"{r['accepts_beyond_clients']}, connections +{r['server_connections_peak']}, running "
                  f"{r['server_queries_running']:.1f}", file=sys.stderr)
    return many


def summary(args, runs, many, floors, native_peers, idle):
    """The JSON's figures (medians of the rounds) of the phases that ran."""
    med = lambda who, k: statistics.median(x[k] for x in runs[who])
    res = {"config": "bare" if args.bare else "full", "workers": args.workers or "auto", "phases": args.phases,
           "nice": args.nice,
           "log_queries": args.log_queries,
           "wrk": f"wrk -t1 -c{args.connections} -d{args.duration}s", "reps": args.reps, "runs": runs,
           "paired": paired_rows(runs, many), "binaries": binaries(args), "idle": idle, "loadavg": os.getloadavg(),
           "errors": sum(x["errors"] for w in runs.values() for x in w)}
    if "http" in args.phases:
        res.update({k: med("gateway", k) for k in ("gateway_cpu_us_per_query", "gateway_user_us_per_query",
                                                   "gateway_sys_us_per_query")})
        res.update({"qps_ratio": med("gateway", "qps") / med("direct", "qps"), "direct_qps": med("direct", "qps"),
                    "gateway_qps": med("gateway", "qps"),
                    "floors": {mode: {"relay_cpu_us_per_query": med(f"floor_{mode}", "relay_cpu_us_per_query"),
                                      "qps_ratio": med(f"floor_{mode}", "qps") / med("direct", "qps"),
                                      "qps": med(f"floor_{mode}", "qps")} for mode in floors if not mode.startswith("peer_")},
                    "peers": {mode.removeprefix("peer_"): {
                        "cpu_us_per_query": med(f"floor_{mode}", "relay_cpu_us_per_query"),
                        "user_us_per_query": med(f"floor_{mode}", "relay_user_us_per_query"),
                        "sys_us_per_query": med(f"floor_{mode}", "relay_sys_us_per_query"),
                        "server_cpu_us_per_query": med(f"floor_{mode}", "server_cpu_us_per_query"),
                        "qps_ratio": med(f"floor_{mode}", "qps") / med("direct", "qps"),
                        "qps": med(f"floor_{mode}", "qps")} for mode in floors if mode.startswith("peer_")}})
    if "native" in args.phases:
        res["native"] = {"bench": f"chstorm bench -q 'SELECT 1' -c {args.connections} -d {args.duration}s",
                         "gateway_cpu_us_per_query": med("native_gateway", "gateway_cpu_us_per_query"),
                         "qps_ratio": med("native_gateway", "qps") / med("native_direct", "qps"),
                         "direct_qps": med("native_direct", "qps"), "gateway_qps": med("native_gateway", "qps")}
        res["native_peers"] = {mode: {"cpu_us_per_query": med(f"native_{mode}", "relay_cpu_us_per_query"),
                                      "qps_ratio": med(f"native_{mode}", "qps") / med("native_direct", "qps"),
                                      "qps": med(f"native_{mode}", "qps")} for mode in native_peers}
    if many:
        res["many"] = {"wrk": f"wrk -t2 -c{args.many} -d{args.duration}s --latency", "runs": many,
                       "rows": {name: {k: statistics.median(x[k] for x in rs) for k in MANY_KEYS if k in rs[0]}
                                for name, rs in many.items()}}
    return res


def main():
    args = parse_args()
    if args.pool:
        return pool(args.pool)
    chstorm, out = os.path.abspath(args.chstorm), os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = scratch_dir("chstorm-gwcpu-")
    sdir = os.path.join(tmp, "server")
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    gw = gw_default = None
    floors, native_peers = {}, {}
    try:
        url, spid = info["http_url"], info["pid"]
        if args.log_queries == 0:
            set_log_queries(sdir, url, 0)
        floors = start_floors(args, url)
        if not args.no_peers:
            peers = start_peers(tmp, url.removeprefix("http://"), info["native_url"].removeprefix("clickhouse://"))
            time.sleep(0.3)
            for mode, (proc, _) in peers.items():
                if proc.poll() is not None:
                    raise SystemExit(f"bench_gateway_cpu: {mode} exited ({proc.returncode}); run it by hand with the "
                                     f"HAPROXY or NGINX config in this script to see why")
            native_peers = {m: v for m, v in peers.items() if v[1].startswith("clickhouse://")}
            floors.update({f"peer_{m}": v for m, v in peers.items() if m not in native_peers})
        sh(["curl", "-sf", url, "--data-binary", "CREATE TABLE t_local (id UInt64) ENGINE = Memory"])
        native = info["native_url"].removeprefix("clickhouse://")

        def gateway_config(name, port, native_port):
            """The measured gateway's config, on the given ports, written to TMP/NAME.yaml."""
            text = (BARE if args.bare else CONFIG).format(port=port, url=url, native_port=native_port, native=native)
            if args.workers:
                text = f"workers: {args.workers}\n" + text
            cfg = os.path.join(tmp, f"{name}.yaml")
            open(cfg, "w").write(text)
            return cfg

        port, native_port = free_port(), free_port()
        gw, gw_url = start_gateway(chstorm, gateway_config("gateway", port, native_port),
                                   os.path.join(out, "gateway-cpu.log"))
        if args.pgo:
            # The profile-guided build: the same config on ports of its own, measured as a peer.
            pnative = free_port()
            gw_pgo, pgo_url = start_gateway(os.path.abspath(args.pgo), gateway_config("gateway-pgo", free_port(), pnative),
                                            os.path.join(out, "gateway-cpu-pgo.log"))
            floors["peer_gateway_pgo"] = (gw_pgo, pgo_url)
            native_peers["gateway_pgo"] = (gw_pgo, f"clickhouse://127.0.0.1:{pnative}")
        if args.gateway_pid_file:
            open(args.gateway_pid_file, "w").write(str(gw.pid))
        renice([gw] + [p for p, _ in floors.values()], args.nice)
        runs, many, idle = {}, {}, None
        if "http" in args.phases:
            rows = ([("direct", None, url)] + [(f"floor_{m}", p, u) for m, (p, u) in floors.items()]
                    + [("gateway", gw, gw_url)])
            runs.update(http_rounds(args, rows, spid))
        if "native" in args.phases:
            # chstorm bench straight to the server's native port and through the gateway's.
            rows = ([("native_direct", None, info["native_url"])]
                    + [(f"native_{m}", p, u) for m, (p, u) in native_peers.items()]
                    + [("native_gateway", gw, f"clickhouse://127.0.0.1:{native_port}")])
            runs.update(native_rounds(args, chstorm, rows, spid))
        if "many" in args.phases:
            # Many keep-alive clients: direct, HAProxy (HTTP mode), the gateway above (limits
            # raised, CONFIG), and a gateway with the default limits (defaults_config).
            cfg2 = os.path.join(tmp, "gateway-defaults.yaml")
            open(cfg2, "w").write(defaults_config(port=free_port(), url=url, native_port=free_port(), native=native))
            gw_default, gw_default_url = start_gateway(chstorm, cfg2, os.path.join(out, "gateway-cpu-defaults.log"))
            who = {"direct": (url, None), "gateway": (gw_url, gw.pid),
                   "gateway_default_limits": (gw_default_url, gw_default.pid)}
            for peer in ("gateway_pgo", "haproxy_http"):
                if f"peer_{peer}" in floors:
                    proc, purl = floors[f"peer_{peer}"]
                    who[peer] = (purl, proc.pid)
            if args.cap:
                who.update(start_capped(args, chstorm, tmp, out, url, native))
            renice([gw_default] + CAPPED, args.nice)
            many = many_rounds(args, who, spid, url)
        if "idle" in args.phases:
            idle = idle_connections(gw.pid, port, args.idle, int(url.rsplit(":", 1)[1]))
        res = summary(args, runs, many, floors, native_peers, idle)
    finally:
        for proc in {id(p): p for p, _ in floors.values()}.values():
            proc.terminate()
            proc.wait()
        for g in [gw, gw_default] + CAPPED:
            if g:
                g.terminate()
                g.wait()
        subprocess.call([chstorm, "local", "down", "--dir", sdir], stdout=subprocess.DEVNULL)
    path = os.path.join(out, "gateway_cpu_bare.json" if args.bare else "gateway_cpu.json")
    json.dump(res, open(path, "w"), indent=2)
    report(args, res)
    print(f"figures written to {path} (load average {res['loadavg'][0]:.1f})")


def report_http(args, res):
    """The 8-client HTTP figures: the gateway, the floors and the peers."""
    peers = res["peers"]
    hp = peers.get("haproxy_http")
    print(f"gateway_cpu_us_per_query = {res['gateway_cpu_us_per_query']:.1f} (user {res['gateway_user_us_per_query']:.1f}, "
          f"sys {res['gateway_sys_us_per_query']:.1f})"
          + (f" ({res['gateway_cpu_us_per_query'] / hp['cpu_us_per_query']:.2f}x HAProxy HTTP mode; target <= 1.00)" if hp else ""))
    print(f"select1_c{args.connections} gateway_qps / direct_qps = {res['qps_ratio']:.3f} "
          f"({res['gateway_qps']:.0f} / {res['direct_qps']:.0f}"
          + (f"; HAProxy HTTP mode {hp['qps_ratio']:.3f}, target: at least HAProxy's)" if hp else ")"))
    for mode, f in res["floors"].items():
        what = {"l4": "l4 byte relay", "http": "bare hyper relay", "h1": "httparse relay, in-task backend",
                "hfront": "hyper server, httparse in-task backend"}[mode]
        print(f"floor ({what}) cpu {f['relay_cpu_us_per_query']:.1f} us/query, qps / direct {f['qps_ratio']:.3f}")
    names = {"haproxy_http": "HAProxy, HTTP mode, http-reuse always", "haproxy_tcp": "HAProxy, TCP mode",
             "nginx": "nginx, proxy_pass, upstream keepalive", "gateway_pgo": "the gateway, profile-guided build",
             "chproxy": "chproxy, one Go thread (GOMAXPROCS=1), no cache"}
    for mode, f in peers.items():
        print(f"peer ({names[mode]}) cpu {f['cpu_us_per_query']:.1f} us/query (user {f['user_us_per_query']:.1f}, "
              f"sys {f['sys_us_per_query']:.1f}), qps / direct {f['qps_ratio']:.3f}, the server's cpu "
              f"{f['server_cpu_us_per_query']:.0f} us/query")
    if hp and "gateway_pgo" in peers:
        print(f"the gateway, profile-guided build: {peers['gateway_pgo']['cpu_us_per_query'] / hp['cpu_us_per_query']:.2f}x "
              "HAProxy HTTP mode's cpu per query (target <= 1.00)")


def report_native(args, res):
    """The native port's figures: the gateway beside HAProxy in TCP mode."""
    n = res["native"]
    ht = res["native_peers"].get("haproxy_native")
    print(f"native select1_c{args.connections} gateway_qps / direct_qps = {n['qps_ratio']:.3f} "
          f"({n['gateway_qps']:.0f} / {n['direct_qps']:.0f}), gateway cpu {n['gateway_cpu_us_per_query']:.1f} us per native query"
          + (f"; HAProxy TCP mode on the native port {ht['cpu_us_per_query']:.1f} us, qps / direct {ht['qps_ratio']:.3f} "
             f"({n['gateway_cpu_us_per_query'] / ht['cpu_us_per_query']:.2f}x; target <= 1.00)" if ht else ""))
    gp = res["native_peers"].get("gateway_pgo")
    if gp:
        print(f"native: the gateway, profile-guided build: cpu {gp['cpu_us_per_query']:.1f} us per native query, "
              f"qps / direct {gp['qps_ratio']:.3f}"
              + (f" ({gp['cpu_us_per_query'] / ht['cpu_us_per_query']:.2f}x HAProxy TCP mode; target <= 1.00)" if ht else ""))


def report_many(args, res):
    """The many-clients rows, and each gateway's ratios to HAProxy."""
    rows = res["many"]["rows"]
    for name, r in rows.items():
        cpu = (f"  cpu user {r['proxy_user_us_per_query']:5.1f} sys {r['proxy_sys_us_per_query']:5.1f} us/query"
               if "proxy_user_us_per_query" in r else "")
        print(f"c{args.many} {name:<22} qps {r['qps']:8.0f}  p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
              f"errors {r['errors']:.0f}{cpu}  server cpu {r['server_cpu_us_per_query']:.0f} us/query, context "
              f"switches {r['server_voluntary_switches_per_query']:.2f} + {r['server_involuntary_switches_per_query']:.2f} "
              f"preempted ({server_threads(r)}), busiest 50 threads {r['server_busiest_threads_share']:.2f}, connections accepted beyond "
              f"the clients' {r['accepts_beyond_clients']:.0f}, its connections at most {r['server_connections_peak']:.0f} more than before, "
              f"queries running {r['server_queries_running']:.1f} on average")
    if "haproxy_http" in rows:
        h = rows["haproxy_http"]
        for name in ("gateway", "gateway_pgo"):
            if name in rows:
                g = rows[name]
                print(f"c{args.many} {name} / HAProxy: qps {g['qps'] / h['qps']:.2f}x (target >= 1.00), "
                      f"p99 {g['p99_ms'] / h['p99_ms']:.2f}x (target <= 1.00)")
    g, h = rows.get(f"gateway_cap{args.cap}"), rows.get(f"haproxy_maxconn{args.cap}")
    if g and h:
        print(f"c{args.many} both held to {args.cap} at once, gateway / HAProxy: qps {g['qps'] / h['qps']:.2f}x, "
              f"p99 {g['p99_ms'] / h['p99_ms']:.2f}x")


def paired_line(row, p):
    """`ROW / HAProxy: <paired_text>, the gateway better in N of M` (CPU, P99 and waits: lower is
    better; QPS: higher)."""
    better = p["below_1"] if row.endswith(("cpu", "p99", "waits")) else len(p["rounds"]) - p["below_1"]
    return f"{row} / HAProxy: {paired_text(p)}, the gateway better in {better} of {len(p['rounds'])}"


def pool(paths):
    """--pool: the paired verdicts over the rounds of several runs' JSONs, for each row that all
    of them have; says when the runs measured different binaries (or did not record them)."""
    runs = [pooled_run(p) for p in paths]
    ids = {json.dumps(r.get("binaries"), sort_keys=True) for r in runs}
    if len(ids) > 1 or "null" in ids:
        print("bench_gateway_cpu: note: these runs did not all record the same binaries "
              "(\"binaries\" in their JSON); pool only runs of the same builds", file=sys.stderr)
    rows = [k for k in runs[0]["paired"] if all(k in r["paired"] for r in runs)]
    if not rows:
        raise SystemExit("bench_gateway_cpu: --pool: these runs have no paired row in common; pool runs of the same --phases")
    for row in rows:
        x = [v for r in runs for v in r["paired"][row]["rounds"]]
        print(f"pooled, {len(runs)} runs: {paired_line(row, verdict(x))}")


def pooled_run(path):
    """One run's JSON for --pool: its `paired` rows, each with its list of `rounds`, checked."""
    why = None
    try:
        run = json.load(open(path))
    except (OSError, ValueError) as e:
        why = f"{type(e).__name__}: {e}"
    else:
        rows = run.get("paired") if isinstance(run, dict) else None
        if not isinstance(rows, dict) or not all(isinstance(r, dict) and isinstance(r.get("rounds"), list)
                                                 for r in rows.values()):
            why = "no \"paired\" rows with their \"rounds\""
    if why:
        raise SystemExit(f"bench_gateway_cpu: --pool: {path} is not a gateway_cpu.json of this script ({why}); "
                         f"give the JSONs its runs wrote")
    return run


def binaries(args):
    """The sha256 of each measured chstorm binary, so that --pool can tell runs of the same builds."""
    paths = {"chstorm": args.chstorm, "pgo": args.pgo}
    return {k: hashlib.sha256(open(v, "rb").read()).hexdigest() for k, v in paths.items() if v and os.path.exists(v)}


def report(args, res):
    """Prints the figures of the phases that ran, each beside its target."""
    if "http" in args.phases:
        report_http(args, res)
    if "native" in args.phases:
        report_native(args, res)
    if res.get("many"):
        report_many(args, res)
    for row, p in res["paired"].items():
        print(f"paired rounds, {paired_line(row, p)} ({', '.join(f'{v:.2f}' for v in p['rounds'])})")
    idle = res["idle"]
    if idle:
        print(f"idle {idle['connections']} connections: gateway rss {idle['rss_mb_held']:.1f} MB "
              f"(before {idle['rss_mb_before']:.1f}; target <= 100), /ping median {idle['ping_ms_median']:.3f} ms, "
              f"max {idle['ping_ms_max']:.3f} ms (target < 1); the server's own /ping meanwhile: median "
              f"{idle['server_ping_ms_median']:.3f} ms, max {idle['server_ping_ms_max']:.3f} ms")
    if res["errors"]:
        print(f"WARNING: {res['errors']} failed requests in the wrk runs")


if __name__ == "__main__":
    main()
