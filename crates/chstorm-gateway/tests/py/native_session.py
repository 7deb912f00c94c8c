"""Session semantics of the gateway's native port, with clickhouse-driver, the same calls
straight to a node and through the gateway. Run by tests/native_session.rs:
native_session.py DIRECT_PORT GATEWAY_PORT GATEWAY_HTTP(host:port). Prints one line per check;
exits non-zero at the first difference."""
import socket
import sys
import time
import urllib.request

from clickhouse_driver import Client
from clickhouse_driver.errors import ServerException

DIRECT, GW, HTTP = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
FAILED = []


def check(f):
    """Runs one numbered check; a failure is reported and the next check still runs."""
    try:
        f()
    except Exception as e:  # noqa: BLE001 - every failure is reported
        print(f"FAIL {f.__name__}: {type(e).__name__}: {e}")
        FAILED.append(f.__name__)
    return f
H = "127.0.0.1"


def metric(name):
    text = urllib.request.urlopen(f"http://{HTTP}/metrics").read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + " ") or l.startswith(name + "{"))


def code(f):
    try:
        f()
        return None
    except ServerException as e:
        return e.code


def same(what, f):
    """f(port) straight to a node and through the gateway: equal answers."""
    a, b = f(DIRECT), f(GW)
    if a != b:
        raise AssertionError(f"{what}: direct {a!r}, gateway {b!r}")
    return a


def expect(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def replicas_up():
    expect("replicas up", metric("chstorm_gateway_replica_up"), 4.0)


# 1. A database that does not exist: the server's Code 81 at connect, the first on a fresh
#    gateway (its first backend Hello) and later ones, and no replica marked down.
@check
def check_bad_database():
    for i in range(4):
        t = time.monotonic()
        same(f"no_such_db #{i}", lambda p: code(lambda: Client(H, port=p, database="no_such_db").execute("SELECT 1")))
        expect("no_such_db answered at once", time.monotonic() - t < 3, True)
    expect("no_such_db code", code(lambda: Client(H, port=GW, database="no_such_db").execute("SELECT 1")), 81)
    replicas_up()
    print("ok: a bad database gets Code 81, no replica down")


# 2. ZSTD and LZ4 both ways: answers, and an INSERT's blocks.
@check
def check_compression():
    for comp in ["zstd", "lz4"]:
        same(f"{comp} SELECT 1", lambda p: Client(H, port=p, compression=comp).execute("SELECT 1"))
        same(
            f"{comp} big answer",
            lambda p: Client(H, port=p, compression=comp).execute(
                "SELECT number, toString(number), [number, 1] FROM numbers(300000)"
            ),
        )

        def insert(p):
            c = Client(H, port=p, compression=comp)
            c.execute("CREATE TEMPORARY TABLE z (x UInt64, s String)")
            c.execute("INSERT INTO z VALUES", [(i, str(i) * 3) for i in range(70000)])
            out = c.execute("SELECT count(), sum(x), max(s) FROM z")
            c.disconnect()
            return out

        expect(f"{comp} insert", same(f"{comp} insert", insert), [(70000, 70000 * 69999 // 2, "999999999999")])
    time.sleep(0.3)
    print("ok: ZSTD and LZ4 answers and INSERT blocks as direct")


# 3. SET and USE hold for the connection's later queries, and stay in it.
@check
def check_set_and_use():
    def session(p):
        c = Client(H, port=p)
        out = [c.execute("SET max_block_size = 1234, max_result_rows = 77"), c.execute("USE system")]
        q = "SELECT currentDatabase(), name, value FROM settings WHERE name IN ('max_block_size', 'max_result_rows') ORDER BY name"
        for _ in range(4):
            out.append(c.execute(q))
        out.append(code(lambda: c.execute("USE no_such_db")))
        out.append(code(lambda: c.execute("SET no_such_setting = 1")))
        out.append(c.execute("SELECT currentDatabase(), count() FROM numbers(10)"))
        out.append(c.execute("SET max_block_size = 99"))
        out.append(c.execute(q))
        if p == GW:
            expect("a reading session is not pinned", metric("chstorm_gateway_native_pinned_sessions"), 0.0)
        other = Client(H, port=p).execute("SELECT currentDatabase(), value FROM system.settings WHERE name = 'max_block_size'")
        out.append(other)
        c.disconnect()
        return out


    r = same("SET and USE", session)
    expect("SET seen", r[2], [("system", "max_block_size", "1234"), ("system", "max_result_rows", "77")])
    expect("refusals", r[6:8], [81, 115])  # (the driver reconnects after each)
    expect("another connection has neither", r[-1], [("default", "65536")])
    print("ok: SET and USE persist over queries; USE of a bad database and an unknown SET refused, session unchanged")


# 4. A temporary table over three statements; the pinned-session gauge while it lives.
@check
def check_temporary_table():
    def temp(p):
        c = Client(H, port=p)
        out = [c.execute("CREATE TEMPORARY TABLE t (x UInt8)"), c.execute("INSERT INTO t VALUES", [(1,), (2,), (4,)])]
        for _ in range(3):
            out.append(c.execute("SELECT sum(x) FROM t"))
        if p == GW:
            expect("pinned gauge", metric("chstorm_gateway_native_pinned_sessions"), 1.0)
        c.disconnect()
        return out


    expect("temporary table", same("temporary table", temp)[2], [(7,)])
    time.sleep(0.3)
    expect("pinned gauge after disconnect", metric("chstorm_gateway_native_pinned_sessions"), 0.0)
    print("ok: a temporary table over three statements; pinned while the client holds it")


# 5. A script's CREATE TABLE, INSERT, SELECT, DROP see one server.
@check
def check_script():
    def script(p):
        c = Client(H, port=p)
        name = f"script_{p}"
        out = [c.execute(f"DROP TABLE IF EXISTS {name}"), c.execute(f"CREATE TABLE {name} (x UInt32) ENGINE = Memory")]
        out.append(c.execute(f"INSERT INTO {name} VALUES", [(i,) for i in range(100)]))
        for _ in range(3):
            out.append(c.execute(f"SELECT count(), sum(x) FROM {name}"))
        out.append(c.execute(f"DROP TABLE {name}"))
        c.disconnect()
        return out


    expect("script", same("script", script)[3], [(100, 4950)])
    print("ok: CREATE TABLE, INSERT, SELECT, DROP on one connection")


# 6. Two gateway users never see each other's temporary table (nor one connection another's).
@check
def check_two_users():
    c1 = Client(H, port=GW, user="u1")
    c1.execute("CREATE TEMPORARY TABLE secret (x UInt8)")
    for i in range(24):
        user = "u2" if i % 2 == 0 else "u1"
        expect(f"{user} sees no temporary table of u1", code(lambda: Client(H, port=GW, user=user).execute("SELECT * FROM secret")), 60)
    c1.execute("INSERT INTO secret VALUES", [(7,)])
    expect("u1's own connection sees it", c1.execute("SELECT * FROM secret"), [(7,)])
    c1.disconnect()
    print("ok: a temporary table stays in its client connection")


# 7. The client's own readonly, in the Query packet or SET, is relayed (Code 164 on a write).
@check
def check_readonly():
    def readonly(p):
        create = "CREATE TABLE ro_never (x UInt8) ENGINE = Memory"
        out = [code(lambda: Client(H, port=p, settings={"readonly": v}).execute(create)) for v in (1, 2)]
        c = Client(H, port=p)
        c.execute("SET readonly = 1")
        out += [code(lambda: c.execute(create)), code(lambda: c.execute("SET max_block_size = 5")), c.execute("SELECT 1")]
        c = Client(H, port=p)
        c.execute("SET readonly = 2")
        out += [code(lambda: c.execute(create)), c.execute("SET max_block_size = 5"), code(lambda: c.execute("SET readonly = 0"))]
        return out


    # (clickhouse-driver reconnects after a server exception, so what follows a refusal runs on a
    # new connection; tests/native_session.rs checks refusals inside one session with
    # clickhouse-client --multiquery --ignore-error.)
    expect("readonly", same("readonly", readonly)[:3], [164, 164, 164])
    print("ok: readonly = 1 and 2 from the client are relayed")


# 8. A client revision below 54401 is refused at once, naming the minimum; 54401 is served.
@check
def check_old_revisions():
    def hello(revision):
        def s(b):
            return bytes([len(b)]) + b
        def v(n):
            out = b""
            while True:
                byte = n & 0x7F
                n >>= 7
                if n:
                    out += bytes([byte | 0x80])
                else:
                    return out + bytes([byte])
        return v(0) + s(b"raw") + v(1) + v(1) + v(revision) + s(b"") + s(b"default") + s(b"")


    for rev, want in [(54400, 2), (54032, 2), (54401, 0), (54412, 0)]:
        t = time.monotonic()
        sock = socket.create_connection((H, GW), timeout=5)
        sock.sendall(hello(rev))
        answer = sock.recv(4096)
        sock.close()
        took = time.monotonic() - t
        expect(f"revision {rev}: packet", answer[:1], bytes([want]))
        expect(f"revision {rev}: at once", took < 1, True)
        if want == 2:
            expect(f"revision {rev}: names the minimum", b"54401" in answer, True)
        else:
            expect(f"revision {rev}: answers 54412", b"\x8c\xa9\x03" in answer, True)
    replicas_up()
    print("ok: old revisions refused at once, no replica down")


# 9. A read past 100 ms: the client sees its progress while it runs, and the node's answer; a
#    short one after it on the same connection still answers.
@check
def check_long_read_progress():
    def run(port):
        c = Client(H, port=port)
        sql = "SELECT count(), sum(sipHash64(number) % 7) FROM numbers(30000000)"
        t, first = time.monotonic(), None
        progress = c.execute_with_progress(sql)
        for _ in progress:
            first = first or time.monotonic() - t
        result = progress.get_result()
        took = time.monotonic() - t
        after = c.execute("SELECT 1")
        c.disconnect()
        return result, first is not None and first < took, after

    same("a long read, its progress before its end, and a query after it", run)
    print("ok: a long read's progress came while it ran, its answer as direct")


if FAILED:
    sys.exit(f"failed: {', '.join(FAILED)}")
