//! The sharding expression, its value for a key, and the weighted shard
//! choice, as ClickHouse's Distributed engine computes them on insert.

use std::fmt;
use std::str::FromStr;

use super::RouteError;
use crate::cityhash::{city_hash64, int_hash64};
use crate::lexer::{tokenize, Grammar, TokenKind};

/// A shard key value: from the URL parameter or header (always
/// [`KeyValue::Str`], the raw text: the column type decides how to read it),
/// or a literal from the WHERE clause (an integer literal is `UInt` when
/// non-negative, `Int` when negative; a quoted string is `Str`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyValue {
    UInt(u64),
    Int(i64),
    Str(String),
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::UInt(v) => write!(f, "{v}"),
            KeyValue::Int(v) => write!(f, "{v}"),
            KeyValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The type of the sharding column in the Distributed table. Default `UInt64`
/// (`items.shop_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ColumnType {
    UInt8,
    UInt16,
    UInt32,
    #[default]
    UInt64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
}

impl ColumnType {
    /// Parses a ClickHouse type name (`UInt64`, `Int32`, `String`, ...;
    /// case-sensitive as in ClickHouse, surrounding spaces ignored).
    pub fn parse(s: &str) -> Result<ColumnType, RouteError> {
        use ColumnType::*;
        Ok(match s.trim() {
            "UInt8" => UInt8,
            "UInt16" => UInt16,
            "UInt32" => UInt32,
            "UInt64" => UInt64,
            "Int8" => Int8,
            "Int16" => Int16,
            "Int32" => Int32,
            "Int64" => Int64,
            "String" => String,
            other => return Err(RouteError::UnsupportedColumnType(other.to_string())),
        })
    }

    /// The ClickHouse type name.
    pub fn name(self) -> &'static str {
        use ColumnType::*;
        match self {
            UInt8 => "UInt8",
            UInt16 => "UInt16",
            UInt32 => "UInt32",
            UInt64 => "UInt64",
            Int8 => "Int8",
            Int16 => "Int16",
            Int32 => "Int32",
            Int64 => "Int64",
            String => "String",
        }
    }

    /// (bits, signed) for integer types.
    fn int_layout(self) -> Option<(u32, bool)> {
        use ColumnType::*;
        match self {
            UInt8 => Some((8, false)),
            UInt16 => Some((16, false)),
            UInt32 => Some((32, false)),
            UInt64 => Some((64, false)),
            Int8 => Some((8, true)),
            Int16 => Some((16, true)),
            Int32 => Some((32, true)),
            Int64 => Some((64, true)),
            String => None,
        }
    }

    /// The key as a value of this integer type (range-checked), widened to i128.
    fn int_value(self, key: &KeyValue) -> Result<i128, RouteError> {
        let (bits, signed) = self.int_layout().expect("integer type");
        let invalid = || RouteError::InvalidKey { key: key.to_string(), col_type: self };
        let v: i128 = match key {
            KeyValue::UInt(u) => i128::from(*u),
            KeyValue::Int(i) => i128::from(*i),
            KeyValue::Str(s) => parse_int(s).ok_or_else(invalid)?,
        };
        let (min, max) =
            if signed { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) };
        if v < min || v > max {
            return Err(invalid());
        }
        Ok(v)
    }
}

impl FromStr for ColumnType {
    type Err = RouteError;
    fn from_str(s: &str) -> Result<Self, RouteError> {
        ColumnType::parse(s)
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An integer as text: optional `-` or `+`, then decimal digits, nothing else.
fn parse_int(s: &str) -> Option<i128> {
    let digits = s.strip_prefix('-').or_else(|| s.strip_prefix('+')).unwrap_or(s);
    if digits.is_empty() || digits.len() > 39 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<i128>().ok()
}

/// The Distributed table's sharding expression, as far as the gateway can
/// compute it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShardingExpr {
    /// `cityHash64(column)`.
    CityHash64 { column: String },
    /// A plain integer column: its value is the sharding value.
    Column { column: String },
}

impl ShardingExpr {
    /// Parses `cityHash64(col)` (function name case-insensitive; `col` bare,
    /// `` `quoted` `` or `"quoted"`) or a plain column name. Anything else
    /// (`rand()`, `intHash64(x)`, `x % 4`, `cityHash64(a, b)`) is
    /// [`RouteError::UnsupportedShardingKey`].
    pub fn parse(s: &str) -> Result<ShardingExpr, RouteError> {
        let unsupported = || RouteError::UnsupportedShardingKey(s.trim().to_string());
        // Config text: the current grammar, which reads every form 18.16 does.
        let toks = tokenize(s, Grammar::Current);
        let is_ident =
            |i: usize| toks.get(i).is_some_and(|t| matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent));
        match toks.len() {
            1 if is_ident(0) => {
                let column = toks[0].ident().filter(|c| !c.is_empty()).ok_or_else(unsupported)?;
                Ok(ShardingExpr::Column { column })
            }
            4 if toks[0].is_kw("cityHash64") && toks[1].is_punct("(") && is_ident(2) && toks[3].is_punct(")") => {
                let column = toks[2].ident().filter(|c| !c.is_empty()).ok_or_else(unsupported)?;
                Ok(ShardingExpr::CityHash64 { column })
            }
            _ => Err(unsupported()),
        }
    }

    /// The column the expression reads.
    pub fn column(&self) -> &str {
        match self {
            ShardingExpr::CityHash64 { column } | ShardingExpr::Column { column } => column,
        }
    }

    /// The sharding expression's value for `key`, as ClickHouse computes it
    /// for an insert into the Distributed table where the column has type
    /// `col_type`, already widened the way the Distributed engine widens it
    /// before taking the modulo (so [`select_shard`] can use it directly):
    ///
    /// * `cityHash64` of a `String`: CityHash64 v1.0.2 of the bytes (an integer
    ///   key is read as its decimal text).
    /// * `cityHash64` of an integer type: `intHash64` of the value's bits,
    ///   zero-extended from the type's width (`Int8` -1 hashes 0xFF).
    /// * A plain column: the value; signed types narrower than 64 bits are
    ///   sign-extended to 32 bits and then taken as unsigned (`Int8` -1 is
    ///   0xFFFF_FFFF, `Int64` -1 is 0xFFFF_FFFF_FFFF_FFFF), as 18.16's
    ///   `createBlockSelector` does.
    ///
    /// Errors: the key does not fit the type (`InvalidKey`), or a plain
    /// `String` column (`NotAnInteger`: ClickHouse refuses it too).
    pub fn evaluate(&self, key: &KeyValue, col_type: ColumnType) -> Result<u64, RouteError> {
        match (self, col_type) {
            (ShardingExpr::CityHash64 { .. }, ColumnType::String) => Ok(match key {
                KeyValue::Str(s) => city_hash64(s.as_bytes()),
                KeyValue::UInt(v) => city_hash64(v.to_string().as_bytes()),
                KeyValue::Int(v) => city_hash64(v.to_string().as_bytes()),
            }),
            (ShardingExpr::CityHash64 { .. }, ty) => {
                let (bits, _) = ty.int_layout().expect("integer type");
                let v = ty.int_value(key)?;
                let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
                Ok(int_hash64((v as u64) & mask))
            }
            (ShardingExpr::Column { column }, ColumnType::String) => {
                Err(RouteError::NotAnInteger { column: column.clone(), col_type })
            }
            (ShardingExpr::Column { .. }, ty) => {
                let (bits, signed) = ty.int_layout().expect("integer type");
                let v = ty.int_value(key)?;
                Ok(if signed && bits < 64 { u64::from(v as i32 as u32) } else { v as u64 })
            }
        }
    }
}

impl fmt::Display for ShardingExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingExpr::CityHash64 { column } => write!(f, "cityHash64({column})"),
            ShardingExpr::Column { column } => f.write_str(column),
        }
    }
}

/// Weighted shard selection exactly as Distributed does: `total` is the sum of
/// the weights; `r = value % total`; shard `i` owns `[acc_i, acc_i + w_i)`
/// where `acc_i` is the sum of the weights before it. Returns the 0-based
/// shard index. A shard of weight 0 owns nothing (Distributed never writes to
/// it) but still counts for the indices. `None` when the total weight is 0
/// (an empty list, or all weights 0: ClickHouse 18.16 aborts the whole server
/// on such an insert, `libdivide: divider must be != 0`).
pub fn select_shard(value: u64, weights: &[u32]) -> Option<usize> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if total == 0 {
        return None;
    }
    let mut r = value % total;
    for (i, &w) in weights.iter().enumerate() {
        let w = u64::from(w);
        if r < w {
            return Some(i);
        }
        r -= w;
    }
    None
}

/// Checks shard weights for routing: at least one must be positive. Returns
/// the total weight.
pub fn validate_weights(weights: &[u32]) -> Result<u64, RouteError> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if total == 0 {
        return Err(RouteError::NoWeight);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_sharding_expr() {
        assert_eq!(
            ShardingExpr::parse("cityHash64(shop_id)").unwrap(),
            ShardingExpr::CityHash64 { column: "shop_id".into() }
        );
        assert_eq!(
            ShardingExpr::parse("  cityHash64 ( `shop id` ) ").unwrap(),
            ShardingExpr::CityHash64 { column: "shop id".into() }
        );
        assert_eq!(ShardingExpr::parse("CITYHASH64(\"s\")").unwrap(), ShardingExpr::CityHash64 { column: "s".into() });
        assert_eq!(ShardingExpr::parse("shop_id").unwrap(), ShardingExpr::Column { column: "shop_id".into() });
        assert_eq!(ShardingExpr::parse("shop_id").unwrap().column(), "shop_id");
        for bad in
            ["rand()", "", "intHash64(x)", "x % 4", "cityHash64(a, b)", "cityHash64()", "cityHash64(x", "``", "1"]
        {
            let e = ShardingExpr::parse(bad).unwrap_err();
            assert!(matches!(e, RouteError::UnsupportedShardingKey(_)), "{bad}: {e}");
        }
        assert_eq!(
            ShardingExpr::parse("rand()").unwrap_err().to_string(),
            "sharding_key 'rand()' is not supported: use cityHash64(column) or a plain integer column"
        );
    }

    #[test]
    fn parse_column_type() {
        assert_eq!("UInt64".parse::<ColumnType>().unwrap(), ColumnType::UInt64);
        assert_eq!(ColumnType::parse(" Int8 ").unwrap(), ColumnType::Int8);
        assert_eq!(ColumnType::parse("String").unwrap(), ColumnType::String);
        assert_eq!(ColumnType::default(), ColumnType::UInt64);
        for t in ["uint64", "Float64", "Nullable(UInt64)", ""] {
            assert!(matches!(ColumnType::parse(t), Err(RouteError::UnsupportedColumnType(_))), "{t}");
        }
        for t in [ColumnType::UInt8, ColumnType::Int64, ColumnType::String] {
            assert_eq!(ColumnType::parse(t.name()).unwrap(), t);
        }
    }

    #[test]
    fn evaluate_city_hash() {
        let e = ShardingExpr::parse("cityHash64(k)").unwrap();
        // Values from a ClickHouse 18.16.1 server.
        assert_eq!(e.evaluate(&KeyValue::UInt(123), ColumnType::UInt64).unwrap(), 12585326385145454095);
        assert_eq!(e.evaluate(&KeyValue::UInt(123), ColumnType::UInt8).unwrap(), 12585326385145454095);
        assert_eq!(e.evaluate(&KeyValue::Int(-1), ColumnType::Int8).unwrap(), 8055013221972926055);
        assert_eq!(e.evaluate(&KeyValue::Int(-1), ColumnType::Int16).unwrap(), 6547939410751295652);
        assert_eq!(e.evaluate(&KeyValue::Int(-1), ColumnType::Int32).unwrap(), 9168733277332772950);
        assert_eq!(e.evaluate(&KeyValue::Int(-1), ColumnType::Int64).unwrap(), 14600443904207254319);
        assert_eq!(e.evaluate(&KeyValue::Str("abc".into()), ColumnType::String).unwrap(), 4220206313085259313);
        assert_eq!(e.evaluate(&KeyValue::Str("123".into()), ColumnType::UInt64).unwrap(), 12585326385145454095);
        // An integer key for a String column is its decimal text.
        assert_eq!(e.evaluate(&KeyValue::UInt(123), ColumnType::String).unwrap(), city_hash64(b"123"),);
        assert!(matches!(e.evaluate(&KeyValue::UInt(256), ColumnType::UInt8), Err(RouteError::InvalidKey { .. })));
        assert!(e.evaluate(&KeyValue::Int(-1), ColumnType::UInt64).is_err());
        assert!(e.evaluate(&KeyValue::Str("12a".into()), ColumnType::UInt64).is_err());
        assert!(e.evaluate(&KeyValue::Str("".into()), ColumnType::UInt64).is_err());
        assert!(e.evaluate(&KeyValue::Str(" 1".into()), ColumnType::UInt64).is_err());
        assert!(e.evaluate(&KeyValue::Str("18446744073709551616".into()), ColumnType::UInt64).is_err());
        assert_eq!(
            e.evaluate(&KeyValue::Str("18446744073709551615".into()), ColumnType::UInt64).unwrap(),
            int_hash64(u64::MAX)
        );
        assert_eq!(e.evaluate(&KeyValue::Str("-128".into()), ColumnType::Int8).unwrap(), int_hash64(0x80));
        assert!(e.evaluate(&KeyValue::Str("-129".into()), ColumnType::Int8).is_err());
    }

    #[test]
    fn evaluate_plain_column() {
        let e = ShardingExpr::parse("k").unwrap();
        assert_eq!(e.evaluate(&KeyValue::UInt(7), ColumnType::UInt8).unwrap(), 7);
        assert_eq!(e.evaluate(&KeyValue::UInt(u64::MAX), ColumnType::UInt64).unwrap(), u64::MAX);
        // Seen on 18.16 with weights [3,1,7]: Int8/16/32 -1 -> 0xFFFF_FFFF,
        // Int64 -1 -> 0xFFFF_FFFF_FFFF_FFFF.
        for t in [ColumnType::Int8, ColumnType::Int16, ColumnType::Int32] {
            assert_eq!(e.evaluate(&KeyValue::Int(-1), t).unwrap(), 0xFFFF_FFFF, "{t}");
            assert_eq!(e.evaluate(&KeyValue::Int(-2), t).unwrap(), 0xFFFF_FFFE, "{t}");
        }
        assert_eq!(e.evaluate(&KeyValue::Int(-1), ColumnType::Int64).unwrap(), u64::MAX);
        assert_eq!(select_shard(e.evaluate(&KeyValue::Int(-1), ColumnType::Int8).unwrap(), &[3, 1, 7]), Some(1));
        assert_eq!(select_shard(e.evaluate(&KeyValue::Int(-2), ColumnType::Int8).unwrap(), &[3, 1, 7]), Some(0));
        assert_eq!(select_shard(e.evaluate(&KeyValue::Int(-1), ColumnType::Int64).unwrap(), &[3, 1, 7]), Some(2));
        assert_eq!(select_shard(e.evaluate(&KeyValue::Int(-2), ColumnType::Int64).unwrap(), &[3, 1, 7]), Some(1));
        let err = e.evaluate(&KeyValue::Str("x".into()), ColumnType::String).unwrap_err();
        assert!(matches!(err, RouteError::NotAnInteger { .. }));
        assert!(err.to_string().contains("cityHash64(k)"), "{err}");
    }

    #[test]
    fn weight_ranges() {
        assert_eq!(select_shard(0, &[1, 1]), Some(0));
        assert_eq!(select_shard(1, &[1, 1]), Some(1));
        assert_eq!(select_shard(u64::MAX, &[1, 1]), Some(1));
        let w = [2, 1, 1];
        let got: Vec<_> = (0..8).map(|v| select_shard(v, &w).unwrap()).collect();
        assert_eq!(got, [0, 0, 1, 2, 0, 0, 1, 2]);
        // A weight-0 shard owns nothing but keeps its index (seen on 18.16
        // with weights [2,0,3]: residues 0,1 -> shard 0, 2,3,4 -> shard 2).
        let w = [2, 0, 3];
        let got: Vec<_> = (0..5).map(|v| select_shard(v, &w).unwrap()).collect();
        assert_eq!(got, [0, 0, 2, 2, 2]);
        assert_eq!(select_shard(5, &[0, 1]), Some(1));
        assert_eq!(select_shard(5, &[7]), Some(0));
        assert_eq!(select_shard(5, &[]), None);
        assert_eq!(select_shard(5, &[0, 0]), None);
        assert_eq!(
            select_shard(u64::MAX, &[u32::MAX, u32::MAX, 1]),
            Some((u64::MAX % (2 * u64::from(u32::MAX) + 1) / u64::from(u32::MAX)) as usize)
        );
        assert!(matches!(validate_weights(&[0, 0]), Err(RouteError::NoWeight)));
        assert!(matches!(validate_weights(&[]), Err(RouteError::NoWeight)));
        assert_eq!(validate_weights(&[2, 0, 3]).unwrap(), 5);
    }
}
