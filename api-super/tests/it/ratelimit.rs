//! Password guessing is slowed per (user, source), without locking the real
//! user out for longer than the configured maximum delay.

use std::net::SocketAddr;
use std::time::Duration;

use api_super::identity::password::Cost;

use crate::common::*;

/// A password check slow enough that logins sent at once overlap it.
const SLOW: Cost = Cost {
    memory_kib: 8192,
    iterations: 3,
};

/// A login as the member with `pw`.
async fn login(a: SocketAddr, pw: &str) -> testkit::http::Response {
    req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("demo", pw, Some("demo"))),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brute_force_is_slowed_not_locked_forever() {
    let env = start("ratelimit", |c| {
        c.rate_limit.free_attempts = 3;
        c.rate_limit.base_delay_ms = 400;
        c.rate_limit.max_delay_ms = 800;
    })
    .await;
    let a = env.addr();
    let attempt = |pw: &'static str| login(a, pw);
    for _ in 0..3 {
        assert_eq!(attempt("guess").await.status, 401);
    }
    // Now even the right password must wait.
    let r = attempt(MEMBER_PW).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    // Guessing on keeps hitting the wall without reaching the hash check.
    for _ in 0..20 {
        assert_eq!(attempt("guess").await.status, 429);
    }
    // Another user is not affected.
    let (_, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    // After the (capped) delay the real user gets in, and the count resets.
    tokio::time::sleep(Duration::from_millis(850)).await;
    assert_eq!(attempt(MEMBER_PW).await.status, 201);
    assert_eq!(attempt("guess").await.status, 401);
    assert_eq!(attempt(MEMBER_PW).await.status, 201);
}

/// 64 wrong passwords sent at once reach argon2 at most `free_attempts`
/// times (attempts are counted before the check; the rest are a 429 with
/// `Retry-After`), and naming the user by id instead of by name does not
/// open a second budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_guesses_reach_the_hash_check_at_most_free_attempts_times() {
    let env = start("ratelimit_parallel", |c| {
        c.rate_limit.free_attempts = 4;
        c.rate_limit.base_delay_ms = 60_000;
        c.rate_limit.max_delay_ms = 60_000;
        c.password_hash = SLOW;
    })
    .await;
    let a = env.addr();
    let before = env.running.identity.password_checks();
    let answers = futures_util::future::join_all((0..64).map(|_| login(a, "guess"))).await;
    let checked = env.running.identity.password_checks() - before;
    assert!(checked <= 4, "{checked} guesses reached argon2");
    let (unauthorized, limited) = answers.iter().fold((0, 0), |(u, l), r| match r.status {
        401 => (u + 1, l),
        429 => {
            assert!(r.header("retry-after").is_some());
            (u, l + 1)
        }
        other => panic!("{other}: {}", r.body),
    });
    assert_eq!(unauthorized as u64, checked);
    assert_eq!(unauthorized + limited, 64);
    // The same user by id: the same budget, spent.
    let demo_id = env
        .running
        .identity
        .db
        .user_by_name("default", "demo")
        .await
        .unwrap()
        .expect("demo")
        .id;
    let by_id = serde_json::json!({"auth": {"identity": {"methods": ["password"],
        "password": {"user": {"id": demo_id, "password": "guess"}}}}});
    let r = req(a, "POST", "/v3/auth/tokens", &[], Some(by_id)).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(env.running.identity.password_checks() - before, checked);
}

/// The password checks under way are bounded: with one allowed and no
/// time to wait for it, logins beyond it get a 503 with `Retry-After`
/// (argon2's memory stays that of one check), and the refused ones do
/// not count as failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_under_way_are_bounded_with_a_503() {
    let env = start("ratelimit_busy", |c| {
        c.rate_limit.free_attempts = 100;
        c.rate_limit.user_free_attempts = 100;
        c.rate_limit.max_concurrent_hashes = 1;
        c.rate_limit.hash_wait_ms = 1;
        c.password_hash = SLOW;
    })
    .await;
    let a = env.addr();
    let answers = futures_util::future::join_all((0..8).map(|_| login(a, MEMBER_PW))).await;
    let busy: Vec<_> = answers.iter().filter(|r| r.status == 503).collect();
    assert!(!busy.is_empty(), "all 8 were checked at once");
    assert!(busy.iter().all(|r| r.header("retry-after").is_some()));
    assert!(answers.iter().all(|r| r.status == 201 || r.status == 503));
    // Nothing counted against the user: the right password still works.
    assert_eq!(login(a, MEMBER_PW).await.status, 201);
}
