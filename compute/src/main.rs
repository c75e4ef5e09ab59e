//! The `compute` binary: the agent of one host, or of many fake hosts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use compute::config::ComputeConfig;
use compute::driver::fake::FakeHypervisor;
use compute::placement::{HttpPlacement, NoPlacement, Placement};
use fabric::config;

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "compute",
    about = "Run the compute agent of one host (or of many fake hosts)"
)]
struct Cli {
    /// TOML configuration file (COMPUTE_CONFIG also names one).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let cfg: ComputeConfig = config::load("COMPUTE", cli.config.as_deref())?;
    if cli.print_config {
        print!("{}", config::render(&cfg));
        return Ok(());
    }
    fabric::telemetry::init("compute", &cfg.telemetry)?;
    if cfg.compute.driver != "fake" {
        bail!(
            "compute.driver {:?} is not available: only \"fake\" is built (libvirt is a stub behind the `libvirt` feature)",
            cfg.compute.driver
        );
    }
    let bus = fabric::bus::connect(&cfg.bus.transport_url)
        .await
        .context("connect to the cell's bus")?;
    let mut _login = None;
    let placement: Arc<dyn Placement> = if cfg.placement.endpoint.is_empty() {
        tracing::warn!("no placement endpoint: inventory is not reported");
        Arc::new(NoPlacement)
    } else {
        let (token, kept) = fabric::login::service_token(&cfg.placement.token, &cfg.placement.auth)
            .await
            .context("log in for placement")?;
        _login = kept;
        Arc::new(HttpPlacement::with_token(&cfg.placement.endpoint, token)?)
    };
    let hv = FakeHypervisor::automatic(Duration::from_millis(cfg.compute.fake_spawn_latency_ms));
    let hosts: Vec<_> = cfg
        .hosts()
        .into_iter()
        .map(|h| {
            let driver = hv.driver(&h.host);
            compute::start_host(h, bus.clone(), driver, placement.clone())
        })
        .collect();
    tracing::info!(hosts = hosts.len(), "compute agents started");
    tokio::signal::ctrl_c().await?;
    for h in hosts {
        h.shutdown().await;
    }
    bus.close().await;
    Ok(())
}
