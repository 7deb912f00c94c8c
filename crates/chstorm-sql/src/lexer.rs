//! A small SQL lexer following ClickHouse 18.16's `Lexer.cpp`, just enough
//! for routing ([`crate::route`]: [`extract_key`](crate::route::extract_key),
//! [`rewrite_tables`](crate::route::rewrite_tables)) and the rules on
//! settings, table functions and nesting depth ([`crate::rules`]).
//!
//! The lexer reads bytes: a query that is not UTF-8 (bytes inside a string
//! literal, say) lexes as ClickHouse lexes it, and callers splice the
//! original bytes by the tokens' spans, so nothing outside a replaced name
//! changes. Tokens carry their byte span in the source.
//! Whitespace and comments (`-- ...` to the end of the line, `/* ... */`, not
//! nested, as in 18.16) are skipped. Lexing stops after the first
//! [`TokenKind::Error`] (an unterminated string, quoted identifier or comment,
//! a malformed number, a byte ClickHouse does not accept outside quotes):
//! callers then give up, which for routing means "fan out".

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A bare word: identifier or keyword, `[A-Za-z_][A-Za-z0-9_]*`.
    Word,
    /// `` `name` `` or `"name"`, with `\` escapes and doubled quotes.
    QuotedIdent,
    /// A numeric literal: `123`, `0x1F`, `1.5`, `.5`, `1e-3`.
    Number,
    /// A single-quoted string literal with `\` escapes and `''`.
    Str,
    /// Operators and punctuation: `( ) [ ] , ; . = == != <> < <= > >= + - * / % || :: : ? -> @ { }`.
    Punct,
    /// Something ClickHouse would reject; always the last token.
    Error,
}

/// One token: its kind, its text, and where it starts in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: TokenKind,
    /// The token's text; for a string literal, quoted name or error that is
    /// not UTF-8, its longest UTF-8 prefix (the span is `start..end()`).
    pub text: &'a str,
    pub start: usize,
    /// Its length in bytes.
    pub len: usize,
}

impl<'a> Token<'a> {
    /// Byte offset just past the token.
    pub fn end(&self) -> usize {
        self.start + self.len
    }

    /// A bare word equal to `kw`, ignoring ASCII case.
    pub fn is_kw(&self, kw: &str) -> bool {
        self.kind == TokenKind::Word && self.text.eq_ignore_ascii_case(kw)
    }

    /// Punctuation `p`.
    pub fn is_punct(&self, p: &str) -> bool {
        self.kind == TokenKind::Punct && self.text == p
    }

    /// The identifier's name: a bare word as written, a quoted identifier
    /// unescaped. `None` for other tokens or undecodable escapes.
    pub fn ident(&self) -> Option<String> {
        match self.kind {
            TokenKind::Word => Some(self.text.to_string()),
            TokenKind::QuotedIdent => unquote(self.text),
            _ => None,
        }
    }

    /// The value of a string literal, unescaped. `None` for other tokens or
    /// when the escapes produce bytes that are not UTF-8.
    pub fn string_value(&self) -> Option<String> {
        match self.kind {
            TokenKind::Str => unquote(self.text),
            _ => None,
        }
    }
}

/// Splits `sql` into tokens, skipping whitespace and comments. Stops after the
/// first [`TokenKind::Error`] token, which covers the rest of the input.
pub fn tokenize<S: AsRef<[u8]> + ?Sized>(sql: &S) -> Vec<Token<'_>> {
    Lexer::new(sql).collect()
}

/// The lexer as an iterator, for callers that may stop early (an `INSERT`
/// with its data after `VALUES` needs no more than its head).
pub struct Lexer<'a> {
    sql: &'a [u8],
    i: usize,
    prev: Option<Token<'a>>,
    done: bool,
}

impl<'a> Lexer<'a> {
    /// Lexes `sql`: text or bytes.
    pub fn new<S: AsRef<[u8]> + ?Sized>(sql: &'a S) -> Self {
        Lexer { sql: sql.as_ref(), i: 0, prev: None, done: false }
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        if self.done {
            return None;
        }
        let b = self.sql;
        let mut i = self.i;
        while i < b.len() {
            let c = b[i];
            let start = i;
            let kind = match c {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c' => {
                    i += 1;
                    continue;
                }
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    i += 1;
                    while i < b.len() && is_word_byte(b[i]) {
                        i += 1;
                    }
                    TokenKind::Word
                }
                _ if starts_number(b, i, self.prev.as_ref()) => match lex_number(b, i) {
                    Some(end) => {
                        i = end;
                        TokenKind::Number
                    }
                    None => {
                        i = b.len();
                        TokenKind::Error
                    }
                },
                b'\'' | b'`' | b'"' => match find_closing_quote(b, i) {
                    Some(end) => {
                        i = end;
                        if c == b'\'' {
                            TokenKind::Str
                        } else {
                            TokenKind::QuotedIdent
                        }
                    }
                    None => {
                        i = b.len();
                        TokenKind::Error
                    }
                },
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                    continue;
                }
                b'/' if b.get(i + 1) == Some(&b'*') => match find(b, i + 2, b"*/") {
                    Some(at) => {
                        i = at + 2;
                        continue;
                    }
                    None => {
                        i = b.len();
                        TokenKind::Error
                    }
                },
                _ => match punct_len(b, i) {
                    Some(n) => {
                        i += n;
                        TokenKind::Punct
                    }
                    None => {
                        i = b.len();
                        TokenKind::Error
                    }
                },
            };
            let tok = Token { kind, text: utf8_prefix(&b[start..i]), start, len: i - start };
            self.i = i;
            self.prev = Some(tok);
            if kind == TokenKind::Error {
                self.done = true;
            }
            return Some(tok);
        }
        self.i = i;
        self.done = true;
        None
    }
}

/// The longest UTF-8 prefix of `b` (all of it when it is UTF-8).
fn utf8_prefix(b: &[u8]) -> &str {
    match std::str::from_utf8(b) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&b[..e.valid_up_to()]).unwrap_or_default(),
    }
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Does a number start at `b[i]`: a digit, or `.5` where no operand comes before it (`t.5` is
/// a tuple element, see [`after_operand`])?
fn starts_number(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> bool {
    b[i].is_ascii_digit() || (b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit) && !after_operand(prev))
}

/// ClickHouse reads `.5` as a number unless it follows something that can be
/// the left side of a `.` (a word, a quoted name, a number, `)` or `]`), as
/// in `t.1` (tuple element).
fn after_operand(prev: Option<&Token<'_>>) -> bool {
    match prev {
        Some(t) => match t.kind {
            TokenKind::Word | TokenKind::QuotedIdent | TokenKind::Number | TokenKind::Str => true,
            TokenKind::Punct => t.text == ")" || t.text == "]",
            TokenKind::Error => false,
        },
        None => false,
    }
}

/// A number starting at `i` (a digit, or `.` and a digit). Returns its end, or
/// `None` when it runs into a word character (`123abc`), as ClickHouse's
/// `ErrorWrongNumber`.
fn lex_number(b: &[u8], mut i: usize) -> Option<usize> {
    let hex = b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
    // Hex numbers take hex digits and a `p` exponent; decimal ones digits and `e`.
    let (digit, exp): (fn(&u8) -> bool, &[u8]) =
        if hex { (u8::is_ascii_hexdigit, b"pP") } else { (u8::is_ascii_digit, b"eE") };
    if hex {
        i += 2;
    }
    i = skip_while(b, i, digit);
    if i < b.len() && b[i] == b'.' {
        i = skip_while(b, i + 1, digit);
    }
    if i < b.len() && exp.contains(&b[i]) {
        i = exponent(b, i);
    }
    if i < b.len() && is_word_byte(b[i]) {
        return None;
    }
    Some(i)
}

/// The first index at or after `i` whose byte fails `pred` (or `b.len()`).
fn skip_while(b: &[u8], i: usize, pred: fn(&u8) -> bool) -> usize {
    b[i.min(b.len())..].iter().position(|c| !pred(c)).map_or(b.len(), |n| i + n)
}

/// Skips `e`/`p`, an optional sign, and digits.
fn exponent(b: &[u8], mut i: usize) -> usize {
    i += 1;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    skip_while(b, i, u8::is_ascii_digit)
}

/// The end (past the closing quote) of a quoted token starting at `i`.
/// A backslash escapes the next byte; a doubled quote stands for itself.
fn find_closing_quote(b: &[u8], i: usize) -> Option<usize> {
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() {
        if b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == q {
            if b.get(j + 1) == Some(&q) {
                j += 2;
                continue;
            }
            return Some(j + 1);
        }
        j += 1;
    }
    None
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    if from > b.len() {
        return None;
    }
    b[from..].windows(pat.len()).position(|w| w == pat).map(|p| p + from)
}

fn punct_len(b: &[u8], i: usize) -> Option<usize> {
    let two = |s: &[u8]| b.get(i..i + 2) == Some(s);
    if two(b"==") || two(b"!=") || two(b"<>") || two(b"<=") || two(b">=") || two(b"||") || two(b"::") || two(b"->") {
        return Some(2);
    }
    match b[i] {
        b'(' | b')' | b'[' | b']' | b',' | b';' | b'.' | b'=' | b'<' | b'>' | b'+' | b'-' | b'*' | b'/' | b'%'
        | b':' | b'?' | b'@' | b'{' | b'}' => Some(1),
        _ => None,
    }
}

/// Decodes a quoted token (string literal or quoted identifier) as ClickHouse
/// does: `\a \b \e \f \n \r \t \v \0`, `\xHH`, `\N` is nothing, any other `\c` is
/// `c`, and the doubled quote is one quote. `None` for `\x` without two hex
/// digits (18.16 decodes those in odd ways) and for bytes that are not UTF-8.
pub fn unquote(text: &str) -> Option<String> {
    let b = text.as_bytes();
    if b.len() < 2 {
        return None;
    }
    let q = b[0];
    let inner = &b[1..b.len() - 1];
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c == b'\\' && i + 1 < inner.len() {
            let e = inner[i + 1];
            i += 2;
            if e == b'x' {
                // 18.16 reads the next two bytes as hex whatever they are
                // ('\x4g' is 0x3F); only well-formed ones are decoded here.
                let hex = inner.get(i..i + 2).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
                continue;
            }
            if e == b'N' {
                // `\N` (NULL in TSV) reads as nothing.
                continue;
            }
            out.push(match e {
                b'a' => 0x07,
                b'b' => 0x08,
                b'e' => 0x1b,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'v' => 0x0b,
                b'0' => 0,
                other => other,
            });
            continue;
        }
        if c == q && inner.get(i + 1) == Some(&q) {
            out.push(q);
            i += 2;
            continue;
        }
        out.push(c);
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn kinds(sql: &str) -> Vec<(TokenKind, &str)> {
        tokenize(sql).into_iter().map(|t| (t.kind, t.text)).collect()
    }

    use TokenKind::*;

    #[test]
    fn words_numbers_strings_punct() {
        assert_eq!(
            kinds("SELECT a1_, 12, 0x1F, 1.5e-3, .5 FROM t WHERE x >= 'it''s' AND y != `q``x` -- tail"),
            vec![
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
            ]
        );
    }

    #[test]
    fn comments_are_skipped_and_not_nested() {
        assert_eq!(kinds("a /* FROM items */ b -- FROM items\nc"), vec![(Word, "a"), (Word, "b"), (Word, "c")]);
        // 18.16 does not nest comments: the first */ ends it.
        assert_eq!(kinds("a /* x /* y */ b"), vec![(Word, "a"), (Word, "b")]);
        assert_eq!(kinds("a /* open")[1].0, Error);
        assert_eq!(kinds("a -- only comment"), vec![(Word, "a")]);
    }

    #[test]
    fn tuple_access_is_dot_number() {
        assert_eq!(kinds("t.1"), vec![(Word, "t"), (Punct, "."), (Number, "1")]);
        assert_eq!(kinds("(x).2"), vec![(Punct, "("), (Word, "x"), (Punct, ")"), (Punct, "."), (Number, "2")]);
        assert_eq!(kinds("db.t"), vec![(Word, "db"), (Punct, "."), (Word, "t")]);
    }

    #[test]
    fn operators() {
        assert_eq!(
            kinds("a==b<>c<=d||e::f->g%h"),
            vec![
                (Word, "a"),
                (Punct, "=="),
                (Word, "b"),
                (Punct, "<>"),
                (Word, "c"),
                (Punct, "<="),
                (Word, "d"),
                (Punct, "||"),
                (Word, "e"),
                (Punct, "::"),
                (Word, "f"),
                (Punct, "->"),
                (Word, "g"),
                (Punct, "%"),
                (Word, "h"),
            ]
        );
        assert_eq!(kinds("-5"), vec![(Punct, "-"), (Number, "5")]);
    }

    #[test]
    fn errors_stop_lexing() {
        assert_eq!(kinds("'open"), vec![(Error, "'open")]);
        assert_eq!(kinds("a `open"), vec![(Word, "a"), (Error, "`open")]);
        assert_eq!(kinds("123abc x"), vec![(Error, "123abc x")]);
        assert_eq!(kinds("a é b"), vec![(Word, "a"), (Error, "é b")]);
        assert_eq!(kinds("a $ b"), vec![(Word, "a"), (Error, "$ b")]);
    }

    #[test]
    fn string_escapes() {
        let v = |s: &str| tokenize(s)[0].string_value();
        assert_eq!(v(r"'a\'b'").as_deref(), Some("a'b"));
        assert_eq!(v("'a''b'").as_deref(), Some("a'b"));
        assert_eq!(v(r"'\n\t\\\x41\0\q'").as_deref(), Some("\n\t\\A\0q"));
        assert_eq!(v("'héllo'").as_deref(), Some("héllo"));
        assert_eq!(v(r"'\xff'"), None, "not UTF-8");
        assert_eq!(v(r"'\x4g'"), None);
        assert_eq!(v(r"'a\Nb'").as_deref(), Some("ab"));
        assert_eq!(v(r"'\a\b\e\f\v'").as_deref(), Some("\x07\x08\x1b\x0c\x0b"));
        assert_eq!(tokenize(r"'a\\' b")[1].text, "b", "an escaped backslash does not escape the quote");
        assert_eq!(tokenize("`a``b`")[0].ident().as_deref(), Some("a`b"));
        assert_eq!(tokenize(r#""shop_id""#)[0].ident().as_deref(), Some("shop_id"));
    }

    #[test]
    fn spans_cover_the_source() {
        let sql = "SELECT  `x` ,'y' /*c*/ FROM\tdb.t";
        for t in tokenize(sql) {
            assert_eq!(&sql[t.start..t.end()], t.text);
        }
    }

    /// Random bytes (not UTF-8): no panics, spans inside the input and in
    /// order, each token's text a prefix of its bytes, and a string literal
    /// with any bytes inside is one token.
    #[test]
    fn bytes_that_are_not_utf8() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        for _ in 0..10_000 {
            let n = rng.gen_range(0..32);
            let b: Vec<u8> = (0..n)
                .map(|_| if rng.gen_bool(0.5) { b"'`\"( )-*/a1\\"[rng.gen_range(0..12)] } else { rng.gen() })
                .collect();
            let mut at = 0;
            for t in tokenize(&b) {
                assert!(t.start >= at && t.end() <= b.len(), "{b:?}");
                assert!(b[t.start..t.end()].starts_with(t.text.as_bytes()), "{b:?}");
                at = t.end();
            }
        }
        let q: &[u8] = b"SELECT '\xff\xfe' FROM t";
        let toks = tokenize(q);
        assert_eq!((toks[1].kind, toks[1].start, toks[1].len, toks[1].text), (Str, 7, 4, "'"));
        assert_eq!(toks[2].text, "FROM");
    }

    /// No panics, spans on char boundaries, only the last token may be an
    /// error, over random input built from SQL-ish pieces and random bytes.
    #[test]
    fn no_panic_on_random_input() {
        let pieces = [
            "SELECT", " ", "FROM", "items", "'", "`", "\"", "\\", "--", "/*", "*/", "\n", "(", ")", "0x", "1", ".",
            "e", "-", "=", "é", "日本", "\u{0}", "AND", "shop_id", ",", "''", "$", "#", "\t", ";",
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
            let toks = tokenize(&s);
            for (i, t) in toks.iter().enumerate() {
                assert_eq!(&s[t.start..t.end()], t.text);
                assert!(t.kind != Error || i + 1 == toks.len(), "{s:?}");
                let _ = (t.ident(), t.string_value());
            }
        }
    }
}
