//! Typed calls to the cell conductor (every database write goes there).
//!
//! # Calls without an answer
//!
//! A call whose broker connection drops while it is in flight fails at once
//! with [`BusError::Disconnected`]; one that finds the connection down for
//! its whole timeout fails with [`BusError::Unavailable`]; one sent on a
//! live connection whose reply does not come within the timeout fails with
//! [`BusError::Timeout`]. After the first and the last the conductor may
//! or may not have executed it (a loaded conductor may apply an update and
//! answer after the caller gave up); after the second nothing was sent.
//! A call the conductor answers `Unavailable` (its database cannot be
//! reached, or the statement lost a lock race) is in the same position: a
//! commit whose answer was lost may have been applied. Methods that are
//! safe to repeat are then called again (each attempt
//! with the call timeout, after a backoff from 200 ms doubling to 5 s;
//! after a connection loss the bus itself waits for the connection to come
//! back), as long as the next attempt would start before
//! [`CallRetry::deadline`] has passed since the first one. Each repeat is
//! logged at `warn` with its reason and counted
//! (`compute_conductor_call_retries_total`). Any other refusal (an error
//! answer from the conductor) or an undecodable reply is never repeated, and
//! methods that are not safe to repeat are never repeated at all.
//!
//! Before, only a lost connection was repeated and a timeout on a live
//! connection was final: under load the conductor could apply a build's
//! ACTIVE update and answer after the timeout, and the agent then gave up
//! a build that had succeeded (destroyed the guest, set ERROR). Likewise,
//! until `Unavailable`, a cell database restarted for three seconds failed
//! every build in flight, and the ERROR the agent then tried to set failed
//! too, leaving the server in BUILD until `instance_build_timeout`.
//!
//! Which methods are repeated, and why it is safe:
//!
//! | method | repeated | why |
//! | --- | --- | --- |
//! | `service_register`, `compute_node_update` | yes | idempotent upserts |
//! | `instance_update_steps` | yes | every step carries its own `update_id`; a repeat finds the last applied step's key on the row and applies only the steps after it (a conductor that does not know the method gets the steps as `instance_update` calls, under the same keys) |
//! | `instance_update` | yes | carries an `update_id` (one per logical update, the same on every attempt): the conductor answers a repeat of the update it applied last with the current row, without checking the expected task states again or recording the events twice |
//! | `instance_destroyed` | yes | a repeat finds the instance deleted and answers its row; deleting absent allocations succeeds |
//! | `instance_get_all_by_host` | yes | a read |
//! | `service_heartbeat` | no | a cast to the liveness queue; the next heartbeat is the repeat |
//! | `instance_fault_create` | no | a repeat records a second fault |
//! | `reschedule_instance` | no | a repeat could move the claim and cast the build twice |
//!
//! # Two copies of one update
//!
//! After a timeout the first copy of the request may still exist: call
//! requests carry an AMQP expiration equal to the call timeout and an
//! envelope deadline, so the broker never delivers an expired copy and the
//! conductor drops one that expired before it got a worker; but a copy the
//! conductor started before its deadline may still be applied, before the
//! repeat or concurrently with it. The conductor applies an update with
//! `update_id` K at most once because its applying `UPDATE` is a
//! compare-and-set on the task state it read *and* on `last_update_id`
//! being something other than K, and sets `last_update_id` = K in the same
//! transaction (`cell_conductor`'s `update_instance`):
//!
//! - On SQLite every write transaction is `BEGIN IMMEDIATE` on the one
//!   connection, so the copies run one after the other and the second
//!   one's read sees K: it is answered as a repeat.
//! - On PostgreSQL (read committed) both copies may read the row before
//!   either writes. The second copy's `UPDATE` then waits on the row lock
//!   the first one holds; once the first commits, PostgreSQL evaluates the
//!   second copy's `WHERE` again on the new row version, where
//!   `last_update_id` is K, so it matches nothing (whether or not the
//!   update changed the task state), and the next pass of the loop reads
//!   the row again, sees K and answers the row as a repeat. If the first
//!   copy rolls back instead, the second applies: once either way.
//!
//! The conductor remembers only the *last* applied key. A copy that reaches
//! the database only after a later update of the same instance was applied
//! is not recognised: it is checked like a new update against the current
//! row. Its expected task states normally refuse it (its answer goes to a
//! caller that is no longer waiting); an update that expects nothing (the
//! events of a failed spawn) would record its events a second time. An
//! agent task sends an instance's next update only after the previous one
//! was answered, and the conductor drops copies that expired before they
//! started, so this takes a copy that started before its deadline yet
//! reached the database only after its repeat and a later update had both
//! been applied.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::bus::{BusError, Transport};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, method, RequestIds, RpcError, CONDUCTOR_QUEUE};
use prost::Message;
use tracing::{info, warn};

use crate::error::{chain, ComputeError};
use crate::metrics;

/// How long calls without an answer (connection lost, or no reply within
/// the timeout) are repeated, for the methods safe to repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRetry {
    /// No attempt starts later than this after the first one (zero: never
    /// repeat). The last attempt may still take a whole call timeout.
    pub deadline: Duration,
    /// First wait between attempts.
    pub min_delay: Duration,
    /// Largest wait between attempts (the wait doubles).
    pub max_delay: Duration,
}

impl CallRetry {
    /// Repeats for up to `deadline`, with the default backoff.
    pub fn for_up_to(deadline: Duration) -> Self {
        Self {
            deadline,
            ..Self::default()
        }
    }
}

impl Default for CallRetry {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(60),
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

/// Whether a method may be called again after a call without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// Safe to repeat (see the module docs).
    Safe,
    /// At most once.
    Never,
}

/// The conductor of this host's cell, over its bus.
#[derive(Debug, Clone)]
pub struct ConductorClient {
    bus: Arc<dyn Transport>,
    timeout: Duration,
    retry: CallRetry,
}

impl ConductorClient {
    /// Calls go over `bus` and wait at most `timeout`; calls without an
    /// answer are repeated as [`CallRetry::default`] says.
    pub fn new(bus: Arc<dyn Transport>, timeout: Duration) -> Self {
        Self {
            bus,
            timeout,
            retry: CallRetry::default(),
        }
    }

    /// Repeats calls without an answer as `retry` says.
    pub fn with_retry(mut self, retry: CallRetry) -> Self {
        self.retry = retry;
        self
    }

    /// The bus.
    pub fn bus(&self) -> &Arc<dyn Transport> {
        &self.bus
    }

    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        req: &Req,
        ids: &RequestIds,
        repeat: Repeat,
    ) -> Result<Resp, ComputeError> {
        let started = Instant::now();
        let mut delay = self.retry.min_delay;
        let mut attempt = 1u32;
        loop {
            let res = rpc::call(
                self.bus.as_ref(),
                CONDUCTOR_QUEUE,
                method,
                req,
                ids,
                self.timeout,
            )
            .await;
            let source = match res {
                Ok(resp) => {
                    if attempt > 1 {
                        info!(
                            method,
                            attempt,
                            after = ?started.elapsed(),
                            "conductor call went through after a repeat"
                        );
                    }
                    return Ok(resp);
                }
                Err(source) => source,
            };
            // Repeated: no answer, the conductor may or may not have
            // executed it. Anything else (a refusal, an undecodable reply, a
            // closed transport) is final.
            let reason = match &source {
                RpcError::Bus(e) if e.is_connection_loss() => "broker connection lost",
                RpcError::Bus(BusError::Timeout(_)) => "no reply within the call timeout",
                e if e.remote_code() == Some(rpc::code::UNAVAILABLE) => {
                    "the conductor's database is unavailable"
                }
                _ => return Err(ComputeError::Conductor { method, source }),
            };
            // No attempt starts after the deadline.
            if repeat == Repeat::Never || started.elapsed() + delay >= self.retry.deadline {
                return Err(ComputeError::Conductor { method, source });
            }
            warn!(
                method,
                attempt,
                reason,
                error = %chain(&source),
                retry_in = ?delay,
                "conductor call without an answer; calling again"
            );
            metrics::call_retried(method);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.retry.max_delay);
            attempt += 1;
        }
    }

    /// `service_register` (repeated when unanswered).
    pub async fn register_service(
        &self,
        req: &rpc::ServiceRegister,
    ) -> Result<rpc::ServiceRecord, ComputeError> {
        self.call(
            method::SERVICE_REGISTER,
            req,
            &RequestIds::default(),
            Repeat::Safe,
        )
        .await
    }

    /// `compute_node_update` (repeated when unanswered).
    pub async fn update_compute_node(
        &self,
        req: &rpc::ComputeNodeUpdate,
    ) -> Result<rpc::ComputeNodeRecord, ComputeError> {
        self.call(
            method::COMPUTE_NODE_UPDATE,
            req,
            &RequestIds::default(),
            Repeat::Safe,
        )
        .await
    }

    /// `service_heartbeat`, cast to the conductors' liveness queue (never
    /// repeated: the next heartbeat is). A copy older than `ttl` is
    /// dropped: a late heartbeat would say a host is up after it died.
    pub async fn heartbeat(&self, req: &rpc::Heartbeat, ttl: Duration) -> Result<(), ComputeError> {
        // Bounded by its own time to live: the bus waits for a lost
        // connection to come back, and a heartbeat that could only be
        // published later would say nothing true.
        let ids = RequestIds::default();
        let cast = rpc::cast(
            self.bus.as_ref(),
            rpc::CONDUCTOR_LIVENESS_QUEUE,
            method::SERVICE_HEARTBEAT,
            req,
            &ids,
            ttl,
        );
        match tokio::time::timeout(ttl, cast).await {
            Ok(r) => r.map_err(ComputeError::Bus),
            Err(_) => Err(ComputeError::Bus(BusError::Timeout(ttl))),
        }
    }

    /// `instance_update`, repeated when unanswered under one `update_id` (a
    /// fresh one unless `req` has one).
    pub async fn update_instance(
        &self,
        req: &rpc::InstanceUpdate,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        if req.update_id.is_empty() {
            let mut keyed = req.clone();
            keyed.update_id = uuid::Uuid::new_v4().to_string();
            self.call(method::INSTANCE_UPDATE, &keyed, ids, Repeat::Safe)
                .await
        } else {
            self.call(method::INSTANCE_UPDATE, req, ids, Repeat::Safe)
                .await
        }
    }

    /// `instance_update_steps`: `steps` applied in order, each committed
    /// on its own, in one round trip; repeated when unanswered, each step
    /// under its own `update_id` (fresh ones for steps without), so the
    /// conductor skips the steps a lost reply had already applied.
    pub async fn update_instance_steps(
        &self,
        steps: Vec<rpc::InstanceUpdate>,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        let mut req = rpc::InstanceSteps { steps };
        for s in &mut req.steps {
            if s.update_id.is_empty() {
                s.update_id = uuid::Uuid::new_v4().to_string();
            }
        }
        match self
            .call(method::INSTANCE_UPDATE_STEPS, &req, ids, Repeat::Safe)
            .await
        {
            Err(e) if e.remote_code() == Some(rpc::code::UNKNOWN_METHOD) => {
                // A conductor older than the method (a compute upgraded
                // first): the steps one by one, under the same keys.
                let Some((last, first)) = req.steps.split_last() else {
                    return Err(e);
                };
                warn!(
                    steps = req.steps.len(),
                    "the conductor does not know instance_update_steps; sending the steps one by one"
                );
                for s in first {
                    self.update_instance(s, ids).await?;
                }
                self.update_instance(last, ids).await
            }
            r => r,
        }
    }

    /// `instance_fault_create` (never repeated).
    pub async fn fault(
        &self,
        req: &rpc::InstanceFault,
        ids: &RequestIds,
    ) -> Result<(), ComputeError> {
        self.call::<_, rpc::Ack>(method::INSTANCE_FAULT, req, ids, Repeat::Never)
            .await
            .map(|_| ())
    }

    /// Puts an instance in ERROR (`update`, with its own preconditions),
    /// then records `fault`, only once the update applied: a refused update
    /// (superseded, or another host's instance) leaves no fault behind. A
    /// fault that cannot be recorded is logged, not returned.
    pub async fn fail_instance(
        &self,
        update: &rpc::InstanceUpdate,
        fault: &rpc::InstanceFault,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        let row = self.update_instance(update, ids).await?;
        if let Err(e) = self.fault(fault, ids).await {
            tracing::warn!(instance = %fault.instance_uuid, error = %crate::error::chain(&e),
                "could not record the fault");
        }
        Ok(row)
    }

    /// `instance_destroyed` (repeated when unanswered).
    pub async fn destroyed(
        &self,
        req: &rpc::InstanceDestroyed,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        self.call(method::INSTANCE_DESTROYED, req, ids, Repeat::Safe)
            .await
    }

    /// `reschedule_instance` (never repeated).
    pub async fn reschedule(
        &self,
        req: &rpc::Reschedule,
        ids: &RequestIds,
    ) -> Result<rpc::RescheduleResult, ComputeError> {
        self.call(method::RESCHEDULE, req, ids, Repeat::Never).await
    }

    /// `instance_get_all_by_host`: the live instances of `host`, and the
    /// instances among `guests` wherever they are (repeated when
    /// unanswered: a read).
    pub async fn instances_by_host(
        &self,
        host: &str,
        guests: &[InstanceUuid],
    ) -> Result<Vec<rpc::InstanceRecord>, ComputeError> {
        let req = rpc::InstanceListByHost {
            host: host.to_owned(),
            uuids: guests.iter().map(ToString::to_string).collect(),
        };
        let list: rpc::InstanceList = self
            .call(
                method::INSTANCE_GET_ALL_BY_HOST,
                &req,
                &RequestIds::default(),
                Repeat::Safe,
            )
            .await?;
        Ok(list.instances)
    }
}
