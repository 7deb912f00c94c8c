//! [`query_in`] against [`read_query`] on generated Query packets: the same query, length and
//! charge wherever `query_in` takes one; every well-formed packet taken; no prefix taken.

use super::*;
use crate::mem::{Budget, Mem};
use crate::test_rng::Rng;

const REVISIONS: [u64; 11] = [54032, 54058, 54060, 54401, 54412, 54429, 54442, 54449, 54453, 54459, 54460];

fn client_info(r: &mut Rng, p: &mut Vec<u8>, revision: u64) {
    let kind = r.below(3) as u8;
    p.push(kind);
    if kind == 0 {
        return;
    }
    (0..3).for_each(|_| put_str(p, &r.bytes(12)));
    if revision >= rev::INITIAL_QUERY_START_TIME {
        p.extend_from_slice(&r.next().to_le_bytes());
    }
    // TCP, HTTP, or another interface (6: clickhouse-local and chdb) with no fields.
    let interface = [1u8, 2, 6][r.below(3) as usize];
    p.push(interface);
    if interface == 1 {
        (0..3).for_each(|_| put_str(p, &r.bytes(12)));
        (0..3).for_each(|_| put_varuint(p, r.below(60000)));
    } else if interface == 2 {
        p.push(r.below(3) as u8);
        put_str(p, &r.bytes(20));
        if revision >= rev::X_FORWARDED_FOR_IN_CLIENT_INFO {
            put_str(p, &r.bytes(10));
        }
        if revision >= rev::REFERER_IN_CLIENT_INFO {
            put_str(p, &r.bytes(10));
        }
    }
    if revision >= rev::QUOTA_KEY_IN_CLIENT_INFO {
        put_str(p, &r.bytes(8));
    }
    if revision >= rev::DISTRIBUTED_DEPTH {
        put_varuint(p, r.below(3));
    }
    if revision >= rev::VERSION_PATCH && interface == 1 {
        put_varuint(p, r.below(30));
    }
    if revision >= rev::OPENTELEMETRY {
        let traced = r.below(2) as u8;
        p.push(traced);
        if traced == 1 {
            p.extend_from_slice(&r.bytes(24).iter().chain([0u8; 24].iter()).take(24).copied().collect::<Vec<_>>());
            put_str(p, &r.bytes(10));
            p.push(1);
        }
    }
    if revision >= rev::PARALLEL_REPLICAS {
        (0..3).for_each(|_| put_varuint(p, r.below(5)));
    }
}

/// A Query packet's body as a client at `revision` sends it.
fn query(r: &mut Rng, revision: u64) -> Vec<u8> {
    let mut p = Vec::new();
    put_str(&mut p, &r.bytes(36));
    if revision >= rev::CLIENT_INFO {
        client_info(r, &mut p, revision);
    }
    for _ in 0..r.below(5) {
        if revision >= rev::SETTINGS_AS_STRINGS {
            // Any name, flags, a string.
            put_str(&mut p, [&b"max_threads"[..], b"enable_analyzer", b"async_insert"][r.below(3) as usize]);
            put_varuint(&mut p, r.below(3));
            put_str(&mut p, &r.bytes(6));
            continue;
        }
        match r.below(4) {
            0 => {
                put_str(&mut p, [&b"max_threads"[..], b"max_block_size", b"readonly"][r.below(3) as usize]);
                put_varuint(&mut p, r.next() >> r.below(64));
            }
            1 => {
                put_str(&mut p, b"distributed_ddl_task_timeout");
                put_varuint(&mut p, r.next() >> r.below(64));
            }
            _ => {
                put_str(&mut p, [&b"load_balancing"[..], b"format_csv_delimiter"][r.below(2) as usize]);
                put_str(&mut p, &r.bytes(10));
            }
        }
    }
    put_str(&mut p, b"");
    if revision >= rev::INTERSERVER_SECRET {
        put_str(&mut p, b"");
    }
    put_varuint(&mut p, r.below(3));
    put_varuint(&mut p, r.below(2));
    put_str(&mut p, &r.bytes(200));
    if revision >= rev::PARAMETERS {
        for _ in 0..r.below(3) {
            put_str(&mut p, [&b"id"[..], b"name"][r.below(2) as usize]);
            put_varuint(&mut p, 2); // custom
            put_str(&mut p, &r.bytes(8));
        }
        put_str(&mut p, b"");
    }
    p
}

/// [`read_query`] on `bytes`: the query, where it ended, what it charged.
async fn awaited(bytes: &[u8], revision: u64, mem: &Mem) -> Option<(String, usize, usize)> {
    let mut io = Io::new(bytes);
    let mut charge = mem.charge();
    let q = read_query(&mut io, revision, &mut charge).await.ok()?;
    Some((format!("{q:?}"), io.position() as usize, charge.bytes()))
}

fn taken(bytes: &[u8], revision: u64, mem: &Mem) -> Option<(String, usize, usize)> {
    let mut charge = mem.charge();
    let (q, n) = query_in(bytes, revision, &mut charge)?;
    Some((format!("{q:?}"), n, charge.bytes()))
}

#[tokio::test]
async fn takes_the_query_read_query_reads() {
    let mut r = Rng(0x5eed_0101);
    let mem = Mem::unbounded();
    for n in 0..500 {
        let revision = REVISIONS[n % REVISIONS.len()];
        let p = query(&mut r, revision);
        let mut bytes = p.clone();
        bytes.extend_from_slice(&[2, 0, 1, 0]); // the Data packet that follows
        let want = awaited(&bytes, revision, &mem).await.expect("a generated packet reads");
        assert_eq!(want.1, p.len());
        assert_eq!(taken(&bytes, revision, &mem), Some(want), "packet {n}: {p:?}");
        for cut in 0..p.len() {
            assert_eq!(taken(&p[..cut], revision, &mem), None, "packet {n} cut at {cut}");
        }
        assert_eq!(mem.used(), 0, "nothing held after");
    }
}

#[tokio::test]
async fn never_takes_what_read_query_refuses_or_reads_otherwise() {
    let mut r = Rng(0x5eed_0102);
    let budget = Budget::new(1 << 30);
    let mut agreed = 0;
    for n in 0..5000 {
        let revision = REVISIONS[n % REVISIONS.len()];
        let mut bytes = query(&mut r, revision);
        for _ in 0..r.below(3) {
            let at = r.below(bytes.len() as u64) as usize;
            bytes[at] = r.below(256) as u8;
        }
        if n % 5 == 0 {
            // An unknown setting.
            bytes.truncate(r.below(bytes.len() as u64) as usize);
            put_str(&mut bytes, b"no_such_setting");
            put_varuint(&mut bytes, 1);
        }
        // A small ceiling refuses some charges.
        let mem = budget.conn(if n % 3 == 0 { r.below(400) as usize } else { 1 << 20 });
        if let Some(got) = taken(&bytes, revision, &mem) {
            assert_eq!(awaited(&bytes, revision, &mem).await, Some(got), "{bytes:?}");
            agreed += 1;
        }
        assert_eq!(mem.used(), 0);
    }
    assert!(agreed > 500, "only {agreed} changed packets were taken");
}
