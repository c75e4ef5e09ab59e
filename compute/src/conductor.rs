//! Typed calls to the cell conductor (every database write goes there).
//!
//! # Calls that lose the broker connection
//!
//! A call whose broker connection drops while it is in flight fails at once
//! with [`BusError::Disconnected`](fabric::bus::BusError::Disconnected), and
//! one that finds the connection down for its whole timeout with
//! [`BusError::Unavailable`](fabric::bus::BusError::Unavailable): the
//! conductor may or may not have executed it. Methods that are safe to
//! repeat are then called again (each attempt with the call timeout, after
//! a backoff from 200 ms doubling to 5 s) while the bus reconnects, until
//! [`CallRetry::deadline`] has passed since the first attempt; the bus
//! itself waits for the connection to come back. A refusal (an error answer
//! from the conductor), a timeout on a live connection or an undecodable
//! reply is never repeated.
//!
//! Which methods are repeated, and why it is safe:
//!
//! | method | repeated | why |
//! | --- | --- | --- |
//! | `service_register`, `compute_node_update` | yes | idempotent upserts |
//! | `instance_update` | yes | carries an `update_id` (one per logical update, the same on every attempt): the conductor answers a repeat of the update it applied last with the current row, without checking the expected task states again or recording the events twice |
//! | `instance_destroyed` | yes | a repeat finds the instance deleted and answers its row; deleting absent allocations succeeds |
//! | `instance_get_all_by_host` | yes | a read |
//! | `service_heartbeat` | no | the next heartbeat is the repeat; waiting would hold up the agent's loop |
//! | `instance_fault_create` | no | a repeat records a second fault |
//! | `reschedule_instance` | no | a repeat could move the claim and cast the build twice |

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::bus::Transport;
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, method, RequestIds, RpcError, CONDUCTOR_QUEUE};
use prost::Message;
use tracing::{info, warn};

use crate::error::{chain, ComputeError};
use crate::metrics;

/// How long calls that lost the broker connection are repeated.
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

/// Whether a method may be called again after losing its connection.
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
    /// Calls go over `bus` and wait at most `timeout`; calls that lose the
    /// broker connection are repeated as [`CallRetry::default`] says.
    pub fn new(bus: Arc<dyn Transport>, timeout: Duration) -> Self {
        Self {
            bus,
            timeout,
            retry: CallRetry::default(),
        }
    }

    /// Repeats calls that lost the broker connection as `retry` says.
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
                            "conductor call went through once the broker connection was back"
                        );
                    }
                    return Ok(resp);
                }
                Err(source) => source,
            };
            let lost = matches!(&source, RpcError::Bus(e) if e.is_connection_loss());
            if repeat == Repeat::Safe && lost && started.elapsed() + delay < self.retry.deadline {
                warn!(
                    method,
                    attempt,
                    error = %chain(&source),
                    retry_in = ?delay,
                    "conductor call lost with the broker connection; calling again"
                );
                metrics::call_retried(method);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(self.retry.max_delay);
                attempt += 1;
                continue;
            }
            return Err(ComputeError::Conductor { method, source });
        }
    }

    /// `service_register` (repeated after a connection loss).
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

    /// `compute_node_update` (repeated after a connection loss).
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

    /// `service_heartbeat` (never repeated: the next heartbeat is).
    pub async fn heartbeat(
        &self,
        req: &rpc::Heartbeat,
    ) -> Result<rpc::ServiceRecord, ComputeError> {
        self.call(
            method::SERVICE_HEARTBEAT,
            req,
            &RequestIds::default(),
            Repeat::Never,
        )
        .await
    }

    /// `instance_update`, repeated after a connection loss under one
    /// `update_id` (a fresh one unless `req` has one).
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

    /// `instance_destroyed` (repeated after a connection loss).
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
    /// instances among `guests` wherever they are (repeated after a
    /// connection loss: a read).
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
