//! Typed calls to the cell conductor (every database write goes there).

use std::sync::Arc;
use std::time::Duration;

use fabric::bus::Transport;
use fabric::rpc::{self, method, RequestIds, CONDUCTOR_QUEUE};
use prost::Message;

use crate::error::ComputeError;

/// The conductor of this host's cell, over its bus.
#[derive(Debug, Clone)]
pub struct ConductorClient {
    bus: Arc<dyn Transport>,
    timeout: Duration,
}

impl ConductorClient {
    /// Calls go over `bus` and wait at most `timeout`.
    pub fn new(bus: Arc<dyn Transport>, timeout: Duration) -> Self {
        Self { bus, timeout }
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
    ) -> Result<Resp, ComputeError> {
        rpc::call(
            self.bus.as_ref(),
            CONDUCTOR_QUEUE,
            method,
            req,
            ids,
            self.timeout,
        )
        .await
        .map_err(|source| ComputeError::Conductor { method, source })
    }

    /// `service_register`.
    pub async fn register_service(
        &self,
        req: &rpc::ServiceRegister,
    ) -> Result<rpc::ServiceRecord, ComputeError> {
        self.call(method::SERVICE_REGISTER, req, &RequestIds::default())
            .await
    }

    /// `compute_node_update`.
    pub async fn update_compute_node(
        &self,
        req: &rpc::ComputeNodeUpdate,
    ) -> Result<rpc::ComputeNodeRecord, ComputeError> {
        self.call(method::COMPUTE_NODE_UPDATE, req, &RequestIds::default())
            .await
    }

    /// `service_heartbeat`.
    pub async fn heartbeat(
        &self,
        req: &rpc::Heartbeat,
    ) -> Result<rpc::ServiceRecord, ComputeError> {
        self.call(method::SERVICE_HEARTBEAT, req, &RequestIds::default())
            .await
    }

    /// `instance_update`.
    pub async fn update_instance(
        &self,
        req: &rpc::InstanceUpdate,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        self.call(method::INSTANCE_UPDATE, req, ids).await
    }

    /// `instance_fault_create`.
    pub async fn fault(
        &self,
        req: &rpc::InstanceFault,
        ids: &RequestIds,
    ) -> Result<(), ComputeError> {
        self.call::<_, rpc::Ack>(method::INSTANCE_FAULT, req, ids)
            .await
            .map(|_| ())
    }

    /// `instance_destroyed`.
    pub async fn destroyed(
        &self,
        req: &rpc::InstanceDestroyed,
        ids: &RequestIds,
    ) -> Result<rpc::InstanceRecord, ComputeError> {
        self.call(method::INSTANCE_DESTROYED, req, ids).await
    }

    /// `reschedule_instance`.
    pub async fn reschedule(
        &self,
        req: &rpc::Reschedule,
        ids: &RequestIds,
    ) -> Result<rpc::RescheduleResult, ComputeError> {
        self.call(method::RESCHEDULE, req, ids).await
    }
}
