//! [`scan`] against the awaiting readers, on generated packets: the same end wherever the scan
//! knows one, on every packet it should know, and never an end for a packet not yet whole.

use super::*;
use crate::native::packets::{skip_profile_info, skip_progress};
use crate::native::server::block::{server_mem, skip_block, Scratch};
use crate::native::wire::{put_str, put_varuint, Io};
use crate::test_rng::Rng;

const REVISIONS: [u64; 6] = [50264, 51554, 54412, 54420, 54454, 54460];

/// A column type name, at most `depth` levels of nesting.
fn type_name(r: &mut Rng, depth: u32) -> String {
    let leaf = ["UInt8", "Int16", "UInt32", "Int64", "Float64", "Date", "DateTime", "UUID", "String", "FixedString(3)"];
    match if depth == 0 { 0 } else { r.below(5) } {
        0 | 1 => leaf[r.below(leaf.len() as u64) as usize].to_string(),
        2 => format!("Nullable({})", leaf[r.below(leaf.len() as u64) as usize]),
        3 => format!("Array({})", type_name(r, depth - 1)),
        _ => {
            let n = 1 + r.below(3);
            let parts: Vec<String> = (0..n).map(|_| type_name(r, depth - 1)).collect();
            format!("Tuple({})", parts.join(", "))
        }
    }
}

/// `rows` rows of the column `nodes[i]`, serialized as the module doc of `columns` says.
fn column(r: &mut Rng, out: &mut Vec<u8>, nodes: &[Node], i: usize, rows: u64) {
    if rows == 0 {
        return;
    }
    match nodes[i].kind {
        Kind::Fixed(w) => out.extend((0..rows * u64::from(w)).map(|_| r.below(256) as u8)),
        Kind::Str => {
            for _ in 0..rows {
                let s: Vec<u8> = (0..r.below(12)).map(|_| r.below(256) as u8).collect();
                put_str(out, &s);
            }
        }
        Kind::Nullable => {
            out.extend((0..rows).map(|_| r.below(2) as u8));
            column(r, out, nodes, i + 1, rows);
        }
        Kind::Array => {
            let mut total = 0;
            for _ in 0..rows {
                total += r.below(4);
                out.extend_from_slice(&total.to_le_bytes());
            }
            column(r, out, nodes, i + 1, total);
        }
        Kind::Tuple => {
            let mut child = i + 1;
            while child < nodes[i].end as usize {
                column(r, out, nodes, child, rows);
                child = nodes[child].end as usize;
            }
        }
        Kind::LowCardinality => unreachable!("not generated"),
    }
}

/// A server packet a read's answer may hold.
fn packet(r: &mut Rng, revision: u64) -> Vec<u8> {
    let mut p = Vec::new();
    match r.below(5) {
        0 | 1 => {
            let codes = [server::DATA, server::TOTALS, server::EXTREMES, server::LOG, server::PROFILE_EVENTS];
            put_varuint(&mut p, codes[r.below(codes.len() as u64) as usize]);
            put_str(&mut p, if r.below(2) == 0 { b"" } else { b"_data" });
            if revision >= rev::BLOCK_INFO {
                p.extend_from_slice(&[1, r.below(2) as u8, 2]);
                p.extend_from_slice(&(-1i32).to_le_bytes());
                p.push(0);
            }
            let (columns, rows) = (r.below(4), [0, 1, 2, 7, 100][r.below(5) as usize]);
            put_varuint(&mut p, columns);
            put_varuint(&mut p, rows);
            for c in 0..columns {
                put_str(&mut p, format!("c{c}").as_bytes());
                let ty = type_name(r, 3);
                put_str(&mut p, ty.as_bytes());
                if revision >= rev::CUSTOM_SERIALIZATION {
                    p.push(0); // no custom serialization
                }
                let mut plan = Plan::default();
                plan.compile(&ty).unwrap();
                column(r, &mut p, plan.nodes(), 0, rows);
            }
        }
        2 => {
            put_varuint(&mut p, server::PROGRESS);
            let n = 2
                + usize::from(revision >= rev::TOTAL_ROWS_IN_PROGRESS)
                + 2 * usize::from(revision >= rev::CLIENT_WRITE_INFO)
                + usize::from(revision >= rev::SERVER_QUERY_TIME_IN_PROGRESS);
            (0..n).for_each(|_| put_varuint(&mut p, r.next() >> r.below(64)));
        }
        3 => {
            put_varuint(&mut p, server::PROFILE_INFO);
            (0..3).for_each(|_| put_varuint(&mut p, r.below(1 << 20)));
            p.push(r.below(2) as u8);
            put_varuint(&mut p, r.below(1000));
            p.push(r.below(2) as u8);
        }
        _ => put_varuint(&mut p, server::END_OF_STREAM),
    }
    p
}

/// The awaiting readers on `bytes`, as the gateway reads an answer's packet: (code, length).
async fn awaited(bytes: &[u8], revision: u64, compressed: bool) -> Option<(u64, usize)> {
    awaited_shape(bytes, revision, compressed).await.map(|(code, len, _)| (code, len))
}

/// [`awaited`], and a block's shape.
async fn awaited_shape(bytes: &[u8], revision: u64, compressed: bool) -> Option<(u64, usize, Option<Shape>)> {
    let mut shape = None;
    let mut io = Io::new(bytes);
    let code = io.varuint().await.ok()?;
    match code {
        server::DATA | server::TOTALS | server::EXTREMES | server::LOG | server::PROFILE_EVENTS => {
            if revision >= rev::TEMPORARY_TABLES {
                io.skip_string().await.ok()?;
            }
            let c = compressed && code != server::LOG && code != server::PROFILE_EVENTS;
            shape = Some(skip_block(&mut io, revision, c, &mut Scratch::default(), server_mem()).await.ok()?);
        }
        server::PROGRESS => skip_progress(&mut io, revision).await.ok()?,
        server::PROFILE_INFO => skip_profile_info(&mut io).await.ok()?,
        server::END_OF_STREAM => {}
        _ => return None,
    }
    Some((code, io.position() as usize, shape))
}

#[tokio::test]
async fn finds_the_end_the_awaiting_readers_find() {
    let mut r = Rng(0x5eed_0001);
    let mut plan = Scratch::default();
    for n in 0..600 {
        let revision = REVISIONS[n % REVISIONS.len()];
        let p = packet(&mut r, revision);
        let mut bytes = p.clone();
        bytes.extend((0..r.below(6)).map(|_| r.below(256) as u8)); // the next packet's start
        let (code, len, shape) = awaited_shape(&bytes, revision, false).await.expect("a generated packet reads");
        assert_eq!(len, p.len(), "the awaiting readers, packet {n}");
        // A Data packet's body, as a client's is read.
        if let Some(shape) = shape {
            let body = data_in(&bytes[1..], revision, false, &mut plan);
            assert_eq!(body, Some((len - 1, shape)), "packet {n}'s body");
            assert_eq!(data_in(&bytes[1..], revision, true, &mut plan), None);
        }
        assert_eq!(scan(&bytes, revision, false, &mut plan), Scan::Whole { code, len }, "packet {n}: {p:?}");
        for cut in 0..p.len() {
            assert_eq!(scan(&p[..cut], revision, false, &mut plan), Scan::Unsure, "packet {n} cut at {cut}");
        }
        // A compressed query's blocks are left to the awaiting readers (a Log block never is).
        let data = matches!(code, server::DATA | server::TOTALS | server::EXTREMES);
        let compressed = scan(&bytes, revision, true, &mut plan);
        assert_eq!(compressed == Scan::Unsure, data, "packet {n} compressed");
    }
}

#[tokio::test]
async fn never_ends_a_packet_the_awaiting_readers_refuse_or_end_elsewhere() {
    let mut r = Rng(0x5eed_0002);
    let mut plan = Scratch::default();
    let mut whole = 0;
    for n in 0..20_000 {
        let revision = REVISIONS[n % REVISIONS.len()];
        // Packets with bytes changed at random, and random bytes after a known code.
        let mut bytes = packet(&mut r, revision);
        for _ in 0..1 + r.below(3) {
            let at = r.below(bytes.len() as u64) as usize;
            bytes[at] = r.below(256) as u8;
        }
        if n % 4 == 0 {
            bytes.truncate(1);
            bytes.extend((0..r.below(40)).map(|_| r.below(256) as u8));
        }
        if let Scan::Whole { code, len } = scan(&bytes, revision, false, &mut plan) {
            assert_eq!(awaited(&bytes, revision, false).await, Some((code, len)), "{bytes:?}");
            whole += 1;
        }
    }
    assert!(whole > 1000, "only {whole} of the changed packets were scanned whole");
}

#[tokio::test]
async fn leaves_low_cardinality_and_unknown_packets_to_the_awaiting_readers() {
    let mut plan = Scratch::default();
    // Array(LowCardinality(String)), one empty array: its state prefix comes first all the same.
    let mut p = vec![server::DATA as u8, 0, 1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 1, 1];
    put_str(&mut p, b"a");
    put_str(&mut p, b"Array(LowCardinality(String))");
    p.extend_from_slice(&1u64.to_le_bytes()); // the key serialization version
    p.extend_from_slice(&0u64.to_le_bytes()); // the array's offset
    assert_eq!(awaited(&p, 54412, false).await, Some((server::DATA, p.len())));
    assert_eq!(scan(&p, 54412, false, &mut plan), Scan::Unsure);
    // Read as if it had no prefix, this one would seem to end 8 bytes early.
    let mut p = vec![server::DATA as u8, 0, 1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 1, 1];
    put_str(&mut p, b"t");
    put_str(&mut p, b"Tuple(UInt64, Array(LowCardinality(String)))");
    p.extend_from_slice(&1u64.to_le_bytes()); // the key serialization version
    p.extend_from_slice(&0u64.to_le_bytes()); // the UInt64
    p.extend_from_slice(&0u64.to_le_bytes()); // the array's offset
    assert_eq!(awaited(&p, 54412, false).await, Some((server::DATA, p.len())));
    assert_eq!(scan(&p, 54412, false, &mut plan), Scan::Unsure);
    for code in [server::EXCEPTION, server::TABLE_COLUMNS, server::PONG, 99] {
        let mut p = Vec::new();
        put_varuint(&mut p, code);
        p.extend_from_slice(&[0; 32]);
        assert_eq!(scan(&p, 54412, false, &mut plan), Scan::Unsure, "code {code}");
    }
    assert_eq!(scan(&[], 54412, false, &mut plan), Scan::Unsure);
}
