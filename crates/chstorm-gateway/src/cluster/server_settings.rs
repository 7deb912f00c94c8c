//! The settings the config names, checked against the replicas' own `system.settings`: a user's
//! `allowed_settings` and fixed `settings` that no replica of its cluster knows would refuse, or
//! fail, every query of that user, on a release that dropped or renamed them (or one that does
//! not have them yet). Read once a replica's version is first known ([`super::version`]), at
//! start and after a reload (a reload starts the loop again), and reported as one `warn` line
//! per unknown name, naming the user, the setting, the replica and its version.
//!
//! The types the native port needs in 18.16's typed format are 18.16's own table
//! (`chstorm_proto::native::server::typed_settings`, checked against a live 18.16.1 by the
//! proto crate's tests): 18.16's `system.settings` has no `type` column to read them from, and
//! from revision 54429 on no type is needed.

use crate::cluster::replica::Replica;
use crate::cluster::upstream::Upstream;
use std::collections::BTreeSet;
use std::time::Duration;

/// One setting the config names: (user, what names it, the setting).
pub type Wanted = (String, &'static str, String);

/// The settings a user of `cluster` names, from `users`: its allow-list (`allowed_settings`) and
/// its fixed `settings`.
pub fn wanted<'a>(users: impl Iterator<Item = &'a crate::config::User>, cluster: &str) -> Vec<Wanted> {
    let mut out = Vec::new();
    for u in users.filter(|u| u.cluster == cluster) {
        if let crate::config::AllowedSettings::Only(names) = &u.allowed_settings {
            out.extend(names.iter().map(|n| (u.name.clone(), "allowed_settings", n.clone())));
        }
        out.extend(u.settings.iter().map(|(n, _)| (u.name.clone(), "settings", n.clone())));
    }
    out
}

/// The names in `wanted` that `known` (a server's `system.settings`) lacks.
pub fn unknown<'w>(wanted: &'w [Wanted], known: &BTreeSet<String>) -> Vec<&'w Wanted> {
    wanted.iter().filter(|(_, _, name)| !known.contains(name) && !name.starts_with("param_")).collect()
}

/// Reads `r`'s `system.settings` names (within `timeout`) and logs each of `wanted` it lacks;
/// false when the server could not be read.
pub async fn check(
    upstream: &Upstream,
    cluster: &str,
    r: &Replica,
    auth: &http::HeaderValue,
    wanted: &[Wanted],
    timeout: Duration,
) -> bool {
    if wanted.is_empty() {
        return true;
    }
    let Some(text) = upstream.query_text(&r.addr, "SELECT name FROM system.settings", auth, timeout, 1 << 20).await
    else {
        return false;
    };
    let known: BTreeSet<String> = text.lines().map(str::to_string).collect();
    let version = r.version().map_or_else(|| "unknown".to_string(), |v| v.label());
    for (user, field, name) in unknown(wanted, &known) {
        crate::log::log(
            "warn",
            "a setting the config names is not one of the replica's",
            serde_json::json!({"cluster": cluster, "user": user, "field": field, "setting": name,
                "replica": r.label(), "version": version}),
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_server_lacks_are_found() {
        let wanted: Vec<Wanted> = vec![
            ("app".into(), "allowed_settings", "max_threads".into()),
            ("app".into(), "allowed_settings", "enable_analyzer".into()),
            ("app".into(), "settings", "max_memory_usage".into()),
        ];
        let known: BTreeSet<String> = ["max_threads", "max_memory_usage"].iter().map(|s| s.to_string()).collect();
        let found: Vec<&str> = unknown(&wanted, &known).iter().map(|w| w.2.as_str()).collect();
        assert_eq!(found, ["enable_analyzer"], "18.16 has no enable_analyzer");
    }
}
