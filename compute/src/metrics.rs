//! Metric names of the compute agent (labels from small enums only: never
//! a UUID or a host name).

use std::time::Duration;

/// Build phase duration, seconds, by phase (`prepare`: the
/// block_device_mapping, networking and spawning steps reported in one
/// call; `spawning`: the driver's spawn; `total`).
pub const BUILD_PHASE_SECONDS: &str = "compute_build_phase_seconds";
/// Builds finished, by outcome (`active`, `rescheduled`, `failed`, `aborted`).
pub const BUILDS: &str = "compute_builds_total";
/// Terminates finished, by outcome (`deleted`, `failed`).
pub const TERMINATES: &str = "compute_terminates_total";
/// Server actions finished, by action (`stop`, `reboot`, …) and outcome
/// (`done`, `failed`, `aborted`).
pub const ACTIONS: &str = "compute_actions_total";
/// Heartbeats, by outcome (`ok`, `error`).
pub const HEARTBEATS: &str = "compute_heartbeats_total";
/// Hosts whose agent runs in this process and is registered.
pub const HOSTS_READY: &str = "compute_hosts_ready";
/// Conductor calls repeated after losing the broker connection or timing
/// out, by method.
pub const CONDUCTOR_CALL_RETRIES: &str = "compute_conductor_call_retries_total";

/// Instances and guests handled by the start-up reconciliation, by action
/// (`deleted`, `build_error`, `reaped`, `power_synced`, …).
pub const INIT_HOST_ACTIONS: &str = "compute_init_host_actions_total";
/// Changes made by the power-state sync, by outcome.
pub const POWER_SYNC: &str = "compute_power_sync_total";

/// Records one phase of a build.
pub fn phase(phase: &'static str, d: Duration) {
    metrics::histogram!(BUILD_PHASE_SECONDS, "phase" => phase).record(d.as_secs_f64());
}

/// Counts one finished build.
pub fn build(outcome: &'static str) {
    metrics::counter!(BUILDS, "outcome" => outcome).increment(1);
}

/// Counts one finished terminate.
pub fn terminate(outcome: &'static str) {
    metrics::counter!(TERMINATES, "outcome" => outcome).increment(1);
}

/// Counts one finished server action.
pub fn action(action: &'static str, outcome: &'static str) {
    metrics::counter!(ACTIONS, "action" => action, "outcome" => outcome).increment(1);
}

/// Counts one heartbeat.
pub fn heartbeat(ok: bool) {
    metrics::counter!(HEARTBEATS, "outcome" => if ok { "ok" } else { "error" }).increment(1);
}

/// One more (or less) registered host.
pub fn host_ready(delta: f64) {
    metrics::gauge!(HOSTS_READY).increment(delta);
}

/// Counts one conductor call repeated after a lost broker connection or a
/// timeout (`method` is one of the wire's method names).
pub fn call_retried(method: &'static str) {
    metrics::counter!(CONDUCTOR_CALL_RETRIES, "method" => method).increment(1);
}

/// Counts one action of the start-up reconciliation.
pub fn init_host_action(action: &'static str) {
    metrics::counter!(INIT_HOST_ACTIONS, "action" => action).increment(1);
}

/// One change the power-state sync made (`power`, `stopped`,
/// `force_stopped`, `skipped`, `failed`).
pub fn power_sync(outcome: &'static str) {
    metrics::counter!(POWER_SYNC, "outcome" => outcome).increment(1);
}
