//! The crate's error type. Every message is one line that says what went
//! wrong and, where there is one, how to fix it.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while starting, querying or stopping a local server.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// No `clickhouse-server` binary could be found.
    #[error("clickhouse-server not found on PATH or at /usr/sbin/clickhouse-server; run scripts/install-deps or set ServerSpec::binary")]
    BinaryNotFound,

    /// The binary given in `ServerSpec::binary` does not exist.
    #[error("clickhouse-server binary {0} does not exist; fix ServerSpec::binary or leave it unset to search PATH")]
    BinaryMissing(PathBuf),

    /// A filesystem or process operation failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done, e.g. "create directory /tmp/x".
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The self-signed TLS certificate could not be generated.
    #[error("cannot generate the self-signed TLS certificate: {0}")]
    Tls(String),

    /// A server recorded in the directory is already running.
    #[error("a clickhouse-server (pid {pid}) is already running in {dir}; run `chstorm local down --dir {dir}` first or use another directory")]
    AlreadyRunning {
        /// Pid of the running server.
        pid: u32,
        /// Its working directory.
        dir: PathBuf,
    },

    /// `restart` was called while the server is still running.
    #[error("clickhouse-server pid {0} is still running; call stop() or kill9() before restart()")]
    StillRunning(u32),

    /// A port was taken by another process.
    #[error("port already in use ({ports}) after {attempts} attempt(s); free the port(s) or leave the ports unset so free ones are picked")]
    PortInUse {
        /// The ports that were tried in the last attempt.
        ports: String,
        /// How many start attempts were made.
        attempts: u32,
    },

    /// The server process exited before it answered `/ping`.
    #[error("clickhouse-server exited during startup ({status}): {detail}; see {log}")]
    Exited {
        /// Exit status as text.
        status: String,
        /// Last error line of the server's logs, or a hint.
        detail: String,
        /// The log to read for the full story.
        log: PathBuf,
    },

    /// The server did not answer `/ping` in time.
    #[error("clickhouse-server did not answer {url}/ping within {timeout:?}: {detail}; see {log} or raise ServerSpec::startup_timeout")]
    StartupTimeout {
        /// The HTTP URL that was pinged.
        url: String,
        /// How long we waited.
        timeout: Duration,
        /// Last error line of the server's logs, or a hint.
        detail: String,
        /// The log to read for the full story.
        log: PathBuf,
    },

    /// The server did not exit after SIGTERM and SIGKILL.
    #[error("clickhouse-server pid {0} did not exit after SIGKILL; check it with `ps -p {0}`")]
    StopFailed(u32),

    /// The HTTP exchange with the server failed (connect, I/O, malformed answer).
    #[error("HTTP request to {url} failed: {detail}; is the server running? check with `chstorm local status`")]
    Http {
        /// The URL that was requested.
        url: String,
        /// What went wrong.
        detail: String,
    },

    /// The server answered a query with a non-200 status.
    #[error("query failed with HTTP {status}: {message}")]
    Query {
        /// HTTP status code.
        status: u16,
        /// First line of the response body (ClickHouse's exception text).
        message: String,
    },

    /// `DIR/chstorm-local.json` exists but cannot be parsed.
    #[error("cannot parse {path}: {detail}; delete the file if no server is running there")]
    InfoFile {
        /// Path of the info file.
        path: PathBuf,
        /// Parser message.
        detail: String,
    },

    /// A [`ClusterSpec`](crate::ClusterSpec) that cannot be started (no
    /// shards, no replicas, too many nodes).
    #[error("{0}")]
    InvalidCluster(String),

    /// The ZooKeeper of a replicated cluster cannot be found, started, reached or stopped.
    #[error("ZooKeeper: {0}")]
    ZooKeeper(String),

    /// One node of a local cluster failed; `source` says how.
    #[error("cluster node s{shard}r{replica}: {source}")]
    Node {
        /// 1-based shard number.
        shard: usize,
        /// 1-based replica number.
        replica: usize,
        /// What went wrong with that node.
        #[source]
        source: Box<LocalError>,
    },
}

impl LocalError {
    /// Wraps an I/O error with a short description of the failed action.
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        LocalError::Io { what: what.into(), source }
    }
}
