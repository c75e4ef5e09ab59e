//! Inventory reporting to placement: the resource provider named after the
//! hypervisor hostname, with uuid = compute node uuid, and its VCPU,
//! MEMORY_MB and DISK_GB inventory. A trait ([`Placement`]) with an HTTP
//! implementation ([`HttpPlacement`], `X-Auth-Token`) and an in-memory one
//! for tests ([`InMemoryPlacement`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use fabric::http::SendRetrying;
use fabric::ids::ProviderUuid;
use futures_util::future::BoxFuture;
use serde_json::json;

/// A host's inventory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inventory {
    /// VCPU total.
    pub vcpus: i64,
    /// MEMORY_MB total.
    pub memory_mb: i64,
    /// DISK_GB total.
    pub disk_gb: i64,
    /// VCPU allocation ratio.
    pub cpu_allocation_ratio: f64,
    /// MEMORY_MB allocation ratio.
    pub ram_allocation_ratio: f64,
    /// DISK_GB allocation ratio.
    pub disk_allocation_ratio: f64,
}

impl Inventory {
    /// The `inventories` object of `PUT /resource_providers/{uuid}/inventories`.
    pub fn as_json(&self) -> serde_json::Value {
        let one = |total: i64, ratio: f64| {
            json!({
                "total": total, "reserved": 0, "min_unit": 1, "max_unit": total,
                "step_size": 1, "allocation_ratio": ratio,
            })
        };
        json!({
            "VCPU": one(self.vcpus, self.cpu_allocation_ratio),
            "MEMORY_MB": one(self.memory_mb, self.ram_allocation_ratio),
            "DISK_GB": one(self.disk_gb, self.disk_allocation_ratio),
        })
    }
}

/// Why a placement request failed.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// The HTTP request failed.
    #[error("placement request failed")]
    Http(#[source] reqwest::Error),
    /// The HTTP client could not be built (its TLS settings).
    #[error("placement client")]
    Client(#[source] fabric::http::ClientError),
    /// Placement answered an unexpected status.
    #[error("placement answered {status} to {what}: {body}")]
    Status {
        /// What was asked.
        what: &'static str,
        /// The status.
        status: u16,
        /// The body (truncated).
        body: String,
    },
    /// The provider generation kept changing under us.
    #[error("provider {0} kept changing; giving up for now")]
    Contended(ProviderUuid),
}

/// What a compute asks of placement.
pub trait Placement: Send + Sync + fmt::Debug {
    /// Creates the provider `uuid` named `name` unless it exists.
    fn ensure_provider<'a>(
        &'a self,
        uuid: ProviderUuid,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>>;

    /// Replaces the provider's inventory.
    fn set_inventory<'a>(
        &'a self,
        uuid: ProviderUuid,
        inventory: &'a Inventory,
    ) -> BoxFuture<'a, Result<(), PlacementError>>;

    /// Adds `add` to the provider's traits and takes `remove` away,
    /// leaving the others as they are.
    fn merge_traits<'a>(
        &'a self,
        uuid: ProviderUuid,
        add: &'a [String],
        remove: &'a [String],
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        let _ = (uuid, add, remove);
        Box::pin(async { Ok(()) })
    }
}

/// `current` with `add` added and `remove` taken away, sorted; `None`
/// when that changes nothing.
pub fn merged(current: &[String], add: &[String], remove: &[String]) -> Option<Vec<String>> {
    let mut t: std::collections::BTreeSet<String> = current.iter().cloned().collect();
    let before = t.clone();
    t.extend(add.iter().cloned());
    for r in remove {
        t.remove(r);
    }
    (t != before).then(|| t.into_iter().collect())
}

/// No placement: reporting is skipped (a compute that only talks to its
/// conductor).
#[derive(Debug, Default)]
pub struct NoPlacement;

impl Placement for NoPlacement {
    fn ensure_provider<'a>(
        &'a self,
        _: ProviderUuid,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async { Ok(()) })
    }
    fn set_inventory<'a>(
        &'a self,
        _: ProviderUuid,
        _: &'a Inventory,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The placement REST API over HTTP.
#[derive(Debug, Clone)]
pub struct HttpPlacement {
    http: reqwest::Client,
    base: String,
    token: fabric::token::SharedToken,
}

const MICROVERSION: &str = "placement 1.20";

fn status_err(what: &'static str, status: u16, body: String) -> PlacementError {
    PlacementError::Status {
        what,
        status,
        body: body.chars().take(500).collect(),
    }
}

impl HttpPlacement {
    /// A client of the placement API at `base` (`http://127.0.0.1:8778`),
    /// authenticating with `token`.
    pub fn new(base: &str, token: &str) -> Result<Self, PlacementError> {
        // One client serves every fake host of a process (hundreds): the
        // shared options keep few idle connections.
        let http = fabric::http::client(&fabric::http::ClientOptions::default())
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

    async fn generation(&self, uuid: ProviderUuid) -> Result<Option<i64>, PlacementError> {
        let resp = self
            .req(reqwest::Method::GET, &format!("/resource_providers/{uuid}"))
            .send_retrying()
            .await
            .map_err(PlacementError::Http)?;
        match resp.status().as_u16() {
            200 => {
                let v: serde_json::Value = resp.json().await.map_err(PlacementError::Http)?;
                Ok(v.get("generation").and_then(|g| g.as_i64()))
            }
            404 => Ok(None),
            s => Err(status_err(
                "GET /resource_providers/{uuid}",
                s,
                resp.text().await.unwrap_or_default(),
            )),
        }
    }
}

impl Placement for HttpPlacement {
    fn ensure_provider<'a>(
        &'a self,
        uuid: ProviderUuid,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            if self.generation(uuid).await?.is_some() {
                return Ok(());
            }
            let resp = self
                .req(reqwest::Method::POST, "/resource_providers")
                .json(&json!({ "name": name, "uuid": uuid.to_string() }))
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                200 | 201 => Ok(()),
                // Created meanwhile by another report of ours.
                409 if self.generation(uuid).await?.is_some() => Ok(()),
                s => Err(status_err(
                    "POST /resource_providers",
                    s,
                    resp.text().await.unwrap_or_default(),
                )),
            }
        })
    }

    fn set_inventory<'a>(
        &'a self,
        uuid: ProviderUuid,
        inventory: &'a Inventory,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            for _ in 0..5 {
                let Some(generation) = self.generation(uuid).await? else {
                    return Err(status_err(
                        "GET /resource_providers/{uuid}",
                        404,
                        "provider vanished".into(),
                    ));
                };
                let resp = self
                    .req(
                        reqwest::Method::PUT,
                        &format!("/resource_providers/{uuid}/inventories"),
                    )
                    .json(&json!({
                        "resource_provider_generation": generation,
                        "inventories": inventory.as_json(),
                    }))
                    .send_retrying()
                    .await
                    .map_err(PlacementError::Http)?;
                match resp.status().as_u16() {
                    200 => return Ok(()),
                    409 => continue,
                    s => {
                        return Err(status_err(
                            "PUT /resource_providers/{uuid}/inventories",
                            s,
                            resp.text().await.unwrap_or_default(),
                        ))
                    }
                }
            }
            Err(PlacementError::Contended(uuid))
        })
    }

    fn merge_traits<'a>(
        &'a self,
        uuid: ProviderUuid,
        add: &'a [String],
        remove: &'a [String],
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        Box::pin(async move {
            let path = format!("/resource_providers/{uuid}/traits");
            for _ in 0..5 {
                let resp = self
                    .req(reqwest::Method::GET, &path)
                    .send_retrying()
                    .await
                    .map_err(PlacementError::Http)?;
                let status = resp.status().as_u16();
                if status != 200 {
                    let body = resp.text().await.unwrap_or_default();
                    return Err(status_err(
                        "GET /resource_providers/{uuid}/traits",
                        status,
                        body,
                    ));
                }
                let v: serde_json::Value = resp.json().await.map_err(PlacementError::Http)?;
                let current: Vec<String> = v["traits"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| t.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let Some(traits) = merged(&current, add, remove) else {
                    return Ok(());
                };
                let resp = self
                    .req(reqwest::Method::PUT, &path)
                    .json(&json!({
                        "resource_provider_generation": v["resource_provider_generation"],
                        "traits": traits,
                    }))
                    .send_retrying()
                    .await
                    .map_err(PlacementError::Http)?;
                match resp.status().as_u16() {
                    200 => return Ok(()),
                    409 => continue,
                    s => {
                        return Err(status_err(
                            "PUT /resource_providers/{uuid}/traits",
                            s,
                            resp.text().await.unwrap_or_default(),
                        ))
                    }
                }
            }
            Err(PlacementError::Contended(uuid))
        })
    }
}

/// A provider's name and last reported inventory.
type Reported = (String, Option<Inventory>);

/// An in-memory placement for tests: providers by uuid with their name and
/// last reported inventory.
#[derive(Debug, Default, Clone)]
pub struct InMemoryPlacement {
    providers: Arc<Mutex<HashMap<ProviderUuid, Reported>>>,
}

impl InMemoryPlacement {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// The provider's name and inventory.
    pub fn provider(&self, uuid: ProviderUuid) -> Option<(String, Option<Inventory>)> {
        self.providers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&uuid)
            .cloned()
    }

    /// Number of providers.
    pub fn len(&self) -> usize {
        self.providers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether there is no provider.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Placement for InMemoryPlacement {
    fn ensure_provider<'a>(
        &'a self,
        uuid: ProviderUuid,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        self.providers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(uuid)
            .or_insert_with(|| (name.to_owned(), None));
        Box::pin(async { Ok(()) })
    }

    fn set_inventory<'a>(
        &'a self,
        uuid: ProviderUuid,
        inventory: &'a Inventory,
    ) -> BoxFuture<'a, Result<(), PlacementError>> {
        let mut m = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        let res = match m.get_mut(&uuid) {
            Some(p) => {
                p.1 = Some(*inventory);
                Ok(())
            }
            None => Err(status_err("set_inventory", 404, "no such provider".into())),
        };
        Box::pin(async move { res })
    }
}
