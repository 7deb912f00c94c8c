//! The suite file format (YAML).
//!
//! ```yaml
//! name: storm                      # required
//! description: what it measures    # optional
//! duration: 10s                    # per point, after warm-up (default 10s)
//! warmup: 2s                       # per point (default 1s)
//! concurrency: [1, 2, 4, 8]        # required unless every scenario has its own
//! protocols: [http, native]        # http, http-close, https, https-close, native, native-tls
//! quick:                           # what --quick uses instead (each key optional)
//!   duration: 2s
//!   warmup: 500ms
//!   concurrency: [1, 16]
//!   protocols: [http]
//!   requests: 20
//! scenarios:
//!   - name: max_rand               # required, unique
//!     description: ...
//!     queries: ["SELECT max(rand()) FROM numbers(100000)"]   # or: ping: true
//!     dataset: items               # tables it needs (chstorm dataset load NAME)
//!     settings:                    # one variant per combination; `default` = not set
//!       max_threads: [default, 1]
//!     params:                      # one variant per value, substituted for ${name} in queries
//!       table: [kv_int_g256, kv_int_g8192]
//!     protocols: [http]            # overrides the suite's
//!     concurrency: [1, 20]         # overrides the suite's
//!     duration: 5s                 # overrides
//!     requests: 100                # a fixed number of queries per point instead of a duration
//!     table: threads               # an extra table in the report (only `threads` so far)
//! ```
//!
//! Unknown keys are errors. Errors name the file, the line and the field.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A protocol variant of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolVariant {
    Http,
    HttpClose,
    Https,
    HttpsClose,
    Native,
    NativeTls,
}

impl ProtocolVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVariant::Http => "http",
            ProtocolVariant::HttpClose => "http-close",
            ProtocolVariant::Https => "https",
            ProtocolVariant::HttpsClose => "https-close",
            ProtocolVariant::Native => "native",
            ProtocolVariant::NativeTls => "native-tls",
        }
    }
    /// Whether connections are kept alive.
    pub fn keepalive(self) -> bool {
        !matches!(self, ProtocolVariant::HttpClose | ProtocolVariant::HttpsClose)
    }
}

pub use chstorm_yaml::Dur;

/// A non-empty list of concurrency levels, each at least 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Levels(pub Vec<usize>);

impl<'de> Deserialize<'de> for Levels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<usize>::deserialize(d)?;
        if v.is_empty() || v.contains(&0) {
            return Err(de::Error::custom("concurrency must be a non-empty list of numbers >= 1"));
        }
        Ok(Levels(v))
    }
}

/// A scalar YAML value (number, string, bool) as the text a setting or parameter takes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::String(s) => Ok(Scalar(s)),
            serde_yaml::Value::Number(n) => Ok(Scalar(n.to_string())),
            serde_yaml::Value::Bool(b) => Ok(Scalar(if b { "1" } else { "0" }.into())),
            _ => Err(de::Error::custom("expected a number or a string")),
        }
    }
}

/// What --quick changes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quick {
    pub duration: Option<Dur>,
    pub warmup: Option<Dur>,
    pub concurrency: Option<Levels>,
    pub protocols: Option<Vec<ProtocolVariant>>,
    pub requests: Option<u64>,
}

/// One scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub queries: Vec<String>,
    #[serde(default)]
    pub ping: bool,
    pub dataset: Option<String>,
    #[serde(default)]
    pub settings: BTreeMap<String, Vec<Scalar>>,
    #[serde(default)]
    pub params: BTreeMap<String, Vec<Scalar>>,
    pub protocols: Option<Vec<ProtocolVariant>>,
    pub concurrency: Option<Levels>,
    pub duration: Option<Dur>,
    pub warmup: Option<Dur>,
    pub requests: Option<u64>,
    pub table: Option<String>,
}

/// A whole suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub duration: Option<Dur>,
    pub warmup: Option<Dur>,
    pub concurrency: Option<Levels>,
    pub protocols: Option<Vec<ProtocolVariant>>,
    #[serde(default)]
    pub quick: Quick,
    pub scenarios: Vec<Scenario>,
    /// Where the suite was read from (for messages and relative paths).
    #[serde(skip)]
    pub source: PathBuf,
}

/// A suite file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(": line {l}")).unwrap_or_default())]
pub struct SuiteError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

/// The built-in suites, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("storm", include_str!("../../../suites/storm.yaml")),
    ("kv", include_str!("../../../suites/kv.yaml")),
    ("shopee", include_str!("../../../suites/shopee.yaml")),
    ("threads", include_str!("../../../suites/threads.yaml")),
];

impl Suite {
    /// Loads a built-in suite by name, or a YAML file by path.
    pub fn load(name_or_path: &str) -> Result<Suite, SuiteError> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Suite::parse(text, Path::new(&format!("builtin:{name}")));
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|e| SuiteError {
            file: name_or_path.to_string(),
            line: None,
            message: format!(
                "cannot read it ({e}); built-in suites are: {}",
                BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        })?;
        Suite::parse(&text, path)
    }

    /// Parses and validates suite text.
    pub fn parse(text: &str, source: &Path) -> Result<Suite, SuiteError> {
        let file = source.display().to_string();
        let mut suite: Suite = chstorm_yaml::parse(text).map_err(|e| SuiteError {
            file: file.clone(),
            line: e.line,
            message: e.message,
        })?;
        suite.source = source.to_path_buf();
        let err = |needle: &str, message: String| SuiteError {
            file: file.clone(),
            line: chstorm_yaml::line_of(text, needle),
            message,
        };
        if suite.scenarios.is_empty() {
            return Err(err("scenarios", "scenarios: the suite has no scenarios".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, s) in suite.scenarios.iter().enumerate() {
            let at = format!("name: {}", s.name);
            if !seen.insert(s.name.clone()) {
                return Err(err(&at, format!("scenarios[{i}].name: '{}' appears twice", s.name)));
            }
            if s.ping != s.queries.is_empty() {
                return Err(err(&at, format!("scenarios[{i}] ({}): give either queries or ping: true", s.name)));
            }
            if s.concurrency.is_none() && suite.concurrency.is_none() {
                return Err(err(&at, format!("scenarios[{i}].concurrency: missing, and the suite sets none")));
            }
            if s.settings.values().chain(s.params.values()).any(Vec::is_empty) {
                return Err(err(&at, format!("scenarios[{i}] ({}): a settings or params list is empty", s.name)));
            }
            if let Some(t) = &s.table {
                if t != "threads" {
                    return Err(err(&at, format!("scenarios[{i}].table: unknown table '{t}' (known: threads)")));
                }
            }
            if let Some(d) = &s.dataset {
                if chstorm_data::DatasetName::parse(d).is_none() {
                    return Err(err(
                        &at,
                        format!("scenarios[{i}].dataset: unknown dataset '{d}' (known: items, kv, hits)"),
                    ));
                }
            }
            if s.requests == Some(0) {
                return Err(err(&at, format!("scenarios[{i}].requests: must be at least 1")));
            }
        }
        Ok(suite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(text, Path::new("suites/test.yaml"))
    }

    #[test]
    fn builtin_suites_parse() {
        for (name, _) in BUILTIN {
            let s = Suite::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&s.name, name);
        }
    }

    #[test]
    fn unknown_key_names_file_line_and_field() {
        let e =
            parse("name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    queries: [SELECT 1]\n    concurency: [2]\n")
                .unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("suites/test.yaml: line 6: "), "{s}");
        assert!(s.contains("unknown field `concurency`"), "{s}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = parse("name: x\nconcurrency: [1, 0]\nscenarios: []\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("concurrency"), "{e}");
        let e = parse("name: x\nduration: ten\nconcurrency: [1]\nscenarios: []\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("'ten' is not a duration"), "{e}");
        let e = parse("name: x\nconcurrency: [1]\nprotocols: [gopher]\nscenarios: []\n").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("gopher"), "{e}");
        let e = parse("name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    ping: true\n    queries: [SELECT 1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("either queries or ping"), "{e}");
        let e = parse("name: x\nscenarios:\n  - name: a\n    ping: true\n").unwrap_err().to_string();
        assert!(e.contains("concurrency: missing"), "{e}");
        let e =
            parse("name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    ping: true\n  - name: a\n    ping: true\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 4") && e.contains("twice"), "{e}");
        let e = parse("name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    ping: true\n    dataset: nope\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown dataset 'nope'"), "{e}");
        let e = Suite::load("no-such-suite").unwrap_err().to_string();
        assert!(e.contains("built-in suites are: storm"), "{e}");
    }

    #[test]
    fn custom_checks_find_the_line_of_nested_fields() {
        let text = "name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    ping: true\n  - name: b\n    ping: true\n    concurrency: []\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("line 8") && e.contains("scenarios[1].concurrency"), "{e}");
        let text = "name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    ping: true\n    warmup: soon\n";
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("line 6") && e.contains("warmup"), "{e}");
    }

    #[test]
    fn settings_take_numbers_and_strings() {
        let s = parse("name: x\nconcurrency: [1]\nscenarios:\n  - name: a\n    queries: [SELECT 1]\n    settings:\n      max_threads: [default, 1]\n      load_balancing: [random]\n").unwrap();
        let sc = &s.scenarios[0];
        assert_eq!(sc.settings["max_threads"], vec![Scalar("default".into()), Scalar("1".into())]);
    }
}
