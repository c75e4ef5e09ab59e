//! The crate's one error type. Messages never carry a password: URLs in them
//! are masked (`user:****@`). The CLI (`cli/`) is the only place that turns
//! these into exit codes.

use fabric::ids::CellUuid;

/// Everything that can go wrong in cell, host and instance mapping.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transport URL is not one we understand.
    #[error("invalid transport URL {url}: {reason}")]
    InvalidTransportUrl { url: String, reason: String },
    /// A database URL is not one we understand.
    #[error("invalid database URL {url}: {reason}")]
    InvalidDatabaseUrl { url: String, reason: String },
    /// A required URL was given neither on the command line nor in the config.
    #[error("{0} is required (on the command line or in the configuration file)")]
    Missing(&'static str),
    /// A database could not be opened.
    #[error("cannot connect to the {role} database at {url}")]
    Connect {
        role: &'static str,
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// A broker could not be reached.
    #[error("cannot reach the message broker at {url}")]
    Broker {
        url: String,
        #[source]
        source: fabric::bus::BusError,
    },
    /// Migrating a database failed.
    #[error("cannot migrate the {role} database at {url}")]
    Migrate {
        role: &'static str,
        url: String,
        #[source]
        source: migrations::Error,
    },
    /// The API database has no schema yet.
    #[error("the API database at {url} has no schema: run `cell-manage api_db sync` (or `db sync`) first")]
    ApiNotMigrated { url: String },
    /// No cell mapping has this UUID.
    #[error("cell with uuid {0} was not found")]
    CellNotFound(String),
    /// Another cell already uses the transport URL and/or the database URL.
    #[error("the transport URL and/or database connection is already used by cell {0}")]
    DuplicateCell(CellUuid),
    /// Another cell already has this name.
    #[error("a cell named {0:?} already exists")]
    DuplicateName(String),
    /// cell0 cannot be changed this way.
    #[error("cell0 cannot be {0}")]
    Cell0Immutable(&'static str),
    /// `--enable` and `--disable` together.
    #[error("a cell cannot be enabled and disabled at the same time")]
    EnableAndDisable,
    /// Hosts are mapped to the cell.
    #[error("there are {0} host(s) mapped to cell {1}")]
    CellHasHosts(i64, CellUuid),
    /// Live (not deleted) instances are in the cell.
    #[error("there are {0} live instance(s) in cell {1}")]
    CellHasInstances(i64, CellUuid),
    /// Instance mappings point at the cell, all of their instances deleted.
    #[error("there are {0} instance mapping(s) to cell {1} whose instances are all deleted (use --force)")]
    CellHasInstanceMappings(i64, CellUuid),
    /// No host mapping for this host.
    #[error("host {0} was not found")]
    HostNotFound(String),
    /// The host is mapped to another cell.
    #[error("host {host} is not in cell {cell}")]
    HostInOtherCell { host: String, cell: CellUuid },
    /// Live instances are on the host.
    #[error("there are {0} live instance(s) on host {1}")]
    HostHasInstances(i64, String),
    /// `--max-count` is not a positive integer.
    #[error("--max-count must be a positive integer, not {0:?}")]
    InvalidMaxCount(String),
    /// A query failed.
    #[error("database operation {op} failed")]
    Db {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

impl Error {
    /// Whether the error says the database could not be reached (refused,
    /// reset or timed-out connections, a database that is gone, shutting
    /// down or refusing connections, an SQLite file that cannot be opened
    /// or read) rather than that a statement failed. The Compute API treats
    /// a cell whose reads fail this way as down (skipped from listings, or
    /// shown as partial records), as Nova does with a cell that does not
    /// respond.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::InvalidDatabaseUrl { .. } => true,
            Error::Db { source, .. } => migrations::failure::unreachable(source),
            _ => false,
        }
    }

    /// Whether no connection to the database could be had, so nothing
    /// was sent (a subset of [`Error::is_unreachable`]: a connection cut
    /// under a statement is unreachable, but its statement may have been
    /// applied).
    pub fn is_refused(&self) -> bool {
        match self {
            Error::Connect { .. } => true,
            Error::Db { source, .. } => migrations::failure::refused(source),
            _ => false,
        }
    }

    /// Whether a statement failed on a unique constraint (a row with that
    /// key exists already).
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Error::Db { source, .. }
            if source.as_database_error().is_some_and(|d| d.is_unique_violation()))
    }

    /// The error and all its causes on one line, `a: b: c`.
    pub fn one_line(&self) -> String {
        let mut s = self.to_string();
        let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(self);
        while let Some(e) = cur {
            let msg = e.to_string().replace('\n', " ");
            if !s.ends_with(&msg) {
                s.push_str(": ");
                s.push_str(&msg);
            }
            cur = e.source();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn connection_failures_are_unreachable_and_statement_failures_are_not() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let refused = Error::Db {
            op: "api_instances",
            source: sqlx::Error::Io(io),
        };
        assert!(refused.is_unreachable());
        let timed_out = Error::Db {
            op: "api_instances",
            source: sqlx::Error::PoolTimedOut,
        };
        assert!(timed_out.is_unreachable());
        let connect = Error::Connect {
            role: "cell",
            url: "postgres://x".into(),
            source: sqlx::Error::PoolTimedOut,
        };
        assert!(connect.is_unreachable());
        let decode = Error::Db {
            op: "api_instances",
            source: sqlx::Error::RowNotFound,
        };
        assert!(!decode.is_unreachable());
        assert!(!Error::CellNotFound("x".into()).is_unreachable());
    }
}
