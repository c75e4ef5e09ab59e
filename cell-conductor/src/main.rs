//! The `cell-conductor` binary: one conductor of one cell.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cell_conductor::config::ConductorConfig;
use cell_conductor::{ConductorOptions, HttpPlacement, NoPlacement, PlacementClient};
use clap::Parser;
use fabric::config;

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "cell-conductor", about = "Run the conductor of one cell")]
struct Cli {
    /// TOML configuration file (CELL_CONDUCTOR_CONFIG also names one).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let cfg: ConductorConfig = config::load("CELL_CONDUCTOR", cli.config.as_deref())?;
    if cli.print_config {
        print!("{}", config::render(&cfg));
        return Ok(());
    }
    fabric::telemetry::init("cell-conductor", &cfg.telemetry)?;
    cfg.tls.apply()?;
    if cfg.placement.auth.is_set() {
        cfg.placement.auth.check().context("[placement.auth]")?;
    }
    let bus = fabric::bus::connect(&cfg.bus.transport_url)
        .await
        .context("connect to the cell's bus")?;
    let mut _login = None;
    let placement: Arc<dyn PlacementClient> = if cfg.placement.endpoint.is_empty() {
        tracing::warn!("no placement endpoint: reschedules cannot move claims");
        Arc::new(NoPlacement)
    } else {
        let (token, kept) = fabric::login::service_token(&cfg.placement.token, &cfg.placement.auth)
            .await
            .context("log in for placement")?;
        _login = kept;
        Arc::new(HttpPlacement::with_token(&cfg.placement.endpoint, token)?)
    };
    let mut opts = ConductorOptions::new(&cfg.database.connection, bus.clone());
    opts.placement = placement;
    opts.host = cfg.conductor.host.clone();
    opts.concurrency = cfg.conductor.concurrency;
    opts.max_connections = cfg.database.max_connections;
    opts.report_interval = Duration::from_secs(cfg.conductor.report_interval_secs.max(1));
    opts.liveness_flush = Duration::from_millis(cfg.conductor.heartbeat_flush_ms.max(100));
    opts.heal.interval = Duration::from_secs(cfg.conductor.heal_interval_secs);
    opts.heal.service_down_time = Duration::from_secs(cfg.conductor.service_down_time_secs.max(1));
    opts.heal.build_timeout = Duration::from_secs(cfg.conductor.instance_build_timeout_secs);
    opts.heal.audit_interval = Duration::from_secs(cfg.conductor.placement_audit_interval_secs);
    opts.heal.delete_resend = Duration::from_secs(cfg.conductor.delete_resend_secs);
    let handle = cell_conductor::run_with(opts)
        .await
        .context("start the cell conductor")?;
    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    bus.close().await;
    Ok(())
}
