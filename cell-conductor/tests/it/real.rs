//! The scenarios on PostgreSQL and RabbitMQ (skipped without them unless
//! REQUIRE_REAL_BACKENDS=1).

use std::sync::Arc;

use fabric::bus::Transport;

use crate::scenarios;

/// A fresh PostgreSQL database and RabbitMQ vhost `conductor_<test>`
/// (also used by other modules); `None` when one is missing and not required.
pub(crate) async fn backends(test: &str) -> Option<(testkit::PgDb, Arc<dyn Transport>)> {
    let db = testkit::postgres(&format!("conductor_{test}")).await?;
    let url = testkit::rabbitmq(&format!("conductor_{test}"))?;
    let bus = fabric::bus::connect(&url)
        .await
        .expect("connect to RabbitMQ");
    Some((db, bus))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_registration_and_heartbeats() {
    let Some((db, bus)) = backends("registration").await else {
        return;
    };
    scenarios::registration_and_heartbeats(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_build_walks_task_states() {
    let Some((db, bus)) = backends("build").await else {
        return;
    };
    scenarios::build_walks_task_states(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_spawn_failure_without_alternates() {
    let Some((db, bus)) = backends("fail_no_alt").await else {
        return;
    };
    scenarios::spawn_failure_without_alternates(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_spawn_failure_with_alternate() {
    let Some((db, bus)) = backends("fail_alt").await else {
        return;
    };
    scenarios::spawn_failure_with_alternate(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_terminate_deletes() {
    let Some((db, bus)) = backends("terminate").await else {
        return;
    };
    scenarios::terminate_deletes(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_build_failures_are_counted_and_reset() {
    let Some((db, bus)) = backends("fail_count").await else {
        return;
    };
    scenarios::build_failures_are_counted_and_reset(&db.url, bus).await;
}
