//! The docs keep their word: every `chstorm` command line in README.md and docs/*.md parses, and
//! every relative link in them resolves.
//!
//! # Which lines are command lines
//!
//! A fenced code block whose language is `sh`, `bash`, `shell` or `zsh` is a script: each of its
//! lines is shell. A block marked `console` or `shell-session`, or with no language, is a
//! transcript: only the lines after a `$ ` prompt are shell, the rest is output. A `\` at the end
//! of a line continues it on the next. Blocks in any other language (`yaml`, `sql`, `text`, ...)
//! are not read. A synopsis (`[--optional]`, `a|b`, `...`) is not shell: it belongs in a block
//! without a language and without a prompt.
//!
//! The shell is read as a shell would split it, without running anything: `#` starts a comment;
//! quotes and backslashes are removed; `|`, `||`, `&&`, `;`, `&` and parentheses separate
//! commands; redirections (`> file`, `2>&1`, `< file`) are dropped; variables and `$(...)` are
//! passed as written, not expanded. A simple command is a chstorm command line when its program
//! is `chstorm` or a path ending in `/chstorm`, after any `NAME=value` assignments and the
//! wrappers `sudo`, `env`, `time`, `nohup`, `exec` and `systemd-run` with their options.
//!
//! # How a command line is checked
//!
//! The chstorm binary built with the tests runs it with the same arguments and
//! `CHSTORM_PARSE_ONLY=1` (`chstorm::cli::PARSE_ONLY_ENV`): it parses the command line as always
//! and exits 0 without reading a file, starting a server or connecting anywhere, so the commands
//! that need a server, root, or files of the reader's are parsed only. Each must exit 0 within
//! 10 s, in an empty folder.
//!
//! # Links
//!
//! Every `[text](target)`, `![alt](target)` and `[label]: target` outside code whose target has
//! no scheme (`https:`, `mailto:`) is relative to its Markdown file: the file or folder must exist
//! inside the repository, and a `#anchor` into a Markdown file (the same one when the path is
//! empty) must name one of its headings the way GitHub makes anchors: the heading's text
//! (without link targets and HTML tags) lower-cased, every character that is not a letter, a
//! digit, `_`, `-` or a space removed, each space made a `-`, and `-1`, `-2`, ... appended to the
//! second, third, ... heading of the same anchor. An HTML `id="..."` or `name="..."` counts as
//! an anchor too.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARSE_TIMEOUT: Duration = Duration::from_secs(10);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository's root")
}

/// README.md and docs/*.md, in name order.
fn doc_files() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.insert(0, root.join("README.md"));
    files
}

fn display(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

/// A fenced code block: its language (the info string's first word) and its lines, each with its
/// 1-based line number in the file.
struct Block {
    lang: String,
    lines: Vec<(usize, String)>,
}

/// A Markdown text's fenced code blocks, and the text with every line of them (fences included)
/// blanked, so that offsets and line numbers in it are the file's.
fn split_markdown(text: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::with_capacity(text.len());
    // The open block: its fence character, fence length and indentation.
    let mut open: Option<(char, usize, usize, Block)> = None;
    for (i, line) in text.split('\n').enumerate() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        let fence = |c: char| t.chars().take_while(|&x| x == c).count();
        let mut blank = true;
        match &mut open {
            Some((c, n, _, _)) if fence(*c) >= *n && t.chars().all(|x| x == *c) => {
                if let Some((_, _, _, b)) = open.take() {
                    blocks.push(b);
                }
            }
            Some((_, _, ind, b)) => {
                let strip = (*ind).min(indent);
                b.lines.push((i + 1, line[strip..].to_string()));
            }
            None => {
                let (ticks, tildes) = (fence('`'), fence('~'));
                if ticks >= 3 || tildes >= 3 {
                    let (c, n) = if ticks >= 3 { ('`', ticks) } else { ('~', tildes) };
                    let lang = t[n..].split_whitespace().next().unwrap_or("").to_lowercase();
                    open = Some((c, n, indent, Block { lang, lines: Vec::new() }));
                } else {
                    blank = false;
                }
            }
        }
        if blank {
            prose.push_str(&" ".repeat(line.len()));
        } else {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    prose.pop();
    (blocks, prose)
}

/// The logical shell lines of a block (continuations joined), each with the line it starts on.
fn shell_lines(block: &Block) -> Vec<(usize, String)> {
    let script = matches!(block.lang.as_str(), "sh" | "bash" | "shell" | "zsh");
    let transcript = matches!(block.lang.as_str(), "console" | "shell-session" | "");
    if !script && !transcript {
        return Vec::new();
    }
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (n, line) in &block.lines {
        if continued {
            let last = out.last_mut().expect("a line to continue");
            last.1.push(' ');
            last.1.push_str(line.trim_start());
        } else if script {
            out.push((*n, line.clone()));
        } else if let Some(cmd) = line.trim_start().strip_prefix("$ ") {
            out.push((*n, cmd.to_string()));
        } else {
            continue;
        }
        let last = &mut out.last_mut().expect("the line just pushed").1;
        continued = last.trim_end().ends_with('\\') && !last.trim_start().starts_with('#');
        if continued {
            let cut = last.trim_end().len() - 1;
            last.truncate(cut);
        }
    }
    out
}

/// The simple commands of one shell line, each as its words with quotes removed (see the module's
/// doc for what is and is not read).
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut cmds: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    // The next word is a redirection's target: dropped.
    let mut redirect = false;
    let mut i = 0;
    let finish_word = |word: &mut String, in_word: &mut bool, redirect: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            if *redirect {
                *redirect = false;
            } else {
                words.push(std::mem::take(word));
            }
        }
        word.clear();
        *in_word = false;
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            ' ' | '\t' => finish_word(&mut word, &mut in_word, &mut redirect, &mut words),
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && matches!(chars.get(i + 1), Some('$' | '`' | '"' | '\\')) {
                        i += 1;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = next {
                    word.push(n);
                    i += 1;
                }
            }
            '$' if next == Some('(') => {
                in_word = true;
                let mut depth = 0;
                while i < chars.len() {
                    word.push(chars[i]);
                    match chars[i] {
                        '(' => depth += 1,
                        ')' if depth == 1 => break,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    i += 1;
                }
            }
            '`' => {
                in_word = true;
                word.push(c);
                i += 1;
                while i < chars.len() && chars[i] != '`' {
                    word.push(chars[i]);
                    i += 1;
                }
                word.push('`');
            }
            '<' | '>' => {
                // A word of digits right before is the redirected descriptor (2>): not a word.
                if in_word && !word.is_empty() && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                finish_word(&mut word, &mut in_word, &mut redirect, &mut words);
                while matches!(chars.get(i + 1), Some('<' | '>')) {
                    i += 1;
                }
                if chars.get(i + 1) == Some(&'&') {
                    // >&2, 2>&1: a descriptor, no target word.
                    i += 1;
                    while chars.get(i + 1).is_some_and(|d| d.is_ascii_digit() || *d == '-') {
                        i += 1;
                    }
                } else {
                    redirect = true;
                }
            }
            '&' if next == Some('>') => {
                finish_word(&mut word, &mut in_word, &mut redirect, &mut words);
                i += 1;
                while chars.get(i + 1) == Some(&'>') {
                    i += 1;
                }
                redirect = true;
            }
            '|' | ';' | '&' | '(' | ')' => {
                finish_word(&mut word, &mut in_word, &mut redirect, &mut words);
                if !words.is_empty() {
                    cmds.push(std::mem::take(&mut words));
                }
                if next == Some(c) || (c == '|' && next == Some('&')) {
                    i += 1;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    finish_word(&mut word, &mut in_word, &mut redirect, &mut words);
    if !words.is_empty() {
        cmds.push(words);
    }
    cmds
}

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((name, _)) => {
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// chstorm's arguments when `words` runs chstorm (see the module's doc), else None.
fn chstorm_args(words: &[String]) -> Option<Vec<String>> {
    let mut i = 0;
    // Skips the options of a wrapper; those named in `with_value` take the next word.
    let skip_options = |i: &mut usize, with_value: &[&str]| {
        while let Some(w) = words.get(*i).filter(|w| w.starts_with('-') || is_assignment(w)) {
            *i += 1;
            if with_value.contains(&w.as_str()) {
                *i += 1;
            }
        }
    };
    loop {
        while words.get(i).is_some_and(|w| is_assignment(w)) {
            i += 1;
        }
        // A wrapper by its name or its path (/usr/bin/time).
        match words.get(i).map(|w| w.rsplit('/').next().unwrap_or(w)) {
            Some("sudo") => {
                i += 1;
                skip_options(&mut i, &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"]);
            }
            Some("env") => {
                i += 1;
                skip_options(&mut i, &["-u", "-C", "-S"]);
            }
            Some("systemd-run") => {
                i += 1;
                skip_options(
                    &mut i,
                    &["-p", "--property", "-u", "--unit", "-E", "--setenv", "--uid", "--gid", "--slice", "-M"],
                );
            }
            Some("time" | "nohup" | "exec" | "command") => {
                i += 1;
                skip_options(&mut i, &[]);
            }
            _ => break,
        }
    }
    let program = words.get(i)?;
    (program == "chstorm" || program.ends_with("/chstorm")).then(|| words[i + 1..].to_vec())
}

/// Every chstorm command line of a Markdown text: (line, arguments).
fn chstorm_commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let (blocks, _) = split_markdown(text);
    let mut out = Vec::new();
    for block in &blocks {
        for (n, line) in shell_lines(block) {
            for cmd in simple_commands(&line) {
                if let Some(args) = chstorm_args(&cmd) {
                    out.push((n, args));
                }
            }
        }
    }
    out
}

/// Runs chstorm on `args` in parse-only mode in `dir`; Err with what it said when it does not
/// exit 0 within [`PARSE_TIMEOUT`].
fn parses(args: &[String], dir: &Path) -> Result<(), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chstorm"))
        .args(args)
        .env(chstorm::cli::PARSE_ONLY_ENV, "1")
        .env_remove("CHSTORM_URL")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start chstorm: {e}"))?;
    let deadline = Instant::now() + PARSE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not exit within {PARSE_TIMEOUT:?} with {}=1", chstorm::cli::PARSE_ONLY_ENV));
            }
            Err(e) => return Err(format!("waiting for chstorm: {e}")),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&out.stderr);
        Err(format!("{}: {}", out.status, said.lines().next().unwrap_or("")))
    }
}

/// `text` with the insides of its inline code spans blanked (newlines kept), so that links are
/// found outside code only.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = chars.clone();
    let run = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = run(i);
        // The closing run: the next run of exactly n backticks.
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = run(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut out[i..j + n] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// The link targets of a Markdown text outside code: (line, target).
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let (_, prose) = split_markdown(text);
    let prose = blank_code_spans(&prose);
    let line_of = |at: usize| prose[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (at, _) in prose.match_indices("](") {
        let rest = &prose[at + 2..];
        let target = if let Some(r) = rest.strip_prefix('<') {
            r.split('>').next().unwrap_or("").to_string()
        } else {
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    c => c.is_whitespace(),
                })
                .map_or(rest.len(), |(i, _)| i);
            rest[..end].to_string()
        };
        out.push((line_of(at), target));
    }
    // Reference definitions: [label]: target
    for (i, line) in prose.lines().enumerate() {
        let t = line.trim_start();
        if let Some(after) = t.strip_prefix('[').and_then(|r| r.split_once("]:")).map(|(_, a)| a) {
            if let Some(target) = after.split_whitespace().next() {
                out.push((i + 1, target.trim_start_matches('<').trim_end_matches('>').to_string()));
            }
        }
    }
    out
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    // Link targets and HTML tags are not text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        text.push_str(&rest[..at]);
        rest = rest[at + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    let mut plain = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' if !in_tag => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => plain.push(c),
            _ => {}
        }
    }
    plain
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown text's headings (ATX and setext) and HTML ids and names make.
fn anchors(text: &str) -> Vec<String> {
    let (_, prose) = split_markdown(text);
    let lines: Vec<&str> = prose.lines().collect();
    let mut headings: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let level = t.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&level) && (t.len() == level || t[level..].starts_with([' ', '\t'])) {
            headings.push(t[level..].trim().trim_end_matches('#').to_string());
            continue;
        }
        let underline = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
        let setext =
            !underline.is_empty() && (underline.chars().all(|c| c == '=') || underline.chars().all(|c| c == '-'));
        if setext && !t.is_empty() && !t.starts_with(['-', '*', '|', '>']) {
            headings.push(t.trim().to_string());
        }
    }
    let mut out: Vec<String> = Vec::new();
    for h in headings {
        let base = slug(&h);
        let mut anchor = base.clone();
        let mut k = 1;
        while out.contains(&anchor) {
            anchor = format!("{base}-{k}");
            k += 1;
        }
        out.push(anchor);
    }
    for attr in [" id=\"", " name=\""] {
        for (at, _) in prose.match_indices(attr) {
            if let Some(v) = prose[at + attr.len()..].split('"').next() {
                out.push(v.to_string());
            }
        }
    }
    out
}

/// What is wrong with a link `target` in the Markdown file `file`, if anything.
fn broken_link(file: &Path, target: &str, root: &Path) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = path.replace("%20", " ");
    let resolved = if path.is_empty() { file.to_path_buf() } else { file.parent()?.join(&path) };
    let Ok(real) = resolved.canonicalize() else {
        return Some(format!("{path} does not exist"));
    };
    if !real.starts_with(root) {
        return Some(format!("{path} is outside the repository"));
    }
    if anchor.is_empty() || real.extension() != Some(std::ffi::OsStr::new("md")) {
        return None;
    }
    let text = std::fs::read_to_string(&real).ok()?;
    let known = anchors(&text);
    if known.iter().any(|a| a == anchor) {
        return None;
    }
    let close: Vec<&String> = known.iter().filter(|a| a.contains(anchor) || anchor.contains(a.as_str())).collect();
    Some(format!(
        "{} has no heading #{anchor}{}",
        display(&real),
        if close.is_empty() { String::new() } else { format!(" (close: {close:?})") }
    ))
}

#[test]
fn every_chstorm_command_line_in_the_docs_parses() {
    let dir = tempfile::tempdir().unwrap();
    let mut commands: Vec<(String, usize, Vec<String>)> = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, args) in chstorm_commands(&text) {
            commands.push((display(&file), line, args));
        }
    }
    println!("{} chstorm command lines in the docs", commands.len());
    assert!(commands.len() >= 20, "only {} command lines found: is the reading of the docs broken?", commands.len());
    // The check itself can fail.
    assert!(parses(&["bench".into(), "--no-such-flag".into()], dir.path()).is_err());
    let failures: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<_> = commands
            .chunks(commands.len().div_ceil(4))
            .map(|chunk| {
                let dir = dir.path();
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|(file, line, args)| {
                            parses(args, dir).err().map(|e| format!("{file}:{line}: chstorm {}: {e}", args.join(" ")))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{} command lines in the docs do not parse:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, target) in link_targets(&text) {
            checked += 1;
            if let Some(e) = broken_link(&file, &target, &root) {
                failures.push(format!("{}:{line}: ({target}): {e}", display(&file)));
            }
        }
    }
    println!("{checked} links in the docs");
    assert!(checked >= 10, "only {checked} links found: is the reading of the docs broken?");
    assert!(failures.is_empty(), "{} links in the docs do not resolve:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn shell_is_read_as_a_shell_splits_it() {
    let words = |s: &str| -> Vec<Vec<String>> { simple_commands(s) };
    let v = |ws: &[&str]| ws.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    assert_eq!(
        words("chstorm bench -q 'SELECT 1' -c 8 > out.txt 2>&1 && chstorm merge \"a b.json\"  # two"),
        vec![v(&["chstorm", "bench", "-q", "SELECT 1", "-c", "8"]), v(&["chstorm", "merge", "a b.json"])]
    );
    assert_eq!(
        words("OLD=$(pgrep -f 'chstorm gateway') ; kill \"$OLD\""),
        vec![v(&["OLD=$(pgrep -f 'chstorm gateway')"]), v(&["kill", "$OLD"])]
    );
    assert_eq!(words("a|b & (c) 2> e <f g"), vec![v(&["a"]), v(&["b"]), v(&["c"]), v(&["g"])]);
    assert_eq!(words("x\\ y \"q\\\"uote\""), vec![v(&["x y", "q\"uote"])]);
    let args = |s: &str| chstorm_args(&simple_commands(s)[0]);
    assert_eq!(args("sudo -u chstorm chstorm gateway --check"), Some(v(&["gateway", "--check"])));
    assert_eq!(args("CHSTORM_URL=x env -i A=1 target/release/chstorm demo"), Some(v(&["demo"])));
    assert_eq!(
        args("sudo systemd-run --unit=next -p Type=notify /usr/local/bin/chstorm gateway"),
        Some(v(&["gateway"]))
    );
    assert_eq!(args("sudo install -m 0755 target/release/chstorm /usr/local/bin/chstorm"), None);
    assert_eq!(args("chstormx bench"), None);
    // Scripts and transcripts.
    let md = "```sh\nchstorm local up \\\n  --dir /tmp/a   # start\nmake demo\n```\n\
              ```\n$ chstorm bench --ping\nqps 1\nchstorm bench --not-a-command\n```\n\
              ```yaml\nx: chstorm bench\n```\n";
    let found = chstorm_commands(md);
    assert_eq!(found, vec![(2, v(&["local", "up", "--dir", "/tmp/a"])), (7, v(&["bench", "--ping"]))]);
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(slug("chstorm bench: the `--rate` flag"), "chstorm-bench-the---rate-flag");
    assert_eq!(slug("Routing vs `Distributed` (2x2)"), "routing-vs-distributed-2x2");
    assert_eq!(slug("[Users](GATEWAY.md) and <code>max_threads</code>"), "users-and-max_threads");
    assert_eq!(slug("Über größe, 99.9 %"), "über-größe-999-");
    let md = "# chstorm\n\n## Limits\n\n```sh\n# not a heading\n```\n## Limits\n\nSetext\n---\n<a id=\"here\"></a>\n";
    assert_eq!(anchors(md), vec!["chstorm", "limits", "limits-1", "setext", "here"]);
    // Links outside code only, with their lines; a broken one is named.
    let links =
        link_targets("see [a](b.md#c) and `[x](y)`\n```\n[z](w)\n```\n![img](img/p.png \"t\")\n[ref]: <r.md>\n");
    assert_eq!(links, vec![(1, "b.md#c".to_string()), (5, "img/p.png".to_string()), (6, "r.md".to_string())]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.md"), "# Top\n## Next step\n").unwrap();
    let a = root.join("a.md");
    assert_eq!(broken_link(&a, "#next-step", &root), None);
    assert_eq!(broken_link(&a, "a.md#top", &root), None);
    assert_eq!(broken_link(&a, "https://example.com/x#y", &root), None);
    assert!(broken_link(&a, "#next", &root).unwrap().contains("no heading #next"));
    assert!(broken_link(&a, "missing.md", &root).unwrap().contains("does not exist"));
    assert!(broken_link(&a, "../", &root).unwrap().contains("outside the repository"));
}
