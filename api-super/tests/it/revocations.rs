//! Revocation beyond single tokens: a grant removed, a project deleted or
//! a user disabled reaches a remote (polling) validator, as placement's,
//! within its poll interval; single-token revocations stay bounded per
//! user; `PATCH /v3/users/{id}` refuses what it cannot do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::token::{TokenError, TokenValidator};
use serde_json::{json, Value};

use crate::common::*;

/// The poll interval of the remote validator in these tests.
const POLL: Duration = Duration::from_millis(200);

/// Waits until `remote` refuses `token` as revoked; panics after a few
/// polls.
async fn until_revoked(remote: &TokenValidator, token: &str, what: &str) {
    let since = Instant::now();
    while remote.validate(token) != Err(TokenError::Revoked) {
        assert!(
            since.elapsed() < POLL * 15,
            "{what}: the remote validator still takes the token"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_removal_and_project_deletion_reach_a_polling_validator() {
    let env = start("revocation_remote", |_| {}).await;
    let a = env.addr();
    let remote = Arc::new(TokenValidator::new());
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    // The list names users and projects: a token of the service role (or
    // an admin's) reads it, a member's or none does not.
    let r = req(a, "GET", "/v3/auth/revocations", &[], None).await;
    assert_eq!(r.status, 401, "{}", r.body);
    let r = authed(a, &member, "GET", "/v3/auth/revocations", None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let poll = remote.spawn_refresh(
        format!("http://{a}/v3"),
        POLL,
        fabric::token::SharedToken::fixed(admin.clone()),
    );
    let since = Instant::now();
    while remote.validate(&member).is_err() {
        assert!(since.elapsed() < Duration::from_secs(5), "no keys");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (user, project) = env.boot.member.clone().unwrap();
    let role = env
        .boot
        .roles
        .iter()
        .find(|(n, _)| n == "member")
        .unwrap()
        .1
        .clone();
    let grant = format!("/v3/projects/{project}/users/{user}/roles/{role}");
    let r = authed(a, &admin, "DELETE", &grant, None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    until_revoked(&remote, &member, "grant removed").await;
    assert!(remote.validate(&admin).is_ok(), "the admin is untouched");
    // Removing it again is a 404 and revokes nothing more.
    let r = authed(a, &admin, "DELETE", &grant, None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Granted again, then the project deleted.
    let r = authed(a, &admin, "PUT", &grant, None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (fresh, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    let since = Instant::now();
    while remote.validate(&fresh).is_err() {
        assert!(since.elapsed() < POLL * 15, "the new token is refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = authed(
        a,
        &admin,
        "DELETE",
        &format!("/v3/projects/{project}"),
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    until_revoked(&remote, &fresh, "project deleted").await;
    // The published list holds one mark per key, not one per event.
    let r = authed(a, &admin, "GET", "/v3/auth/revocations", None).await;
    let events = json(&r)["revocations"].as_array().unwrap().clone();
    let grants = events
        .iter()
        .filter(|e| e["user_id"] == json!(user) && e["project_id"] == json!(project))
        .count();
    assert_eq!(grants, 1, "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["project_id"] == json!(project) && e.get("user_id").is_none()),
        "{events:?}"
    );
    poll.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_token_revocations_are_bounded_per_user() {
    let env = start("revocation_bound", |c| {
        c.token.max_token_revocations_per_user = 3
    })
    .await;
    let a = env.addr();
    let mut tokens = Vec::new();
    for _ in 0..5 {
        tokens.push(token(a, "demo", MEMBER_PW, Some("demo")).await.0);
    }
    let revoke = |t: String| async move {
        req(
            a,
            "DELETE",
            "/v3/auth/tokens",
            &[("x-auth-token", &t), ("x-subject-token", &t)],
            None,
        )
        .await
        .status
    };
    for t in &tokens[..3] {
        assert_eq!(revoke(t.clone()).await, 204);
    }
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let list = || async {
        let r = authed(a, &admin, "GET", "/v3/auth/revocations", None).await;
        json(&r)["revocations"].as_array().unwrap().clone()
    };
    let singles = |l: &[Value]| l.iter().filter(|e| e.get("audit_id").is_some()).count();
    assert_eq!(singles(&list().await), 3);
    let v = &env.running.identity.validator;
    assert!(v.validate(&tokens[4]).is_ok(), "not revoked yet");
    // The fourth: all the user's tokens instead, and the single marks go.
    assert_eq!(revoke(tokens[3].clone()).await, 204);
    let l = list().await;
    assert_eq!(singles(&l), 0, "{l:?}");
    let (user, _) = env.boot.member.clone().unwrap();
    assert!(
        l.iter()
            .any(|e| e["user_id"] == json!(user) && e.get("project_id").is_none()),
        "{l:?}"
    );
    for t in &tokens {
        assert_eq!(v.validate(t), Err(TokenError::Revoked));
    }
    // A later login works.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (later, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    assert!(v.validate(&later).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_a_user_checks_its_input_and_a_new_password_revokes() {
    let env = start("user_update", |_| {}).await;
    let a = env.addr();
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    let (user, _) = env.boot.member.clone().unwrap();
    let path = format!("/v3/users/{user}");
    for (body, status, says) in [
        (json!({"user": {"email": "x@example.org"}}), 400, "'email'"),
        (json!({"user": {"enabled": "no"}}), 400, "enabled"),
        (json!({"user": {"name": ""}}), 400, "name"),
        (json!({"user": {"default_project_id": "nope"}}), 404, "nope"),
        (json!({"nouser": {}}), 400, "'user'"),
    ] {
        let r = authed(a, &admin, "PATCH", &path, Some(body.clone())).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert!(r.body.contains(says), "{body}: {}", r.body);
    }
    let r = authed(
        a,
        &admin,
        "PATCH",
        "/v3/users/nope",
        Some(json!({"user": {"enabled": false}})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // A member may not update users, not even itself.
    let r = authed(
        a,
        &member,
        "PATCH",
        &path,
        Some(json!({"user": {"enabled": false}})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let v = &env.running.identity.validator;
    assert!(v.validate(&member).is_ok(), "nothing changed");
    // A new password: old tokens revoked, the old password refused.
    let r = authed(
        a,
        &admin,
        "PATCH",
        &path,
        Some(json!({"user": {"password": "new-secret"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(v.validate(&member), Err(TokenError::Revoked));
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("demo", MEMBER_PW, Some("demo"))),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (t, _) = token(a, "demo", "new-secret", Some("demo")).await;
    assert!(v.validate(&t).is_ok());
}

fn etag(r: &testkit::http::Response) -> String {
    r.headers
        .iter()
        .find(|(k, _)| k == "etag")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no ETag: {:?}", r.headers))
}

/// The key and revocation documents are conditional: a poller that sends
/// the tag it holds gets 304 and no body until the document changes, then
/// the new document with a new tag. Reading still needs the service role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polled_documents_are_sent_only_when_they_change() {
    let env = start("revocation_etags", |_| {}).await;
    let a = env.addr();
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;

    let keys = req(a, "GET", "/v3/auth/keys", &[], None).await;
    assert_eq!(keys.status, 200, "{}", keys.body);
    let tag = etag(&keys);
    let again = req(a, "GET", "/v3/auth/keys", &[("if-none-match", &tag)], None).await;
    assert_eq!((again.status, again.body.as_str()), (304, ""));
    assert_eq!(etag(&again), tag);
    let other = req(
        a,
        "GET",
        "/v3/auth/keys",
        &[("if-none-match", "\"stale\"")],
        None,
    )
    .await;
    assert_eq!(other.status, 200);

    let first = authed(a, &admin, "GET", "/v3/auth/revocations", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let tag = etag(&first);
    let cond = |t: String| {
        let admin = admin.clone();
        async move {
            req(
                a,
                "GET",
                "/v3/auth/revocations",
                &[("x-auth-token", &admin), ("if-none-match", &t)],
                None,
            )
            .await
        }
    };
    let r = cond(tag.clone()).await;
    assert_eq!((r.status, r.body.as_str()), (304, ""));
    // The tag does not let anyone skip the token check.
    let r = req(
        a,
        "GET",
        "/v3/auth/revocations",
        &[("if-none-match", &tag)],
        None,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);

    // A revocation changes the document: the old tag gets the new list.
    let r = req(
        a,
        "DELETE",
        "/v3/auth/tokens",
        &[("x-auth-token", &member), ("x-subject-token", &member)],
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let since = Instant::now();
    let changed = loop {
        let r = cond(tag.clone()).await;
        if r.status == 200 {
            break r;
        }
        assert_eq!(r.status, 304, "{}", r.body);
        assert!(since.elapsed() < Duration::from_secs(10), "never changed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(etag(&changed), tag);
    assert_eq!(
        json(&changed)["revocations"].as_array().unwrap().len(),
        1,
        "{}",
        changed.body
    );
    let r = cond(etag(&changed)).await;
    assert_eq!(r.status, 304);
}
