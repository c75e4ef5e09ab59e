//! The `api-super` binary: serves the identity API, and the operator
//! commands `bootstrap` (as `keystone-manage bootstrap`) and `rotate-keys`.

use std::path::PathBuf;

use api_super::identity::{self, BootstrapSpec, IdentityConfig};
use clap::{Parser, Subcommand};
use fabric::config::TelemetryConfig;
use serde::{Deserialize, Serialize};

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "api-super",
    about = "Compute API layer: identity (Keystone v3 subset)"
)]
struct Cli {
    /// TOML configuration file (API_SUPER_CONFIG also names one).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Identity database URL (overrides identity.database.connection).
    #[arg(long, global = true)]
    database: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the identity API (the default).
    Serve {
        /// Address to listen on (overrides identity.listen).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Create the default domain, the admin/member/reader roles, the admin
    /// project and user (idempotent; resets the passwords).
    Bootstrap {
        /// The admin's password.
        #[arg(long, env = "OS_BOOTSTRAP_PASSWORD")]
        bootstrap_password: String,
        /// The admin's user name.
        #[arg(long, default_value = "admin")]
        bootstrap_username: String,
        /// The admin project.
        #[arg(long, default_value = "admin")]
        bootstrap_project_name: String,
        /// Also create a member user with this name...
        #[arg(long)]
        member_username: Option<String>,
        /// ...this password...
        #[arg(long, env = "OS_MEMBER_PASSWORD")]
        member_password: Option<String>,
        /// ...on this project.
        #[arg(long, default_value = "demo")]
        member_project_name: String,
    },
    /// Add a new token signing key; older keys keep validating until their
    /// tokens have expired.
    RotateKeys,
    /// Print the effective configuration and exit.
    PrintConfig,
}

/// The configuration file (`API_SUPER` prefix).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ApiSuperConfig {
    identity: IdentityConfig,
    telemetry: TelemetryConfig,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut cfg: ApiSuperConfig = fabric::config::load("API_SUPER", cli.config.as_deref())?;
    if let Some(d) = cli.database {
        cfg.identity.database.connection = d;
    }
    match cli.command.unwrap_or(Command::Serve { listen: None }) {
        Command::PrintConfig => print!("{}", fabric::config::render(&cfg)),
        Command::Bootstrap {
            bootstrap_password,
            bootstrap_username,
            bootstrap_project_name,
            member_username,
            member_password,
            member_project_name,
        } => {
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            let db = identity::db::Db::open(
                &cfg.identity.database.connection,
                cfg.identity.database.max_connections,
            )
            .await?;
            let member = match (member_username, member_password) {
                (Some(u), Some(p)) => Some((u, p, member_project_name)),
                (Some(_), None) => anyhow::bail!("--member-username needs --member-password"),
                _ => None,
            };
            let spec = BootstrapSpec {
                admin_username: bootstrap_username,
                admin_password: bootstrap_password,
                admin_project: bootstrap_project_name,
                member,
            };
            let done = identity::bootstrap(&db, &spec, cfg.identity.password_hash).await?;
            println!(
                "bootstrapped: admin user {} on project {}",
                done.admin_user_id, done.admin_project_id
            );
            if let Some((u, p)) = done.member {
                println!("member user {u} on project {p}");
            }
        }
        Command::RotateKeys => {
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            let id = identity::Identity::open(cfg.identity).await?;
            let kid = id.rotate_keys().await?;
            println!("new signing key {kid}");
        }
        Command::Serve { listen } => {
            if let Some(l) = listen {
                cfg.identity.listen = l;
            }
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            let running = identity::serve_identity(cfg.identity).await?;
            println!("identity listening on http://{}", running.addr);
            tokio::signal::ctrl_c().await?;
        }
    }
    Ok(())
}
