#!/usr/bin/env python3
"""Checks that deploy/chstorm-gateway.service's sandbox still lets the gateway run.

Without booting systemd: `systemd-analyze verify` on the unit (with ExecStart pointed at
--chstorm), then the gateway is traced with `strace -f` in front of a local server
(`chstorm local up`) through HTTP and native queries, a SIGHUP reload and a SIGTERM drain, and
what it did is checked against the unit's directives:

* SystemCallFilter=@system-service ~@privileged @resources: every system call it made is in
  @system-service and in neither @privileged nor @resources (groups expanded by
  `systemd-analyze syscall-filter`);
* RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX: every socket() is one of those families;
* ProtectSystem=strict: no file opened for writing;
* MemoryDenyWriteExecute: no writable and executable mapping in /proc/PID/maps.

Needs strace, systemd-analyze (package systemd), curl and clickhouse-client. Prints one line
per check and exits 1 if one fails.
"""
import argparse, json, os, re, signal, subprocess, sys, time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gateway import free_port, scratch_dir, sh  # noqa: E402


def expand(group, seen):
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True, check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        t = line.strip()
        if not t or t.startswith("#"):
            continue
        if t.startswith("@"):
            if t not in seen:
                seen.add(t)
                calls |= expand(t, seen)
        else:
            calls.add(t)
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chstorm", default="target/release/chstorm")
    ap.add_argument("--unit", default="deploy/chstorm-gateway.service")
    args = ap.parse_args()
    chstorm = os.path.abspath(args.chstorm)
    tmp = scratch_dir("chstorm-sandbox-")
    failed = []

    def check(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failed.append(what)

    unit = open(args.unit).read().replace("/usr/local/bin/chstorm", chstorm)
    unit_path = os.path.join(tmp, "chstorm-gateway.service")
    open(unit_path, "w").write(unit)
    v = subprocess.run(["systemd-analyze", "verify", unit_path], capture_output=True, text=True)
    check(v.returncode == 0 and not v.stderr.strip(), f"systemd-analyze verify {args.unit} {v.stderr.strip()}")

    sdir = os.path.join(tmp, "server")
    info = json.loads(sh([chstorm, "local", "up", "--dir", sdir, "--json"]))
    gw = None
    try:
        port, native_port = free_port(), free_port()
        cfg = os.path.join(tmp, "gateway.yaml")
        open(cfg, "w").write(
            f"listen: 127.0.0.1:{port}\nlisten_native: 127.0.0.1:{native_port}\nclusters:\n  one:\n"
            f"    shards:\n      - replicas: [{info['http_url']}]\n"
            f"        native: [{info['native_url'].removeprefix('clickhouse://')}]\n"
            "users:\n  - name: default\n    cluster: one\n")
        trace = os.path.join(tmp, "strace.log")
        gw = subprocess.Popen(["strace", "-f", "-qq", "-o", trace, chstorm, "gateway", "--config", cfg],
                              stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            if subprocess.run(["curl", "-sf", f"{url}/ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        sh(["curl", "-sf", "--data-binary", "SELECT 1", url])
        sh(["curl", "-sf", f"{url}/?query=SELECT%20number%20FROM%20numbers(100000)"])
        sh(["clickhouse-client", "--port", str(native_port), "-q", "SELECT count() FROM numbers(1000)"])
        traced = [p for p in subprocess.run(["pgrep", "-P", str(gw.pid)], capture_output=True, text=True).stdout.split()]
        maps = "".join(open(f"/proc/{p}/maps").read() for p in traced if os.path.exists(f"/proc/{p}/maps"))
        check(traced and not re.search(r"^\S+ rwx", maps, re.M), "MemoryDenyWriteExecute: no rwx mapping")
        for p in traced:
            os.kill(int(p), signal.SIGHUP)
        time.sleep(1)
        sh(["curl", "-sf", "--data-binary", "SELECT 2", url])
        for p in traced:
            os.kill(int(p), signal.SIGTERM)
        gw.wait(timeout=60)
        gw = None
    finally:
        if gw:
            gw.kill()
        subprocess.call([chstorm, "local", "down", "--dir", sdir], stdout=subprocess.DEVNULL)
    log = open(trace).read()
    used = set(re.findall(r"^\d+ +([a-z_0-9]+)\(", log, re.M))
    allowed = expand("@system-service", set()) - expand("@privileged", set()) - expand("@resources", set())
    check(used and used <= allowed, f"SystemCallFilter: {len(used)} system calls used, not allowed: {sorted(used - allowed)}")
    families = set(re.findall(r"socket\((AF_[A-Z0-9]+)", log))
    check(families <= {"AF_INET", "AF_INET6", "AF_UNIX"}, f"RestrictAddressFamilies: {sorted(families)}")
    writes = [m for m in re.findall(r'open(?:at)?\([^"]*"([^"]+)", ([A-Z_|]+)', log) if re.search(r"O_(WRONLY|RDWR|CREAT)", m[1])]
    check(not writes, f"ProtectSystem=strict: files opened for writing: {writes}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
