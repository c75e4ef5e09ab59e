//! Power state follows the guest (Nova's lifecycle events and
//! `_sync_power_states`).
//!
//! A host whose driver asks for it ([`Driver::power_sync_interval`]: the
//! libvirt driver, every 2 s by default) reads every guest's power state
//! each interval and acts on the guests whose state changed since the
//! last look, and on all of them every `full` interval (the periodic sync
//! for what a look missed). The `virt` crate has no safe binding for
//! libvirt's event callbacks and the workspace forbids `unsafe`, so the
//! "events" are this cheap poll: one `list_all_domains` per interval on
//! the host, nothing at all on the conductor until something changes.
//!
//! For each guest that changed, the instance is read back through the
//! conductor and the guest's state read again (so a state older than the
//! record is never acted on), then, as Nova's `_sync_instance_power_state`:
//!
//! | vm_state | guest | done |
//! | --- | --- | --- |
//! | any, task state set | any | nothing: the action owns it |
//! | `active` or `paused` | shut down, crashed or suspended | vm_state `stopped` (the guest stopped itself) |
//! | `stopped` | running or paused | the guest is powered off (Nova's force stop) |
//! | otherwise | differs from the record | power state recorded |
//!
//! Every update expects task state NULL and this host, so a user's action
//! started meanwhile wins.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::ids::InstanceUuid;
use fabric::rpc::{power_state as ps, vm_state as vs, InstanceUpdate, RequestIds};
use tracing::{info, warn};

use crate::conductor::ConductorClient;
use crate::driver::{Driver, GuestOp};
use crate::error::{chain, ComputeError};
use crate::metrics;

/// What to do about one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    /// Nothing.
    Nothing,
    /// Record the guest's power state.
    Power(i32),
    /// The guest stopped by itself: vm_state `stopped` with this power state.
    Stopped(i32),
    /// The instance is stopped but its guest runs: power it off.
    ForceStop,
}

/// Nova's `_sync_instance_power_state` decision, for an instance in
/// `vm_state` / `task_state` whose record says `recorded` and whose guest
/// is `observed`.
pub fn decide(
    vm_state: &str,
    task_state: Option<&str>,
    recorded: i32,
    observed: i32,
) -> SyncAction {
    if task_state.is_some_and(|t| !t.is_empty()) {
        return SyncAction::Nothing;
    }
    let off = matches!(observed, ps::SHUTDOWN | ps::CRASHED | ps::SUSPENDED);
    match vm_state {
        vs::ACTIVE | vs::PAUSED if off => SyncAction::Stopped(observed),
        vs::STOPPED if matches!(observed, ps::RUNNING | ps::PAUSED) => SyncAction::ForceStop,
        vs::BUILDING | vs::DELETED => SyncAction::Nothing,
        _ if recorded != observed => SyncAction::Power(observed),
        _ => SyncAction::Nothing,
    }
}

/// The sync loop of one host; runs until dropped.
pub async fn run(
    host: String,
    driver: Arc<dyn Driver>,
    conductor: ConductorClient,
    every: Duration,
    full: Duration,
) {
    let mut last: HashMap<InstanceUuid, i32> = HashMap::new();
    let mut last_full = Instant::now();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let d = driver.clone();
        let now = match tokio::task::spawn_blocking(move || d.power_states()).await {
            Ok(Ok(states)) => states.into_iter().collect::<HashMap<_, _>>(),
            Ok(Err(e)) => {
                warn!(error = %chain(&e), "power-state sync: the hypervisor could not list its guests");
                continue;
            }
            Err(e) => {
                warn!(error = %e, "power-state sync: the listing did not finish");
                continue;
            }
        };
        let everything = last_full.elapsed() >= full;
        let mut changed: Vec<InstanceUuid> = now
            .iter()
            .filter(|(u, s)| everything || last.get(u) != Some(s))
            .map(|(u, _)| *u)
            .collect();
        // Guests that vanished: their instances' guests are gone.
        changed.extend(last.keys().filter(|u| !now.contains_key(u)).copied());
        if changed.is_empty() {
            last = now;
            continue;
        }
        match sync(&host, driver.as_ref(), &conductor, &changed).await {
            Ok(()) => {
                last = now;
                if everything {
                    last_full = Instant::now();
                }
            }
            // Looked at again next time.
            Err(e) => warn!(error = %chain(&e), "power-state sync could not read the instances"),
        }
    }
}

/// Acts on `guests` (see the module docs). Fails only when the instances
/// cannot be read; each instance's own failure is logged and counted.
pub async fn sync(
    host: &str,
    driver: &dyn Driver,
    conductor: &ConductorClient,
    guests: &[InstanceUuid],
) -> Result<(), ComputeError> {
    let records = conductor.instances_by_host(host, guests).await?;
    let ids = RequestIds::default();
    for r in records {
        let Ok(uuid) = r.instance_uuid.parse::<InstanceUuid>() else {
            continue;
        };
        if r.deleted || r.host.as_deref() != Some(host) || !guests.contains(&uuid) {
            continue;
        }
        // Read again, after the record: never act on a state older than it.
        let observed = driver.power_state(uuid);
        let action = decide(
            &r.vm_state,
            r.task_state.as_deref(),
            r.power_state,
            observed,
        );
        let mut u = InstanceUpdate {
            instance_uuid: r.instance_uuid.clone(),
            expected_task_states: vec![String::new()],
            expected_host: Some(host.to_owned()),
            ..Default::default()
        };
        let outcome = match action {
            SyncAction::Nothing => continue,
            SyncAction::Power(p) => {
                u.power_state = Some(p);
                "power"
            }
            SyncAction::Stopped(p) => {
                warn!(instance = %uuid, vm_state = %r.vm_state, power_state = p, "the guest stopped by itself; the instance is stopped");
                u.power_state = Some(p);
                u.vm_state = Some(vs::STOPPED.to_owned());
                "stopped"
            }
            SyncAction::ForceStop => {
                warn!(instance = %uuid, "the instance is stopped but its guest runs; powering it off");
                if let Err(e) = driver.perform(uuid, &GuestOp::PowerOff).await {
                    warn!(instance = %uuid, error = %chain(&e), "could not power the guest off");
                    metrics::power_sync("failed");
                    continue;
                }
                u.power_state = Some(driver.power_state(uuid));
                "force_stopped"
            }
        };
        match conductor.update_instance(&u, &ids).await {
            Ok(_) => {
                info!(instance = %uuid, outcome, "power state synced");
                metrics::power_sync(outcome);
            }
            Err(e) if crate::agent::superseded(&e) => metrics::power_sync("skipped"),
            Err(e) => {
                warn!(instance = %uuid, error = %chain(&e), "could not record the power state");
                metrics::power_sync("failed");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_novas_sync() {
        use SyncAction::*;
        assert_eq!(
            decide(vs::ACTIVE, None, ps::RUNNING, ps::SHUTDOWN),
            Stopped(ps::SHUTDOWN)
        );
        assert_eq!(
            decide(vs::ACTIVE, None, ps::RUNNING, ps::CRASHED),
            Stopped(ps::CRASHED)
        );
        assert_eq!(
            decide(vs::PAUSED, None, ps::PAUSED, ps::SHUTDOWN),
            Stopped(ps::SHUTDOWN)
        );
        assert_eq!(
            decide(vs::ACTIVE, Some("powering-off"), ps::RUNNING, ps::SHUTDOWN),
            Nothing
        );
        assert_eq!(
            decide(vs::STOPPED, None, ps::SHUTDOWN, ps::RUNNING),
            ForceStop
        );
        assert_eq!(
            decide(vs::STOPPED, None, ps::SHUTDOWN, ps::SHUTDOWN),
            Nothing
        );
        assert_eq!(
            decide(vs::ACTIVE, None, ps::RUNNING, ps::NOSTATE),
            Power(ps::NOSTATE)
        );
        assert_eq!(
            decide(vs::ACTIVE, None, ps::RUNNING, ps::PAUSED),
            Power(ps::PAUSED)
        );
        assert_eq!(
            decide(vs::BUILDING, None, ps::NOSTATE, ps::RUNNING),
            Nothing
        );
        assert_eq!(
            decide(vs::ERROR, None, ps::RUNNING, ps::SHUTDOWN),
            Power(ps::SHUTDOWN)
        );
        assert_eq!(
            decide(vs::ACTIVE, Some(""), ps::RUNNING, ps::RUNNING),
            Nothing
        );
    }
}
