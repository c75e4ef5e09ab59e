//! Delete: the orchestration of `DELETE /servers/{id}` (and
//! `forceDelete`). A build not landed is deleted with its build request;
//! an instance whose compute can take it gets task_state `deleting` and a
//! `terminate_instance` cast (the compute and the cell conductor finish
//! the delete and free the claim); one with no host, or whose compute is
//! down, is deleted here ("local delete"), its allocations removed with
//! retries in the background.

use fabric::bus::BusError;
use fabric::failpoint;
use fabric::rpc::{self, method, RequestIds};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::servers::lookup::{find_with, Found};
use crate::compute_api::servers::model::Server;
use crate::compute_api::{App, Ctx};

/// The delete (also `forceDelete`, checked with its own `rule`). A locked
/// server is refused to non-admins (409), as upstream.
pub async fn delete_server(app: &App, ctx: &Ctx, id: &str, rule: &str) -> ApiResult<()> {
    let id = id.to_owned();
    for _ in 0..2 {
        match find_with(app, ctx, &id, rule, false).await? {
            Found::Build(_) => {
                if app.db.delete_build(&id).await? {
                    return Ok(());
                }
                // It landed in a cell meanwhile: delete it there.
                continue;
            }
            Found::Cell(cell, s) => {
                if s.locked && !ctx.is_admin() {
                    return Err(ApiError::Conflict(format!("Instance {id} is locked")));
                }
                // Its console tokens go first: the ports its consoles used
                // may soon be another guest's (they expire anyway).
                if let Err(e) = app.consoles.forget_instance(&id).await {
                    tracing::warn!(instance = %id, error = %e, "could not remove the server's console tokens");
                }
                let db = app.cells.db(&cell).await?;
                let global = format!("req-{}", uuid::Uuid::new_v4());
                let host = match s.host.as_deref() {
                    Some(h) if compute_up(app, &db, h).await? => h,
                    // No host, or its compute cannot do it: the API does.
                    other => {
                        return local_delete(app, ctx, &db, &s, other, global).await;
                    }
                };
                failpoint::hit(failpoint::DELETE_TASK_STATE).map_err(ApiError::internal)?;
                if !db
                    .api_set_deleting(&id, &ctx.request_id, &global, ctx.user_id(), &s.project_id)
                    .await?
                {
                    return Err(ApiError::server_not_found(&id));
                }
                let ids = RequestIds {
                    request_id: ctx.request_id.clone(),
                    global_request_id: global,
                };
                if let Err(e) = queue_and_cast(app, &cell, host, &id, &ids).await {
                    // Undo: the server goes back to no task (the `delete`
                    // action stays, as upstream's failed actions do) and
                    // counts in the quota again; a DELETE repeated later
                    // does it all again.
                    if let Err(u) = db
                        .api_revert_task_state(&id, rpc::task_state::DELETING)
                        .await
                    {
                        tracing::error!(instance = %id, error = %u, "could not put back the task state of a delete that was not sent: the server stays in `deleting` until deleted again");
                    }
                    if let Err(u) = app.db.queue_for_delete_undo(&id).await {
                        tracing::error!(instance = %id, error = %u, "could not count the server in its quota again");
                    }
                    return Err(e);
                }
                return Ok(());
            }
        }
    }
    Err(ApiError::server_not_found(&id))
}

/// Queues the mapping for delete (the quota stops counting the server)
/// and casts `terminate_instance` to `host`.
async fn queue_and_cast(
    app: &App,
    cell: &cell_mapping::CellMapping,
    host: &str,
    id: &str,
    ids: &RequestIds,
) -> ApiResult<()> {
    app.db.queue_for_delete(id).await?;
    let bus = app.cells.bus(cell).await?;
    let unsent = |e: String| {
        // The host is named in the log only: users do not see host names.
        tracing::error!(instance = %id, %host, error = %e, "could not send the delete to the compute host");
        ApiError::Unavailable(
            "The delete could not be sent to the server's compute host; the server is unchanged. Try again later.".into(),
        )
    };
    failpoint::hit(failpoint::DELETE_CAST).map_err(|e| unsent(e.to_string()))?;
    let sent = rpc::cast(
        bus.as_ref(),
        &rpc::compute_queue(host),
        method::TERMINATE_INSTANCE,
        &rpc::TerminateInstance {
            instance_uuid: id.to_owned(),
            request_id: ids.request_id.clone(),
            global_request_id: ids.global_request_id.clone(),
        },
        ids,
        rpc::ACTION_CAST_TTL,
    )
    .await;
    match sent {
        Ok(()) => Ok(()),
        // The broker began blocking while the cast was on its way: it may
        // have been taken and is then routed when the alarm clears. Taken
        // as sent: the server stays `deleting`, and if the cast was lost
        // after all, the cell conductor's heal sends a delete left
        // untouched again. Undoing would tell the client "unchanged" about
        // a server that may yet be deleted.
        Err(BusError::BlockedInFlight) => {
            tracing::warn!(instance = %id, %host, "the broker began blocking while the delete was on its way: taken as sent (the heal resends it if it was lost)");
            Ok(())
        }
        Err(e) => Err(unsent(e.to_string())),
    }
}

/// Whether the compute service of `host` can take a delete: it exists, is
/// not forced down and heartbeated within the service down time (read
/// from the cell database now, not from the scheduler's cached host map).
/// A service that is gone counts as down, as upstream.
async fn compute_up(app: &App, db: &cell_mapping::CellDb, host: &str) -> ApiResult<bool> {
    let services = db
        .services_list(
            Some(host),
            Some(crate::compute_api::services::COMPUTE_BINARY),
        )
        .await?;
    Ok(services.first().is_some_and(|sv| {
        crate::compute_api::services::is_up(app, sv.forced_down, sv.last_seen_up)
    }))
}

/// Upstream's "local delete": the instance has no host, or its compute
/// service is down, so nobody would consume a `terminate_instance`. The
/// API queues the mapping for delete (its quota usage is released, as on
/// the normal path), then marks the instance deleted in its cell with the
/// `delete` action and its `api_local_delete` event in one transaction,
/// then removes the allocations. Each step can be repeated: a failure
/// before the cell write answers 500 and a retried DELETE does it all
/// again; a placement failure after it does not fail the delete (the
/// instance is gone) but is retried in the background, then logged as an
/// error naming the consumer left to remove.
async fn local_delete(
    app: &App,
    ctx: &Ctx,
    db: &cell_mapping::CellDb,
    s: &Server,
    host: Option<&str>,
    global_request_id: String,
) -> ApiResult<()> {
    let id = &s.uuid;
    app.db.queue_for_delete(id).await?;
    let record = cell_mapping::db::server_actions::ActionRecord {
        action: rpc::action::DELETE.to_owned(),
        request_id: ctx.request_id.clone(),
        global_request_id,
        user_id: ctx.user_id().to_owned(),
        project_id: s.project_id.clone(),
    };
    if !db.api_local_delete(id, &record, host).await? {
        return Err(ApiError::server_not_found(id));
    }
    tracing::info!(instance = %id, host = host.unwrap_or(""), "deleted locally: no compute to do it");
    let placement = app.placement.clone();
    if let Err(e) = placement.delete_allocations(id).await {
        tracing::warn!(instance = %id, error = %e, "could not remove allocations; retrying in the background");
        match ALLOCATION_RETRY_TASKS.try_acquire() {
            Ok(place) => {
                let id = id.clone();
                tokio::spawn(async move {
                    let _place = place;
                    remove_allocations(placement.as_ref(), &id, &ALLOCATION_RETRIES).await;
                });
            }
            // Bounded: the cell conductor's placement audit removes the
            // orphan (`cell-manage placement audit` shows it meanwhile).
            Err(_) => tracing::error!(instance = %id,
                "allocations left in placement: too many removals are being retried already"),
        }
    }
    Ok(())
}

/// Most allocation removals retried in the background at once.
static ALLOCATION_RETRY_TASKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(256);

/// Waits before each background retry of an allocation removal.
const ALLOCATION_RETRIES: [std::time::Duration; 6] = [
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(2),
    std::time::Duration::from_secs(4),
    std::time::Duration::from_secs(8),
    std::time::Duration::from_secs(16),
    std::time::Duration::from_secs(32),
];

/// Retries `DELETE /allocations/{consumer}` after each of `waits`; true
/// once removed. When every try failed the leak is logged as an error
/// naming the consumer (an operator removes it with `openstack resource
/// provider allocation delete <uuid>`).
async fn remove_allocations(
    placement: &dyn crate::scheduler::placement::SchedulerPlacement,
    consumer: &str,
    waits: &[std::time::Duration],
) -> bool {
    let mut last = String::new();
    for w in waits {
        tokio::time::sleep(*w).await;
        match placement.delete_allocations(consumer).await {
            Ok(()) => {
                tracing::info!(instance = %consumer, "allocations of a locally deleted instance removed");
                return true;
            }
            Err(e) => last = e.to_string(),
        }
    }
    tracing::error!(
        instance = %consumer,
        error = %last,
        "allocations of a locally deleted instance left in placement: remove them with \
         `openstack resource provider allocation delete {consumer}`"
    );
    false
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::remove_allocations;
    use crate::scheduler::placement::{
        AllocationRequest, BoxFuture, Candidates, PlacementError, ProviderAggregates, Resources,
        SchedulerPlacement,
    };

    /// Placement that answers 503 to the first `failures` allocation
    /// removals, then removes; counts the calls.
    #[derive(Debug)]
    struct Flaky {
        state: Mutex<(usize, usize)>,
    }

    impl Flaky {
        fn new(failures: usize) -> Self {
            Flaky {
                state: Mutex::new((failures, 0)),
            }
        }
        fn calls(&self) -> usize {
            self.state.lock().unwrap().1
        }
    }

    impl SchedulerPlacement for Flaky {
        fn candidates<'a>(
            &'a self,
            _: &'a Resources,
            _: usize,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Candidates, PlacementError>> {
            Box::pin(async { Ok(Candidates::default()) })
        }
        fn claim<'a>(
            &'a self,
            _: &'a str,
            _: &'a AllocationRequest,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<bool, PlacementError>> {
            Box::pin(async { Ok(true) })
        }
        fn delete_allocations<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<(), PlacementError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                s.1 += 1;
                if s.0 > 0 {
                    s.0 -= 1;
                    return Err(PlacementError::Status {
                        what: "DELETE /allocations",
                        status: 503,
                        body: String::new(),
                    });
                }
                Ok(())
            })
        }
        fn provider_aggregates<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>> {
            Box::pin(async { Ok(None) })
        }
        fn set_provider_aggregates<'a>(
            &'a self,
            _: &'a str,
            _: &'a ProviderAggregates,
        ) -> BoxFuture<'a, Result<bool, PlacementError>> {
            Box::pin(async { Ok(true) })
        }
        fn delete_provider<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), PlacementError>> {
            Box::pin(async { Ok(()) })
        }
    }

    const WAITS: [Duration; 3] = [Duration::from_millis(1); 3];

    #[tokio::test]
    async fn a_failed_allocation_removal_is_retried_until_placement_answers() {
        let p = Flaky::new(2);
        assert!(remove_allocations(&p, "i-1", &WAITS).await);
        assert_eq!(p.calls(), 3);
    }

    #[tokio::test]
    async fn allocation_removal_gives_up_after_the_last_retry() {
        let p = Flaky::new(10);
        assert!(!remove_allocations(&p, "i-1", &WAITS).await);
        assert_eq!(p.calls(), WAITS.len());
    }
}
