//! The `loadtest` binary.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use loadtest::placement_load::{self, FleetSpec, Target};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(name = "loadtest", about = "Load generator and macro-benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Seed a fleet of providers in placement, then measure claims and
    /// allocation candidates.
    Placement(PlacementArgs),
}

#[derive(Debug, Args)]
struct PlacementArgs {
    /// Run an embedded placement on this database URL (postgres://… or
    /// sqlite://…; it should be empty).
    #[arg(long, conflicts_with = "url")]
    database: Option<String>,
    /// Or attach to a running placement at this URL.
    #[arg(long)]
    url: Option<String>,
    /// Token to send (`admin` under noauth2).
    #[arg(long, default_value = "admin")]
    token: String,
    /// Providers to seed.
    #[arg(long, default_value_t = 1000)]
    providers: usize,
    /// Concurrent claimers.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of claiming.
    #[arg(long, default_value_t = 10)]
    claim_seconds: u64,
    /// Runs of each candidates query (0: skip).
    #[arg(long, default_value_t = 200)]
    candidate_iterations: usize,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
}

async fn placement(args: PlacementArgs) -> Result<()> {
    let mut embedded = None;
    let base = match (&args.database, &args.url) {
        (Some(db), _) => {
            let cfg = placement::PlacementConfig {
                listen: "127.0.0.1:0".to_owned(),
                database: placement::config::DatabaseConfig {
                    connection: db.clone(),
                    max_connections: 32,
                },
                ..Default::default()
            };
            let running = placement::serve(&cfg, None).await?;
            let base = format!("http://{}", running.addr);
            embedded = Some(running);
            base
        }
        (None, Some(url)) => url.clone(),
        (None, None) => anyhow::bail!(
            "give --database URL (embedded placement) or --url URL (running placement)"
        ),
    };
    let t = Target::new(&base, &args.token)?;
    let spec = FleetSpec {
        providers: args.providers,
        trait_every: 10,
        aggregate_size: 50,
    };
    eprintln!("seeding {} providers at {base}", spec.providers);
    let t0 = Instant::now();
    let fleet = placement_load::seed(&t, &spec, 32).await?;
    let seed_seconds = t0.elapsed().as_secs_f64();
    eprintln!("seeded in {seed_seconds:.1}s");
    let memory = embedded.as_ref().map(|r| {
        let bytes = r.placement.with_index(|ix| ix.heap_bytes());
        json!({"index_bytes": bytes, "bytes_per_provider": bytes as f64 / spec.providers.max(1) as f64})
    });
    let candidates = if args.candidate_iterations > 0 {
        eprintln!("candidates: {} runs per query", args.candidate_iterations);
        placement_load::candidates(
            &t,
            &placement_load::standard_queries(&fleet),
            args.candidate_iterations,
        )
        .await?
    } else {
        Vec::new()
    };
    eprintln!(
        "claims: {} claimers for {}s",
        args.concurrency, args.claim_seconds
    );
    let claims = placement_load::claims(
        &t,
        &fleet,
        args.concurrency,
        Duration::from_secs(args.claim_seconds),
    )
    .await?;

    println!(
        "placement load test: {} providers, seeded in {seed_seconds:.1}s",
        spec.providers
    );
    for c in &candidates {
        println!(
            "  candidates {:<10} p50 {:>7.2} ms  p99 {:>7.2} ms  ({} candidates, {} runs)",
            c.name, c.latency.p50_ms, c.latency.p99_ms, c.candidates, c.latency.count
        );
    }
    println!(
        "  claims     {:>8.0}/s with {} claimers  p50 {:.2} ms  p99 {:.2} ms  ({} claims, {} answered 409)",
        claims.claims_per_second, claims.concurrency, claims.latency.p50_ms, claims.latency.p99_ms, claims.claims, claims.conflicts
    );
    if let Some(m) = &memory {
        println!(
            "  index      {:.0} bytes per provider",
            m["bytes_per_provider"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(path) = args.report {
        let report = json!({"fleet": spec, "seed_seconds": seed_seconds, "candidates": candidates, "claims": claims, "memory": memory});
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
        println!("  report     {}", path.display());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Placement(a) => placement(a).await,
    }
}
