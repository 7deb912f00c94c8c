//! A scenario file (`chstorm bench --scenarios FILE`): several named workloads that run at the
//! same time in one process, each with its own queries, target, loop and thresholds.
//!
//! ```yaml
//! thresholds: ["error_rate<1%"]          # on the total of all scenarios (optional)
//! scenarios:
//!   - name: lookups
//!     queries: ["SELECT * FROM items FINAL WHERE item_id = {i:uniform(1,1000000)}"]
//!     rate: 200                           # open loop; or concurrency alone for a closed loop
//!     concurrency: 16
//!     duration: 30s
//!     thresholds: ["p99<50ms"]
//!   - name: scans
//!     queries_file: scans.sql             # relative to this file
//!     concurrency: 2
//!     start: 5s                           # after the common start
//!     duration: 20s
//! ```
//!
//! Keys per scenario: `name`, `url`, `queries` | `queries_file` | `ping`, `randomize`, `seed`,
//! `settings` (a map), `concurrency`, `rate`, `ramp_to`, `ramp_over`, `keepalive`, `start`,
//! `duration`, `requests`, `warmup`, `timeout`, `max_errors`, `threads`, `thresholds`,
//! `abort_on_fail`; at the top: `scenarios`, `thresholds`, `abort_on_fail`. An unknown key is an
//! error naming its line and field.

use crate::threshold::Threshold;
use chstorm_yaml::Dur;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A scenario file that cannot be used: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(": line {l}")).unwrap_or_default())]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

/// A setting's value as YAML writes it: `max_threads: 4`, `use_uncompressed_cache: true`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SettingValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl std::fmt::Display for SettingValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettingValue::Int(v) => write!(f, "{v}"),
            SettingValue::Float(v) => write!(f, "{v}"),
            SettingValue::Bool(v) => write!(f, "{}", u8::from(*v)),
            SettingValue::Text(v) => f.write_str(v),
        }
    }
}

/// One named workload. Unset fields take the command line's value (`--url`, `--seed`), else
/// bench's defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioDef {
    pub name: String,
    pub url: Option<String>,
    #[serde(default)]
    pub queries: Vec<String>,
    /// One query per line, relative to the scenario file's folder.
    pub queries_file: Option<PathBuf>,
    #[serde(default)]
    pub ping: bool,
    #[serde(default)]
    pub randomize: bool,
    pub seed: Option<u64>,
    #[serde(default)]
    pub settings: BTreeMap<String, SettingValue>,
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    pub ramp_to: Option<f64>,
    pub ramp_over: Option<Dur>,
    pub keepalive: Option<bool>,
    /// When the scenario starts, after the run's common start. Default 0s.
    pub start: Option<Dur>,
    pub duration: Option<Dur>,
    pub requests: Option<u64>,
    pub warmup: Option<Dur>,
    pub timeout: Option<Dur>,
    pub max_errors: Option<u64>,
    pub threads: Option<usize>,
    #[serde(default)]
    pub thresholds: Vec<String>,
    #[serde(default)]
    pub abort_on_fail: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    scenarios: Vec<ScenarioDef>,
    #[serde(default)]
    thresholds: Vec<String>,
    #[serde(default)]
    abort_on_fail: Vec<String>,
}

/// A checked scenario file.
#[derive(Debug, Clone)]
pub struct ScenarioFile {
    pub scenarios: Vec<Scenario>,
    /// Thresholds on the total of all scenarios.
    pub thresholds: Vec<Threshold>,
    /// The file, for messages; relative `queries_file` paths are resolved against its folder.
    pub source: PathBuf,
    /// The file's text, to point at a scenario's line in later errors.
    pub text: String,
}

/// One scenario, its thresholds parsed and its query file's path resolved.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub def: ScenarioDef,
    pub thresholds: Vec<Threshold>,
}

/// Names a total row in CSV; no scenario may take it.
pub const TOTAL: &str = "total";

impl ScenarioFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<ScenarioFile, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.display().to_string(),
            line: None,
            message: format!("cannot read the scenario file ({e})"),
        })?;
        ScenarioFile::parse(&text, path)
    }

    /// Parses and checks scenario file text; `source` names it and anchors relative paths.
    pub fn parse(text: &str, source: &Path) -> Result<ScenarioFile, ScenarioError> {
        let file = source.display().to_string();
        let raw: RawFile = chstorm_yaml::parse(text).map_err(|e| ScenarioError {
            file: file.clone(),
            line: e.line,
            message: e.message,
        })?;
        let err = |needle: &str, message: String| ScenarioError {
            file: file.clone(),
            line: chstorm_yaml::line_of(text, needle),
            message,
        };
        if raw.scenarios.is_empty() {
            return Err(err("scenarios", "scenarios: the file has no scenarios; give at least one".into()));
        }
        let dir = source.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut names = std::collections::BTreeSet::new();
        let mut scenarios = Vec::with_capacity(raw.scenarios.len());
        for (i, mut def) in raw.scenarios.into_iter().enumerate() {
            let at = format!("name: {}", def.name);
            let here = format!("scenarios[{i}] ({})", def.name);
            let ok_name = !def.name.is_empty()
                && def.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
            if !ok_name {
                return Err(err(
                    &at,
                    format!("scenarios[{i}].name: '{}' is not a name: use letters, digits, '_', '-' and '.'", def.name),
                ));
            }
            if def.name == TOTAL {
                return Err(err(
                    &at,
                    format!("scenarios[{i}].name: '{TOTAL}' names the total of all scenarios; choose another"),
                ));
            }
            if !names.insert(def.name.clone()) {
                return Err(err(&at, format!("scenarios[{i}].name: '{}' appears twice", def.name)));
            }
            let sources =
                usize::from(!def.queries.is_empty()) + usize::from(def.queries_file.is_some()) + usize::from(def.ping);
            if sources != 1 {
                return Err(err(&at, format!("{here}: give one of queries, queries_file or ping: true")));
            }
            if def.ramp_to.is_some() != def.ramp_over.is_some() || (def.ramp_to.is_some() && def.rate.is_none()) {
                return Err(err(&at, format!("{here}: a ramp needs rate, ramp_to and ramp_over together")));
            }
            if let Some(f) = &def.queries_file {
                def.queries_file = Some(dir.join(f));
            }
            let thresholds = parse_thresholds(&def.thresholds, &def.abort_on_fail)
                .map_err(|(needle, m)| err(&needle, format!("{here}: {m}")))?;
            scenarios.push(Scenario { def, thresholds });
        }
        let thresholds =
            parse_thresholds(&raw.thresholds, &raw.abort_on_fail).map_err(|(needle, m)| err(&needle, m))?;
        Ok(ScenarioFile { scenarios, thresholds, source: source.to_path_buf(), text: text.to_string() })
    }

    /// The line of scenario `name` in the file, for errors found when it is built or run.
    pub fn line_of(&self, name: &str) -> Option<usize> {
        chstorm_yaml::line_of(&self.text, &format!("name: {name}"))
    }
}

/// `thresholds` then `abort_on_fail`, parsed; an error carries the text to find its line.
fn parse_thresholds(plain: &[String], aborting: &[String]) -> Result<Vec<Threshold>, (String, String)> {
    let parse = |t: &String| Threshold::parse(t).map_err(|m| (t.clone(), m));
    let mut out: Vec<Threshold> = plain.iter().map(parse).collect::<Result<_, _>>()?;
    for t in aborting {
        out.push(parse(t)?.aborting());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
thresholds: [\"error_rate<1%\"]
scenarios:
  - name: lookups
    queries: [\"SELECT {i:uniform(1,10)}\"]
    rate: 100
    concurrency: 4
    settings: {max_threads: 1, use_uncompressed_cache: true}
    thresholds: [\"p99<50ms\"]
    abort_on_fail: [\"max<1s\"]
  - name: scans
    queries_file: scans.sql
    concurrency: 2
    start: 500ms
    duration: 2s
";

    #[test]
    fn reads_scenarios_and_their_thresholds() {
        let f = ScenarioFile::parse(GOOD, Path::new("conf/mixed.yaml")).unwrap();
        assert_eq!(f.scenarios.len(), 2);
        let look = &f.scenarios[0];
        assert_eq!(look.def.rate, Some(100.0));
        assert_eq!(look.def.settings["max_threads"].to_string(), "1");
        assert_eq!(look.def.settings["use_uncompressed_cache"].to_string(), "1");
        assert_eq!(
            look.thresholds.iter().map(|t| (t.text.as_str(), t.abort_on_fail)).collect::<Vec<_>>(),
            [("p99<50ms", false), ("max<1s", true)]
        );
        let scans = &f.scenarios[1];
        assert_eq!(scans.def.queries_file.as_deref(), Some(Path::new("conf/scans.sql")));
        assert_eq!(scans.def.start.map(|d| d.0), Some(std::time::Duration::from_millis(500)));
        assert_eq!(f.thresholds[0].text, "error_rate<1%");
        assert_eq!(f.line_of("scans"), Some(10));
    }

    #[test]
    fn mistakes_name_the_line_and_the_field() {
        for (text, line, needle) in [
            (
                GOOD.replace("    concurrency: 2\n", "    concurency: 2\n"),
                12,
                "scenarios[1].concurency: unknown field `concurency`",
            ),
            (GOOD.replace("thresholds: [\"error", "threshold: [\"error"), 1, "unknown field `threshold`"),
            (GOOD.replace("duration: 2s", "duration: soon"), 14, "scenarios[1].duration: 'soon' is not a duration"),
            (GOOD.replace("p99<50ms", "p99x<50ms"), 8, "scenarios[0] (lookups): threshold 'p99x<50ms': unknown figure"),
            (GOOD.replace("error_rate<1%", "errors<lots"), 1, "threshold 'errors<lots'"),
            (GOOD.replace("name: scans", "name: lookups"), 3, "scenarios[1].name: 'lookups' appears twice"),
            (GOOD.replace("name: scans", "name: total"), 10, "'total' names the total"),
            (GOOD.replace("    queries_file: scans.sql\n", ""), 10, "give one of queries, queries_file or ping"),
            ("scenarios: []\n".to_string(), 1, "no scenarios"),
        ] {
            let e = ScenarioFile::parse(&text, Path::new("m.yaml")).unwrap_err();
            assert_eq!(e.line, Some(line), "{needle}: {e}");
            assert!(e.to_string().starts_with(&format!("m.yaml: line {line}: ")), "{e}");
            assert!(e.message.contains(needle), "{needle}: {e}");
        }
    }
}
