//! Tokens: issue, scope, re-scope, validate, revoke, rotation, propagation
//! to a remote validator, and every kind of bad token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::token::{Authenticator, Claims, TokenError, TokenSigner, TokenValidator};
use serde_json::json;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_discovery_and_request_ids() {
    let env = start("version_discovery", |_| {}).await;
    let r = req(env.addr(), "GET", "/", &[], None).await;
    assert_eq!(r.status, 300);
    assert!(r
        .header("x-openstack-request-id")
        .unwrap()
        .starts_with("req-"));
    let v = json(&r);
    assert_eq!(v["versions"]["values"][0]["id"], "v3.14");
    let r = req(env.addr(), "GET", "/v3", &[], None).await;
    assert_eq!(r.status, 200);
    let v = json(&r);
    assert_eq!(v["version"]["status"], "stable");
    assert_eq!(
        v["version"]["links"][0]["href"],
        format!("http://{}/v3/", env.addr())
    );
    let r = req(env.addr(), "GET", "/v3/nothing", &[], None).await;
    assert_eq!(r.status, 404);
    assert_eq!(json(&r)["error"]["code"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_rescope_validate_revoke_catalog() {
    let env = start("scopes", |c| {
        c.endpoints.compute = "http://compute.example:8774/v2.1".into();
    })
    .await;
    let a = env.addr();
    // Project scope by name: roles expanded, catalog complete.
    let (admin, body) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let t = &body["token"];
    assert_eq!(t["project"]["name"], "admin");
    assert_eq!(t["user"]["domain"]["name"], "Default");
    let mut roles: Vec<&str> = t["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    roles.sort();
    assert_eq!(roles, ["admin", "member", "reader"]);
    assert!(t["expires_at"].as_str().unwrap().ends_with('Z'));
    let catalog = t["catalog"].as_array().unwrap();
    let types: Vec<&str> = catalog
        .iter()
        .map(|s| s["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["identity", "compute", "placement", "image"]);
    for s in catalog {
        assert_eq!(s["endpoints"].as_array().unwrap().len(), 3);
        assert_eq!(s["endpoints"][0]["region"], "RegionOne");
    }
    assert_eq!(catalog[0]["endpoints"][0]["url"], format!("http://{a}/v3"));
    assert_eq!(
        catalog[1]["endpoints"][0]["url"],
        "http://compute.example:8774/v2.1"
    );

    // Project scope by id.
    let mut b = password_body("demo", MEMBER_PW, None);
    b["auth"]["scope"] = json!({"project": {"id": env.boot.member.as_ref().unwrap().1}});
    let r = req(a, "POST", "/v3/auth/tokens", &[], Some(b)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(json(&r)["token"]["project"]["name"], "demo");

    // Unscoped, then re-scoped with the token method.
    let (unscoped, body) = token(a, "demo", MEMBER_PW, None).await;
    assert!(body["token"].get("project").is_none());
    assert!(body["token"].get("catalog").is_none());
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(
            json!({"auth": {"identity": {"methods": ["token"], "token": {"id": unscoped}},
            "scope": {"project": {"name": "demo", "domain": {"name": "Default"}}}}}),
        ),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let member = r.header("x-subject-token").unwrap().to_owned();
    let v = json(&r);
    assert_eq!(v["token"]["audit_ids"].as_array().unwrap().len(), 2);
    assert_eq!(v["token"]["project"]["name"], "demo");

    // No scope at all: the default project (bootstrap sets it).
    let mut b = password_body("demo", MEMBER_PW, None);
    b["auth"].as_object_mut().unwrap().remove("scope");
    let r = req(a, "POST", "/v3/auth/tokens", &[], Some(b)).await;
    assert_eq!(json(&r)["token"]["project"]["name"], "demo");

    // Validate and check: admin any token, a user their own only.
    let h = |auth: &str, subject: &str| {
        vec![
            ("x-auth-token".to_owned(), auth.to_owned()),
            ("x-subject-token".to_owned(), subject.to_owned()),
        ]
    };
    let call = |m: &'static str, hs: Vec<(String, String)>| async move {
        let hs2: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        req(a, m, "/v3/auth/tokens", &hs2, None).await
    };
    let r = call("GET", h(&admin, &member)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-subject-token"), Some(member.as_str()));
    assert_eq!(json(&r)["token"]["user"]["name"], "demo");
    assert_eq!(call("GET", h(&member, &member)).await.status, 200);
    assert_eq!(call("HEAD", h(&member, &member)).await.status, 200);
    assert_eq!(call("GET", h(&member, &admin)).await.status, 403);
    assert_eq!(call("GET", h(&admin, "e1.x.y.z")).await.status, 404);

    // The caller's projects and catalog.
    let r = authed(a, &member, "GET", "/v3/auth/projects", None).await;
    let names: Vec<String> = json(&r)["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["demo"]);
    let r = authed(a, &member, "GET", "/v3/auth/catalog", None).await;
    assert_eq!(json(&r)["catalog"].as_array().unwrap().len(), 4);

    // Revoke: the token is refused from then on.
    assert_eq!(call("DELETE", h(&admin, &member)).await.status, 204);
    let r = authed(a, &member, "GET", "/v3/auth/projects", None).await;
    assert_eq!(r.status, 401);
    assert_eq!(json(&r)["error"]["title"], "Unauthorized");
    // The admin's own token is untouched.
    assert_eq!(
        authed(a, &admin, "GET", "/v3/auth/projects", None)
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_revoked_malformed_and_wrongly_scoped_tokens_get_401() {
    let env = start("bad_tokens", |c| c.token.expiration_secs = 1).await;
    let a = env.addr();
    let (good, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let probe =
        |t: String| async move { authed(a, &t, "GET", "/v3/auth/projects", None).await.status };
    assert_eq!(probe(good.clone()).await, 200);

    // Forged: right key id, wrong key; and a tampered payload.
    let (kid, claims) = TokenValidator::decode_unverified(&good).unwrap();
    let forged = TokenSigner::from_seed(kid, &[7; 32]).sign(&claims);
    assert_eq!(probe(forged).await, 401);
    let parts: Vec<&str> = good.split('.').collect();
    let tampered = format!("{}.{}.{}x.{}", parts[0], parts[1], parts[2], parts[3]);
    assert_eq!(probe(tampered).await, 401);
    // Malformed and missing.
    for bad in ["", "garbage", "e1...", "gAAAAABfakefernet", "e1.k.p.s"] {
        assert_eq!(probe(bad.to_owned()).await, 401, "{bad:?}");
    }
    assert_eq!(
        req(a, "GET", "/v3/auth/projects", &[], None).await.status,
        401
    );
    // Revoked.
    let (victim, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    let r = req(
        a,
        "DELETE",
        "/v3/auth/tokens",
        &[("x-auth-token", &good), ("x-subject-token", &victim)],
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(probe(victim).await, 401);
    // Wrongly scoped: a project the user holds no role on.
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("demo", MEMBER_PW, Some("admin"))),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("demo", MEMBER_PW, Some("no-such-project"))),
    )
    .await;
    assert_eq!(r.status, 401);
    // An unscoped token on a service API (the Authenticator services use).
    let (unscoped, _) = token(a, "demo", MEMBER_PW, None).await;
    assert_eq!(
        env.running.identity.validator.authenticate(&unscoped).await,
        Err(TokenError::Unscoped)
    );
    // Expired (lifetime 1 s here).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(probe(good).await, 401);
    // Wrong password: 401 with Keystone's body, no hint which part was wrong.
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("admin", "wrong", Some("admin"))),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        json(&r)["error"]["message"],
        "The request you have made requires authentication."
    );
    let r = req(
        a,
        "POST",
        "/v3/auth/tokens",
        &[],
        Some(password_body("nobody", "wrong", Some("admin"))),
    )
    .await;
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_logs_nobody_out() {
    let env = start("rotation", |_| {}).await;
    let a = env.addr();
    let (old, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let old_kid = TokenValidator::decode_unverified(&old).unwrap().0;
    let new_kid = env.running.identity.rotate_keys().await.unwrap();
    assert_ne!(old_kid, new_kid);
    let (new, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    assert_eq!(TokenValidator::decode_unverified(&new).unwrap().0, new_kid);
    for t in [&old, &new] {
        assert_eq!(
            authed(a, t, "GET", "/v3/auth/projects", None).await.status,
            200
        );
    }
    let keys = json(&req(a, "GET", "/v3/auth/keys", &[], None).await);
    let kids: Vec<&str> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert!(kids.contains(&old_kid.as_str()) && kids.contains(&new_kid.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_reaches_a_remote_validator_within_seconds() {
    let env = start("propagation", |_| {}).await;
    let a = env.addr();
    let remote = Arc::new(TokenValidator::new());
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let poll = remote.spawn_refresh(
        format!("http://{a}/v3"),
        Duration::from_millis(200),
        fabric::token::SharedToken::fixed(admin.clone()),
    );
    let (member, _) = token(a, "demo", MEMBER_PW, Some("demo")).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while remote.validate(&member).is_err() {
        assert!(Instant::now() < deadline, "remote validator never got keys");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c: Claims = remote.authenticate(&member).await.unwrap();
    assert_eq!(
        c.project_id(),
        Some(env.boot.member.as_ref().unwrap().1.as_str())
    );
    let r = req(
        a,
        "DELETE",
        "/v3/auth/tokens",
        &[("x-auth-token", &admin), ("x-subject-token", &member)],
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let revoked_at = Instant::now();
    while remote.validate(&member) != Err(TokenError::Revoked) {
        assert!(
            revoked_at.elapsed() < Duration::from_secs(3),
            "revocation did not propagate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(remote.validate(&admin).is_ok());
    poll.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_projects_users_grants_and_deletes_users() {
    let env = start("admin_api", |_| {}).await;
    let a = env.addr();
    let (admin, _) = token(a, "admin", ADMIN_PW, Some("admin")).await;
    let r = authed(
        a,
        &admin,
        "POST",
        "/v3/projects",
        Some(json!({"project": {"name": "p2", "domain_id": "default"}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let pid = json(&r)["project"]["id"].as_str().unwrap().to_owned();
    let r = authed(
        a,
        &admin,
        "POST",
        "/v3/projects",
        Some(json!({"project": {"name": "p2"}})),
    )
    .await;
    assert_eq!(r.status, 409);
    let r = authed(
        a,
        &admin,
        "POST",
        "/v3/users",
        Some(json!({"user": {"name": "u2", "password": "pw2", "default_project_id": pid}})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let uid = json(&r)["user"]["id"].as_str().unwrap().to_owned();
    assert!(!r.body.contains("pw2") && !r.body.contains("argon2"));
    let roles = json(&authed(a, &admin, "GET", "/v3/roles?name=reader", None).await);
    let reader = roles["roles"][0]["id"].as_str().unwrap().to_owned();
    let path = format!("/v3/projects/{pid}/users/{uid}/roles/{reader}");
    assert_eq!(authed(a, &admin, "PUT", &path, None).await.status, 204);
    assert_eq!(authed(a, &admin, "HEAD", &path, None).await.status, 204);
    let (t, body) = token(a, "u2", "pw2", Some("p2")).await;
    assert_eq!(body["token"]["roles"].as_array().unwrap().len(), 1);
    let r = authed(
        a,
        &admin,
        "GET",
        &format!("/v3/role_assignments?user.id={uid}&include_names=1"),
        None,
    )
    .await;
    let v = json(&r);
    assert_eq!(v["role_assignments"][0]["role"]["name"], "reader");
    assert_eq!(v["role_assignments"][0]["scope"]["project"]["name"], "p2");
    let r = authed(
        a,
        &admin,
        "GET",
        &format!(
            "/v3/role_assignments?user.id={}&effective",
            env.boot.admin_user_id
        ),
        None,
    )
    .await;
    assert_eq!(json(&r)["role_assignments"].as_array().unwrap().len(), 3);
    // Deleting the user revokes their tokens.
    assert_eq!(
        authed(a, &admin, "DELETE", &format!("/v3/users/{uid}"), None)
            .await
            .status,
        204
    );
    assert_eq!(
        authed(a, &t, "GET", "/v3/auth/projects", None).await.status,
        401
    );
    assert_eq!(
        authed(a, &admin, "GET", &format!("/v3/users/{uid}"), None)
            .await
            .status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backend_issues_and_validates() {
    let Some(pg) = testkit::postgres("identity_postgres_backend").await else {
        return;
    };
    let env = start_on(&pg.url, |_| {}).await;
    let (t, _) = token(env.addr(), "admin", ADMIN_PW, Some("admin")).await;
    let r = authed(env.addr(), &t, "GET", "/v3/projects", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(json(&r)["projects"].as_array().unwrap().len(), 2);
    // A second process on the same database sees the same keys and users.
    let env2 = start_on(&pg.url, |_| {}).await;
    assert_eq!(
        authed(env2.addr(), &t, "GET", "/v3/auth/projects", None)
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_keys_are_sealed_at_rest_and_clear_ones_are_sealed_at_start() {
    use api_super::identity::keyseal::{kek_path, Sealer};
    use sqlx::Connection;
    let db = testkit::sqlite("sealed_keys");
    let env = start_on(&db.url, |_| {}).await;
    let (member, _) = token(env.addr(), "demo", MEMBER_PW, Some("demo")).await;
    let read = || async {
        let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT kid, private_seed FROM identity_signing_keys")
                .fetch_all(&mut c)
                .await
                .unwrap();
        rows
    };
    let rows = read().await;
    assert_eq!(rows.len(), 1);
    let (kid, stored) = rows[0].clone();
    assert!(stored.starts_with("enc1."), "sealed: {stored}");
    // The key file is beside the database, 0600.
    let kek = kek_path("", &db.url).unwrap();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&kek).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // As an earlier version stored it: in the clear.
    let (seed, _) = Sealer::open(&kek)
        .unwrap()
        .open_seed(&kid, &stored)
        .unwrap();
    drop(env);
    {
        use base64::Engine;
        let clear = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(seed);
        let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query("UPDATE identity_signing_keys SET private_seed = $1 WHERE kid = $2")
            .bind(&clear)
            .bind(&kid)
            .execute(&mut c)
            .await
            .unwrap();
    }
    // Started again: sealed again, the same key (its tokens still hold).
    let env = start_on(&db.url, |_| {}).await;
    let rows = read().await;
    assert_eq!(rows[0].0, kid);
    assert!(
        rows[0].1.starts_with("enc1.") && rows[0].1 != stored,
        "{rows:?}"
    );
    assert!(env.running.identity.validator.validate(&member).is_ok());
    // Another key file cannot open it: the start fails, saying why.
    drop(env);
    let other = testkit::temp_dir("sealed_keys_other").join("other.kek");
    let mut cfg = api_super::identity::IdentityConfig {
        listen: "127.0.0.1:0".into(),
        ..Default::default()
    };
    cfg.database.connection = db.url.clone();
    cfg.token.key_file = other.display().to_string();
    cfg.password_hash = api_super::identity::password::Cost::TEST;
    let e = api_super::identity::Identity::open(cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("another key file"), "{e}");
}
