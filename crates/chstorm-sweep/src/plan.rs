//! Expanding a suite into points: scenario × protocol × settings × params × concurrency.

use crate::suite::{ProtocolVariant, Scenario, Suite};
use crate::SweepError;
use chstorm_proto::TlsOptions;
use std::collections::BTreeMap;
use std::time::Duration;

/// Default measured length of a point when the suite sets none.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Default warm-up of a point when the suite sets none.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(1);

/// The server's URL per protocol. A protocol without a URL is skipped (and said so).
#[derive(Debug, Clone, Default)]
pub struct Targets {
    pub http: Option<String>,
    pub https: Option<String>,
    pub native: Option<String>,
    pub native_tls: Option<String>,
    pub tls: TlsOptions,
}

impl Targets {
    /// Sorts URLs by scheme; two URLs of one scheme are an error.
    pub fn from_urls(urls: &[String], tls: TlsOptions) -> Result<Targets, SweepError> {
        let mut t = Targets { tls, ..Default::default() };
        for u in urls {
            let target = chstorm_proto::Target::parse(u).map_err(|e| SweepError::Invalid(e.to_string()))?;
            let slot = match target.protocol {
                chstorm_proto::Protocol::Http => &mut t.http,
                chstorm_proto::Protocol::Https => &mut t.https,
                chstorm_proto::Protocol::Native => &mut t.native,
                chstorm_proto::Protocol::NativeTls => &mut t.native_tls,
            };
            if slot.is_some() {
                return Err(SweepError::Invalid(format!(
                    "two --url with the scheme of '{target}'; give one per protocol"
                )));
            }
            *slot = Some(u.clone());
        }
        if t.http.is_none() && t.https.is_none() && t.native.is_none() && t.native_tls.is_none() {
            return Err(SweepError::Invalid("give the server with --url (repeat it for other protocols)".into()));
        }
        Ok(t)
    }

    pub fn url_for(&self, p: ProtocolVariant) -> Option<&str> {
        match p {
            ProtocolVariant::Http | ProtocolVariant::HttpClose => self.http.as_deref(),
            ProtocolVariant::Https | ProtocolVariant::HttpsClose => self.https.as_deref(),
            ProtocolVariant::Native => self.native.as_deref(),
            ProtocolVariant::NativeTls => self.native_tls.as_deref(),
        }
    }

    /// An HTTP(S) URL, for loading data, reading dataset parameters and storing results.
    pub fn http_any(&self) -> Option<&str> {
        self.http.as_deref().or(self.https.as_deref())
    }
}

/// One point to run.
#[derive(Debug, Clone)]
pub struct PointPlan {
    /// Unique within the suite; used to skip finished points on a re-run.
    pub key: String,
    pub scenario: String,
    /// The line this point belongs to in the charts: protocol, settings and params.
    pub variant: String,
    pub protocol: ProtocolVariant,
    pub url: String,
    pub settings: Vec<(String, String)>,
    pub params: Vec<(String, String)>,
    pub concurrency: usize,
    pub ping: bool,
    /// Queries with `${...}` substituted (placeholders still in).
    pub queries: Vec<String>,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub warmup: Duration,
}

/// All combinations of a map of lists, in key order.
pub fn combinations(m: &BTreeMap<String, Vec<crate::suite::Scalar>>) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![vec![]];
    for (k, values) in m {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((k.clone(), v.0.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// Replaces `${name}` from `params`, then from `vars` (`${items.rows}`).
pub fn substitute(text: &str, params: &[(String, String)], vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed '${{' in: {text}"))?;
        let name = &after[..end];
        let value = params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| vars.get(name).cloned())
            .ok_or_else(|| match name.split_once('.') {
                Some((ds, _)) => {
                    format!("${{{name}}} is unknown: load the dataset first (chstorm dataset load {ds} --url URL)")
                }
                None => format!("${{{name}}} is not a param of the scenario"),
            })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn variant_name(protocol: ProtocolVariant, settings: &[(String, String)], params: &[(String, String)]) -> String {
    let mut parts = vec![protocol.as_str().to_string()];
    parts.extend(params.iter().map(|(k, v)| format!("{k}={v}")));
    parts.extend(settings.iter().map(|(k, v)| format!("{k}={v}")));
    parts.join(" ")
}

/// Expands `suite` into points. Returns the points and notes about what was skipped.
pub fn plan(
    suite: &Suite,
    quick: bool,
    targets: &Targets,
    vars: &BTreeMap<String, String>,
) -> Result<(Vec<PointPlan>, Vec<String>), SweepError> {
    let mut points = Vec::new();
    let mut notes = Vec::new();
    for sc in &suite.scenarios {
        plan_scenario(suite, sc, quick, targets, vars, &mut points, &mut notes)?;
    }
    Ok((points, notes))
}

fn plan_scenario(
    suite: &Suite,
    sc: &Scenario,
    quick: bool,
    targets: &Targets,
    vars: &BTreeMap<String, String>,
    points: &mut Vec<PointPlan>,
    notes: &mut Vec<String>,
) -> Result<(), SweepError> {
    let q = &suite.quick;
    let pick = |quick_v: Option<Duration>, sc_v: Option<Duration>, suite_v: Option<Duration>| {
        if quick {
            quick_v.or(sc_v).or(suite_v)
        } else {
            sc_v.or(suite_v)
        }
    };
    let duration = pick(q.duration.map(|d| d.0), sc.duration.map(|d| d.0), suite.duration.map(|d| d.0));
    let warmup =
        pick(q.warmup.map(|d| d.0), sc.warmup.map(|d| d.0), suite.warmup.map(|d| d.0)).unwrap_or(DEFAULT_WARMUP);
    let requests = if quick { q.requests.or(sc.requests) } else { sc.requests };
    let duration = if requests.is_some() { duration } else { Some(duration.unwrap_or(DEFAULT_DURATION)) };
    let levels = if quick { q.concurrency.as_ref().or(sc.concurrency.as_ref()) } else { None }
        .or(sc.concurrency.as_ref())
        .or(suite.concurrency.as_ref())
        .map(|l| l.0.clone())
        .unwrap_or_default();
    let mut protocols = sc.protocols.clone().or_else(|| suite.protocols.clone()).unwrap_or(vec![ProtocolVariant::Http]);
    if quick {
        if let Some(qp) = &q.protocols {
            protocols.retain(|p| qp.contains(p));
        }
    }
    for protocol in protocols {
        let Some(url) = targets.url_for(protocol) else {
            notes.push(format!("{}: skipped {} (no {} URL given)", sc.name, protocol.as_str(), protocol.as_str()));
            continue;
        };
        for params in combinations(&sc.params) {
            let queries = sc
                .queries
                .iter()
                .map(|text| substitute(text, &params, vars))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| SweepError::Invalid(format!("scenario {}: {e}", sc.name)))?;
            for settings in combinations(&sc.settings) {
                let variant = variant_name(protocol, &settings, &params);
                let applied: Vec<(String, String)> = settings.iter().filter(|(_, v)| v != "default").cloned().collect();
                for &c in &levels {
                    points.push(PointPlan {
                        key: format!("{}|{}|c={}", sc.name, variant, c),
                        scenario: sc.name.clone(),
                        variant: variant.clone(),
                        protocol,
                        url: url.to_string(),
                        settings: applied.clone(),
                        params: params.clone(),
                        concurrency: c,
                        ping: sc.ping,
                        queries: queries.clone(),
                        duration,
                        requests,
                        warmup,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn targets() -> Targets {
        Targets::from_urls(&["http://127.0.0.1:1".into(), "clickhouse://127.0.0.1:2".into()], TlsOptions::default())
            .unwrap()
    }

    #[test]
    fn expands_protocols_settings_params_and_levels() {
        let suite = Suite::parse(
            "name: s\nconcurrency: [1, 4]\nprotocols: [http, http-close, native, https]\nscenarios:\n  - name: a\n    queries: ['SELECT * FROM t_${g}']\n    params: {g: [1, 2]}\n    settings: {max_threads: [default, 1]}\n",
            Path::new("t.yaml"),
        )
        .unwrap();
        let (points, notes) = plan(&suite, false, &targets(), &BTreeMap::new()).unwrap();
        // 3 protocols with URLs x 2 params x 2 settings x 2 levels.
        assert_eq!(points.len(), 24);
        assert_eq!(notes, vec!["a: skipped https (no https URL given)"]);
        let p = points.iter().find(|p| p.key == "a|native g=2 max_threads=1|c=4").unwrap();
        assert_eq!(p.queries, vec!["SELECT * FROM t_2"]);
        assert_eq!(p.settings, vec![("max_threads".to_string(), "1".to_string())]);
        let d = points.iter().find(|p| p.key == "a|http-close g=1 max_threads=default|c=1").unwrap();
        assert!(d.settings.is_empty(), "default means not set");
        assert!(!d.protocol.keepalive());
        let keys: std::collections::BTreeSet<_> = points.iter().map(|p| &p.key).collect();
        assert_eq!(keys.len(), points.len(), "keys are unique");
    }

    #[test]
    fn quick_mode_and_requests() {
        let suite = Suite::load("threads").unwrap();
        let (points, _) = plan(&suite, true, &targets(), &BTreeMap::new()).unwrap();
        assert_eq!(points.len(), 10, "5 max_threads x 2 client counts");
        assert!(points.iter().all(|p| p.requests == Some(20) && p.duration.is_none()));
        let storm = Suite::load("storm").unwrap();
        let (points, _) = plan(&storm, true, &targets(), &BTreeMap::new()).unwrap();
        assert!(points.iter().all(|p| p.duration == Some(Duration::from_secs(1))));
        assert!(points.iter().all(|p| [1, 8, 32].contains(&p.concurrency)));
    }

    #[test]
    fn every_builtin_query_is_a_valid_template() {
        let vars: BTreeMap<String, String> = ["items.rows", "items.shops", "kv.rows", "hits.rows"]
            .iter()
            .map(|k| (k.to_string(), "1000".into()))
            .collect();
        for (name, _) in crate::suite::BUILTIN {
            let suite = Suite::load(name).unwrap();
            let (points, _) = plan(&suite, false, &targets(), &vars).unwrap();
            for q in points.iter().flat_map(|p| &p.queries) {
                chstorm_load::Template::parse(q, Path::new(".")).unwrap_or_else(|e| panic!("{name}: {q}: {e}"));
            }
        }
    }

    #[test]
    fn substitution_needs_every_variable() {
        let vars: BTreeMap<String, String> = [("items.rows".to_string(), "100".to_string())].into();
        assert_eq!(substitute("x ${items.rows} ${g}", &[("g".into(), "7".into())], &vars).unwrap(), "x 100 7");
        assert!(substitute("${kv.rows}", &[], &vars).unwrap_err().contains("chstorm dataset load kv"));
        assert!(substitute("${nope}", &[], &vars).unwrap_err().contains("not a param"));
        assert!(Targets::from_urls(&[], TlsOptions::default()).is_err());
    }
}
