//! Outages of a cell's backing services, which the region does not own:
//! its RabbitMQ vhost (`stop-broker`) and its PostgreSQL database
//! (`stop-database`), each made unreachable and later restored.
//!
//! - **Broker**: `rabbitmqctl set_vhost_limits -p <vhost>
//!   '{"max-connections": 0}'` (no new connection to the vhost), then
//!   `rabbitmqctl close_all_connections -p <vhost>` (every client of the
//!   cell loses its connection and its reconnections are refused);
//!   restored with `clear_vhost_limits`. Other vhosts — other cells, other
//!   tests — are untouched. Needs `rabbitmqctl` on this machine, talking to
//!   the broker the cell's URL names (a local one).
//! - **Database**: `ALTER DATABASE <cell db> ALLOW_CONNECTIONS false`, then
//!   `pg_terminate_backend` of every session on it; restored with
//!   `ALLOW_CONNECTIONS true`. The statements run on the region's API
//!   database (same server), with the URL's user, which must own the cell
//!   database or be a superuser.

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sqlx::Connection;

/// The vhost an `amqp://` URL names (`/` when none), percent-decoded.
pub fn vhost(bus_url: &str) -> Result<String> {
    let u = reqwest::Url::parse(bus_url).context("the cell's transport URL")?;
    if u.scheme() != "amqp" {
        bail!("not an amqp:// URL");
    }
    let path = u.path().trim_start_matches('/');
    if path.is_empty() {
        return Ok("/".to_owned());
    }
    percent_decode(path)
}

fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])?;
            out.push(u8::from_str_radix(hex, 16).context("bad %-escape in the vhost")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8(out)?)
}

/// The database a `postgres://` URL names.
pub fn database(db_url: &str) -> Result<String> {
    let u = reqwest::Url::parse(db_url).context("the cell's database URL")?;
    let name = u.path().trim_start_matches('/');
    if name.is_empty() {
        bail!("the cell's database URL names no database");
    }
    percent_decode(name)
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Runs `rabbitmqctl -q ARGS`, retried a few times (parallel `rabbitmqctl`
/// calls occasionally fail); its output.
fn rabbitmqctl(args: &[&str]) -> Result<String> {
    let mut last = String::new();
    for attempt in 0..4u64 {
        match Command::new("rabbitmqctl").arg("-q").args(args).output() {
            Ok(o) if o.status.success() => return Ok(String::from_utf8_lossy(&o.stdout).into()),
            Ok(o) => {
                last = format!(
                    "exit {}: {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                )
            }
            Err(e) => bail!("run rabbitmqctl: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300 * (attempt + 1)));
    }
    bail!("rabbitmqctl {}: {last}", args.join(" "))
}

async fn rabbitmqctl_async(args: Vec<String>) -> Result<String> {
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        rabbitmqctl(&a)
    })
    .await
    .context("rabbitmqctl task")?
}

/// Checks, before anything starts, that the cell's broker can be stopped
/// from here: a local broker, `rabbitmqctl` runnable, the vhost known to
/// it.
pub fn check_broker(bus_url: &str) -> Result<()> {
    let u = reqwest::Url::parse(bus_url).context("the cell's transport URL")?;
    let host = u.host_str().unwrap_or_default();
    if !matches!(host, "127.0.0.1" | "localhost" | "::1" | "[::1]") {
        bail!(
            "stop-broker drives the broker with rabbitmqctl on this machine, but the cell's \
             broker is at {host}"
        );
    }
    let v = vhost(bus_url)?;
    let vhosts = rabbitmqctl(&["list_vhosts", "name"])
        .context("stop-broker needs rabbitmqctl on this machine")?;
    if !vhosts.lines().any(|l| l.trim() == v) {
        bail!("stop-broker: rabbitmqctl does not list the cell's vhost {v:?}");
    }
    Ok(())
}

/// Refuses new connections to the cell's vhost and closes its open ones.
pub async fn stop_broker(bus_url: &str) -> Result<()> {
    let v = vhost(bus_url)?;
    rabbitmqctl_async(vec![
        "set_vhost_limits".into(),
        "-p".into(),
        v.clone(),
        r#"{"max-connections": 0}"#.into(),
    ])
    .await?;
    rabbitmqctl_async(vec![
        "close_all_connections".into(),
        "-p".into(),
        v,
        "loadtest stop-broker".into(),
    ])
    .await?;
    Ok(())
}

/// Lets clients connect to the cell's vhost again.
pub async fn start_broker(bus_url: &str) -> Result<()> {
    let v = vhost(bus_url)?;
    rabbitmqctl_async(vec!["clear_vhost_limits".into(), "-p".into(), v]).await?;
    Ok(())
}

/// Refuses new connections to the cell's database and ends its sessions;
/// the number of sessions ended. `admin_url` is another database on the
/// same server (the region's API database).
pub async fn stop_database(admin_url: &str, db_url: &str) -> Result<u64> {
    let name = database(db_url)?;
    let mut c = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connect to the region's API database to stop a cell's")?;
    sqlx::query(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS false",
        quote_ident(&name)
    ))
    .execute(&mut c)
    .await
    .with_context(|| format!("refuse connections to {name}"))?;
    let ended: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(&name)
    .fetch_all(&mut c)
    .await
    .with_context(|| format!("end the sessions on {name}"))?;
    c.close().await.ok();
    Ok(ended.iter().filter(|(ok,)| *ok).count() as u64)
}

/// Lets clients connect to the cell's database again.
pub async fn start_database(admin_url: &str, db_url: &str) -> Result<()> {
    let name = database(db_url)?;
    let mut c = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connect to the region's API database to restore a cell's")?;
    sqlx::query(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        quote_ident(&name)
    ))
    .execute(&mut c)
    .await
    .with_context(|| format!("allow connections to {name} again"))?;
    c.close().await.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_urls() {
        assert_eq!(
            vhost("amqp://guest:guest@127.0.0.1:5672/lt_cell1").unwrap(),
            "lt_cell1"
        );
        assert_eq!(vhost("amqp://127.0.0.1:5672/%2F").unwrap(), "/");
        assert_eq!(vhost("amqp://127.0.0.1:5672").unwrap(), "/");
        assert!(vhost("inproc://cell1").is_err());
        assert_eq!(
            database("postgres://postgres@127.0.0.1:5432/t_lt_cell1").unwrap(),
            "t_lt_cell1"
        );
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
