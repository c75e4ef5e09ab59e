//! `PgStash`: a connection kept after a completed statement serves the next
//! one (the same server backend, no trip through the pool); one dropped
//! without `keep` (an error, a cancelled statement) is not reused from the
//! stash; at most half the pool is kept, nothing while the pool is
//! saturated; kept connections idle past the
//! ping threshold are handed back to the pool by the sweep.

use std::time::Duration;

use migrations::PgStash;

async fn backend_pid(stash: &PgStash) -> (i32, migrations::Stashed<'_>) {
    let mut c = stash.conn().await.expect("a connection");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(c.get())
        .await
        .expect("pid");
    (pid, c)
}

#[tokio::test]
async fn kept_connections_serve_the_next_statement_and_only_completed_ones_are_kept() {
    let Some(db) = testkit::postgres("migrations_stash").await else {
        return;
    };
    let pool = migrations::open_pg(&db.url, 8).await.expect("pool");
    let stash = PgStash::new(pool);

    // Kept after a completed statement: the next statement runs on it.
    let (first, c) = backend_pid(&stash).await;
    c.keep();
    assert_eq!(stash.kept(), 1);
    let (again, c) = backend_pid(&stash).await;
    assert_eq!(
        again, first,
        "the kept connection serves the next statement"
    );
    assert_eq!(stash.kept(), 0, "taken out while in use");

    // Dropped without keep (as after an error): not back in the stash.
    drop(c);
    assert_eq!(stash.kept(), 0);

    // A statement cancelled mid-way: its connection is not kept either, and
    // the stash keeps working.
    let cancelled = tokio::time::timeout(Duration::from_millis(50), async {
        let mut c = stash.conn().await.expect("a connection");
        sqlx::query("SELECT pg_sleep(5)")
            .execute(c.get())
            .await
            .expect("sleep");
        c.keep();
    })
    .await;
    assert!(cancelled.is_err(), "the sleep was cut short");
    assert_eq!(stash.kept(), 0);
    let (_, c) = backend_pid(&stash).await;
    c.keep();
    assert_eq!(stash.kept(), 1);

    // At most half the pool (8 → 4) is kept.
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(backend_pid(&stash).await);
    }
    assert_ne!(held[0].0, held[1].0);
    for (_, c) in held {
        c.keep();
    }
    assert_eq!(stash.kept(), 4);

    // A saturated pool (every connection open and in use): a completed
    // statement's connection goes back to the pool, with the kept ones,
    // for whoever waits.
    let small = PgStash::new(migrations::open_pg(&db.url, 2).await.expect("small pool"));
    let (_, kept_before) = backend_pid(&small).await;
    kept_before.keep();
    assert_eq!(small.kept(), 1);
    let (a, b) = (backend_pid(&small).await, backend_pid(&small).await);
    assert_eq!(small.kept(), 0);
    a.1.keep();
    assert_eq!(small.kept(), 0, "not kept while the pool is saturated");
    drop(b);
    small.close().await;

    // Idle past the ping threshold: the sweep hands them back to the pool.
    tokio::time::sleep(migrations::PG_PING_AFTER_IDLE * 2 + Duration::from_millis(200)).await;
    assert_eq!(stash.kept(), 0, "stale connections went back to the pool");
    let (_, c) = backend_pid(&stash).await;
    c.keep();
    assert_eq!(stash.kept(), 1);
    // Closing hands the kept connections back (else the pool's close would
    // wait for them forever).
    tokio::time::timeout(Duration::from_secs(10), stash.close())
        .await
        .expect("the close ends");
    assert!(stash.pool().is_closed());
}
