//! Target URLs.
//!
//! | scheme          | protocol              | default port |
//! |-----------------|-----------------------|--------------|
//! | `http://`       | HTTP interface        | 8123         |
//! | `https://`      | HTTP interface on TLS | 8443         |
//! | `clickhouse://` | native TCP protocol   | 9000         |
//! | `clickhouses://`| native protocol, TLS  | 9440         |
//!
//! A user and password in the URL are used for authentication and never printed: [`Target`]'s
//! `Display` shows the URL without the password. Query-string parameters are ClickHouse
//! settings, as on ClickHouse's own HTTP interface; `database` selects the database on both
//! protocols (on the native protocol the URL path `/db` does too).

use crate::error::ProtoError;
use std::fmt;

/// The wire protocol a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
    Native,
    NativeTls,
}

impl Protocol {
    /// Stable lower-case name used in JSON and CSV output.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Native => "native",
            Protocol::NativeTls => "native_tls",
        }
    }
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Https)
    }
    pub fn is_tls(self) -> bool {
        matches!(self, Protocol::Https | Protocol::NativeTls)
    }
    fn scheme(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Native => "clickhouse",
            Protocol::NativeTls => "clickhouses",
        }
    }
}

/// A parsed target URL.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    pub protocol: Protocol,
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    pub database: Option<String>,
    /// HTTP path, `/` by default.
    pub path: String,
    /// Settings from the query string, in order (minus `database`, `user`, `password`).
    pub settings: Vec<(String, String)>,
}

impl Target {
    /// Parses `scheme://[user[:password]@]host[:port][/path][?setting=value&...]`.
    pub fn parse(s: &str) -> Result<Target, ProtoError> {
        let bad = |why: &str| {
            ProtoError::InvalidTarget(format!(
                "{why} in '{}'; expected e.g. http://127.0.0.1:8123 or clickhouse://127.0.0.1:9000",
                redact_raw(s)
            ))
        };
        let url = url::Url::parse(s).map_err(|e| bad(&e.to_string()))?;
        let protocol = match url.scheme() {
            "http" => Protocol::Http,
            "https" => Protocol::Https,
            "clickhouse" | "tcp" => Protocol::Native,
            "clickhouses" => Protocol::NativeTls,
            other => {
                return Err(bad(&format!("unknown scheme '{other}' (use http, https, clickhouse or clickhouses)")))
            }
        };
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad("missing host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = url.port().unwrap_or(match protocol {
            Protocol::Http => 8123,
            Protocol::Https => 8443,
            Protocol::Native => 9000,
            Protocol::NativeTls => 9440,
        });
        let decode = |v: &str| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned();
        let mut user = (!url.username().is_empty()).then(|| decode(url.username()));
        let mut password = url.password().map(decode);
        let mut database = None;
        let mut settings = Vec::new();
        for (k, v) in url.query_pairs() {
            match &*k {
                "database" => database = Some(v.into_owned()),
                "user" => user = Some(v.into_owned()),
                "password" => password = Some(v.into_owned()),
                "" => return Err(bad("empty setting name in the query string")),
                _ => settings.push((k.into_owned(), v.into_owned())),
            }
        }
        let mut path = url.path().to_string();
        if path.is_empty() {
            path.push('/');
        }
        if !protocol.is_http() {
            let db = path.trim_matches('/');
            if !db.is_empty() {
                database.get_or_insert_with(|| db.to_string());
            }
            path = "/".into();
        }
        Ok(Target { protocol, host, port, user, password, database, path, settings })
    }

    /// Fills user and password from `CLICKHOUSE_USER` / `CLICKHOUSE_PASSWORD` when the URL has
    /// none.
    pub fn with_env_credentials(mut self) -> Target {
        if self.user.is_none() {
            self.user = std::env::var("CLICKHOUSE_USER").ok().filter(|u| !u.is_empty());
        }
        if self.password.is_none() {
            self.password = std::env::var("CLICKHOUSE_PASSWORD").ok().filter(|p| !p.is_empty());
        }
        self
    }

    /// `host:port`, with brackets around IPv6 literals.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// True when the host is a loopback address or `localhost`.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
    }
}

impl fmt::Display for Target {
    /// The URL with the password left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.protocol.scheme())?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        write!(f, "{}", self.authority())?;
        if self.protocol.is_http() {
            write!(f, "{}", self.path)?;
        } else if let Some(db) = &self.database {
            write!(f, "/{db}")?;
        }
        let mut sep = '?';
        if self.protocol.is_http() {
            if let Some(db) = &self.database {
                write!(f, "{sep}database={db}")?;
                sep = '&';
            }
        }
        for (k, v) in &self.settings {
            write!(f, "{sep}{k}={v}")?;
            sep = '&';
        }
        Ok(())
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

/// Best-effort removal of a password from a raw URL string, for error messages about URLs that
/// did not parse.
fn redact_raw(s: &str) -> String {
    match (s.find("://"), s.rfind('@')) {
        (Some(i), Some(at)) if at > i => {
            let creds = &s[i + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &s[..i + 3], &creds[..c], &s[at..]),
                None => s.to_string(),
            }
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_schemes_with_default_ports() {
        for (url, proto, port) in [
            ("http://h", Protocol::Http, 8123),
            ("https://h", Protocol::Https, 8443),
            ("clickhouse://h", Protocol::Native, 9000),
            ("clickhouses://h", Protocol::NativeTls, 9440),
        ] {
            let t = Target::parse(url).unwrap();
            assert_eq!((t.protocol, t.port), (proto, port), "{url}");
        }
    }

    #[test]
    fn settings_credentials_and_redaction() {
        let t = Target::parse("http://bob:s3cret@127.0.0.1:18123/?max_threads=1&database=db1").unwrap();
        assert_eq!(t.user.as_deref(), Some("bob"));
        assert_eq!(t.password.as_deref(), Some("s3cret"));
        assert_eq!(t.database.as_deref(), Some("db1"));
        assert_eq!(t.settings, vec![("max_threads".into(), "1".into())]);
        let shown = t.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(shown, "http://bob@127.0.0.1:18123/?database=db1&max_threads=1");
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn native_path_is_database() {
        let t = Target::parse("clickhouse://[::1]:9001/metrics").unwrap();
        assert_eq!(t.database.as_deref(), Some("metrics"));
        assert_eq!(t.authority(), "[::1]:9001");
        assert!(t.is_loopback());
    }

    #[test]
    fn bad_urls_name_the_problem_without_the_password() {
        let e = Target::parse("ftp://u:pw@h").unwrap_err().to_string();
        assert!(e.contains("unknown scheme 'ftp'"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
        assert!(Target::parse("127.0.0.1:8123").is_err());
        assert!(Target::parse("http://").is_err());
    }
}
