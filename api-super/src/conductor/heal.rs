//! Healing of builds whose scheduler died.
//!
//! `POST /servers` answers 202 once the build requests are in the API
//! database and schedules them in a task of the same process: if that
//! process dies before a build lands in a cell, nobody would drive it
//! again. So every api-super process that serves the Compute API has a
//! random id, beats in `api_schedulers` every `heartbeat_secs`, and writes
//! its id as the `owner` of the build requests it creates (API migration
//! 0004). A healer in each such process, once at start-up and then every
//! `interval_secs`, looks for build requests owned by a process silent for
//! longer than `grace_secs` (or without an owner and older than that),
//! takes each create over with a compare-and-set on `owner` (all its
//! instances at once, so two healers never both drive one build), makes
//! the retry safe — the instance row the dead process may have created in
//! some cell (cell0 included) without landing it is removed, and any
//! placement allocation held by the instance uuid is released — and
//! drives the build through [`SuperConductor::schedule_and_build`] again,
//! the instances of one create together (all or none, as the create
//! asked). A build deleted by its user meanwhile is not brought back: its
//! build request is gone, so it is not found, cannot be taken over, or
//! does not land (`finish_build`), as for any build.
//!
//! The landing transaction only deletes a build request its process still
//! owns (`ComputeDb::finish_build`), so a process that was only slow (its
//! heartbeat late by more than the grace) cannot land a build another has
//! taken over. Clocks of the api-super hosts must agree well within the
//! grace (heartbeats are written and compared with each host's clock).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{chain, SuperConductor};

/// `[compute.build_heal]` options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuildHealConfig {
    /// Seconds between healing passes (one also runs at start-up); 0: no
    /// healing in this process (its heartbeat still runs, so others leave
    /// its builds alone).
    pub interval_secs: u64,
    /// How long a scheduler process may be silent before its unfinished
    /// builds are taken over (also: how old a build request without an
    /// owner must be). Keep it several heartbeats long.
    pub grace_secs: u64,
    /// Seconds between this process's heartbeats.
    pub heartbeat_secs: u64,
    /// Most build requests looked at in one pass.
    pub batch: u32,
}

impl Default for BuildHealConfig {
    fn default() -> Self {
        Self {
            interval_secs: 30,
            grace_secs: 60,
            heartbeat_secs: 10,
            batch: 200,
        }
    }
}

/// Longest wait for one placement call of the healer.
const PLACEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh process id (the `api_schedulers` row and build-request owner).
pub fn new_process_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Finds and re-drives builds whose scheduler is gone.
#[derive(Debug, Clone)]
pub struct BuildHealer {
    conductor: Arc<SuperConductor>,
    me: String,
    grace: chrono::Duration,
    batch: i64,
}

impl BuildHealer {
    /// A healer acting as the owner of `conductor`'s API-database handle;
    /// `None` when that handle has no owner.
    pub fn new(conductor: Arc<SuperConductor>, cfg: &BuildHealConfig) -> Option<Self> {
        let me = conductor.db().owner()?.to_owned();
        Some(Self {
            conductor,
            me,
            grace: chrono::Duration::seconds(cfg.grace_secs.clamp(1, 86_400 * 365) as i64),
            batch: i64::from(cfg.batch.max(1)),
        })
    }

    /// One pass: every orphaned build found (at most `batch`) is taken
    /// over, made safe and scheduled again. Returns the instances driven
    /// again. Errors are logged; what could not be healed is looked at
    /// again by the next pass (of this or another process).
    #[tracing::instrument(skip_all, fields(scheduler = %self.me))]
    pub async fn heal_once(&self) -> Vec<String> {
        if let Some(age) = self.conductor.lease().stale() {
            // Builds taken over now would be given up again at landing.
            tracing::warn!(
                heartbeat_age_secs = age.as_secs_f64(),
                "this scheduler's heartbeat is stale: not healing"
            );
            return Vec::new();
        }
        let db = self.conductor.db();
        let cutoff = Utc::now() - self.grace;
        let orphans = match db.orphan_builds(&self.me, cutoff, self.batch).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot look for orphaned builds");
                return Vec::new();
            }
        };
        if let Err(e) = db.prune_schedulers(cutoff).await {
            tracing::warn!(error = %chain(&e), "cannot forget dead scheduler processes");
        }
        let owners: HashMap<String, Option<String>> = orphans.iter().cloned().collect();
        let mut seen = HashSet::new();
        let mut healed = Vec::new();
        for (uuid, _) in &orphans {
            if seen.contains(uuid) {
                continue;
            }
            let spec = match db.request_spec(uuid).await {
                Ok(Some(s)) => s,
                Ok(None) => {
                    // Deleted meanwhile (or never had one): nothing to drive.
                    seen.insert(uuid.clone());
                    continue;
                }
                Err(e) => {
                    tracing::warn!(instance = %uuid, error = %chain(&e), "cannot read the request spec of an orphaned build");
                    seen.insert(uuid.clone());
                    continue;
                }
            };
            // The create's instances that are still unlanded orphans.
            let mut group: Vec<(String, Option<String>)> = spec
                .instance_uuids
                .iter()
                .filter(|u| !seen.contains(*u))
                .filter_map(|u| owners.get(u).map(|o| (u.clone(), o.clone())))
                .collect();
            if !group.iter().any(|(u, _)| u == uuid) {
                group = vec![(uuid.clone(), owners.get(uuid).cloned().flatten())];
            }
            seen.extend(group.iter().map(|(u, _)| u.clone()));
            healed.extend(self.heal_group(&group).await);
        }
        healed
    }

    async fn heal_group(&self, group: &[(String, Option<String>)]) -> Vec<String> {
        let db = self.conductor.db();
        match db.take_over_builds(group, &self.me).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(
                    instances = group.len(),
                    "orphaned build taken or deleted meanwhile"
                );
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot take an orphaned build over");
                return Vec::new();
            }
        }
        let uuids: Vec<String> = group.iter().map(|(u, _)| u.clone()).collect();
        if let Err(e) = self.make_safe(&uuids).await {
            tracing::warn!(instances = ?uuids, error = %e, "cannot make an orphaned build safe to retry; released for a later pass");
            self.release(&uuids).await;
            return Vec::new();
        }
        let mut builds = Vec::new();
        for (uuid, dead) in group {
            let loaded = match db.build_request(uuid).await {
                Ok(Some(b)) => db
                    .request_spec(uuid)
                    .await
                    .map(|s| s.map(|s| (b.instance, s))),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match loaded {
                Ok(Some((b, s))) if b.uuid == *uuid => {
                    tracing::info!(instance = %uuid, dead_owner = dead.as_deref().unwrap_or("none"), "healing a build whose scheduler is gone");
                    builds.push((b, s));
                }
                Ok(Some(_)) => {
                    tracing::error!(instance = %uuid, "build request names another instance; left alone");
                }
                Ok(None) => {
                    tracing::info!(instance = %uuid, "orphaned build deleted meanwhile");
                }
                Err(e) => {
                    tracing::warn!(instance = %uuid, error = %chain(&e), "cannot read an orphaned build; released for a later pass");
                    self.release(&uuids).await;
                    return Vec::new();
                }
            }
        }
        if builds.is_empty() {
            return Vec::new();
        }
        let driven: Vec<String> = builds.iter().map(|(b, _)| b.uuid.clone()).collect();
        // In a task of its own, as the create path does (which also keeps
        // this future's type small); awaited, so passes do not overlap.
        let conductor = self.conductor.clone();
        if let Err(e) =
            tokio::spawn(async move { conductor.schedule_and_build(builds).await }).await
        {
            tracing::error!(error = %e, "healed build's scheduling task failed");
        }
        driven
    }

    /// Removes what the dead process may have left of `uuids`: an instance
    /// row in any cell that never landed, and the placement allocations of
    /// the instance uuid. Every cell must answer: one that cannot might
    /// hold a row, and landing elsewhere would duplicate the instance.
    async fn make_safe(&self, uuids: &[String]) -> Result<(), String> {
        let cells = self.conductor.cells();
        for cell in cells.all() {
            for uuid in uuids {
                let u = uuid.clone();
                let removed = cells
                    .read(&cell, |cdb| async move { cdb.api_purge_unlanded(&u).await })
                    .await
                    .map_err(|e| format!("cell {}: {}", cell.uuid, chain(&e)))?;
                if removed {
                    tracing::info!(instance = %uuid, cell = %cell.uuid, "removed the instance row of a build that never landed");
                }
            }
        }
        let placement = self.conductor.scheduler().placement();
        for uuid in uuids {
            tokio::time::timeout(PLACEMENT_TIMEOUT, placement.delete_allocations(uuid))
                .await
                .map_err(|_| "placement did not answer in time".to_owned())?
                .map_err(|e| format!("placement: {}", chain(&e)))?;
        }
        Ok(())
    }

    async fn release(&self, uuids: &[String]) {
        if let Err(e) = self.conductor.db().release_builds(uuids, &self.me).await {
            tracing::warn!(error = %chain(&e), "cannot release orphaned builds");
        }
    }
}

/// This process's lease on the builds it owns: fresh while its heartbeat
/// was written within `limit` (half the healing grace), so no healer can
/// have counted it dead yet (heartbeats older than the grace are). Without
/// a limit (healing not started in this process) it never goes stale.
#[derive(Debug, Default)]
pub struct Lease {
    state: std::sync::Mutex<Option<(std::time::Instant, Duration)>>,
}

impl Lease {
    /// Starts the lease: a heartbeat was just written, stale after `limit`.
    pub fn start(&self, limit: Duration) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((std::time::Instant::now(), limit));
    }

    /// A heartbeat was written now.
    pub fn renew(&self) {
        if let Some((at, _)) = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            *at = std::time::Instant::now();
        }
    }

    /// How long since the last heartbeat, when that is past the limit.
    pub fn stale(&self) -> Option<Duration> {
        let state = *self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (at, limit) = state?;
        let age = at.elapsed();
        (age > limit).then_some(age)
    }
}

/// Starts this process's heartbeat and, unless `interval_secs` is 0, its
/// healer (a pass at once, then every interval). Nothing when the
/// conductor's API-database handle has no owner. The tasks run until
/// aborted.
pub fn start(conductor: Arc<SuperConductor>, cfg: &BuildHealConfig) -> Vec<JoinHandle<()>> {
    let Some(healer) = BuildHealer::new(conductor, cfg) else {
        return Vec::new();
    };
    let beat = Duration::from_secs(cfg.heartbeat_secs.max(1));
    if cfg.grace_secs < 2 * beat.as_secs() {
        tracing::warn!(
            grace_secs = cfg.grace_secs,
            heartbeat_secs = beat.as_secs(),
            "build healing grace shorter than two heartbeats: live builds may be taken over"
        );
    }
    // The first heartbeat was written before the service started.
    healer
        .conductor
        .lease()
        .start(Duration::from_secs(cfg.grace_secs.max(1)) / 2);
    let mut tasks = Vec::new();
    let h = healer.clone();
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let db = h.conductor.db();
            match tokio::time::timeout(beat, db.scheduler_heartbeat(&h.me, Utc::now())).await {
                Ok(Ok(())) => h.conductor.lease().renew(),
                Ok(Err(e)) => tracing::warn!(error = %chain(&e), "scheduler heartbeat failed"),
                Err(_) => tracing::warn!("scheduler heartbeat timed out"),
            }
        }
    }));
    if cfg.interval_secs > 0 {
        let every = Duration::from_secs(cfg.interval_secs);
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let healed = healer.heal_once().await;
                if !healed.is_empty() {
                    tracing::info!(
                        builds = healed.len(),
                        "healing pass drove orphaned builds again"
                    );
                }
            }
        }));
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_goes_stale_without_heartbeats_and_renews() {
        let lease = Lease::default();
        assert_eq!(lease.stale(), None, "no lease: never stale");
        lease.renew();
        assert_eq!(lease.stale(), None);
        lease.start(Duration::from_millis(30));
        assert_eq!(lease.stale(), None, "fresh after start");
        std::thread::sleep(Duration::from_millis(50));
        let age = lease.stale().expect("stale past its limit");
        assert!(age >= Duration::from_millis(50), "{age:?}");
        lease.renew();
        assert_eq!(lease.stale(), None, "a heartbeat renews it");
    }
}
