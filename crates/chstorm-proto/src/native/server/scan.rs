//! Where a server packet ends, found in bytes already read, without awaiting.
//!
//! The gateway reads a replica's answer packet by packet to find where each ends ([`block`],
//! [`crate::native::packets`]). Those readers await at every field, which costs more than the
//! field itself: a `SELECT 1` answer is about 8 packets and 60 fields. Nearly always the whole
//! packet is already in the read buffer, so [`scan`] walks it there first, synchronously, and
//! says where it ends. It knows the packets a read's answer is made of: Data, Totals, Extremes
//! and Log blocks (plain, with any column type but `LowCardinality`), Progress, ProfileInfo and
//! EndOfStream. Anything else, a packet not whole yet, a compressed block, or a value past a
//! limit is [`Scan::Unsure`]: the caller then reads the packet with the awaiting readers, which
//! also give every error its message. So the scan never decides an error, and never accepts
//! what those readers refuse (a test checks the two agree on generated packets and on every
//! prefix of them).
//!
//! [`block`]: super::block

use super::block::{Scratch, Shape};
use crate::native::columns::{Kind, Node, Plan};
use crate::native::packets::{progress_fields, rev, server};
use crate::native::wire::{Cursor, MAX_STRING_LEN, MAX_TEXT_LEN};
use crate::native::{MAX_COLUMNS, MAX_ROWS};

/// What [`scan`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A whole packet of this code, the first `len` bytes.
    Whole { code: u64, len: usize },
    /// Not known here: read the packet with the awaiting readers.
    Unsure,
}

/// Where the server packet that starts `buf` ends, when it is whole in `buf` and of a kind
/// this knows (see the module doc). `scratch` is the connection's, as the awaiting readers'.
pub fn scan(buf: &[u8], revision: u64, compressed: bool, scratch: &mut Scratch) -> Scan {
    let mut c = Cursor::new(buf);
    let Some(code) = c.varuint() else { return Scan::Unsure };
    let body = match code {
        server::DATA | server::TOTALS | server::EXTREMES | server::LOG | server::PROFILE_EVENTS => {
            // Server logs and profile events are never compressed.
            if compressed && code != server::LOG && code != server::PROFILE_EVENTS {
                return Scan::Unsure;
            }
            data(&mut c, revision, &mut scratch.plan).map(drop)
        }
        server::PROGRESS => (0..progress_fields(revision)).try_for_each(|_| c.varuint().map(drop)),
        server::PROFILE_INFO => profile_info(&mut c),
        server::END_OF_STREAM => Some(()),
        _ => None,
    };
    match body {
        Some(()) => Scan::Whole { code, len: c.pos() },
        None => Scan::Unsure,
    }
}

/// Where a Data packet's body (its table name and block, after its code) that starts `buf`
/// ends, when it is whole in `buf` and [`scan`] would know it: a client's Data packet, read as a
/// server's is.
pub fn data_in(buf: &[u8], revision: u64, compressed: bool, scratch: &mut Scratch) -> Option<(usize, Shape)> {
    if compressed {
        return None;
    }
    let mut c = Cursor::new(buf);
    data(&mut c, revision, &mut scratch.plan).map(|shape| (c.pos(), shape))
}

/// A ProfileInfo packet's body: rows, blocks, bytes, applied_limit, rows_before_limit,
/// calculated_rows_before_limit.
fn profile_info(c: &mut Cursor<'_>) -> Option<()> {
    c.varuint()?;
    c.varuint()?;
    c.varuint()?;
    c.u8()?;
    c.varuint()?;
    c.u8()?;
    Some(())
}

/// A Data packet's body: the external table's name, then a plain block.
fn data(c: &mut Cursor<'_>, revision: u64, plan: &mut Plan) -> Option<Shape> {
    if revision >= rev::TEMPORARY_TABLES {
        c.string(MAX_STRING_LEN)?;
    }
    if revision >= rev::BLOCK_INFO {
        loop {
            match c.varuint()? {
                0 => break,
                1 => drop(c.u8()?),
                2 => drop(c.take(4)?),
                _ => return None,
            }
        }
    }
    let columns = c.count(MAX_COLUMNS)?;
    let rows = c.count(MAX_ROWS)?;
    for _ in 0..columns {
        c.string(MAX_STRING_LEN)?;
        let ty = std::str::from_utf8(c.string(MAX_TEXT_LEN)?).ok()?;
        // The custom serialization byte (from 54454): only 0 is known here.
        if revision >= rev::CUSTOM_SERIALIZATION && c.u8()? != 0 {
            return None;
        }
        if rows == 0 {
            continue; // no column data: the type need not be known (as `block` reads it)
        }
        plan.compile(ty).ok()?;
        // Its state prefixes come before any data, even when every array in it is empty.
        if plan.nodes().iter().any(|n| n.kind == Kind::LowCardinality) {
            return None;
        }
        column(c, plan.nodes(), 0, rows)?;
    }
    Some(Shape { columns, rows })
}

/// Skips `rows` rows of the column whose type is `nodes[i]` (its subtree after it). A block
/// with zero rows has no column data; type trees nest at most 32 deep (the plan's limit), so
/// the recursion is bounded.
fn column(c: &mut Cursor<'_>, nodes: &[Node], i: usize, rows: u64) -> Option<()> {
    if rows == 0 {
        return Some(());
    }
    let node = nodes.get(i)?;
    match node.kind {
        Kind::Fixed(w) => {
            c.take(rows.checked_mul(u64::from(w))?)?;
        }
        Kind::Str => {
            for _ in 0..rows {
                c.string(MAX_STRING_LEN)?;
            }
        }
        Kind::Nullable => {
            c.take(rows)?;
            column(c, nodes, i + 1, rows)?;
        }
        Kind::Array => {
            c.take((rows - 1).checked_mul(8)?)?;
            let n = c.u64_le()?;
            column(c, nodes, i + 1, n)?;
        }
        Kind::Tuple => {
            let mut child = i + 1;
            while child < node.end as usize {
                column(c, nodes, child, rows)?;
                child = nodes[child].end as usize;
            }
        }
        Kind::LowCardinality => return None, // refused in `data` already
    }
    Some(())
}

#[cfg(test)]
mod tests;
