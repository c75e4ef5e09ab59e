//! `region`: the all-in-one launcher.
//!
//! Starts a whole region in one process on the embedded default: SQLite files
//! in a data directory and the in-process bus. It depends on every service
//! crate; no service crate depends on it.
//!
//! Today it starts what exists (databases brought up to date, each cell's bus
//! checked with a call round trip, Prometheus metrics) and prints, honestly,
//! which services are not built yet.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use fabric::bus::{self, Transport};
use fabric::config::{self, TelemetryConfig};
use fabric::wire::Envelope;
use migrations::Kind;
use serde::{Deserialize, Serialize};

/// Command line of the all-in-one region.
#[derive(Debug, Parser)]
#[command(
    name = "region",
    about = "Run a whole region in one process on the embedded default"
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

/// The `[region]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RegionSection {
    /// Directory holding one SQLite file per database.
    data_dir: PathBuf,
    /// Number of cells besides cell0.
    cells: u32,
    /// Address of the placement API.
    placement_listen: String,
}

impl Default for RegionSection {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("data"),
            cells: 2,
            placement_listen: "127.0.0.1:8778".to_owned(),
        }
    }
}

/// The region's configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RegionConfig {
    region: RegionSection,
    telemetry: TelemetryConfig,
}

impl Default for RegionConfig {
    fn default() -> Self {
        Self {
            region: RegionSection::default(),
            telemetry: TelemetryConfig {
                metrics_listen: "127.0.0.1:9180".to_owned(),
                log_filter: "warn,region=info".to_owned(),
                ..Default::default()
            },
        }
    }
}

fn sqlite_url(dir: &Path, name: &str) -> String {
    format!("sqlite://{}/{name}.sqlite?mode=rwc", dir.display())
}

/// Answers `ping` calls on the cell's `region.selfcheck` queue, then checks
/// the bus with one call round trip.
async fn check_bus(bus: &dyn Transport) -> Result<Duration> {
    let mut sub = bus.consume("region.selfcheck").await?;
    let responder = tokio::spawn(async move {
        if let Some(d) = sub.recv().await {
            let reply = d.envelope().reply(b"pong".to_vec());
            let _ = d.reply(reply).await;
        }
    });
    let started = Instant::now();
    let reply = bus
        .call(
            "region.selfcheck",
            Envelope::new("ping"),
            Duration::from_secs(5),
        )
        .await
        .context("bus self-check call")?;
    responder.abort();
    if reply.payload.as_ref() != b"pong" {
        bail!("bus self-check answered {:?}", reply.payload);
    }
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let cfg: RegionConfig = config::load("REGION", cli.config.as_deref())?;
    if cli.print_config {
        print!("{}", config::render(&cfg));
        return Ok(());
    }
    let telemetry = fabric::telemetry::init("region", &cfg.telemetry)?;
    let dir = &cfg.region.data_dir;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("create data directory {}", dir.display()))?;

    println!("region: embedded default in {}", dir.display());
    let mut dbs = vec![
        ("api", Kind::Api),
        ("placement", Kind::Placement),
        ("cell0", Kind::Cell),
    ];
    let cell_names: Vec<String> = (1..=cfg.region.cells).map(|i| format!("cell{i}")).collect();
    for name in &cell_names {
        dbs.push((name.as_str(), Kind::Cell));
    }
    for (name, kind) in dbs {
        let url = sqlite_url(dir, name);
        let applied = migrations::migrate(kind, &url)
            .await
            .with_context(|| format!("bring the {name} database up to date"))?;
        println!(
            "  database {name:<10} {:<9} schema version {} ({} applied now)",
            kind.as_str(),
            applied.version,
            applied.applied.len()
        );
    }
    let mut buses = Vec::new();
    for name in &cell_names {
        let bus = bus::connect(&format!("inproc://{name}")).await?;
        let rtt = check_bus(bus.as_ref()).await?;
        println!(
            "  bus      {name:<10} inproc://{name} call round trip {} µs",
            rtt.as_micros()
        );
        buses.push(bus);
    }
    let placement_cfg = placement::PlacementConfig {
        listen: cfg.region.placement_listen.clone(),
        auth_strategy: "noauth2".to_owned(),
        identity_url: String::new(),
        database: placement::config::DatabaseConfig {
            connection: sqlite_url(dir, "placement"),
            max_connections: 1,
        },
        telemetry: cfg.telemetry.clone(),
    };
    let placement = placement::serve(&placement_cfg, Some(telemetry.clone())).await?;
    println!(
        "  placement http://{} (auth: noauth2 until identity exists)",
        placement.addr
    );
    if !cfg.telemetry.metrics_listen.is_empty() {
        println!("  metrics  http://{}/metrics", cfg.telemetry.metrics_listen);
    }
    println!("not built yet (see the open issues): identity :5000,");
    println!("  Compute API :8774, image service :9292, cell conductors, fake computes.");
    if cli.once {
        return Ok(());
    }
    println!("region is up; Ctrl-C stops it");
    tokio::signal::ctrl_c().await?;
    for b in buses {
        b.close().await;
    }
    Ok(())
}
