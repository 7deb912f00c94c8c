//! Decoding small results into text, for [`super::NativeConn::query_rows`].
//!
//! This path allocates freely: it serves version checks and tests, never the load loop.
//! Supported: integers up to 128 bits, `Float32/64`, `Bool`, `String`, `FixedString(N)`,
//! `Date`, `Date32` (as `YYYY-MM-DD`), `DateTime` (Unix seconds), `DateTime64` (Unix seconds
//! with the fraction), `Decimal` up to 128 bits, `Enum8/16` (the name), `UUID`, `IPv4`, `IPv6`,
//! `Nothing`, each optionally inside `Nullable` (NULL is printed as `NULL`) and
//! `LowCardinality`.

use super::columns::{check_lc_version, lc_chunk_rows, split_type, unsupported, Args, LcChunk};
use super::wire::Io;
use crate::error::ProtoError;
use std::net::{Ipv4Addr, Ipv6Addr};
use tokio::io::AsyncRead;

/// The text printed for NULL.
pub const NULL: &str = "NULL";

/// Most rows of one block (and most dictionary entries) decoded to text.
pub const MAX_ROWS: u64 = 1 << 24;

/// A scalar type that can be printed.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    UInt(u8),
    Int(u8),
    Float32,
    Float64,
    Bool,
    Str,
    FixedString(usize),
    Date,
    Date32,
    DateTime,
    DateTime64(u32),
    Decimal { width: u8, scale: u32 },
    Enum { width: u8, names: Vec<(i16, String)> },
    Uuid,
    Ipv4,
    Ipv6,
    Nothing,
}

/// A column type decodable to text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextType {
    scalar: Scalar,
    nullable: bool,
    low_cardinality: bool,
}

impl TextType {
    pub fn parse(ty: &str) -> Result<TextType, ProtoError> {
        let err = || {
            ProtoError::Protocol(format!(
                "column type '{ty}' cannot be decoded to text by the native client (query_rows supports scalar types)"
            ))
        };
        let mut t = TextType { scalar: Scalar::Nothing, nullable: false, low_cardinality: false };
        let mut cur = ty;
        loop {
            let (name, args) = split_type(cur);
            let inner = || {
                let mut it = Args::new(args.unwrap_or(""));
                match (it.next(), it.next()) {
                    (Some(a), None) => Ok(a),
                    _ => Err(unsupported(ty)),
                }
            };
            match name {
                "LowCardinality" if !t.low_cardinality && !t.nullable => t.low_cardinality = true,
                "Nullable" if !t.nullable => t.nullable = true,
                _ => {
                    t.scalar = parse_scalar(name, args).ok_or_else(err)?;
                    return Ok(t);
                }
            }
            cur = inner()?;
        }
    }
}

fn parse_scalar(name: &str, args: Option<&str>) -> Option<Scalar> {
    let num_arg = |i: usize| Args::new(args?).nth(i)?.parse::<u32>().ok();
    Some(match name {
        "UInt8" => Scalar::UInt(1),
        "UInt16" => Scalar::UInt(2),
        "UInt32" => Scalar::UInt(4),
        "UInt64" => Scalar::UInt(8),
        "UInt128" => Scalar::UInt(16),
        "Int8" => Scalar::Int(1),
        "Int16" => Scalar::Int(2),
        "Int32" => Scalar::Int(4),
        "Int64" => Scalar::Int(8),
        "Int128" => Scalar::Int(16),
        "Float32" => Scalar::Float32,
        "Float64" => Scalar::Float64,
        "Bool" => Scalar::Bool,
        "String" => Scalar::Str,
        "FixedString" => Scalar::FixedString(num_arg(0).filter(|&n| n > 0 && n <= 1 << 20)? as usize),
        "Date" => Scalar::Date,
        "Date32" => Scalar::Date32,
        "DateTime" => Scalar::DateTime,
        "DateTime64" => Scalar::DateTime64(num_arg(0).filter(|&p| p <= 18)?),
        "Decimal" => {
            let (p, s) = (num_arg(0)?, num_arg(1)?);
            let width = match p {
                0..=9 => 4,
                10..=18 => 8,
                19..=38 => 16,
                _ => return None,
            };
            Scalar::Decimal { width, scale: s.min(38) }
        }
        "Decimal32" => Scalar::Decimal { width: 4, scale: num_arg(0)?.min(9) },
        "Decimal64" => Scalar::Decimal { width: 8, scale: num_arg(0)?.min(18) },
        "Decimal128" => Scalar::Decimal { width: 16, scale: num_arg(0)?.min(38) },
        "Enum8" => Scalar::Enum { width: 1, names: parse_enum(args?)? },
        "Enum16" => Scalar::Enum { width: 2, names: parse_enum(args?)? },
        "UUID" => Scalar::Uuid,
        "IPv4" => Scalar::Ipv4,
        "IPv6" => Scalar::Ipv6,
        "Nothing" => Scalar::Nothing,
        _ => return None,
    })
}

/// Parses `'a' = 1, 'b\'c' = -2`.
fn parse_enum(args: &str) -> Option<Vec<(i16, String)>> {
    Args::new(args)
        .map(|item| {
            let (quoted, value) = item.rsplit_once('=')?;
            let quoted = quoted.trim();
            let body = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
            let mut name = String::with_capacity(body.len());
            let mut chars = body.chars();
            while let Some(c) = chars.next() {
                name.push(if c == '\\' { chars.next()? } else { c });
            }
            Some((value.trim().parse().ok()?, name))
        })
        .collect()
}

/// Reads `rows` values of `ty` and appends their text to `out`.
pub async fn read_column<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    ty: &TextType,
    rows: u64,
    out: &mut Vec<String>,
) -> Result<(), ProtoError> {
    if rows == 0 {
        return Ok(());
    }
    if rows > MAX_ROWS {
        return Err(too_many(rows));
    }
    if ty.low_cardinality {
        return read_low_cardinality(io, ty, rows, out).await;
    }
    let mut nulls = Vec::new();
    if ty.nullable {
        nulls = vec![0u8; rows as usize];
        io.read_exact(&mut nulls).await?;
    }
    let first = out.len();
    read_scalars(io, &ty.scalar, rows, out).await?;
    for (value, &null) in out[first..].iter_mut().zip(&nulls) {
        if null != 0 {
            *value = NULL.to_string();
        }
    }
    Ok(())
}

fn too_many(rows: u64) -> ProtoError {
    ProtoError::Protocol(format!("{rows} rows are too many to decode to text"))
}

async fn read_low_cardinality<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    ty: &TextType,
    rows: u64,
    out: &mut Vec<String>,
) -> Result<(), ProtoError> {
    check_lc_version(io.u64_le().await?)?;
    let mut remaining = rows;
    let mut global = Vec::new();
    let mut first = true;
    while remaining > 0 {
        let chunk = LcChunk::parse(io.u64_le().await?)?;
        if chunk.reads_global_dictionary(first) {
            global.clear();
            let n = io.u64_le().await?;
            read_scalars(io, &ty.scalar, n, &mut global).await?;
        }
        let mut dict: Vec<String> =
            if chunk.flags & super::columns::LC_NEED_GLOBAL_DICTIONARY != 0 { global.clone() } else { Vec::new() };
        if chunk.has_additional_keys() {
            let n = io.u64_le().await?;
            read_scalars(io, &ty.scalar, n, &mut dict).await?;
        }
        let n = lc_chunk_rows(io, remaining).await?;
        for _ in 0..n {
            let key = match chunk.key_width {
                1 => u64::from(io.u8().await?),
                2 => u64::from(u16::from_le_bytes(io.array().await?)),
                4 => u64::from(u32::from_le_bytes(io.array().await?)),
                _ => io.u64_le().await?,
            };
            if ty.nullable && key == 0 {
                out.push(NULL.to_string());
                continue;
            }
            let value = usize::try_from(key).ok().and_then(|k| dict.get(k)).ok_or_else(|| {
                ProtoError::Protocol(format!("LowCardinality key {key} outside a dictionary of {}", dict.len()))
            })?;
            out.push(value.clone());
        }
        remaining -= n;
        first = false;
    }
    Ok(())
}

async fn read_scalars<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    scalar: &Scalar,
    rows: u64,
    out: &mut Vec<String>,
) -> Result<(), ProtoError> {
    if rows > MAX_ROWS {
        return Err(too_many(rows));
    }
    for _ in 0..rows {
        out.push(read_scalar(io, scalar).await?);
    }
    Ok(())
}

async fn read_scalar<S: AsyncRead + Unpin>(io: &mut Io<S>, scalar: &Scalar) -> Result<String, ProtoError> {
    Ok(match scalar {
        Scalar::UInt(w) => read_uint(io, *w).await?.to_string(),
        Scalar::Int(w) => read_int(io, *w).await?.to_string(),
        Scalar::Float32 => float_text(f64::from(f32::from_le_bytes(io.array().await?))),
        Scalar::Float64 => float_text(f64::from_le_bytes(io.array().await?)),
        Scalar::Bool => (io.u8().await? != 0).to_string(),
        Scalar::Str => io.string().await?,
        Scalar::FixedString(n) => {
            let mut bytes = vec![0u8; *n];
            io.read_exact(&mut bytes).await?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Scalar::Date => date_text(i64::from(u16::from_le_bytes(io.array().await?))),
        Scalar::Date32 => date_text(i64::from(i32::from_le_bytes(io.array().await?))),
        Scalar::DateTime => u32::from_le_bytes(io.array().await?).to_string(),
        Scalar::DateTime64(p) => scaled_text(i128::from(i64::from_le_bytes(io.array().await?)), *p),
        Scalar::Decimal { width, scale } => scaled_text(read_int(io, *width).await?, *scale),
        Scalar::Enum { width, names } => {
            let v = read_int(io, *width).await? as i16;
            match names.iter().find(|(n, _)| *n == v) {
                Some((_, name)) => name.clone(),
                None => v.to_string(),
            }
        }
        Scalar::Uuid => {
            let b: [u8; 16] = io.array().await?;
            let hi = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let lo = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            let h = format!("{hi:016x}{lo:016x}");
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        }
        Scalar::Ipv4 => Ipv4Addr::from(u32::from_le_bytes(io.array().await?)).to_string(),
        Scalar::Ipv6 => Ipv6Addr::from(io.array::<16>().await?).to_string(),
        Scalar::Nothing => {
            io.u8().await?;
            NULL.to_string()
        }
    })
}

async fn read_uint<S: AsyncRead + Unpin>(io: &mut Io<S>, width: u8) -> Result<u128, ProtoError> {
    Ok(match width {
        1 => u128::from(io.u8().await?),
        2 => u128::from(u16::from_le_bytes(io.array().await?)),
        4 => u128::from(u32::from_le_bytes(io.array().await?)),
        8 => u128::from(u64::from_le_bytes(io.array().await?)),
        _ => u128::from_le_bytes(io.array().await?),
    })
}

async fn read_int<S: AsyncRead + Unpin>(io: &mut Io<S>, width: u8) -> Result<i128, ProtoError> {
    Ok(match width {
        1 => i128::from(io.u8().await? as i8),
        2 => i128::from(i16::from_le_bytes(io.array().await?)),
        4 => i128::from(i32::from_le_bytes(io.array().await?)),
        8 => i128::from(i64::from_le_bytes(io.array().await?)),
        _ => i128::from_le_bytes(io.array().await?),
    })
}

/// Floats as ClickHouse prints them (`inf`, `-inf`, `nan`).
fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else {
        v.to_string()
    }
}

/// `v / 10^scale` with exactly `scale` fractional digits.
fn scaled_text(v: i128, scale: u32) -> String {
    let digits = v.unsigned_abs().to_string();
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let scale = scale as usize;
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// `YYYY-MM-DD` of a day number counted from 1970-01-01 (proleptic Gregorian calendar).
fn date_text(days: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_types() {
        let t = TextType::parse("LowCardinality(Nullable(String))").unwrap();
        assert!(t.low_cardinality && t.nullable && t.scalar == Scalar::Str);
        let t = TextType::parse("Enum8('a' = 1, 'b\\'c' = -2)").unwrap();
        assert_eq!(t.scalar, Scalar::Enum { width: 1, names: vec![(1, "a".into()), (-2, "b'c".into())] });
        assert_eq!(TextType::parse("Decimal(18, 2)").unwrap().scalar, Scalar::Decimal { width: 8, scale: 2 });
        assert!(TextType::parse("Array(UInt8)").is_err());
        assert!(TextType::parse("Nullable(Nullable(UInt8))").is_err());
        assert!(TextType::parse("Nullable(LowCardinality(UInt8))").is_err());
    }

    #[test]
    fn formats_values() {
        assert_eq!(scaled_text(150, 2), "1.50");
        assert_eq!(scaled_text(-5, 3), "-0.005");
        assert_eq!(scaled_text(7, 0), "7");
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(date_text(18262), "2020-01-01");
        assert_eq!(date_text(-1), "1969-12-31");
        assert_eq!(float_text(f64::NAN), "nan");
        assert_eq!(float_text(f64::NEG_INFINITY), "-inf");
        assert_eq!(float_text(0.5), "0.5");
    }

    #[tokio::test]
    async fn reads_nullable_and_low_cardinality() {
        let mut d = vec![0u8, 1, 0];
        for v in [5u32, 0, 7] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        let mut io = Io::new(&d[..]);
        let mut out = Vec::new();
        read_column(&mut io, &TextType::parse("Nullable(UInt32)").unwrap(), 3, &mut out).await.unwrap();
        assert_eq!(out, ["5", "NULL", "7"]);

        let mut d = Vec::new();
        d.extend_from_slice(&1u64.to_le_bytes());
        d.extend_from_slice(&super::super::columns::LC_HAS_ADDITIONAL_KEYS.to_le_bytes());
        d.extend_from_slice(&3u64.to_le_bytes());
        for s in ["", "", "x"] {
            d.push(s.len() as u8);
            d.extend_from_slice(s.as_bytes());
        }
        d.extend_from_slice(&3u64.to_le_bytes());
        d.extend_from_slice(&[2, 0, 1]);
        let mut io = Io::new(&d[..]);
        let mut out = Vec::new();
        let ty = TextType::parse("LowCardinality(Nullable(String))").unwrap();
        read_column(&mut io, &ty, 3, &mut out).await.unwrap();
        assert_eq!(out, ["x", "NULL", ""]);
    }
}
