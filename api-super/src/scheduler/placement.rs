//! The scheduler's placement client: allocation candidates across every
//! cell (one `GET /allocation_candidates` per request) and claims
//! (`PUT /allocations/{consumer}` with `consumer_generation: null`), both at
//! microversion 1.36, plus `DELETE /allocations/{consumer}` to undo a claim.
//! For the operator APIs: a provider's aggregates (read, and written with
//! the provider generation; [`change_provider_aggregate`] retries a
//! generation conflict a bounded number of times) and the delete of a
//! provider whose compute service was deleted.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use fabric::http::SendRetrying;
use serde::Deserialize;
use serde_json::{json, Value};

/// Boxed future of the client trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The microversion the scheduler speaks.
pub const MICROVERSION: &str = "placement 1.36";

/// Why a placement request failed.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// Transport.
    #[error("placement request failed")]
    Http(#[source] reqwest::Error),
    /// The HTTP client could not be built (its TLS settings).
    #[error("placement client")]
    Client(#[source] fabric::http::ClientError),
    /// No resource provider with that uuid.
    #[error("resource provider {0} not found in placement")]
    ProviderNotFound(String),
    /// The provider's generation kept changing under us.
    #[error("resource provider {0} kept changing (generation conflicts); gave up")]
    GenerationConflict(String),
    /// Unexpected status.
    #[error("placement answered {status} to {what}: {body}")]
    Status {
        /// The request.
        what: &'static str,
        /// Status.
        status: u16,
        /// Body (cut).
        body: String,
    },
}

/// Resources by class, e.g. `{"VCPU": 1, "MEMORY_MB": 512}`.
pub type Resources = BTreeMap<String, i64>;

/// One capacity/usage pair of a provider summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct Usage {
    /// Capacity ((total - reserved) * ratio).
    pub capacity: i64,
    /// Used.
    pub used: i64,
}

/// A provider summary.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProviderSummary {
    /// Per class.
    #[serde(default)]
    pub resources: BTreeMap<String, Usage>,
}

/// One allocation request: resources by provider.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AllocationRequest {
    /// `{provider: {"resources": {...}}}`.
    pub allocations: BTreeMap<String, ProviderAllocation>,
}

/// The resources one provider gives in an allocation request.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProviderAllocation {
    /// Per class.
    pub resources: Resources,
}

/// `GET /allocation_candidates`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Candidates {
    /// Allocation requests.
    pub allocation_requests: Vec<AllocationRequest>,
    /// Summaries of the providers involved.
    pub provider_summaries: BTreeMap<String, ProviderSummary>,
}

/// Placement as the scheduler needs it.
pub trait SchedulerPlacement: Send + Sync + std::fmt::Debug {
    /// Candidates for `resources`, at most `limit`.
    fn candidates<'a>(
        &'a self,
        resources: &'a Resources,
        limit: usize,
        in_tree: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Candidates, PlacementError>>;

    /// Claims `request` for a new consumer; `Ok(false)` on a conflict (the
    /// provider filled up meanwhile, or the consumer exists).
    fn claim<'a>(
        &'a self,
        consumer: &'a str,
        request: &'a AllocationRequest,
        project_id: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>>;

    /// Removes every allocation of `consumer` (absent is fine).
    fn delete_allocations<'a>(
        &'a self,
        consumer: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>>;

    /// The aggregates of provider `rp` and its generation; `None` when
    /// there is no such provider.
    fn provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>>;

    /// Replaces the aggregates of `rp` if its generation is still
    /// `aggs.generation`; `Ok(false)` on a generation conflict.
    fn set_provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
        aggs: &'a ProviderAggregates,
    ) -> BoxFuture<'a, Result<bool, PlacementError>>;

    /// Deletes provider `rp` (absent is fine).
    fn delete_provider<'a>(&'a self, rp: &'a str) -> BoxFuture<'a, Result<(), PlacementError>>;
}

/// A provider's aggregates with the generation they were read at.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProviderAggregates {
    /// Aggregate uuids.
    pub aggregates: Vec<String>,
    /// `resource_provider_generation`.
    #[serde(rename = "resource_provider_generation")]
    pub generation: i64,
}

/// How many times a generation conflict is retried.
pub const AGGREGATE_ATTEMPTS: usize = 5;

/// Adds (`add`) or removes aggregate `agg` in provider `rp`'s aggregates:
/// read, change, write with the generation read; a conflict (someone else
/// wrote meanwhile) is retried up to [`AGGREGATE_ATTEMPTS`] times. Adding
/// what is there or removing what is not is a no-op.
pub async fn change_provider_aggregate(
    p: &dyn SchedulerPlacement,
    rp: &str,
    agg: &str,
    add: bool,
) -> Result<(), PlacementError> {
    for _ in 0..AGGREGATE_ATTEMPTS {
        let Some(mut cur) = p.provider_aggregates(rp).await? else {
            return Err(PlacementError::ProviderNotFound(rp.to_owned()));
        };
        let present = cur.aggregates.iter().any(|a| a == agg);
        match (add, present) {
            (true, true) | (false, false) => return Ok(()),
            (true, false) => cur.aggregates.push(agg.to_owned()),
            (false, true) => cur.aggregates.retain(|a| a != agg),
        }
        if p.set_provider_aggregates(rp, &cur).await? {
            return Ok(());
        }
    }
    Err(PlacementError::GenerationConflict(rp.to_owned()))
}

/// The placement REST API over HTTP.
#[derive(Debug, Clone)]
pub struct HttpPlacement {
    http: reqwest::Client,
    base: String,
    token: fabric::token::SharedToken,
}

impl HttpPlacement {
    /// A client of the placement API at `base`, authenticating with `token`.
    pub fn new(base: &str, token: &str) -> Result<Self, PlacementError> {
        // The API's requests run hundreds at once: keep their connections.
        let http = fabric::http::client(&fabric::http::ClientOptions {
            pool_max_idle_per_host: 256,
            ..Default::default()
        })
        .map_err(PlacementError::Client)?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: fabric::token::SharedToken::fixed(token),
        })
    }
    /// As [`HttpPlacement::new`], sending whatever `token` holds at the time
    /// of each request (a service token kept fresh elsewhere).
    pub fn with_token(
        base: &str,
        token: fabric::token::SharedToken,
    ) -> Result<Self, PlacementError> {
        let mut me = Self::new(base, "")?;
        me.token = token;
        Ok(me)
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("X-Auth-Token", self.token.get())
            .header("OpenStack-API-Version", MICROVERSION)
            .header("Accept", "application/json")
    }
}

async fn status_err(what: &'static str, resp: reqwest::Response) -> PlacementError {
    PlacementError::Status {
        what,
        status: resp.status().as_u16(),
        body: resp
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(500)
            .collect(),
    }
}

/// `VCPU:1,MEMORY_MB:512`.
pub fn resources_param(r: &Resources) -> String {
    r.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl SchedulerPlacement for HttpPlacement {
    fn candidates<'a>(
        &'a self,
        resources: &'a Resources,
        limit: usize,
        in_tree: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Candidates, PlacementError>> {
        Box::pin(async move {
            let mut path = format!(
                "/allocation_candidates?resources={}&limit={limit}",
                resources_param(resources)
            );
            if let Some(rp) = in_tree {
                path.push_str("&in_tree=");
                path.push_str(rp);
            }
            let resp = self
                .req(reqwest::Method::GET, &path)
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            if resp.status().as_u16() != 200 {
                return Err(status_err("GET /allocation_candidates", resp).await);
            }
            resp.json().await.map_err(PlacementError::Http)
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
            let allocations: serde_json::Map<String, Value> = request
                .allocations
                .iter()
                .map(|(rp, a)| (rp.clone(), json!({ "resources": a.resources })))
                .collect();
            let body = json!({
                "allocations": allocations,
                "consumer_generation": null,
                "project_id": project_id,
                "user_id": user_id,
            });
            let resp = self
                .req(reqwest::Method::PUT, &format!("/allocations/{consumer}"))
                .json(&body)
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                200 | 204 => Ok(true),
                409 => Ok(false),
                _ => Err(status_err("PUT /allocations", resp).await),
            }
        })
    }

    fn delete_allocations<'a>(
        &'a self,
        consumer: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            let resp = self
                .req(reqwest::Method::DELETE, &format!("/allocations/{consumer}"))
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                204 | 404 => Ok(()),
                _ => Err(status_err("DELETE /allocations", resp).await),
            }
        })
    }

    fn provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
    ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>> {
        Box::pin(async move {
            let resp = self
                .req(
                    reqwest::Method::GET,
                    &format!("/resource_providers/{rp}/aggregates"),
                )
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                200 => Ok(Some(resp.json().await.map_err(PlacementError::Http)?)),
                404 => Ok(None),
                _ => Err(status_err("GET /resource_providers/{uuid}/aggregates", resp).await),
            }
        })
    }

    fn set_provider_aggregates<'a>(
        &'a self,
        rp: &'a str,
        aggs: &'a ProviderAggregates,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        Box::pin(async move {
            let body = json!({
                "aggregates": aggs.aggregates,
                "resource_provider_generation": aggs.generation,
            });
            let resp = self
                .req(
                    reqwest::Method::PUT,
                    &format!("/resource_providers/{rp}/aggregates"),
                )
                .json(&body)
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                200 => Ok(true),
                409 => Ok(false),
                404 => Err(PlacementError::ProviderNotFound(rp.to_owned())),
                _ => Err(status_err("PUT /resource_providers/{uuid}/aggregates", resp).await),
            }
        })
    }

    fn delete_provider<'a>(&'a self, rp: &'a str) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            let resp = self
                .req(
                    reqwest::Method::DELETE,
                    &format!("/resource_providers/{rp}"),
                )
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                204 | 404 => Ok(()),
                _ => Err(status_err("DELETE /resource_providers/{uuid}", resp).await),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A provider whose aggregates someone else changes `conflicts` times.
    #[derive(Debug)]
    struct Racy {
        state: Mutex<(ProviderAggregates, usize)>,
    }

    impl Racy {
        fn new(conflicts: usize) -> Self {
            Racy {
                state: Mutex::new((ProviderAggregates::default(), conflicts)),
            }
        }
    }

    impl SchedulerPlacement for Racy {
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
            Box::pin(async { Ok(()) })
        }
        fn provider_aggregates<'a>(
            &'a self,
            rp: &'a str,
        ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>> {
            Box::pin(async move { Ok((rp == "rp").then(|| self.state.lock().unwrap().0.clone())) })
        }
        fn set_provider_aggregates<'a>(
            &'a self,
            _: &'a str,
            aggs: &'a ProviderAggregates,
        ) -> BoxFuture<'a, Result<bool, PlacementError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                if s.1 > 0 {
                    // Someone else wrote first.
                    s.1 -= 1;
                    s.0.generation += 1;
                    let other = format!("other{}", s.0.generation);
                    s.0.aggregates.push(other);
                    return Ok(false);
                }
                if aggs.generation != s.0.generation {
                    return Ok(false);
                }
                s.0 = ProviderAggregates {
                    aggregates: aggs.aggregates.clone(),
                    generation: aggs.generation + 1,
                };
                Ok(true)
            })
        }
        fn delete_provider<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), PlacementError>> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_generation_conflict_is_retried_and_keeps_the_other_writes() {
        let p = Racy::new(2);
        change_provider_aggregate(&p, "rp", "agg", true)
            .await
            .unwrap();
        let s = p.state.lock().unwrap().0.clone();
        assert_eq!(s.aggregates, ["other1", "other2", "agg"]);
        drop(s);
        change_provider_aggregate(&p, "rp", "agg", false)
            .await
            .unwrap();
        assert_eq!(p.state.lock().unwrap().0.aggregates, ["other1", "other2"]);
    }

    #[tokio::test]
    async fn endless_conflicts_and_a_missing_provider_are_errors() {
        let p = Racy::new(AGGREGATE_ATTEMPTS);
        let e = change_provider_aggregate(&p, "rp", "agg", true)
            .await
            .unwrap_err();
        assert!(matches!(e, PlacementError::GenerationConflict(_)), "{e}");
        let e = change_provider_aggregate(&p, "nope", "agg", true)
            .await
            .unwrap_err();
        assert!(matches!(e, PlacementError::ProviderNotFound(_)), "{e}");
    }
}
