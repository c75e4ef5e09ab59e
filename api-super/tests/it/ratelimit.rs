//! Password guessing is slowed per (user, source), without locking the real
//! user out for longer than the configured maximum delay.

use std::time::Duration;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brute_force_is_slowed_not_locked_forever() {
    let env = start("ratelimit", |c| {
        c.rate_limit.free_attempts = 3;
        c.rate_limit.base_delay_ms = 400;
        c.rate_limit.max_delay_ms = 800;
    })
    .await;
    let a = env.addr();
    let attempt = |pw: &'static str| async move {
        req(
            a,
            "POST",
            "/v3/auth/tokens",
            &[],
            Some(password_body("demo", pw, Some("demo"))),
        )
        .await
    };
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
