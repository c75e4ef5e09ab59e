//! `cell-conductor`: the per-cell orchestrator.
//!
//! The only writer of its cell database on behalf of computes: it consumes
//! the `conductor` queue of its cell's bus and serves the methods of
//! [`fabric::rpc`] (service registration and heartbeats, compute nodes,
//! instance updates with task-state checks, action events, faults, the
//! destroyed notice of a delete, and the reschedule decision with
//! alternates, which moves the claim in placement). Talks to its cell's
//! broker and to placement; never calls up into the API layer.
//!
//! Layers: [`service`] (decode → domain types in [`model`] → database) →
//! [`db`] (all SQL, both backends). Errors: [`error::ConductorError`], mapped
//! to a broker reply in one place.
//!
//! Embedding (the all-in-one region): [`run`] (or [`run_with`] to give it a
//! placement client) returns a [`Handle`].
//!
//! May depend on: `fabric`, `migrations`, sqlx, an HTTP client for
//! placement. Must not depend on api-super or compute.

pub mod audit;
pub mod config;
pub mod db;
pub mod error;
pub mod heal;
pub mod liveness;
pub mod metrics;
pub mod model;
pub mod placement;
mod service;

use std::sync::Arc;
use std::time::Duration;

use fabric::bus::{Subscription, Transport};
use fabric::rpc::{CONDUCTOR_BINARY, CONDUCTOR_LIVENESS_QUEUE, CONDUCTOR_QUEUE, SERVICE_VERSION};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

pub use db::CellDb;
pub use error::{ConductorError, Result};
pub use placement::{HttpPlacement, InMemoryPlacement, NoPlacement, PlacementClient};

use service::Conductor;

/// How to run a conductor.
#[derive(Debug, Clone)]
pub struct ConductorOptions {
    /// The cell database URL (`postgres://…` or `sqlite://…`).
    pub db_url: String,
    /// The cell's bus.
    pub bus: Arc<dyn Transport>,
    /// Placement (reschedules move claims; deletes remove them).
    pub placement: Arc<dyn PlacementClient>,
    /// The conductor's own host name (its `nova-conductor` service row).
    pub host: String,
    /// Requests handled at once.
    pub concurrency: usize,
    /// Database pool size (PostgreSQL).
    pub max_connections: u32,
    /// How often the conductor reports its own service up.
    pub report_interval: Duration,
    /// How often the heartbeats seen in memory are written (one statement
    /// for all of them; see [`liveness`]).
    pub liveness_flush: Duration,
    /// The healing loop (see [`heal`]).
    pub heal: heal::HealOptions,
}

impl ConductorOptions {
    /// Defaults: no placement ([`NoPlacement`]: reschedules cannot move a
    /// claim and end in ERROR), 64 requests at once, 8 connections.
    pub fn new(db_url: &str, bus: Arc<dyn Transport>) -> Self {
        Self {
            db_url: db_url.to_owned(),
            bus,
            placement: Arc::new(NoPlacement),
            host: "cell-conductor".to_owned(),
            concurrency: 64,
            max_connections: 8,
            report_interval: Duration::from_secs(10),
            liveness_flush: Duration::from_secs(1),
            heal: heal::HealOptions::default(),
        }
    }
}

/// A running conductor.
#[derive(Debug)]
pub struct Handle {
    db: CellDb,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
}

impl Handle {
    /// The conductor's cell database (reads for tests and embedding).
    pub fn db(&self) -> &CellDb {
        &self.db
    }

    /// Stops consuming, waits for the requests in flight, closes the pool.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        for t in self.background {
            let _ = t.await;
        }
        self.db.close().await;
    }
}

/// Runs a conductor on the cell database at `db_url` (brought up to date)
/// and the cell bus `bus`, without placement (see [`run_with`]).
pub async fn run(db_url: &str, bus: Arc<dyn Transport>) -> Result<Handle> {
    run_with(ConductorOptions::new(db_url, bus)).await
}

/// Runs a conductor. Returns once it consumes its queue.
pub async fn run_with(o: ConductorOptions) -> Result<Handle> {
    let db = CellDb::open(&o.db_url, o.max_connections).await?;
    db.register_service(&o.host, CONDUCTOR_BINARY, CONDUCTOR_QUEUE, SERVICE_VERSION)
        .await?;
    let sub = o
        .bus
        .consume(CONDUCTOR_QUEUE)
        .await
        .map_err(ConductorError::Bus)?;
    let beats = o
        .bus
        .consume(CONDUCTOR_LIVENESS_QUEUE)
        .await
        .map_err(ConductorError::Bus)?;
    let conductor = Arc::new(Conductor {
        db: db.clone(),
        bus: o.bus.clone(),
        placement: o.placement.clone(),
    });
    let (tx, rx) = watch::channel(false);
    let every = o.liveness_flush.max(Duration::from_millis(100));
    // The canary beats every `every`: a gap of several is a broken path.
    let seen = Arc::new(liveness::Liveness::with_gap(
        (every * 3).max(Duration::from_secs(2)),
    ));
    let mut background = vec![
        tokio::spawn(liveness::consume(seen.clone(), beats, rx.clone())),
        tokio::spawn(liveness::canary(
            o.bus.clone(),
            o.host.clone(),
            every,
            rx.clone(),
        )),
        tokio::spawn(liveness::flush_loop(
            seen.clone(),
            db.clone(),
            every,
            rx.clone(),
        )),
    ];
    if !o.heal.interval.is_zero() {
        background.push(tokio::spawn(heal::run(
            conductor.clone(),
            seen,
            o.heal.clone(),
            rx.clone(),
        )));
    }
    let task = tokio::spawn(serve(conductor, sub, rx, o));
    tracing::info!("cell conductor consuming {CONDUCTOR_QUEUE} and {CONDUCTOR_LIVENESS_QUEUE}");
    Ok(Handle {
        db,
        shutdown: tx,
        task,
        background,
    })
}

async fn serve(
    conductor: Arc<Conductor>,
    mut sub: Subscription,
    mut shutdown: watch::Receiver<bool>,
    o: ConductorOptions,
) {
    let permits = Arc::new(Semaphore::new(o.concurrency.max(1)));
    let mut tasks = JoinSet::new();
    let mut report = tokio::time::interval(o.report_interval);
    report.tick().await;
    loop {
        let delivery = tokio::select! {
            d = sub.recv() => match d {
                Some(d) => d,
                None => break,
            },
            _ = report.tick() => {
                if let Err(e) = conductor.db.service_heartbeat(&o.host, CONDUCTOR_BINARY).await {
                    tracing::warn!(error = %error::chain(&e), "could not report the conductor up");
                }
                continue;
            }
            _ = stopped(&mut shutdown) => break,
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let c = conductor.clone();
        tasks.spawn(async move {
            let _permit = permit;
            c.handle(delivery).await;
        });
        while tasks.try_join_next().is_some() {}
        metrics::gauge_in_flight(tasks.len());
    }
    drop(sub);
    while tasks.join_next().await.is_some() {}
}

/// Resolves once `rx` says stop (or its sender is gone).
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
