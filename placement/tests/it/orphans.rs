//! Allocations never outlive their provider or their consumer, though the
//! schema has no foreign key there (as upstream's; migration 0002): on
//! PostgreSQL, a provider deleted while claims keep landing on it, and a
//! consumer's allocations deleted while another request rewrites them,
//! leave no allocation without its provider or consumer and no consumer
//! without allocations.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use testkit::http::Client;

use crate::reshaper::call;

fn uuid() -> String {
    fabric::ids::ConsumerUuid::new_random().to_string()
}

fn client(addr: SocketAddr, version: &str) -> Client {
    Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", &format!("placement {version}"))
}

/// Rows that break the invariants the foreign keys used to hold.
async fn orphans(pool: &sqlx::PgPool) -> (i64, i64, i64) {
    let q = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .unwrap()
    };
    (
        q("SELECT COUNT(*) FROM allocations a WHERE NOT EXISTS \
           (SELECT 1 FROM resource_providers p WHERE p.id = a.resource_provider_id)")
        .await,
        q("SELECT COUNT(*) FROM allocations a WHERE NOT EXISTS (SELECT 1 FROM consumers c WHERE c.uuid = a.consumer_id)")
            .await,
        q("SELECT COUNT(*) FROM consumers c WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.uuid)")
            .await,
    )
}

/// One provider with room for every claim; returns its uuid.
fn provider(c: &mut Client, name: &str) -> String {
    let rp = uuid();
    let (s, v) = call(
        c,
        "POST",
        "/resource_providers",
        Some(json!({"name": name, "uuid": rp})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(
        c,
        "PUT",
        &format!("/resource_providers/{rp}/inventories"),
        Some(
            json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100000}}}),
        ),
    );
    assert_eq!(s, 200, "{v}");
    rp
}

/// Claimers claim and release on `rp` in a loop while one deleter tries to
/// delete the provider until it goes (once claims are landing); the claims
/// that lose answer with a client error. Returns how many claims were
/// written.
fn delete_under_claims(addr: SocketAddr, rp: &str) -> usize {
    let done = Arc::new(AtomicBool::new(false));
    let landed = Arc::new(AtomicUsize::new(0));
    let claimers: Vec<_> = (0..4)
        .map(|_| {
            let (rp, done, landed) = (rp.to_owned(), done.clone(), landed.clone());
            std::thread::spawn(move || {
                let mut c = client(addr, "1.39");
                let mut written = 0;
                while !done.load(Ordering::Relaxed) {
                    let consumer = uuid();
                    let (s, v) = call(
                        &mut c,
                        "PUT",
                        &format!("/allocations/{consumer}"),
                        Some(json!({"allocations": {&rp: {"resources": {"VCPU": 1}}},
                            "project_id": "p", "user_id": "u", "consumer_generation": null,
                            "consumer_type": "INSTANCE"})),
                    );
                    match s {
                        204 => {
                            written += 1;
                            landed.fetch_add(1, Ordering::Relaxed);
                        }
                        // The provider is gone (or going): a client error.
                        400 | 404 | 409 => continue,
                        _ => panic!("claim: {s} {v}"),
                    }
                    let (s, v) = call(&mut c, "DELETE", &format!("/allocations/{consumer}"), None);
                    assert!(s == 204 || s == 404, "release: {s} {v}");
                }
                written
            })
        })
        .collect();
    let mut c = client(addr, "1.39");
    let deadline = Instant::now() + Duration::from_secs(30);
    while landed.load(Ordering::Relaxed) < 8 {
        assert!(Instant::now() < deadline, "no claim landed");
        std::thread::sleep(Duration::from_millis(1));
    }
    loop {
        let (s, v) = call(&mut c, "DELETE", &format!("/resource_providers/{rp}"), None);
        match s {
            204 => break,
            409 => {}
            _ => panic!("provider delete: {s} {v}"),
        }
        assert!(
            Instant::now() < deadline,
            "the provider was never free to delete"
        );
        std::thread::sleep(Duration::from_micros(300));
    }
    // Let the claimers run into the deleted provider for a moment.
    std::thread::sleep(Duration::from_millis(50));
    done.store(true, Ordering::Relaxed);
    claimers.into_iter().map(|t| t.join().unwrap()).sum()
}

/// A writer replaces a consumer's allocations (before 1.28: no consumer
/// generation sent) while another deletes them, over and over.
fn delete_under_rewrites(addr: SocketAddr, rp: &str) {
    let consumer = uuid();
    let rewriter = {
        let (rp, consumer) = (rp.to_owned(), consumer.clone());
        std::thread::spawn(move || {
            let mut c = client(addr, "1.27");
            for n in 0..150 {
                let (s, v) = call(
                    &mut c,
                    "PUT",
                    &format!("/allocations/{consumer}"),
                    Some(
                        json!({"allocations": {&rp: {"resources": {"VCPU": 1 + n % 3}}},
                        "project_id": "p", "user_id": "u"}),
                    ),
                );
                // A conflict with the delete is a 409 the caller retries.
                assert!(s == 204 || s == 409, "rewrite: {s} {v}");
            }
        })
    };
    let mut c = client(addr, "1.27");
    while !rewriter.is_finished() {
        let (s, v) = call(&mut c, "DELETE", &format!("/allocations/{consumer}"), None);
        assert!(s == 204 || s == 404 || s == 409, "delete: {s} {v}");
    }
    rewriter.join().unwrap();
    let (s, v) = call(&mut c, "DELETE", &format!("/allocations/{consumer}"), None);
    assert!(s == 204 || s == 404, "last delete: {s} {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_allocation_outlives_its_provider_or_consumer_postgres() {
    let Some(db) = testkit::postgres("placement_orphans").await else {
        return;
    };
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 8,
        },
        ..Default::default()
    };
    let running = placement::serve(&cfg, None).await.expect("placement");
    let addr = running.addr;
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    // The first claim creates project, user and consumer type rows; the
    // rest take the one-statement path.
    for round in 0..8 {
        let rp = tokio::task::spawn_blocking(move || {
            let mut c = client(addr, "1.39");
            provider(&mut c, &format!("cn-{round}"))
        })
        .await
        .unwrap();
        let r = rp.clone();
        let written = tokio::task::spawn_blocking(move || delete_under_claims(addr, &r))
            .await
            .unwrap();
        assert!(written >= 8, "round {round}: {written} claims");
        assert_eq!(
            orphans(&pool).await,
            (0, 0, 0),
            "round {round}: provider {rp}"
        );
    }
    let rp =
        tokio::task::spawn_blocking(move || provider(&mut client(addr, "1.39"), "cn-rewrites"))
            .await
            .unwrap();
    tokio::task::spawn_blocking(move || delete_under_rewrites(addr, &rp))
        .await
        .unwrap();
    assert_eq!(
        orphans(&pool).await,
        (0, 0, 0),
        "after rewrites and deletes"
    );
    pool.close().await;
}
