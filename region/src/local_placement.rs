//! The scheduler's placement calls in process, for a region whose
//! placement service runs in the same process (the all-in-one region and
//! the load driver's embedded target): candidates, claims and the undo of
//! a claim go straight to the placement service's own functions, the ones
//! its HTTP handlers call, instead of through loopback HTTP with JSON on
//! both sides and a token check per request (two requests per boot). The
//! answers are the ones the HTTP client would have read: the same
//! candidates (a fresh shuffle seed per request when placement randomizes),
//! a claim conflict as `Ok(false)`, any other refusal as the status and
//! detail placement would have answered. The operator calls (a provider's
//! aggregates, deleting a provider) stay on HTTP: they are rare and keep
//! the placement API's own checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use api_super::scheduler::placement::{
    AllocationRequest, BoxFuture, Candidates, HttpPlacement, PlacementError, ProviderAggregates,
    ProviderAllocation, ProviderSummary, Resources, SchedulerPlacement, Usage,
};
use placement::engine::{CandidateOrder, CandidatesRequest, RequestGroup};

/// [`SchedulerPlacement`] on the placement service of this process.
#[derive(Clone)]
pub struct LocalPlacement {
    placement: Arc<placement::Placement>,
    randomize: bool,
    http: HttpPlacement,
}

impl std::fmt::Debug for LocalPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPlacement")
            .field("randomize", &self.randomize)
            .finish_non_exhaustive()
    }
}

impl LocalPlacement {
    /// Candidates and claims on `placement`, shuffled like the HTTP API
    /// when `randomize` (placement's `randomize_allocation_candidates`);
    /// the operator calls through `http`.
    pub fn new(placement: Arc<placement::Placement>, randomize: bool, http: HttpPlacement) -> Self {
        Self {
            placement,
            randomize,
            http,
        }
    }
}

/// Placement's refusal as the HTTP client would have read it.
fn refused(what: &'static str, e: placement::error::PlacementError) -> PlacementError {
    let status = match &e {
        placement::error::PlacementError::Client { status, .. } => status.as_u16(),
        _ => 500,
    };
    PlacementError::Status {
        what,
        status,
        body: format!("{e:#}"),
    }
}

fn is_conflict(e: &placement::error::PlacementError) -> bool {
    matches!(e, placement::error::PlacementError::Client { status, .. } if status.as_u16() == 409)
}

/// The engine's answer in the shape of `GET /allocation_candidates`'s at
/// the scheduler's microversion (summaries with every class).
fn candidates(c: placement::engine::AllocationCandidates) -> Candidates {
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Candidates {
        allocation_requests: c
            .allocation_requests
            .into_iter()
            .map(|r| AllocationRequest {
                allocations: r
                    .allocations
                    .into_iter()
                    .map(|a| {
                        let resources: Resources = a
                            .resources
                            .iter()
                            .map(|(rc, n)| (rc.to_string(), to_i64(*n)))
                            .collect();
                        (a.provider.to_string(), ProviderAllocation { resources })
                    })
                    .collect(),
            })
            .collect(),
        provider_summaries: c
            .provider_summaries
            .into_iter()
            .map(|s| {
                let resources: BTreeMap<String, Usage> = s
                    .resources
                    .iter()
                    .map(|r| {
                        let usage = Usage {
                            capacity: to_i64(r.capacity),
                            used: to_i64(r.used),
                        };
                        (r.resource_class.to_string(), usage)
                    })
                    .collect();
                (s.provider.to_string(), ProviderSummary { resources })
            })
            .collect(),
    }
}

impl SchedulerPlacement for LocalPlacement {
    fn candidates<'a>(
        &'a self,
        resources: &'a Resources,
        limit: usize,
        in_tree: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Candidates, PlacementError>> {
        Box::pin(async move {
            // What `?resources=` parses to: the classes asked for (a zero
            // amount is left out, as `resources_param` does).
            let wanted = resources
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(rc, n)| (rc.clone(), u64::try_from(*n).unwrap_or(0)));
            let mut group = RequestGroup::unsuffixed(wanted);
            if let Some(rp) = in_tree {
                // As placement's `in_tree=`: a malformed uuid is its 400.
                group.in_tree = Some(rp.parse().map_err(|_| PlacementError::Status {
                    what: "GET /allocation_candidates",
                    status: 400,
                    body: format!("Invalid uuid value: {rp}"),
                })?);
            }
            let mut request = CandidatesRequest::new(vec![group]);
            request.limit = Some(limit);
            if self.randomize {
                request.order = CandidateOrder::Shuffle {
                    seed: uuid::Uuid::new_v4().as_u64_pair().0,
                };
            }
            self.placement
                .allocation_candidates(&request)
                .await
                .map(candidates)
                .map_err(|e| refused("GET /allocation_candidates", e))
        })
    }

    fn claim<'a>(
        &'a self,
        consumer: &'a str,
        request: &'a AllocationRequest,
        project_id: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        Box::pin(async move {
            // `PUT /allocations/{consumer}` at 1.36 with
            // `consumer_generation: null`: a new consumer.
            let write = placement::db::allocations::ConsumerWrite {
                consumer: consumer.to_owned(),
                allocations: request
                    .allocations
                    .iter()
                    .map(|(rp, a)| (rp.clone(), a.resources.clone()))
                    .collect(),
                project_id: project_id.to_owned(),
                user_id: user_id.to_owned(),
                expected_generation: Some(None),
                consumer_type: None,
            };
            match self.placement.write_consumers(&[write]).await {
                Ok(()) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(refused("PUT /allocations", e)),
            }
        })
    }

    fn delete_allocations<'a>(
        &'a self,
        consumer: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            self.placement
                .delete_consumer_allocations(consumer)
                .await
                .map(|_| ())
                .map_err(|e| refused("DELETE /allocations", e))
        })
    }

    fn provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>> {
        self.http.provider_aggregates(rp)
    }

    fn set_provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
        aggs: &'a ProviderAggregates,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        self.http.set_provider_aggregates(rp, aggs)
    }

    fn delete_provider<'a>(&'a self, rp: &'a str) -> BoxFuture<'a, Result<(), PlacementError>> {
        self.http.delete_provider(rp)
    }
}
