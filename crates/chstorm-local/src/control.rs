//! `status` and `down` for servers recorded in a directory, possibly started
//! by another process (`chstorm local up`).

use std::path::Path;
use std::time::Duration;

use crate::error::LocalError;
use crate::http::ping;
use crate::process::{stop_pid, STOP_GRACE};
use crate::procfs::is_server_of;
use crate::state;
use crate::ServerInfo;

/// Timeout of the `/ping` that [`status`] sends.
const STATUS_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The server recorded in `DIR/chstorm-local.json`, if its pid is alive, is
/// the clickhouse-server of `dir`, and answers `/ping` within 2 s. `Ok(None)`
/// when the directory or the record is missing or the server is down, and
/// for a cluster directory, which has no server of its own (see
/// [`cluster_status`](crate::cluster_status)).
pub fn status(dir: &Path) -> Result<Option<ServerInfo>, LocalError> {
    let Some(dir) = state::existing_dir(dir)? else { return Ok(None) };
    let Some(info) = state::read_info(&dir)? else { return Ok(None) };
    let up = is_server_of(info.pid, &dir) && ping(&info.http_url, STATUS_PING_TIMEOUT);
    Ok(up.then_some(info))
}

/// Stops the server recorded in `dir` (SIGTERM, up to 10 s, SIGKILL) and
/// removes the record files. `Ok(false)` if none is running.
///
/// The pid comes from `DIR/chstorm-local.json`, else `DIR/clickhouse-server.pid`.
/// It is signalled only if `/proc` shows a `clickhouse*` process whose command
/// line has `--config-file=DIR/config.xml`, so a pid reused by another
/// process is never killed. A stale record is removed.
///
/// A cluster directory (`DIR/cluster.json`, nodes in `DIR/s{S}r{R}/`) is
/// handled too: every node is stopped that way, in parallel, and
/// `cluster.json` is removed. `Ok(true)` if any server was running.
pub fn down(dir: &Path) -> Result<bool, LocalError> {
    let Some(dir) = state::existing_dir(dir)? else { return Ok(false) };
    let mut stopped = false;
    if let Some(pid) = state::recorded_pid(&dir)? {
        stopped = stop_pid(pid, &dir, STOP_GRACE)?;
        state::remove(&dir)?;
    }
    let nodes_stopped = crate::cluster::down_nodes(&dir)?;
    Ok(stopped || nodes_stopped)
}
