//! Wire primitives of the native protocol: encoders that append to a `Vec<u8>`, and [`Io`], a
//! buffered reader/writer over the connection whose decoders take the synchronous fast path
//! whenever the bytes are already buffered.
//!
//! Formats: `VarUInt` is unsigned LEB128 (at most 10 bytes for a `u64`), `String` is a `VarUInt`
//! length followed by that many bytes, fixed-width integers are little-endian.

use crate::error::ProtoError;
use crate::mem::{Charge, MemError};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Size of the read buffer. Large enough that a typical small result arrives in one `read`.
pub const READ_BUF_SIZE: usize = 64 * 1024;

/// Longest single string value we skip (ClickHouse itself refuses strings over 1 GiB).
pub const MAX_STRING_LEN: u64 = 1 << 30;

/// Longest string we copy into memory (names, type names, exception texts).
pub const MAX_TEXT_LEN: u64 = 16 << 20;

// ----------------------------------------------------------------------------------------------
// Encoding
// ----------------------------------------------------------------------------------------------

/// Appends `v` as a `VarUInt`.
#[inline]
pub fn put_varuint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed string.
#[inline]
pub fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varuint(out, s.len() as u64);
    out.extend_from_slice(s);
}

// ----------------------------------------------------------------------------------------------
// Decoding
// ----------------------------------------------------------------------------------------------

/// Decodes a `VarUInt` from the front of `buf`: `Ok(Some((value, len)))`, `Ok(None)` when `buf`
/// ends before the last byte of the number, `Err` when the number does not fit in a `u64`.
#[inline]
pub fn decode_varuint(buf: &[u8]) -> Result<Option<(u64, usize)>, ProtoError> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return Err(ProtoError::Protocol("VarUInt overflows 64 bits".into()));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if buf.len() >= 10 {
        return Err(ProtoError::Protocol("VarUInt longer than 10 bytes".into()));
    }
    Ok(None)
}

/// Decoders over bytes already buffered, each None when the bytes run out (or a count is past
/// its limit): for a reader that first tries to take a whole packet from its buffer without
/// awaiting, and leaves anything else to [`Io`]'s awaiting decoders.
pub struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, at: 0 }
    }

    /// Bytes taken so far.
    pub fn pos(&self) -> usize {
        self.at
    }

    #[inline]
    pub fn varuint(&mut self) -> Option<u64> {
        // Most are one byte: packet codes, counts, lengths of names and small values.
        if let Some(&b) = self.buf.get(self.at).filter(|b| **b < 0x80) {
            self.at += 1;
            return Some(u64::from(b));
        }
        let (v, n) = decode_varuint(&self.buf[self.at..]).ok()??;
        self.at += n;
        Some(v)
    }

    /// A `VarUInt` at most `max`.
    #[inline]
    pub fn count(&mut self, max: u64) -> Option<u64> {
        self.varuint().filter(|v| *v <= max)
    }

    #[inline]
    pub fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        if n > (self.buf.len() - self.at) as u64 {
            return None;
        }
        let s = &self.buf[self.at..self.at + n as usize];
        self.at += n as usize;
        Some(s)
    }

    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    #[inline]
    pub fn u64_le(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// A length-prefixed string of at most `max` bytes.
    #[inline]
    pub fn string(&mut self, max: u64) -> Option<&'a [u8]> {
        let len = self.count(max)?;
        self.take(len)
    }
}

fn eof() -> ProtoError {
    ProtoError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"))
}

/// A connection with a read buffer (`buf[start..end]` holds unread bytes).
pub struct Io<S> {
    stream: S,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes consumed before `buf[0]`: with `start`, the stream position of the reader.
    base: u64,
    /// When set, every byte consumed is also copied here ([`Io::tee_start`]): a proxy parses a
    /// packet to find where it ends and passes on the very bytes it read.
    tee: Option<Vec<u8>>,
    /// `buf[tee_from..start]` is consumed but not yet copied to `tee`.
    tee_from: usize,
    /// What the tee holds, when it is charged ([`Io::tee_start_charged`]).
    tee_charge: Option<Charge>,
    /// Why the tee could not grow: the next read fails with it.
    mem_err: Option<MemError>,
    /// Reads from the stream that brought bytes ([`Io::reads`]).
    reads: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Io<S> {
    /// Writes all of `data` and flushes (a no-op on TCP, pushes the records out on TLS).
    pub async fn write_all(&mut self, data: &[u8]) -> Result<(), ProtoError> {
        self.stream.write_all(data).await?;
        self.stream.flush().await?;
        Ok(())
    }

    /// Closes the writing half (after a TLS close_notify on TLS streams).
    pub async fn shutdown(&mut self) -> Result<(), ProtoError> {
        self.stream.shutdown().await?;
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> Io<S> {
    /// Reads and discards everything until the peer closes; returns the bytes discarded. A
    /// reset connection counts as closed.
    pub async fn discard_to_eof(&mut self) -> Result<u64, ProtoError> {
        let mut total = (self.end - self.start) as u64;
        self.tee = None;
        self.tee_charge = None;
        self.start = 0;
        self.end = 0;
        self.tee_from = 0;
        loop {
            match self.stream.read(&mut self.buf[..]).await {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe) => {
                    return Ok(total)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub fn new(stream: S) -> Io<S> {
        Io {
            stream,
            buf: vec![0u8; READ_BUF_SIZE].into_boxed_slice(),
            start: 0,
            end: 0,
            base: 0,
            tee: None,
            tee_from: 0,
            tee_charge: None,
            mem_err: None,
            reads: 0,
        }
    }

    /// The underlying stream, to change its settings.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The memory error that stopped the last read, if one did ([`Io::tee_start_charged`],
    /// [`Io::read_bytes_charged`]).
    pub fn mem_error(&self) -> Option<&MemError> {
        self.mem_err.as_ref()
    }

    /// The underlying stream (to check it without reading through the buffer).
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// True when bytes are buffered but not consumed yet.
    pub fn has_buffered(&self) -> bool {
        self.start < self.end
    }

    /// Starts copying every byte consumed from now on into `out`, after the bytes it holds,
    /// until [`Io::tee_take`].
    pub fn tee_start(&mut self, out: Vec<u8>) {
        self.tee = Some(out);
        self.tee_from = self.start;
        self.tee_charge = None;
    }

    /// [`Io::tee_start`], but the copy is charged to `charge` as it grows: once the charge is
    /// refused, the next read fails (at most one read buffer, 64 KiB, past the limit) and
    /// [`Io::mem_error`] says why.
    pub fn tee_start_charged(&mut self, out: Vec<u8>, charge: Charge) {
        self.tee = Some(out);
        self.tee_from = self.start;
        self.mem_err = None;
        self.tee_charge = Some(charge);
        self.tee_flush();
    }

    /// Stops copying and returns the tee: the bytes it was given, then those consumed since
    /// [`Io::tee_start`] (empty if none was started).
    pub fn tee_take(&mut self) -> Vec<u8> {
        self.tee_take_charged().0
    }

    /// [`Io::tee_take`], with the charge that holds the bytes (when the tee was charged).
    pub fn tee_take_charged(&mut self) -> (Vec<u8>, Option<Charge>) {
        self.tee_flush();
        (self.tee.take().unwrap_or_default(), self.tee_charge.take())
    }

    /// Copies the consumed, not yet copied bytes to the tee: before they leave the buffer.
    #[inline]
    fn tee_flush(&mut self) {
        if let Some(t) = self.tee.as_mut() {
            t.extend_from_slice(&self.buf[self.tee_from..self.start]);
            if let Some(c) = self.tee_charge.as_mut() {
                if let Err(e) = c.set(t.len()) {
                    self.mem_err = Some(e);
                }
            }
        }
        self.tee_from = self.start;
    }

    /// Fails with the memory error a charged tee met.
    fn check_mem(&self) -> Result<(), ProtoError> {
        match &self.mem_err {
            Some(e) => Err(ProtoError::Protocol(e.to_string())),
            None => Ok(()),
        }
    }

    /// Swaps in a new stream (after a reconnect), dropping the old one and its unread bytes.
    pub fn replace_stream(&mut self, stream: S) {
        self.stream = stream;
        self.start = 0;
        self.end = 0;
        self.base = 0;
        self.tee = None;
        self.tee_from = 0;
        self.tee_charge = None;
    }

    /// How many reads from the stream brought bytes so far: when it changed, new bytes came.
    #[inline]
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Number of bytes consumed so far; differences measure the size of what was read.
    #[inline]
    pub fn position(&self) -> u64 {
        self.base + self.start as u64
    }

    /// The buffered, unread bytes.
    #[inline]
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Consumes the first `n` buffered bytes (at most [`Io::buffered`]'s length), as a read of
    /// them would: a running tee copies them too.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.end - self.start, "consume({n}) past the {} bytes buffered", self.end - self.start);
        self.start += n;
    }

    /// Reads more bytes from the stream, moving unread bytes to the front first when the
    /// buffer has no room at its end. Fails on EOF.
    async fn fill(&mut self) -> Result<(), ProtoError> {
        self.tee_flush();
        self.check_mem()?;
        if self.start == self.end {
            self.base += self.start as u64;
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.base += self.start as u64;
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        self.tee_from = self.start;
        if self.end == self.buf.len() {
            return Err(ProtoError::Protocol("read buffer full".into()));
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(eof());
        }
        self.end += n;
        self.reads += 1;
        Ok(())
    }

    /// Waits until at least one byte is buffered; returns at once when some are. Fails on EOF
    /// (the next read then sees it too). Cancel-safe: dropped while waiting, it has read
    /// nothing. Unlike waiting for the socket's readiness, it works on any stream (TLS
    /// included: bytes on the socket may be only a TLS record with no data in it).
    pub async fn fill_some(&mut self) -> Result<(), ProtoError> {
        if self.has_buffered() {
            return Ok(());
        }
        self.fill().await
    }

    /// Makes sure at least `n` (at most the buffer size) bytes are buffered.
    async fn ensure(&mut self, n: usize) -> Result<(), ProtoError> {
        debug_assert!(n <= self.buf.len());
        while self.end - self.start < n {
            if self.buf.len() - self.start < n {
                // Not enough room after `start`: compact on the next fill.
                self.tee_flush();
                self.base += self.start as u64;
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                self.tee_from = 0;
            }
            self.fill().await?;
        }
        Ok(())
    }

    #[inline]
    pub async fn u8(&mut self) -> Result<u8, ProtoError> {
        if self.start == self.end {
            self.fill().await?;
        }
        let b = self.buf[self.start];
        self.start += 1;
        Ok(b)
    }

    /// Reads `N` bytes.
    #[inline]
    pub async fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        if self.end - self.start < N {
            self.ensure(N).await?;
        }
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.start..self.start + N]);
        self.start += N;
        Ok(out)
    }

    #[inline]
    pub async fn u64_le(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array().await?))
    }

    #[inline]
    pub async fn i32_le(&mut self) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.array().await?))
    }

    #[inline]
    pub async fn varuint(&mut self) -> Result<u64, ProtoError> {
        if let Some((v, n)) = decode_varuint(self.buffered())? {
            self.start += n;
            return Ok(v);
        }
        self.varuint_slow().await
    }

    async fn varuint_slow(&mut self) -> Result<u64, ProtoError> {
        loop {
            let have = self.end - self.start;
            self.ensure(have + 1).await?;
            if let Some((v, n)) = decode_varuint(self.buffered())? {
                self.start += n;
                return Ok(v);
            }
        }
    }

    /// Reads a `VarUInt` that counts something and checks it against `max`.
    pub async fn count(&mut self, max: u64, what: &str) -> Result<u64, ProtoError> {
        let v = self.varuint().await?;
        if v > max {
            return Err(ProtoError::Protocol(format!("{what} {v} exceeds the limit {max}")));
        }
        Ok(v)
    }

    /// Discards `n` bytes.
    pub async fn skip(&mut self, mut n: u64) -> Result<(), ProtoError> {
        loop {
            let have = (self.end - self.start) as u64;
            if n <= have {
                self.start += n as usize;
                return Ok(());
            }
            n -= have;
            self.start = self.end;
            self.fill().await?;
        }
    }

    /// Discards one length-prefixed string.
    #[inline]
    pub async fn skip_string(&mut self) -> Result<(), ProtoError> {
        let len = self.string_len(MAX_STRING_LEN).await?;
        self.skip(len).await
    }

    async fn string_len(&mut self, max: u64) -> Result<u64, ProtoError> {
        let len = self.varuint().await?;
        if len > max {
            return Err(ProtoError::Protocol(format!("string of {len} bytes exceeds the limit of {max}")));
        }
        Ok(len)
    }

    /// Discards `rows` length-prefixed strings, walking the buffered bytes without awaiting
    /// while whole strings are buffered.
    pub async fn skip_strings(&mut self, mut rows: u64) -> Result<(), ProtoError> {
        while rows > 0 {
            // Fast path: strings that lie entirely in the buffer.
            let mut pos = self.start;
            while rows > 0 {
                match decode_varuint(&self.buf[pos..self.end])? {
                    Some((len, n)) if len <= (self.end - pos - n) as u64 => {
                        pos += n + len as usize;
                        rows -= 1;
                    }
                    _ => break,
                }
            }
            self.start = pos;
            if rows > 0 {
                // Slow path: one string that straddles the buffer end.
                self.skip_string().await?;
                rows -= 1;
            }
        }
        Ok(())
    }

    /// Reads a length-prefixed string into `out` (cleared first), up to [`MAX_TEXT_LEN`] bytes.
    pub async fn read_bytes_into(&mut self, out: &mut Vec<u8>) -> Result<(), ProtoError> {
        out.clear();
        let mut len = self.string_len(MAX_TEXT_LEN).await? as usize;
        loop {
            let take = len.min(self.end - self.start);
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
            len -= take;
            if len == 0 {
                return Ok(());
            }
            self.fill().await?;
        }
    }

    /// Reads a length-prefixed string of at most `max` bytes into `out` (cleared first), charging
    /// its length to `charge` before any byte is allocated.
    pub async fn read_bytes_charged(
        &mut self,
        out: &mut Vec<u8>,
        max: u64,
        charge: &mut Charge,
    ) -> Result<(), ProtoError> {
        out.clear();
        let len = self.string_len(max).await? as usize;
        if let Err(e) = charge.grow(len) {
            return Err(self.fail_mem(e));
        }
        self.append(out, len).await
    }

    /// Appends the next `n` bytes to `out` as they arrive: memory is taken for bytes received,
    /// never for a size only claimed.
    pub async fn append(&mut self, out: &mut Vec<u8>, mut n: usize) -> Result<(), ProtoError> {
        loop {
            let take = n.min(self.end - self.start);
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
            n -= take;
            if n == 0 {
                return Ok(());
            }
            self.fill().await?;
        }
    }

    /// Records `e` as the reason reads stopped ([`Io::mem_error`]) and returns it as an error.
    pub fn fail_mem(&mut self, e: MemError) -> ProtoError {
        let err = ProtoError::Protocol(e.to_string());
        self.mem_err = Some(e);
        err
    }

    /// Reads a length-prefixed string of at most `max` bytes as (lossy) UTF-8.
    pub async fn string_max(&mut self, max: u64) -> Result<String, ProtoError> {
        let len = self.string_len(max).await? as usize;
        let mut bytes = Vec::new();
        self.append(&mut bytes, len).await?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Reads a length-prefixed string as (lossy) UTF-8.
    pub async fn string(&mut self) -> Result<String, ProtoError> {
        let mut bytes = Vec::new();
        self.read_bytes_into(&mut bytes).await?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Reads exactly `out.len()` bytes.
    pub async fn read_exact(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        let mut done = 0;
        while done < out.len() {
            if self.start == self.end {
                self.fill().await?;
            }
            let take = (out.len() - done).min(self.end - self.start);
            out[done..done + take].copy_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
            done += take;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varuint_roundtrip() {
        for v in [0u64, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_varuint(&mut b, v);
            assert_eq!(decode_varuint(&b).unwrap(), Some((v, b.len())), "{v}");
            assert_eq!(decode_varuint(&b[..b.len() - 1]).unwrap(), None, "{v}");
        }
        assert!(decode_varuint(&[0xff; 10]).is_err());
        assert!(decode_varuint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).is_err());
    }

    /// A reader that hands out one byte per `read`, to exercise every slow path.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if let Some((&b, rest)) = self.0.split_first() {
                buf.put_slice(&[b]);
                self.0 = rest;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn primitives_across_reads() {
        let mut data = Vec::new();
        put_varuint(&mut data, 300);
        put_str(&mut data, b"hello");
        put_str(&mut data, b"");
        put_str(&mut data, b"skipped");
        data.extend_from_slice(&7u64.to_le_bytes());
        data.extend_from_slice(&(-1i32).to_le_bytes());
        let mut io = Io::new(Trickle(&data));
        assert_eq!(io.varuint().await.unwrap(), 300);
        assert_eq!(io.string().await.unwrap(), "hello");
        io.skip_strings(2).await.unwrap();
        assert_eq!(io.u64_le().await.unwrap(), 7);
        assert_eq!(io.i32_le().await.unwrap(), -1);
        assert_eq!(io.position(), data.len() as u64);
        assert!(matches!(io.u8().await, Err(ProtoError::Io(_))));
    }

    #[tokio::test]
    async fn the_tee_copies_exactly_the_bytes_consumed() {
        let mut data = Vec::new();
        put_varuint(&mut data, 300);
        let long = vec![7u8; READ_BUF_SIZE * 2 + 5];
        put_str(&mut data, &long);
        put_str(&mut data, b"after");
        for trickle in [false, true] {
            let mut io: Io<Box<dyn AsyncRead + Unpin + '_>> =
                Io::new(if trickle { Box::new(Trickle(&data)) } else { Box::new(&data[..]) });
            assert_eq!(io.varuint().await.unwrap(), 300);
            io.tee_start(Vec::new());
            io.skip_string().await.unwrap();
            let teed = io.tee_take();
            let n = data.len() - 6;
            assert_eq!(teed, &data[2..n], "trickle {trickle}");
            assert_eq!(io.string().await.unwrap(), "after");
        }
    }

    #[tokio::test]
    async fn fill_some_waits_for_a_byte_and_loses_nothing_when_dropped() {
        use tokio::io::AsyncWriteExt;
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut io = Io::new(rx);
        // Nothing sent: it waits; dropped while waiting, it has read nothing.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), io.fill_some()).await;
        assert!(waited.is_err() && !io.has_buffered());
        tx.write_all(&[0xAC, 0x02, 9]).await.unwrap();
        io.fill_some().await.unwrap();
        assert!(io.has_buffered());
        // Buffered bytes: at once, without reading more.
        io.fill_some().await.unwrap();
        assert_eq!(io.varuint().await.unwrap(), 300);
        assert_eq!(io.u8().await.unwrap(), 9);
        drop(tx);
        assert!(matches!(io.fill_some().await, Err(ProtoError::Io(_))), "EOF");
    }

    #[tokio::test]
    async fn rejects_oversized_strings() {
        let mut data = Vec::new();
        put_varuint(&mut data, MAX_TEXT_LEN + 1);
        let mut io = Io::new(&data[..]);
        assert!(matches!(io.string().await, Err(ProtoError::Protocol(_))));
    }
}
