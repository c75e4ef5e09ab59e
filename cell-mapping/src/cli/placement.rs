//! `cell-manage placement audit` and `cell-manage placement
//! heal-allocations`, with `nova-manage placement`'s options, meanings and
//! exit codes.
//!
//! nova-manage reads every cell database and placement itself. Here each
//! cell's conductor does the work (`placement_audit`, `heal_allocations`
//! calls over the cell's bus): it owns the cell database and a placement
//! client, it runs the same reconciliation on its own every
//! `placement_audit_interval_secs`, and the cells work at once instead of
//! one after the other. The command only gathers their answers; a cell
//! whose conductor does not answer is named and fails the command.
//! Cells on the embedded region's in-process bus cannot be reached from
//! another process: the command says so (their conductor audits them on
//! its own).

use std::time::Duration;

use clap::{Args, Subcommand};
use fabric::rpc::{self, finding, RequestIds, CONDUCTOR_QUEUE};
use prost::Message;

use crate::db::{ApiDb, CellMapping, InstanceMappingState};
use crate::url::{mask, validate_transport_url, TransportKind};
use crate::Error;

use super::{fail, Ctx, EXIT_UNEXPECTED};

/// `placement` commands.
#[derive(Debug, Subcommand)]
pub enum PlacementCmd {
    /// Find (and with --delete remove) orphaned allocations: consumers on a
    /// compute node's provider that are no live instance of its cell, and
    /// instances' allocations on a node other than their own. Exit codes:
    /// 0 nothing found, 1 an unexpected error (a cell not answering), 3
    /// found, 4 every one found deleted (or moved to the instance's node),
    /// 127 invalid input.
    Audit {
        /// Print every allocation found.
        #[arg(long)]
        verbose: bool,
        /// Delete orphaned allocations; put misplaced ones on the
        /// instance's own node.
        #[arg(long)]
        delete: bool,
        /// Only this resource provider.
        #[arg(long = "resource-provider", alias = "resource_provider")]
        resource_provider: Option<String>,
        #[command(flatten)]
        call: CallArgs,
    },
    /// Create the missing allocations of settled instances (ACTIVE,
    /// SHUTOFF, PAUSED, SUSPENDED, no task) from their flavor. Exit codes:
    /// 0 allocations created (with --dry-run: some would be), 1
    /// --max-count reached with more to do, 2 the instance's host has no
    /// compute node record, 3 an allocation could not be created, 4
    /// nothing to heal, 127 invalid input, 255 an unexpected error.
    #[command(name = "heal-allocations", alias = "heal_allocations")]
    HealAllocations {
        /// Print every instance healed.
        #[arg(long)]
        verbose: bool,
        /// Report what would be created; create nothing.
        #[arg(long = "dry-run", alias = "dry_run")]
        dry_run: bool,
        /// Only this instance.
        #[arg(long)]
        instance: Option<String>,
        /// Only this cell (its uuid).
        #[arg(long)]
        cell: Option<String>,
        /// Create at most this many allocations (at least 1).
        #[arg(long = "max-count", alias = "max_count")]
        max_count: Option<u32>,
        #[command(flatten)]
        call: CallArgs,
    },
}

/// How long to wait for each cell's conductor.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// Seconds to wait for each cell's conductor to answer.
    #[arg(long, default_value_t = 600)]
    pub(super) timeout: u64,
}

/// One cell's answer.
struct Answer {
    cell: String,
    report: Result<rpc::AllocationReport, String>,
}

/// Calls `method` on the conductor of `cell`.
async fn ask<Req: Message>(
    cell: &CellMapping,
    method: &'static str,
    req: &Req,
    timeout: Duration,
) -> Result<rpc::AllocationReport, String> {
    let url = &cell.transport_url;
    match validate_transport_url(url) {
        Ok(TransportKind::Amqp) => {}
        Ok(_) => {
            return Err(format!(
                "its bus ({}) is in-process or none: only conductors on RabbitMQ can be asked; \
                 the embedded region's conductor audits its cell on its own every \
                 placement_audit_interval_secs",
                mask(url)
            ))
        }
        Err(e) => return Err(e.one_line()),
    }
    let opts = fabric::bus::BusOptions {
        connection_name: "cell-manage".to_owned(),
        ..Default::default()
    };
    let bus = fabric::bus::connect_with(url, opts)
        .await
        .map_err(|e| format!("cannot reach its broker at {}: {e}", mask(url)))?;
    let id = fabric::ids::RequestId::generate().to_string();
    let ids = RequestIds {
        request_id: id.clone(),
        global_request_id: id,
    };
    let got = rpc::call::<_, rpc::AllocationReport>(
        bus.as_ref(),
        CONDUCTOR_QUEUE,
        method,
        req,
        &ids,
        timeout,
    )
    .await;
    bus.close().await;
    got.map_err(|e| {
        let mut s = e.to_string();
        let mut cur = std::error::Error::source(&e);
        while let Some(c) = cur {
            s.push_str(": ");
            s.push_str(&c.to_string());
            cur = c.source();
        }
        format!("its conductor did not do it: {s}")
    })
}

fn label(c: &CellMapping) -> String {
    match c.name.as_deref() {
        Some(n) if !n.is_empty() => format!("{n} ({})", c.uuid),
        _ => c.uuid.to_string(),
    }
}

/// The cells to ask (never cell0, which has no hosts), all at once.
async fn ask_all<Req: Message + Clone + 'static>(
    cells: Vec<CellMapping>,
    method: &'static str,
    req: &Req,
    timeout: Duration,
) -> Vec<Answer> {
    let mut set = tokio::task::JoinSet::new();
    for (i, c) in cells.into_iter().filter(|c| !c.is_cell0()).enumerate() {
        let req = req.clone();
        set.spawn(async move {
            let report = ask(&c, method, &req, timeout).await;
            (
                i,
                Answer {
                    cell: label(&c),
                    report,
                },
            )
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(a) = r {
            out.push(a);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, a)| a).collect()
}

fn print_finding(f: &rpc::AllocationFinding) {
    let what = match f.kind.as_str() {
        finding::ORPHANED => "orphaned allocation (no live instance of the cell)".to_owned(),
        finding::MISPLACED => format!("allocation of an instance living elsewhere ({})", f.detail),
        finding::MISSING => "instance without an allocation".to_owned(),
        other => other.to_owned(),
    };
    let done = match f.action.as_str() {
        "" => String::new(),
        finding::FAILED => format!(": FAILED: {}", f.detail),
        a => format!(": {a}"),
    };
    println!(
        "  consumer {} on provider {} (host {}, node {}): {what}{done}",
        f.consumer, f.provider, f.host, f.node
    );
}

/// Unreadable providers and unconfigured placement make a cell's answer
/// incomplete: an error.
fn incomplete(r: &rpc::AllocationReport) -> Option<String> {
    if r.no_placement {
        return Some("its conductor has no placement configured".to_owned());
    }
    (!r.unread.is_empty()).then(|| format!("providers not read: {}", r.unread.join("; ")))
}

/// `placement audit`.
pub(super) async fn audit(
    ctx: &Ctx,
    verbose: bool,
    delete: bool,
    provider: Option<String>,
    timeout: u64,
) -> i32 {
    let provider = provider.unwrap_or_default();
    if !provider.is_empty() && provider.parse::<fabric::ids::ProviderUuid>().is_err() {
        eprintln!("error: {provider:?} is not a resource provider uuid");
        return 127;
    }
    let cells = match ctx.api().await {
        Ok(api) => cells(&api, None).await,
        Err(e) => Err(e),
    };
    let cells = match cells {
        Ok(c) => c,
        Err(e) => return fail(&e, 1),
    };
    let req = rpc::PlacementAudit {
        delete,
        provider_uuid: provider,
    };
    let answers = ask_all(
        cells,
        rpc::method::PLACEMENT_AUDIT,
        &req,
        Duration::from_secs(timeout),
    )
    .await;
    let (mut found, mut dealt, mut broken) = (0usize, 0usize, false);
    for a in &answers {
        let r = match &a.report {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: cell {}: {e}", a.cell);
                broken = true;
                continue;
            }
        };
        if let Some(why) = incomplete(r) {
            eprintln!("error: cell {}: {why}", a.cell);
            broken = true;
        }
        let orphaned = r
            .findings
            .iter()
            .filter(|f| f.kind == finding::ORPHANED)
            .count();
        let misplaced = r.findings.len() - orphaned;
        println!(
            "cell {}: {} providers read, {orphaned} orphaned and {misplaced} misplaced allocations",
            a.cell, r.providers
        );
        for f in &r.findings {
            if verbose {
                print_finding(f);
            }
            found += 1;
            match f.action.as_str() {
                finding::DELETED | finding::MOVED => dealt += 1,
                finding::FAILED => broken = true,
                _ => {}
            }
        }
    }
    println!("Processed {found} allocations.");
    if broken {
        1
    } else if found == 0 {
        0
    } else if delete && dealt == found {
        4
    } else {
        3
    }
}

/// The cells to ask: all, or the one given (none when it is not a cell).
async fn cells(api: &ApiDb, only: Option<&str>) -> Result<Vec<CellMapping>, Error> {
    let all = api.cells().await?;
    Ok(match only {
        None => all,
        Some(u) => all
            .into_iter()
            .filter(|c| c.uuid.to_string() == u)
            .collect(),
    })
}

/// `placement heal-allocations`.
pub(super) async fn heal(
    ctx: &Ctx,
    verbose: bool,
    dry_run: bool,
    instance: Option<String>,
    cell: Option<String>,
    max_count: Option<u32>,
    timeout: u64,
) -> i32 {
    if max_count == Some(0) {
        eprintln!("error: --max-count must be at least 1");
        return 127;
    }
    let instance = instance.unwrap_or_default();
    if !instance.is_empty() && instance.parse::<fabric::ids::InstanceUuid>().is_err() {
        eprintln!("error: {instance:?} is not an instance uuid");
        return 127;
    }
    let api = match ctx.api().await {
        Ok(api) => api,
        Err(e) => return fail(&e, EXIT_UNEXPECTED),
    };
    let mut cells = match cells(&api, cell.as_deref()).await {
        Ok(c) => c,
        Err(e) => return fail(&e, EXIT_UNEXPECTED),
    };
    if let Some(c) = &cell {
        if cells.is_empty() {
            eprintln!("error: cell {c} not found");
            return 127;
        }
    }
    if !instance.is_empty() {
        match api.instance_mapping(&instance).await {
            Ok(InstanceMappingState::Cell(c)) => cells.retain(|x| x.uuid == c.uuid),
            Ok(_) => {
                eprintln!("error: instance {instance} is not mapped to a cell");
                return 127;
            }
            Err(e) => return fail(&e, EXIT_UNEXPECTED),
        }
    }
    let timeout = Duration::from_secs(timeout);
    let (mut healed, mut failed, mut more, mut no_node, mut broken) =
        (0u32, 0, false, false, false);
    let mut budget = max_count.unwrap_or(0);
    // One cell after the other: --max-count is a budget for all of them.
    for c in cells.into_iter().filter(|c| !c.is_cell0()) {
        if max_count.is_some() && budget == 0 {
            more = true;
            break;
        }
        let req = rpc::HealAllocations {
            dry_run,
            instance_uuid: instance.clone(),
            max_count: budget,
        };
        let r = match ask(&c, rpc::method::HEAL_ALLOCATIONS, &req, timeout).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: cell {}: {e}", label(&c));
                broken = true;
                continue;
            }
        };
        if let Some(why) = incomplete(&r) {
            eprintln!("error: cell {}: {why}", label(&c));
            broken = true;
        }
        if r.no_node {
            eprintln!(
                "error: cell {}: instance {instance} is on a host without a compute node record",
                label(&c)
            );
            no_node = true;
        }
        more |= r.more;
        let done = r
            .findings
            .iter()
            .filter(|f| f.action != finding::FAILED)
            .count() as u32;
        failed += r.findings.len() as u32 - done;
        healed += done;
        if max_count.is_some() {
            budget = budget.saturating_sub(r.findings.len() as u32);
        }
        let verb = if dry_run { "would get" } else { "got" };
        println!(
            "cell {}: {} providers read, {done} instances {verb} an allocation",
            label(&c),
            r.providers
        );
        for f in r
            .findings
            .iter()
            .filter(|f| verbose || f.action == finding::FAILED)
        {
            print_finding(f);
        }
    }
    let prefix = if dry_run { "[dry-run] " } else { "" };
    println!("{prefix}Processed {healed} instances.");
    if broken {
        EXIT_UNEXPECTED
    } else if no_node {
        2
    } else if failed > 0 {
        3
    } else if more {
        1
    } else if healed > 0 {
        0
    } else {
        4
    }
}
