//! Start-up reconciliation (Nova's `init_host`): before a host takes work,
//! what its hypervisor has is compared with what the cell database says,
//! and whatever a crash or restart interrupted is finished or undone.
//!
//! One `instance_get_all_by_host` call lists the host's live instances and
//! looks up every guest the driver reports. Then, each instance on its own
//! (a failure is counted and logged, never stops the others):
//!
//! | found | done (as Nova's `_init_instance` / `init_host`) | action |
//! | --- | --- | --- |
//! | guest whose instance is deleted, or `host` is another host | destroy the guest (warning) | `reaped` |
//! | guest the database does not know | left alone (warning) | `unknown_guest` |
//! | task state `deleting` | destroy the guest if present, `instance_destroyed` (the conductor removes the allocations and marks it deleted, as the normal delete) | `deleted` |
//! | vm_state `building`, or task state `block_device_mapping` / `networking` / `spawning` | ERROR, task state NULL, fault "build interrupted by a compute restart"; the placement claim stays (the delete removes it), as Nova | `build_error` |
//! | task state `rebuilding` / `rebuild_spawning` | ERROR with a fault, as Nova | `rebuild_error` |
//! | `powering-off` / `powering-on` | the stop / start is completed | `completed` |
//! | a reboot state, guest not running | hard reboot, as Nova's `_retry_reboot`; a failure sets ERROR (as a failed reboot) | `completed` |
//! | a reboot state, or `pausing` / `unpausing`, guest running | task state NULL, ACTIVE | `cleared` |
//! | `unpausing`, guest paused | the unpause is completed | `completed` |
//! | `pausing` / `suspending` / `resuming` otherwise | task state NULL, vm_state from the guest's power state | `cleared` |
//! | any action state, no guest | task state NULL, power state NOSTATE | `cleared` |
//! | task state NULL, power state differs from the driver's (guest gone: NOSTATE) | power state synced, nothing deleted (Nova's power-state sync) | `power_synced` |
//!
//! An instance in `scheduling` whose host is this one is left alone: its
//! build cast waits in this host's queue (unacknowledged casts go back to
//! the queue when an agent stops) and runs once the host is ready. Every
//! update names the task state it read, so a change made meanwhile (a
//! delete) wins and the instance is counted `skipped`; a cast of the
//! interrupted action redelivered later is refused the same way.
//!
//! Each update goes through the conductor (compute holds no database
//! credentials); the agent bounds the whole pass
//! ([`crate::HostConfig::init_timeout`]) and logs one summary per host.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use fabric::ids::InstanceUuid;
use fabric::rpc::{
    self, power_state as ps, task_state as ts, vm_state as vs, InstanceRecord, InstanceUpdate,
    NullableString, RequestIds,
};
use tracing::{debug, info, warn};

use crate::agent::superseded;
use crate::conductor::ConductorClient;
use crate::driver::{Driver, GuestOp};
use crate::error::{chain, ComputeError};
use crate::metrics;

/// What the reconciliation did, counted by action (`deleted`,
/// `build_error`, `reaped`, …; see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Count per action.
    pub counts: BTreeMap<&'static str, u64>,
}

impl Summary {
    fn add(&mut self, action: &'static str) {
        *self.counts.entry(action).or_default() += 1;
        metrics::init_host_action(action);
    }

    /// How many times `action` was taken.
    pub fn count(&self, action: &str) -> u64 {
        self.counts.get(action).copied().unwrap_or(0)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("nothing to do");
        }
        let mut first = true;
        for (k, v) in &self.counts {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Reconciles `host`'s hypervisor with the cell database (see the module
/// docs). Fails only when the guests (driver) or the instances (conductor)
/// cannot be listed: then nothing is changed.
pub async fn reconcile(
    host: &str,
    driver: &dyn Driver,
    conductor: &ConductorClient,
) -> Result<Summary, ComputeError> {
    let mut summary = Summary::default();
    reconcile_into(host, driver, conductor, &mut summary).await?;
    Ok(summary)
}

/// [`reconcile`], counting what it does into `summary` as it goes, so a
/// caller that gives up on it (a timeout) can still tell what was done.
pub async fn reconcile_into(
    host: &str,
    driver: &dyn Driver,
    conductor: &ConductorClient,
    summary: &mut Summary,
) -> Result<(), ComputeError> {
    let mut guests = driver.list()?;
    if guests.len() > rpc::MAX_LISTED_UUIDS {
        warn!(
            guests = guests.len(),
            "more guests than one listing takes; the rest are not looked up"
        );
        guests.truncate(rpc::MAX_LISTED_UUIDS);
    }
    let records = conductor.instances_by_host(host, &guests).await?;
    let guests: HashSet<InstanceUuid> = guests.into_iter().collect();
    let by_uuid: HashMap<&str, &InstanceRecord> = records
        .iter()
        .map(|r| (r.instance_uuid.as_str(), r))
        .collect();
    // 1. Guests that are not (or no longer) this host's.
    let mut sorted: Vec<_> = guests.iter().copied().collect();
    sorted.sort();
    for g in sorted {
        let key = g.to_string();
        let reason = match by_uuid.get(key.as_str()) {
            None => {
                warn!(instance = %g, "guest unknown to the cell database; left alone");
                summary.add("unknown_guest");
                continue;
            }
            Some(r) if r.deleted => "its instance is deleted",
            Some(r) => match r.host.as_deref() {
                Some(h) if h != host => "its instance is on another host",
                _ => continue,
            },
        };
        warn!(instance = %g, reason, "destroying a guest that is not this host's");
        match driver.destroy(g).await {
            Ok(()) => summary.add("reaped"),
            Err(e) => {
                warn!(instance = %g, error = %chain(&e), "could not destroy the guest");
                summary.add("failed");
            }
        }
    }
    // 2. This host's instances.
    for r in records
        .iter()
        .filter(|r| !r.deleted && r.host.as_deref() == Some(host))
    {
        let Ok(uuid) = r.instance_uuid.parse::<InstanceUuid>() else {
            warn!(instance = %r.instance_uuid, "invalid instance uuid in the listing; skipped");
            summary.add("failed");
            continue;
        };
        let present = guests.contains(&uuid);
        let action = match init_instance(host, driver, conductor, r, uuid, present).await {
            Ok(a) => a,
            Err(e) if superseded(&e) => {
                debug!(instance = %uuid, error = %chain(&e), "changed meanwhile; left to its new owner");
                Some("skipped")
            }
            Err(e) => {
                warn!(instance = %uuid, error = %chain(&e), "could not reconcile the instance");
                Some("failed")
            }
        };
        if let Some(a) = action {
            summary.add(a);
        }
    }
    Ok(())
}

/// One instance of this host; the action taken (`None`: nothing to do).
async fn init_instance(
    host: &str,
    driver: &dyn Driver,
    conductor: &ConductorClient,
    r: &InstanceRecord,
    uuid: InstanceUuid,
    present: bool,
) -> Result<Option<&'static str>, ComputeError> {
    let ids = RequestIds::default();
    let task = r.task_state.as_deref();
    let power = if present {
        driver.power_state(uuid)
    } else {
        ps::NOSTATE
    };
    // An update that applies only if the task state is still the one read.
    let update = || InstanceUpdate {
        instance_uuid: r.instance_uuid.clone(),
        expected_task_states: vec![task.unwrap_or_default().to_owned()],
        ..Default::default()
    };
    match task {
        Some(ts::DELETING) => {
            if present {
                driver.destroy(uuid).await?;
            }
            let d = rpc::InstanceDestroyed {
                instance_uuid: r.instance_uuid.clone(),
                host: host.to_owned(),
                request_id: String::new(),
            };
            conductor.destroyed(&d, &ids).await?;
            info!(instance = %uuid, "interrupted delete finished");
            Ok(Some("deleted"))
        }
        Some(ts::SCHEDULING) => Ok(None),
        Some(ts::BLOCK_DEVICE_MAPPING | ts::NETWORKING | ts::SPAWNING) => {
            set_error(host, conductor, r, uuid, power, "Build").await?;
            Ok(Some("build_error"))
        }
        None if r.vm_state == vs::BUILDING => {
            set_error(host, conductor, r, uuid, power, "Build").await?;
            Ok(Some("build_error"))
        }
        Some(ts::REBUILDING | ts::REBUILD_SPAWNING) => {
            set_error(host, conductor, r, uuid, power, "Rebuild").await?;
            Ok(Some("rebuild_error"))
        }
        Some(
            ts::POWERING_OFF
            | ts::POWERING_ON
            | ts::REBOOTING
            | ts::REBOOT_STARTED
            | ts::REBOOTING_HARD
            | ts::REBOOT_STARTED_HARD
            | ts::PAUSING
            | ts::UNPAUSING
            | ts::SUSPENDING
            | ts::RESUMING,
        ) if !present => {
            let mut u = update();
            u.task_state = NullableString::null();
            u.power_state = Some(ps::NOSTATE);
            conductor.update_instance(&u, &ids).await?;
            info!(instance = %uuid, task_state = ?task, "no guest: task state cleared");
            Ok(Some("cleared"))
        }
        Some(t) => {
            let reboot = matches!(
                t,
                ts::REBOOTING | ts::REBOOT_STARTED | ts::REBOOTING_HARD | ts::REBOOT_STARTED_HARD
            );
            let complete = match t {
                ts::POWERING_OFF => Some((GuestOp::PowerOff, vs::STOPPED)),
                ts::POWERING_ON => Some((GuestOp::PowerOn, vs::ACTIVE)),
                _ if reboot && power != ps::RUNNING => {
                    Some((GuestOp::Reboot { hard: true }, vs::ACTIVE))
                }
                ts::UNPAUSING if power == ps::PAUSED => Some((GuestOp::Unpause, vs::ACTIVE)),
                _ => None,
            };
            if let Some((op, done)) = complete {
                return complete_action(host, driver, conductor, r, uuid, op, done, reboot)
                    .await
                    .map(Some);
            }
            let settles = matches!(
                t,
                ts::PAUSING | ts::UNPAUSING | ts::SUSPENDING | ts::RESUMING
            );
            if !reboot && !settles {
                warn!(instance = %uuid, task_state = t, "task state not handled at start-up; left");
                return Ok(None);
            }
            // The guest's power state says where the action got to.
            let vm = match power {
                ps::RUNNING => Some(vs::ACTIVE),
                ps::PAUSED if settles => Some(vs::PAUSED),
                ps::SUSPENDED if settles => Some(vs::SUSPENDED),
                ps::SHUTDOWN if settles => Some(vs::STOPPED),
                _ => None,
            };
            let mut u = update();
            u.task_state = NullableString::null();
            u.vm_state = vm.map(str::to_owned);
            u.power_state = Some(power);
            conductor.update_instance(&u, &ids).await?;
            info!(instance = %uuid, task_state = t, vm_state = ?vm, "interrupted task state cleared");
            Ok(Some("cleared"))
        }
        None => {
            if i64::from(r.power_state) == i64::from(power) {
                return Ok(None);
            }
            let mut u = update();
            u.power_state = Some(power);
            conductor.update_instance(&u, &ids).await?;
            if present {
                info!(instance = %uuid, power_state = power, "power state synced");
            } else {
                warn!(instance = %uuid, "the hypervisor has no guest for this instance; power state set to NOSTATE");
            }
            Ok(Some("power_synced"))
        }
    }
}

/// ERROR with a fault saying `what` was interrupted by the restart.
async fn set_error(
    host: &str,
    conductor: &ConductorClient,
    r: &InstanceRecord,
    uuid: InstanceUuid,
    power: i32,
    what: &str,
) -> Result<(), ComputeError> {
    let ids = RequestIds::default();
    let task = r.task_state.as_deref();
    let u = InstanceUpdate {
        instance_uuid: r.instance_uuid.clone(),
        vm_state: Some(vs::ERROR.to_owned()),
        task_state: NullableString::null(),
        power_state: Some(power),
        expected_task_states: vec![task.unwrap_or_default().to_owned()],
        ..Default::default()
    };
    let fault = rpc::InstanceFault {
        instance_uuid: r.instance_uuid.clone(),
        code: 500,
        message: format!(
            "{what} of instance {uuid} was interrupted by a restart of compute host {host}"
        ),
        details: format!(
            "vm_state {} task_state {} when the compute service started",
            r.vm_state,
            task.unwrap_or("NULL")
        ),
        host: host.to_owned(),
    };
    conductor.fail_instance(&u, &fault, &ids).await?;
    warn!(instance = %uuid, task_state = ?task, "{what} interrupted by the restart: set to ERROR");
    Ok(())
}

/// Runs the interrupted operation again and ends it as the action would.
#[allow(clippy::too_many_arguments)]
async fn complete_action(
    host: &str,
    driver: &dyn Driver,
    conductor: &ConductorClient,
    r: &InstanceRecord,
    uuid: InstanceUuid,
    op: GuestOp,
    done: &'static str,
    error_on_failure: bool,
) -> Result<&'static str, ComputeError> {
    let ids = RequestIds::default();
    let task = r.task_state.as_deref().unwrap_or_default();
    let result = driver.perform(uuid, &op).await;
    let mut u = InstanceUpdate {
        instance_uuid: r.instance_uuid.clone(),
        task_state: NullableString::null(),
        power_state: Some(driver.power_state(uuid)),
        expected_task_states: vec![task.to_owned()],
        ..Default::default()
    };
    match result {
        Ok(()) => {
            u.vm_state = Some(done.to_owned());
            conductor.update_instance(&u, &ids).await?;
            info!(instance = %uuid, task_state = task, op = op.name(), vm_state = done,
                "interrupted action completed");
            Ok("completed")
        }
        Err(e) => {
            warn!(instance = %uuid, task_state = task, op = op.name(), error = %chain(&e),
                "interrupted action failed again");
            if error_on_failure {
                u.vm_state = Some(vs::ERROR.to_owned());
            }
            let fault = rpc::InstanceFault {
                instance_uuid: r.instance_uuid.clone(),
                code: 500,
                message: e.to_string(),
                details: chain(&e),
                host: host.to_owned(),
            };
            conductor.fail_instance(&u, &fault, &ids).await?;
            Ok("failed")
        }
    }
}
