//! `cell-manage`: the operator CLI, a drop-in for `nova-manage cell_v2`,
//! `db` and `api_db` (runbooks translate by changing the binary name; both
//! the hyphenated and upstream's underscored command and option spellings
//! are accepted). This module is the only place errors become exit codes;
//! every code is documented in `docs/OPERATIONS.md`.

mod placement;
mod table;

pub use placement::PlacementCmd;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

use crate::cells::{self, CellChange, NewCell};
use crate::db::ApiDb;
use crate::discover::{self, DiscoverOptions};
use crate::instances::{self, Verified};
use crate::url::{derive_cell0_url, mask};
use crate::{hosts, sync, Error};

/// Exit code for failures a command does not list (API database
/// unreachable or without schema, unexpected database errors), as
/// nova-manage's "unexpected error".
pub const EXIT_UNEXPECTED: i32 = 255;

/// `cell-manage`'s configuration file (`--config`, or `CELL_MANAGE_CONFIG`),
/// with `CELL_MANAGE__SECTION__KEY` environment overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Default transport URL for `create-cell`/`simple-cell-setup`
    /// (upstream `[DEFAULT] transport_url`).
    pub transport_url: String,
    /// `[api_database] connection`: the API database.
    pub api_database: DbSection,
    /// `[database] connection`: default cell database for `create-cell`
    /// and `simple-cell-setup`, and the base of cell0's default URL.
    pub database: DbSection,
    /// `[tls] ca_file`: the CA trusted for `amqps://` brokers (checked by
    /// `create-cell`) besides the system's roots.
    pub tls: fabric::config::TlsConfig,
}

/// A `connection = "URL"` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbSection {
    /// The database URL.
    pub connection: String,
}

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "cell-manage",
    version,
    about = "Manage cells, hosts and instance mappings (nova-manage cell_v2 compatible)"
)]
pub struct Cli {
    /// Configuration file (TOML); default: $CELL_MANAGE_CONFIG.
    #[arg(long, global = true, alias = "config-file")]
    pub config: Option<PathBuf>,
    /// The API database URL; default: [api_database] connection.
    #[arg(
        long = "api-database-connection",
        alias = "api_database_connection",
        global = true
    )]
    pub api_database_connection: Option<String>,
    #[command(subcommand)]
    pub group: Group,
}

/// Command groups, as nova-manage's categories.
#[derive(Debug, Subcommand)]
pub enum Group {
    /// Cells v2: cells, hosts and instance mappings.
    #[command(name = "cell_v2", alias = "cell-v2", subcommand)]
    CellV2(CellV2),
    /// Schema of the API database and of every mapped cell database.
    #[command(subcommand)]
    Db(DbCmd),
    /// Schema of the API database only.
    #[command(name = "api_db", alias = "api-db", subcommand)]
    ApiDb(ApiDbCmd),
    /// Placement reconciliation: orphaned and missing allocations.
    #[command(subcommand)]
    Placement(PlacementCmd),
}

/// `db` commands.
#[derive(Debug, Subcommand)]
pub enum DbCmd {
    /// Migrate the API database, then every cell database in the mappings.
    Sync,
    /// Print the schema version of the API and every cell database.
    Version,
}

/// `api_db` commands.
#[derive(Debug, Subcommand)]
pub enum ApiDbCmd {
    /// Migrate the API database.
    Sync,
    /// Print the API database's schema version.
    Version,
}

#[derive(Debug, Args)]
pub struct CellUuidArg {
    /// The cell's UUID.
    #[arg(long = "cell-uuid", alias = "cell_uuid")]
    pub cell_uuid: String,
}

/// `cell_v2` commands.
#[derive(Debug, Subcommand)]
pub enum CellV2 {
    /// Create the cell0 mapping (and migrate its database).
    #[command(name = "map-cell0", alias = "map_cell0")]
    MapCell0 {
        /// cell0's database; default: [database] connection (or the API
        /// database URL) with `_cell0` appended to the database name.
        #[arg(long = "database-connection", alias = "database_connection")]
        database_connection: Option<String>,
    },
    /// cell0, one cell, host discovery and instance mapping in one go.
    #[command(name = "simple-cell-setup", alias = "simple_cell_setup")]
    SimpleCellSetup {
        /// The cell's transport URL; default: transport_url of the config.
        #[arg(long = "transport-url", alias = "transport_url")]
        transport_url: Option<String>,
        /// The cell's database; default: [database] connection.
        #[arg(long = "database-connection", alias = "database_connection")]
        database_connection: Option<String>,
    },
    /// Create a cell: migrate its database, map it, print its UUID.
    #[command(name = "create-cell", alias = "create_cell")]
    CreateCell {
        /// Cell name (unique).
        #[arg(long)]
        name: Option<String>,
        /// Transport URL; default: transport_url of the config.
        #[arg(long = "transport-url", alias = "transport_url")]
        transport_url: Option<String>,
        /// Database URL; default: [database] connection.
        #[arg(long = "database-connection", alias = "database_connection")]
        database_connection: Option<String>,
        /// Create the cell disabled.
        #[arg(long)]
        disabled: bool,
        /// Also print the database schema version and masked URLs (stderr).
        #[arg(long)]
        verbose: bool,
    },
    /// Change a cell's name, URLs or enabled state.
    #[command(name = "update-cell", alias = "update_cell")]
    UpdateCell {
        #[command(flatten)]
        cell: CellUuidArg,
        /// New name.
        #[arg(long)]
        name: Option<String>,
        /// New transport URL.
        #[arg(long = "transport-url", alias = "transport_url")]
        transport_url: Option<String>,
        /// New database URL.
        #[arg(long = "database-connection", alias = "database_connection")]
        database_connection: Option<String>,
        /// Disable: no new builds go to the cell.
        #[arg(long)]
        disable: bool,
        /// Enable.
        #[arg(long)]
        enable: bool,
    },
    /// Delete an empty cell (with --force: its hosts and deleted instances' mappings too).
    #[command(name = "delete-cell", alias = "delete_cell")]
    DeleteCell {
        #[command(flatten)]
        cell: CellUuidArg,
        /// Also delete host mappings and mappings of deleted instances.
        #[arg(long)]
        force: bool,
    },
    /// List cells (passwords masked unless --verbose).
    #[command(name = "list-cells", alias = "list_cells")]
    ListCells {
        /// Show passwords.
        #[arg(long)]
        verbose: bool,
    },
    /// Map unmapped compute hosts of every enabled cell (or one cell).
    #[command(name = "discover-hosts", alias = "discover_hosts")]
    DiscoverHosts {
        /// Only this cell (even if disabled).
        #[arg(long = "cell-uuid", alias = "cell_uuid")]
        cell_uuid: Option<String>,
        /// Discover compute services instead of compute nodes.
        #[arg(long = "by-service", alias = "by_service")]
        by_service: bool,
        /// Exit 1 unless at least one host was discovered.
        #[arg(long)]
        strict: bool,
        /// Print each step.
        #[arg(long)]
        verbose: bool,
    },
    /// List host mappings.
    #[command(name = "list-hosts", alias = "list_hosts")]
    ListHosts {
        /// Only this cell.
        #[arg(long = "cell-uuid", alias = "cell_uuid")]
        cell_uuid: Option<String>,
    },
    /// Delete a host mapping (refused while instances are on the host).
    #[command(name = "delete-host", alias = "delete_host")]
    DeleteHost {
        #[command(flatten)]
        cell: CellUuidArg,
        /// The host.
        #[arg(long)]
        host: String,
    },
    /// Map a cell's unmapped instances.
    #[command(name = "map-instances", alias = "map_instances")]
    MapInstances {
        #[command(flatten)]
        cell: CellUuidArg,
        /// Look at most at this many instances, then stop (exit 1 if more remain).
        #[arg(long = "max-count", alias = "max_count")]
        max_count: Option<String>,
        /// Start from the beginning, not where the last run stopped.
        #[arg(long)]
        reset: bool,
    },
    /// Check an instance's mapping.
    #[command(name = "verify-instance", alias = "verify_instance")]
    VerifyInstance {
        /// The instance UUID.
        #[arg(long)]
        uuid: String,
        /// Print nothing.
        #[arg(long)]
        quiet: bool,
    },
}

/// Parses the process arguments, runs the command, returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return EXIT_UNEXPECTED;
        }
    };
    rt.block_on(run(cli))
}

fn fail(e: &Error, code: i32) -> i32 {
    eprintln!("error: {}", e.one_line());
    code
}

/// Input problems: an invalid, missing or unreachable URL given by the
/// operator (for the cell side).
fn is_bad_cell_input(e: &Error) -> bool {
    match e {
        Error::InvalidTransportUrl { .. }
        | Error::InvalidDatabaseUrl { .. }
        | Error::Missing(_)
        | Error::Broker { .. } => true,
        Error::Connect { role, .. } | Error::Migrate { role, .. } => *role != "API",
        _ => false,
    }
}

struct Ctx {
    config: Config,
    api_url: Option<String>,
}

impl Ctx {
    fn api_url(&self) -> Result<&str, Error> {
        self.api_url
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or(Error::Missing(
            "the API database connection (--api-database-connection or [api_database] connection)",
        ))
    }

    async fn api(&self) -> Result<ApiDb, Error> {
        ApiDb::open(self.api_url()?).await
    }

    fn or_config(
        &self,
        given: Option<String>,
        config: &str,
        what: &'static str,
    ) -> Result<String, Error> {
        given
            .filter(|s| !s.is_empty())
            .or_else(|| Some(config.to_owned()).filter(|s| !s.is_empty()))
            .ok_or(Error::Missing(what))
    }
}

/// Runs one parsed command; returns its exit code.
pub async fn run(cli: Cli) -> i32 {
    let config: Config = match fabric::config::load("CELL_MANAGE", cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let mut msg = e.to_string();
            let mut cur = std::error::Error::source(&e);
            while let Some(s) = cur {
                msg.push_str(": ");
                msg.push_str(&s.to_string().replace('\n', " "));
                cur = s.source();
            }
            eprintln!("error: {msg}");
            return 1;
        }
    };
    if let Err(e) = config.tls.apply() {
        eprintln!("error: [tls] ca_file: {e}");
        return 1;
    }
    let api_url = cli
        .api_database_connection
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| Some(config.api_database.connection.clone()).filter(|s| !s.is_empty()));
    let ctx = Ctx { config, api_url };
    match cli.group {
        Group::CellV2(cmd) => cell_v2(&ctx, cmd).await,
        Group::Db(DbCmd::Sync) => db_sync(&ctx).await,
        Group::Db(DbCmd::Version) => db_version(&ctx, true).await,
        Group::ApiDb(ApiDbCmd::Sync) => {
            let url = match ctx.api_url() {
                Ok(u) => u,
                Err(e) => return fail(&e, 1),
            };
            match sync::sync_api(url).await {
                Ok(a) => {
                    println!("api: version {}{}", a.version, applied_note(&a.applied));
                    0
                }
                Err(e) => fail(&e, 1),
            }
        }
        Group::ApiDb(ApiDbCmd::Version) => db_version(&ctx, false).await,
        Group::Placement(PlacementCmd::Audit {
            verbose,
            delete,
            resource_provider,
            call,
        }) => placement::audit(&ctx, verbose, delete, resource_provider, call.timeout).await,
        Group::Placement(PlacementCmd::HealAllocations {
            verbose,
            dry_run,
            instance,
            cell,
            max_count,
            call,
        }) => {
            placement::heal(
                &ctx,
                verbose,
                dry_run,
                instance,
                cell,
                max_count,
                call.timeout,
            )
            .await
        }
    }
}

fn applied_note(applied: &[i64]) -> String {
    if applied.is_empty() {
        " (up to date)".to_owned()
    } else {
        format!(" (applied {applied:?})")
    }
}

async fn db_sync(ctx: &Ctx) -> i32 {
    let url = match ctx.api_url() {
        Ok(u) => u,
        Err(e) => return fail(&e, 1),
    };
    // One line per database as it finishes: position, label, version, time.
    let mut print = |st: &sync::DbStatus| {
        let (i, n) = st.position;
        let ms = st.elapsed.as_millis();
        match &st.result {
            Ok((v, applied)) => println!(
                "[{i}/{n}] {}: version {}{} ({ms} ms)",
                st.label,
                v.unwrap_or(0),
                applied_note(applied)
            ),
            Err(e) => eprintln!("[{i}/{n}] error: {}: {} ({ms} ms)", st.label, e.one_line()),
        }
    };
    match sync::sync_all(url, &mut print).await {
        Ok(all) if all.iter().all(|s| s.result.is_ok()) => 0,
        Ok(_) => 1,
        Err(e) => fail(&e, 1),
    }
}

async fn db_version(ctx: &Ctx, cells: bool) -> i32 {
    let url = match ctx.api_url() {
        Ok(u) => u,
        Err(e) => return fail(&e, 1),
    };
    match sync::versions(url).await {
        Ok(all) => {
            let mut code = 0;
            for st in all.iter().take(if cells { usize::MAX } else { 1 }) {
                match &st.result {
                    Ok((v, _)) => println!(
                        "{}: {}",
                        st.label,
                        v.map(|v| v.to_string())
                            .unwrap_or_else(|| "none".to_owned())
                    ),
                    Err(e) => {
                        eprintln!("error: {}: {}", st.label, e.one_line());
                        code = 1;
                    }
                }
            }
            code
        }
        Err(e) => fail(&e, 1),
    }
}

async fn cell_v2(ctx: &Ctx, cmd: CellV2) -> i32 {
    // The API database first: every cell_v2 command needs it.
    let api = match ctx.api().await {
        Ok(a) => a,
        Err(e) => {
            let code = match cmd {
                CellV2::DiscoverHosts { .. } | CellV2::SimpleCellSetup { .. } => 1,
                _ => EXIT_UNEXPECTED,
            };
            return fail(&e, code);
        }
    };
    let code = cell_v2_with(ctx, &api, cmd).await;
    api.close().await;
    code
}

fn cell0_default(ctx: &Ctx) -> Result<String, Error> {
    let base = if ctx.config.database.connection.is_empty() {
        ctx.api_url()?
    } else {
        ctx.config.database.connection.as_str()
    };
    derive_cell0_url(base)
}

async fn cell_v2_with(ctx: &Ctx, api: &ApiDb, cmd: CellV2) -> i32 {
    match cmd {
        CellV2::MapCell0 {
            database_connection,
        } => {
            let url = match database_connection.filter(|s| !s.is_empty()) {
                Some(u) => u,
                None => match cell0_default(ctx) {
                    Ok(u) => u,
                    Err(e) => return fail(&e, 1),
                },
            };
            match cells::map_cell0(api, &url).await {
                Ok(cells::Cell0::Created(_)) => 0,
                Ok(cells::Cell0::Existing(_)) => {
                    println!("Cell0 is already setup");
                    0
                }
                Err(e) if is_bad_cell_input(&e) => fail(&e, 1),
                Err(e) => fail(&e, EXIT_UNEXPECTED),
            }
        }
        CellV2::SimpleCellSetup {
            transport_url,
            database_connection,
        } => simple_cell_setup(ctx, api, transport_url, database_connection).await,
        CellV2::CreateCell {
            name,
            transport_url,
            database_connection,
            disabled,
            verbose,
        } => {
            let new = match (|| {
                Ok::<_, Error>(NewCell {
                    name,
                    transport_url: ctx.or_config(
                        transport_url,
                        &ctx.config.transport_url,
                        "--transport-url",
                    )?,
                    database_connection: ctx.or_config(
                        database_connection,
                        &ctx.config.database.connection,
                        "--database-connection",
                    )?,
                    disabled,
                })
            })() {
                Ok(n) => n,
                Err(e) => return fail(&e, 1),
            };
            match cells::create_cell(api, &new).await {
                Ok((cell, version)) => {
                    println!("{}", cell.uuid);
                    if verbose {
                        eprintln!(
                            "created cell {} ({}): transport {}, database {} at schema version {}{}",
                            cell.name_or_empty(),
                            cell.uuid,
                            mask(&cell.transport_url),
                            mask(&cell.database_connection),
                            version,
                            if cell.disabled { ", disabled" } else { "" }
                        );
                    }
                    0
                }
                Err(e @ (Error::DuplicateCell(_) | Error::DuplicateName(_))) => fail(&e, 2),
                Err(e) if is_bad_cell_input(&e) => fail(&e, 1),
                Err(e) => fail(&e, EXIT_UNEXPECTED),
            }
        }
        CellV2::UpdateCell {
            cell,
            name,
            transport_url,
            database_connection,
            disable,
            enable,
        } => {
            let uuid = match cells::parse_cell_uuid(&cell.cell_uuid) {
                Ok(u) => u,
                Err(e) => return fail(&e, 1),
            };
            let change = CellChange {
                name,
                transport_url,
                database_connection,
                disable,
                enable,
            };
            match cells::update_cell(api, &uuid, &change).await {
                Ok(u) => {
                    for n in u.notes {
                        println!("{n}");
                    }
                    0
                }
                Err(e) => {
                    let code = match &e {
                        Error::CellNotFound(_) => 1,
                        Error::DuplicateCell(_) => 3,
                        Error::EnableAndDisable => 4,
                        Error::Cell0Immutable(_) => 5,
                        _ if is_bad_cell_input(&e) => 2,
                        Error::DuplicateName(_) => 2,
                        _ => 2,
                    };
                    fail(&e, code)
                }
            }
        }
        CellV2::DeleteCell { cell, force } => {
            let uuid = match cells::parse_cell_uuid(&cell.cell_uuid) {
                Ok(u) => u,
                Err(e) => return fail(&e, 1),
            };
            match cells::delete_cell(api, &uuid, force).await {
                Ok(_) => 0,
                Err(e) => {
                    let code = match &e {
                        Error::CellNotFound(_) => 1,
                        Error::CellHasHosts(..) => 2,
                        Error::CellHasInstances(..) => 3,
                        Error::CellHasInstanceMappings(..) => 4,
                        _ => EXIT_UNEXPECTED,
                    };
                    fail(&e, code)
                }
            }
        }
        CellV2::ListCells { verbose } => match api.cells().await {
            Ok(mut all) => {
                all.sort_by(|a, b| a.name_or_empty().cmp(b.name_or_empty()));
                let show = |u: &str| if verbose { u.to_owned() } else { mask(u) };
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(|c| {
                        vec![
                            c.name_or_empty().to_owned(),
                            c.uuid.to_string(),
                            show(&c.transport_url),
                            show(&c.database_connection),
                            if c.disabled { "True" } else { "False" }.to_owned(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table::render(
                        &[
                            "Name",
                            "UUID",
                            "Transport URL",
                            "Database Connection",
                            "Disabled"
                        ],
                        &rows
                    )
                );
                0
            }
            Err(e) => fail(&e, EXIT_UNEXPECTED),
        },
        CellV2::DiscoverHosts {
            cell_uuid,
            by_service,
            strict,
            verbose,
        } => {
            let cell = match cell_uuid.as_deref().map(cells::parse_cell_uuid).transpose() {
                Ok(c) => c,
                Err(e) => return fail(&e, 1),
            };
            let opts = DiscoverOptions { cell, by_service };
            let mut status = |line: String| {
                if verbose {
                    println!("{line}");
                }
            };
            match discover::discover_hosts(api, &opts, &mut status).await {
                Ok(d) => {
                    for (cell, e) in &d.failed {
                        eprintln!("error: cell {cell}: {}", e.one_line());
                    }
                    if !d.failed.is_empty() || (strict && d.mapped_hosts().is_empty()) {
                        1
                    } else {
                        0
                    }
                }
                Err(e) => fail(&e, 1),
            }
        }
        CellV2::ListHosts { cell_uuid } => {
            let cell = match cell_uuid.as_deref().map(cells::parse_cell_uuid).transpose() {
                Ok(c) => c,
                Err(e) => return fail(&e, 1),
            };
            match hosts::list_hosts(api, cell.as_ref()).await {
                Ok(list) => {
                    let rows: Vec<Vec<String>> = list
                        .iter()
                        .map(|h| {
                            vec![
                                h.cell_name.clone().unwrap_or_default(),
                                h.cell_uuid.to_string(),
                                h.host.clone(),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table::render(&["Cell Name", "Cell UUID", "Hostname"], &rows)
                    );
                    0
                }
                Err(e @ Error::CellNotFound(_)) => fail(&e, 1),
                Err(e) => fail(&e, EXIT_UNEXPECTED),
            }
        }
        CellV2::DeleteHost { cell, host } => {
            let uuid = match cells::parse_cell_uuid(&cell.cell_uuid) {
                Ok(u) => u,
                Err(e) => return fail(&e, 1),
            };
            match hosts::delete_host(api, &uuid, &host).await {
                Ok(()) => 0,
                Err(e) => {
                    let code = match &e {
                        Error::CellNotFound(_) => 1,
                        Error::HostNotFound(_) => 2,
                        Error::HostInOtherCell { .. } => 3,
                        Error::HostHasInstances(..) => 4,
                        _ => EXIT_UNEXPECTED,
                    };
                    fail(&e, code)
                }
            }
        }
        CellV2::MapInstances {
            cell,
            max_count,
            reset,
        } => {
            let max = match max_count.as_deref().map(|s| {
                s.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| Error::InvalidMaxCount(s.to_owned()))
            }) {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(e)) => return fail(&e, 127),
            };
            let uuid = match cells::parse_cell_uuid(&cell.cell_uuid) {
                Ok(u) => u,
                Err(e) => return fail(&e, EXIT_UNEXPECTED),
            };
            match instances::map_instances(api, &uuid, max, reset).await {
                Ok(r) if r.more => {
                    println!("Mapped {} instance(s); more remain, run again.", r.mapped);
                    1
                }
                Ok(r) => {
                    println!("Mapped {} instance(s); all instances are mapped.", r.mapped);
                    0
                }
                Err(e) => fail(&e, EXIT_UNEXPECTED),
            }
        }
        CellV2::VerifyInstance { uuid, quiet } => {
            let say = |s: String| {
                if !quiet {
                    println!("{s}");
                }
            };
            match instances::verify_instance(api, &uuid).await {
                Ok(Verified::Mapped(c)) => {
                    say(format!(
                        "Instance {uuid} is in cell: {} ({})",
                        c.name_or_empty(),
                        c.uuid
                    ));
                    0
                }
                Ok(Verified::NotMapped) => {
                    say(format!("Instance {uuid} is not mapped to a cell (upgrade is incomplete) or instance does not exist"));
                    1
                }
                Ok(Verified::NoCell) => {
                    say(format!("Instance {uuid} is not mapped to a cell"));
                    2
                }
                Ok(Verified::Deleted(_)) => {
                    say(format!("The instance with uuid {uuid} has been deleted."));
                    3
                }
                Ok(Verified::Archived(_)) => {
                    say(format!("The instance with uuid {uuid} has been archived. However its instance_mapping remains."));
                    4
                }
                Err(e) => fail(&e, EXIT_UNEXPECTED),
            }
        }
    }
}

async fn simple_cell_setup(
    ctx: &Ctx,
    api: &ApiDb,
    transport_url: Option<String>,
    database_connection: Option<String>,
) -> i32 {
    let res: Result<i32, Error> = async {
        let transport =
            ctx.or_config(transport_url, &ctx.config.transport_url, "--transport-url")?;
        crate::url::validate_transport_url(&transport)?;
        let database = ctx.or_config(
            database_connection,
            &ctx.config.database.connection,
            "--database-connection (or [database] connection)",
        )?;
        let cell0_url = derive_cell0_url(&database)?;
        if let cells::Cell0::Existing(_) = cells::map_cell0(api, &cell0_url).await? {
            println!("Cell0 is already setup");
        }
        let existing = api
            .cells()
            .await?
            .into_iter()
            .find(|c| c.database_connection == database && !c.is_cell0());
        let cell = match existing {
            Some(c) => c,
            None => {
                let new = NewCell {
                    name: Some("cell1".to_owned()),
                    transport_url: transport,
                    database_connection: database.clone(),
                    disabled: false,
                };
                let (c, _) = cells::create_cell(api, &new).await?;
                println!("{}", c.uuid);
                c
            }
        };
        let db = crate::db::CellDb::open(&cell.database_connection).await?;
        let nodes = db.count_compute_nodes().await;
        db.close().await;
        let opts = DiscoverOptions {
            cell: Some(cell.uuid),
            by_service: false,
        };
        let d = discover::discover_hosts(api, &opts, &mut |_| {}).await?;
        if let Some((_, e)) = d.failed.into_iter().next() {
            return Err(e);
        }
        instances::map_instances(api, &cell.uuid, None, false).await?;
        if nodes? == 0 {
            println!("No hosts found to map to cell, exiting.");
            return Ok(1);
        }
        Ok(0)
    }
    .await;
    match res {
        Ok(code) => code,
        Err(e) => fail(&e, 1),
    }
}
