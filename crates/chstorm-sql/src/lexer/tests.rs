use super::*;
use rand::{Rng, SeedableRng};
use Grammar::*;
use TokenKind::*;

fn kinds(sql: &str, g: Grammar) -> Vec<(TokenKind, &str)> {
    tokenize(sql, g).into_iter().map(|t| (t.kind, t.text)).collect()
}

/// Both grammars read `sql` as `want`.
fn both(sql: &str, want: &[(TokenKind, &str)]) {
    assert_eq!(kinds(sql, V18_16), want, "18.16: {sql:?}");
    assert_eq!(kinds(sql, Current), want, "current: {sql:?}");
}

#[test]
fn words_numbers_strings_punct() {
    both(
        "SELECT a1_, 12, 0x1F, 1.5e-3, .5 FROM t WHERE x >= 'it''s' AND y != `q``x` -- tail",
        &[
            (Word, "SELECT"),
            (Word, "a1_"),
            (Punct, ","),
            (Number, "12"),
            (Punct, ","),
            (Number, "0x1F"),
            (Punct, ","),
            (Number, "1.5e-3"),
            (Punct, ","),
            (Number, ".5"),
            (Word, "FROM"),
            (Word, "t"),
            (Word, "WHERE"),
            (Word, "x"),
            (Punct, ">="),
            (Str, "'it''s'"),
            (Word, "AND"),
            (Word, "y"),
            (Punct, "!="),
            (QuotedIdent, "`q``x`"),
        ],
    );
}

#[test]
fn comments() {
    both("a /* FROM items */ b -- FROM items\nc // d\ne", &[(Word, "a"), (Word, "b"), (Word, "c"), (Word, "e")]);
    // 18.16 does not nest comments: the first */ ends it; current releases nest them.
    assert_eq!(
        kinds("a /* x /* y */ b */ c", V18_16),
        [(Word, "a"), (Word, "b"), (Punct, "*"), (Punct, "/"), (Word, "c")]
    );
    assert_eq!(kinds("a /* x /* y */ b */ c", Current), [(Word, "a"), (Word, "c")]);
    assert_eq!(kinds("a /* x /* y */ b", Current), [(Word, "a"), (Error, "/* x /* y */ b")]);
    assert_eq!(kinds("a /* open", V18_16)[1].0, Error);
    // `# ` and `#!` start a comment in current releases; `#x` is an error in both.
    assert_eq!(kinds("# x\nKILL", Current), [(Word, "KILL")]);
    assert_eq!(kinds("#!/bin/ch\nKILL", Current), [(Word, "KILL")]);
    assert_eq!(kinds("# x\nKILL", V18_16), [(Error, "# x\nKILL")]);
    assert_eq!(kinds("#x", Current), [(Error, "#x")]);
    both("a -- only comment", &[(Word, "a")]);
}

#[test]
fn numbers_by_grammar() {
    both("010 08 1.5", &[(Number, "010"), (Number, "08"), (Number, "1.5")]);
    // `0x` without a hex digit: 18.16 takes the prefix as a number, or an error at the end;
    // current releases a word.
    assert_eq!(kinds("0x 0xg", V18_16), [(Number, "0x"), (Error, "0xg")]);
    assert_eq!(kinds("0x", V18_16), [(Error, "0x")]);
    assert_eq!(kinds("0x 1", Current), [(Word, "0x"), (Number, "1")]);
    assert_eq!(kinds("1_000 0b11 0x_1", V18_16), [(Error, "1_000 0b11 0x_1")]);
    assert_eq!(
        kinds("1_000 0b11 1_0.2_5e1_0", Current),
        [(Number, "1_000"), (Number, "0b11"), (Number, "1_0.2_5e1_0")]
    );
    // 18.16 reads 0b followed by decimal digits as a number (its parser then fails).
    assert_eq!(kinds("0b12", V18_16), [(Number, "0b12")]);
    // A word may start with digits in current releases: `1abc`, `1e`, `1_`, `12__3`.
    assert_eq!(kinds("1abc 1_ x 1e", Current), [(Word, "1abc"), (Word, "1_"), (Word, "x"), (Word, "1e")]);
    // `e` with a byte after it starts an exponent, digits or not.
    assert_eq!(kinds("1e x", Current), [(Number, "1e"), (Word, "x")]);
    assert_eq!(kinds("1abc", V18_16), [(Error, "1abc")]);
    assert_eq!(kinds("1.5abc", Current), [(Error, "1.5abc")]);
    assert_eq!(kinds("1e", V18_16), [(Error, "1e")]);
    // The sign of an exponent needs a byte after it.
    both("1e+", &[(Number, "1e"), (Punct, "+")]);
}

#[test]
fn current_only_tokens() {
    assert_eq!(kinds("$$a b$$ $t$x$y$t$", Current), [(Str, "$$a b$$"), (Str, "$t$x$y$t$")]);
    assert_eq!(kinds("a$b $ x", Current), [(Word, "a$b"), (Punct, "$"), (Word, "x")]);
    assert_eq!(
        kinds("\u{2018}a'b\u{2019} \u{201C}n\u{201D}", Current),
        [(Str, "\u{2018}a'b\u{2019}"), (QuotedIdent, "\u{201C}n\u{201D}")]
    );
    assert_eq!(kinds("x'41' b'0100'", Current), [(Str, "x'41'"), (Str, "b'0100'")]);
    assert_eq!(kinds("1 \u{2212} 2", Current), [(Number, "1"), (Punct, "\u{2212}"), (Number, "2")]);
    assert!(tokenize("1 \u{2212} 2", Current)[1].is_punct("-"));
    assert_eq!(kinds("a\u{a0}b\u{3000}c\u{feff}d", Current), [(Word, "a"), (Word, "b"), (Word, "c"), (Word, "d")]);
    assert_eq!(
        kinds("{x:UInt8} a::b a <=> b ^ | @ @@ \\G", Current),
        [
            (Punct, "{"),
            (Word, "x"),
            (Punct, ":"),
            (Word, "UInt8"),
            (Punct, "}"),
            (Word, "a"),
            (Punct, "::"),
            (Word, "b"),
            (Word, "a"),
            (Punct, "<=>"),
            (Word, "b"),
            (Punct, "^"),
            (Punct, "|"),
            (Punct, "@"),
            (Punct, "@@"),
            (Punct, "\\G"),
        ]
    );
    for (sql, at) in [
        ("$$a", 0),
        ("{", 0),
        ("a::b", 2),
        ("a <=> b", 2),
        ("^", 0),
        ("a | b", 2),
        ("@", 0),
        ("\u{a0}", 0),
        ("\u{2018}x\u{2019}", 0),
    ] {
        let t = tokenize(sql, V18_16);
        let e = t.iter().find(|t| t.kind == Error).map(|t| t.start);
        let colon = t.iter().filter(|t| t.is_punct(":")).count();
        assert!(e == Some(at) || colon == 2 || sql == "a <=> b", "18.16: {sql:?}: {t:?}");
    }
    assert_eq!(kinds("a <=> b", V18_16), [(Word, "a"), (Punct, "<="), (Punct, ">"), (Word, "b")]);
}

#[test]
fn tuple_access_is_dot_number() {
    for g in Grammar::ALL {
        assert_eq!(kinds("t.1", g), [(Word, "t"), (Punct, "."), (Number, "1")]);
        assert_eq!(kinds("(x).2", g), [(Punct, "("), (Word, "x"), (Punct, ")"), (Punct, "."), (Number, "2")]);
        assert_eq!(kinds("db.t", g), [(Word, "db"), (Punct, "."), (Word, "t")]);
        assert_eq!(kinds("x.1.1", g), [(Word, "x"), (Punct, "."), (Number, "1"), (Punct, "."), (Number, "1")]);
    }
}

#[test]
fn operators() {
    both(
        "a==b<>c<=d||e->g%h",
        &[
            (Word, "a"),
            (Punct, "=="),
            (Word, "b"),
            (Punct, "<>"),
            (Word, "c"),
            (Punct, "<="),
            (Word, "d"),
            (Punct, "||"),
            (Word, "e"),
            (Punct, "->"),
            (Word, "g"),
            (Punct, "%"),
            (Word, "h"),
        ],
    );
    both("-5", &[(Punct, "-"), (Number, "5")]);
}

#[test]
fn errors_stop_lexing() {
    both("'open", &[(Error, "'open")]);
    both("a `open", &[(Word, "a"), (Error, "`open")]);
    both("a é b", &[(Word, "a"), (Error, "é b")]);
    both("a ! b", &[(Word, "a"), (Error, "! b")]);
    assert_eq!(kinds("a $ b", V18_16), [(Word, "a"), (Error, "$ b")]);
}

#[test]
fn string_escapes() {
    let v = |s: &str| tokenize(s, Current)[0].string_value();
    assert_eq!(v(r"'a\'b'").as_deref(), Some("a'b"));
    assert_eq!(v("'a''b'").as_deref(), Some("a'b"));
    assert_eq!(v(r"'\n\t\\\x41\0\q'").as_deref(), Some("\n\t\\A\0q"));
    assert_eq!(v("'héllo'").as_deref(), Some("héllo"));
    assert_eq!(v(r"'\xff'"), None, "not UTF-8");
    assert_eq!(v(r"'\x4g'"), None);
    assert_eq!(v(r"'a\Nb'").as_deref(), Some("ab"));
    assert_eq!(v(r"'\a\b\e\f\v'").as_deref(), Some("\x07\x08\x1b\x0c\x0b"));
    assert_eq!(v(r"$t$a\n'$t$").as_deref(), Some(r"a\n'"));
    assert_eq!(v("\u{2018}a\\nb\u{2019}").as_deref(), Some("a\\nb"));
    assert_eq!(v("x'4142'").as_deref(), Some("AB"));
    assert_eq!(v("b'01000001'").as_deref(), Some("A"));
    assert_eq!(tokenize(r"'a\\' b", V18_16)[1].text, "b", "an escaped backslash does not escape the quote");
    assert_eq!(tokenize("`a``b`", V18_16)[0].ident().as_deref(), Some("a`b"));
    assert_eq!(tokenize(r#""shop_id""#, V18_16)[0].ident().as_deref(), Some("shop_id"));
    assert_eq!(tokenize("\u{201C}shop_id\u{201D}", Current)[0].ident().as_deref(), Some("shop_id"));
}

#[test]
fn spans_cover_the_source() {
    let sql = "SELECT  `x` ,'y' /*c*/ FROM\tdb.t";
    for g in Grammar::ALL {
        for t in tokenize(sql, g) {
            assert_eq!(&sql[t.start..t.end()], t.text);
        }
    }
}

/// Random bytes (not UTF-8): no panics, spans inside the input and in order, each token's text
/// a prefix of its bytes, and a string literal with any bytes inside is one token.
#[test]
fn bytes_that_are_not_utf8() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    for _ in 0..10_000 {
        let n = rng.gen_range(0..32);
        let b: Vec<u8> = (0..n)
            .map(|_| if rng.gen_bool(0.5) { b"'`\"( )-*/a1\\$#_"[rng.gen_range(0..15)] } else { rng.gen() })
            .collect();
        for g in Grammar::ALL {
            let mut at = 0;
            for t in tokenize(&b, g) {
                assert!(t.start >= at && t.end() <= b.len(), "{b:?}");
                assert!(b[t.start..t.end()].starts_with(t.text.as_bytes()), "{b:?}");
                at = t.end();
            }
        }
    }
    let q: &[u8] = b"SELECT '\xff\xfe' FROM t";
    let toks = tokenize(q, V18_16);
    assert_eq!((toks[1].kind, toks[1].start, toks[1].len, toks[1].text), (Str, 7, 4, "'"));
    assert_eq!(toks[2].text, "FROM");
}

/// No panics, spans on char boundaries, only the last token may be an error, over random input
/// built from SQL-ish pieces and random characters, in both grammars.
#[test]
fn no_panic_on_random_input() {
    let pieces = [
        "SELECT", " ", "FROM", "items", "'", "`", "\"", "\\", "--", "/*", "*/", "\n", "(", ")", "0x", "1", ".", "e",
        "-", "=", "é", "日本", "\u{0}", "AND", "shop_id", ",", "''", "$", "#", "\t", ";", "_", "0b", "$$", "# ", "‘",
        "’", "“", "”", "\u{a0}", "−", "{", "}", "::", "<=>", "x'", "//",
    ];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for _ in 0..10_000 {
        let n = rng.gen_range(0..24);
        let mut s = String::new();
        for _ in 0..n {
            if rng.gen_bool(0.2) {
                s.push(char::from_u32(rng.gen_range(0..0x3000)).unwrap_or('?'));
            } else {
                s.push_str(pieces[rng.gen_range(0..pieces.len())]);
            }
        }
        for g in Grammar::ALL {
            let toks = tokenize(&s, g);
            for (i, t) in toks.iter().enumerate() {
                assert!(s.is_char_boundary(t.start), "{s:?}");
                assert!(t.kind != Error || i + 1 == toks.len(), "{s:?}");
                let _ = (t.ident(), t.string_value());
            }
        }
    }
}

#[test]
fn integer_values_by_grammar() {
    for (text, old, new) in [
        ("42", Some(42), Some(42)),
        ("010", Some(8), Some(10)),
        ("0777", Some(511), Some(777)),
        ("08", None, Some(8)),
        ("0", Some(0), Some(0)),
        ("00", Some(0), Some(0)),
        ("0x2A", Some(42), Some(42)),
        ("0b101", None, Some(5)),
        ("1_000", None, Some(1000)),
        ("1.5", None, None),
        ("18446744073709551616", None, None),
    ] {
        assert_eq!(integer_value(text, V18_16), old, "18.16: {text}");
        assert_eq!(integer_value(text, Current), new, "current: {text}");
    }
}
