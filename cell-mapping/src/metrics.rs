//! Metric names of this crate, and the measured query helper.

use std::future::Future;
use std::time::Instant;

use crate::Error;

/// Histogram: latency of one named database operation, seconds (label `op`).
pub const DB_SECONDS: &str = "cell_mapping_db_seconds";
/// Counter: failed database operations (label `op`).
pub const DB_ERRORS: &str = "cell_mapping_db_errors_total";
/// Counter: hosts mapped by discovery.
pub const HOSTS_DISCOVERED: &str = "cell_mapping_hosts_discovered_total";
/// Counter: cell-cache reloads (the change marker moved).
pub const CACHE_RELOADS: &str = "cell_mapping_cache_reloads_total";
/// Counter: failed cell-cache refreshes.
pub const CACHE_ERRORS: &str = "cell_mapping_cache_errors_total";

/// Runs one named database operation, recording latency and errors, and
/// turns its error into [`Error::Db`].
pub async fn measured<T>(
    op: &'static str,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, Error> {
    let start = Instant::now();
    let res = fut.await;
    metrics::histogram!(DB_SECONDS, "op" => op).record(start.elapsed().as_secs_f64());
    res.map_err(|source| {
        metrics::counter!(DB_ERRORS, "op" => op).increment(1);
        Error::Db { op, source }
    })
}
