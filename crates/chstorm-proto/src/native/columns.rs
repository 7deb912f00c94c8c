//! Column type names and skipping column data without materialising it.
//!
//! A type name such as `Array(LowCardinality(Nullable(String)))` is compiled into a [`Plan`]: a
//! flat, pre-order list of [`Node`]s, each knowing where its subtree ends. [`skip_column`] walks
//! the plan with an explicit stack, so skipping needs neither recursion through `async fn`s
//! (which would box a future per level) nor any allocation once the plan's and stack's vectors
//! have grown to the size of the widest type seen.
//!
//! Serialization of a column in a native block, as every ClickHouse version writes it:
//! first the *state prefixes* of the whole type tree in pre-order (only `LowCardinality` has
//! one: a `UInt64` key serialization version), then the data, where
//! * fixed-width types are `rows * width` bytes,
//! * `String` is a `VarUInt` length and the bytes per row,
//! * `Nullable(T)` is a null map of `rows` bytes, then `T` for `rows` rows,
//! * `Array(T)` is `rows` cumulative `UInt64` offsets, then `T` for the last offset's rows,
//! * `Tuple(T1, T2, ..)` is each element in order, `rows` rows each (`Map(K, V)` is
//!   `Array(Tuple(K, V))`),
//! * `LowCardinality(T)` is one or more chunks of: `UInt64` index type (key width in the low
//!   byte plus flags), an optional global dictionary and optional additional keys (each a
//!   `UInt64` count and the values serialized as `T` without `Nullable`), then a `UInt64`
//!   row count and the keys.
//!
//! A block with zero rows carries no column data at all, not even the prefixes.

use super::wire::Io;
use crate::error::ProtoError;
use tokio::io::AsyncRead;

/// How deeply type names may nest.
const MAX_DEPTH: usize = 32;
/// How many nodes one column type may have.
const MAX_NODES: usize = 1024;

/// `LowCardinality` index-type flag: a global dictionary is used.
pub const LC_NEED_GLOBAL_DICTIONARY: u64 = 1 << 8;
/// `LowCardinality` index-type flag: the chunk carries its own additional keys.
pub const LC_HAS_ADDITIONAL_KEYS: u64 = 1 << 9;
/// `LowCardinality` index-type flag: the global dictionary is sent again.
pub const LC_NEED_UPDATE_DICTIONARY: u64 = 1 << 10;
/// The only `LowCardinality` key serialization version (`SharedDictionariesWithAdditionalKeys`).
pub const LC_KEY_VERSION: u64 = 1;

/// What one node of a type tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `width` bytes per row.
    Fixed(u32),
    /// Length-prefixed bytes per row.
    Str,
    /// Null map, then the child.
    Nullable,
    /// Offsets, then the child.
    Array,
    /// The children in order.
    Tuple,
    /// Dictionary-encoded; the child is the dictionary's (leaf) type.
    LowCardinality,
}

/// One node of a [`Plan`]; `end` is the index just past its subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub kind: Kind,
    pub end: u32,
}

/// A compiled column type.
#[derive(Debug, Default)]
pub struct Plan {
    nodes: Vec<Node>,
    low_cardinality: usize,
    /// The type name compiled last, when it compiled: the columns of a query's blocks have the
    /// same types block after block.
    source: String,
}

impl Plan {
    /// Compiles `ty`, reusing this plan's storage (nothing to do when it is the type compiled
    /// last).
    pub fn compile(&mut self, ty: &str) -> Result<(), ProtoError> {
        if !self.nodes.is_empty() && self.source == ty {
            return Ok(());
        }
        self.nodes.clear();
        self.low_cardinality = 0;
        self.source.clear();
        if let Err(e) = self.parse(ty, ty, 0) {
            // No half-compiled plan stays to be taken for a type's (an empty name's) cached one.
            self.nodes.clear();
            return Err(e);
        }
        self.source.push_str(ty);
        Ok(())
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn push(&mut self, kind: Kind, full: &str) -> Result<usize, ProtoError> {
        if self.nodes.len() >= MAX_NODES {
            return Err(ProtoError::Protocol(format!("column type '{full}' is too complex")));
        }
        self.nodes.push(Node { kind, end: self.nodes.len() as u32 + 1 });
        if kind == Kind::LowCardinality {
            self.low_cardinality += 1;
        }
        Ok(self.nodes.len() - 1)
    }

    /// Pushes a node whose children are parsed by `children`, then fixes its `end`.
    fn wrap(
        &mut self,
        kind: Kind,
        full: &str,
        children: impl FnOnce(&mut Plan) -> Result<(), ProtoError>,
    ) -> Result<(), ProtoError> {
        let at = self.push(kind, full)?;
        children(self)?;
        self.nodes[at].end = self.nodes.len() as u32;
        Ok(())
    }

    fn parse(&mut self, ty: &str, full: &str, depth: usize) -> Result<(), ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::Protocol(format!("column type '{full}' nests too deeply")));
        }
        let (name, args) = split_type(ty);
        let d = depth + 1;
        if let Some(width) = fixed_width(name, args) {
            self.push(Kind::Fixed(width), full)?;
            return Ok(());
        }
        match name {
            "String" => {
                self.push(Kind::Str, full)?;
            }
            "Nullable" => {
                let inner = one_arg(args, full)?;
                self.wrap(Kind::Nullable, full, |p| p.parse(inner, full, d))?;
            }
            "Array" => {
                let inner = one_arg(args, full)?;
                self.wrap(Kind::Array, full, |p| p.parse(inner, full, d))?;
            }
            "Tuple" => {
                let args = args.unwrap_or("");
                self.wrap(Kind::Tuple, full, |p| {
                    Args::new(args).try_for_each(|a| p.parse(strip_element_name(a), full, d))
                })?;
            }
            "Nested" => {
                let args = args.unwrap_or("");
                self.wrap(Kind::Array, full, |p| {
                    p.wrap(Kind::Tuple, full, |p| {
                        Args::new(args).try_for_each(|a| p.parse(strip_element_name(a), full, d))
                    })
                })?;
            }
            "Map" => {
                let mut it = Args::new(args.unwrap_or(""));
                let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) else {
                    return Err(unsupported(full));
                };
                self.wrap(Kind::Array, full, |p| {
                    p.wrap(Kind::Tuple, full, |p| {
                        p.parse(k, full, d)?;
                        p.parse(v, full, d)
                    })
                })?;
            }
            "LowCardinality" => {
                let inner = one_arg(args, full)?;
                // The dictionary is serialized as the type without Nullable.
                let dict = match split_type(inner) {
                    ("Nullable", a) => one_arg(a, full)?,
                    _ => inner,
                };
                self.wrap(Kind::LowCardinality, full, |p| {
                    let at = p.nodes.len();
                    p.parse(dict, full, d)?;
                    match p.nodes[at].kind {
                        Kind::Fixed(_) | Kind::Str if p.nodes.len() == at + 1 => Ok(()),
                        _ => Err(unsupported(full)),
                    }
                })?;
            }
            "SimpleAggregateFunction" => {
                // SimpleAggregateFunction(func, T) is stored as T.
                let Some(inner) = Args::new(args.unwrap_or("")).last() else {
                    return Err(unsupported(full));
                };
                self.parse(inner, full, d)?;
            }
            // Geo types are aliases of tuples and arrays of Float64 pairs.
            "Ring" | "LineString" => {
                self.wrap(Kind::Array, full, |p| p.parse("Point", full, d))?;
            }
            "Polygon" | "MultiLineString" => {
                self.wrap(Kind::Array, full, |p| p.parse("Ring", full, d))?;
            }
            "MultiPolygon" => {
                self.wrap(Kind::Array, full, |p| p.parse("Polygon", full, d))?;
            }
            _ => return Err(unsupported(full)),
        }
        Ok(())
    }
}

/// The only argument of `T(arg)`.
fn one_arg<'a>(args: Option<&'a str>, full: &str) -> Result<&'a str, ProtoError> {
    let mut it = Args::new(args.unwrap_or(""));
    match (it.next(), it.next()) {
        (Some(a), None) if !a.is_empty() => Ok(a),
        _ => Err(unsupported(full)),
    }
}

/// Reads the byte that follows a column's type in a block from revision 54454 (`NativeReader`,
/// `DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION`): 0, or 1 when a custom serialization (sparse,
/// replicated) follows, whose layout this module does not know: [`ProtoError::UnknownType`],
/// as for a type it cannot skip. A server sends 1 only to clients from revision 54465, above
/// the revision chstorm speaks; so 1 is a peer's mistake or a revision this crate does not
/// speak, told apart from a broken stream all the same.
pub async fn custom_serialization<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    revision: u64,
    ty: &str,
) -> Result<(), ProtoError> {
    if revision >= super::packets::rev::CUSTOM_SERIALIZATION && io.u8().await? != 0 {
        return Err(ProtoError::UnknownType(format!("{ty} with a custom serialization")));
    }
    Ok(())
}

/// The error for a column type this module cannot skip.
pub fn unsupported(ty: &str) -> ProtoError {
    ProtoError::UnknownType(ty.to_string())
}

/// Width in bytes of fixed-width types (with their arguments, where the width depends on them).
pub fn fixed_width(name: &str, args: Option<&str>) -> Option<u32> {
    let first_arg = || Args::new(args?).next()?.parse::<u64>().ok();
    Some(match name {
        "UInt8" | "Int8" | "Bool" | "Enum8" | "Nothing" => 1,
        "UInt16" | "Int16" | "Date" | "Enum16" => 2,
        "UInt32" | "Int32" | "Float32" | "Date32" | "DateTime" | "IPv4" | "Decimal32" | "Time" => 4,
        "UInt64" | "Int64" | "Float64" | "DateTime64" | "Decimal64" | "Time64" => 8,
        "UInt128" | "Int128" | "UUID" | "IPv6" | "Decimal128" | "Point" => 16,
        "UInt256" | "Int256" | "Decimal256" => 32,
        "Decimal" => match first_arg()? {
            0..=9 => 4,
            10..=18 => 8,
            19..=38 => 16,
            _ => 32,
        },
        "FixedString" => u32::try_from(first_arg()?).ok().filter(|&n| n > 0)?,
        n if n.starts_with("Interval") => 8,
        _ => return None,
    })
}

/// Splits `Name(args)` into `("Name", Some("args"))`, and `Name` into `("Name", None)`.
pub fn split_type(ty: &str) -> (&str, Option<&str>) {
    let ty = ty.trim();
    match ty.find('(') {
        Some(open) if ty.ends_with(')') => (ty[..open].trim_end(), Some(&ty[open + 1..ty.len() - 1])),
        _ => (ty, None),
    }
}

/// Drops the element name of a named tuple element (`a UInt8`, `` `a b` UInt8 ``).
pub fn strip_element_name(arg: &str) -> &str {
    let arg = arg.trim();
    let bytes = arg.as_bytes();
    if bytes.first() == Some(&b'`') {
        let mut i = 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'`' if bytes.get(i + 1) == Some(&b'`') => i += 2,
                b'`' => return arg[i + 1..].trim_start(),
                _ => i += 1,
            }
        }
        return arg;
    }
    let ident = bytes.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
    let rest = &arg[ident..];
    let after = rest.trim_start();
    if ident > 0 && after.len() < rest.len() && !after.is_empty() && !after.starts_with('(') {
        after
    } else {
        arg
    }
}

/// Iterator over the top-level comma-separated arguments of a type, respecting parentheses and
/// quoted strings (`Enum8('a,b' = 1)`, `DateTime('Europe/Paris')`). Items are trimmed.
pub struct Args<'a> {
    rest: Option<&'a str>,
}

impl<'a> Args<'a> {
    pub fn new(args: &'a str) -> Args<'a> {
        Args { rest: (!args.trim().is_empty()).then_some(args) }
    }
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let s = self.rest?;
        let bytes = s.as_bytes();
        let mut depth = 0usize;
        let mut quote = None;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Some(q) => {
                    if b == b'\\' {
                        i += 1;
                    } else if b == q {
                        quote = None;
                    }
                }
                None => match b {
                    b'\'' | b'`' | b'"' => quote = Some(b),
                    b'(' => depth += 1,
                    b')' => depth = depth.saturating_sub(1),
                    b',' if depth == 0 => {
                        self.rest = Some(&s[i + 1..]);
                        return Some(s[..i].trim());
                    }
                    _ => {}
                },
            }
            i += 1;
        }
        self.rest = None;
        Some(s.trim())
    }
}

/// Skips one column of `rows` rows laid out as `plan` describes. `stack` is scratch space.
pub async fn skip_column<S: AsyncRead + Unpin>(
    io: &mut Io<S>,
    plan: &Plan,
    stack: &mut Vec<(u32, u64)>,
    rows: u64,
) -> Result<(), ProtoError> {
    if rows == 0 {
        return Ok(());
    }
    let nodes = &plan.nodes;
    if plan.low_cardinality > 0 {
        // State prefixes, in pre-order.
        for _ in 0..plan.low_cardinality {
            check_lc_version(io.u64_le().await?)?;
        }
    }
    stack.clear();
    stack.push((0, rows));
    while let Some((i, rows)) = stack.pop() {
        if rows == 0 {
            continue;
        }
        let i = i as usize;
        let Some(node) = nodes.get(i) else {
            return Err(ProtoError::Protocol("empty column plan".into()));
        };
        match node.kind {
            Kind::Fixed(_) | Kind::Str => skip_leaf(io, node.kind, rows).await?,
            Kind::Nullable => {
                io.skip(rows).await?;
                stack.push((i as u32 + 1, rows));
            }
            Kind::Array => {
                let n = last_array_offset(io, rows).await?;
                stack.push((i as u32 + 1, n));
            }
            Kind::Tuple => {
                let base = stack.len();
                let mut child = i + 1;
                while child < node.end as usize {
                    stack.push((child as u32, rows));
                    child = nodes[child].end as usize;
                }
                stack[base..].reverse();
            }
            Kind::LowCardinality => {
                let dict = nodes[i + 1].kind;
                skip_low_cardinality(io, dict, rows).await?;
            }
        }
    }
    Ok(())
}

/// Rejects `LowCardinality` key serialization versions other than the one that exists.
pub fn check_lc_version(v: u64) -> Result<(), ProtoError> {
    if v != LC_KEY_VERSION {
        return Err(ProtoError::Protocol(format!("unknown LowCardinality key serialization version {v}")));
    }
    Ok(())
}

/// Skips `rows` values of a fixed-width or string type.
async fn skip_leaf<S: AsyncRead + Unpin>(io: &mut Io<S>, kind: Kind, rows: u64) -> Result<(), ProtoError> {
    match kind {
        Kind::Fixed(w) => {
            let n = rows
                .checked_mul(u64::from(w))
                .ok_or_else(|| ProtoError::Protocol(format!("column of {rows} rows is too large")))?;
            io.skip(n).await
        }
        Kind::Str => io.skip_strings(rows).await,
        _ => Err(ProtoError::Protocol("LowCardinality dictionary of a composite type".into())),
    }
}

/// Reads the `rows` offsets of an array column, returning the last (the nested row count).
pub async fn last_array_offset<S: AsyncRead + Unpin>(io: &mut Io<S>, rows: u64) -> Result<u64, ProtoError> {
    // rows > 0 here, so the subtraction cannot underflow; the multiplication cannot overflow
    // before `skip` runs out of data, but check anyway.
    let before = (rows - 1)
        .checked_mul(8)
        .ok_or_else(|| ProtoError::Protocol(format!("array column of {rows} rows is too large")))?;
    io.skip(before).await?;
    io.u64_le().await
}

/// The header of one `LowCardinality` chunk.
#[derive(Debug, Clone, Copy)]
pub struct LcChunk {
    pub flags: u64,
    /// Bytes per key.
    pub key_width: u8,
}

impl LcChunk {
    pub fn parse(index_type: u64) -> Result<LcChunk, ProtoError> {
        let key_width = match index_type & 0xff {
            0 => 1,
            1 => 2,
            2 => 4,
            3 => 8,
            t => return Err(ProtoError::Protocol(format!("unknown LowCardinality key type {t}"))),
        };
        Ok(LcChunk { flags: index_type, key_width })
    }
    /// Whether the chunk carries the global dictionary (always on the first chunk that needs one).
    pub fn reads_global_dictionary(&self, first: bool) -> bool {
        self.flags & LC_NEED_GLOBAL_DICTIONARY != 0 && (first || self.flags & LC_NEED_UPDATE_DICTIONARY != 0)
    }
    pub fn has_additional_keys(&self) -> bool {
        self.flags & LC_HAS_ADDITIONAL_KEYS != 0
    }
}

/// Reads the row count that closes a `LowCardinality` chunk header and checks it against the
/// rows still expected.
pub async fn lc_chunk_rows<S: AsyncRead + Unpin>(io: &mut Io<S>, remaining: u64) -> Result<u64, ProtoError> {
    let n = io.u64_le().await?;
    if n == 0 || n > remaining {
        return Err(ProtoError::Protocol(format!("LowCardinality chunk of {n} rows where {remaining} rows remain")));
    }
    Ok(n)
}

async fn skip_low_cardinality<S: AsyncRead + Unpin>(io: &mut Io<S>, dict: Kind, rows: u64) -> Result<(), ProtoError> {
    let mut remaining = rows;
    let mut first = true;
    while remaining > 0 {
        let chunk = LcChunk::parse(io.u64_le().await?)?;
        if chunk.reads_global_dictionary(first) {
            let n = io.u64_le().await?;
            skip_leaf(io, dict, n).await?;
        }
        if chunk.has_additional_keys() {
            let n = io.u64_le().await?;
            skip_leaf(io, dict, n).await?;
        }
        let n = lc_chunk_rows(io, remaining).await?;
        skip_leaf(io, Kind::Fixed(u32::from(chunk.key_width)), n).await?;
        remaining -= n;
        first = false;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::wire::{put_str, put_varuint};
    use super::*;

    fn plan(ty: &str) -> Vec<Node> {
        let mut p = Plan::default();
        p.compile(ty).unwrap_or_else(|e| panic!("{ty}: {e}"));
        p.nodes
    }

    fn fixed(w: u32, end: u32) -> Node {
        Node { kind: Kind::Fixed(w), end }
    }

    #[test]
    fn a_type_compiled_again_keeps_its_plan_and_a_failed_one_keeps_none() {
        let mut p = Plan::default();
        p.compile("Array(UInt8)").unwrap();
        let array = p.nodes().to_vec();
        p.compile("Array(UInt8)").unwrap();
        assert_eq!(p.nodes(), array);
        p.compile("UInt16").unwrap();
        assert_eq!(p.nodes(), [fixed(2, 1)]);
        assert!(p.compile("Tuple(UInt8, Nope)").is_err());
        assert!(p.nodes().is_empty());
        assert!(p.compile("").is_err(), "a failed compile is not cached");
        assert!(p.compile("").is_err());
        p.compile("Array(UInt8)").unwrap();
        assert_eq!(p.nodes(), array);
    }

    #[test]
    fn compiles_type_names() {
        assert_eq!(plan("UInt64"), vec![fixed(8, 1)]);
        assert_eq!(plan("DateTime('Europe/Moscow')"), vec![fixed(4, 1)]);
        assert_eq!(plan("DateTime64(3, 'UTC')"), vec![fixed(8, 1)]);
        assert_eq!(plan("Decimal(9, 2)"), vec![fixed(4, 1)]);
        assert_eq!(plan("Decimal(18, 2)"), vec![fixed(8, 1)]);
        assert_eq!(plan("Decimal(38, 2)"), vec![fixed(16, 1)]);
        assert_eq!(plan("Decimal(76, 2)"), vec![fixed(32, 1)]);
        assert_eq!(plan("Enum8('a' = 1, 'b,(' = 2)"), vec![fixed(1, 1)]);
        assert_eq!(plan("FixedString(3)"), vec![fixed(3, 1)]);
        assert_eq!(
            plan("Array(Nullable(String))"),
            vec![
                Node { kind: Kind::Array, end: 3 },
                Node { kind: Kind::Nullable, end: 3 },
                Node { kind: Kind::Str, end: 3 },
            ]
        );
        assert_eq!(
            plan("Tuple(a UInt8, `b c` Array(Int16), String)"),
            vec![
                Node { kind: Kind::Tuple, end: 5 },
                fixed(1, 2),
                Node { kind: Kind::Array, end: 4 },
                fixed(2, 4),
                Node { kind: Kind::Str, end: 5 },
            ]
        );
        assert_eq!(
            plan("Map(LowCardinality(Nullable(String)), UInt32)"),
            vec![
                Node { kind: Kind::Array, end: 5 },
                Node { kind: Kind::Tuple, end: 5 },
                Node { kind: Kind::LowCardinality, end: 4 },
                Node { kind: Kind::Str, end: 4 },
                fixed(4, 5),
            ]
        );
        assert_eq!(plan("SimpleAggregateFunction(sum, UInt64)"), vec![fixed(8, 1)]);
    }

    #[test]
    fn rejects_unknown_and_malformed_types() {
        let mut p = Plan::default();
        for ty in [
            "AggregateFunction(uniq, UInt64)",
            "Object('json')",
            "Nullable",
            "Nullable(UInt8, UInt8)",
            "FixedString(x)",
            "FixedString(0)",
            "LowCardinality(Array(String))",
            "Map(String)",
            "",
        ] {
            match p.compile(ty) {
                Err(e @ ProtoError::UnknownType(_)) => {
                    assert!(e.to_string().contains("unsupported column type"), "{e}")
                }
                other => panic!("{ty}: {other:?}"),
            }
        }
        let deep = format!("{}UInt8{}", "Array(".repeat(100), ")".repeat(100));
        assert!(p.compile(&deep).is_err());
    }

    async fn skip(ty: &str, rows: u64, data: &[u8]) -> Result<u64, ProtoError> {
        let mut p = Plan::default();
        p.compile(ty)?;
        let mut io = Io::new(data);
        skip_column(&mut io, &p, &mut Vec::new(), rows).await?;
        Ok(io.position())
    }

    #[tokio::test]
    async fn skips_array_of_nullable_strings() {
        // [['a', NULL], [], ['bcd']]
        let mut d = Vec::new();
        for off in [2u64, 2, 3] {
            d.extend_from_slice(&off.to_le_bytes());
        }
        d.extend_from_slice(&[0, 1, 0]); // null map of 3 nested rows
        put_str(&mut d, b"a");
        put_str(&mut d, b"");
        put_str(&mut d, b"bcd");
        d.extend_from_slice(b"trailer");
        assert_eq!(skip("Array(Nullable(String))", 3, &d).await.unwrap(), d.len() as u64 - 7);
        assert!(skip("Array(Nullable(String))", 3, &d[..30]).await.is_err());
    }

    fn lc_strings(d: &mut Vec<u8>, dict: &[&[u8]], keys: &[u8]) {
        d.extend_from_slice(&(LC_HAS_ADDITIONAL_KEYS).to_le_bytes()); // u8 keys
        d.extend_from_slice(&(dict.len() as u64).to_le_bytes());
        for s in dict {
            put_str(d, s);
        }
        d.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        d.extend_from_slice(keys);
    }

    #[tokio::test]
    async fn skips_low_cardinality_strings() {
        let mut d = Vec::new();
        d.extend_from_slice(&LC_KEY_VERSION.to_le_bytes());
        lc_strings(&mut d, &[b"", b"x", b"yy"], &[1, 2, 1, 0]);
        assert_eq!(skip("LowCardinality(String)", 4, &d).await.unwrap(), d.len() as u64);
        assert_eq!(skip("LowCardinality(Nullable(String))", 4, &d).await.unwrap(), d.len() as u64);
        // A chunk that claims more rows than the column has.
        assert!(skip("LowCardinality(String)", 3, &d).await.is_err());
        // Zero rows: no data at all, not even the prefix.
        assert_eq!(skip("LowCardinality(String)", 0, &[]).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn skips_low_cardinality_inside_array_and_tuple() {
        // Tuple(Array(LowCardinality(String)), UInt16), 2 rows: ([], 7), (['q'], 8)
        let mut d = Vec::new();
        d.extend_from_slice(&LC_KEY_VERSION.to_le_bytes()); // prefix comes first
        d.extend_from_slice(&0u64.to_le_bytes());
        d.extend_from_slice(&1u64.to_le_bytes());
        lc_strings(&mut d, &[b"", b"q"], &[1]);
        d.extend_from_slice(&7u16.to_le_bytes());
        d.extend_from_slice(&8u16.to_le_bytes());
        assert_eq!(skip("Tuple(Array(LowCardinality(String)), UInt16)", 2, &d).await.unwrap(), d.len() as u64);
        // With a global dictionary in the chunk.
        let mut d = Vec::new();
        d.extend_from_slice(&LC_KEY_VERSION.to_le_bytes());
        d.extend_from_slice(&(1 | LC_NEED_GLOBAL_DICTIONARY).to_le_bytes()); // u16 keys
        d.extend_from_slice(&2u64.to_le_bytes());
        d.extend_from_slice(&[0; 8]);
        d.extend_from_slice(&2u64.to_le_bytes());
        d.extend_from_slice(&[1, 0, 0, 0]);
        assert_eq!(skip("LowCardinality(UInt32)", 2, &d).await.unwrap(), d.len() as u64);
    }

    #[tokio::test]
    async fn rejects_bad_low_cardinality_data() {
        let mut d = Vec::new();
        d.extend_from_slice(&2u64.to_le_bytes());
        assert!(skip("LowCardinality(String)", 1, &d).await.is_err());
        let mut d = Vec::new();
        d.extend_from_slice(&LC_KEY_VERSION.to_le_bytes());
        d.extend_from_slice(&9u64.to_le_bytes()); // key type 9
        assert!(skip("LowCardinality(String)", 1, &d).await.is_err());
    }

    /// Garbage input must give errors, never panics or hangs.
    #[tokio::test]
    async fn survives_garbage() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let types = [
            "String",
            "Array(Nullable(String))",
            "LowCardinality(Nullable(String))",
            "Map(String, Array(LowCardinality(String)))",
            "Tuple(UInt8, Array(Array(String)))",
        ];
        let mut plan = Plan::default();
        let mut stack = Vec::new();
        for round in 0..2000 {
            let len = (next() % 200) as usize;
            let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 {
                // Plausible small counts make the walk go deeper.
                for chunk in data.chunks_mut(8) {
                    chunk[0] %= 4;
                }
            }
            for ty in types {
                plan.compile(ty).unwrap();
                let mut io = Io::new(&data[..]);
                let _ = skip_column(&mut io, &plan, &mut stack, 1 + next() % 5).await;
            }
        }
    }

    #[test]
    fn splits_arguments() {
        let args: Vec<_> = Args::new("'a,b' = 1, 'c\\'d)' = 2, Tuple(x, y)").collect();
        assert_eq!(args, ["'a,b' = 1", "'c\\'d)' = 2", "Tuple(x, y)"]);
        assert_eq!(Args::new(" ").count(), 0);
        assert_eq!(strip_element_name("a UInt8"), "UInt8");
        assert_eq!(strip_element_name("`a ``b` Nullable(UInt8)"), "Nullable(UInt8)");
        assert_eq!(strip_element_name("Nullable(UInt8)"), "Nullable(UInt8)");
        assert_eq!(strip_element_name("UInt8"), "UInt8");
        let mut v = Vec::new();
        put_varuint(&mut v, 1);
        assert_eq!(v, [1]);
    }
}
