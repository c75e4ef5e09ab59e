//! The `loadtest` binary.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use loadtest::placement_load::{self, FleetSpec, Target};
use serde_json::json;

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Boot servers through the Compute API (an embedded region, or a
    /// running one), measure time-to-ACTIVE and the server list, delete
    /// everything and check that nothing leaked.
    Boot(Box<BootArgs>),
    /// Run a scenario file: fleet, target, phases and faults; write the
    /// JSON report and plots; exit non-zero when an invariant breaks or
    /// could not be checked (see --allow-unchecked).
    Run(RunArgs),
    /// Two runs of a scenario side by side (e.g. this region and a Nova
    /// deployment by URL): a table of every figure per phase with B / A,
    /// compare.json and plots.
    Compare(CompareArgs),
    /// Real guests on a region with libvirt hosts (scripts/region-libvirt.sh):
    /// POST to ACTIVE and to the guest's marker, cold and warm image cache,
    /// then many at once, and qemu's memory per guest.
    Guests(loadtest::guests::GuestsArgs),
    /// The machine's figures a run records before its load (fixed-loop
    /// calibration, cache probe), without running anything: to see how
    /// fast the machine is before benchmarking.
    Machine,
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// Run A: its report.json or its report directory.
    a: PathBuf,
    /// Run B: its report.json or its report directory.
    b: PathBuf,
    /// Names of the two runs in the table and plots (default `A`, `B`).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    labels: Option<Vec<String>>,
    /// Where to write compare.json and the plots (default `loadtest-compare`).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn compare(args: CompareArgs) -> Result<()> {
    use loadtest::compare;
    let a = compare::load(&args.a)?;
    let b = compare::load(&args.b)?;
    let labels = args
        .labels
        .unwrap_or_else(|| vec!["A".to_owned(), "B".to_owned()]);
    let c = compare::compare(&a, &b, &labels[0], &labels[1]);
    print!("{}", compare::table(&c));
    let dir = args
        .out
        .unwrap_or_else(|| PathBuf::from("loadtest-compare"));
    let files = compare::write(&c, &dir)?;
    println!("wrote {} files to {}", files.len(), dir.display());
    Ok(())
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The scenario (TOML).
    scenario: PathBuf,
    /// Where to write report.json and the plots (default
    /// `loadtest-report-<scenario name>`).
    #[arg(long)]
    report_dir: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// Exit 0 even when the no-leak invariants could not be checked (a
    /// URL target without administrator credentials); without it such a
    /// run fails. A broken invariant fails the run either way.
    #[arg(long)]
    allow_unchecked: bool,
}

async fn run(args: RunArgs) -> Result<()> {
    let s = loadtest::scenario::Scenario::load(&args.scenario)?;
    let dir = args
        .report_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("loadtest-report-{}", s.name)));
    let report =
        loadtest::runner::run(&s, &loadtest::runner::RunOptions { quiet: args.quiet }).await?;
    print!("{}", loadtest::report::summary(&report));
    loadtest::report::write(&report, &dir)?;
    println!("report and plots in {}", dir.display());
    if let Some(why) = report.failure(args.allow_unchecked) {
        anyhow::bail!(why);
    }
    Ok(())
}

#[derive(Debug, Args)]
struct BootArgs {
    /// Cells of the embedded region (besides cell0).
    #[arg(long, default_value_t = 2)]
    cells: u32,
    /// Fake hosts per cell of the embedded region.
    #[arg(long, default_value_t = 100)]
    hosts_per_cell: u32,
    /// How long a fake spawn takes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    fake_spawn_latency_ms: u64,
    /// The embedded region's data directory (default: a fresh temporary one,
    /// removed at the end unless --keep-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep the embedded region's data directory.
    #[arg(long)]
    keep_data: bool,
    /// Attach to a running Compute API (`http://host:8774` or https)
    /// instead of embedding a region; needs --identity-url and credentials.
    #[arg(long, requires = "identity_url")]
    compute_url: Option<String>,
    /// Identity (Keystone v3) of the running region.
    #[arg(long)]
    identity_url: Option<String>,
    /// Placement of the running region, for the invariants (default: from
    /// the catalog; the check needs an administrator).
    #[arg(long)]
    placement_url: Option<String>,
    /// User name (attached mode).
    #[arg(long, env = "OS_USERNAME")]
    username: Option<String>,
    /// Password (attached mode).
    #[arg(long, env = "OS_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Project name (attached mode).
    #[arg(long, env = "OS_PROJECT_NAME")]
    project: Option<String>,
    /// The user's domain, by name (attached mode).
    #[arg(long, env = "OS_USER_DOMAIN_NAME", default_value = "Default")]
    user_domain_name: String,
    /// The project's domain, by name (attached mode).
    #[arg(long, env = "OS_PROJECT_DOMAIN_NAME", default_value = "Default")]
    project_domain_name: String,
    /// A PEM bundle of CA certificates trusted besides the system's, for
    /// https endpoints (attached mode).
    #[arg(long, env = "OS_CACERT")]
    ca_file: Option<PathBuf>,
    /// Do not verify the https endpoints' certificates (attached mode;
    /// like `openstack --insecure`).
    #[arg(long)]
    insecure: bool,
    /// The Compute API microversion to ask for (2.37 or later).
    #[arg(long, default_value = loadtest::api::COMPUTE_MICROVERSION)]
    compute_microversion: String,
    /// Boot as the embedded region's `member` or `admin`.
    #[arg(long, default_value = "member")]
    as_user: String,
    /// Servers to boot.
    #[arg(long, default_value_t = 100)]
    servers: usize,
    /// Creates (and deletes) in flight.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Flavor name or id.
    #[arg(long, default_value = "m1.tiny")]
    flavor: String,
    /// Image name or id.
    #[arg(long, default_value = api_super::image::CIRROS_NAME)]
    image: String,
    /// Milliseconds between polls of the BUILD list.
    #[arg(long, default_value_t = 100)]
    poll_interval_ms: u64,
    /// Give up waiting for ACTIVE (and for the deletes) after this long.
    #[arg(long, default_value_t = 900)]
    timeout_secs: u64,
    /// Runs of `GET /servers/detail?limit=1000` to time (0: skip).
    #[arg(long, default_value_t = 50)]
    list_runs: usize,
    /// Delete every server at the end and check the invariants.
    #[arg(long)]
    delete: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// Write the JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
}

async fn boot(args: BootArgs) -> Result<()> {
    use loadtest::api::{self, Compute, Placement};
    use loadtest::boot::{self as scenario, BootSpec};

    let mut region = None;
    let mut metrics_before = None;
    let mut data_dir = None;
    let mut shape = json!(null);
    let t_start = Instant::now();
    loadtest::scenario::check_compute_microversion(
        "--compute-microversion",
        &args.compute_microversion,
    )?;
    // The system's trusted roots, plus --ca-file, or none (--insecure).
    let tls = loadtest::tls::Tls::new(args.ca_file.as_deref(), args.insecure)?;
    let (compute, placement, image_url) = match &args.compute_url {
        None => {
            let telemetry = fabric::telemetry::init(
                "loadtest",
                &fabric::config::TelemetryConfig {
                    log_filter: "warn".to_owned(),
                    ..Default::default()
                },
            )?;
            let dir = args
                .data_dir
                .clone()
                .unwrap_or_else(loadtest::embed::temp_data_dir);
            let spec = loadtest::embed::RegionSpec {
                cells: args.cells,
                hosts_per_cell: args.hosts_per_cell,
                fake_spawn_latency_ms: args.fake_spawn_latency_ms,
                data_dir: dir.clone(),
            };
            eprintln!(
                "starting an embedded region: {} cells x {} fake hosts, spawn {} ms, data in {}",
                spec.cells,
                spec.hosts_per_cell,
                spec.fake_spawn_latency_ms,
                dir.display()
            );
            let r = loadtest::embed::start(&spec, Some(telemetry.clone())).await?;
            eprintln!("region up in {:.1}s", t_start.elapsed().as_secs_f64());
            shape = json!({"embedded": true, "cells": spec.cells, "hosts_per_cell": spec.hosts_per_cell,
                "fake_spawn_latency_ms": spec.fake_spawn_latency_ms, "region_start_seconds": t_start.elapsed().as_secs_f64()});
            let identity_url = format!("http://{}", r.identity.addr);
            let creds = if args.as_user == "admin" {
                &r.admin
            } else {
                &r.member
            };
            let (token, _) = region::password_token(&identity_url, creds).await?;
            let (admin_token, _) = region::password_token(&identity_url, &r.admin).await?;
            let compute = Compute::new(&format!("http://{}", r.compute.addr), &token, &tls)?
                .with_microversion(&args.compute_microversion);
            let admin_compute =
                Compute::new(&format!("http://{}", r.compute.addr), &admin_token, &tls)?;
            api::lift_quotas_for(&tls, &admin_compute, &identity_url, &token).await?;
            let placement =
                Placement::new(&format!("http://{}", r.placement.addr), &admin_token, &tls)?;
            let image_url = r.image.url();
            metrics_before = Some((telemetry, String::new()));
            data_dir = Some(dir);
            region = Some(r);
            (compute, Some(placement), Some((image_url, token)))
        }
        Some(url) => {
            let identity_url =
                loadtest::api::identity_base(args.identity_url.as_deref().unwrap_or_default());
            for (what, u) in [
                ("--compute-url", Some(url)),
                ("--identity-url", Some(&identity_url)),
                ("--placement-url", args.placement_url.as_ref()),
            ] {
                if let Some(u) = u {
                    loadtest::scenario::check_endpoint_url(what, u)?;
                }
            }
            let creds = region::Credentials {
                username: args
                    .username
                    .clone()
                    .context("--username (or OS_USERNAME)")?,
                password: args
                    .password
                    .clone()
                    .context("--password (or OS_PASSWORD)")?,
                project: args
                    .project
                    .clone()
                    .context("--project (or OS_PROJECT_NAME)")?,
                password_file: None,
            };
            let login = fabric::login::ServiceCredentials {
                user_domain_name: args.user_domain_name.clone(),
                project_domain_name: args.project_domain_name.clone(),
                ..creds.service(&identity_url)
            };
            let token = api::password_login(&tls, &login)
                .await
                .with_context(|| format!("log in to {identity_url} as {}", creds.username))?;
            let placement_url = match &args.placement_url {
                Some(u) => Some(u.clone()),
                None => api::catalog_url(&tls, &identity_url, &token, "placement")
                    .await
                    .ok(),
            };
            let placement = match placement_url {
                Some(u) => {
                    let p = Placement::new(&u, &token, &tls)?;
                    match p.total_usage().await {
                        Ok(_) => Some(p),
                        Err(e) => {
                            eprintln!("placement invariants skipped: {e:#}");
                            None
                        }
                    }
                }
                None => None,
            };
            let image_url = api::catalog_url(&tls, &identity_url, &token, "image")
                .await
                .ok()
                .map(|u| (u, token.clone()));
            shape = json!({"embedded": false, "compute_url": url});
            let compute =
                Compute::new(url, &token, &tls)?.with_microversion(&args.compute_microversion);
            api::lift_quotas_for(&tls, &compute, &identity_url, &token).await?;
            (compute, placement, image_url)
        }
    };
    let image = match &image_url {
        Some((u, tok)) if uuid::Uuid::parse_str(&args.image).is_err() => {
            api::image_id_by_name(&tls, u, tok, &args.image).await?
        }
        _ => args.image.clone(),
    };
    let flavor = compute.flavor_id(&args.flavor).await?;
    let spec = BootSpec {
        servers: args.servers,
        concurrency: args.concurrency,
        flavor,
        image,
        name_prefix: format!("lt-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        active_timeout: Duration::from_secs(args.timeout_secs),
        list_runs: args.list_runs,
        delete: args.delete,
        progress: !args.quiet,
    };
    if let Some((t, before)) = metrics_before.as_mut() {
        *before = t.render();
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "booting {} servers, {} in flight (flavor {}, image {})",
        spec.servers, spec.concurrency, spec.flavor, spec.image
    );
    let target = scenario::Target { compute, placement };
    let report = scenario::run(&target, &spec).await?;
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let time_spent = metrics_before
        .as_ref()
        .map(|(t, before)| scenario::time_spent(before, &t.render()))
        .unwrap_or_default();
    print_summary(&report, &time_spent);
    if let Some(path) = &args.report {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let full = json!({
            "region": shape,
            "machine": {"cores": cores, "loadavg_before": load_before.trim(), "loadavg_after": load_after.trim()},
            "report": report,
            "invariants_hold": report.invariants_hold(),
            "time_spent": time_spent,
        });
        std::fs::write(path, serde_json::to_string_pretty(&full)?)?;
        println!("  report        {}", path.display());
    }
    if let Some(r) = region {
        r.shutdown().await;
    }
    if let (Some(dir), false) = (data_dir, args.keep_data || args.data_dir.is_some()) {
        std::fs::remove_dir_all(&dir).ok();
    }
    if !report.invariants_hold() {
        anyhow::bail!("invariants do not hold (see the summary above)");
    }
    Ok(())
}

fn print_summary(r: &loadtest::boot::BootReport, spent: &[loadtest::boot::TimeSpent]) {
    let b = &r.boot;
    println!(
        "boot: {} servers, {} in flight",
        r.spec.servers, r.spec.concurrency
    );
    println!(
        "  accepted      {:>6}  refused {:?}  ({:.0}/s over {:.1}s)",
        b.accepted, b.refused, b.accepts_per_second, b.submit_seconds
    );
    for s in &b.refusal_samples {
        println!("    refused: {s}");
    }
    println!(
        "  ACTIVE        {:>6}  ERROR {}  still BUILD {}  other {}",
        b.active, b.error, b.stuck_in_build, b.other
    );
    for f in &b.faults {
        println!("    fault x{}: {}", f.count, f.message);
    }
    println!(
        "  boots/s       {:>8.1}  (end to end: first POST to last ACTIVE, {:.1}s)",
        b.boots_per_second, b.seconds
    );
    let row = |name: &str, s: &loadtest::stats::Summary| {
        println!(
            "  {name:<13} p50 {:>8.1} ms  p95 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms  (n={})",
            s.p50_ms, s.p95_ms, s.p99_ms, s.max_ms, s.count
        );
    };
    row("POST -> 202", &b.accept_latency);
    row("to ACTIVE", &b.time_to_active);
    row("BUILD poll", &b.polls);
    if let Some(cpu) = r.boot_cpu_seconds {
        println!(
            "  CPU           {cpu:>8.1} s over {:.1}s of boots ({:.2} cores busy)",
            b.seconds,
            cpu / b.seconds.max(1e-9)
        );
    }
    if let Some(l) = &r.list {
        row(
            &format!("list {}/{}", l.page_size, l.servers_total),
            &l.latency,
        );
    }
    if let Some(d) = &r.delete {
        println!(
            "  delete        {:?}  all gone after {:.1}s ({:.0}/s), servers left {}",
            d.statuses, d.seconds_until_gone, d.deletes_per_second, d.servers_left
        );
        row("DELETE", &d.latency);
        if let Some(p) = &d.placement {
            println!(
                "  placement     usage before {:?}, peak {:?}, after {:?} over {} providers: {} (settled {} ms after)",
                p.usage_before,
                p.usage_peak,
                p.usage_after,
                p.providers,
                if p.released { "released" } else { "LEAKED" },
                p.settle_ms
            );
            if p.leaked > 0 {
                println!(
                    "    {} of our servers still hold allocations, e.g. {:?}",
                    p.leaked,
                    &p.leaked_consumers[..p.leaked_consumers.len().min(3)]
                );
            }
        }
    }
    if !spent.is_empty() {
        println!("  time spent in the region (histogram sums, boot + list + delete):");
        for t in spent.iter().take(15) {
            println!(
                "    {:>8.2} s  {:>7} x {:>8.2} ms  {}",
                t.total_seconds, t.count, t.mean_ms, t.series
            );
        }
    }
    println!(
        "  invariants    {}",
        if r.invariants_hold() {
            "hold"
        } else {
            "VIOLATED"
        }
    );
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
    /// A PEM bundle of CA certificates trusted besides the system's, for
    /// an https --url.
    #[arg(long, env = "OS_CACERT")]
    ca_file: Option<PathBuf>,
    /// Do not verify an https --url's certificate.
    #[arg(long)]
    insecure: bool,
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
        (None, Some(url)) => {
            loadtest::scenario::check_endpoint_url("--url", url)?;
            url.clone()
        }
        (None, None) => anyhow::bail!(
            "give --database URL (embedded placement) or --url URL (running placement)"
        ),
    };
    let tls = loadtest::tls::Tls::new(args.ca_file.as_deref(), args.insecure)?;
    let t = Target::new(&base, &args.token, &tls)?;
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
        Command::Boot(a) => boot(*a).await,
        Command::Run(a) => run(a).await,
        Command::Compare(a) => compare(a),
        Command::Guests(a) => loadtest::guests::run(a).await,
        Command::Machine => {
            let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
            println!(
                "{cores} cores, fixed-loop calibration {:.1} ms, cache probe {:.0} ns (lower is faster)",
                loadtest::machine::calibration_ms(),
                loadtest::machine::cache_probe_ns()
            );
            Ok(())
        }
    }
}
