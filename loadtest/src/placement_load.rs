//! Placement scenarios: seed a fleet of resource providers, then measure
//! concurrent claims (allocations with consumer generations) and allocation
//! candidate queries, through the public REST API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use serde_json::{json, Value};

use crate::stats::{summarize, Summary};

/// A placement endpoint and the credentials to use it.
#[derive(Clone)]
pub struct Target {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Target {
    /// A target at `base` (e.g. `http://127.0.0.1:8778`, or https with
    /// `tls`'s trust) using `token`.
    pub fn new(base: &str, token: &str, tls: &crate::tls::Tls) -> Result<Self> {
        let http = tls
            .client()
            .pool_max_idle_per_host(256)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http,
        })
    }

    /// Sends one request at microversion `mv`; returns status and body.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        mv: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", format!("placement {mv}"));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("request {path}"))?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await?))
    }

    async fn expect(
        &self,
        method: reqwest::Method,
        path: &str,
        mv: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<Value> {
        let (status, text) = self.send(method, path, mv, body).await?;
        if !ok.contains(&status) {
            bail!("{path}: HTTP {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// The shape of the fleet to seed.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSpec {
    /// Number of compute-node providers.
    pub providers: usize,
    /// One provider in this many carries the custom trait.
    pub trait_every: usize,
    /// Providers per aggregate.
    pub aggregate_size: usize,
}

/// What was seeded.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// Provider UUIDs.
    pub providers: Vec<String>,
    /// Aggregate UUIDs, one per `aggregate_size` providers.
    pub aggregates: Vec<String>,
    /// The custom trait some providers carry.
    pub trait_name: String,
}

/// The custom trait seeded on one provider in `trait_every`.
pub const TRAIT: &str = "CUSTOM_LOADTEST_FAST_NIC";

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Creates the fleet through the API with `concurrency` requests in flight.
pub async fn seed(t: &Target, spec: &FleetSpec, concurrency: usize) -> Result<Fleet> {
    t.expect(
        reqwest::Method::PUT,
        &format!("/traits/{TRAIT}"),
        "1.6",
        None,
        &[201, 204],
    )
    .await?;
    let aggregates: Vec<String> = (0..spec.providers.div_ceil(spec.aggregate_size))
        .map(|_| new_uuid())
        .collect();
    let done = AtomicU64::new(0);
    let started = Instant::now();
    let results: Vec<Result<String>> = stream::iter(0..spec.providers)
        .map(|i| {
            let (t, aggregates, done) = (t.clone(), &aggregates, &done);
            async move {
                let uuid = new_uuid();
                t.expect(
                    reqwest::Method::POST,
                    "/resource_providers",
                    "1.20",
                    Some(&json!({"name": format!("loadtest-cn-{i:06}"), "uuid": uuid})),
                    &[200],
                )
                .await?;
                let inv = json!({
                    "resource_provider_generation": 0,
                    "inventories": {
                        "VCPU": {"total": 64, "allocation_ratio": 4.0},
                        "MEMORY_MB": {"total": 262_144, "allocation_ratio": 1.0, "reserved": 512},
                        "DISK_GB": {"total": 2000, "allocation_ratio": 1.0},
                    }
                });
                let r = t.expect(reqwest::Method::PUT, &format!("/resource_providers/{uuid}/inventories"), "1.20", Some(&inv), &[200]).await?;
                let mut generation = r["resource_provider_generation"].as_i64().unwrap_or(1);
                if spec.trait_every > 0 && i % spec.trait_every == 0 {
                    let body = json!({"traits": [TRAIT], "resource_provider_generation": generation});
                    let r = t.expect(reqwest::Method::PUT, &format!("/resource_providers/{uuid}/traits"), "1.20", Some(&body), &[200]).await?;
                    generation = r["resource_provider_generation"].as_i64().unwrap_or(generation + 1);
                }
                let body = json!({"aggregates": [aggregates[i / spec.aggregate_size]], "resource_provider_generation": generation});
                t.expect(reqwest::Method::PUT, &format!("/resource_providers/{uuid}/aggregates"), "1.20", Some(&body), &[200]).await?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 1000 == 0 {
                    eprintln!("  seeded {n}/{} providers ({:.0}/s)", spec.providers, n as f64 / started.elapsed().as_secs_f64());
                }
                Ok(uuid)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let providers = results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(Fleet {
        providers,
        aggregates,
        trait_name: TRAIT.to_owned(),
    })
}

/// Result of the claims scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimsReport {
    /// Concurrent claimers.
    pub concurrency: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// Successful claims (204).
    pub claims: u64,
    /// Claims per second.
    pub claims_per_second: f64,
    /// 409 answers (each retried by the claimer with a new attempt).
    pub conflicts: u64,
    /// Latency of successful claims.
    pub latency: Summary,
}

/// `concurrency` claimers, each claiming VCPU:1, MEMORY_MB:256, DISK_GB:10
/// for a new consumer (consumer_generation null, microversion 1.28) on
/// providers spread over the fleet, for `duration`.
pub async fn claims(
    t: &Target,
    fleet: &Fleet,
    concurrency: usize,
    duration: Duration,
) -> Result<ClaimsReport> {
    let deadline = Instant::now() + duration;
    let conflicts = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (t, providers, conflicts) = (t.clone(), fleet.providers.clone(), conflicts.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                let mut i = w * 7919;
                while Instant::now() < deadline {
                    i = i.wrapping_add(104_729);
                    let rp = &providers[i % providers.len()];
                    let body = json!({
                        "allocations": {rp: {"resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 10}}},
                        "project_id": format!("project-{}", w % 4),
                        "user_id": "loadtest",
                        "consumer_generation": null,
                    });
                    let t0 = Instant::now();
                    let (status, text) = t.send(reqwest::Method::PUT, &format!("/allocations/{}", new_uuid()), "1.28", Some(&body)).await?;
                    match status {
                        204 => samples.push(t0.elapsed()),
                        409 => {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                        }
                        other => bail!("claim answered {other}: {text}"),
                    }
                }
                Ok::<_, anyhow::Error>(samples)
            })
        })
        .collect();
    let mut samples = Vec::new();
    for w in workers {
        samples.extend(w.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    let latency = summarize(&mut samples);
    Ok(ClaimsReport {
        concurrency,
        seconds,
        claims: latency.count as u64,
        claims_per_second: latency.count as f64 / seconds,
        conflicts: conflicts.load(Ordering::Relaxed),
        latency,
    })
}

/// Result of one candidates query.
#[derive(Debug, Clone, Serialize)]
pub struct CandidatesReport {
    /// Name of the query.
    pub name: String,
    /// The query string.
    pub query: String,
    /// Allocation requests in the last answer.
    pub candidates: usize,
    /// Latency.
    pub latency: Summary,
}

/// The three queries of the issue: plain, with `required=`, with `member_of=`.
pub fn standard_queries(fleet: &Fleet) -> Vec<(String, String)> {
    let base = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:10&limit=1000";
    vec![
        ("plain".to_owned(), base.to_owned()),
        (
            "required".to_owned(),
            format!("{base}&required={}", fleet.trait_name),
        ),
        (
            "member_of".to_owned(),
            format!("{base}&member_of={}", fleet.aggregates[0]),
        ),
    ]
}

/// Runs each query `iterations` times, one at a time.
pub async fn candidates(
    t: &Target,
    queries: &[(String, String)],
    iterations: usize,
) -> Result<Vec<CandidatesReport>> {
    let mut out = Vec::new();
    for (name, query) in queries {
        let mut samples = Vec::with_capacity(iterations);
        let mut count = 0;
        for _ in 0..iterations {
            let t0 = Instant::now();
            let (status, text) = t
                .send(
                    reqwest::Method::GET,
                    &format!("/allocation_candidates?{query}"),
                    "1.39",
                    None,
                )
                .await?;
            samples.push(t0.elapsed());
            if status != 200 {
                bail!("allocation_candidates ({name}) answered {status}: {text}");
            }
            let v: Value = serde_json::from_str(&text)?;
            count = v["allocation_requests"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
        }
        out.push(CandidatesReport {
            name: name.clone(),
            query: query.clone(),
            candidates: count,
            latency: summarize(&mut samples),
        });
    }
    Ok(out)
}

/// Sum of VCPU used over the fleet, read back from placement (each claim
/// takes one VCPU, so this must equal the successful claims).
pub async fn vcpu_used(t: &Target, fleet: &Fleet) -> Result<u64> {
    let mut total = 0;
    for rp in &fleet.providers {
        let v = t
            .expect(
                reqwest::Method::GET,
                &format!("/resource_providers/{rp}/usages"),
                "1.0",
                None,
                &[200],
            )
            .await?;
        total += v["usages"]["VCPU"].as_u64().unwrap_or(0);
    }
    Ok(total)
}
