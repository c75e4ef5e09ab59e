//! What the conductor asks of placement: move an instance's claim to an
//! alternate provider (reschedule) and remove its allocations (delete,
//! ERROR). A trait, with an HTTP implementation ([`HttpPlacement`]) and an
//! in-memory one for tests and the embedded mode ([`InMemoryPlacement`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use fabric::http::SendRetrying;
use fabric::ids::{InstanceUuid, ProviderUuid};
use futures_util::future::BoxFuture;
use serde_json::json;

/// The resources one instance claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// VCPU.
    pub vcpus: i64,
    /// MEMORY_MB.
    pub memory_mb: i64,
    /// DISK_GB.
    pub disk_gb: i64,
}

impl Resources {
    fn as_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (rc, v) in [
            ("VCPU", self.vcpus),
            ("MEMORY_MB", self.memory_mb),
            ("DISK_GB", self.disk_gb),
        ] {
            if v > 0 {
                m.insert(rc.to_owned(), json!(v));
            }
        }
        serde_json::Value::Object(m)
    }
}

/// Why a placement request failed.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// No placement endpoint is configured.
    #[error("placement is not configured for this conductor")]
    NotConfigured,
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
}

/// A [`PlacementError::Status`] for `resp`, its body cut to 500 characters.
async fn status_error(what: &'static str, status: u16, resp: reqwest::Response) -> PlacementError {
    PlacementError::Status {
        what,
        status,
        body: resp
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(500)
            .collect(),
    }
}

/// The placement operations the conductor needs.
pub trait PlacementClient: Send + Sync + fmt::Debug {
    /// Replaces the allocations of `consumer` with `resources` on `to`
    /// (moving the claim in one request). `Ok(false)`: `to` lacks capacity.
    fn move_claim<'a>(
        &'a self,
        consumer: InstanceUuid,
        to: ProviderUuid,
        resources: Resources,
        project_id: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>>;

    /// Removes every allocation of `consumer` (absent is fine).
    fn delete_allocations(
        &self,
        consumer: InstanceUuid,
    ) -> BoxFuture<'_, Result<(), PlacementError>>;

    /// The consumers with allocations on `provider` (none for a provider
    /// placement does not know).
    fn consumers_of(
        &self,
        provider: ProviderUuid,
    ) -> BoxFuture<'_, Result<Vec<String>, PlacementError>>;
}

/// No placement: every request fails with [`PlacementError::NotConfigured`].
#[derive(Debug, Default)]
pub struct NoPlacement;

impl PlacementClient for NoPlacement {
    fn move_claim<'a>(
        &'a self,
        _: InstanceUuid,
        _: ProviderUuid,
        _: Resources,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        Box::pin(async { Err(PlacementError::NotConfigured) })
    }
    fn delete_allocations(&self, _: InstanceUuid) -> BoxFuture<'_, Result<(), PlacementError>> {
        Box::pin(async { Err(PlacementError::NotConfigured) })
    }
    fn consumers_of(&self, _: ProviderUuid) -> BoxFuture<'_, Result<Vec<String>, PlacementError>> {
        Box::pin(async { Err(PlacementError::NotConfigured) })
    }
}

/// The placement REST API over HTTP (`X-Auth-Token`, microversion 1.28 for
/// consumer generations).
#[derive(Debug, Clone)]
pub struct HttpPlacement {
    http: reqwest::Client,
    base: String,
    token: fabric::token::SharedToken,
}

const MICROVERSION: &str = "placement 1.28";

impl HttpPlacement {
    /// A client of the placement API at `base` (e.g. `http://127.0.0.1:8778`).
    pub fn new(base: &str, token: &str) -> Result<Self, PlacementError> {
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

    async fn try_move(
        &self,
        consumer: InstanceUuid,
        to: ProviderUuid,
        resources: Resources,
        project_id: &str,
        user_id: &str,
    ) -> Result<Option<bool>, PlacementError> {
        let path = format!("/allocations/{consumer}");
        let resp = self
            .req(reqwest::Method::GET, &path)
            .send_retrying()
            .await
            .map_err(PlacementError::Http)?;
        let status = resp.status().as_u16();
        let current: serde_json::Value = resp.json().await.map_err(PlacementError::Http)?;
        if status != 200 {
            return Err(PlacementError::Status {
                what: "GET /allocations",
                status,
                body: current.to_string().chars().take(500).collect(),
            });
        }
        let generation = current
            .get("consumer_generation")
            .cloned()
            .unwrap_or(json!(null));
        let body = json!({
            "allocations": { to.to_string(): { "resources": resources.as_json() } },
            "consumer_generation": generation,
            "project_id": project_id,
            "user_id": user_id,
        });
        let resp = self
            .req(reqwest::Method::PUT, &path)
            .json(&body)
            .send_retrying()
            .await
            .map_err(PlacementError::Http)?;
        match resp.status().as_u16() {
            204 | 200 => Ok(Some(true)),
            409 => {
                let text = resp.text().await.unwrap_or_default();
                if text.contains("placement.concurrent_update") {
                    Ok(None)
                } else {
                    Ok(Some(false))
                }
            }
            status => Err(status_error("PUT /allocations", status, resp).await),
        }
    }
}

impl PlacementClient for HttpPlacement {
    fn move_claim<'a>(
        &'a self,
        consumer: InstanceUuid,
        to: ProviderUuid,
        resources: Resources,
        project_id: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        Box::pin(async move {
            // A concurrent change of the consumer: read it again and retry.
            for _ in 0..3 {
                if let Some(ok) = self
                    .try_move(consumer, to, resources, project_id, user_id)
                    .await?
                {
                    return Ok(ok);
                }
            }
            Ok(false)
        })
    }

    fn delete_allocations(
        &self,
        consumer: InstanceUuid,
    ) -> BoxFuture<'_, Result<(), PlacementError>> {
        Box::pin(async move {
            let resp = self
                .req(reqwest::Method::DELETE, &format!("/allocations/{consumer}"))
                .send_retrying()
                .await
                .map_err(PlacementError::Http)?;
            match resp.status().as_u16() {
                204 | 404 => Ok(()),
                status => Err(status_error("DELETE /allocations", status, resp).await),
            }
        })
    }

    fn consumers_of(
        &self,
        provider: ProviderUuid,
    ) -> BoxFuture<'_, Result<Vec<String>, PlacementError>> {
        Box::pin(self.provider_consumers(provider))
    }
}

impl HttpPlacement {
    async fn provider_consumers(
        &self,
        provider: ProviderUuid,
    ) -> Result<Vec<String>, PlacementError> {
        let resp = self
            .req(
                reqwest::Method::GET,
                &format!("/resource_providers/{provider}/allocations"),
            )
            .send_retrying()
            .await
            .map_err(PlacementError::Http)?;
        match resp.status().as_u16() {
            200 => {
                let v: serde_json::Value = resp.json().await.map_err(PlacementError::Http)?;
                Ok(v["allocations"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default())
            }
            404 => Ok(Vec::new()),
            status => {
                Err(status_error("GET /resource_providers/{uuid}/allocations", status, resp).await)
            }
        }
    }
}

/// An in-memory placement for tests: allocations per consumer, and an
/// optional capacity per provider (a provider without one takes anything).
#[derive(Debug, Default, Clone)]
pub struct InMemoryPlacement {
    inner: Arc<Mutex<InMemory>>,
}

#[derive(Debug, Default)]
struct InMemory {
    allocations: HashMap<InstanceUuid, (ProviderUuid, Resources)>,
    capacity: HashMap<ProviderUuid, Resources>,
}

impl InMemoryPlacement {
    /// An empty placement.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InMemory> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the capacity of `provider`.
    pub fn set_capacity(&self, provider: ProviderUuid, capacity: Resources) {
        self.lock().capacity.insert(provider, capacity);
    }

    /// Claims `resources` on `provider` for `consumer` (what the scheduler
    /// does before the build is cast).
    pub fn claim(&self, consumer: InstanceUuid, provider: ProviderUuid, resources: Resources) {
        self.lock()
            .allocations
            .insert(consumer, (provider, resources));
    }

    /// Where `consumer`'s claim is.
    pub fn allocation(&self, consumer: InstanceUuid) -> Option<(ProviderUuid, Resources)> {
        self.lock().allocations.get(&consumer).copied()
    }

    fn fits(m: &InMemory, consumer: InstanceUuid, to: ProviderUuid, r: Resources) -> bool {
        let Some(cap) = m.capacity.get(&to) else {
            return true;
        };
        let mut used = Resources::default();
        for (c, (p, res)) in &m.allocations {
            if *p == to && *c != consumer {
                used.vcpus += res.vcpus;
                used.memory_mb += res.memory_mb;
                used.disk_gb += res.disk_gb;
            }
        }
        used.vcpus + r.vcpus <= cap.vcpus
            && used.memory_mb + r.memory_mb <= cap.memory_mb
            && used.disk_gb + r.disk_gb <= cap.disk_gb
    }
}

impl PlacementClient for InMemoryPlacement {
    fn move_claim<'a>(
        &'a self,
        consumer: InstanceUuid,
        to: ProviderUuid,
        resources: Resources,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<bool, PlacementError>> {
        let mut m = self.lock();
        let ok = Self::fits(&m, consumer, to, resources);
        if ok {
            m.allocations.insert(consumer, (to, resources));
        }
        Box::pin(async move { Ok(ok) })
    }

    fn delete_allocations(
        &self,
        consumer: InstanceUuid,
    ) -> BoxFuture<'_, Result<(), PlacementError>> {
        self.lock().allocations.remove(&consumer);
        Box::pin(async { Ok(()) })
    }

    fn consumers_of(
        &self,
        provider: ProviderUuid,
    ) -> BoxFuture<'_, Result<Vec<String>, PlacementError>> {
        let found = self
            .lock()
            .allocations
            .iter()
            .filter(|(_, (p, _))| *p == provider)
            .map(|(c, _)| c.to_string())
            .collect();
        Box::pin(async move { Ok(found) })
    }
}
