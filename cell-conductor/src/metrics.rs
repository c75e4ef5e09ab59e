//! Metric names of the cell conductor (labels from small enums only: never
//! a UUID or a host name).

use std::future::Future;
use std::time::{Duration, Instant};

use fabric::rpc::method;

/// Requests handled, by method and outcome (`ok`, `client_error`, `error`,
/// or `expired`: dropped unhandled, its deadline passed while it waited for
/// a worker).
pub const REQUESTS: &str = "conductor_requests_total";
/// Request handling time, seconds, by method.
pub const REQUEST_SECONDS: &str = "conductor_request_seconds";
/// Database statement time, seconds, by named operation.
pub const DB_SECONDS: &str = "conductor_db_seconds";
/// Database statement failures, by named operation.
pub const DB_ERRORS: &str = "conductor_db_errors_total";
/// Reschedule decisions, by outcome (`rescheduled`, `failed`).
pub const RESCHEDULES: &str = "conductor_reschedules_total";
/// Requests being handled right now.
pub const IN_FLIGHT: &str = "conductor_requests_in_flight";
/// Instance updates recognised as repeats of the last applied one (same
/// `update_id`: a compute called again after losing the broker connection
/// or after its call timed out).
pub const REPEATED_UPDATES: &str = "conductor_repeated_instance_updates_total";

/// Batches of build steps applied as one change (see
/// [`crate::model::fold_steps`]); the steps they held are counted in
/// `conductor_folded_instance_steps_total`.
pub const FOLDED_BATCHES: &str = "conductor_folded_step_batches_total";
/// Steps applied within folded batches.
pub const FOLDED_STEPS: &str = "conductor_folded_instance_steps_total";

/// Applied instance updates, by how they were written (`path`:
/// `single_statement`, `transaction`).
pub const INSTANCE_UPDATES: &str = "conductor_instance_updates_total";

/// A method name as a label: one of the known names, or `unknown`.
pub fn method_label(m: &str) -> &'static str {
    const KNOWN: [&str; 13] = [
        method::SERVICE_REGISTER,
        method::COMPUTE_NODE_UPDATE,
        method::SERVICE_HEARTBEAT,
        method::INSTANCE_UPDATE,
        method::INSTANCE_UPDATE_STEPS,
        method::ACTION_EVENT_START,
        method::ACTION_EVENT_FINISH,
        method::INSTANCE_FAULT,
        method::INSTANCE_DESTROYED,
        method::RESCHEDULE,
        method::INSTANCE_GET_ALL_BY_HOST,
        method::PLACEMENT_AUDIT,
        method::HEAL_ALLOCATIONS,
    ];
    KNOWN.into_iter().find(|k| *k == m).unwrap_or("unknown")
}

/// Records one handled request.
pub fn request(method: &'static str, outcome: &'static str, elapsed: Duration) {
    metrics::counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
    metrics::histogram!(REQUEST_SECONDS, "method" => method).record(elapsed.as_secs_f64());
}

/// Counts one instance update answered as an already applied repeat.
pub fn repeated_update() {
    metrics::counter!(REPEATED_UPDATES).increment(1);
}

/// Counts one batch of `steps` steps applied as one change.
pub fn folded_steps(steps: usize) {
    metrics::counter!(FOLDED_BATCHES).increment(1);
    metrics::counter!(FOLDED_STEPS).increment(steps as u64);
}

/// Counts one applied instance update.
pub fn instance_update_path(path: crate::db::instances::UpdatePath) {
    metrics::counter!(INSTANCE_UPDATES, "path" => path.label()).increment(1);
}

/// Counts one reschedule decision.
pub fn reschedule(outcome: &'static str) {
    metrics::counter!(RESCHEDULES, "outcome" => outcome).increment(1);
}

/// Runs a database future, recording its latency and failure under `op`.
pub async fn measured<T, E>(
    op: &'static str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let out = fut.await;
    metrics::histogram!(DB_SECONDS, "op" => op).record(started.elapsed().as_secs_f64());
    if out.is_err() {
        metrics::counter!(DB_ERRORS, "op" => op).increment(1);
    }
    out
}

/// Sets the number of requests being handled.
pub fn gauge_in_flight(n: usize) {
    metrics::gauge!(IN_FLIGHT).set(n as f64);
}

/// Heartbeats written to the database in batches (see [`crate::liveness`]).
pub const HEARTBEATS_FLUSHED: &str = "conductor_heartbeats_flushed_total";
/// What the healing did, by `action` (`rescheduled`, `failed`: a build on
/// a dead host or whose cast expired; `timed_out`: past the build timeout).
pub const HEALED: &str = "conductor_healed_builds_total";

/// Counts `n` heartbeats written in one batch.
pub fn heartbeats_flushed(n: usize) {
    metrics::counter!(HEARTBEATS_FLUSHED).increment(n as u64);
}

/// Counts one build the healing acted on.
pub fn healed(action: &'static str) {
    metrics::counter!(HEALED, "action" => action).increment(1);
}
