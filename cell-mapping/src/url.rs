//! Transport and database URLs: validation, masking of passwords, and the
//! default cell0 database URL.
//!
//! Transport URLs: `amqp://user:pass@host:port/vhost` (RabbitMQ, one vhost
//! per cell), `inproc://<name>` (the in-process bus of the embedded region)
//! and `none:///` (cell0 only: nothing ever talks to cell0 over a bus, as
//! upstream). Database URLs: `postgres://…`, `postgresql://…`, `sqlite:…`.

use std::str::FromStr;

use crate::Error;

/// The transport URL of cell0 (as upstream: cell0 has no message bus).
pub const CELL0_TRANSPORT_URL: &str = "none:///";

/// `scheme://user:****@host/...`: the password of a URL replaced by `****`.
/// Anything that does not look like a URL with credentials is returned as is.
pub fn mask(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let (userinfo, hostpart) = authority.split_at(at);
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:****{hostpart}{tail}"),
        None => url.to_owned(),
    }
}

/// The kind of message bus a transport URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// RabbitMQ.
    Amqp,
    /// The in-process bus.
    Inproc,
    /// No bus (cell0).
    None,
}

/// Checks the syntax of a transport URL (never its reachability).
pub fn validate_transport_url(url: &str) -> Result<TransportKind, Error> {
    let invalid = |reason: &str| Error::InvalidTransportUrl {
        url: mask(url),
        reason: reason.to_owned(),
    };
    if url.trim().is_empty() {
        return Err(invalid("empty"));
    }
    if url == CELL0_TRANSPORT_URL {
        return Ok(TransportKind::None);
    }
    if let Some(name) = url.strip_prefix("inproc://") {
        if name.is_empty() || name.contains(['/', '?', '#', ' ']) {
            return Err(invalid("expected inproc://<name>"));
        }
        return Ok(TransportKind::Inproc);
    }
    if url.starts_with("amqp://") || url.starts_with("amqps://") {
        let parsed = lapin::uri::AMQPUri::from_str(url).map_err(|e| invalid(&e))?;
        if parsed.authority.host.is_empty() {
            return Err(invalid("no host"));
        }
        return Ok(TransportKind::Amqp);
    }
    Err(invalid("expected amqp://, amqps:// or inproc://"))
}

/// Checks the syntax of a database URL (never its reachability).
pub fn validate_database_url(url: &str) -> Result<migrations::Backend, Error> {
    let invalid = |reason: String| Error::InvalidDatabaseUrl {
        url: mask(url),
        reason,
    };
    let backend = migrations::Backend::from_url(url).map_err(|e| invalid(e.to_string()))?;
    match backend {
        migrations::Backend::Postgres => {
            sqlx::postgres::PgConnectOptions::from_str(url).map_err(|e| invalid(e.to_string()))?;
            let db = url
                .split_once("://")
                .and_then(|(_, rest)| rest.split_once('/'))
                .map(|(_, path)| path.split('?').next().unwrap_or(""))
                .unwrap_or("");
            if db.is_empty() {
                return Err(invalid("no database name".to_owned()));
            }
        }
        migrations::Backend::Sqlite => {
            sqlx::sqlite::SqliteConnectOptions::from_str(url)
                .map_err(|e| invalid(e.to_string()))?;
        }
    }
    Ok(backend)
}

/// The default cell0 database URL derived from another database URL, as
/// upstream: the database name gets a `_cell0` suffix (PostgreSQL
/// `…/nova` → `…/nova_cell0`; SQLite `sqlite://dir/nova.sqlite?mode=rwc`
/// → `sqlite://dir/nova_cell0.sqlite?mode=rwc`).
pub fn derive_cell0_url(base: &str) -> Result<String, Error> {
    let backend = validate_database_url(base)?;
    let (head, query) = match base.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (base, None),
    };
    let derived = match backend {
        migrations::Backend::Postgres => format!("{head}_cell0"),
        migrations::Backend::Sqlite => {
            let slash = head.rfind('/').map(|i| i + 1).unwrap_or(0);
            let slash = slash.max(head.find(':').map(|i| i + 1).unwrap_or(0));
            let (dir, file) = head.split_at(slash);
            match file.rsplit_once('.') {
                Some((stem, ext)) if !stem.is_empty() => format!("{dir}{stem}_cell0.{ext}"),
                _ => format!("{dir}{file}_cell0"),
            }
        }
    };
    Ok(match query {
        Some(q) => format!("{derived}?{q}"),
        None => derived,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords_only() {
        assert_eq!(
            mask("amqp://guest:secret@127.0.0.1:5672/cell1"),
            "amqp://guest:****@127.0.0.1:5672/cell1"
        );
        assert_eq!(
            mask("postgres://nova:p%40ss@db/nova_cell1?sslmode=disable"),
            "postgres://nova:****@db/nova_cell1?sslmode=disable"
        );
        assert_eq!(mask("postgres://nova@db/x"), "postgres://nova@db/x");
        assert_eq!(mask("sqlite:///tmp/a.sqlite"), "sqlite:///tmp/a.sqlite");
        assert_eq!(mask("inproc://cell1"), "inproc://cell1");
    }

    #[test]
    fn validates_transport_urls() {
        assert_eq!(
            validate_transport_url("amqp://guest:guest@localhost:5672/c1").unwrap(),
            TransportKind::Amqp
        );
        assert_eq!(
            validate_transport_url("inproc://cell1").unwrap(),
            TransportKind::Inproc
        );
        assert_eq!(
            validate_transport_url("none:///").unwrap(),
            TransportKind::None
        );
        for bad in [
            "",
            "rabbit://x",
            "amqp://u:p@h:notaport/v",
            "inproc://",
            "http://x",
        ] {
            assert!(validate_transport_url(bad).is_err(), "{bad}");
        }
        let e = validate_transport_url("amqp://u:secret@h:xx/v").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn validates_database_urls() {
        assert!(validate_database_url("postgres://u:p@h:5432/nova").is_ok());
        assert!(validate_database_url("sqlite:///tmp/x.sqlite?mode=rwc").is_ok());
        assert!(validate_database_url("mysql://u:p@h/nova").is_err());
        assert!(validate_database_url("postgres://u:p@h:5432/").is_err());
        assert!(validate_database_url("postgres://u:p@h:99999/x").is_err());
    }

    #[test]
    fn derives_cell0_urls() {
        assert_eq!(
            derive_cell0_url("postgres://u:p@h/nova?sslmode=disable").unwrap(),
            "postgres://u:p@h/nova_cell0?sslmode=disable"
        );
        assert_eq!(
            derive_cell0_url("sqlite:///var/lib/x/nova.sqlite?mode=rwc").unwrap(),
            "sqlite:///var/lib/x/nova_cell0.sqlite?mode=rwc"
        );
        assert_eq!(
            derive_cell0_url("sqlite:nova").unwrap(),
            "sqlite:nova_cell0"
        );
    }
}
