//! Thin clients of the public APIs the boot scenario drives: the Compute
//! API (servers), the image API (resolve the image by name), placement
//! (usages) and identity (the password login, the catalog). Every client
//! is built with a target's [`Tls`] settings.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::tls::Tls;

/// The key pair `target.key_pairs` imports for every tenant: (name, an
/// OpenSSH public key; nobody holds its private half).
pub const LOADTEST_KEY_PAIR: (&str, &str) = (
    "loadtest",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINIp4W3nq3RqGc17pVDpZ60gLx8MvS/JhqDJwu/m5A2N loadtest",
);

/// The Compute API microversion the scenario speaks (networks required,
/// fault in the detail view).
pub const COMPUTE_MICROVERSION: &str = "2.90";

/// A server as the list shows it.
#[derive(Debug, Clone)]
pub struct ListedServer {
    /// Its id.
    pub id: String,
    /// `ACTIVE`, `BUILD`, `ERROR`, … (empty in the brief view).
    pub status: String,
    /// The fault message of a server in ERROR (detail view only).
    pub fault: Option<String>,
    /// `OS-EXT-STS:vm_state` (detail view only).
    pub vm_state: String,
    /// `OS-EXT-SRV-ATTR:hypervisor_hostname` (detail view, administrators).
    pub node: Option<String>,
}

impl ListedServer {
    fn from_json(s: &Value) -> Self {
        Self {
            id: s["id"].as_str().unwrap_or_default().to_owned(),
            status: s["status"].as_str().unwrap_or_default().to_owned(),
            fault: s["fault"]["message"].as_str().map(str::to_owned),
            vm_state: s["OS-EXT-STS:vm_state"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            node: s["OS-EXT-SRV-ATTR:hypervisor_hostname"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        }
    }
}

/// The Compute API at `<base>/v2.1` with a token.
#[derive(Clone)]
pub struct Compute {
    base: String,
    token: String,
    microversion: String,
    http: reqwest::Client,
}

/// What a `POST /servers` answered.
#[derive(Debug)]
pub enum Created {
    /// 202 with the server id.
    Accepted(String),
    /// Anything else: status and body.
    Refused(u16, String),
}

impl Compute {
    /// `url` is the API root (`http://host:8774`) or its `/v2.1`.
    pub fn new(url: &str, token: &str, tls: &Tls) -> Result<Self> {
        let url = url.trim_end_matches('/');
        let base = url.strip_suffix("/v2.1").unwrap_or(url).to_owned();
        let http = tls
            .client()
            .pool_max_idle_per_host(1024)
            .timeout(Duration::from_secs(120))
            .build()?;
        Ok(Self {
            base,
            token: token.to_owned(),
            microversion: COMPUTE_MICROVERSION.to_owned(),
            http,
        })
    }

    /// The same client asking for microversion `version` (`2.N`) instead
    /// of [`COMPUTE_MICROVERSION`].
    pub fn with_microversion(mut self, version: &str) -> Self {
        version.clone_into(&mut self.microversion);
        self
    }

    fn req(&self, method: reqwest::Method, path_and_query: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/v2.1{path_and_query}", self.base))
            .header("x-auth-token", &self.token)
            .header(
                "openstack-api-version",
                format!("compute {}", self.microversion),
            )
    }

    /// Sets unlimited instances, cores and RAM for `project_id`, so that a
    /// rehearsal measures the fleet and not the project's quota (needs an
    /// administrator's token). `Ok(false)` when the API refuses (403).
    pub async fn lift_quotas(&self, project_id: &str) -> Result<bool> {
        let body = json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}});
        let resp = self
            .req(
                reqwest::Method::PUT,
                &format!("/os-quota-sets/{project_id}"),
            )
            .json(&body)
            .send()
            .await
            .context("PUT /os-quota-sets")?;
        match resp.status().as_u16() {
            200 => Ok(true),
            403 => Ok(false),
            s => bail!(
                "PUT /os-quota-sets/{project_id}: HTTP {s}: {}",
                resp.text().await.unwrap_or_default()
            ),
        }
    }

    /// `POST /servers` of one server with no network, in `zone` when given,
    /// on compute host `host` when given (2.74's `host`: administrators),
    /// with key pair `key_name` when given.
    pub async fn create(
        &self,
        name: &str,
        flavor: &str,
        image: &str,
        (zone, host, key_name): (Option<&str>, Option<&str>, Option<&str>),
    ) -> Result<Created> {
        let mut body = json!({"server": {
            "name": name, "flavorRef": flavor, "imageRef": image, "networks": "none"}});
        if let Some(z) = zone {
            body["server"]["availability_zone"] = json!(z);
        }
        if let Some(h) = host {
            body["server"]["host"] = json!(h);
        }
        if let Some(k) = key_name {
            body["server"]["key_name"] = json!(k);
        }
        let resp = self
            .req(reqwest::Method::POST, "/servers")
            .json(&body)
            .send()
            .await
            .context("POST /servers")?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if status != 202 {
            return Ok(Created::Refused(status, text));
        }
        let v: Value = serde_json::from_str(&text).context("POST /servers: body")?;
        let id = v["server"]["id"]
            .as_str()
            .context("POST /servers: no server id")?;
        Ok(Created::Accepted(id.to_owned()))
    }

    /// Imports the key pair [`LOADTEST_KEY_PAIR`] for this client's user
    /// (`POST /os-keypairs`); one of that name already there is kept.
    pub async fn import_key_pair(&self) -> Result<()> {
        let (name, public_key) = LOADTEST_KEY_PAIR;
        let resp = self
            .req(reqwest::Method::POST, "/os-keypairs")
            .json(&json!({"keypair": {"name": name, "public_key": public_key}}))
            .send()
            .await
            .context("POST /os-keypairs")?;
        match resp.status().as_u16() {
            200 | 201 | 409 => Ok(()),
            s => bail!(
                "POST /os-keypairs: HTTP {s}: {}",
                resp.text().await.unwrap_or_default()
            ),
        }
    }

    /// `DELETE /servers/{id}`: the status (204 accepted, 404 gone already).
    pub async fn delete(&self, id: &str) -> Result<u16> {
        let resp = self
            .req(reqwest::Method::DELETE, &format!("/servers/{id}"))
            .send()
            .await
            .with_context(|| format!("DELETE /servers/{id}"))?;
        Ok(resp.status().as_u16())
    }

    /// One `GET` answered 200: the time from sending the request until the
    /// last byte arrived (what a client waits for, before decoding) and the
    /// body; any other status is an error carrying the body.
    async fn get_ok(&self, path_and_query: &str) -> Result<(Duration, Vec<u8>)> {
        let t0 = Instant::now();
        let resp = self
            .req(reqwest::Method::GET, path_and_query)
            .send()
            .await
            .with_context(|| format!("GET {path_and_query}"))?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        let took = t0.elapsed();
        if status != 200 {
            bail!(
                "GET {path_and_query}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok((took, body.to_vec()))
    }

    /// The compute services as `os-services` shows them (administrators):
    /// `(host, state)`, state `up` or `down`.
    pub async fn compute_service_states(&self) -> Result<Vec<(String, String)>> {
        let (_, body) = self.get_ok("/os-services?binary=nova-compute").await?;
        let v: Value = serde_json::from_slice(&body).context("os-services body")?;
        Ok(v["services"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        (
                            s["host"].as_str().unwrap_or_default().to_owned(),
                            s["state"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// One timed `GET` (see [`Compute::get_ok`]); the time and the body's
    /// size in bytes.
    pub async fn get_timed(&self, path_and_query: &str) -> Result<(Duration, usize)> {
        let (took, body) = self.get_ok(path_and_query).await?;
        Ok((took, body.len()))
    }

    /// `os-getConsoleOutput` of server `id` (the whole log the compute
    /// keeps).
    pub async fn console_output(&self, id: &str) -> Result<String> {
        let path = format!("/servers/{id}/action");
        let resp = self
            .req(reqwest::Method::POST, &path)
            .json(&json!({"os-getConsoleOutput": {}}))
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status != 200 {
            bail!("POST {path} os-getConsoleOutput: HTTP {status}: {v}");
        }
        Ok(v["output"].as_str().unwrap_or_default().to_owned())
    }

    /// `GET /servers/{id}`: the server, or `None` when the API answers 404.
    pub async fn show(&self, id: &str) -> Result<Option<ListedServer>> {
        let path = format!("/servers/{id}");
        let resp = self
            .req(reqwest::Method::GET, &path)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap_or_default();
        match status {
            200 => {
                let v: Value = serde_json::from_slice(&body).context("server body")?;
                Ok(Some(ListedServer::from_json(&v["server"])))
            }
            404 => Ok(None),
            _ => bail!(
                "GET {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }

    /// One `GET` of a list page; returns the servers and the marker of the
    /// next page (when the answer links one).
    pub async fn list_page(&self, path_and_query: &str) -> Result<(Vec<ListedServer>, bool)> {
        let (_, body) = self.get_ok(path_and_query).await?;
        let v: Value = serde_json::from_slice(&body).context("list body")?;
        let servers = v["servers"]
            .as_array()
            .map(|a| a.iter().map(ListedServer::from_json).collect())
            .unwrap_or_default();
        let more = v["servers_links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["rel"] == "next"));
        Ok((servers, more))
    }

    /// Every server a list names, page after page (`limit=1000` pages,
    /// following the marker). `query` is e.g. `status=BUILD` or empty.
    pub async fn list_all(&self, detail: bool, query: &str) -> Result<Vec<ListedServer>> {
        let path = if detail {
            "/servers/detail"
        } else {
            "/servers"
        };
        let mut out: Vec<ListedServer> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut q = vec!["limit=1000".to_owned()];
            if !query.is_empty() {
                q.push(query.to_owned());
            }
            if let Some(m) = &marker {
                q.push(format!("marker={m}"));
            }
            let (page, more) = self.list_page(&format!("{path}?{}", q.join("&"))).await?;
            let last = page.last().map(|s| s.id.clone());
            out.extend(page);
            match (more, last) {
                (true, Some(l)) => marker = Some(l),
                _ => return Ok(out),
            }
        }
    }
}

/// An image id by name through the image API (`GET /v2/images?name=`).
pub async fn image_id_by_name(
    tls: &Tls,
    image_url: &str,
    token: &str,
    name: &str,
) -> Result<String> {
    let url = format!("{}/v2/images", image_url.trim_end_matches('/'));
    let resp = tls
        .build()?
        .get(&url)
        .query(&[("name", name)])
        .header("x-auth-token", token)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if status != 200 {
        bail!("GET {url}?name={name}: HTTP {status}: {v}");
    }
    v["images"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|i| i["id"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("no image named {name} at {image_url}"))
}

/// Identity's base URL as the clients here want it (they add `/v3/…`):
/// `url` without a trailing `/` or `/v3`, so an `OS_AUTH_URL` as the
/// openstack CLI takes it (`http://host:5000/v3`) works too.
pub fn identity_base(url: &str) -> String {
    let url = url.trim_end_matches('/');
    url.strip_suffix("/v3").unwrap_or(url).to_owned()
}

/// The public URL of `service_type` in the caller's catalog
/// (`GET /v3/auth/catalog`).
pub async fn catalog_url(
    tls: &Tls,
    identity_url: &str,
    token: &str,
    service_type: &str,
) -> Result<String> {
    let url = format!("{}/v3/auth/catalog", identity_url.trim_end_matches('/'));
    let v: Value = tls
        .build()?
        .get(&url)
        .header("x-auth-token", token)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?
        .error_for_status()?
        .json()
        .await?;
    v["catalog"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["type"] == service_type)
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .find(|e| e["interface"] == "public")
        .and_then(|e| e["url"].as_str().map(str::to_owned))
        .with_context(|| format!("no public {service_type} endpoint in the catalog"))
        .and_then(|u| {
            crate::scenario::check_endpoint_url(
                &format!("the catalog's {service_type} endpoint"),
                &u,
            )?;
            Ok(u)
        })
}

/// Placement, for the scenario's invariants.
#[derive(Clone)]
pub struct Placement {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Placement {
    /// Placement at `base` with `token` (an administrator's).
    pub fn new(base: &str, token: &str, tls: &Tls) -> Result<Self> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http: tls
                .client()
                .pool_max_idle_per_host(64)
                .timeout(Duration::from_secs(60))
                .build()?,
        })
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", "placement 1.36")
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if status != 200 {
            bail!("placement GET {path}: HTTP {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// Sum of every provider's usages, by resource class, and the number of
    /// providers.
    pub async fn total_usage(&self) -> Result<(std::collections::BTreeMap<String, u64>, usize)> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let rps = self.get("/resource_providers").await?;
        let uuids: Vec<String> = rps["resource_providers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uuid"].as_str().map(str::to_owned))
            .collect();
        let usages: Vec<Value> = stream::iter(uuids.iter())
            .map(|u| self.get_owned(format!("/resource_providers/{u}/usages")))
            .buffer_unordered(16)
            .try_collect()
            .await?;
        let mut total = std::collections::BTreeMap::new();
        for u in usages {
            if let Some(m) = u["usages"].as_object() {
                for (rc, n) in m {
                    *total.entry(rc.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
                }
            }
        }
        Ok((total, uuids.len()))
    }

    async fn get_owned(&self, path: String) -> Result<Value> {
        self.get(&path).await
    }

    /// Whether `consumer` still holds an allocation.
    pub async fn has_allocations(&self, consumer: &str) -> Result<bool> {
        let v = self.get(&format!("/allocations/{consumer}")).await?;
        Ok(v["allocations"].as_object().is_some_and(|m| !m.is_empty()))
    }
}

impl Compute {
    /// The id of the flavor named `name` (or `name` itself when it is an id).
    pub async fn flavor_id(&self, name: &str) -> Result<String> {
        let resp = self
            .req(reqwest::Method::GET, "/flavors")
            .send()
            .await
            .context("GET /flavors")?;
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status != 200 {
            bail!("GET /flavors: HTTP {status}: {v}");
        }
        v["flavors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["name"] == name || f["id"] == name)
            .and_then(|f| f["id"].as_str().map(str::to_owned))
            .with_context(|| format!("no flavor {name}"))
    }
}

/// Logs in to identity with a password (Keystone v3 `POST
/// /v3/auth/tokens`, the user and the project scope by name, each in its
/// domain by name, `Default` when empty): the token, from
/// `X-Subject-Token`. Neither the password nor the token is written into
/// an error. A failure to connect names the URL (and TLS, for https), the
/// cause after it (`{:#}` shows e.g. OpenSSL's "certificate verify
/// failed"); a refusal names the user.
pub async fn password_login(
    tls: &Tls,
    login: &fabric::login::ServiceCredentials,
) -> Result<String> {
    let domain = |d: &str| if d.is_empty() { "Default" } else { d }.to_owned();
    let (user_domain, project_domain) = (
        domain(&login.user_domain_name),
        domain(&login.project_domain_name),
    );
    let base = login.auth_url.trim_end_matches('/').trim_end_matches("/v3");
    let url = format!("{base}/v3/auth/tokens");
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": login.username,
            "domain": {"name": user_domain},
            "password": login.password}}},
        "scope": {"project": {"name": login.project_name,
            "domain": {"name": project_domain}}}
    }});
    let resp = tls
        .client()
        .timeout(Duration::from_secs(60))
        .build()
        .context("build the HTTP client")?
        .post(&url)
        .json(&body)
        .send()
        .await
        .with_context(|| {
            let tls = if url.to_ascii_lowercase().starts_with("https:") {
                " (TLS)"
            } else {
                ""
            };
            format!("connect to {url}{tls}")
        })?;
    let status = resp.status().as_u16();
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp.text().await.unwrap_or_default();
    let excerpt: String = text.trim().chars().take(300).collect();
    match (status, token) {
        (200..=299, Some(token)) => Ok(token),
        (200..=299, None) => bail!("POST {url}: HTTP {status} without an X-Subject-Token header"),
        (401, _) => bail!(
            "identity refused the credentials for user {} (domain {user_domain}) on project {} \
             (domain {project_domain}): HTTP 401: {excerpt}",
            login.username,
            login.project_name
        ),
        _ => bail!("POST {url}: HTTP {status}: {excerpt}"),
    }
}

/// The project `token` is scoped to (identity's `GET /v3/auth/tokens`).
pub async fn token_project(tls: &Tls, identity_url: &str, token: &str) -> Result<String> {
    let base = identity_url.trim_end_matches('/').trim_end_matches("/v3");
    let resp = tls
        .build()?
        .get(format!("{base}/v3/auth/tokens"))
        .header("x-auth-token", token)
        .header("x-subject-token", token)
        .send()
        .await
        .context("GET /v3/auth/tokens")?;
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if status != 200 {
        bail!("validate the token: HTTP {status}");
    }
    v["token"]["project"]["id"]
        .as_str()
        .map(str::to_owned)
        .context("the token is not project-scoped")
}

/// Lifts the quotas of the project `token` is scoped to, with `admin`
/// (a Compute API client holding a token allowed to set quotas); warns
/// when refused, so the run is then bounded by the project's quota.
pub async fn lift_quotas_for(
    tls: &Tls,
    admin: &Compute,
    identity_url: &str,
    token: &str,
) -> Result<()> {
    let project = token_project(tls, identity_url, token).await?;
    if !admin.lift_quotas(&project).await? {
        eprintln!(
            "warning: not allowed to lift the quotas of project {project}; boots beyond its quota will fail with 403"
        );
    }
    Ok(())
}

/// Creates project `name` with a user of the same name holding the
/// `member` role on it (Keystone v3 admin API, as an administrator).
pub async fn create_tenant(
    tls: &Tls,
    identity_url: &str,
    admin_token: &str,
    name: &str,
) -> Result<(String, String)> {
    let http = tls.build()?;
    let base = identity_url.trim_end_matches('/');
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .header("x-auth-token", admin_token)
            .json(&body)
            .send()
    };
    let created = |what: &'static str, resp: reqwest::Response| async move {
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status != 201 {
            bail!("create {what}: HTTP {status}: {v}");
        }
        v[what]["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("create {what}: no id"))
    };
    let project = created(
        "project",
        post(
            "/v3/projects",
            json!({"project": {"name": name, "domain_id": "default"}}),
        )
        .await
        .context("POST /v3/projects")?,
    )
    .await?;
    let password = uuid::Uuid::new_v4().simple().to_string();
    let user = created(
        "user",
        post(
            "/v3/users",
            json!({"user": {"name": name, "password": password, "domain_id": "default",
                "default_project_id": project}}),
        )
        .await
        .context("POST /v3/users")?,
    )
    .await?;
    let roles: Value = http
        .get(format!("{base}/v3/roles?name=member"))
        .header("x-auth-token", admin_token)
        .send()
        .await
        .context("GET /v3/roles")?
        .error_for_status()?
        .json()
        .await?;
    let role = roles["roles"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|r| r["id"].as_str())
        .context("no role named member")?;
    let resp = http
        .put(format!(
            "{base}/v3/projects/{project}/users/{user}/roles/{role}"
        ))
        .header("x-auth-token", admin_token)
        .send()
        .await
        .context("PUT role assignment")?;
    if !resp.status().is_success() {
        bail!("assign member on {name}: HTTP {}", resp.status());
    }
    Ok((project, password))
}

/// A host aggregate as `GET /os-aggregates` shows it.
#[derive(Debug, Clone)]
pub struct Aggregate {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its zone (the `availability_zone` metadata), if any.
    pub availability_zone: Option<String>,
    /// Its hosts.
    pub hosts: Vec<String>,
    /// Its metadata.
    pub metadata: std::collections::BTreeMap<String, String>,
}

impl Compute {
    async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self.req(method.clone(), path);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {}", text.trim());
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).with_context(|| format!("{method} {path}: body"))
    }

    /// `POST /os-aggregates` (administrators): the new aggregate's id.
    pub async fn aggregate_create(&self, name: &str, zone: Option<&str>) -> Result<i64> {
        let mut agg = json!({ "name": name });
        if let Some(z) = zone {
            agg["availability_zone"] = json!(z);
        }
        let v = self
            .send_json(
                reqwest::Method::POST,
                "/os-aggregates",
                Some(json!({ "aggregate": agg })),
            )
            .await?;
        v["aggregate"]["id"]
            .as_i64()
            .context("POST /os-aggregates: no id")
    }

    /// `add_host` on aggregate `id`.
    pub async fn aggregate_add_host(&self, id: i64, host: &str) -> Result<()> {
        self.send_json(
            reqwest::Method::POST,
            &format!("/os-aggregates/{id}/action"),
            Some(json!({"add_host": {"host": host}})),
        )
        .await
        .map(|_| ())
    }

    /// `set_metadata` on aggregate `id`.
    pub async fn aggregate_set_metadata(&self, id: i64, metadata: Value) -> Result<()> {
        self.send_json(
            reqwest::Method::POST,
            &format!("/os-aggregates/{id}/action"),
            Some(json!({"set_metadata": {"metadata": metadata}})),
        )
        .await
        .map(|_| ())
    }

    /// `GET /os-aggregates`.
    pub async fn aggregates(&self) -> Result<Vec<Aggregate>> {
        let v = self
            .send_json(reqwest::Method::GET, "/os-aggregates", None)
            .await?;
        let strs = |x: &Value| -> Vec<String> {
            x.as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(str::to_owned))
                .collect()
        };
        Ok(v["aggregates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Aggregate {
                id: a["id"].as_i64().unwrap_or_default(),
                name: a["name"].as_str().unwrap_or_default().to_owned(),
                availability_zone: a["availability_zone"].as_str().map(str::to_owned),
                hosts: strs(&a["hosts"]),
                metadata: a["metadata"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect(),
            })
            .collect())
    }
}

impl Placement {
    /// Every resource provider's name and the consumers allocated against
    /// it (`GET /resource_providers`, then each provider's `/allocations`).
    pub async fn allocations_by_provider(&self) -> Result<Vec<(String, Vec<String>)>> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let rps = self.get("/resource_providers").await?;
        let list: Vec<(String, String)> = rps["resource_providers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    r["uuid"].as_str()?.to_owned(),
                    r["name"].as_str()?.to_owned(),
                ))
            })
            .collect();
        stream::iter(list)
            .map(|(uuid, name)| async move {
                let v = self
                    .get(&format!("/resource_providers/{uuid}/allocations"))
                    .await?;
                let consumers = v["allocations"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                Ok::<_, anyhow::Error>((name, consumers))
            })
            .buffer_unordered(16)
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn identity_base_takes_an_auth_url_with_or_without_v3() {
        for url in [
            "http://127.0.0.1:5000",
            "http://127.0.0.1:5000/",
            "http://127.0.0.1:5000/v3",
            "http://127.0.0.1:5000/v3/",
        ] {
            assert_eq!(super::identity_base(url), "http://127.0.0.1:5000", "{url}");
        }
        assert_eq!(
            super::identity_base("https://cloud.example/identity/v3"),
            "https://cloud.example/identity"
        );
    }
}
