//! How a PostgreSQL URL becomes connection options, the same in every
//! process: no TLS to a database on this machine unless asked for.
//!
//! libpq's and sqlx's default, `sslmode=prefer`, encrypts whenever the
//! server offers TLS (Debian's PostgreSQL does) but verifies nothing. On
//! loopback that buys nothing (whoever can read loopback traffic can read
//! the process's memory) and costs much: pgbench's select-only load ran
//! 1.54 times as long over TLS (docs/BENCHMARKS.md, "TLS to a local
//! PostgreSQL"). So a URL whose host is loopback (`127.0.0.0/8`, `::1`,
//! `localhost`) or a Unix socket, and which names no `sslmode` (nor
//! `PGSSLMODE` in the environment), connects without TLS. Any other URL is
//! left as it is: `prefer` to a remote database, or what it names.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// The options of `url`, with the loopback default above.
pub fn pg_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    let opts = PgConnectOptions::from_str(url)?;
    if names_sslmode(url) || std::env::var_os("PGSSLMODE").is_some() {
        return Ok(opts);
    }
    if is_local(opts.get_host()) {
        Ok(opts.ssl_mode(PgSslMode::Disable))
    } else {
        Ok(opts)
    }
}

fn names_sslmode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, q)| {
        q.split('&').any(|kv| {
            let key = kv.split('=').next().unwrap_or("");
            key.eq_ignore_ascii_case("sslmode") || key.eq_ignore_ascii_case("ssl-mode")
        })
    })
}

fn is_local(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.starts_with('/')
        || h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> String {
        format!("{:?}", pg_options(url).unwrap().get_ssl_mode())
    }

    #[test]
    fn loopback_goes_without_tls_unless_the_url_asks() {
        if std::env::var_os("PGSSLMODE").is_some() {
            eprintln!("SKIP: PGSSLMODE is set in this environment");
            return;
        }
        assert_eq!(mode("postgres://root@127.0.0.1:5432/x"), "Disable");
        assert_eq!(mode("postgres://root@localhost/x"), "Disable");
        assert_eq!(mode("postgres://root@[::1]:5432/x"), "Disable");
        assert_eq!(
            mode("postgres://root@127.0.0.1/x?sslmode=require"),
            "Require"
        );
        assert_eq!(mode("postgres://root@127.0.0.1/x?sslmode=prefer"), "Prefer");
        assert_eq!(mode("postgres://root@db.example:5432/x"), "Prefer");
        assert_eq!(
            mode("postgres://root@10.1.2.3/x?sslmode=verify-full"),
            "VerifyFull"
        );
    }
}
