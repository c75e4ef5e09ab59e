//! The scenarios on the embedded backends: in-process bus, SQLite.

use std::sync::Arc;

use fabric::bus::Transport;

use crate::scenarios;

/// A fresh SQLite file and an in-process bus (also used by other modules).
pub(crate) fn backends(test: &str) -> (testkit::SqliteDb, Arc<dyn Transport>) {
    let db = testkit::sqlite(test);
    let bus: Arc<dyn Transport> = Arc::new(fabric::bus::InprocTransport::new());
    (db, bus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_heartbeats() {
    let (db, bus) = backends("registration_and_heartbeats");
    scenarios::registration_and_heartbeats(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_walks_task_states() {
    let (db, bus) = backends("build_walks_task_states");
    scenarios::build_walks_task_states(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_failure_without_alternates() {
    let (db, bus) = backends("spawn_failure_without_alternates");
    scenarios::spawn_failure_without_alternates(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_failure_with_alternate() {
    let (db, bus) = backends("spawn_failure_with_alternate");
    scenarios::spawn_failure_with_alternate(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_deletes() {
    let (db, bus) = backends("terminate_deletes");
    scenarios::terminate_deletes(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_needs_deleting() {
    let (db, bus) = backends("terminate_needs_deleting");
    scenarios::terminate_needs_deleting(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_failures_are_counted_and_reset() {
    let (db, bus) = backends("build_failures_are_counted_and_reset");
    scenarios::build_failures_are_counted_and_reset(&db.url, bus).await;
}
