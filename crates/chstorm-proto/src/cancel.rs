//! Giving up on a query without leaving it running on the server.
//!
//! A client that stops waiting (a timeout, the end of a run, Ctrl-C) does not stop the query:
//! ClickHouse 18.16 notices neither a closed HTTP connection nor a closed native one while a
//! query computes (`SELECT count() FROM system.numbers` ran on for minutes), and current
//! releases notice a closed HTTP connection only with `cancel_http_readonly_queries_on_client_close`.
//! So chstorm cancels explicitly:
//!
//! * native protocol: the Cancel packet on the query's own connection
//!   ([`crate::native::NativeConn::cancel`]);
//! * HTTP: `KILL QUERY WHERE query_id = '...' ASYNC` on a separate connection
//!   ([`kill_over_http`]), by the `query_id` the client set on the query.
//!
//! Every query a load run or a comparison sends carries a recognisable query_id
//! (`chstorm-<run id>-<connection>-<n>`, compare: `chstorm-cmp-<run id>-<n>`) unless the user
//! set one with the `query_id` setting, which then wins ([`take_query_id_setting`]).

use crate::error::ProtoError;
use crate::http::{HttpConn, RequestHead};
use crate::stream::Connector;
use crate::target::Target;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Default bound on one cancellation (a KILL QUERY round trip, or the wait for the server to
/// stop a cancelled native query): 5 s.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// The setting name that names a query on both protocols (not a real setting: an HTTP URL
/// parameter, and a field of the native Query packet).
pub const QUERY_ID: &str = "query_id";

/// `KILL QUERY WHERE query_id = '<id>' ASYNC`, with the id quoted as a ClickHouse string.
pub fn kill_query_sql(query_id: &str) -> String {
    let mut quoted = String::with_capacity(query_id.len() + 2);
    for c in query_id.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            c => quoted.push(c),
        }
    }
    format!("KILL QUERY WHERE query_id = '{quoted}' ASYNC")
}

/// Sends `KILL QUERY WHERE query_id = '<id>' ASYNC` to `target` over a new HTTP connection,
/// without the target's settings (they are for the measured queries) but with its user and
/// database. The whole exchange, connecting included, is bounded by `timeout`.
pub async fn kill_over_http(
    connector: &Connector,
    target: &Target,
    query_id: &str,
    timeout: Duration,
) -> Result<(), ProtoError> {
    if !target.protocol.is_http() {
        return Err(ProtoError::InvalidTarget(format!("{target}: KILL QUERY is sent over HTTP only")));
    }
    let bare = Target { settings: Vec::new(), ..target.clone() };
    let head = RequestHead::query(&bare, &[], false);
    let sql = kill_query_sql(query_id);
    let exchange = async {
        let mut conn = HttpConn::connect(connector).await?;
        conn.send(&head, sql.as_bytes(), timeout).await.map(|_| ())
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| ProtoError::Timeout(timeout, "sending KILL QUERY"))?
}

/// Removes every `query_id` entry from `settings` and returns the last one's value: a query_id
/// the user gave (`--setting query_id=x`, `?query_id=x`) wins over chstorm's own.
pub fn take_query_id_setting(settings: &mut Vec<(String, String)>) -> Option<String> {
    let mut found = None;
    settings.retain(|(k, v)| {
        if k == QUERY_ID {
            found = Some(v.clone());
            false
        } else {
            true
        }
    });
    found
}

/// A short random id for one run (12 hex digits), part of every query_id of the run.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_sql_quotes_the_id() {
        assert_eq!(kill_query_sql("chstorm-ab-1"), "KILL QUERY WHERE query_id = 'chstorm-ab-1' ASYNC");
        assert_eq!(kill_query_sql(r"a'b\c"), r"KILL QUERY WHERE query_id = 'a\'b\\c' ASYNC");
    }

    #[test]
    fn the_users_query_id_wins_and_leaves_the_settings() {
        let mut s = vec![("max_threads".to_string(), "1".to_string()), ("query_id".to_string(), "mine".to_string())];
        assert_eq!(take_query_id_setting(&mut s).as_deref(), Some("mine"));
        assert_eq!(s, vec![("max_threads".to_string(), "1".to_string())]);
        assert_eq!(take_query_id_setting(&mut s), None);
    }

    #[test]
    fn run_ids_differ() {
        let (a, b) = (new_run_id(), new_run_id());
        assert_eq!(a.len(), 12);
        assert_ne!(a, b);
    }
}
