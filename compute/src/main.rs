//! The `compute` binary: the agent of one host, or of many fake hosts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use compute::config::ComputeConfig;
use compute::driver::fake::FakeHypervisor;
use compute::driver::libvirt::images::GlanceImages;
use compute::driver::libvirt::LibvirtDriver;
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
    cfg.tls.apply()?;
    if cfg.placement.auth.is_set() {
        cfg.placement.auth.check().context("[placement.auth]")?;
    }
    if !matches!(cfg.compute.driver.as_str(), "fake" | "libvirt") {
        bail!(
            "compute.driver {:?} is not a driver: fake or libvirt",
            cfg.compute.driver
        );
    }
    if cfg.compute.driver == "libvirt" && cfg.compute.fake_hosts > 1 {
        bail!("compute.fake_hosts is for the fake driver: a libvirt agent runs one host");
    }
    let bus = fabric::bus::connect(&cfg.bus.transport_url)
        .await
        .context("connect to the cell's bus")?;
    let (token, _login) = fabric::login::service_token(&cfg.placement.token, &cfg.placement.auth)
        .await
        .context("log in for placement and images")?;
    let placement: Arc<dyn Placement> = if cfg.placement.endpoint.is_empty() {
        tracing::warn!("no placement endpoint: inventory is not reported");
        Arc::new(NoPlacement)
    } else {
        Arc::new(HttpPlacement::with_token(
            &cfg.placement.endpoint,
            token.clone(),
        )?)
    };
    let hosts: Vec<_> = if cfg.compute.driver == "libvirt" {
        if cfg.image.endpoint.is_empty() {
            bail!("the libvirt driver needs [image] endpoint (the image service's URL)");
        }
        let images = GlanceImages::new(
            &cfg.image.endpoint,
            token,
            Duration::from_secs(cfg.libvirt.image_download_timeout_secs.max(1)),
        )?;
        let driver = LibvirtDriver::connect(cfg.libvirt.clone(), Arc::new(images))?;
        // Runs for the life of the process.
        let _ageing = driver.start_image_ageing();
        cfg.hosts()
            .into_iter()
            .map(|h| {
                compute::start_host(h, bus.clone(), Arc::new(driver.clone()), placement.clone())
            })
            .collect()
    } else {
        let hv =
            FakeHypervisor::automatic(Duration::from_millis(cfg.compute.fake_spawn_latency_ms));
        cfg.hosts()
            .into_iter()
            .map(|h| {
                let driver = hv.driver(&h.host);
                compute::start_host(h, bus.clone(), driver, placement.clone())
            })
            .collect()
    };
    tracing::info!(hosts = hosts.len(), "compute agents started");
    tokio::signal::ctrl_c().await?;
    for h in hosts {
        h.shutdown().await;
    }
    bus.close().await;
    Ok(())
}
