//! YAML for chstorm's config files (suites, the gateway config).
//!
//! [`parse`] deserializes a typed value and, on failure, says where: the field's path
//! (`scenarios[1].concurrency`) and the best line known for it, and the reason in one line.
//! [`Dur`] reads durations written as `500ms`, `10s`, `2m`.
//!
//! # Boundaries
//!
//! This crate owns YAML parsing with located errors. It must not import any other chstorm crate:
//! suites (`chstorm-sweep`) and the gateway config build on it.

use serde::de::{self, DeserializeOwned, Deserializer};
use serde::Deserialize;
use std::time::Duration;

/// Where a YAML document is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// `field.path: reason`.
    pub message: String,
}

/// Parses `text` as `T`.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        // serde_yaml knows the line of syntax and type errors, but places errors raised inside a
        // value (our own checks) at the start of the enclosing mapping; the field's own line,
        // found from its path, is at or after it.
        let line = inner.location().map(|l| l.line()).max(line_of_path(text, &path));
        // serde_yaml prefixes part of the path itself; show the whole path once.
        let msg = match msg.split_once(": ") {
            Some((prefix, rest)) if path.starts_with(prefix) && !prefix.contains(' ') => rest.to_string(),
            _ => msg,
        };
        YamlError { line, message: if path == "." { msg } else { format!("{path}: {msg}") } }
    })
}

/// The 1-based line of the first line of `text` containing `needle`, for errors found after
/// parsing.
pub fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

/// A duration written as `500ms`, `10s`, `2m`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Dur)
            .map_err(|e| de::Error::custom(format!("'{s}' is not a duration ({e}); write e.g. 500ms, 10s, 2m")))
    }
}

/// The 1-based line of a field path like `scenarios[2].concurrency` in simple block YAML.
pub fn line_of_path(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut at = 0usize;
    let mut found = None;
    for seg in path.split('.').filter(|s| !s.is_empty() && *s != ".") {
        let (key, index) = match seg.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        let pos = (at..lines.len()).find(|&i| {
            let t = lines[i].trim_start().trim_start_matches("- ");
            t.starts_with(&format!("{key}:"))
        })?;
        found = Some(pos);
        at = pos + 1;
        if let Some(n) = index {
            // The n-th list item after the key.
            let items: Vec<usize> = (at..lines.len()).filter(|&i| lines[i].trim_start().starts_with("- ")).collect();
            let first_indent = items.first().map(|&i| indent(lines[i]))?;
            let same: Vec<usize> = items.into_iter().filter(|&i| indent(lines[i]) == first_indent).collect();
            let item = *same.get(n)?;
            found = Some(item);
            at = item;
        }
    }
    found.map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct T {
        #[allow(dead_code)]
        wait: Dur,
        #[allow(dead_code)]
        items: Vec<Item>,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        #[allow(dead_code)]
        name: String,
        #[allow(dead_code)]
        after: Option<Dur>,
    }

    #[test]
    fn errors_name_the_field_and_its_line() {
        let e = parse::<T>("wait: soon\nitems: []\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(e.message.starts_with("wait: 'soon' is not a duration"), "{e:?}");
        let e = parse::<T>("wait: 1s\nitems:\n  - name: a\n  - name: b\n    after: later\n").unwrap_err();
        assert_eq!(e.line, Some(5), "{e:?}");
        assert!(e.message.starts_with("items[1].after: 'later'"), "{e:?}");
        let e = parse::<T>("wait: 1s\nitems: []\nextra: 1\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("unknown field `extra`"), "{e:?}");
        assert_eq!(parse::<T>("wait: 250ms\nitems: []\n").unwrap().wait, Dur(Duration::from_millis(250)));
        assert_eq!(line_of("a\nb: 1\n", "b:"), Some(2));
    }
}
