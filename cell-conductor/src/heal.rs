//! The cell conductor's healing loop (issue 31): no build stays in BUILD.
//!
//! Reconciler style: every `interval` it compares what should be (a build
//! runs on a live host and ends within the build timeout) with what the
//! cell database shows, acts, and looks again at the next pass. Every act
//! is a compare-and-set on the instance still building where it was seen,
//! so a pass that races with a compute, a delete or another conductor's
//! pass changes nothing twice.
//!
//! 1. Casts of builds that ended are forgotten (`build_casts`).
//! 2. A build on a compute seen dead (forced down, or no heartbeat for
//!    `service_down_time`) is re-driven from its recorded cast: the next
//!    alternate that takes the claim gets it, or, with none left (a forced
//!    host has none), it goes to ERROR with a fault naming the host and
//!    why, and its allocations are freed. The compute, if it comes back,
//!    finds the cast expired or the instance on another host (the first
//!    build step is fenced on the host) and never replays it.
//! 3. A build whose cast expired unread (a lost cast, a host not consuming)
//!    is re-driven the same way, once `cast_grace` has passed; one whose
//!    cast could not be sent at all (recorded with `expires_at` ≤
//!    `cast_at` by the sender) at the next pass.
//! 4. A task held by a host seen dead is let go: a delete (`deleting`) is
//!    finished here, as the API's local delete would have (the instance
//!    marked deleted, its allocations removed; the host destroys the guest
//!    when it comes back, `init_host`); any other task state (a power
//!    action, a rebuild) is put back to none, so the server can be acted
//!    on again.
//! 5. A build older than the build timeout (Nova's
//!    `instance_build_timeout`, here on by default) goes to ERROR with a
//!    fault; its allocations are freed.
//! 6. A delete on a live host that nothing has touched for
//!    `delete_resend` (its terminate cast lost, or expired unread) is
//!    sent to the host again, once per period (compare-and-set on the
//!    row's `updated_at`, so two conductors send it once); the compute's
//!    terminate is idempotent (a guest already gone is not missed).
//!
//! Dead hosts are not acted on while this conductor itself could not have
//! seen them alive: until heartbeats have been flowing for
//! `service_down_time` (plus 2 s) without a gap, after its start and again
//! after every break of the liveness path. The canary every conductor
//! casts to the liveness queue each flush interval keeps them flowing in a
//! cell whose hosts all died (that cell is healed); a gap of several flush
//! intervals (at least 2 s) means the path itself was broken (the broker
//! restarted, this consumer was away), and every host's `last_seen_up` is
//! stale until it has beaten again and the beat is written. A host whose
//! beats this conductor holds unwritten (its database was away) is never
//! taken for down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::ids::InstanceUuid;
use fabric::rpc::{self, RequestIds};
use prost::Message;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::db::builds::{BuildCast, HeldTask};
use crate::error::{chain, ConductorError, Result};
use crate::liveness::Liveness;
use crate::metrics;
use crate::model::{Fault, InstanceChange};
use crate::placement::PlacementError;
use crate::service::Conductor;

/// How the healing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealOptions {
    /// Time between passes; zero: no healing in this conductor.
    pub interval: Duration,
    /// A compute without a heartbeat for this long is down (the API's
    /// `service_down_time`).
    pub service_down_time: Duration,
    /// A build older than this goes to ERROR; zero: never.
    pub build_timeout: Duration,
    /// How long after its expiry an unread cast is re-driven (the compute
    /// may have taken it just before).
    pub cast_grace: Duration,
    /// Most builds acted on per kind in one pass.
    pub batch: i64,
    /// Time between placement audits of the cell (see [`crate::audit`]);
    /// zero: none.
    pub audit_interval: Duration,
    /// A delete on a live host untouched for this long is sent again
    /// (longer than a terminate cast lives); zero: never.
    pub delete_resend: Duration,
}

impl Default for HealOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            service_down_time: Duration::from_secs(5),
            build_timeout: Duration::from_secs(900),
            cast_grace: Duration::from_secs(10),
            batch: 200,
            audit_interval: Duration::from_secs(300),
            delete_resend: rpc::ACTION_CAST_TTL + Duration::from_secs(10),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealReport {
    /// Casts of ended builds forgotten.
    pub forgotten: u64,
    /// Hosts seen down (acted on or not).
    pub down_hosts: Vec<String>,
    /// Builds moved to an alternate.
    pub rescheduled: u32,
    /// Builds ended in ERROR (no alternate left).
    pub failed: u32,
    /// Builds ended in ERROR by the build timeout.
    pub timed_out: u32,
    /// Deletes held by a dead host, finished here.
    pub deleted: u32,
    /// Other task states held by a dead host, put back to none.
    pub released: u32,
    /// Deletes sent again to a live host.
    pub resent: u32,
}

/// Runs passes every `o.interval` until shutdown.
pub(crate) async fn run(
    conductor: Arc<Conductor>,
    liveness: Arc<Liveness>,
    o: HealOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let suspects = crate::audit::Suspects::default();
    let mut last_audit = Instant::now();
    let mut tick = tokio::time::interval(o.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::stopped(&mut shutdown) => break,
        }
        // Beats flowing long enough for every live host to have been seen
        // and written since this conductor started, or since the liveness
        // path came back after a break (the broker, this consumer).
        let settle = o.service_down_time + Duration::from_secs(2);
        let trust_silence =
            started.elapsed() >= settle && liveness.flowing_for().is_some_and(|f| f >= settle);
        match conductor.heal_once(&o, trust_silence, &liveness).await {
            Ok(r)
                if r.rescheduled + r.failed + r.timed_out + r.deleted + r.released + r.resent
                    > 0 =>
            {
                info!(rescheduled = r.rescheduled, failed = r.failed, timed_out = r.timed_out,
                    deleted = r.deleted, released = r.released,
                    down = ?r.down_hosts, "healing pass acted");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %chain(&e), "healing pass failed; trying again next pass"),
        }
        if !o.audit_interval.is_zero() && last_audit.elapsed() >= o.audit_interval {
            last_audit = Instant::now();
            match conductor.audit_placement(&suspects).await {
                Ok(r) if r.healed + r.moved + r.removed > 0 => {
                    info!(
                        providers = r.providers,
                        healed = r.healed,
                        moved = r.moved,
                        removed = r.removed,
                        suspects = r.suspects,
                        "placement audit acted"
                    );
                }
                Ok(_) => {}
                Err(e) => warn!(error = %chain(&e), "placement audit failed; next audit"),
            }
        }
    }
}

impl Conductor {
    /// One healing pass. `trust_silence`: act on hosts seen down (see the
    /// module's last paragraph).
    pub(crate) async fn heal_once(
        &self,
        o: &HealOptions,
        trust_silence: bool,
        liveness: &Liveness,
    ) -> Result<HealReport> {
        let mut report = HealReport {
            forgotten: self.db.forget_finished_builds().await?,
            ..Default::default()
        };
        let now = chrono::Utc::now();
        let down_cutoff = now - chrono_secs(o.service_down_time);
        // A host whose beats this conductor holds unwritten (its database
        // was away, a flush is due) is not down, whatever the row says.
        let down: Vec<_> = self
            .db
            .down_services(rpc::COMPUTE_BINARY, down_cutoff)
            .await?
            .into_iter()
            .filter(|d| {
                d.forced_down
                    || !liveness.unwritten_since(&d.host, rpc::COMPUTE_BINARY, down_cutoff)
            })
            .collect();
        let down_hosts: Vec<String> = down.iter().map(|d| d.host.clone()).collect();
        report.down_hosts = down_hosts.clone();
        if trust_silence {
            for d in &down {
                let why = if d.forced_down {
                    format!("compute service on {} is forced down", d.host)
                } else {
                    match d.last_seen_up {
                        Some(t) => format!(
                            "compute service on {} is down: no heartbeat for {} s (service_down_time {} s)",
                            d.host,
                            (now - t).num_seconds(),
                            o.service_down_time.as_secs()
                        ),
                        None => format!("compute service on {} has never reported", d.host),
                    }
                };
                for cast in self.db.build_casts_on(&d.host, o.batch).await? {
                    self.heal_cast(cast, &why, &down_hosts, &mut report).await;
                }
                for t in self.db.held_tasks(&d.host, o.batch).await? {
                    self.let_go(t, &d.host, &why, &mut report).await;
                }
            }
        }
        let expired_cutoff = now - chrono_secs(o.cast_grace);
        for cast in self
            .db
            .expired_build_casts(expired_cutoff, rpc::task_state::SCHEDULING, o.batch)
            .await?
        {
            let why = format!(
                "host {} did not take the build: its cast could not be sent, or expired unread ({} s)",
                cast.host,
                rpc::BUILD_CAST_TTL.as_secs()
            );
            self.heal_cast(cast, &why, &down_hosts, &mut report).await;
        }
        if !o.build_timeout.is_zero() {
            let cutoff = now - chrono_secs(o.build_timeout);
            for b in self.db.overdue_builds(cutoff, o.batch).await? {
                let Ok(uuid) = b.uuid.parse::<InstanceUuid>() else {
                    continue;
                };
                if self
                    .time_out(uuid, b.host.as_deref(), o.build_timeout)
                    .await
                {
                    report.timed_out += 1;
                }
            }
        }
        if !o.delete_resend.is_zero() {
            let cutoff = now - chrono_secs(o.delete_resend);
            for (uuid, host) in self.db.stale_deletes(cutoff, o.batch).await? {
                if self.resend_delete(&uuid, &host, cutoff).await {
                    report.resent += 1;
                }
            }
        }
        Ok(report)
    }

    /// Sends the delete of `uuid` to `host` again, if this pass takes it
    /// (see [`crate::db::CellDb::take_stale_delete`]).
    async fn resend_delete(
        &self,
        uuid: &str,
        host: &str,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> bool {
        match self.db.take_stale_delete(uuid, cutoff).await {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                warn!(instance = %uuid, error = %chain(&e), "could not take the stale delete; next pass");
                return false;
            }
        }
        // The open delete's request id, so that its events finish it.
        let request_id = match uuid.parse::<InstanceUuid>() {
            Ok(u) => self
                .db
                .open_action_request_id(u, rpc::action::DELETE)
                .await
                .ok()
                .flatten()
                .unwrap_or_default(),
            Err(_) => return false,
        };
        let ids = RequestIds {
            request_id: request_id.clone(),
            global_request_id: String::new(),
        };
        let t = rpc::TerminateInstance {
            instance_uuid: uuid.to_owned(),
            request_id,
            global_request_id: String::new(),
        };
        match rpc::cast(
            self.bus.as_ref(),
            &rpc::compute_queue(host),
            rpc::method::TERMINATE_INSTANCE,
            &t,
            &ids,
            rpc::ACTION_CAST_TTL,
        )
        .await
        {
            Ok(()) => {
                info!(instance = %uuid, %host, "delete untouched for too long: sent to its host again");
                metrics::healed("delete_resent");
                true
            }
            Err(e) => {
                warn!(instance = %uuid, %host, error = %chain(&e), "could not send the delete again; next period");
                false
            }
        }
    }

    /// Re-drives one recorded build away from `cast.host`.
    async fn heal_cast(
        &self,
        cast: BuildCast,
        why: &str,
        down: &[String],
        report: &mut HealReport,
    ) {
        let build = match rpc::BuildAndRunInstance::decode(cast.message.as_slice()) {
            Ok(b) => b,
            Err(e) => {
                warn!(instance = %cast.instance_uuid, error = %e, "recorded build cast cannot be decoded; the build timeout will end it");
                return;
            }
        };
        let ids = RequestIds {
            request_id: cast.request_id.clone(),
            global_request_id: cast.global_request_id.clone(),
        };
        let req = rpc::Reschedule {
            failed_node: build.node.clone(),
            build: Some(build),
            failed_host: cast.host.clone(),
            error: why.to_owned(),
            traceback: format!("healing: {why}"),
        };
        match self.redrive(req, ids, Some(&cast.host), down).await {
            Ok(r) if r.outcome == rpc::RescheduleOutcome::Rescheduled as i32 => {
                info!(instance = %cast.instance_uuid, from = %cast.host, to = %r.host, %why, "build re-driven to an alternate");
                metrics::healed("rescheduled");
                report.rescheduled += 1;
            }
            Ok(_) => {
                info!(instance = %cast.instance_uuid, host = %cast.host, %why, "no alternate left: build set to ERROR");
                metrics::healed("failed");
                report.failed += 1;
            }
            Err(ConductorError::InstanceNotFound(_))
            | Err(ConductorError::UnexpectedTaskState { .. }) => {
                info!(instance = %cast.instance_uuid, "build went on meanwhile; left alone");
            }
            Err(e) => {
                warn!(instance = %cast.instance_uuid, error = %chain(&e), "could not re-drive the build; next pass")
            }
        }
    }

    /// Lets go of a task held by the dead `host`.
    async fn let_go(&self, t: HeldTask, host: &str, why: &str, report: &mut HealReport) {
        let Ok(uuid) = t.uuid.parse::<InstanceUuid>() else {
            return;
        };
        if t.task_state == rpc::task_state::DELETING {
            match self.db.mark_deleted(uuid, &[]).await {
                Ok(_) => {
                    info!(instance = %uuid, %host, %why, "delete held by a dead host finished here");
                    metrics::healed("deleted");
                    report.deleted += 1;
                    match self.placement.delete_allocations(uuid).await {
                        Ok(()) | Err(PlacementError::NotConfigured) => {}
                        Err(e) => {
                            warn!(instance = %uuid, error = %chain(&e), "could not remove the allocations of the deleted instance")
                        }
                    }
                }
                Err(e) => {
                    warn!(instance = %uuid, error = %chain(&e), "could not finish the delete; next pass")
                }
            }
            return;
        }
        let change = InstanceChange {
            task_state: Some(None),
            expected: vec![Some(t.task_state.clone())],
            expected_host: Some(host.to_owned()),
            ..Default::default()
        };
        match self.db.update_instance(uuid, &change).await {
            Ok(_) => {
                info!(instance = %uuid, %host, task_state = %t.task_state, %why, "task held by a dead host put back to none");
                metrics::healed("released");
                report.released += 1;
            }
            Err(e) if e.is_client_error() => {
                info!(instance = %uuid, error = %chain(&e), "task went on meanwhile; left alone")
            }
            Err(e) => {
                warn!(instance = %uuid, error = %chain(&e), "could not put the task state back; next pass")
            }
        }
    }

    /// Ends a build past the timeout; true when this pass did.
    async fn time_out(&self, uuid: InstanceUuid, host: Option<&str>, timeout: Duration) -> bool {
        let on = host.map(|h| format!(" on host {h}")).unwrap_or_default();
        let message = format!(
            "Build of instance {uuid} timed out after {} s{on} (instance_build_timeout)",
            timeout.as_secs()
        );
        let fault = Fault {
            code: 500,
            message: crate::db::truncate(&message, 255),
            details: Some(message.clone()),
            host: host.map(str::to_owned),
        };
        match self.db.fail_build(uuid, host, &fault, &[]).await {
            Ok(Some(_)) => {
                info!(instance = %uuid, %message, "build timed out: set to ERROR");
                metrics::healed("timed_out");
                match self.placement.delete_allocations(uuid).await {
                    Ok(()) | Err(PlacementError::NotConfigured) => {}
                    Err(e) => {
                        warn!(instance = %uuid, error = %chain(&e), "could not remove the allocations of the timed-out build")
                    }
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                warn!(instance = %uuid, error = %chain(&e), "could not end the timed-out build; next pass");
                false
            }
        }
    }
}

fn chrono_secs(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
