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

use chstorm_proto::native::columns::{skip_column, Plan};
use chstorm_proto::native::packets::{rev, skip_block_info};
use chstorm_proto::native::wire::Io;
use chstorm_proto::ProtoError;
use tokio::io::AsyncRead;

/// Most columns and rows one block may have.
const MAX_COLUMNS: u64 = 1 << 20;
const MAX_ROWS: u64 = 1 << 40;
/// Largest frame (compressed or decompressed), as ClickHouse's own limit: 1 GiB.
const MAX_FRAME: usize = 1 << 30;
/// Frame methods.
const METHOD_NONE: u8 = 0x02;
const METHOD_LZ4: u8 = 0x82;
const METHOD_ZSTD: u8 = 0x90;

/// Scratch space reused for every block of a connection.
#[derive(Default)]
pub struct Scratch {
    plan: Plan,
    stack: Vec<(u32, u64)>,
    type_name: Vec<u8>,
    frame: Vec<u8>,
    dec: Vec<u8>,
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

/// Reads one block (after a Data packet's table name) from `io`.
pub async fn skip_block<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    compressed: bool,
    s: &mut Scratch,
) -> Result<Shape, ProtoError> {
    if !compressed {
        return plain(io, revision, &mut s.plan, &mut s.stack, &mut s.type_name).await;
    }
    s.dec.clear();
    loop {
        let head: [u8; 25] = io.array().await?;
        let method = head[16];
        let csize = u32::from_le_bytes([head[17], head[18], head[19], head[20]]) as usize;
        let dsize = u32::from_le_bytes([head[21], head[22], head[23], head[24]]) as usize;
        if !(9..=MAX_FRAME).contains(&csize) || dsize > MAX_FRAME {
            return Err(ProtoError::Protocol(format!("bad compressed frame: {csize} bytes for {dsize}")));
        }
        s.frame.resize(csize - 9, 0);
        io.read_exact(&mut s.frame).await?;
        let at = s.dec.len();
        match method {
            METHOD_LZ4 => {
                s.dec.resize(at + dsize, 0);
                let n = lz4_flex::block::decompress_into(&s.frame, &mut s.dec[at..])
                    .map_err(|e| ProtoError::Protocol(format!("bad LZ4 frame: {e}")))?;
                if n != dsize {
                    return Err(ProtoError::Protocol(format!("LZ4 frame gave {n} bytes, not {dsize}")));
                }
            }
            METHOD_NONE => s.dec.extend_from_slice(&s.frame),
            METHOD_ZSTD => {
                s.dec.resize(at + dsize, 0);
                let n = zstd::bulk::decompress_to_buffer(&s.frame, &mut s.dec[at..])
                    .map_err(|e| ProtoError::Protocol(format!("bad ZSTD frame: {e}")))?;
                if n != dsize {
                    return Err(ProtoError::Protocol(format!("ZSTD frame gave {n} bytes, not {dsize}")));
                }
            }
            m => return Err(ProtoError::Protocol(format!("unknown compression method 0x{m:02x}"))),
        }
        let mut dio = Io::new(&s.dec[..]);
        match plain(&mut dio, revision, &mut s.plan, &mut s.stack, &mut s.type_name).await {
            Ok(shape) => {
                if dio.position() != s.dec.len() as u64 {
                    return Err(ProtoError::Protocol("a compressed block does not end with its frame".into()));
                }
                return Ok(shape);
            }
            // Not whole yet: the next frame continues it.
            Err(ProtoError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
            Err(e) => return Err(e),
        }
    }
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
        plan.compile(ty)?;
        skip_column(io, plan, stack, rows).await?;
    }
    Ok(Shape { columns, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chstorm_proto::native::wire::{put_str, put_varuint};

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
            let shape = skip_block(&mut io, 54412, compressed, &mut s).await.unwrap();
            assert_eq!(shape, Shape { columns: 2, rows: 1000 });
            assert_eq!(io.tee_take(), bytes, "the raw bytes, compressed {compressed}");
            assert_eq!(io.u8().await.unwrap(), 0xAB);
        }
        let empty = [1u8, 0, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0];
        let mut io = Io::new(&empty[..]);
        assert!(skip_block(&mut io, 54412, false, &mut s).await.unwrap().is_empty());
    }
}
