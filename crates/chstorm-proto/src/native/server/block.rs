//! Finding where a data block ends, to relay it without re-encoding.
//!
//! A block is parsed with `chstorm_proto`'s column skipper (no row is materialised) while the
//! reader's tee ([`Io::tee_start`]) records the bytes, which then go out unchanged. A compressed
//! block (the Query packet's compression flag) is a run of ClickHouse frames — a 16-byte
//! checksum, a method byte, the compressed size (with the 9-byte header) and the decompressed
//! size, both `u32`, then the data — ending with the block, but a block over
//! `max_compress_block_size` (1 MiB) spans several, and nothing marks the last one: so each
//! frame is decompressed and the block is parsed from the decompressed bytes until it is whole.
//! Frames are relayed as read: their checksums are checked by the receiver, not here.
//!
//! Methods: LZ4 (ClickHouse's default `network_compression_method`), ZSTD (decoded with the
//! `zstd` crate, libzstd's bindings) and none.
//!
//! # Memory
//!
//! Everything buffered is charged to the connection's account ([`Mem`]) before it is
//! allocated: a frame's claimed sizes are checked against the 1 GiB frame limit and the
//! connection's ceiling when its header arrives (a header that claims more than the connection
//! may hold fails at once), and its bytes are charged and stored as they arrive, never for a
//! size only claimed. The block is
//! parsed as it is decompressed, one frame at a time (the parser waits on a `Pipe` the
//! frames are pushed into), so only one frame's decompressed bytes are held however long the
//! block is, and no byte is parsed twice; after each 64 KiB parsed the task yields, so a long
//! block (a block of zeros is cheap to send and dear to parse) does not keep the worker's other
//! connections waiting. The raw bytes relayed are the caller's tee's
//! ([`Io::tee_start_charged`]).

use crate::mem::{Charge, Mem, MemError};
use crate::native::columns::{skip_column, Plan};
use crate::native::packets::{rev, skip_block_info};
use crate::native::wire::Io;
use crate::native::{MAX_COLUMNS, MAX_ROWS};
use crate::ProtoError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Largest frame (compressed or decompressed), as ClickHouse's own limit: 1 GiB.
pub const MAX_FRAME: usize = 1 << 30;
/// A frame's method byte: none (the data as it is).
pub const METHOD_NONE: u8 = 0x02;
/// A frame's method byte: LZ4 (also what LZ4HC writes).
pub const METHOD_LZ4: u8 = 0x82;
/// A frame's method byte: ZSTD.
pub const METHOD_ZSTD: u8 = 0x90;

/// Scratch space reused for every block of a connection (small: the column plan and stack).
#[derive(Default)]
pub struct Scratch {
    pub(crate) plan: Plan,
    stack: Vec<(u32, u64)>,
    type_name: Vec<u8>,
}

/// A block's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub columns: u64,
    pub rows: u64,
}

impl Shape {
    /// The empty block that ends a client's data.
    pub fn is_empty(&self) -> bool {
        self.columns == 0 && self.rows == 0
    }
}

/// Decompressed bytes waiting for the block parser; a read with none waiting, or past its
/// slice ([`SLICE`]), is pending (the parser is polled by hand, see [`compressed`]).
#[derive(Default, Clone)]
struct Pipe(Arc<Mutex<PipeState>>);

#[derive(Default)]
struct PipeState {
    data: Vec<u8>,
    at: usize,
    /// Bytes the parser may still read before it must let other tasks run.
    quota: usize,
}

/// Most decompressed bytes parsed between two chances for the worker's other tasks to run
/// (64 KiB: well under a millisecond in a release build). A block of zeros is cheap to send
/// and dear to parse.
const SLICE: usize = 64 << 10;

impl Pipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, PipeState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `data` to the parser; what it had is all read by now.
    fn push(&self, data: Vec<u8>) {
        let mut g = self.lock();
        g.data = data;
        g.at = 0;
    }

    /// Lets the parser read another [`SLICE`].
    fn next_slice(&self) {
        self.lock().quota = SLICE;
    }

    fn drained(&self) -> bool {
        let g = self.lock();
        g.at == g.data.len()
    }
}

impl AsyncRead for Pipe {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let mut g = self.lock();
        let n = buf.remaining().min(g.data.len() - g.at).min(g.quota);
        if n == 0 {
            return Poll::Pending;
        }
        let at = g.at;
        buf.put_slice(&g.data[at..at + n]);
        g.at += n;
        g.quota -= n;
        Poll::Ready(Ok(()))
    }
}

/// The account of what is buffered from servers: unbounded (a replica is trusted to keep to
/// its own frame size, 1 MiB).
pub fn server_mem() -> &'static Mem {
    static MEM: std::sync::LazyLock<Mem> = std::sync::LazyLock::new(Mem::unbounded);
    &MEM
}

/// Reads one block (after a Data packet's table name) from `io`; what it buffers is charged
/// to `mem`.
pub async fn skip_block<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    compressed: bool,
    s: &mut Scratch,
    mem: &Mem,
) -> Result<Shape, ProtoError> {
    if !compressed {
        return plain(io, revision, &mut s.plan, &mut s.stack, &mut s.type_name).await;
    }
    self::compressed(io, revision, s, mem).await
}

/// A frame's header: (method, compressed size without the header, decompressed size),
/// checked against [`MAX_FRAME`].
fn frame_head(head: &[u8; 25]) -> Result<(u8, usize, usize), ProtoError> {
    let csize = u32::from_le_bytes([head[17], head[18], head[19], head[20]]) as usize;
    let dsize = u32::from_le_bytes([head[21], head[22], head[23], head[24]]) as usize;
    if !(9..=MAX_FRAME).contains(&csize) || dsize > MAX_FRAME {
        return Err(ProtoError::Protocol(format!("bad compressed frame: {csize} bytes for {dsize}")));
    }
    Ok((head[16], csize - 9, dsize))
}

/// A compressed block: frames until the block parsed from their decompressed bytes is whole.
async fn compressed<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    s: &mut Scratch,
    mem: &Mem,
) -> Result<Shape, ProtoError> {
    let pipe = Pipe::default();
    let mut dio = Io::new(pipe.clone());
    let parse = async {
        let shape = plain(&mut dio, revision, &mut s.plan, &mut s.stack, &mut s.type_name).await?;
        Ok::<_, ProtoError>((shape, dio.has_buffered()))
    };
    tokio::pin!(parse);
    let mut charge = mem.charge();
    // Decompressed bytes parsed since the worker's other tasks last had a turn.
    let mut parsed = 0;
    loop {
        let head: [u8; 25] = io.array().await?;
        let (method, clen, dlen) = frame_head(&head)?;
        let dec = frame(io, method, clen, dlen, &mut charge).await?;
        pipe.push(dec);
        loop {
            if parsed >= SLICE {
                tokio::task::yield_now().await;
                parsed = 0;
            }
            pipe.next_slice();
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let polled = parse.as_mut().poll(&mut cx);
            parsed += SLICE - pipe.lock().quota;
            match polled {
                Poll::Ready(Ok((shape, left))) => {
                    if left || !pipe.drained() {
                        return Err(ProtoError::Protocol("a compressed block does not end with its frame".into()));
                    }
                    return Ok(shape);
                }
                Poll::Ready(Err(e)) => return Err(e),
                // Not whole yet: the next frame continues it.
                Poll::Pending if pipe.drained() => break,
                // A slice parsed: let the worker's other tasks run, then go on.
                Poll::Pending => {}
            }
        }
    }
}

/// Reads a frame's data (`clen` bytes) and returns it decompressed (`dlen` bytes), both
/// charged to `charge` before they are stored; the charge ends holding the decompressed size.
async fn frame<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    method: u8,
    clen: usize,
    dlen: usize,
    charge: &mut Charge,
) -> Result<Vec<u8>, ProtoError> {
    match method {
        METHOD_LZ4 | METHOD_NONE | METHOD_ZSTD => {}
        m => return Err(ProtoError::Protocol(format!("unknown compression method 0x{m:02x}"))),
    }
    if method == METHOD_NONE && clen != dlen {
        return Err(ProtoError::Protocol(format!("bad uncompressed frame: {clen} bytes for {dlen}")));
    }
    // The claimed sizes are checked at once; the bytes are charged as they are stored.
    if clen + dlen > charge.max() {
        return Err(io.fail_mem(MemError::Connection { max: charge.max() }));
    }
    if let Err(e) = charge.set(clen) {
        return Err(io.fail_mem(e));
    }
    let mut data = Vec::new();
    io.append(&mut data, clen).await?;
    if method == METHOD_NONE {
        return Ok(data);
    }
    if let Err(e) = charge.set(clen + dlen) {
        return Err(io.fail_mem(e));
    }
    let mut dec = vec![0u8; dlen];
    let (name, n) = if method == METHOD_ZSTD {
        let n = zstd::bulk::decompress_to_buffer(&data, &mut dec[..])
            .map_err(|e| ProtoError::Protocol(format!("bad ZSTD frame: {e}")))?;
        ("ZSTD", n)
    } else {
        let n = lz4_flex::block::decompress_into(&data, &mut dec)
            .map_err(|e| ProtoError::Protocol(format!("bad LZ4 frame: {e}")))?;
        ("LZ4", n)
    };
    if n != dlen {
        return Err(ProtoError::Protocol(format!("{name} frame gave {n} bytes, not {dlen}")));
    }
    drop(data);
    let _ = charge.set(dlen); // shrinks: cannot fail
    Ok(dec)
}

async fn plain<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    plan: &mut Plan,
    stack: &mut Vec<(u32, u64)>,
    type_name: &mut Vec<u8>,
) -> Result<Shape, ProtoError> {
    if revision >= rev::BLOCK_INFO {
        skip_block_info(io).await?;
    }
    let columns = io.count(MAX_COLUMNS, "block column count").await?;
    let rows = io.count(MAX_ROWS, "block row count").await?;
    for _ in 0..columns {
        io.skip_string().await?;
        io.read_bytes_into(type_name).await?;
        let ty =
            std::str::from_utf8(type_name).map_err(|_| ProtoError::Protocol("column type name is not UTF-8".into()))?;
        crate::native::columns::custom_serialization(io, revision, ty).await?;
        // A block without rows has no column data: its types need not be known (a SELECT's
        // header block, an INSERT's), so only a block with rows of an unknown type is
        // undelimited.
        if rows == 0 {
            continue;
        }
        plan.compile(ty)?;
        skip_column(io, plan, stack, rows).await?;
    }
    Ok(Shape { columns, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Mem;
    use crate::native::wire::{put_str, put_varuint};

    fn block(rows: u64) -> Vec<u8> {
        let mut b = vec![1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0];
        put_varuint(&mut b, 2);
        put_varuint(&mut b, rows);
        put_str(&mut b, b"n");
        put_str(&mut b, b"UInt64");
        for i in 0..rows {
            b.extend_from_slice(&i.to_le_bytes());
        }
        put_str(&mut b, b"s");
        put_str(&mut b, b"String");
        for i in 0..rows {
            put_str(&mut b, format!("row {i}").as_bytes());
        }
        b
    }

    fn frames(data: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in data.chunks(chunk) {
            let c = lz4_flex::block::compress(part);
            out.extend_from_slice(&[0u8; 16]);
            out.push(METHOD_LZ4);
            out.extend_from_slice(&((c.len() + 9) as u32).to_le_bytes());
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(&c);
        }
        out
    }

    #[tokio::test]
    async fn plain_and_compressed_blocks_end_where_they_end() {
        let b = block(1000);
        let mut s = Scratch::default();
        for (compressed, bytes) in [(false, b.clone()), (true, frames(&b, b.len())), (true, frames(&b, 1000))] {
            let mut data = bytes.clone();
            data.push(0xAB);
            let mut io = Io::new(&data[..]);
            io.tee_start(Vec::new());
            let shape = skip_block(&mut io, 54412, compressed, &mut s, &Mem::unbounded()).await.unwrap();
            assert_eq!(shape, Shape { columns: 2, rows: 1000 });
            assert_eq!(io.tee_take(), bytes, "the raw bytes, compressed {compressed}");
            assert_eq!(io.u8().await.unwrap(), 0xAB);
        }
        let empty = [1u8, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0];
        let mut io = Io::new(&empty[..]);
        assert!(skip_block(&mut io, 54412, false, &mut s, &Mem::unbounded()).await.unwrap().is_empty());
    }

    /// A frame header that claims `csize` compressed bytes for `dsize`, and nothing after it.
    fn header(method: u8, csize: u32, dsize: u32) -> Vec<u8> {
        let mut h = vec![0u8; 16];
        h.push(method);
        h.extend_from_slice(&csize.to_le_bytes());
        h.extend_from_slice(&dsize.to_le_bytes());
        h
    }

    #[tokio::test]
    async fn a_claimed_size_past_the_limit_fails_before_its_bytes_come() {
        use crate::mem::Budget;
        let budget = Budget::new(1 << 30);
        let mem = budget.conn(16 << 20);
        for (method, csize, dsize) in
            [(METHOD_LZ4, 1 << 30, 1 << 30), (METHOD_LZ4, 1 << 20, 1 << 30), (METHOD_NONE, (64 << 20) + 9, 64 << 20)]
        {
            // The header alone, then a stream that never ends: the answer comes at once.
            let (mut tx, rx) = tokio::io::duplex(1 << 16);
            tokio::io::AsyncWriteExt::write_all(&mut tx, &header(method, csize, dsize)).await.unwrap();
            let mut io = Io::new(rx);
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                skip_block(&mut io, 54412, true, &mut Scratch::default(), &mem),
            )
            .await
            .expect("refused without waiting for the claimed bytes");
            let e = r.unwrap_err().to_string();
            assert!(e.contains("limits.max_client_buffer"), "{e}");
            assert!(io.mem_error().is_some());
            assert_eq!((mem.used(), budget.used()), (0, 0), "nothing held after");
        }
        // Over ClickHouse's own 1 GiB frame limit: a protocol error.
        let h = header(METHOD_LZ4, u32::MAX, 10);
        let e = skip_block(&mut Io::new(&h[..]), 54412, true, &mut Scratch::default(), &mem).await.unwrap_err();
        assert!(e.to_string().contains("bad compressed frame"), "{e}");
    }

    #[tokio::test]
    async fn a_block_that_never_ends_holds_one_frame_decompressed() {
        // A String column of 2^40 rows, then frames of zeros (empty strings) that never finish it.
        let mut start = vec![1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0];
        put_varuint(&mut start, 1);
        put_varuint(&mut start, 1 << 40);
        put_str(&mut start, b"s");
        put_str(&mut start, b"String");
        let zeros = vec![0u8; 1 << 20];
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let writer = tokio::spawn(async move {
            let first = frames(&start, start.len());
            if tokio::io::AsyncWriteExt::write_all(&mut tx, &first).await.is_err() {
                return;
            }
            let frame = frames(&zeros, zeros.len());
            for _ in 0..32 {
                if tokio::io::AsyncWriteExt::write_all(&mut tx, &frame).await.is_err() {
                    return;
                }
            }
        });
        let budget = crate::mem::Budget::new(1 << 30);
        let mem = budget.conn(4 << 20);
        let mut io = Io::new(rx);
        // The relayed copy is charged too: 32 frames of 1 MiB of zeros are about 130 KiB raw.
        io.tee_start_charged(Vec::new(), mem.charge());
        let e = skip_block(&mut io, 54412, true, &mut Scratch::default(), &mem).await.unwrap_err();
        assert!(matches!(&e, ProtoError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof), "{e}");
        // 32 MiB decompressed went through a 4 MiB account: one frame at a time.
        let (raw, charge) = io.tee_take_charged();
        assert!(raw.len() > 32 * 4000, "{}", raw.len());
        assert_eq!(charge.map(|c| c.bytes()), Some(raw.len()));
        writer.await.unwrap();
        // Uncompressed frames: the relayed copy grows by a frame each, and the account stops it.
        let (mut tx, rx) = tokio::io::duplex(1 << 20);
        let mut frame = header(METHOD_NONE, (1 << 20) + 9, 1 << 20);
        frame.resize(frame.len() + (1 << 20), 0);
        let mut start = vec![1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0];
        put_varuint(&mut start, 1);
        put_varuint(&mut start, 1 << 40);
        put_str(&mut start, b"s");
        put_str(&mut start, b"String");
        let first = frames(&start, start.len());
        let writer = tokio::spawn(async move {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut tx, &first).await;
            loop {
                if tokio::io::AsyncWriteExt::write_all(&mut tx, &frame).await.is_err() {
                    return;
                }
            }
        });
        let mem = budget.conn(2 << 20);
        let mut io = Io::new(rx);
        io.tee_start_charged(Vec::new(), mem.charge());
        let e = skip_block(&mut io, 54412, true, &mut Scratch::default(), &mem).await.unwrap_err();
        assert!(e.to_string().contains("limits.max_client_buffer"), "{e}");
        drop(io);
        writer.await.unwrap();
        assert_eq!(budget.used(), 0);
    }
}
