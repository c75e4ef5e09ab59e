//! `terminate_instance`: the compute's part of a delete. The guest is
//! destroyed, then the conductor removes the allocations and marks the
//! instance deleted. A delete that cannot finish here (the hypervisor
//! refuses the destroy, or the conductor cannot record it) puts the server
//! in ERROR with a fault naming this host and why, as Nova does, instead
//! of holding it in `deleting`: the user (or anyone allowed) deletes it
//! again, and that delete does it all again (destroying a guest that is
//! already gone succeeds).

use fabric::failpoint;
use fabric::ids::InstanceUuid;
use fabric::rpc::{
    self, action, code, task_state as ts, vm_state as vs, EventPhase, InstanceUpdate,
    NullableString, RequestIds,
};
use tracing::{debug, error, info, instrument, warn};

use crate::agent::{event, Host};
use crate::driver::DriverError;
use crate::error::chain;
use crate::metrics;

impl Host {
    #[instrument(skip_all, fields(instance = %t.instance_uuid, request_id = %t.request_id,
        global_request_id = %t.global_request_id))]
    pub(crate) async fn terminate(&self, t: rpc::TerminateInstance) {
        let ids = RequestIds {
            request_id: t.request_id.clone(),
            global_request_id: t.global_request_id.clone(),
        };
        let Ok(instance) = t.instance_uuid.parse::<InstanceUuid>() else {
            error!("terminate for an invalid instance uuid dropped");
            return;
        };
        if failpoint::hit(failpoint::DELETE_CAST_LOST).is_err() {
            warn!("terminate dropped unread (failpoint: a lost cast)");
            return;
        }
        // Only while the server is still being deleted (Nova's
        // expected_task_state): a cast that outlived its request (the API
        // put the task state back after a send it took for failed) is
        // dropped, not carried out against what the client was told.
        let mut u = InstanceUpdate {
            instance_uuid: t.instance_uuid.clone(),
            task_state: NullableString::set(ts::DELETING),
            expected_task_states: vec![ts::DELETING.to_owned()],
            ..Default::default()
        };
        if !t.request_id.is_empty() {
            u.events.push(event(
                &t.instance_uuid,
                action::DELETE,
                action::EV_TERMINATE,
                &self.cfg.host,
                &ids,
                EventPhase::Start,
                None,
            ));
        }
        match self.conductor.update_instance(&u, &ids).await {
            Ok(_) => {}
            Err(e) if e.remote_code() == Some(code::NOT_FOUND) => {
                debug!("already deleted");
                let _ = self.driver.destroy(instance).await;
                return;
            }
            Err(e) if e.remote_code() == Some(code::UNEXPECTED_TASK_STATE) => {
                warn!(error = %chain(&e), "terminate dropped: the server is no longer being deleted (the API took the delete back)");
                metrics::terminate("superseded");
                return;
            }
            Err(e) => {
                // Nothing was done here: the server is as the API left it
                // (`deleting`), and a repeated DELETE sends this again.
                error!(error = %chain(&e), "could not set deleting");
                metrics::terminate("failed");
                return;
            }
        }
        let destroyed = match failpoint::hit(failpoint::DELETE_DESTROY) {
            Ok(()) => self.driver.destroy(instance).await,
            Err(e) => Err(DriverError::DestroyFailed(e.to_string())),
        };
        if let Err(e) = destroyed {
            error!(error = %chain(&e), "destroy failed");
            metrics::terminate("failed");
            return self.delete_failed(instance, &ids, &chain(&e)).await;
        }
        let d = rpc::InstanceDestroyed {
            instance_uuid: t.instance_uuid.clone(),
            host: self.cfg.host.clone(),
            request_id: t.request_id.clone(),
        };
        match self.conductor.destroyed(&d, &ids).await {
            Ok(_) => {
                metrics::terminate("deleted");
                info!("instance deleted");
            }
            Err(e) => {
                error!(error = %chain(&e), "could not report the destroy");
                metrics::terminate("failed");
                let why = format!(
                    "the guest is destroyed, but the delete could not be recorded: {}",
                    chain(&e)
                );
                self.delete_failed(instance, &ids, &why).await;
            }
        }
    }

    /// Ends a delete that failed here: ERROR, no task (only from
    /// `deleting`), and a fault naming this host and `why`.
    async fn delete_failed(&self, instance: InstanceUuid, ids: &RequestIds, why: &str) {
        let host = &self.cfg.host;
        let u = InstanceUpdate {
            instance_uuid: instance.to_string(),
            vm_state: Some(vs::ERROR.to_owned()),
            task_state: NullableString::null(),
            expected_task_states: vec![ts::DELETING.to_owned()],
            ..Default::default()
        };
        let fault = rpc::InstanceFault {
            instance_uuid: instance.to_string(),
            code: 500,
            message: format!("Terminating instance {instance} failed on host {host}: {why}"),
            details: why.to_owned(),
            host: host.clone(),
        };
        match self.conductor.fail_instance(&u, &fault, ids).await {
            Ok(_) => info!("delete failed: instance set to ERROR"),
            Err(e) => warn!(error = %chain(&e),
                "could not set ERROR after the failed delete: the server stays in `deleting` until deleted again"),
        }
    }
}
