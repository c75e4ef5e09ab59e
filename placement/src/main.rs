//! The `placement` binary: the placement API standalone.

use std::path::PathBuf;

use clap::Parser;
use placement::PlacementConfig;

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "placement", about = "OpenStack-Placement-compatible API")]
struct Cli {
    /// TOML configuration file (PLACEMENT_CONFIG also names one).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Database URL (overrides database.connection).
    #[arg(long)]
    database: Option<String>,
    /// Address to listen on (overrides listen).
    #[arg(long)]
    listen: Option<String>,
    /// Authentication strategy (overrides auth_strategy): noauth2.
    #[arg(long)]
    auth_strategy: Option<String>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut cfg: PlacementConfig = fabric::config::load("PLACEMENT", cli.config.as_deref())?;
    if let Some(d) = cli.database {
        cfg.database.connection = d;
    }
    if let Some(l) = cli.listen {
        cfg.listen = l;
    }
    if let Some(a) = cli.auth_strategy {
        cfg.auth_strategy = a;
    }
    if cli.print_config {
        print!("{}", fabric::config::render(&cfg));
        return Ok(());
    }
    let telemetry = fabric::telemetry::init("placement", &cfg.telemetry)?;
    cfg.tls.apply()?;
    let running = placement::serve(&cfg, Some(telemetry)).await?;
    println!("placement listening on http://{}", running.addr);
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        r = running.task => { r?; }
    }
    Ok(())
}
