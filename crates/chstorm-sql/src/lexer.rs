//! The lexer of ClickHouse's SQL, in the two grammars chstorm knows: 18.16's and the current
//! one (24.x to 26.x). Every rule of the gateway reads a statement through this module, so
//! comments, string literals, quoted names, case and white space neither hide nor fake anything,
//! and [`crate::reading`] compares the grammars' readings of one text.
//!
//! Followed, byte for byte where it matters:
//!
//! * [`Grammar::V18_16`]: `dbms/src/Parsers/Lexer.cpp` of 18.16, checked against a real 18.16.1
//!   server (`tests/grammar_vs_server.rs`). Comments: `--` and `//` to the end of the line,
//!   `/* */` not nested (the first `*/` ends it). Numbers: digits, `0x`/`0b` prefixes (`0b` is
//!   followed by decimal digits and the parser then fails), a `.` part and an `e`/`p` exponent;
//!   a word character right after a number is an error (`1abc`, `1_000`). Punctuation:
//!   `( ) [ ] , ; . + - -> * / % = == != <> < <= > >= ? : ||`. Anything else outside quotes is
//!   an error: `#`, `$`, `{`, `}`, `@`, `^`, a lone `|` or `!`, `\`, every byte >= 0x80.
//! * [`Grammar::Current`]: `src/Parsers/Lexer.cpp` of current releases (read at ClickHouse
//!   commit 3c1c4b89), checked against ClickHouse 26.9's own parser (chdb-core 26.9;
//!   `tests/grammar_vs_chdb.rs`). What it adds to 18.16: `#` followed by a space or `!` starts
//!   a line comment (`#x` is an error); `/* */` nest; heredocs `$tag$ ... $tag$` are string
//!   literals; `$` is a word character (`a$b`); a word may start with digits (`1abc`, `1e`);
//!   `_` separates digits (`1_000`, never first or last, never doubled); `0b` takes binary
//!   digits; `x'41'` and `b'0101'` are string literals; `‘...’` is a string literal and
//!   `“...”` a quoted name (no escapes inside); U+2212 `−` is a minus; Unicode white space
//!   (U+00A0, U+2000 to U+200D, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF, U+0085,
//!   U+180E) separates tokens; the punctuation `{ } <=> ^ | :: @ @@ \G` and a lone `$`.
//!
//! The lexer reads bytes: a query that is not UTF-8 (bytes inside a string literal, say) lexes
//! as ClickHouse lexes it, and callers splice the original bytes by the tokens' spans, so
//! nothing outside a replaced name changes. Whitespace and comments are skipped. Lexing stops
//! after the first [`TokenKind::Error`] (an unterminated string, quoted identifier or comment,
//! a malformed number, a byte the grammar does not accept outside quotes): callers then give
//! up, which for routing means "fan out" and for a user's rules "refuse".
//!
//! Written by hand: no crate lexes ClickHouse's dialect, let alone two of its releases.

/// Which release's lexical grammar a text is read with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grammar {
    /// ClickHouse 18.16 (and the releases up to 19.x, whose lexer is the same in what the rules
    /// read: see `crate::reading`).
    V18_16,
    /// ClickHouse 24.1 to 26.x, as 26.9 reads it.
    Current,
}

impl Grammar {
    /// Both grammars, oldest first.
    pub const ALL: [Grammar; 2] = [Grammar::V18_16, Grammar::Current];

    /// How the docs and the refusals name it.
    pub fn name(self) -> &'static str {
        match self {
            Grammar::V18_16 => "ClickHouse 18.16",
            Grammar::Current => "current ClickHouse (24.x to 26.x)",
        }
    }
}

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A bare word: identifier or keyword, `[A-Za-z_][A-Za-z0-9_]*` (current: `$` too, and a
    /// word may start with digits, `1abc`).
    Word,
    /// `` `name` `` or `"name"`, with `\` escapes and doubled quotes (current: `“name”` too).
    QuotedIdent,
    /// A numeric literal: `123`, `0x1F`, `1.5`, `.5`, `1e-3` (current: `1_000`, `0b101`).
    Number,
    /// A string literal: `'...'` with `\` escapes and `''` (current: `$tag$...$tag$`,
    /// `‘...’`, `x'41'`, `b'01'`).
    Str,
    /// Operators and punctuation (the module doc lists each grammar's).
    Punct,
    /// Something the grammar rejects; always the last token.
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

    /// Punctuation `p` (the current grammar's `−`, U+2212, is `-`).
    pub fn is_punct(&self, p: &str) -> bool {
        self.kind == TokenKind::Punct && (self.text == p || (p == "-" && self.text == "\u{2212}"))
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

/// Splits `sql` into tokens under `grammar`, skipping whitespace and comments. Stops after the
/// first [`TokenKind::Error`] token, which covers the rest of the input.
pub fn tokenize<S: AsRef<[u8]> + ?Sized>(sql: &S, grammar: Grammar) -> Vec<Token<'_>> {
    Lexer::new(sql, grammar).collect()
}

/// The lexer as an iterator, for callers that may stop early (an `INSERT`
/// with its data after `FORMAT` needs no more than its head).
pub struct Lexer<'a> {
    sql: &'a [u8],
    grammar: Grammar,
    i: usize,
    prev: Option<Token<'a>>,
    done: bool,
}

impl<'a> Lexer<'a> {
    /// Lexes `sql`, text or bytes, under `grammar`.
    pub fn new<S: AsRef<[u8]> + ?Sized>(sql: &'a S, grammar: Grammar) -> Self {
        Lexer { sql: sql.as_ref(), grammar, i: 0, prev: None, done: false }
    }
}

/// What one step of the lexer found.
enum Step {
    /// White space or a comment, up to this offset.
    Blank(usize),
    /// A token of this kind, up to this offset.
    Token(TokenKind, usize),
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        if self.done {
            return None;
        }
        let b = self.sql;
        while self.i < b.len() {
            let start = self.i;
            let step = match self.grammar {
                Grammar::V18_16 => step_18_16(b, start, self.prev.as_ref()),
                Grammar::Current => step_current(b, start, self.prev.as_ref()),
            };
            match step {
                Step::Blank(end) => self.i = end,
                Step::Token(kind, end) => {
                    let tok = Token { kind, text: utf8_prefix(&b[start..end]), start, len: end - start };
                    self.i = end;
                    self.prev = Some(tok);
                    if kind == TokenKind::Error {
                        self.done = true;
                    }
                    return Some(tok);
                }
            }
        }
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

fn is_blank(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// The first index at or after `i` whose byte fails `pred` (or `b.len()`).
fn skip_while(b: &[u8], i: usize, pred: impl Fn(u8) -> bool) -> usize {
    b[i.min(b.len())..].iter().position(|&c| !pred(c)).map_or(b.len(), |n| i + n)
}

/// The end of a line comment whose text starts at `i`: the next `\n` (not included).
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n)
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    if from > b.len() || pat.is_empty() {
        return None;
    }
    b[from..].windows(pat.len()).position(|w| w == pat).map(|p| p + from)
}

/// The end (past the closing quote) of a quoted token starting at `i`, or `None` when it is
/// not closed. A backslash escapes the next byte; a doubled quote stands for itself.
fn closing_quote(b: &[u8], i: usize) -> Option<usize> {
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

/// A quoted string or name at `i`: its kind and end, or an error to the end of the input.
fn quoted(b: &[u8], i: usize) -> Step {
    match closing_quote(b, i) {
        Some(end) => Step::Token(if b[i] == b'\'' { TokenKind::Str } else { TokenKind::QuotedIdent }, end),
        None => Step::Token(TokenKind::Error, b.len()),
    }
}

/// Does the `.` at `i` stand for a dot (a qualifier or tuple access) rather than start a
/// number? As both lexers decide: not at the very start, and either no digit follows or the
/// previous token can be the left side of a `.` (`t.1`, `(x).2`, `1.2.3` as `1.2 . 3`).
fn is_dot(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> bool {
    let digit_next = b.get(i + 1).is_some_and(u8::is_ascii_digit);
    let after_operand = prev.is_some_and(|t| match t.kind {
        TokenKind::Word | TokenKind::QuotedIdent | TokenKind::Number => true,
        TokenKind::Punct => t.text == ")" || t.text == "]",
        _ => false,
    });
    i > 0 && (!digit_next || after_operand)
}

fn after_dot(prev: Option<&Token<'_>>) -> bool {
    prev.is_some_and(|t| t.kind == TokenKind::Punct && t.text == ".")
}

/// One step of 18.16's lexer at `i`.
fn step_18_16(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> Step {
    use TokenKind::*;
    let c = b[i];
    let at = |k: usize| b.get(i + k).copied();
    match c {
        _ if is_blank(c) => Step::Blank(skip_while(b, i, is_blank)),
        b'0'..=b'9' => number_18_16(b, i, prev),
        b'\'' | b'"' | b'`' => quoted(b, i),
        b'(' | b')' | b'[' | b']' | b',' | b';' | b'+' | b'*' | b'%' | b'?' | b':' => Step::Token(Punct, i + 1),
        b'.' if is_dot(b, i, prev) => Step::Token(Punct, i + 1),
        b'.' => {
            let mut j = skip_while(b, i + 1, |c| c.is_ascii_digit());
            if j + 1 < b.len() && matches!(b[j], b'e' | b'E') {
                j += 1;
                if j + 1 < b.len() && matches!(b[j], b'+' | b'-') {
                    j += 1;
                }
                j = skip_while(b, j, |c| c.is_ascii_digit());
            }
            Step::Token(Number, j)
        }
        b'-' if at(1) == Some(b'>') => Step::Token(Punct, i + 2),
        b'-' if at(1) == Some(b'-') => Step::Blank(line_end(b, i + 2)),
        b'-' => Step::Token(Punct, i + 1),
        b'/' if at(1) == Some(b'/') => Step::Blank(line_end(b, i + 2)),
        b'/' if at(1) == Some(b'*') => match find(b, i + 2, b"*/") {
            Some(at) => Step::Blank(at + 2),
            None => Step::Token(Error, b.len()),
        },
        b'/' => Step::Token(Punct, i + 1),
        b'=' => Step::Token(Punct, if at(1) == Some(b'=') { i + 2 } else { i + 1 }),
        b'!' if at(1) == Some(b'=') => Step::Token(Punct, i + 2),
        b'<' if matches!(at(1), Some(b'=' | b'>')) => Step::Token(Punct, i + 2),
        b'>' if at(1) == Some(b'=') => Step::Token(Punct, i + 2),
        b'<' | b'>' => Step::Token(Punct, i + 1),
        b'|' if at(1) == Some(b'|') => Step::Token(Punct, i + 2),
        _ if is_word_byte(c) => Step::Token(Word, skip_while(b, i, is_word_byte)),
        _ => Step::Token(Error, b.len()),
    }
}

/// A number of 18.16's lexer at `i` (a digit).
fn number_18_16(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> Step {
    let mut j = i;
    if after_dot(prev) {
        j = skip_while(b, j + 1, |c| c.is_ascii_digit());
    } else {
        let mut hex = false;
        if j + 2 < b.len() && b[j] == b'0' && matches!(b[j + 1], b'x' | b'X' | b'b' | b'B') {
            hex = matches!(b[j + 1], b'x' | b'X');
            j += 2;
        } else {
            j += 1;
        }
        let digit = |c: u8| if hex { c.is_ascii_hexdigit() } else { c.is_ascii_digit() };
        j = skip_while(b, j, digit);
        if j < b.len() && b[j] == b'.' {
            j = skip_while(b, j + 1, digit);
        }
        let exp: &[u8] = if hex { b"pP" } else { b"eE" };
        if j + 1 < b.len() && exp.contains(&b[j]) {
            j += 1;
            if j + 1 < b.len() && matches!(b[j], b'+' | b'-') {
                j += 1;
            }
            j = skip_while(b, j, |c| c.is_ascii_digit());
        }
    }
    if j < b.len() && is_word_byte(b[j]) {
        return Step::Token(TokenKind::Error, b.len());
    }
    Step::Token(TokenKind::Number, j)
}

/// `_` between two digits of a number (never at the start of a block, never last, never
/// doubled): as current releases' `isNumberSeparator`.
fn is_separator(b: &[u8], j: usize, start_of_block: bool, hex: bool) -> bool {
    if b[j] != b'_' || start_of_block {
        return false;
    }
    match b.get(j + 1) {
        Some(&n) => {
            if hex {
                n.is_ascii_hexdigit()
            } else {
                n.is_ascii_digit()
            }
        }
        None => false,
    }
}

/// Digits (by `digit`) and separators from `j`; returns the end.
fn digits_current(b: &[u8], mut j: usize, mut start_of_block: bool, hex: bool) -> usize {
    let digit = |c: u8| if hex { c.is_ascii_hexdigit() } else { c.is_ascii_digit() };
    while j < b.len() && (digit(b[j]) || is_separator(b, j, start_of_block, hex)) {
        j += 1;
        start_of_block = false;
    }
    j
}

/// A number (or a word that starts with digits) of the current lexer at `i` (a digit).
fn number_current(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> Step {
    let mut j = i;
    if after_dot(prev) {
        j = digits_current(b, j + 1, false, false);
    } else {
        let mut hex = false;
        let mut start_of_block = false;
        if j + 2 < b.len() && b[j] == b'0' && matches!(b[j + 1], b'x' | b'X' | b'b' | b'B') {
            let valid = if matches!(b[j + 1], b'x' | b'X') {
                hex = b[j + 2].is_ascii_hexdigit();
                hex
            } else {
                matches!(b[j + 2], b'0' | b'1')
            };
            if valid {
                j += 2;
                start_of_block = true;
            } else {
                j += 1;
            }
        } else {
            j += 1;
        }
        j = digits_current(b, j, start_of_block, hex);
        if j < b.len() && b[j] == b'.' {
            j = digits_current(b, j + 1, true, hex);
        }
        let exp: &[u8] = if hex { b"pP" } else { b"eE" };
        if j + 1 < b.len() && exp.contains(&b[j]) {
            j += 1;
            if j + 1 < b.len() && matches!(b[j], b'+' | b'-') {
                j += 1;
            }
            j = digits_current(b, j, true, false);
        }
    }
    if j < b.len() && is_word_byte(b[j]) {
        let end = skip_while(b, j, is_word_byte);
        if b[i..end].iter().all(|&c| is_word_byte(c) || c == b'$') {
            return Step::Token(TokenKind::Word, end);
        }
        return Step::Token(TokenKind::Error, b.len());
    }
    Step::Token(TokenKind::Number, j)
}

/// The length of the Unicode white space at `i` that the current lexer skips (0 for none):
/// as current releases' `skipWhitespacesUTF8`.
fn unicode_blank_len(b: &[u8], i: usize) -> usize {
    let (c0, c1, c2) = (b[i], b.get(i + 1).copied(), b.get(i + 2).copied());
    if c0 == 0xC2 && i + 1 < b.len() && matches!(c1, Some(0x85 | 0xA0)) {
        return 2;
    }
    if i + 2 >= b.len() {
        return 0;
    }
    let (c1, c2) = (c1.unwrap_or(0), c2.unwrap_or(0));
    let three = (c0 == 0xE1 && c1 == 0xA0 && c2 == 0x8E)
        || (c0 == 0xE2 && c1 == 0x80 && (matches!(c2, 0x80..=0x8D | 0xA8 | 0xA9 | 0xAF)))
        || (c0 == 0xE2 && c1 == 0x81 && matches!(c2, 0x9F | 0xA0))
        || (c0 == 0xE3 && c1 == 0x80 && c2 == 0x80)
        || (c0 == 0xEF && c1 == 0xBB && c2 == 0xBF);
    if three {
        3
    } else {
        0
    }
}

/// Blanks from `i`: ASCII and Unicode white space; returns the end.
fn skip_blanks_current(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        if is_blank(b[i]) {
            i += 1;
        } else {
            match unicode_blank_len(b, i) {
                0 => break,
                n => i += n,
            }
        }
    }
    i
}

/// A `/* */` comment at `i` that nests, as current releases read it.
fn nested_comment(b: &[u8], i: usize) -> Step {
    let mut level = 1usize;
    let mut j = i + 2;
    while j + 2 <= b.len() {
        if b[j] == b'/' && b[j + 1] == b'*' {
            j += 2;
            level += 1;
        } else if b[j] == b'*' && b[j + 1] == b'/' {
            j += 2;
            level -= 1;
            if level == 0 {
                return Step::Blank(j);
            }
        } else {
            j += 1;
        }
    }
    Step::Token(TokenKind::Error, b.len())
}

/// A string between Unicode quotes at `i` (`‘` or `“`, three bytes), closed by the matching
/// right quote, with no escapes.
fn unicode_quoted(b: &[u8], i: usize) -> Step {
    let close = [0xE2, 0x80, b[i + 2] + 1];
    let kind = if b[i + 2] == 0x98 { TokenKind::Str } else { TokenKind::QuotedIdent };
    match find(b, i + 3, &close) {
        Some(at) => Step::Token(kind, at + 3),
        None => Step::Token(TokenKind::Error, b.len()),
    }
}

/// What starts with `$` in the current lexer: a heredoc, a lone `$`, or a word.
fn dollar(b: &[u8], i: usize) -> Step {
    if let Some(name_end) = b[i + 1..].iter().position(|&c| c == b'$').map(|p| i + 1 + p) {
        let tag = &b[i..=name_end];
        if let Some(at) = find(b, name_end + 1, tag) {
            return Step::Token(TokenKind::Str, at + tag.len());
        }
    }
    if b.get(i + 1).is_none_or(|&c| !is_word_byte(c)) {
        return Step::Token(TokenKind::Punct, i + 1);
    }
    Step::Token(TokenKind::Word, skip_while(b, i, |c| is_word_byte(c) || c == b'$'))
}

/// `x'..'` or `b'..'` at `i`: a string literal of hex or binary digits.
fn hex_or_bin_string(b: &[u8], i: usize) -> Step {
    let hex = matches!(b[i], b'x' | b'X');
    let j = skip_while(b, i + 2, |c| if hex { c.is_ascii_hexdigit() } else { matches!(c, b'0' | b'1') });
    if j < b.len() && b[j] == b'\'' {
        Step::Token(TokenKind::Str, j + 1)
    } else {
        Step::Token(TokenKind::Error, b.len())
    }
}

/// One step of the current lexer at `i`.
fn step_current(b: &[u8], i: usize, prev: Option<&Token<'_>>) -> Step {
    use TokenKind::*;
    let c = b[i];
    let at = |k: usize| b.get(i + k).copied();
    match c {
        _ if is_blank(c) => Step::Blank(skip_while(b, i, is_blank)),
        b'0'..=b'9' => number_current(b, i, prev),
        b'\'' | b'"' | b'`' => quoted(b, i),
        b'(' | b')' | b'[' | b']' | b'{' | b'}' | b',' | b';' | b'+' | b'*' | b'%' | b'?' | b'^' => {
            Step::Token(Punct, i + 1)
        }
        b'.' if is_dot(b, i, prev) => Step::Token(Punct, i + 1),
        b'.' => {
            let mut j = digits_current(b, i + 1, true, false);
            if j + 1 < b.len() && matches!(b[j], b'e' | b'E') {
                j += 1;
                if j + 1 < b.len() && matches!(b[j], b'+' | b'-') {
                    j += 1;
                }
                j = digits_current(b, j, true, false);
            }
            Step::Token(Number, j)
        }
        b'-' if at(1) == Some(b'>') => Step::Token(Punct, i + 2),
        b'-' if at(1) == Some(b'-') => Step::Blank(line_end(b, i + 2)),
        b'-' => Step::Token(Punct, i + 1),
        b'/' if at(1) == Some(b'/') => Step::Blank(line_end(b, i + 2)),
        b'/' if at(1) == Some(b'*') => nested_comment(b, i),
        b'/' => Step::Token(Punct, i + 1),
        b'#' if matches!(at(1), Some(b' ' | b'!')) => Step::Blank(line_end(b, i + 1)),
        b'=' => Step::Token(Punct, if at(1) == Some(b'=') { i + 2 } else { i + 1 }),
        b'!' if at(1) == Some(b'=') => Step::Token(Punct, i + 2),
        b'<' if at(1) == Some(b'=') && at(2) == Some(b'>') && i + 2 < b.len() => Step::Token(Punct, i + 3),
        b'<' if matches!(at(1), Some(b'=' | b'>')) => Step::Token(Punct, i + 2),
        b'>' if at(1) == Some(b'=') => Step::Token(Punct, i + 2),
        b'<' | b'>' => Step::Token(Punct, i + 1),
        b':' | b'|' | b'@' if at(1) == Some(c) => Step::Token(Punct, i + 2),
        b':' | b'|' | b'@' => Step::Token(Punct, i + 1),
        b'\\' if at(1) == Some(b'G') => Step::Token(Punct, i + 2),
        0xE2 if at(1) == Some(0x88) && at(2) == Some(0x92) => Step::Token(Punct, i + 3),
        0xE2 if i + 5 < b.len() && at(1) == Some(0x80) && matches!(at(2), Some(0x98 | 0x9C)) => unicode_quoted(b, i),
        b'$' => dollar(b, i),
        b'x' | b'X' | b'b' | b'B' if i + 2 < b.len() && at(1) == Some(b'\'') => hex_or_bin_string(b, i),
        _ if is_word_byte(c) => Step::Token(Word, skip_while(b, i, |c| is_word_byte(c) || c == b'$')),
        _ => match skip_blanks_current(b, i) {
            end if end > i => Step::Blank(end),
            _ => Step::Token(Error, b.len()),
        },
    }
}

/// The value of an unsigned integer literal as `grammar`'s parser reads it, or `None` when it
/// is no integer the grammar reads (a float, out of range, malformed). 18.16 reads `0x` hex and,
/// as C's `strtoull` with base 0, a leading zero as octal (`010` is 8; `08`, not octal, is
/// parsed as the float 8 and is `None` here); current releases read `0x` hex, `0b` binary,
/// `_` between digits, and a leading zero as decimal (`010` is 10). Verified against 18.16.1 and
/// 26.9 (`tests/grammar_vs_server.rs`, `tests/grammar_vs_chdb.rs`).
pub fn integer_value(text: &str, grammar: Grammar) -> Option<u64> {
    let t = match grammar {
        Grammar::V18_16 => std::borrow::Cow::Borrowed(text),
        Grammar::Current => std::borrow::Cow::Owned(text.replace('_', "")),
    };
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        if grammar == Grammar::V18_16 {
            return None;
        }
        (b, 2)
    } else if grammar == Grammar::V18_16 && t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (&t[..], 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Decodes a quoted token (string literal or quoted identifier) as ClickHouse
/// does: `\a \b \e \f \n \r \t \v \0`, `\xHH`, `\N` is nothing, any other `\c` is
/// `c`, and the doubled quote is one quote. A heredoc, a Unicode-quoted token and a
/// `x'..'`/`b'..'` literal decode as current releases read them (the text between the
/// delimiters as it is; the bytes the digits spell). `None` for `\x` without two hex
/// digits (18.16 decodes those in odd ways) and for bytes that are not UTF-8.
pub fn unquote(text: &str) -> Option<String> {
    let b = text.as_bytes();
    if b.len() < 2 {
        return None;
    }
    if b[0] == b'$' {
        let tag_len = b[1..].iter().position(|&c| c == b'$')? + 2;
        return text.get(tag_len..text.len().checked_sub(tag_len)?).map(str::to_string);
    }
    if let Some(inner) = text.strip_prefix('\u{2018}').and_then(|t| t.strip_suffix('\u{2019}')) {
        return Some(inner.to_string());
    }
    if let Some(inner) = text.strip_prefix('\u{201C}').and_then(|t| t.strip_suffix('\u{201D}')) {
        return Some(inner.to_string());
    }
    if matches!(b[0], b'x' | b'X' | b'b' | b'B') && b[1] == b'\'' {
        return digits_string(&text[2..text.len() - 1], matches!(b[0], b'x' | b'X'));
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

/// The bytes that hex (two digits a byte) or binary (eight a byte) digits spell, as text;
/// `None` when they do not make whole bytes or UTF-8.
fn digits_string(digits: &str, hex: bool) -> Option<String> {
    let per = if hex { 2 } else { 8 };
    if !digits.len().is_multiple_of(per) {
        return None;
    }
    let radix = if hex { 16 } else { 2 };
    let bytes: Option<Vec<u8>> =
        (0..digits.len()).step_by(per).map(|k| u8::from_str_radix(&digits[k..k + per], radix).ok()).collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests;
