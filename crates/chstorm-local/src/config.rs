//! Generation of `config.xml` and `users.xml` for ClickHouse 18.16.
//!
//! Layout of a server directory `DIR` (all paths absolute in the config):
//!
//! | path                      | what                                        |
//! |---------------------------|---------------------------------------------|
//! | `DIR/config.xml`          | server config (root element `<yandex>`)     |
//! | `DIR/users.xml`           | users, profiles and quotas                  |
//! | `DIR/log/`                | `server.log`, `server.err.log`, `stdout.log`|
//! | `DIR/data/`               | databases and tables                        |
//! | `DIR/tmp/`, `DIR/user_files/`, `DIR/format_schemas/` | scratch dirs     |
//! | `DIR/tls/`                | `server.crt`, `server.key` when TLS is on   |

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::LocalError;
use crate::users::ExtraUsersXml;

/// The ports one server listens on, all on 127.0.0.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ports {
    pub http: u16,
    pub tcp: u16,
    pub https: Option<u16>,
    pub tcp_tls: Option<u16>,
}

impl Ports {
    /// All ports as `name=port` pairs, for messages.
    pub fn describe(&self) -> String {
        let mut s = format!("http={} tcp={}", self.http, self.tcp);
        if let Some(p) = self.https {
            let _ = write!(s, " https={p}");
        }
        if let Some(p) = self.tcp_tls {
            let _ = write!(s, " tcp_tls={p}");
        }
        s
    }
}

/// Everything `config.xml` and `users.xml` depend on.
pub(crate) struct ConfigParams<'a> {
    pub dir: &'a Path,
    pub ports: Ports,
    /// Certificate and key paths; `Some` iff TLS is on.
    pub tls: Option<(&'a Path, &'a Path)>,
    pub keep_alive_timeout_s: u32,
    pub max_concurrent_queries: u32,
    pub extra_config_xml: Option<&'a str>,
    pub extra_profile_xml: Option<&'a str>,
    pub extra_users: Option<&'a ExtraUsersXml>,
}

/// Sub-directories created under the server directory.
const SUBDIRS: [&str; 6] = ["log", "data", "tmp", "user_files", "format_schemas", "tls"];

/// Path of `config.xml` in `dir`.
pub(crate) fn config_path(dir: &Path) -> PathBuf {
    dir.join("config.xml")
}

/// Path of the server's error log in `dir`.
pub(crate) fn error_log_path(dir: &Path) -> PathBuf {
    dir.join("log").join("server.err.log")
}

/// Path of the file that receives the server's stdout and stderr.
pub(crate) fn stdout_log_path(dir: &Path) -> PathBuf {
    dir.join("log").join("stdout.log")
}

/// Creates `dir` and its sub-directories.
pub(crate) fn create_dirs(dir: &Path) -> Result<(), LocalError> {
    for sub in SUBDIRS {
        let p = dir.join(sub);
        fs::create_dir_all(&p).map_err(|e| LocalError::io(format!("create directory {}", p.display()), e))?;
    }
    Ok(())
}

/// Writes `config.xml` and `users.xml` into `params.dir`, replacing old ones.
pub(crate) fn write_configs(params: &ConfigParams<'_>) -> Result<(), LocalError> {
    write_file(&config_path(params.dir), &config_xml(params))?;
    write_file(&params.dir.join("users.xml"), &users_xml(params.extra_profile_xml, params.extra_users))
}

fn write_file(path: &Path, text: &str) -> Result<(), LocalError> {
    fs::write(path, text).map_err(|e| LocalError::io(format!("write {}", path.display()), e))
}

/// Renders `config.xml`.
pub(crate) fn config_xml(p: &ConfigParams<'_>) -> String {
    let d = |sub: &str| xml_escape(&p.dir.join(sub).display().to_string());
    let mut x = String::with_capacity(2048);
    x.push_str("<?xml version=\"1.0\"?>\n<yandex>\n");
    let _ = writeln!(
        x,
        "  <logger><level>warning</level><log>{}</log><errorlog>{}</errorlog><console>0</console></logger>",
        d("log/server.log"),
        d("log/server.err.log"),
    );
    x.push_str("  <listen_host>127.0.0.1</listen_host>\n");
    let _ = writeln!(x, "  <http_port>{}</http_port>", p.ports.http);
    let _ = writeln!(x, "  <tcp_port>{}</tcp_port>", p.ports.tcp);
    if let Some(port) = p.ports.https {
        let _ = writeln!(x, "  <https_port>{port}</https_port>");
    }
    if let Some(port) = p.ports.tcp_tls {
        let _ = writeln!(x, "  <tcp_port_secure>{port}</tcp_port_secure>");
    }
    if let Some((cert, key)) = p.tls {
        let _ = writeln!(
            x,
            "  <openSSL><server><certificateFile>{}</certificateFile><privateKeyFile>{}</privateKeyFile>\
             <verificationMode>none</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>\
             <cacheSessions>true</cacheSessions><disableProtocols>sslv2,sslv3</disableProtocols>\
             <preferServerCiphers>true</preferServerCiphers></server></openSSL>",
            xml_escape(&cert.display().to_string()),
            xml_escape(&key.display().to_string()),
        );
    }
    let _ = writeln!(x, "  <keep_alive_timeout>{}</keep_alive_timeout>", p.keep_alive_timeout_s);
    let _ = writeln!(x, "  <max_concurrent_queries>{}</max_concurrent_queries>", p.max_concurrent_queries);
    // Trailing slashes matter to ClickHouse for these four.
    let _ = writeln!(x, "  <path>{}/</path>", d("data"));
    let _ = writeln!(x, "  <tmp_path>{}/</tmp_path>", d("tmp"));
    let _ = writeln!(x, "  <user_files_path>{}/</user_files_path>", d("user_files"));
    let _ = writeln!(x, "  <format_schema_path>{}/</format_schema_path>", d("format_schemas"));
    x.push_str(
        "  <users_config>users.xml</users_config>\n\
         \x20 <default_profile>default</default_profile>\n\
         \x20 <default_database>default</default_database>\n\
         \x20 <mark_cache_size>1073741824</mark_cache_size>\n\
         \x20 <query_log><database>system</database><table>query_log</table>\
         <flush_interval_milliseconds>1000</flush_interval_milliseconds></query_log>\n",
    );
    if let Some(extra) = p.extra_config_xml {
        x.push_str(extra);
        x.push('\n');
    }
    x.push_str("</yandex>\n");
    x
}

/// Renders `users.xml`: user `default` without password, reachable from
/// loopback only, with `log_queries=1`, and an unlimited quota; and `extra`'s users, profiles
/// and quotas beside them.
pub(crate) fn users_xml(extra_profile_xml: Option<&str>, extra: Option<&ExtraUsersXml>) -> String {
    let none = ExtraUsersXml::default();
    let extra = extra.unwrap_or(&none);
    format!(
        "<?xml version=\"1.0\"?>\n<yandex>\n \
         <profiles><default><log_queries>1</log_queries>{}</default><readonly><readonly>1</readonly></readonly>{}</profiles>\n \
         <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>\
         <profile>default</profile><quota>default</quota></default>{}</users>\n \
         <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>\
         <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default>{}</quotas>\n\
         </yandex>\n",
        extra_profile_xml.unwrap_or(""),
        extra.profiles,
        extra.users,
        extra.quotas,
    )
}

/// Escapes the characters that are special in XML text.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(dir: &Path) -> ConfigParams<'_> {
        ConfigParams {
            dir,
            ports: Ports { http: 1, tcp: 2, https: None, tcp_tls: None },
            tls: None,
            keep_alive_timeout_s: 3,
            max_concurrent_queries: 1000,
            extra_config_xml: None,
            extra_profile_xml: None,
            extra_users: None,
        }
    }

    #[test]
    fn config_has_ports_paths_and_extras() {
        let dir = Path::new("/tmp/a&b");
        let mut p = params(dir);
        p.extra_config_xml = Some("<remote_servers/>");
        let x = config_xml(&p);
        assert!(x.starts_with("<?xml version=\"1.0\"?>\n<yandex>\n"));
        assert!(x.contains("<http_port>1</http_port>"));
        assert!(x.contains("<tcp_port>2</tcp_port>"));
        assert!(!x.contains("https_port"));
        assert!(!x.contains("openSSL"));
        assert!(x.contains("<path>/tmp/a&amp;b/data/</path>"));
        assert!(x.contains("<keep_alive_timeout>3</keep_alive_timeout>"));
        assert!(x.contains("<remote_servers/>\n</yandex>"));
    }

    #[test]
    fn config_with_tls() {
        let dir = Path::new("/d");
        let (cert, key) = (dir.join("tls/server.crt"), dir.join("tls/server.key"));
        let mut p = params(dir);
        p.ports.https = Some(3);
        p.ports.tcp_tls = Some(4);
        p.tls = Some((&cert, &key));
        let x = config_xml(&p);
        assert!(x.contains("<https_port>3</https_port>"));
        assert!(x.contains("<tcp_port_secure>4</tcp_port_secure>"));
        assert!(x.contains("<certificateFile>/d/tls/server.crt</certificateFile>"));
        assert_eq!(p.ports.describe(), "http=1 tcp=2 https=3 tcp_tls=4");
    }

    #[test]
    fn users_profile_extra() {
        let x = users_xml(Some("<max_threads>2</max_threads>"), None);
        assert!(x.contains("<default><log_queries>1</log_queries><max_threads>2</max_threads></default>"));
        let extra = ExtraUsersXml { profiles: "<p/>".into(), users: "<u/>".into(), quotas: "<q/>".into() };
        let x = users_xml(None, Some(&extra));
        assert!(x.contains("</readonly><p/></profiles>") && x.contains("</default><u/></users>"), "{x}");
        assert!(x.contains("</default><q/></quotas>"), "{x}");
    }
}
