//! The queries to compare: from a query file (one per line, read by the CLI) or from a suite.
//!
//! `--suite NAME` compares the queries of every scenario of the suite. A scenario's `params`
//! are expanded (one query per combination, as `sweep` does); `${dataset.rows}`-style variables
//! come from the datasets loaded on the left server. Scenario `settings` variants are not
//! expanded: settings belong in the two URLs, which is what is being compared. `ping` scenarios
//! have no query and are skipped.

use chstorm_proto::TlsOptions;
use chstorm_sweep::plan::combinations;
use chstorm_sweep::suite::Suite;
use std::collections::BTreeMap;

/// One query to compare.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySpec {
    /// Where it came from (`scenario` or `scenario g=256 clause=WHERE`); None for a query file.
    pub name: Option<String>,
    /// The SQL, placeholders such as `{k:uniform(1,100)}` unrendered.
    pub sql: String,
}

impl QuerySpec {
    pub fn plain(sql: impl Into<String>) -> QuerySpec {
        QuerySpec { name: None, sql: sql.into() }
    }
}

/// The queries of every scenario of `suite`, and notes on what was left out.
pub fn from_suite(suite: &Suite, vars: &BTreeMap<String, String>) -> Result<(Vec<QuerySpec>, Vec<String>), String> {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for sc in &suite.scenarios {
        if sc.ping {
            notes.push(format!("{}: skipped (ping has no query)", sc.name));
            continue;
        }
        if !sc.settings.is_empty() {
            notes.push(format!(
                "{}: settings variants ({}) not expanded; put settings in the --left/--right URLs",
                sc.name,
                sc.settings.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        for params in combinations(&sc.params) {
            let name = std::iter::once(sc.name.clone())
                .chain(params.iter().map(|(k, v)| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(" ");
            for q in &sc.queries {
                let sql = chstorm_sweep::plan::substitute(q, &params, vars)
                    .map_err(|e| format!("scenario {}: {e}", sc.name))?;
                out.push(QuerySpec { name: Some(name.clone()), sql });
            }
        }
    }
    if out.is_empty() {
        return Err(format!("suite {} has no queries to compare (only ping scenarios)", suite.name));
    }
    Ok((out, notes))
}

/// Dataset parameters (`items.rows`, `kv.rows`, ...) recorded by `chstorm dataset load` on the
/// server at `http_url`; empty when there are none or the server cannot say.
pub fn dataset_vars(http_url: &str, tls: &TlsOptions) -> BTreeMap<String, String> {
    chstorm_data::dataset_vars(http_url, tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storm_gives_its_two_queries() {
        let suite = Suite::load("storm").unwrap();
        let (q, notes) = from_suite(&suite, &BTreeMap::new()).unwrap();
        let sql: Vec<&str> = q.iter().map(|q| q.sql.as_str()).collect();
        assert_eq!(sql, vec!["SELECT 1", "SELECT max(rand()) FROM numbers(100000)"]);
        assert!(notes.iter().any(|n| n.contains("ping")));
        assert!(notes.iter().any(|n| n.contains("max_threads")));
    }

    #[test]
    fn params_expand_and_dataset_vars_substitute() {
        let suite = Suite::load("kv").unwrap();
        let e = from_suite(&suite, &BTreeMap::new()).unwrap_err();
        assert!(e.contains("chstorm dataset load kv"), "{e}");
        let vars = BTreeMap::from([("kv.rows".to_string(), "1000".to_string())]);
        let (q, _) = from_suite(&suite, &vars).unwrap();
        assert_eq!(q.len(), 4 * 4, "4 scenarios x g x clause");
        assert_eq!(q[0].name.as_deref(), Some("int_hit clause=WHERE g=256"));
        assert!(q[0].sql.contains("kv_int_g256 WHERE") && q[0].sql.contains("{k:uniform(1,1000)}"), "{}", q[0].sql);
    }
}
