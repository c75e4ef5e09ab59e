//! What kind of database failure a `sqlx::Error` is, on both backends: the
//! database cannot be reached ([`unreachable`]; [`refused`] when not even a
//! connection was had, so nothing was sent), or a statement lost a race for
//! a lock ([`contended`]). Callers decide from these whether the work
//! may be tried again (the cell conductor answers such failures as
//! `Unavailable`, which the compute agent repeats; the API shows a cell
//! that cannot be reached as down).

/// The database cannot be reached: no connection, the server shutting
/// down or refusing connections, the database gone. A statement that
/// failed this way may or may not have been applied (a commit whose answer
/// was lost); nothing else about the statement was wrong.
pub fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => {
            let code = d.code().unwrap_or_default();
            if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            {
                // 08: connection exception; 57: operator intervention
                // (shutdown, cannot connect now); 53: insufficient
                // resources (too many connections); 28: authorization
                // (the role or its password changed); 3D000: the database
                // does not exist (dropped or renamed); 55000: it does not
                // accept connections (`ALLOW_CONNECTIONS false`).
                ["08", "57", "53", "28"].iter().any(|c| code.starts_with(c))
                    || code == "3D000"
                    || code == "55000"
            } else {
                // SQLite primary result codes (the extended code's low
                // byte): PERM, IOERR, CORRUPT, CANTOPEN, NOTADB.
                code.parse::<i64>()
                    .is_ok_and(|c| matches!(c & 0xff, 3 | 10 | 11 | 14 | 26))
            }
        }
        _ => false,
    }
}

/// No connection could be had, so no statement was sent: nothing the
/// caller asked for was applied (a connection cut under a statement is
/// [`unreachable`] but not this: its statement may have been applied).
pub fn refused(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        sqlx::Error::Database(d)
            if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some() =>
        {
            // Raised while connecting: the database does not accept
            // connections (55000), cannot now (57P03), is gone (3D000),
            // too many connections (53300), authentication (28…).
            let code = d.code().unwrap_or_default();
            matches!(code.as_ref(), "55000" | "57P03" | "3D000" | "53300") || code.starts_with("28")
        }
        _ => false,
    }
}

/// The statement lost a race and was rolled back: a serialization failure
/// or deadlock (40001, 40P01), a lock not granted within `lock_timeout`
/// (55P03), SQLite's BUSY or LOCKED. The same work may succeed when tried
/// again.
pub fn contended(e: &sqlx::Error) -> bool {
    let Some(d) = e.as_database_error() else {
        return false;
    };
    let code = d.code().unwrap_or_default();
    if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        matches!(code.as_ref(), "40001" | "40P01" | "55P03")
    } else {
        code.parse::<i64>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_sent_nothing_a_reset_one_may_have() {
        let refused_io = sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        let reset = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert!(refused(&refused_io) && unreachable(&refused_io));
        assert!(!refused(&reset) && unreachable(&reset));
        assert!(refused(&sqlx::Error::PoolTimedOut));
        assert!(!refused(&sqlx::Error::RowNotFound) && !unreachable(&sqlx::Error::RowNotFound));
    }
}
