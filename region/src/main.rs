//! The `region` binary: the all-in-one region on the embedded default.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use region::{Region, RegionConfig};

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line of the all-in-one region.
#[derive(Debug, Parser)]
#[command(
    name = "region",
    about = "Run a whole region in one process, on the embedded default or on PostgreSQL and RabbitMQ"
)]
struct Cli {
    /// TOML configuration file (see docs/CONFIG.md; REGION_CONFIG also names one).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Start everything, report, and exit instead of serving until Ctrl-C.
    #[arg(long)]
    once: bool,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let cfg: RegionConfig = fabric::config::load("REGION", cli.config.as_deref())?;
    if cli.print_config {
        print!("{}", fabric::config::render(&cfg));
        return Ok(());
    }
    let telemetry = fabric::telemetry::init("region", &cfg.telemetry)?;
    if cfg.region.on_postgres() || !cfg.region.transport_url.is_empty() {
        println!(
            "region: databases on {}, buses on {}, files in {}",
            if cfg.region.on_postgres() {
                "PostgreSQL"
            } else {
                "SQLite"
            },
            if cfg.region.transport_url.is_empty() {
                "in-process"
            } else {
                "RabbitMQ"
            },
            cfg.region.data_dir.display()
        );
    } else {
        println!(
            "region: embedded default in {}",
            cfg.region.data_dir.display()
        );
    }
    let region = Region::start(&cfg, Some(telemetry)).await?;
    let scheme = region.scheme;
    println!("  identity  {}/v3", region.identity_url());
    println!("  placement {} (identity tokens)", region.placement_url());
    println!(
        "  compute   {} (flavors m1.tiny … m1.xlarge)",
        region.compute_url()
    );
    println!(
        "  image     {} (image {})",
        region.image_url(),
        api_super::image::CIRROS_NAME
    );
    let ws = if scheme == "https" { "wss" } else { "ws" };
    if let Some(p) = region.compute.serial_proxy {
        println!("  consoles  {ws}://{p}/ (serial console proxy)");
    }
    if let Some(p) = region.compute.novnc_proxy {
        println!("  consoles  {scheme}://{p}/vnc_lite.html (noVNC proxy)");
    }
    let db_kind = if cfg.region.on_postgres() {
        "postgresql"
    } else {
        "sqlite"
    };
    let hosts = if cfg.region.compute_driver == "libvirt" {
        format!("libvirt hosts ({})", cfg.region.libvirt.connection_uri)
    } else {
        "fake hosts".to_owned()
    };
    for c in &region.cells {
        println!(
            "  {:<9} {db_kind} with {} {hosts}, conductor up, bus {}",
            c.name,
            c.hosts.len(),
            cell_mapping::url::mask(&c.bus_url)
        );
    }
    if !cfg.telemetry.metrics_listen.is_empty() {
        println!(
            "  metrics   http://{}/metrics",
            cfg.telemetry.metrics_listen
        );
    }
    println!();
    println!("# as the admin:");
    print!("{}", region.openrc(&region.admin));
    println!("# as a member (project {}):", region.member.project);
    print!("{}", region.openrc(&region.member));
    if cli.once {
        region.shutdown().await;
        return Ok(());
    }
    println!("region is up; Ctrl-C stops it");
    tokio::signal::ctrl_c().await?;
    region.shutdown().await;
    Ok(())
}
