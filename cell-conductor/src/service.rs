//! The conductor's methods: decode the request into domain types, change the
//! cell database, answer. Dispatch by method name is in [`Conductor::dispatch`];
//! every error becomes a reply in [`ConductorError::reply_to`].

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use fabric::bus::{Delivery, Transport};
use fabric::failpoint;
use fabric::ids::{InstanceUuid, ProviderUuid};
use fabric::rpc::{
    self, action, method, task_state as ts, RequestIds, RescheduleOutcome, RescheduleResult,
};
use fabric::wire::Envelope;
use prost::Message;
use tracing::{info, instrument, warn};

use crate::db::{truncate, CellDb};
use crate::error::{chain, ConductorError, Result};
use crate::metrics;
use crate::model::{fold_steps, instance_uuid, Event, Fault, InstanceChange, Phase, Targeted};
use crate::placement::{PlacementClient, PlacementError, Resources};

/// The conductor's state: its cell database, its cell bus, placement.
#[derive(Debug)]
pub(crate) struct Conductor {
    pub(crate) db: CellDb,
    pub(crate) bus: Arc<dyn Transport>,
    pub(crate) placement: Arc<dyn PlacementClient>,
}

fn decode<M: Message + Default>(env: &Envelope, method: &'static str) -> Result<M> {
    env.decode_message()
        .map_err(|source| ConductorError::Decode { method, source })
}

fn encode<M: Message>(m: &M) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

fn ids(env: &Envelope) -> RequestIds {
    RequestIds {
        request_id: env.request_id.clone(),
        global_request_id: env.global_request_id.clone(),
    }
}

impl Conductor {
    /// Handles one delivery and settles it (reply for a call, ack for a cast).
    #[instrument(skip_all, fields(method = %d.envelope().method, request_id = %d.envelope().request_id,
        global_request_id = %d.envelope().global_request_id))]
    pub(crate) async fn handle(&self, d: Delivery) {
        let started = Instant::now();
        let env = d.envelope().clone();
        let label = metrics::method_label(&env.method);
        // The subscription drops requests that expired in the queue; one
        // can also expire while it waits for a worker. Its caller stopped
        // waiting: a method safe to repeat has been (or will be) called
        // again, and running this copy late would only race with that
        // repeat, or apply after the caller's next update.
        if env.is_expired() {
            info!("dropping a request that expired before it was handled");
            metrics::request(label, "expired", started.elapsed());
            if let Err(e) = d.reject().await {
                warn!(error = %chain(&e), "could not drop the expired request");
            }
            return;
        }
        let (reply, outcome) = match self.dispatch(&env).await {
            Ok(payload) => (env.reply(payload), "ok"),
            Err(e) => {
                let outcome = if e.is_client_error() {
                    "client_error"
                } else {
                    "error"
                };
                (e.reply_to(&env), outcome)
            }
        };
        metrics::request(label, outcome, started.elapsed());
        if let Err(e) = d.reply(reply).await {
            warn!(error = %chain(&e), "could not send the reply");
        }
    }

    /// Runs the method named by the envelope.
    pub(crate) async fn dispatch(&self, env: &Envelope) -> Result<Bytes> {
        match env.method.as_str() {
            method::SERVICE_REGISTER => {
                let r: rpc::ServiceRegister = decode(env, method::SERVICE_REGISTER)?;
                Ok(encode(&self.service_register(r).await?))
            }
            method::SERVICE_HEARTBEAT => {
                let r: rpc::Heartbeat = decode(env, method::SERVICE_HEARTBEAT)?;
                Ok(encode(&self.heartbeat(r).await?))
            }
            method::COMPUTE_NODE_UPDATE => {
                let r: rpc::ComputeNodeUpdate = decode(env, method::COMPUTE_NODE_UPDATE)?;
                Ok(encode(&self.compute_node_update(r).await?))
            }
            method::INSTANCE_UPDATE => {
                let r: rpc::InstanceUpdate = decode(env, method::INSTANCE_UPDATE)?;
                Ok(encode(&self.instance_update(r).await?))
            }
            method::INSTANCE_UPDATE_STEPS => {
                let r: rpc::InstanceSteps = decode(env, method::INSTANCE_UPDATE_STEPS)?;
                Ok(encode(&self.instance_update_steps(r).await?))
            }
            method::ACTION_EVENT_START | method::ACTION_EVENT_FINISH => {
                let mut r: rpc::ActionEvent = decode(env, method::ACTION_EVENT_START)?;
                r.phase = if env.method == method::ACTION_EVENT_START {
                    rpc::EventPhase::Start
                } else {
                    rpc::EventPhase::Finish
                } as i32;
                self.action_event(r).await?;
                Ok(encode(&rpc::Ack {}))
            }
            method::INSTANCE_FAULT => {
                let r: rpc::InstanceFault = decode(env, method::INSTANCE_FAULT)?;
                self.instance_fault(r).await?;
                Ok(encode(&rpc::Ack {}))
            }
            method::INSTANCE_DESTROYED => {
                let r: rpc::InstanceDestroyed = decode(env, method::INSTANCE_DESTROYED)?;
                Ok(encode(&self.instance_destroyed(r).await?))
            }
            method::RESCHEDULE => {
                let r: rpc::Reschedule = decode(env, method::RESCHEDULE)?;
                Ok(encode(&self.reschedule(r, ids(env)).await?))
            }
            method::INSTANCE_GET_ALL_BY_HOST => {
                let r: rpc::InstanceListByHost = decode(env, method::INSTANCE_GET_ALL_BY_HOST)?;
                Ok(encode(&self.instances_by_host(r).await?))
            }
            method::PLACEMENT_AUDIT => {
                let r: rpc::PlacementAudit = decode(env, method::PLACEMENT_AUDIT)?;
                Ok(encode(&self.placement_audit(r).await?))
            }
            method::HEAL_ALLOCATIONS => {
                let r: rpc::HealAllocations = decode(env, method::HEAL_ALLOCATIONS)?;
                Ok(encode(&self.heal_allocations(r).await?))
            }
            other => Err(ConductorError::UnknownMethod(
                other.chars().take(64).collect(),
            )),
        }
    }

    #[instrument(skip_all, fields(host = %r.host, binary = %r.binary))]
    async fn service_register(&self, r: rpc::ServiceRegister) -> Result<rpc::ServiceRecord> {
        if r.host.is_empty() || r.binary.is_empty() {
            return Err(ConductorError::BadRequest(
                "service needs host and binary".into(),
            ));
        }
        let row = self
            .db
            .register_service(&r.host, &r.binary, &r.topic, r.version)
            .await?;
        info!(service_id = row.id, "service registered");
        Ok(service_record(&row))
    }

    #[instrument(skip_all, fields(host = %r.host))]
    async fn heartbeat(&self, r: rpc::Heartbeat) -> Result<rpc::ServiceRecord> {
        let row = self.db.service_heartbeat(&r.host, &r.binary).await?;
        Ok(service_record(&row))
    }

    #[instrument(skip_all, fields(host = %r.host, node = %r.hypervisor_hostname))]
    async fn compute_node_update(
        &self,
        r: rpc::ComputeNodeUpdate,
    ) -> Result<rpc::ComputeNodeRecord> {
        let row = self.db.upsert_compute_node(&r).await?;
        Ok(rpc::ComputeNodeRecord {
            id: row.id,
            uuid: row.uuid,
            mapped: row.mapped,
        })
    }

    #[instrument(skip_all, fields(instance = %r.instance_uuid))]
    async fn instance_update(&self, r: rpc::InstanceUpdate) -> Result<rpc::InstanceRecord> {
        let t: Targeted<InstanceChange> = r.try_into()?;
        self.apply(t.instance, &t.value).await
    }

    /// Applies one change and answers the row after it.
    async fn apply(&self, uuid: InstanceUuid, c: &InstanceChange) -> Result<rpc::InstanceRecord> {
        let success = is_build_success(c);
        let done = self.db.apply_update(uuid, c, success).await?;
        let row = done.row;
        // Nothing to reset when the update's own statement read a count of 0.
        if success && done.node_failed_builds != Some(0) {
            if let (Some(host), Some(node)) = (&row.host, &row.node) {
                // Nova's compute resets its `failed_builds` on a successful
                // build; the count lives in the node's stats.
                if let Err(e) = self.db.reset_build_failures(host, node).await {
                    warn!(%host, %node, error = %chain(&e), "could not reset the build failure count");
                }
            }
        }
        Ok(row.to_record())
    }

    /// The steps in order, checked as [`Self::instance_update`] checks each.
    /// Steps that follow one another ([`fold_steps`]: each expects the task
    /// state the one before set) are applied as one change, in one
    /// transaction: the states between them are not committed, their
    /// events are all recorded. When that change is refused (a concurrent
    /// change, or a repeat of the batch), or the steps do not fold, they
    /// are applied one by one, each committed on its own: a step refused
    /// because a later step of the same batch was the last update applied
    /// (a repeat of a batch whose reply was lost) is skipped with the steps
    /// up to that one; any other refusal ends the batch with that step's
    /// error (the steps before it stay applied, as separate calls would
    /// have left them).
    #[instrument(skip_all, fields(steps = r.steps.len()))]
    async fn instance_update_steps(&self, r: rpc::InstanceSteps) -> Result<rpc::InstanceRecord> {
        let steps = r.steps;
        let Some(first) = steps.first() else {
            return Err(ConductorError::BadRequest("no steps".into()));
        };
        if steps.len() > rpc::MAX_INSTANCE_STEPS {
            return Err(ConductorError::BadRequest(format!(
                "at most {} steps per call",
                rpc::MAX_INSTANCE_STEPS
            )));
        }
        let uuid = instance_uuid(&first.instance_uuid)?;
        if steps.iter().any(|s| s.instance_uuid != first.instance_uuid) {
            return Err(ConductorError::BadRequest(
                "every step must name the same instance".into(),
            ));
        }
        let keys: Vec<String> = steps.iter().map(|s| s.update_id.clone()).collect();
        let changes = steps
            .into_iter()
            .map(|s| Targeted::<InstanceChange>::try_from(s).map(|t| t.value))
            .collect::<Result<Vec<_>>>()?;
        if let Some(folded) = fold_steps(&changes) {
            match self.apply(uuid, &folded).await {
                Ok(row) => {
                    metrics::folded_steps(changes.len());
                    return Ok(row);
                }
                Err(
                    ConductorError::UnexpectedTaskState { .. }
                    | ConductorError::UnexpectedHost { .. }
                    | ConductorError::InvalidTransition { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
        let mut last = None;
        // Steps before this index are applied (by this call or an earlier
        // copy of it).
        let mut done = 0;
        for (i, step) in changes.iter().enumerate() {
            if i < done {
                continue;
            }
            match self.apply(uuid, step).await {
                Ok(row) => last = Some(row),
                Err(
                    e @ (ConductorError::UnexpectedTaskState { .. }
                    | ConductorError::UnexpectedHost { .. }
                    | ConductorError::InvalidTransition { .. }),
                ) => {
                    let Some((row, Some(applied))) = self.db.instance_with_update_id(uuid).await?
                    else {
                        return Err(e);
                    };
                    let Some(j) = keys
                        .iter()
                        .skip(i + 1)
                        .position(|k| !k.is_empty() && *k == applied)
                        .map(|ahead| i + 1 + ahead)
                    else {
                        return Err(e);
                    };
                    info!(instance = %uuid, update_id = %applied,
                        "repeated steps recognised; applied up to this one already");
                    metrics::repeated_update();
                    done = j + 1;
                    last = Some(row.to_record());
                }
                Err(e) => return Err(e),
            }
        }
        last.ok_or_else(|| ConductorError::BadRequest("no steps".into()))
    }

    #[instrument(skip_all, fields(instance = %r.instance_uuid, event = %r.event))]
    async fn action_event(&self, r: rpc::ActionEvent) -> Result<()> {
        let ev = Event::try_from(r)?;
        self.db.record_event(&ev).await
    }

    #[instrument(skip_all, fields(instance = %r.instance_uuid))]
    async fn instance_fault(&self, r: rpc::InstanceFault) -> Result<()> {
        let t: Targeted<Fault> = r.try_into()?;
        self.db.record_fault(t.instance, &t.value).await
    }

    /// A compute starting up: its live instances, and the guests its
    /// hypervisor reports wherever their instances are.
    #[instrument(skip_all, fields(host = %r.host, guests = r.uuids.len()))]
    async fn instances_by_host(&self, r: rpc::InstanceListByHost) -> Result<rpc::InstanceList> {
        if r.host.is_empty() {
            return Err(ConductorError::BadRequest("listing needs a host".into()));
        }
        if r.uuids.len() > rpc::MAX_LISTED_UUIDS {
            return Err(ConductorError::BadRequest(format!(
                "at most {} uuids per listing",
                rpc::MAX_LISTED_UUIDS
            )));
        }
        let uuids = r
            .uuids
            .iter()
            .map(|u| instance_uuid(u))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.db.instances_for_host(&r.host, &uuids).await?;
        Ok(rpc::InstanceList {
            instances: rows.iter().map(|r| r.to_record()).collect(),
        })
    }

    /// The compute destroyed the guest: remove the allocations, then mark
    /// the instance deleted (so a placement failure leaves the instance
    /// `deleting`, visible, rather than leaking its claim).
    #[instrument(skip_all, fields(instance = %r.instance_uuid, host = %r.host))]
    async fn instance_destroyed(&self, r: rpc::InstanceDestroyed) -> Result<rpc::InstanceRecord> {
        let uuid = instance_uuid(&r.instance_uuid)?;
        failpoint::hit(failpoint::DELETE_ALLOCATIONS)?;
        match self.placement.delete_allocations(uuid).await {
            Ok(()) | Err(PlacementError::NotConfigured) => {}
            Err(e) => return Err(ConductorError::Placement(e)),
        }
        // A delete finished by the agent's start-up reconciliation comes
        // without the request's id: finish the delete it interrupted.
        let request_id = if r.request_id.is_empty() {
            match self
                .db
                .open_event_request_id(uuid, action::DELETE, action::EV_TERMINATE)
                .await
            {
                Ok(id) => id.unwrap_or_default(),
                Err(e) => {
                    warn!(error = %chain(&e), "could not look up the interrupted delete's action");
                    String::new()
                }
            }
        } else {
            r.request_id.clone()
        };
        let mut events = Vec::new();
        if !request_id.is_empty() {
            events.push(Event {
                instance: uuid,
                action: action::DELETE.to_owned(),
                event: action::EV_TERMINATE.to_owned(),
                host: (!r.host.is_empty()).then(|| r.host.clone()),
                request_id,
                global_request_id: None,
                phase: Phase::Finish,
                result: Some(action::SUCCESS.to_owned()),
                traceback: None,
                details: None,
                at: chrono::Utc::now(),
            });
        }
        failpoint::hit(failpoint::DELETE_RECORD)?;
        let row = self.db.mark_deleted(uuid, &events).await?;
        info!("instance deleted");
        Ok(row.to_record())
    }

    /// A build failed on a host: move the claim to the first alternate that
    /// takes it and cast the build there, or set ERROR with a fault naming
    /// the host and the error (and remove the claim).
    #[instrument(skip_all, fields(instance, failed_host = %r.failed_host))]
    async fn reschedule(&self, r: rpc::Reschedule, ids: RequestIds) -> Result<RescheduleResult> {
        self.redrive(r, ids, None, &[]).await
    }

    /// A reschedule: the next alternate of `r.build` that takes the claim
    /// gets the build (recorded in `build_casts`, then cast), or, with none
    /// left, the claim goes and the instance goes to ERROR with a fault
    /// naming `r.failed_host` and `r.error`. With `fence`, asked by the
    /// healing for a build on a host seen dead: only while the instance is
    /// still building on that host, each change compare-and-set on it (a
    /// build that went on meanwhile is left alone, answered `NotFound`).
    /// Alternates on the hosts in `avoid` (seen down) are passed over.
    pub(crate) async fn redrive(
        &self,
        r: rpc::Reschedule,
        ids: RequestIds,
        fence: Option<&str>,
        avoid: &[String],
    ) -> Result<RescheduleResult> {
        let build = r
            .build
            .ok_or_else(|| ConductorError::BadRequest("reschedule without the build".into()))?;
        let instance = instance_uuid(&build.instance_uuid)?;
        tracing::Span::current().record("instance", build.instance_uuid.as_str());
        // The failure counts against the node whatever happens to the
        // instance next (the scheduler's BuildFailureWeigher reads it).
        let failed_node = if r.failed_node.is_empty() {
            &build.node
        } else {
            &r.failed_node
        };
        if !r.failed_host.is_empty() && !failed_node.is_empty() {
            match self
                .db
                .record_build_failure(&r.failed_host, failed_node)
                .await
            {
                Ok(Some(n)) => {
                    info!(node = %failed_node, failed_builds = n, "build failure counted")
                }
                Ok(None) => {
                    warn!(node = %failed_node, "build failure on an unknown node not counted")
                }
                Err(e) => {
                    warn!(node = %failed_node, error = %chain(&e), "could not count the build failure")
                }
            }
        }
        let row = self
            .db
            .instance(instance)
            .await?
            .filter(|r| !r.deleted)
            .ok_or_else(|| ConductorError::InstanceNotFound(build.instance_uuid.clone()))?;
        if row.task_state.as_deref() == Some(ts::DELETING) {
            return Err(ConductorError::UnexpectedTaskState {
                instance: build.instance_uuid.clone(),
                expected: vec![],
                actual: row.task_state,
            });
        }
        if let Some(host) = fence {
            if row.vm_state.as_deref() != Some(rpc::vm_state::BUILDING)
                || row.host.as_deref() != Some(host)
            {
                return Err(ConductorError::InstanceNotFound(format!(
                    "{} building on {host}",
                    build.instance_uuid
                )));
            }
        }
        let flavor = build.flavor.clone().unwrap_or_default();
        let resources = Resources {
            vcpus: flavor.vcpus,
            memory_mb: flavor.memory_mb,
            disk_gb: flavor.disk_gb(),
        };
        let event = |host: &str, result: &str, traceback: Option<String>| Event {
            instance,
            action: action::CREATE.to_owned(),
            event: action::EV_RESCHEDULE.to_owned(),
            host: Some(host.to_owned()),
            request_id: if build.request_id.is_empty() {
                ids.request_id.clone()
            } else {
                build.request_id.clone()
            },
            global_request_id: (!build.global_request_id.is_empty())
                .then(|| build.global_request_id.clone()),
            phase: Phase::Finish,
            result: Some(result.to_owned()),
            details: traceback
                .as_ref()
                .and_then(|t| t.lines().next().map(str::to_owned)),
            traceback,
            at: chrono::Utc::now(),
        };
        let mut tried = Vec::new();
        for (i, alt) in build.alternates.iter().enumerate() {
            if alt.host == r.failed_host {
                continue;
            }
            if avoid.contains(&alt.host) {
                tried.push(format!("{}: down", alt.host));
                continue;
            }
            let Ok(provider) = alt.provider_uuid.parse::<ProviderUuid>() else {
                tried.push(format!(
                    "{}: provider uuid {:?} is invalid",
                    alt.host, alt.provider_uuid
                ));
                continue;
            };
            let moved = match failpoint::hit(failpoint::RESCHEDULE_CLAIM) {
                Ok(()) => self
                    .placement
                    .move_claim(instance, provider, resources, &row.project_id, &row.user_id)
                    .await
                    .map_err(|e| chain(&e)),
                Err(e) => Err(e.to_string()),
            };
            match moved {
                Ok(true) => {
                    let change = InstanceChange {
                        task_state: Some(Some(ts::SCHEDULING.to_owned())),
                        expected_host: fence.map(str::to_owned),
                        host: Some(Some(alt.host.clone())),
                        node: Some(Some(alt.node.clone())),
                        events: vec![event(&alt.host, action::SUCCESS, None)],
                        ..Default::default()
                    };
                    self.db.update_instance(instance, &change).await?;
                    let mut next = build.clone();
                    next.node = alt.node.clone();
                    next.alternates = build.alternates[i + 1..].to_vec();
                    next.attempt = build.attempt.max(1) + 1;
                    // Recorded before the cast: a conductor that dies in
                    // between leaves a cast that the healing re-drives once
                    // it expires unread.
                    self.record_cast(&alt.host, &next, &ids, false).await;
                    if let Err(e) = rpc::cast_build(
                        self.bus.as_ref(),
                        &alt.host,
                        &next,
                        &ids,
                        failpoint::RESCHEDULE_CAST,
                    )
                    .await
                    {
                        // The build is the alternate's now (its claim and
                        // the instance's host): the healing re-drives the
                        // unsent cast at its next pass.
                        warn!(to = %alt.host, error = %e, "could not cast the rescheduled build; leaving it to the healing");
                        self.record_cast(&alt.host, &next, &ids, true).await;
                    }
                    metrics::reschedule("rescheduled");
                    info!(to = %alt.host, attempt = next.attempt, "build rescheduled");
                    return Ok(RescheduleResult {
                        outcome: RescheduleOutcome::Rescheduled as i32,
                        host: alt.host.clone(),
                    });
                }
                Ok(false) => tried.push(format!("{}: no capacity", alt.host)),
                Err(e) => {
                    warn!(alternate = %alt.host, error = %e, "could not move the claim");
                    tried.push(format!("{}: {e}", alt.host));
                }
            }
        }
        // Exhausted: the claim goes, the instance goes to ERROR with a fault.
        match self.placement.delete_allocations(instance).await {
            Ok(()) | Err(PlacementError::NotConfigured) => {}
            Err(e) => warn!(error = %chain(&e), "could not remove the allocations"),
        }
        let message = truncate(
            &format!(
                "Build of instance {instance} failed on host {}: {}",
                r.failed_host, r.error
            ),
            255,
        );
        let details = format!(
            "{}\nalternates tried: {}",
            r.traceback,
            if tried.is_empty() {
                "none left".to_owned()
            } else {
                tried.join("; ")
            }
        );
        let fault = Fault {
            code: 500,
            message: message.clone(),
            details: Some(details.clone()),
            host: Some(r.failed_host.clone()),
        };
        let events = [event(&r.failed_host, action::ERROR, Some(details))];
        match fence {
            None => {
                self.db.set_error(instance, &fault, &events).await?;
            }
            Some(host) => {
                if self
                    .db
                    .fail_build(instance, Some(host), &fault, &events)
                    .await?
                    .is_none()
                {
                    return Err(ConductorError::InstanceNotFound(format!(
                        "{instance} building on {host}"
                    )));
                }
            }
        }
        metrics::reschedule("failed");
        info!(%message, "no alternate left: instance set to ERROR");
        Ok(RescheduleResult {
            outcome: RescheduleOutcome::Failed as i32,
            host: String::new(),
        })
    }
}

impl Conductor {
    /// Records the build cast to `host` (what the healing re-drives),
    /// `unsent`: as expired now, for the next pass to re-drive; a failure
    /// is logged: the build timeout still ends such a build.
    pub(crate) async fn record_cast(
        &self,
        host: &str,
        build: &rpc::BuildAndRunInstance,
        ids: &RequestIds,
        unsent: bool,
    ) {
        let expires = if unsent {
            chrono::Utc::now()
        } else {
            chrono::Utc::now()
                + chrono::Duration::from_std(rpc::BUILD_CAST_TTL).unwrap_or(chrono::Duration::MAX)
        };
        if let Err(e) = self
            .db
            .record_build_cast(
                &build.instance_uuid,
                host,
                &build.encode_to_vec(),
                &ids.request_id,
                &ids.global_request_id,
                expires,
            )
            .await
        {
            warn!(instance = %build.instance_uuid, %host, error = %chain(&e), "could not record the build cast");
        }
    }
}

/// The update that ends a build: ACTIVE, from `spawning`.
fn is_build_success(c: &InstanceChange) -> bool {
    c.vm_state.as_deref() == Some(rpc::vm_state::ACTIVE)
        && c.expected
            .iter()
            .any(|t| t.as_deref() == Some(ts::SPAWNING))
}

fn service_record(row: &crate::db::services::ServiceRow) -> rpc::ServiceRecord {
    rpc::ServiceRecord {
        id: row.id,
        uuid: row.uuid.clone(),
        disabled: row.disabled,
        forced_down: row.forced_down,
        report_count: row.report_count,
    }
}
