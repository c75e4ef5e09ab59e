//! The image service's limits from identity, as Glance's
//! `use_keystone_limits` (oslo.limit) reads them: a project's limit for a
//! resource (`GET /v3/limits`) when one is set, else the registered
//! default (`GET /v3/registered_limits`), else `[image.quota]`. Read with
//! the service's own token on every create and upload (no cache: a limit
//! an admin sets holds from the next request). When identity does not
//! answer the request fails with 503 rather than pass unlimited.

use std::time::Duration;

use fabric::token::SharedToken;
use serde::Deserialize;
use tokio::sync::OnceCell;

use super::error::{ImageError, Result};

/// Reads limits from an identity service.
pub struct KeystoneLimits {
    base: String,
    token: SharedToken,
    client: reqwest::Client,
    /// The catalog id of the image service (looked up once).
    service_id: OnceCell<String>,
}

impl std::fmt::Debug for KeystoneLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeystoneLimits")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::fmt::Display) -> ImageError {
    ImageError::Unavailable(format!(
        "The image service cannot read its limits from the identity service: {e}"
    ))
}

#[derive(Deserialize)]
struct Services {
    services: Vec<Service>,
}
#[derive(Deserialize)]
struct Service {
    id: String,
}
#[derive(Deserialize)]
struct Limits {
    limits: Vec<Limit>,
}
#[derive(Deserialize)]
struct Limit {
    resource_limit: i64,
}
#[derive(Deserialize)]
struct Registered {
    registered_limits: Vec<RegisteredLimit>,
}
#[derive(Deserialize)]
struct RegisteredLimit {
    default_limit: i64,
}

impl KeystoneLimits {
    /// Limits at the identity service `identity_url` (with or without
    /// `/v3`), read with `token` (of the `service` role or an admin's).
    pub fn new(identity_url: &str, token: SharedToken) -> anyhow::Result<Self> {
        let client = fabric::http::client(&fabric::http::ClientOptions {
            timeout: Duration::from_secs(5),
            ca_file: fabric::http::process_ca_file(),
            ..Default::default()
        })?;
        Ok(Self {
            base: identity_url
                .trim_end_matches('/')
                .trim_end_matches("/v3")
                .to_owned(),
            token,
            client,
            service_id: OnceCell::new(),
        })
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T> {
        let resp = self
            .client
            .get(format!("{}/v3/{path}", self.base))
            .query(query)
            .header("x-auth-token", self.token.get())
            .send()
            .await
            .map_err(unavailable)?;
        if !resp.status().is_success() {
            return Err(unavailable(format!("GET /v3/{path}: {}", resp.status())));
        }
        resp.json().await.map_err(unavailable)
    }

    async fn service_id(&self) -> Result<&str> {
        let id = self
            .service_id
            .get_or_try_init(|| async {
                let s: Services = self.get("services", &[("type", "image")]).await?;
                s.services
                    .into_iter()
                    .next()
                    .map(|s| s.id)
                    .ok_or_else(|| unavailable("no service of type image in the catalog"))
            })
            .await?;
        Ok(id)
    }

    /// `project`'s limit on `resource`: its own, else the registered
    /// default; `None` when identity has neither.
    pub async fn limit(&self, project: &str, resource: &str) -> Result<Option<i64>> {
        let sid = self.service_id().await?;
        let own: Limits = self
            .get(
                "limits",
                &[
                    ("service_id", sid),
                    ("project_id", project),
                    ("resource_name", resource),
                ],
            )
            .await?;
        if let Some(l) = own.limits.first() {
            return Ok(Some(l.resource_limit));
        }
        let reg: Registered = self
            .get(
                "registered_limits",
                &[("service_id", sid), ("resource_name", resource)],
            )
            .await?;
        Ok(reg.registered_limits.first().map(|r| r.default_limit))
    }
}
