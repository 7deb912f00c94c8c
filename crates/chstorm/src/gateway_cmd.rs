//! `chstorm gateway --config FILE [--check]`.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
#[command(after_long_help = "The config is YAML; docs/gateway.example.yaml documents every key, and
`chstorm local up --shards 2 --replicas 2 --dir D` writes a working D/gateway.yaml.

Endpoints: ClickHouse's HTTP interface with its paths (/, /ping, /replicas_status from the gateway's
health view, queries on any path), /metrics (Prometheus; for users with `metrics: true`, or on
`metrics_listen` instead when set); ClickHouse's native protocol on `listen_native`, and over TLS
on `listen_native_secure`. Each user's queries run as its `backend` ClickHouse user (its password
inline or from `password_env`, an environment variable of this process), else as its cluster's.
Signals: SIGHUP reloads the config (a bad file keeps the running one), SIGTERM/SIGINT stop
gracefully (queries in flight finish, HTTP and native alike; docs/GATEWAY.md).
Under systemd (Type=notify): READY=1 once listening and the first health round is done,
RELOADING=1 then READY=1 around a reload, STOPPING=1 at the drain, WATCHDOG=1 at half
WATCHDOG_USEC. The unit: deploy/chstorm-gateway.service; docs/GATEWAY.md, \"Operating\".")]
pub struct GatewayArgs {
    /// The gateway's YAML config.
    #[arg(long)]
    pub config: PathBuf,
    /// Only validate the config, print a one-line verdict and exit (0 valid, 2 invalid).
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: GatewayArgs) -> anyhow::Result<i32> {
    let cfg = chstorm_gateway::Config::load(&args.config)?;
    if args.check {
        let shards: usize = cfg.clusters.values().map(|c| c.shards.len()).sum();
        println!(
            "{}: ok ({} cluster(s), {} shard(s), {} user(s), listen {})",
            args.config.display(),
            cfg.clusters.len(),
            shards,
            cfg.users.len(),
            cfg.listen
        );
        return Ok(0);
    }
    // The connections are served on the gateway's worker threads (`workers`); this runtime only
    // accepts, checks health and polls budgets.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        // SIGHUP and SIGTERM are taken before the gateway says it listens.
        let signals = chstorm_gateway::Signals::take()?;
        let gw = chstorm_gateway::Gateway::start(args.config.clone()).await?;
        // Not eprintln!, which panics when stderr is a pipe whose reader has gone: the gateway
        // serves on without its log (chstorm_gateway's `log`).
        let line = format!("chstorm gateway: listening on http://{} (config {})\n", gw.addr, args.config.display());
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        gw.run_until_signal(signals).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}
