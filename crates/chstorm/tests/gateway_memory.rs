//! What the gateway buffers from clients is bounded in memory and in time, measured on a real
//! gateway process (`chstorm gateway`, so `/proc/PID/status` is the gateway's alone) beside a
//! real 2x2 cluster of ClickHouse 18.16, attacked over the native port by a raw client:
//!
//! - frame headers that claim 1 GiB, then silence, on several connections;
//! - LZ4 frames of zeros in a block that never completes;
//! - a Query packet with hundreds of MiB of settings;
//! - huge Data packets (an external table, and an INSERT's block), on more connections than the
//!   gateway-wide budget has room for;
//!
//! while HTTP `SELECT 1` keeps answering. The gateway's peak RSS (`VmHWM`) must stay within its
//! idle RSS plus the documented bound (docs/GATEWAY.md, "Memory"). Also: a native client that
//! stops mid-packet is closed after `limits.client_packet_timeout`, and invalid UTF-8 in a query
//! passes through unchanged (the same answers as the node's own native port).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests of this file take turns: each runs a 2x2 cluster and a gateway.
static TURN: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;

/// A gateway process; killed when dropped.
struct Gw {
    child: Child,
    http: SocketAddr,
    native: SocketAddr,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gw {
    /// Starts `chstorm gateway` on `env`'s cluster with `limits` added to its `limits:`.
    fn start(env: &chstorm_testenv::Env, limits: &str) -> Gw {
        let cfg = env.gateway_config(|t| t.replace("limits:\n", &format!("limits:\n{limits}")));
        let mut child = Command::new(env!("CARGO_BIN_EXE_chstorm"))
            .args(["gateway", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (http, native) = loop {
            let line = lines.next().expect("the gateway started").unwrap();
            if chstorm_testenv::is_listening_line(&line) {
                let field = |key| chstorm_testenv::listening_field(&line, key);
                break (field("addr"), field("native_addr"));
            }
        };
        // The rest of its log is not needed; it must not block on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Gw { child, http, native }
    }

    /// A field of `/proc/PID/status` in KiB (`VmHWM`, `VmRSS`).
    fn status_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = s.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Resets the peak (`VmHWM`) to the current RSS.
    fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
    }
}

/// How long an HTTP `SELECT 1` to `http` takes, and its answer.
fn http_select_1(http: SocketAddr) -> (Duration, String) {
    let t = Instant::now();
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /?query=SELECT%201 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    (t.elapsed(), out)
}

fn put_varuint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varuint(out, s.len() as u64);
    out.extend_from_slice(s);
}

fn get_varuint(r: &mut impl Read) -> std::io::Result<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8];
        r.read_exact(&mut b)?;
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    Ok(v)
}

fn get_str(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let n = get_varuint(r)? as usize;
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// A native connection past its Hello, as user `default`, at revision 54412.
fn hello(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut h = Vec::new();
    put_varuint(&mut h, 0);
    put_str(&mut h, b"memory test");
    put_varuint(&mut h, 18);
    put_varuint(&mut h, 16);
    put_varuint(&mut h, 54412);
    put_str(&mut h, b"default");
    put_str(&mut h, b"default");
    put_str(&mut h, b"");
    s.write_all(&h).unwrap();
    assert_eq!(get_varuint(&mut s).unwrap(), 0, "server Hello");
    get_str(&mut s).unwrap();
    get_varuint(&mut s).unwrap();
    get_varuint(&mut s).unwrap();
    get_varuint(&mut s).unwrap();
    get_str(&mut s).unwrap(); // timezone
    get_str(&mut s).unwrap(); // display name
    get_varuint(&mut s).unwrap(); // patch
    s
}

/// A Query packet: `settings` as strings (18.16's typed format: string-typed settings only).
fn query(sql: &[u8], settings: &[(&str, &[u8])], compression: bool) -> Vec<u8> {
    let mut q = Vec::new();
    put_varuint(&mut q, 1);
    put_str(&mut q, b"");
    q.extend_from_slice(&chstorm_proto::native::packets::client_info(54412));
    for (k, v) in settings {
        put_str(&mut q, k.as_bytes());
        put_str(&mut q, v);
    }
    put_str(&mut q, b"");
    put_varuint(&mut q, 2);
    put_varuint(&mut q, compression as u64);
    put_str(&mut q, sql);
    q
}

/// A Data packet's start (external table `name`) and its block's start (info, one column of
/// `rows` rows of type `ty` named `c`), before the column's data.
fn data_start(name: &[u8], ty: &[u8], rows: u64) -> (Vec<u8>, Vec<u8>) {
    let mut p = Vec::new();
    put_varuint(&mut p, 2);
    put_str(&mut p, name);
    let mut b = vec![1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0];
    put_varuint(&mut b, 1);
    put_varuint(&mut b, rows);
    put_str(&mut b, b"c");
    put_str(&mut b, ty);
    (p, b)
}

/// The empty Data packet that ends a client's data (uncompressed).
fn end_of_data() -> Vec<u8> {
    let (mut p, _) = data_start(b"", b"", 0);
    p.extend_from_slice(&[1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]);
    p
}

/// An LZ4 frame of `data` (its checksum is not checked by the gateway, and the server never
/// sees these).
fn lz4_frame(data: &[u8]) -> Vec<u8> {
    let c = lz4_flex::block::compress(data);
    let mut f = vec![0u8; 16];
    f.push(0x82);
    f.extend_from_slice(&((c.len() + 9) as u32).to_le_bytes());
    f.extend_from_slice(&(data.len() as u32).to_le_bytes());
    f.extend_from_slice(&c);
    f
}

/// Reads an INSERT's answer up to its header block (which asks for the data): a TableColumns
/// packet first, when the server sends one, then a Data packet of no rows.
fn read_insert_header(s: &mut TcpStream) {
    loop {
        match get_varuint(s).unwrap() {
            11 => {
                get_str(s).unwrap();
                get_str(s).unwrap();
            }
            1 => break,
            other => panic!("packet {other} before the INSERT's header block"),
        }
    }
    get_str(s).unwrap(); // table name
    loop {
        match get_varuint(s).unwrap() {
            0 => break,
            1 => drop(s.read_exact(&mut [0u8; 1])),
            2 => drop(s.read_exact(&mut [0u8; 4])),
            other => panic!("block info field {other}"),
        }
    }
    let columns = get_varuint(s).unwrap();
    assert_eq!(get_varuint(s).unwrap(), 0, "no rows in a header block");
    for _ in 0..columns {
        get_str(s).unwrap();
        get_str(s).unwrap();
    }
}

/// The next Exception's (code, message), skipping other packets' codes only when none came:
/// None when the connection closed first.
fn exception(s: &mut TcpStream) -> Option<(u64, String)> {
    let code = get_varuint(s).ok()?;
    if code != 2 {
        return None;
    }
    let mut c = [0u8; 4];
    s.read_exact(&mut c).ok()?;
    get_str(s).ok()?;
    let msg = get_str(s).ok()?;
    Some((i32::from_le_bytes(c) as u64, String::from_utf8_lossy(&msg).into_owned()))
}

/// Writes `chunk` until `total` bytes went, the gateway closed, or its answer came; (the bytes
/// sent, the exception it answered). The answer is read while writing, as a client must: a
/// gateway that refuses closes the connection soon after, and a close with unread bytes resets
/// it, which can drop the exception before a client that only writes reads it.
fn pour(s: &mut TcpStream, total: usize, chunk: &[u8]) -> (usize, Option<(u64, String)>) {
    let mut r = s.try_clone().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let e = exception(&mut r);
            done.store(true, Ordering::Relaxed);
            e
        })
    };
    let mut sent = 0;
    while sent < total && !done.load(Ordering::Relaxed) {
        if s.write_all(chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    (sent, reader.join().unwrap())
}

/// True when the gateway has closed `s` (EOF or reset) within `limit`; how long it took.
fn closed_within(s: &mut TcpStream, limit: Duration) -> (bool, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return (true, t.elapsed()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return (false, t.elapsed())
            }
            Err(_) => return (true, t.elapsed()),
        }
    }
}

/// One attack on its own connection; (what it was, the exception code it must get, the
/// exception it got, if any).
type Attack = Box<dyn FnOnce() -> (String, u64, Option<(u64, String)>) + Send>;

fn attacks(native: SocketAddr) -> Vec<Attack> {
    let mut v: Vec<Attack> = Vec::new();
    // 1. Frame headers that claim 1 GiB, then silence (3 connections).
    for i in 0..3 {
        v.push(Box::new(move || {
            let mut s = hello(native);
            let (p, _) = data_start(b"", b"", 0);
            let mut b = query(b"SELECT 1", &[], true);
            b.extend_from_slice(&p);
            let mut h = vec![0u8; 16];
            h.push(0x82);
            h.extend_from_slice(&(1u32 << 30).to_le_bytes());
            h.extend_from_slice(&(1u32 << 30).to_le_bytes());
            b.extend_from_slice(&h);
            s.write_all(&b).unwrap();
            (format!("1 GiB frame header #{i}"), 241, exception(&mut s))
        }));
    }
    // 2. LZ4 frames of zeros (empty strings) in a block of 2^40 rows that never completes: 48 MiB
    //    decompressed each, then silence: closed after the packet timeout (2 connections).
    for i in 0..2 {
        v.push(Box::new(move || {
            let mut s = hello(native);
            let (p, b) = data_start(b"", b"String", 1 << 40);
            let mut out = query(b"SELECT 1", &[], true);
            out.extend_from_slice(&p);
            out.extend_from_slice(&lz4_frame(&b));
            s.write_all(&out).unwrap();
            let frame = lz4_frame(&vec![0u8; MIB]);
            let (sent, exc) = pour(&mut s, 48 * frame.len(), &frame.repeat(16));
            (format!("never-ending LZ4 block #{i} ({} frames of 1 MiB)", sent / frame.len()), 101, exc)
        }));
    }
    // 3. One Query packet with 600 MiB of settings.
    v.push(Box::new(move || {
        let mut s = hello(native);
        let mut out = query(b"SELECT 1", &[], false);
        // Cut before the settings' end: settings follow the client info.
        let head_len = 1 + 1 + chstorm_proto::native::packets::client_info(54412).len();
        out.truncate(head_len);
        s.write_all(&out).unwrap();
        let mut one = Vec::new();
        put_str(&mut one, b"format_schema");
        put_str(&mut one, &vec![b'x'; MIB]);
        let (sent, exc) = pour(&mut s, 600 * MIB, &one);
        (format!("600 MiB of settings ({} MiB sent)", sent / MIB), 241, exc)
    }));
    // 4. Data packets of 768 MiB: an external table (3 connections) and an INSERT's block
    //    (3 connections): 6 x 256 MiB would pass the 512 MiB budget.
    for i in 0..6 {
        v.push(Box::new(move || {
            let mut s = hello(native);
            let (p, mut b) = data_start(b"big", b"String", 1);
            put_varuint(&mut b, 768 * MIB as u64);
            let mut out = Vec::new();
            if i % 2 == 0 {
                out.extend_from_slice(&query(b"SELECT count() FROM big", &[], false));
            } else {
                out.extend_from_slice(&query(b"INSERT INTO mem_sink VALUES", &[], false));
                out.extend_from_slice(&end_of_data());
                s.write_all(&out).unwrap();
                out.clear();
                read_insert_header(&mut s);
            }
            out.extend_from_slice(&p);
            out.extend_from_slice(&b);
            s.write_all(&out).unwrap();
            let (sent, exc) = pour(&mut s, 768 * MIB, &vec![b'y'; MIB]);
            let kind = if i % 2 == 0 { "external table" } else { "INSERT block" };
            (format!("768 MiB data packet, {kind} #{i} ({} MiB sent)", sent / MIB), 241, exc)
        }));
    }
    v
}

#[test]
fn client_buffers_stay_within_the_documented_bound() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let env = chstorm_testenv::start_cluster();
    for n in env.node_urls() {
        let (code, _, body) = chstorm_testenv::curl(&[
            "--data-binary",
            "CREATE TABLE IF NOT EXISTS mem_sink (c String) ENGINE = Null",
            &format!("{n}/"),
        ]);
        assert_eq!(code, 200, "{body}");
    }
    const CONN_MIB: usize = 256;
    const ALL_MIB: usize = 512;
    let gw = Gw::start(
        &env,
        &format!("  max_client_buffer_mib: {CONN_MIB}\n  max_buffered_mib: {ALL_MIB}\n  client_packet_timeout: 5s\n"),
    );
    // Warm up both ports, then take the idle RSS as the base.
    for _ in 0..20 {
        let out = http_select_1(gw.http).1;
        assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("\n1\n"), "{out}");
    }
    let mut s = hello(gw.native);
    s.write_all(&query(b"SELECT 1", &[], false)).unwrap();
    s.write_all(&end_of_data()).unwrap();
    drop(s);
    std::thread::sleep(Duration::from_millis(500));
    let base_kib = gw.status_kib("VmRSS");
    gw.reset_peak();

    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let stop = stop.clone();
        let http = gw.http;
        std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let (took, out) = http_select_1(http);
                assert!(out.starts_with("HTTP/1.1 200"), "after {took:?}: {out:?}");
                worst = worst.max(took);
                n += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (n, worst)
        })
    };
    let t = Instant::now();
    let only: Option<Vec<usize>> =
        std::env::var("ATTACKS").ok().map(|v| v.split(',').map(|x| x.parse().unwrap()).collect());
    let runs: Vec<_> = attacks(gw.native)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| only.as_ref().is_none_or(|o| o.contains(i)))
        .map(|(_, a)| std::thread::spawn(a))
        .collect();
    let results: Vec<_> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (probes, worst) = prober.join().unwrap();
    let hwm_kib = gw.status_kib("VmHWM");
    let rss_kib = gw.status_kib("VmRSS");
    let bound_kib = base_kib + (ALL_MIB as u64 + 64) * 1024;
    println!(
        "attacks took {took:?}; gateway RSS idle {} MiB, peak {} MiB, after {} MiB; documented bound {} MiB; \
         HTTP SELECT 1: {probes} probes, slowest {worst:?}",
        base_kib / 1024,
        hwm_kib / 1024,
        rss_kib / 1024,
        bound_kib / 1024
    );
    let mut gateway_full = 0;
    for (what, want, exc) in &results {
        println!("{what}: {exc:?}");
        let (code, msg) = exc.as_ref().unwrap_or_else(|| panic!("{what}: no exception"));
        assert_eq!(code, want, "{what}: {msg}");
        let limit = match want {
            241 => ["limits.max_client_buffer_mib", "limits.max_buffered_mib"],
            _ => ["limits.client_packet_timeout"; 2],
        };
        assert!(limit.iter().any(|l| msg.contains(l)), "{what}: {msg}");
        gateway_full += msg.contains("limits.max_buffered_mib") as u32;
    }
    assert!(only.is_some() || gateway_full >= 1, "6 x 256 MiB of data passed the 512 MiB budget somewhere");
    assert!(hwm_kib < bound_kib, "peak RSS {hwm_kib} KiB over the bound {bound_kib} KiB");
    // A debug build of the gateway on one worker, beside 14 attacking threads and 4 servers on
    // 2 shared cores (a release build answers in milliseconds).
    assert!(worst < Duration::from_secs(3), "an HTTP SELECT 1 took {worst:?} during the attacks");
    // Everything was given back: a normal query still runs, over both ports.
    assert!(http_select_1(gw.http).1.starts_with("HTTP/1.1 200"));
    let mut s = hello(gw.native);
    s.write_all(&query(b"SELECT 1", &[], false)).unwrap();
    s.write_all(&end_of_data()).unwrap();
    assert_eq!(get_varuint(&mut s).unwrap(), 1, "a Data packet, not an exception");
}

#[test]
fn a_client_that_stops_mid_packet_is_closed_after_the_packet_timeout() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let env = chstorm_testenv::start_cluster();
    let gw = Gw::start(&env, "  client_packet_timeout: 2s\n");
    let q = query(b"SELECT 1", &[], true);
    let (p, b) = data_start(b"", b"String", 10);
    let mut frame = lz4_frame(&b);
    frame.truncate(frame.len() - 3);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a Query without its end of data", q.clone()),
        ("half a Query packet", q[..q.len() / 2].to_vec()),
        ("a truncated frame", [&q[..], &p[..], &frame[..]].concat()),
        ("a frame header and no frame", [&q[..], &p[..], &frame[..25]].concat()),
        ("a Data packet's table name only", [&q[..], &p[..]].concat()),
    ];
    let runs: Vec<_> = cases
        .into_iter()
        .map(|(what, bytes)| {
            let native = gw.native;
            std::thread::spawn(move || {
                let mut s = hello(native);
                s.write_all(&bytes).unwrap();
                let (closed, took) = closed_within(&mut s, Duration::from_secs(20));
                (what, closed, took)
            })
        })
        .collect();
    // Meanwhile a client idle between queries is not closed: the limit is for a packet begun.
    let mut idle = hello(gw.native);
    for (what, closed, took) in runs.into_iter().map(|h| h.join().unwrap()) {
        println!("{what}: closed {closed} after {took:?}");
        assert!(closed && took >= Duration::from_millis(1900) && took < Duration::from_secs(8), "{what}: {took:?}");
    }
    idle.write_all(&query(b"SELECT 1", &[], false)).unwrap();
    idle.write_all(&end_of_data()).unwrap();
    assert_eq!(get_varuint(&mut idle).unwrap(), 1, "the idle client's query is answered");
}

#[test]
fn invalid_utf8_in_a_query_reaches_the_server_unchanged() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let env = chstorm_testenv::start_cluster();
    let gw = Gw::start(&env, "");
    let direct = env.cluster.topology().node(1, 1).unwrap().tcp_port;
    let client = |port: u16, sql: &[u8]| -> (bool, Vec<u8>) {
        use std::os::unix::ffi::OsStrExt;
        let out = Command::new("timeout")
            .args(["60", "clickhouse-client", "--host", "127.0.0.1", "--port", &port.to_string(), "--query"])
            .arg(std::ffi::OsStr::from_bytes(sql))
            .output()
            .unwrap();
        (out.status.success(), out.stdout)
    };
    let mut seqs: Vec<Vec<u8>> = vec![
        b"\xff".to_vec(),
        b"\xc3".to_vec(),
        b"\xe2\x82".to_vec(),
        b"\xed\xa0\x80".to_vec(),
        b"\xf4\x90\x80\x80".to_vec(),
        b"\xc0\xaf".to_vec(),
        b"a\x80b\xfe\xfd".to_vec(),
    ];
    // And generated ones: random high bytes.
    let mut x = 0x9e3779b97f4a7c15u64;
    for _ in 0..8 {
        let n = (x % 6 + 1) as usize;
        let mut v = Vec::new();
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(0x80 | (x as u8));
        }
        seqs.push(v);
    }
    for seq in seqs {
        let mut sql = b"SELECT length('".to_vec();
        sql.extend_from_slice(&seq);
        sql.extend_from_slice(b"') AS n, hex('");
        sql.extend_from_slice(&seq);
        sql.extend_from_slice(b"') AS h, '");
        sql.extend_from_slice(&seq);
        sql.extend_from_slice(b"' AS raw");
        let want = client(direct, &sql);
        let got = client(gw.native.port(), &sql);
        assert!(want.0, "{seq:x?}");
        assert_eq!(got, want, "{seq:x?}");
        assert!(want.1.starts_with(format!("{}\t", seq.len()).as_bytes()), "{seq:x?}: {:?}", want.1);
    }
}

#[test]
fn a_finished_query_gives_its_room_back() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let env = chstorm_testenv::start_cluster();
    // A 1 MiB budget; queries with 700 KiB of settings, one after another on connections that
    // stay open: each fits only if the one before gave its room back when it ended.
    let gw = Gw::start(&env, "  max_buffered_mib: 1\n");
    let big = vec![b'x'; 700 << 10];
    let mut open = Vec::new();
    for i in 0..3 {
        let mut s = hello(gw.native);
        s.write_all(&query(b"SELECT 1", &[("format_schema", &big)], false)).unwrap();
        s.write_all(&end_of_data()).unwrap();
        let code = get_varuint(&mut s).unwrap();
        assert_eq!(code, 1, "query {i}: a Data packet, not an exception ({:?})", exception_after(code, &mut s));
        open.push(s);
    }
}

/// The Exception whose packet code was already read as `code`.
fn exception_after(code: u64, s: &mut TcpStream) -> Option<(u64, String)> {
    if code != 2 {
        return None;
    }
    let mut c = [0u8; 4];
    s.read_exact(&mut c).ok()?;
    get_str(s).ok()?;
    let msg = get_str(s).ok()?;
    Some((i32::from_le_bytes(c) as u64, String::from_utf8_lossy(&msg).into_owned()))
}
